// pymtp: the adaptive draft controller (see mtp-adaptive.h for the model, the rules and its parts): the
// steps as the engine calls them, each handing its work to the part whose job it is.

#include "mtp-adaptive.h"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace mtp {

int32_t controller::plan(int32_t k_cap) {
    begin_step();
    if (!on()) {
        return k_cap;
    }
    aged();
    step_gen = start_step();
    k_cap    = std::min(k_cap, k_max);
    step_cap = k_cap;
    // nothing to draft, or the plain cost is not measured yet, or (several sequences) not measured steady at
    // this load: plain steps measure it
    if (k_cap <= 0 || plain_unknown()) {
        plain = true;
        rate  = 0.0;
        return 0;
    }
    if (window_plain) { // a plain window (see supervisor::open_window)
        plain = true;
        rate  = ratio(0);
        if (vetoed(model())) {
            n_vetoed++;
        }
        return 0;
    }
    if (blocky()) {
        return plan_block(k_cap);
    }
    return plan_step(k_cap);
}

int32_t controller::plan_step(int32_t k_cap) {
    block_left         = 0;
    const step_model m = model();
    const choice     c = choose(m, k_cap);
    if (c.best_k > 0) {
        // drafting leads: re-time a plain step now and then, by the same rule as the probes below (the
        // plain cost may have been timed cold, or the machine may have changed)
        const int32_t l = std::clamp(load, 1, LOADS);
        if (plain_turn(c.best / std::max(m.ratio(0), 1e-12), target[l - 1][0].n)) {
            probing = true; // a plain step that writes its MTP rows at once (drafting resumes next)
            n_probes++;
            return 0;
        }
        // keep() decides where the draft stops; a parallel head's pass is sized now, its rows paid for up front
        return par > 1 ? c.best_k : k_cap;
    }
    // plain decoding leads: re-probe the best draft length now and then (supervisor::probe_turn)
    plain = true;
    if (probe_turn(c.probe_k > 0, c.best / std::max(c.probe, 1e-12), drafts().n)) {
        if (hopeless(m, k_cap)) { // the probe's turn passes without one (judged once a turn, not every plain step)
            return 0;
        }
        plain   = false;
        probing = true;
        rate    = c.probe;
        n_probes++;
        return c.probe_k;
    }
    return 0;
}

int32_t controller::plan_block(int32_t k_cap) {
    hold                  = true;
    // just woken, the MTP KV rebuilt a little: the block in progress ends, and where plain leads the next
    // one probes the best drafting length (the acceptance that sent the engine to sleep was measured on
    // other text: without a probe every wake would find the same stale estimate and sleep again)
    const bool       woke = wake_due();
    const step_model m    = model();
    if (woke) {
        block_left = 0;
    }
    // a drafting block that is not timed end to end ends early once its first BLK_TRY steps have
    // re-measured it and the model puts its length behind plain decoding, or at once where no drafting can pay
    bool ends = false;
    if (cutoff && block_left > 0 && block_k > 0 && !blocks_timed(*this)) {
        ends = block_loses(m, k_cap, block_k, ++blk_age);
    }
    if (ends) {
        n_blocks_ended++;
    }
    if (block_left > 0 && block_k >= 0 && !ends) {
        block_left--;
    } else {
        new_block(m, k_cap, { woke, ends, hopeless(m, k_cap), start_rules && unmeasured() });
    }
    const int32_t k = std::min(block_k, k_cap);
    // every step of a block that tries a drafting neighbour is a probe (the engine's own loop does not
    // count a probe as drafting chosen: a probe block every NEIGHBOUR_EVERY-th must not keep the MTP side
    // from sleeping)
    probing         = probing || (blk_probe && k > 0);
    plain           = k == 0 && !probing;
    rate            = ratio(k);
    return k;
}

bool controller::keep(int32_t i, float c, bool * more) {
    *more = true;
    if (!on()) {
        return true;
    }
    return keep_draft(model(), i, c, more);
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
    observe(k, n_acc, conf);
}

void controller::stepped(int32_t n_tok, double ms) {
    if (!on() || pinned || !(ms > 0.0) || n_tok <= 0) {
        return;
    }
    own_loop              = true;
    // a step that carried a cold decode (graphs built or captured, a KV just restarted, a new generation's
    // start) is not what its length costs: blocks and windows leave it out
    const bool       cold = take_untimed();
    const step_model m    = model();
    time_block_step(m, ms, cold);
    if (window_step(n_tok, ms, cold, k_last > 0)) {
        open_window(m, blocky());
    }
}

void controller::woke() {
    wake();
    restart_cold();
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
    const step_model m = model();
    std::fprintf(trace,
                 "%lld\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t"
                 "%.3f\t%.5f\t%.5f\t%.5f\t%d\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%d\t%d\n",
                 (long long) n_seen, k_plan, k, n_out, (int) probing, (int) window_plain, (int) window_check,
                 (int) hold, block_k, draft_ms, target_ms, catchup_ms, gap_ms, step_ms, target_cost(1),
                 target_cost(k + 1), draft_cost(), switching.v, catchup.v, overhead.v, rate, real_plain.get(),
                 real_draft.get(), (int) vetoed(m), (int) clear(m), (int) blocky(), accept(0, -1.0f), accept(3, -1.0f),
                 load, seq, (int) on(), trace_id);
    std::fflush(trace);
}

void controller::pin_costs(double plain_ms, double draft_ms, double verify_extra_ms) {
    pin(plain_ms, draft_ms, verify_extra_ms);
    forget_blocks();
    forget_windows();
    behind = 1.0;
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
