// pymtp: the adaptive controller's cost model (see mtp-adaptive-cost.h).

#include "mtp-adaptive-cost.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace mtp {

double cost_model::sample_value(int32_t l, int32_t j) const {
    // a size never decoded twice in a row has only changed-size samples: less the change's cost S once that
    // is measured (a changed-size sample carries the change), but at least CHANGED_MIN of itself
    const running_mean & t = target[l - 1][j - 1];
    return steady_seen[l - 1][j - 1] ? t.v : std::max(CHANGED_MIN * t.v, t.v - std::max(0.0, switching.v));
}

double cost_model::target_cost(int32_t n) const {
    const int32_t l   = std::clamp(load, 1, LOADS);
    const auto &  row = target[l - 1];
    n                 = std::clamp(n, 1, K + 1);
    // a verify size decoded only once has only its first, cold sample (a GPU backend builds and captures a
    // graph for each new size): it stands in only while no size has a warm sample (a plain step's stands:
    // plain steps are what the controller compares with, and they come when drafting loses)
    bool warm         = false;
    for (int32_t j = 1; j <= K + 1; ++j) {
        warm = warm || row[j - 1].n >= WARM;
    }
    if (row[n - 1].n >= (warm && n >= 2 ? WARM : 1)) {
        return sample_value(l, n) / l + sampling.v * n;
    }
    const double t1 = row[0].n >= 1 ? sample_value(l, 1) : 0.0;
    const double t  = fitted_cost(l, n, warm);
    // a verify costs at least a plain step where that is known steady (changed-size plain steps carry
    // what the drafting step before left unfinished)
    return (n == 1 || !steady_seen[l - 1][0] ? t : std::max(t, t1)) / l + sampling.v * n;
}

double cost_model::fitted_cost(int32_t l, int32_t n, bool warm) const {
    const auto & row    = target[l - 1];
    const bool * steady = steady_seen[l - 1];
    auto         known  = [&](int32_t j) { return row[j - 1].n >= (warm && j >= 2 ? WARM : 1); };
    // verify sizes (n >= 2) grow about linearly: a line through the measured ones, weighted by how often
    // each was measured (a steady size counts more); a plain step (n = 1) often sits below that line (a
    // mat-vec instead of a matmul)
    line_fit     fit;
    for (int32_t j = 2; j <= K + 1; ++j) {
        if (known(j)) {
            fit.add(j, sample_value(l, j),
                    (double) std::min<int64_t>(row[j - 1].n, FIT_SAMPLES) * (steady[j - 1] ? FIT_STEADY : 1.0));
        }
    }
    const int32_t n_sizes = fit.points, only = fit.last;
    const double  t1 = known(1) ? sample_value(l, 1) : 0.0;
    if (n >= 2 && n_sizes >= 2) {
        return fit.at(n);
    }
    if (n >= 2 && n_sizes == 1) {
        // from one verify size: the slope to a steady plain step, else the prior's
        const double y = sample_value(l, only);
        const double slope =
            t1 > 0.0 && steady[0] ? std::max(0.0, (y - t1) / (only - 1)) : PRIOR_DV * y / (1.0 + PRIOR_DV * (only - 1));
        return y + slope * (n - only);
    }
    if (t1 > 0.0) {
        return t1 * (1.0 + PRIOR_DV * (n - 1));
    }
    if (n_sizes > 0) { // n == 1 unmeasured
        return sample_value(l, only) / (1.0 + PRIOR_DV * (only - 1));
    }
    return 0.0;
}

double cost_model::split_floor() const {
    const int32_t l = std::clamp(load, 1, LOADS);
    if (!splits || l < 2 || !steady_seen[l - 1][0] || target[l - 1][0].n < 1) {
        return 0.0;
    }
    const double share = target[l - 1][0].v / l; // this sequence's share of the plain batch
    const auto & alone = target[0][0];           // a one-row decode, where this sequence ran alone
    const double one   = steady_seen[0][0] || alone.n >= WARM ? alone.v : 0.0;
    return share + std::max(one, share) + sampling.v * 2; // the least verify: two rows sampled
}

double cost_model::steady_cost(int32_t n) const {
    const int32_t l      = std::clamp(load, 1, LOADS);
    const auto &  row    = target[l - 1];
    const bool *  steady = steady_seen[l - 1];
    if (n < 2 || n > K + 1 || !steady[0] || row[0].n < 1) {
        return 0.0;
    }
    if (steady[n - 1]) {
        return row[n - 1].v;
    }
    // a line through the steady verify sizes (two or more), else from the steady plain step to the one
    // steady verify size, else the prior's slope from the plain step
    const double t1 = row[0].v;
    line_fit     fit;
    for (int32_t j = 2; j <= K + 1; ++j) {
        if (steady[j - 1] && row[j - 1].n >= 1) {
            fit.add(j, row[j - 1].v);
        }
    }
    if (fit.points >= 2) {
        return std::max(t1, fit.at(n));
    }
    if (fit.points == 1) {
        const double y = row[fit.last - 1].v;
        return std::max(t1, y + std::max(0.0, (y - t1) / (fit.last - 1)) * (n - fit.last));
    }
    return t1 * (1.0 + PRIOR_DV * (n - 1));
}

