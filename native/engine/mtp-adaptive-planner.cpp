// pymtp: the adaptive controller's planner (see mtp-adaptive-planner.h).

#include "mtp-adaptive-planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace mtp {

void planner::begin_step() {
    probing   = false;
    plain     = false;
    extending = false;
    hold      = false;
    p_all     = 1.0;
    conf.clear();
}

planner::choice planner::choose(const step_model & m, int32_t k_cap) {
    // the rate of each choice now, a change of decode size included (long-run rates without it)
    auto         now     = [&](int32_t k) { return m.ratio(k, m.cost.switch_cost(k + 1)); };
    const double plain_r = now(0);
    choice       c;
    c.best = LEAD * plain_r; // what drafting must beat (see LEAD)
    for (int32_t k = 1; k <= k_cap; ++k) {
        const double r = now(k);
        if (r > c.best) {
            c.best   = r;
            c.best_k = k;
        }
        if (r > c.probe) {
            c.probe   = r;
            c.probe_k = k;
        }
    }
    c.best = c.best_k > 0 ? c.best : plain_r;
    rate   = c.best;
    behind = c.best_k > 0 ? 1.0 : lag(plain_r, c.probe);
    return c;
}

double planner::best_extension(const step_model & m, int32_t i, double p, int32_t n_from) const {
    // drafts i..j kept (j = i..step_cap-1): tokens P_i + .. + P_j, where P_i = p and later positions
    // chain the learned rates (confidence unknown yet); time: the verify growing from n_from rows to
    // j + 2, plus the draft decodes after draft i
    const int32_t last = std::max(i, step_cap - 1);
    const double  base = m.cost.size_cost(n_from);
    const double  d0   = m.cost.draft_time(i + 1);
    double        best = -1e300;
    double        gain = 0.0;
    for (int32_t j = i; j <= last; ++j) {
        gain += p;
        const double cost = m.cost.size_cost(j + 2) - base + m.cost.draft_time(j + 1) - d0;
        best              = std::max(best, gain - rate * cost);
        p *= m.acceptance.accept(j + 1, -1.0f);
    }
    return best;
}

bool planner::keep_draft(const step_model & m, int32_t i, float c, bool * more) {
    const double p = p_all * m.acceptance.accept(i, c);
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
        if (best_extension(m, i, p, i + 1) < 0.0) {
            n_cut++;
            *more = false;
            return false;
        }
        // the next draft costs a draft decode on top (none within a parallel head's pass): drafted if some
        // length past it pays
        const double p_next = p * m.acceptance.accept(i + 1, -1.0f);
        *more = i + 1 < step_cap &&
                best_extension(m, i + 1, p_next, i + 2) >= rate * (m.cost.draft_time(i + 2) - m.cost.draft_time(i + 1));
        if (!*more && i + 1 < step_cap && ++n_stops % EXPLORE_EVERY == 0) {
            *more     = true; // explore one position further: its acceptance and verify size stay measured
            extending = true;
            n_extended++;
        }
    }
    p_all = p;
    conf.push_back(c);
    return true;
}

int32_t planner::block_len(const cost_model & c) {
    const double t1 = c.plain_batch_cost();
    if (!(t1 > 0.0)) {
        return BLOCK;
    }
    const double n = std::ceil(BLOCK_CHANGES * std::max(0.0, c.switching.v) / (BLOCK_SHARE * t1));
    return (int32_t) std::clamp(n, (double) BLOCK, (double) BLOCK_MAX);
}

planner::block_view::block_view(const planner & owner, const step_model & models, int32_t cap)
    : p(owner), m(models), k_cap(cap), unit(block_unit(models)) {
    double real = 0.0, model = 0.0;
    for (int32_t k = 0; k <= k_cap; ++k) {
        if (p.blk[k].n > 0.0) {
            real += p.blk[k].get() * unit;
            model += m.time(k);
        }
    }
    scale = model > 0.0 ? real / model : 1.0;
}

void planner::end_block() {
    if (block_k >= 0 && blk_steps >= BLK_STEPS) {
        blk[std::clamp(block_k, 0, K)].add(blk_time, blk_steps, BLK_KEEP);
    }
    blk_time  = 0.0;
    blk_steps = blk_seen = blk_age = 0;
}

void planner::new_block(const step_model & m, int32_t k_cap, const block_rules & r) {
    // blocks long enough that their two changes of size cost at most BLOCK_SHARE of their plain steps
    const int32_t blen = block_len(m.cost);
    end_block(); // the block that ended, end to end (own loop): the time per step its length realized
    const block_view v(*this, m, k_cap);
    const int32_t    best_k = block_choice(v, block_k < 0 || r.ends ? 0 : block_k, blen);
    block_k                 = best_k;
    int32_t best_draft_k    = 1; // the best drafting length (probed on waking; how far behind plain it is)
    for (int32_t k = 2; k <= k_cap; ++k) {
        best_draft_k = v.rate(k) > v.rate(best_draft_k) ? k : best_draft_k;
    }
    behind                = best_k > 0 ? 1.0 : lag(v.rate(0), v.rate(best_draft_k));
    const int32_t probe_k = block_probe(v, best_k, best_draft_k, r);
    blk_probe             = probe_k >= 0;
    if (blk_probe) {
        blk_since_probe = 0;
        block_k         = probe_k;
        probing         = true;
        n_probes++;
    }
    block_left = (blk_probe ? blen / 2 : blen) - 1;
}

