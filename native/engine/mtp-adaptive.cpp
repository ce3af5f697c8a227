// pymtp: the adaptive draft controller (see mtp-adaptive.h for the model and the rules).

#include "mtp-adaptive.h"

#include <algorithm>
#include <cmath>

namespace mtp {

double controller::target_cost(int32_t n) const {
    const int32_t l      = std::clamp(load, 1, LOADS);
    const auto &  row    = target[l - 1];
    const bool *  steady = steady_seen[l - 1];
    n                    = std::clamp(n, 1, K + 1);
    // a verify size decoded only once has only its first, cold sample (a GPU backend builds and captures
    // a graph for each new size: the 27B shape, a first 5-token verify 28 ms against 22 ms warm): it
    // stands in only while no size has a warm sample (a plain step's stands: plain steps are what the
    // controller compares with, and they come when drafting loses)
    bool warm            = false;
    for (int32_t j = 1; j <= K + 1; ++j) {
        warm = warm || row[j - 1].n >= 2;
    }
    auto known = [&](int32_t j) { return row[j - 1].n >= (warm && j >= 2 ? 2 : 1); };
    // a size never decoded twice in a row has only changed-size samples: less the change's cost S once
    // that is measured (else a verify size met once after a change, 5 ms dearer on a GPU, made every
    // longer draft look dear, and a plain step met only after drafts made drafting look cheap)
    auto value = [&](int32_t j) {
        return steady[j - 1] ? row[j - 1].v : std::max(0.5 * row[j - 1].v, row[j - 1].v - std::max(0.0, switching.v));
    };
    if (known(n)) {
        return value(n) / l + sampling.v * n;
    }
    // verify sizes (n >= 2) grow about linearly: a line through the measured ones, weighted by how often
    // each was measured (a steady size counts more); a plain step (n = 1) often sits below that line (a
    // mat-vec instead of a matmul)
    line_fit fit;
    for (int32_t j = 2; j <= K + 1; ++j) {
        if (known(j)) {
            fit.add(j, value(j), (double) std::min<int64_t>(row[j - 1].n, 20) * (steady[j - 1] ? 4.0 : 1.0));
        }
    }
    const int32_t n_sizes = fit.points, only = fit.last;
    const double  t1 = known(1) ? value(1) : 0.0;
    double        t  = 0.0;
    if (n >= 2 && n_sizes >= 2) {
        t = fit.at(n);
    } else if (n >= 2 && n_sizes == 1) {
        // from one verify size: the slope to a steady plain step, else the prior's
        const double y = value(only);
        const double slope =
            t1 > 0.0 && steady[0] ? std::max(0.0, (y - t1) / (only - 1)) : PRIOR_DV * y / (1.0 + PRIOR_DV * (only - 1));
        t = y + slope * (n - only);
    } else if (t1 > 0.0) {
        t = t1 * (1.0 + PRIOR_DV * (n - 1));
    } else if (n_sizes > 0) { // n == 1 unmeasured
        t = value(only) / (1.0 + PRIOR_DV * (only - 1));
    }
    // a verify costs at least a plain step where that is known steady (changed-size plain steps carry
    // what the drafting step before left unfinished)
    return (n == 1 || !steady[0] ? t : std::max(t, t1)) / l + sampling.v * n;
}

double controller::split_floor() const {
    const int32_t l = std::clamp(load, 1, LOADS);
    if (!splits || l < 2 || !steady_seen[l - 1][0] || target[l - 1][0].n < 1) {
        return 0.0;
    }
    const double share = target[l - 1][0].v / l; // this sequence's share of the plain batch
    const auto & alone = target[0][0];           // a one-row decode, where this sequence ran alone
    const double one   = steady_seen[0][0] || alone.n >= 2 ? alone.v : 0.0;
    return share + std::max(one, share) + sampling.v * 2;
}

double controller::steady_cost(int32_t n) const {
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

double controller::draft_cost() const {
    return drafts().n > 0 ? drafts().v : PRIOR_D * plain_batch_cost();
}

double controller::pass_cost(int32_t n) const {
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

double controller::step_draft_time(int32_t k) const {
    if (par <= 1 || k <= 0) {
        return draft_time(k);
    }
    return (k / par) * pass_cost(par) + (k % par > 0 ? pass_cost(k % par) : 0.0);
}

// rate of position i from per-position counts: a position seldom reached leans on the one before it (then on PRIOR_A)
static double chained_rate(const decayed_rate * r, int32_t i) {
    double x = controller::PRIOR_A;
    for (int32_t j = 0; j <= i; ++j) {
        x = r[j].get(x, controller::PRIOR_W);
    }
    return x;
}

double controller::accept(int32_t i, float c) const {
    i        = std::clamp(i, 0, K - 1);
    double a = chained_rate(acc[mode], i);
    if (recent_share < 1.0) { // stale: drawn towards the long-run rate (while drafting, nothing to do)
        a = recent_share * a + (1.0 - recent_share) * chained_rate(acc_long[mode], i);
    }
    if (c < 0.0f) {
        return a;
    }
    const int32_t b = std::clamp((int32_t) (c * BINS), 0, BINS - 1);
    return cal[mode][i][b].get(a, 4.0); // shrunk towards the position's rate while the bucket is young
}

double controller::tokens(int32_t k) const {
    double e = 1.0;
    double p = 1.0;
    for (int32_t i = 0; i < k; ++i) {
        p *= accept(i, -1.0f);
        e += p;
    }
    return e;
}

double controller::step_time(int32_t k) const {
    if (k <= 0) {
        return target_cost(1) + overhead.v;
    }
    const double w = catchup.n > 0 ? catchup.v : 0.0;
    return overhead.v + step_draft_time(k) + target_cost(k + 1) + w * accept(0, -1.0f);
}

double controller::ratio(int32_t k, double extra_ms) const {
    if (target_cost(1) <= 0.0) {
        return 0.0;
    }
    return tokens(k) / (step_time(k) + extra_ms);
}

bool controller::hopeless(int32_t k_cap) const {
    const int32_t l = std::clamp(load, 1, LOADS);
    if (!cutoff || drafts().n < 3 || !steady_seen[l - 1][0] || target[l - 1][0].n < 3 || target_cost(1) <= 0.0) {
        return false;
    }
    double verify = target_cost(1); // the cheapest verify: a steady one measured at this load, else a plain step
    double least  = 0.0;
    for (int32_t n = 2; n <= K + 1; ++n) {
        if (steady_seen[l - 1][n - 1] && target[l - 1][n - 1].n >= 2) {
            least = least > 0.0 ? std::min(least, target_cost(n)) : target_cost(n);
        }
    }
    verify             = std::max({ verify, least, split_floor() });
    const double plain = ratio(0);
    for (int32_t k = 1; k <= k_cap; ++k) {
        if ((k + 1) / (overhead.v + step_draft_time(k) + verify) > plain) {
            return false;
        }
    }
    return true;
}

double controller::switch_cost(int32_t n) const {
    // a change costs ~2 slow decodes once; a choice is kept for a while, so it is charged over DWELL steps
    return n_prev[0] != 0 && n != n_prev[0] ? 2.0 * std::max(0.0, switching.v) / DWELL : 0.0;
}

int32_t controller::plan(int32_t k_cap) {
    probing   = false;
    plain     = false;
    extending = false;
    hold      = false;
    p_all     = 1.0;
    conf.clear();
    if (!on()) {
        return k_cap;
    }
    aged();
    step_gen        = gen_cold > 0;
    gen_cold        = std::max(0, gen_cold - 1);
    k_cap           = std::min(k_cap, k_max);
    step_cap        = k_cap;
    // nothing to draft, or the plain cost is not measured yet, or (several sequences) not measured steady at
    // this load: plain steps measure it. (llama-server, four slots on the H100: as requests ended, loads 2
    // and 3 came with only a few cold samples of a plain batch, a plain step looked up to 9x dearer than
    // it was, and slots drafted k=1 there, 20% behind plain: 0.81x of MTP off in one run, 1.02x in the next.)
    const int32_t l = std::clamp(load, 1, LOADS);
    if (k_cap <= 0 || target_cost(1) <= 0.0 || (l >= 2 && (!steady_seen[l - 1][0] || target[l - 1][0].n < 3))) {
        plain = true;
        rate  = 0.0;
        return 0;
    }
    if (window_plain) { // a plain window (see next_window)
        plain = true;
        rate  = ratio(0);
        if (vetoed()) {
            n_vetoed++;
        }
        return 0;
    }
    if (blocky()) {
        return plan_block(k_cap);
    }
    block_left           = 0;
    // the rate of each choice now, a change of decode size included (long-run rates without it)
    auto         now     = [&](int32_t k) { return ratio(k, switch_cost(k + 1)); };
    const double plain_r = now(0);
    int32_t      best_k  = 0;
    double       best    = LEAD * plain_r; // what drafting must beat (see LEAD)
    int32_t      probe_k = 0;
    double       probe   = 0.0;
    for (int32_t k = 1; k <= k_cap; ++k) {
        const double r = now(k);
        if (r > best) {
            best   = r;
            best_k = k;
        }
        if (r > probe) {
            probe   = r;
            probe_k = k;
        }
    }
    best   = best_k > 0 ? best : plain_r;
    rate   = best;
    behind = best_k > 0 ? 1.0 : lag(plain_r, probe);
    if (best_k > 0) {
        plain_run              = 0;
        // drafting leads: re-time a plain step now and then, by the same rule as the probes below (the
        // plain cost may have been timed cold, or the machine may have changed)
        const double gap_plain = best / std::max(ratio(0), 1e-12);
        const auto & t1        = target[std::clamp(load, 1, LOADS) - 1][0];
        const double cap_plain = 16.0 * std::pow(4.0, (double) std::min<int64_t>(t1.n, 3));
        if (++draft_run >= std::min(cap_plain, 16.0 * std::pow(gap_plain, 8.0))) {
            draft_run = 0;
            probing   = true; // a plain step that writes its MTP rows at once (drafting resumes next)
            n_probes++;
            return 0;
        }
        // keep() decides where the draft stops; a parallel head's pass is sized now, its rows paid for up front
        return par > 1 ? best_k : k_cap;
    }
    draft_run           = 0;
    // plain decoding leads: re-probe the best draft length now and then, every 16 plain steps when the
    // two are close, rarely when drafting is far behind (each probe costs in proportion to the gap); a
    // draft cost timed only once or twice (a cold first decode) is re-timed soon whatever the gap
    plain               = true;
    const double gap    = best / std::max(probe, 1e-12);
    const double cap    = 16.0 * std::pow(4.0, (double) std::min<int64_t>(drafts().n, 3));
    const double period = std::min(cap, 16.0 * std::pow(gap, 8.0));
    const bool   woke   = wake_probe > 0 && --wake_probe == 0; // the MTP KV has rebuilt a little since waking
    if (probe_k > 0 && (++plain_run >= period || woke)) {
        plain_run = 0;
        if (hopeless(k_cap)) { // the probe's turn passes without one (judged once a turn, not every plain step)
            return 0;
        }
        plain   = false;
        probing = true;
        rate    = probe;
        n_probes++;
        return probe_k;
    }
    return 0;
}

void controller::stepped(int32_t n_tok, double ms) {
    if (!on() || pinned || !(ms > 0.0) || n_tok <= 0) {
        return;
    }
    own_loop        = true;
    // a step that carried a cold decode (graphs built or captured, a KV just restarted) is not what its
    // length costs: blocks and windows leave it out. (H100, SmolLM2, T=0.7: the first plain steps after
    // waking took 3-5 ms against 1.2, the plain block holding them ran dear for several blocks, and k=1
    // blocks, 18% behind plain per token, ran 238 steps.)
    const bool cold = step_cold || step_gen;
    step_cold       = false;
    if (hold && ++blk_seen > BLK_SKIP && k_last == block_k && !cold) { // block mode: its steady steps, end to end
        const double unit = block_unit();
        blk_time += unit > 0.0 ? ms / unit : 0.0;
        blk_steps += unit > 0.0 ? 1 : 0;
    }
    if (window_left <= 0) { // the first window decides freely
        window_left = WINDOW;
        window_tok = window_ms = 0.0;
        window_drafts          = 0;
    }
    if (!cold) {
        window_tok += n_tok;
        window_ms += ms;
    }
    window_drafts += k_last > 0 ? 1 : 0;
    if (--window_left == 0) {
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
        next_window();
    }
}

void controller::next_window() {
    n_windows++;
    window_left = WINDOW;
    if (window_check && !window_plain) { // a free check window ended: did drafting catch up?
        n_failed_checks = vetoed() ? n_failed_checks + 1 : 0;
    }
    window_check = false;
    // block mode times whole blocks of each length end to end, plain ones included: no plain windows
    if (blocky()) {
        window_plain = false;
        return;
    }
    // free windows first (the first one cold); where they run clearly above the model's plain rate,
    // drafting wins by a margin no plain window needs to confirm, and none runs
    if (real_draft.n <= 0.0 || clear()) {
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
    // (acceptance not learned yet, the first decodes of each verify size). Gemma 3 270M on this 2-core CPU
    // at T=0.7: the first measured free window drafted 1-8 tokens a step at 0.029 tokens/ms against 0.041
    // plain, the veto held 190 steps plain, and the free windows after it ran 0.048-0.056 (auto 1.19-1.27x
    // of MTP off where k=2 ran 1.51x). Where drafting does lose, the extra free window costs its 32 steps'
    // loss once.
    const bool    lagging = vetoed();
    const bool    one     = n_free_windows <= 2; // the cold first one and one measured
    const int64_t period  = !lagging ? CHECK : one ? 1 : (int64_t) CHECK << std::min(n_failed_checks, 2);
    window_check          = n_windows % period == 0;
    window_plain          = lagging != window_check;
}

int32_t controller::plan_block(int32_t k_cap) {
    hold            = true;
    // just woken, the MTP KV rebuilt a little: the block in progress ends, and where plain leads the next
    // one probes the best drafting length. The acceptance that sent the engine to sleep was measured on
    // other text (the H100, built-in model, T=0: one hard answer took it from ~0.55 to 0.385, plain led,
    // and without this probe every wake found the same stale estimate and slept again: 0.96x of MTP off
    // where fixed k=2 ran 1.03-1.07x)
    const bool woke = wake_probe > 0 && --wake_probe == 0;
    if (woke) {
        block_left = 0;
    }
    // a drafting block that is not timed end to end ends early once its first BLK_TRY steps have
    // re-measured it and the model puts its length behind plain decoding (see BLK_TRY), or at once where
    // no drafting can pay (hopeless)
    bool ends = false;
    if (cutoff && block_left > 0 && block_k > 0 && !blocks_timed()) {
        ends = (++blk_age > BLK_TRY && ratio(block_k) < ratio(0)) || hopeless(k_cap);
    }
    if (ends) {
        n_blocks_ended++;
    }
    if (block_left > 0 && block_k >= 0 && !ends) {
        block_left--;
    } else {
        new_block(k_cap, woke, ends);
    }
    const int32_t k = std::min(block_k, k_cap);
    // every step of a block that tries a drafting neighbour is a probe (the engine's own loop does not
    // count a probe as drafting chosen: a probe block every 8th must not keep the MTP side from sleeping)
    probing         = probing || (blk_probe && k > 0);
    plain           = k == 0 && !probing;
    rate            = ratio(k);
    return k;
}

controller::block_view::block_view(const controller & c, int32_t k_cap) : c(c), k_cap(k_cap), unit(c.block_unit()) {
    double real = 0.0, model = 0.0;
    for (int32_t k = 0; k <= k_cap; ++k) {
        if (c.blk[k].n > 0.0) {
            real += c.blk[k].get() * unit;
            model += c.step_time(k);
        }
    }
    scale = model > 0.0 ? real / model : 1.0;
}

void controller::end_block() {
    if (block_k >= 0 && blk_steps >= 3) {
        blk[std::clamp(block_k, 0, K)].add(blk_time, blk_steps, BLK_KEEP);
    }
    blk_time  = 0.0;
    blk_steps = blk_seen = blk_age = 0;
}

void controller::new_block(int32_t k_cap, bool woke, bool ends) {
    // blocks long enough that their two changes of size cost at most BLOCK_SHARE of their plain steps
    // (H100, SmolLM2: a change costs ~6 ms, 4-5 plain steps: 16-step blocks with an 8-step probe every
    // 8th spent ~7% on changes)
    const int32_t blen = block_len();
    end_block(); // the block that ended, end to end (own loop): the time per step its length realized
    const block_view v(*this, k_cap);
    const int32_t    best_k = block_choice(v, block_k < 0 || ends ? 0 : block_k, blen);
    block_k                 = best_k;
    int32_t best_draft_k    = 1; // the best drafting length (probed on waking; how far behind plain it is)
    for (int32_t k = 2; k <= k_cap; ++k) {
        best_draft_k = v.rate(k) > v.rate(best_draft_k) ? k : best_draft_k;
    }
    behind                = best_k > 0 ? 1.0 : lag(v.rate(0), v.rate(best_draft_k));
    const int32_t probe_k = block_probe(v, best_k, best_draft_k, woke);
    blk_probe             = probe_k >= 0;
    if (blk_probe) {
        blk_since_probe = 0;
        block_k         = probe_k;
        probing         = true;
        n_probes++;
    }
    block_left = (blk_probe ? blen / 2 : blen) - 1;
}

int32_t controller::block_choice(const block_view & v, int32_t cur, int32_t blen) const {
    // a new block: the best steady rate, a change of size charged over the block (after a block that
    // ended as it lost, to none of plain decoding: it would only keep the losing length)
    auto rate_now = [&](int32_t k) {
        return tokens(k) / (v.time(k) + (k == cur ? 0.0 : 2.0 * std::max(0.0, switching.v) / blen));
    };
    int32_t best_k = 0;
    double  best   = 0.0;
    for (int32_t k = 1; k <= v.k_cap; ++k) {
        const double r = rate_now(k);
        if (r > best) {
            best   = r;
            best_k = k;
        }
    }
    // the best drafting length must beat plain decoding by LEAD; where both ran as blocks (realized,
    // end to end) only by plain's awake surplus: the model's error is not in them (the H100, the
    // built-in model at T=0: fixed k=2 ran 1.07x of MTP off, its modelled lead was 4%)
    const bool both_ran = blk[0].n > 0.0 && blk[best_k].n > 0.0;
    if (best_k == 0 || best <= (both_ran ? 1.0 / (1.0 - AWAKE) : LEAD) * rate_now(0)) {
        best_k = 0;
    }
    return best_k;
}

int32_t controller::block_alternative(const block_view & v, int32_t best_k, bool * fresh) const {
    // neighbours: an unmeasured one gets the next block, a short one (so the lengths around the
    // choice are soon measured and the choice climbs to the best in a few blocks), otherwise every
    // 8th block in turn k+1, k-1, plain (only where blocks are timed: the engine's own loop;
    // llama-server's slots keep every 8th)
    const bool up_new = own_loop && best_k + 1 <= v.k_cap && !v.known(best_k + 1);
    const bool dn_new = own_loop && best_k >= 1 && !v.known(best_k - 1);
    // Where the warm-up timed every size (primed), the model's costs of lengths not yet run are measured ones:
    // no block sweeps the far ones. The neighbours still get theirs: they measure acceptance too.
    const bool sweep  = own_loop && !primed;
    // farther lengths not yet run that the model puts near the choice get a short block each, nearest
    // first: the model's verify costs come from the sizes run so far, and a curve flat near the top
    // (H100 27B shape: k=5..8 within 2%, a 9-token verify a matmul no dearer than 8 tokens) would
    // keep a neighbour-by-neighbour climb far from the best (k=8 run for 60 steps where 4 was best)
    // While plain leads (best_k = 0), k=1 is the neighbour that tells whether drafting pays at all;
    // longer lengths are swept only once some drafting length leads (on the CPU, plain far ahead, a
    // k=2 sweep block had cost 8 steps at ~20% loss)
    int32_t    far    = -1;
    for (int32_t d = 2; sweep && far < 0 && d <= v.k_cap; ++d) {
        for (const int32_t k : { best_k - d, best_k + d }) {
            if (far < 0 && k >= 1 && k <= v.k_cap && !v.known(k) && v.rate(k) >= SWEEP * v.rate(best_k)) {
                far = k;
            }
        }
    }
    const int32_t turn = (int32_t) (n_blocks / 8 % 3);
    *fresh             = up_new || dn_new || far >= 0;
    return up_new    ? best_k + 1 :
           dn_new    ? best_k - 1 :
           far >= 0  ? far :
           turn == 0 ? best_k + 1 :
           turn == 1 ? best_k - 1 :
                       0;
}

int32_t controller::block_probe(const block_view & v, int32_t best_k, int32_t best_draft_k, bool woke) {
    bool          fresh = false;
    const int32_t alt   = block_alternative(v, best_k, &fresh);
    n_blocks++;
    const bool cannot = hopeless(v.k_cap); // no drafting probe: acceptance cannot make it pay
    if (best_k == 0 && v.k_cap >= 1 && !cannot) {
        // nothing drafted yet in this mode: acceptance is the prior's, and only drafting measures it (primed with
        // this machine's costs, the prior's acceptance can put plain decoding ahead where every length pays)
        if (start_rules && acc[mode][0].n <= 0.0) {
            return first_probe(v);
        }
        if (woke) {
            return best_draft_k;
        }
    }
    if (alt < 0 || alt > v.k_cap || alt == best_k || (alt > 0 && cannot)) {
        return -1;
    }
    // a measured neighbour far behind is tried rarely: each such block costs in proportion to the gap (the
    // CPU, plain far ahead: a k=1 block every 8th had cost ~3%)
    const double  gap   = v.rate(best_k) / std::max(v.rate(alt), 1e-12);
    const int64_t every = fresh ? 1 : (int64_t) (8.0 * std::clamp(std::pow(gap, 8.0), 1.0, 16.0));
    return ++blk_since_probe >= every ? alt : -1;
}

int32_t controller::first_probe(const block_view & v) const {
    // the length that would be best at a high acceptance (OPTIMISM per position): a probe that only a short
    // length could pay for would tell nothing of the longer ones
    auto    expected = [](int32_t k) { return (1.0 - std::pow(OPTIMISM, k + 1)) / (1.0 - OPTIMISM); };
    int32_t probe_k  = 1;
    for (int32_t k = 2; k <= v.k_cap; ++k) {
        probe_k = expected(k) / v.time(k) > expected(probe_k) / v.time(probe_k) ? k : probe_k;
    }
    return probe_k;
}

int32_t controller::block_len() const {
    const double t1 = plain_batch_cost();
    if (!(t1 > 0.0)) {
        return BLOCK;
    }
    const double n = std::ceil(2.0 * std::max(0.0, switching.v) / (BLOCK_SHARE * t1));
    return (int32_t) std::clamp(n, (double) BLOCK, (double) BLOCK_MAX);
}

double controller::size_cost(int32_t n) const {
    return target_cost(n) + switch_cost(n);
}

double controller::best_extension(int32_t i, double p, int32_t n_from) const {
    // drafts i..j kept (j = i..step_cap-1): tokens P_i + .. + P_j, where P_i = p and later positions
    // chain the learned rates (confidence unknown yet); time: the verify growing from n_from rows to
    // j + 2, plus the draft decodes after draft i
    const int32_t last = std::max(i, step_cap - 1);
    const double  base = size_cost(n_from);
    const double  d0   = draft_time(i + 1);
    double        best = -1e300;
    double        gain = 0.0;
    for (int32_t j = i; j <= last; ++j) {
        gain += p;
        const double cost = size_cost(j + 2) - base + draft_time(j + 1) - d0;
        best              = std::max(best, gain - rate * cost);
        p *= accept(j + 1, -1.0f);
    }
    return best;
}

bool controller::keep(int32_t i, float c, bool * more) {
    *more = true;
    if (!on()) {
        return true;
    }
    const double p = p_all * accept(i, c);
    if (hold) { // block mode: the planned length, no cut
        p_all = p;
        conf.push_back(c);
        return true;
    }
    if (extending) {
        extending = false; // the explored draft stays, and is the last
        *more     = false;
    } else if (!probing) {
        // Draft i (already paid for) is kept if some length j >= i it leads to pays at rate R: the
        // accepted tokens it can add against the verify rows and draft decodes it costs. Not only
        // j = i: the first verify row often costs more than the later ones (a plain step is a mat-vec, a
        // verify a small matmul; a change of decode size), so a rule that looks one draft ahead would
        // stop at the first draft where eight would pay.
        if (best_extension(i, p, i + 1) < 0.0) {
            n_cut++;
            *more = false;
            return false;
        }
        // the next draft costs a draft decode on top (none within a parallel head's pass): drafted if some
        // length past it pays
        const double p_next = p * accept(i + 1, -1.0f);
        *more =
            i + 1 < step_cap && best_extension(i + 1, p_next, i + 2) >= rate * (draft_time(i + 2) - draft_time(i + 1));
        if (!*more && i + 1 < step_cap && ++n_stops % 16 == 0) {
            *more     = true; // explore one position further: its acceptance and verify size stay measured
            extending = true;
            n_extended++;
        }
    }
    p_all = p;
    conf.push_back(c);
    return true;
}

void controller::drafted(int32_t k) {
    steps_k[std::clamp(k, 0, K)]++;
    k_last = k;
    if (on() && k == 0) {
        plain = !probing;
    }
}

void controller::verified(int32_t k, int32_t n_acc) {
    if (!on() || k <= 0) {
        return;
    }
    stale        = 0;
    recent_share = 1.0;
    // P(draft i accepted | drafts before it accepted) is observed for i <= n_acc
    for (int32_t i = 0; i < std::min(k, n_acc + 1) && i < K; ++i) {
        const bool ok = i < n_acc;
        acc[mode][i].add(ok, KEEP);
        acc_long[mode][i].add(ok, KEEP_LONG);
        const float c = i < (int32_t) conf.size() ? conf[i] : -1.0f;
        if (c >= 0.0f) {
            cal[mode][i][std::clamp((int32_t) (c * BINS), 0, BINS - 1)].add(ok, KEEP);
        }
    }
}

void controller::timed_target(int32_t n, int32_t n_load, double ms) {
    if (!on() || pinned || n < 1 || n > K + 1 || n_load < 1 || !(ms > 0.0)) {
        return;
    }
    load              = std::min(n_load, LOADS);
    auto &     t      = target[load - 1][n - 1];
    bool &     seen   = steady_seen[load - 1][n - 1];
    const bool steady = n == n_prev[0] && n == n_prev[1];
    const bool repeat = n == n_prev[0];
    bool &     met    = size_met[load - 1][n - 1];
    bool &     held   = size_held[load - 1][n - 1];
    // a new engine or one just woken (its first decodes build graphs, warm caches), or a decode that
    // builds or captures this size's graphs: untimed
    const bool cold   = cold_targets > 0 || step_gen || (graphs && (!met || (repeat && !held)));
    held              = held || (met && repeat);
    met               = true;
    if (cold) {
        step_cold    = true;
        cold_targets = std::max(0, cold_targets - 1);
        n_prev[1]    = n_prev[0];
        n_prev[0]    = n;
        return;
    }
    // T(n) is what a decode of n costs where the size stays (a fixed length, a block); a decode whose
    // size just changed is timed apart: its excess over T(n) is S. Mixing the two (as before) hid S
    // where sizes change every step: T(n) took the changes in, and S measured ~0 against it.
    auto add = [&](double x) { t.add(t.n >= 3 ? std::min(x, 4.0 * t.v) : x); }; // one stalled decode: not far
    if (steady) {
        if (!seen) {
            seen = true;
            t    = running_mean{}; // the changed-size samples that stood in for it go
        }
        add(ms);
    } else if (!seen) {
        add(ms); // no steady decode of n yet: these stand in
        // On a GPU, where the verify size changes every step no size runs steady, and S was measured only
        // against steady samples: Gemma 3 270M on an H200, verifies of 2 and 3 rows alternating took 4-7
        // ms against ~2-3 ms steady (the target's graph rebuilt), stood in for T(2) and T(3), S stayed
        // at 0.07 ms, block mode never started and drafting looked 3x dearer than it is: plain decoding
        // and sleep at 0.97x of MTP off where k=3 ran 1.27x. Such a decode is also a sample of S, against
        // the steady cost extrapolated from the sizes that did run steady, where it exceeds that by more
        // than a plain step: a dear first verify row (the simulated 27B shape with V(2) 1.45 where the prior
        // says 1.15) is then not taken for a change's cost, which made S 3.7 ms where it was 0.
        const double base = graphs ? steady_cost(n) : 0.0;
        if (base > 0.0 && ms - base > target[load - 1][0].v) {
            switching.add(ms - base);
        }
    } else if (t.n >= 2) {
        switching.add(ms - t.v); // signed: noise averages out
        // less the change's cost, these follow drift too (a size may run steady only now and then: a
        // machine under other load would otherwise keep its T(n) from a quieter time). Only where that
        // leaves a decode cost near T(n): S is a mean over changes that cost far more or far less than it
        // (a GPU: a change to an uncaptured size 4-7 ms, a return to the plain step's captured graph ~1
        // ms, the decode after it nothing). SmolLM2 on an H200, S 4-5 ms: two plain decodes after a
        // k=1 block (2.4 and 1.3 ms) became samples of 0 ms and took T(1) from 1.03 to 0.84 ms where
        // plain steps ran 1.2-1.3; plain looked that much cheaper, the controller chose a plain block
        // over k=1 and slept where k=2 and k=3 ran 1.06x of MTP off.
        const double x = ms - std::max(0.0, switching.v);
        if (x >= 0.5 * t.v && x <= 2.0 * t.v) {
            add(x);
        }
    } else if (!graphs) {
        // a single steady sample: this one replaces it (running_mean). Not on a GPU, where a changed-size
        // decode carries re-captured graphs (H100, SmolLM2: the first plain decode after the first drafts
        // took 4.4 ms against 1.3 ms steady, and stood as T(1) for ~50 steps)
        add(ms);
    }
    n_prev[1] = n_prev[0];
    n_prev[0] = n;
}

void controller::timed_batch(int32_t own, int32_t n_seqs, int32_t n_tokens, double ms) {
    if (n_seqs < 2 || own * n_seqs == n_tokens) {
        timed_target(own, n_seqs, ms); // one sequence, or every one with as many rows: a batch of that size
        return;
    }
    if (on()) {
        load = std::min(n_seqs, LOADS);
    }
    // Sequences with different row counts. A plain one among drafting ones learns nothing (the batch's
    // extra rows are theirs). A drafting one is charged what the decode cost beyond a plain batch, as if
    // every sequence had drafted as it did: what it costs the batch, which every sequence waits for. (Four
    // slots on this 2-core CPU: one slot drafting k=1 took the batch from 29 ms to 50 ms, where averaged
    // batch sizes had taught the model ~+10 ms, and the slots drafted 5% of their steps, 0.95x of MTP off.)
    const int32_t l  = std::clamp(n_seqs, 1, LOADS);
    const double  tb = target_cost(1) > 0.0 && steady_seen[l - 1][0] ? target[l - 1][0].v : 0.0;
    if (own > 1 && tb > 0.0) {
        timed_target(own, n_seqs, tb + n_seqs * std::max(0.0, ms - tb));
    }
}

void controller::trace_step(int32_t k_plan, int32_t k, int32_t n_out, double draft_ms, double target_ms,
                            double catchup_ms, double gap_ms, double step_ms, int32_t seq) {
    if (trace == nullptr) {
        return;
    }
    if (n_seen++ == 0) {
        std::fprintf(trace, "step\tk_plan\tk\tn_out\tprobe\tplain_win\tcheck_win\thold\tblock_k\tdraft_ms\ttarget_ms\t"
                            "catchup_ms\tgap_ms\tstep_ms\test_T1\test_Tk\test_D\test_S\test_W\test_O\trate\t"
                            "real_plain\treal_draft\tvetoed\tclear\tblocky\tacc0\tacc3\tload\tseq\tadaptive\tengine\n");
    }
    std::fprintf(trace,
                 "%lld\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t"
                 "%.3f\t%.5f\t%.5f\t%.5f\t%d\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%d\t%d\n",
                 (long long) n_seen, k_plan, k, n_out, (int) probing, (int) window_plain, (int) window_check,
                 (int) hold, block_k, draft_ms, target_ms, catchup_ms, gap_ms, step_ms, target_cost(1),
                 target_cost(k + 1), draft_cost(), switching.v, catchup.v, overhead.v, rate, real_plain.get(),
                 real_draft.get(), (int) vetoed(), (int) clear(), (int) blocky(), accept(0, -1.0f), accept(3, -1.0f),
                 load, seq, (int) on(), trace_id);
    std::fflush(trace);
}

void controller::prime(const double * t_ms, int32_t n_sizes, double d_ms, double s_ms) {
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

void controller::pin_costs(double plain_ms, double draft_ms, double verify_extra_ms) {
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
    catchup    = running_mean{};
    sampling   = running_mean{};
    real_plain = realized_rate{};
    real_draft = realized_rate{};
    for (auto & b : blk) {
        b = realized_cost{};
    }
    blk_time  = 0.0;
    blk_steps = blk_seen = 0;
    window_plain         = false;
    window_check         = false;
    window_left          = 0;
    n_free_windows       = 0;
    n_plain_windows      = 0;
    n_failed_checks      = 0;
    quiet_run            = 0; // a new cost model: the quiet run towards sleeping restarts
    behind               = 1.0;
    pinned               = plain_ms > 0.0;
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

void controller::woke() {
    asleep        = false;
    sleep_left    = 0;
    wake_probe    = WAKE_PROBE;
    cold_drafts   = COLD_DRAFTS;
    cold_targets  = COLD_TARGETS;
    cold_catchups = COLD_DRAFTS;
    window_left   = 0; // a fresh window (stepped() opens it): the sleeping steps are no window's
    // and a free one: the probe after waking runs in it (a plain window would hold it back, and the
    // MTP side could fall asleep again before it ran)
    window_plain  = false;
    window_check  = false;
    // the MTP context's graphs are new: each pass size's first pass and first repeat go untimed again
    std::fill(std::begin(pass_met), std::end(pass_met), false);
    std::fill(std::begin(pass_held), std::end(pass_held), false);
}

void controller::reset_stats() {
    std::fill(std::begin(steps_k), std::end(steps_k), 0);
    n_probes       = 0;
    n_cut          = 0;
    n_extended     = 0;
    n_deferred     = 0;
    n_vetoed       = 0;
    n_dormant      = 0;
    n_blocks_ended = 0;
}

void controller::fill_stats(llama_mtp_adaptive_stats * out) const {
    *out       = llama_mtp_adaptive_stats{};
    out->k_max = k_max;
    out->load  = load;
    std::copy(std::begin(steps_k), std::end(steps_k), out->steps_per_k);
    out->n_probes      = n_probes;
    out->n_cut         = n_cut;
    out->n_extended    = n_extended;
    out->n_deferred    = n_deferred;
    out->t_draft_ms    = draft_cost();
    out->t_overhead_ms = overhead.v;
    out->t_switch_ms   = std::max(0.0, switching.v);
    for (int32_t n = 1; n <= K + 1; ++n) {
        out->t_target_ms[n - 1] = target_cost(n);
    }
    for (int32_t i = 0; i < K; ++i) {
        out->accept[i] = (float) accept(i, -1.0f);
    }
    const double plain_ratio = ratio(0);
    double       best        = plain_ratio;
    out->k_best              = 0;
    for (int32_t k = 1; k <= k_max; ++k) {
        const double r = ratio(k);
        if (r > best) {
            best        = r;
            out->k_best = k;
        }
    }
    out->speedup        = plain_ratio > 0.0 ? best / plain_ratio : 0.0;
    out->realized_plain = real_plain.get();
    out->realized_draft = real_draft.get();
    out->n_vetoed       = n_vetoed;
    out->n_dormant      = n_dormant;
    out->n_blocks_ended = n_blocks_ended;
}

} // namespace mtp