bool cost_model::plain_unknown() const {
    const int32_t l = std::clamp(load, 1, LOADS);
    return target_cost(1) <= 0.0 || (l >= 2 && (!steady_seen[l - 1][0] || target[l - 1][0].n < MEASURED));
}

double cost_model::draft_cost() const {
    return drafts().n > 0 ? drafts().v : PRIOR_D * plain_batch_cost();
}

double cost_model::pass_cost(int32_t n) const {
    n = std::clamp(n, 1, K);
    for (int32_t d = 0; d < K; ++d) { // the size itself, then the nearest timed one (the smaller first)
        for (const int32_t m : { n - d, n + d }) {
            if (m >= 1 && m <= K && pass_d[m - 1].n > 0) {
                return pass_d[m - 1].v;
            }
        }
    }
    return draft_cost();
}

double cost_model::step_draft_time(int32_t k) const {
    if (par <= 1 || k <= 0) {
        return draft_time(k);
    }
    return (k / par) * pass_cost(par) + (k % par > 0 ? pass_cost(k % par) : 0.0);
}

double cost_model::switch_cost(int32_t n) const {
    return n_prev[0] != 0 && n != n_prev[0] ? CHANGE_DECODES * std::max(0.0, switching.v) / DWELL : 0.0;
}

double cost_model::step_ms(int32_t k, double accept0) const {
    if (k <= 0) {
        return target_cost(1) + overhead.v;
    }
    const double w = catchup.n > 0 ? catchup.v : 0.0;
    return overhead.v + step_draft_time(k) + target_cost(k + 1) + w * accept0;
}

void cost_model::learn_target(bool on, int32_t n, int32_t n_load, double ms) {
    if (!on || pinned || n < 1 || n > K + 1 || n_load < 1 || !(ms > 0.0)) {
        return;
    }
    load              = std::min(n_load, LOADS);
    const bool steady = n == n_prev[0] && n == n_prev[1];
    if (warm_target(n, n == n_prev[0])) {
        add_target(n, ms, steady);
    }
    n_prev[1] = n_prev[0];
    n_prev[0] = n;
}

bool cost_model::warm_target(int32_t n, bool repeat) {
    bool &     met  = size_met[load - 1][n - 1];
    bool &     held = size_held[load - 1][n - 1];
    // a new engine or one just woken (its first decodes build graphs, warm caches), or a decode that
    // builds or captures this size's graphs: untimed
    const bool cold = cold_targets > 0 || step_gen || (graphs && (!met || (repeat && !held)));
    held            = held || (met && repeat);
    met             = true;
    if (cold) {
        step_cold    = true;
        cold_targets = std::max(0, cold_targets - 1);
    }
    return !cold;
}

void cost_model::add_target(int32_t n, double ms, bool steady) {
    // T(n) is what a decode of n costs where the size stays (a fixed length, a block); a decode whose size
    // just changed is timed apart: its excess over T(n) is S (taken into T(n), it would hide S where sizes
    // change every step)
    auto & t    = target[load - 1][n - 1];
    bool & seen = steady_seen[load - 1][n - 1];
    if (steady) {
        if (!seen) {
            seen = true;
            t    = running_mean{}; // the changed-size samples that stood in for it go
        }
        add_capped(t, ms);
    } else if (!seen) {
        add_capped(t, ms); // no steady decode of n yet: these stand in
        // On a GPU, where no size runs steady (the verify size changes every step), such a decode is also a
        // sample of S against the steady cost extrapolated from the sizes that did run steady, where it exceeds
        // that by more than a plain step (less: a dear first verify row, not a change)
        const double base = graphs ? steady_cost(n) : 0.0;
        if (base > 0.0 && ms - base > target[load - 1][0].v) {
            switching.add(ms - base);
        }
    } else if (t.n >= WARM) {
        switching.add(ms - t.v); // signed: noise averages out
        // less the change's cost, these follow drift too (a size may run steady only now and then), but only
        // where that leaves a decode cost near T(n): S is a mean over changes that cost far more or far less
        // than it (on a GPU a change to an uncaptured size is dear, a return to a captured graph cheap)
        const double x = ms - std::max(0.0, switching.v);
        if (x >= DRIFT_LOW * t.v && x <= DRIFT_HIGH * t.v) {
            add_capped(t, x);
        }
    } else if (!graphs) {
        // a single steady sample: this one replaces it (running_mean). Not on a GPU, where a changed-size
        // decode carries re-captured graphs
        add_capped(t, ms);
    }
}