int32_t planner::block_choice(const block_view & v, int32_t cur, int32_t blen) const {
    // a new block: the best steady rate, a change of size charged over the block (after a block that
    // ended as it lost, to none of plain decoding: it would only keep the losing length)
    auto rate_now = [&](int32_t k) {
        return v.m.tokens(k) /
               (v.time(k) + (k == cur ? 0.0 : BLOCK_CHANGES * std::max(0.0, v.m.cost.switching.v) / blen));
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
    // end to end) only by plain's awake surplus: the model's error is not in them
    const bool both_ran = blk[0].n > 0.0 && blk[best_k].n > 0.0;
    if (best_k == 0 || best <= (both_ran ? 1.0 / (1.0 - AWAKE) : LEAD) * rate_now(0)) {
        best_k = 0;
    }
    return best_k;
}

int32_t planner::block_alternative(const block_view & v, int32_t best_k, bool * fresh) const {
    // neighbours: an unmeasured one gets the next block, a short one (so the lengths around the
    // choice are soon measured and the choice climbs to the best in a few blocks), otherwise every
    // NEIGHBOUR_EVERY-th block in turn k+1, k-1, plain (only where blocks are timed: the engine's own loop;
    // llama-server's slots keep every NEIGHBOUR_EVERY-th)
    const bool up_new = own_loop && best_k + 1 <= v.k_cap && !v.known(best_k + 1);
    const bool dn_new = own_loop && best_k >= 1 && !v.known(best_k - 1);
    // Where the warm-up timed every size (primed), the model's costs of lengths not yet run are measured ones:
    // no block sweeps the far ones. The neighbours still get theirs: they measure acceptance too.
    const bool sweep  = own_loop && !v.m.cost.primed;
    // farther lengths not yet run that the model puts near the choice get a short block each, nearest
    // first: the model's verify costs come from the sizes run so far, and a curve flat near the top would
    // keep a neighbour-by-neighbour climb far from the best. While plain leads (best_k = 0), k=1 is the
    // neighbour that tells whether drafting pays at all; longer lengths are swept only once some drafting
    // length leads
    int32_t    far    = -1;
    for (int32_t d = 2; sweep && far < 0 && d <= v.k_cap; ++d) {
        for (const int32_t k : { best_k - d, best_k + d }) {
            if (far < 0 && k >= 1 && k <= v.k_cap && !v.known(k) && v.rate(k) >= SWEEP * v.rate(best_k)) {
                far = k;
            }
        }
    }
    const int32_t turn = (int32_t) (n_blocks / NEIGHBOUR_EVERY % 3);
    *fresh             = up_new || dn_new || far >= 0;
    return up_new    ? best_k + 1 :
           dn_new    ? best_k - 1 :
           far >= 0  ? far :
           turn == 0 ? best_k + 1 :
           turn == 1 ? best_k - 1 :
                       0;
}

int32_t planner::block_probe(const block_view & v, int32_t best_k, int32_t best_draft_k, const block_rules & r) {
    bool          fresh = false;
    const int32_t alt   = block_alternative(v, best_k, &fresh);
    n_blocks++;
    if (best_k == 0 && v.k_cap >= 1 && !r.hopeless) {
        // nothing drafted yet in this mode: acceptance is the prior's, and only drafting measures it (primed with
        // this machine's costs, the prior's acceptance can put plain decoding ahead where every length pays)
        if (r.first) {
            return first_probe(v);
        }
        if (r.woke) {
            return best_draft_k;
        }
    }
    if (alt < 0 || alt > v.k_cap || alt == best_k || (alt > 0 && r.hopeless)) {
        return -1;
    }
    // a measured neighbour far behind is tried rarely: each such block costs in proportion to the gap
    const double  gap = v.rate(best_k) / std::max(v.rate(alt), 1e-12);
    const int64_t every =
        fresh ? 1 : (int64_t) (NEIGHBOUR_EVERY * std::clamp(std::pow(gap, NEIGHBOUR_POW), 1.0, NEIGHBOUR_RARE));
    return ++blk_since_probe >= every ? alt : -1;
}

int32_t planner::first_probe(const block_view & v) const {
    // the length that would be best at a high acceptance (OPTIMISM per position): a probe that only a short
    // length could pay for would tell nothing of the longer ones
    auto    expected = [](int32_t k) { return (1.0 - std::pow(OPTIMISM, k + 1)) / (1.0 - OPTIMISM); };
    int32_t probe_k  = 1;
    for (int32_t k = 2; k <= v.k_cap; ++k) {
        probe_k = expected(k) / v.time(k) > expected(probe_k) / v.time(probe_k) ? k : probe_k;
    }
    return probe_k;
}

void planner::time_block_step(const step_model & m, double ms, bool cold) {
    if (hold && ++blk_seen > BLK_SKIP && k_last == block_k && !cold) { // its steady steps, end to end
        const double unit = block_unit(m);
        blk_time += unit > 0.0 ? ms / unit : 0.0;
        blk_steps += unit > 0.0 ? 1 : 0;
    }
}

void planner::forget_blocks() {
    for (auto & b : blk) {
        b = realized_cost{};
    }
    blk_time  = 0.0;
    blk_steps = blk_seen = 0;
}

} // namespace mtp
