// pymtp: the adaptive controller's supervisor (see mtp-adaptive-supervisor.h).

#include "mtp-adaptive-supervisor.h"

#include <algorithm>
#include <cmath>

namespace mtp {

bool supervisor::plain_turn(double gap, int64_t plain_timed) {
    plain_run = 0;
    const double cap =
        PROBE_EVERY * std::pow(PROBE_GROWTH, (double) std::min<int64_t>(plain_timed, cost_model::MEASURED));
    if (++draft_run >= std::min(cap, PROBE_EVERY * std::pow(gap, PROBE_POW))) {
        draft_run = 0;
        return true;
    }
    return false;
}

bool supervisor::probe_turn(bool can, double gap, int64_t drafts_timed) {
    draft_run = 0;
    const double cap =
        PROBE_EVERY * std::pow(PROBE_GROWTH, (double) std::min<int64_t>(drafts_timed, cost_model::MEASURED));
    const double period = std::min(cap, PROBE_EVERY * std::pow(gap, PROBE_POW));
    const bool   woke   = wake_due();
    if (can && (++plain_run >= period || woke)) {
        plain_run = 0;
        return true;
    }
    return false;
}

bool supervisor::hopeless(const step_model & m, int32_t k_cap) const {
    const cost_model & c = m.cost;
    const int32_t      l = std::clamp(c.load, 1, cost_model::LOADS);
    if (!cutoff || c.drafts().n < cost_model::MEASURED || !c.steady_seen[l - 1][0] ||
        c.target[l - 1][0].n < cost_model::MEASURED || c.target_cost(1) <= 0.0) {
        return false;
    }
    double verify = c.target_cost(1); // the cheapest verify: a steady one measured at this load, else a plain step
    double least  = 0.0;
    for (int32_t n = 2; n <= cost_model::K + 1; ++n) {
        if (c.steady_seen[l - 1][n - 1] && c.target[l - 1][n - 1].n >= cost_model::WARM) {
            least = least > 0.0 ? std::min(least, c.target_cost(n)) : c.target_cost(n);
        }
    }
    verify             = std::max({ verify, least, c.split_floor() });
    const double plain = m.ratio(0);
    for (int32_t k = 1; k <= k_cap; ++k) {
        if ((k + 1) / (c.overhead.v + c.step_draft_time(k) + verify) > plain) {
            return false;
        }
    }
    return true;
}

bool supervisor::block_loses(const step_model & m, int32_t k_cap, int32_t k, int32_t age) const {
    return (age > BLK_TRY && m.ratio(k) < m.ratio(0)) || hopeless(m, k_cap);
}

bool supervisor::window_step(int32_t n_tok, double ms, bool cold, bool drafted) {
    if (window_left <= 0) { // the first window decides freely
        window_left = WINDOW;
        window_tok = window_ms = 0.0;
        window_drafts          = 0;
    }
    if (!cold) {
        window_tok += n_tok;
        window_ms += ms;
    }
    window_drafts += drafted ? 1 : 0;
    if (--window_left != 0) {
        return false;
    }
    // each policy's first window is cold (graphs built and captured for new sizes, costs and acceptance
    // not learned yet) and would weigh on its rate for many windows: it only opens the measurements
    int64_t & seen = window_plain ? n_plain_windows : n_free_windows;
    if (seen++ > 0) {
        // a check window (every CHECK-th, the policy behind) weighs more: one that finds the other
        // policy ahead again ends its lead without waiting for many more checks
        const double keep = window_check ? CHECK_KEEP : WIN_KEEP;
        (window_plain ? real_plain : real_draft).add(window_tok, window_ms, keep);
        if (!window_plain) {
            real_share.add(window_drafts, WINDOW, keep); // how much of the free windows drafted
        }
    }
    window_tok = window_ms = 0.0;
    window_drafts          = 0;
    return true;
}

void supervisor::open_window(const step_model & m, bool blocks) {
    n_windows++;
    window_left = WINDOW;
    if (window_check && !window_plain) { // a free check window ended: did drafting catch up?
        n_failed_checks = vetoed(m) ? n_failed_checks + 1 : 0;
    }
    window_check = false;
    if (blocks) {
        window_plain = false;
        return;
    }
    // free windows first (the first one cold); where they run clearly above the model's plain rate,
    // drafting wins by a margin no plain window needs to confirm, and none runs
    if (real_draft.n <= 0.0 || clear(m)) {
        window_plain = false;
        return;
    }
    if (real_plain.n <= 0.0) { // then plain ones (the first one cold)
        window_plain = true;
        return;
    }
    // the policy that leads, the other one every CHECK-th window; while free windows keep failing their
    // checks, they come every 2nd, then 4th CHECK-th window (each one costs while drafting loses). A veto
    // that rests on one measured free window is checked by the next window: that window held the start
    // (acceptance not learned yet, the first decodes of each verify size). Where drafting does lose, the
    // extra free window costs one window's loss once.
    const bool    lagging = vetoed(m);
    const bool    one     = n_free_windows <= 2; // the cold first one and one measured
    const int64_t period  = !lagging ? CHECK : one ? 1 : (int64_t) CHECK << std::min(n_failed_checks, CHECKS_RARE);
    window_check          = n_windows % period == 0;
    window_plain          = lagging != window_check;
}

bool supervisor::vetoed(const step_model & m) const {
    return !clear(m) && real_plain.n > 0.0 && real_draft.n > 0.0 && real_share.get() >= VETO_SHARE &&
           real_draft.get() < VETO * real_plain.get();
}

bool supervisor::clear(const step_model & m) const {
    const double r0 = std::max(m.ratio(0), real_plain.n > 0.0 ? real_plain.get() : 0.0);
    return real_draft.n > 0.0 && r0 > 0.0 && real_draft.get() >= CLEAR * r0;
}

void supervisor::forget_windows() {
    real_plain      = realized_rate{};
    real_draft      = realized_rate{};
    window_plain    = false;
    window_check    = false;
    window_left     = 0;
    n_free_windows  = 0;
    n_plain_windows = 0;
    n_failed_checks = 0;
    quiet_run       = 0; // a new cost model: the quiet run towards sleeping restarts
}

bool supervisor::quiet_step(int32_t k, bool probing, int64_t drafts_timed, double behind) {
    if (k > 0 && !probing) {
        quiet_run = 0;
        sleep_len = SLEEP_MIN;
        return false;
    }
    // never before the probe after waking has run (else a plain window that holds the probe back lets the
    // quiet run put the MTP side back to sleep unprobed)
    return ++quiet_run >= quiet_limit(drafts_timed, behind) && k == 0 && wake_probe == 0;
}

void supervisor::wake() {
    asleep       = false;
    sleep_left   = 0;
    wake_probe   = WAKE_PROBE;
    window_left  = 0;
    window_plain = false;
    window_check = false;
}

} // namespace mtp
