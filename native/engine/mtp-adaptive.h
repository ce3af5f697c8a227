#pragma once

// pymtp: the adaptive draft controller. Each step it decides how many tokens to draft, from 0 (a plain
// decode) up to a maximum, and may stop drafting early within the step. It maximises expected tokens
// per unit of time from two models it learns while running. Its parts, one job each:
//
//   mtp-adaptive-cost.h        the cost model: the timed costs of target decodes by size and load, draft
//                              decodes, catch-ups and size changes, the warm-up's priors; what a step of
//                              length k costs
//   mtp-adaptive-acceptance.h  the acceptance model: per draft mode and position (and confidence bucket), the
//                              chance a draft is accepted; what a length is expected to yield
//   mtp-adaptive-step.h        the two models as the parts below read them: a length's tokens, time and rate
//   mtp-adaptive-planner.h     the choice of each step's draft length (per step, or in blocks where a change
//                              of decode size is dear) and where a step's drafts stop
//   mtp-adaptive-supervisor.h  the rules around those choices: probes' schedule, a fresh engine's start,
//                              cutoffs, the end-to-end windows that can veto drafting, sleeping and waking
//   mtp-adaptive-measures.h    the running means and decayed rates they learn with
//
// `controller` (below) is what the engine holds and calls, step by step: it joins the parts.
//
// A step that drafts k tokens is expected to emit E(k) = 1 + sum_{i<k} prod_{j<=i} a_j tokens in
// C(k) = k D + T(k + 1) + W a_0. plan() takes the best ratio E/C over k = 0..k_cap as the rate R to
// beat (renewal-reward: a decision pays when its expected tokens exceed R times its expected time),
// drafting only where it beats plain decoding by LEAD (near break-even the choice leans to plain).
// Within the step, after each draft with confidence c, the draft is kept only if some length it leads to
// pays at rate R (its probability of acceptance, the chain so far times a(i, c), plus the later ones,
// against the verify rows and draft decodes they add), and the next one is drafted only if the same
// holds from it on. So drafts run long on easy text and stop on hard text. While plain decoding wins,
// the engine defers the MTP catch-up (queued rows are written in one batch before drafting resumes)
// and the controller re-probes now and then, rarely when drafting is far behind; while drafting wins
// it re-times a plain step now and then the same way, and every 16th draft the rule stops goes one
// token further, so that the costs and acceptance of the choices it does not make stay measured. Only
// speed depends on it: drafting never changes output.

#include "llama-mtp.h"
#include "mtp-adaptive-acceptance.h"
#include "mtp-adaptive-cost.h"
#include "mtp-adaptive-measures.h"
#include "mtp-adaptive-planner.h"
#include "mtp-adaptive-step.h"
#include "mtp-adaptive-supervisor.h"

#include <cstdint>
#include <cstdio>

namespace mtp {

struct controller : cost_model, acceptance_model, planner, supervisor {
    static constexpr int32_t K     = LLAMA_MTP_MAX_DRAFT;
    static constexpr int32_t QUEUE = 256; // deferred MTP rows written once this many wait

    int32_t k_max = 0; // 0: off, every step drafts the length it is given

    bool       on() const { return k_max > 0; }
    // the models as the planner and the supervisor read them
    step_model model() const { return step_model{ *this, *this }; }