void cost_model::learn_batch(bool on, int32_t own, int32_t n_seqs, int32_t n_tokens, double ms) {
    if (n_seqs < 2 || own * n_seqs == n_tokens) {
        learn_target(on, own, n_seqs, ms); // one sequence, or every one with as many rows: a batch of that size
        return;
    }
    if (on) {
        load = std::min(n_seqs, LOADS);
    }
    // Sequences with different row counts. A plain one among drafting ones learns nothing (the batch's
    // extra rows are theirs). A drafting one is charged what the decode cost beyond a plain batch, as if
    // every sequence had drafted as it did: what it costs the batch, which every sequence waits for.
    const int32_t l  = std::clamp(n_seqs, 1, LOADS);
    const double  tb = target_cost(1) > 0.0 && steady_seen[l - 1][0] ? target[l - 1][0].v : 0.0;
    if (own > 1 && tb > 0.0) {
        learn_target(on, own, n_seqs, tb + n_seqs * std::max(0.0, ms - tb));
    }
}

void cost_model::learn_catchup(bool on, int32_t n, double ms) {
    bool & met = catchup_met[std::clamp(n, 1, K + 1) - 1];
    if (step_gen) {
        return;
    }
    if (cold_catchups > 0 || (graphs && !met)) {
        step_cold     = true;
        cold_catchups = std::max(0, cold_catchups - 1);
        met           = true;
        return;
    }
    if (on && !pinned) {
        add_capped(catchup, ms);
    }
}

void cost_model::learn_draft(bool on, double ms, int32_t rows) {
    if (step_gen) {
        return;
    }
    if (rows > 0 && !pass_warm(rows)) {
        step_cold = true;
        return;
    }
    if (cold_drafts > 0) {
        step_cold = true;
        cold_drafts--; // the MTP context's KV restarted, its graphs are new
        return;
    }
    if (draft_group && draft_group->cold > 0) { // the group's context is new
        step_cold = true;
        draft_group->cold--;
        return;
    }
    if (on && !pinned) {
        add_capped(drafts(), ms);
        if (rows > 0) {
            add_capped(pass_d[std::min(rows, K) - 1], ms);
        }
    }
}

bool cost_model::pass_warm(int32_t rows) {
    const int32_t i    = std::min(rows, K) - 1;
    const bool    held = rows == pass_prev;
    pass_prev          = rows;
    if (!graphs || (pass_met[i] && (!held || pass_held[i]))) {
        return true;
    }
    (pass_met[i] ? pass_held[i] : pass_met[i]) = true;
    return false;
}

void cost_model::restart_cold() {
    cold_drafts   = COLD_DRAFTS;
    cold_targets  = COLD_TARGETS;
    cold_catchups = COLD_DRAFTS;
    // each pass size's first pass and first repeat go untimed again
    std::fill(std::begin(pass_met), std::end(pass_met), false);
    std::fill(std::begin(pass_held), std::end(pass_held), false);
}

void cost_model::prime(const double * t_ms, int32_t n_sizes, double d_ms, double s_ms) {
    if (pinned) {
        return;
    }
    for (int32_t n = 1; n <= std::min(n_sizes, K + 1); ++n) {
        if (t_ms[n - 1] > 0.0) {
            target[0][n - 1]      = running_mean{ t_ms[n - 1], PRIOR_N };
            steady_seen[0][n - 1] = true;
            size_met[0][n - 1]    = true; // its graphs were built and captured at load
            size_held[0][n - 1]   = true;
        }
    }
    primed = n_sizes >= 2 && t_ms[0] > 0.0;
    if (d_ms > 0.0) {
        draft_own = running_mean{ d_ms, PRIOR_N };
    }
    if (s_ms >= 0.0) {
        switching = running_mean{ s_ms, PRIOR_N };
    }
}

void cost_model::pin(double plain_ms, double draft_ms, double verify_extra_ms) {
    for (auto & row : target) {
        for (auto & t : row) {
            t = running_mean{};
        }
    }
    for (auto & row : steady_seen) {
        std::fill(std::begin(row), std::end(row), false);
    }
    draft_own = running_mean{};
    draft_group.reset(); // pinned or relearned: this engine's own again
    for (auto & p : pass_d) {
        p = running_mean{}; // pinned: every pass size costs the pinned D (pass_cost's fallback)
    }
    catchup  = running_mean{};
    sampling = running_mean{};
    pinned   = plain_ms > 0.0;
    if (!pinned) {
        return;
    }
    for (int32_t n = 1; n <= K + 1; ++n) {
        target[0][n - 1]      = running_mean{ plain_ms + verify_extra_ms * (n - 1), 1000 };
        steady_seen[0][n - 1] = true;
    }
    draft_own = running_mean{ draft_ms, 1000 };
    load      = 1;
}

} // namespace mtp