    // ---- a step, in the order the engine calls it ----
    // before drafting: the most tokens this step may draft (0: a plain step); k_cap is the caller's cap
    int32_t plan(int32_t k_cap);
    // plan's choice where a change of size is cheap (per step), and where it is dear (blocks)
    int32_t plan_step(int32_t k_cap);
    int32_t plan_block(int32_t k_cap);
    // after draft i (0-based) with confidence c: whether to keep it; *more: whether to draft another
    bool    keep(int32_t i, float c, bool * more);
    // the step drafted k tokens (after any cut)
    void    drafted(int32_t k);
    // verification of the step's k drafts accepted n_acc of them
    void    verified(int32_t k, int32_t n_acc);
    // a target decode holding n tokens of this sequence, among `load` sequences, took ms (learned while on)
    void    timed_target(int32_t n, int32_t n_load, double ms) { learn_target(on(), n, n_load, ms); }
    // caller-decoded: a decode of n_tokens rows of n_seqs sequences, `own` of them this one's, took ms
    void    timed_batch(int32_t own, int32_t n_seqs, int32_t n_tokens, double ms) {
        learn_batch(on(), own, n_seqs, n_tokens, ms);
    }
    // caller-decoded: verifying n rows (sampling) took ms
    void timed_sampling(int32_t n, double ms) { learn_sampling(on(), n, ms); }
    // the MTP catch-up of a verified step's n rows took ms
    void timed_catchup(int32_t n, double ms) { learn_catchup(on(), n, ms); }
    // a draft decode and its draft choice took ms (learned while on); rows > 0: a parallel head's pass of rows
    void timed_draft(double ms, int32_t rows = 0) { learn_draft(on(), ms, rows); }
    // a step's time outside its timed parts, and the caller's time between steps (learned while on)
    void timed_overhead(double ms) { learn_overhead(on(), ms); }
    // own loop: a whole step (the caller's time before it included) emitted n_tok tokens in ms
    void stepped(int32_t n_tok, double ms);
    // the policy of the next window, from the measured rates
    void next_window() { open_window(model(), blocky()); }
    // whether teacher-forced MTP rows may wait (plain decoding leads)
    bool defer_catchup() const { return on() && plain && !probing; }

    // ---- sleeping ----
    // after plan() chose k: whether the MTP side falls asleep at this step (see supervisor::quiet_step)
    bool sleeps_now(int32_t k) { return quiet_step(k, probing, drafts().n, behind); }
    // asleep: this step is a plain one; true when the sleep is over (the caller wakes its MTP side)
    bool asleep_step() {
        aged();
        return dormant_step();
    }
    // the MTP side woke (own loop): new graphs and KV, so the first decodes go untimed, and a probe
    // after WAKE_PROBE steps
    void woke();

    // ---- estimates ----
    // a step drafting k: its modelled time (ms), and its expected tokens per ms (k = 0: plain decoding;
    // extra_ms: a one-off cost of this step)
    double step_time(int32_t k) const { return model().time(k); }
    double ratio(int32_t k, double extra_ms = 0.0) const { return model().ratio(k, extra_ms); }
    // block mode: a change of decode size is dear (see planner)
    bool   blocky() const { return block_mode(*this); }

    // Diagnosis: with PYMTP_ADAPTIVE_TRACE=FILE in the environment, the engine's own loop appends one
    // line per step to FILE (tab-separated, a header first): what was planned and drafted, the step's
    // timed parts, and the estimates and window state the next choice starts from. llama-server's slots
    // each append theirs (a header per slot; load: sequences in the last decode, seq: the slot's). Every
    // engine traces, with the controller on or not (a fixed length, MTP off: the timed parts side by side
    // with auto's; their estimates are the untouched priors): `adaptive` says which, `engine` which engine
    // of the process wrote the line.
    void trace_step(int32_t k_plan, int32_t k, int32_t n_out, double draft_ms, double target_ms, double catchup_ms,
                    double gap_ms, double step_ms, int32_t seq = 0);
    std::FILE * trace    = nullptr;
    int64_t     n_seen   = 0; // steps traced
    int32_t     trace_id = 0; // the engine's number among the process's traced ones (1, 2, ...)

    // tests: the cost model fixed (plain_ms > 0) or learned afresh, with what was measured end to end
    void pin_costs(double plain_ms, double draft_ms, double verify_extra_ms);
    void reset_stats();
    void fill_stats(llama_mtp_adaptive_stats * out) const;

    // ---- what it did (reset with the engine's stats; the parts count the rest) ----
    int64_t steps_k[K + 1] = {};
    int64_t n_deferred     = 0;
};

} // namespace mtp
