#pragma once

// pymtp: the adaptive controller's supervisor (mtp-adaptive.h has the whole controller): the rules around
// the planner's choices. When probes run (a plain step re-timed while drafting leads, a drafting probe while
// plain decoding leads, each the rarer the farther behind it is); a fresh engine's start (a new generation's
// first steps untimed); the cutoffs (no drafting probe where no acceptance could pay, an untimed drafting
// block ended once it loses, drafting vetoed while its windows measure slower than plain ones); and sleeping:
// the MTP side off while plain decoding keeps winning, woken now and then to probe again.

#include "mtp-adaptive-step.h"

#include <algorithm>
#include <cstdint>

namespace mtp {

struct supervisor {
    // ---- probes' schedule ----
    // a probe (while drafting leads: a plain step; while plain leads: the best drafting length) every
    // PROBE_EVERY steps when the two are close, every PROBE_EVERY x gap^PROBE_POW steps when one is behind by
    // a gap (each probe costs in proportion to it), and soon while the cost it re-times has fewer than
    // MEASURED samples (a cold first decode): at most PROBE_EVERY x PROBE_GROWTH^samples steps apart
    static constexpr double PROBE_EVERY  = 16.0;
    static constexpr double PROBE_POW    = 8.0;
    static constexpr double PROBE_GROWTH = 4.0;

    int64_t plain_run = 0; // plain steps since the last drafting one
    int64_t draft_run = 0; // drafting steps since the last plain one

    // drafting leads by a gap over plain decoding (plain_timed: T(1)'s samples at this load): whether this step
    // re-times a plain step (it writes its MTP rows at once; drafting resumes next)
    bool plain_turn(double gap, int64_t plain_timed);
    // plain decoding leads by a gap over the best drafting length (can: there is one; drafts_timed: D's
    // samples): whether this step probes it (also the first chance after waking, see WAKE_PROBE)
    bool probe_turn(bool can, double gap, int64_t drafts_timed);

    // ---- a fresh engine's start ----
    // A new generation's first steps carry its start: the prompt's MTP catch-up lands in the first timed part,
    // and on a GPU each decode size's graph is captured again at its first use (new KV window). Timed, they would
    // make whichever length ran across a start look dear; they are left out of every timing (began: GEN_COLD
    // steps from the next plan on). docs/adaptive.md, "Warm-up and a fresh engine's start".
    static constexpr int32_t GEN_COLD = 2;
    int32_t                  gen_cold = 0; // steps of a new generation still to leave untimed
    // a new generation (sequence) starts on this engine: its first steps go untimed
    void                     began() { gen_cold = start_rules ? GEN_COLD : 0; }
    // a step is planned: whether it is one of a new generation's first (untimed)
    bool                     start_step() {
        const bool gen = gen_cold > 0;
        gen_cold       = std::max(0, gen_cold - 1);
        return gen;
    }
    // The rules of a fresh engine's start: primed costs (prime), a new generation's first steps untimed (began),
    // a first drafting block while acceptance is unmeasured (the planner's first_probe). PYMTP_ADAPTIVE_START=0
    // in the environment turns all three off (A/B runs against the controller without them).
    bool start_rules = true;

    // ---- cutoffs ----
    // untimed drafting blocks end where they lose (BLK_TRY), and nothing probes where no acceptance could pay
    // (hopeless); PYMTP_ADAPTIVE_NO_CUTOFF=1 in the environment turns both off (A/B runs)
    bool                     cutoff  = true;
    // block mode where blocks are not timed end to end (several sequences share the batch): a drafting block
    // (a choice or a probe) ends once BLK_TRY steps of it have re-measured its costs and acceptance and the
    // model no longer puts its length ahead of plain decoding
    static constexpr int32_t BLK_TRY = 8;
    // Drafting cannot pay at this load whatever the acceptance: with every draft accepted, each length's
    // step (its draft decodes, and a verify at least as dear as the cheapest one measured steady here, or a
    // plain step, or the split floor) still emits fewer tokens per ms than plain decoding. Measured costs only
    // (MEASURED draft decodes timed, a steady plain batch at this load). Then no probe drafts: acceptance
    // cannot change the answer, only costs can.
    bool                     hopeless(const step_model & m, int32_t k_cap) const;
    // an untimed drafting block of length k, age steps planned so far: it ends (it lost, or nothing can pay)
    bool                     block_loses(const step_model & m, int32_t k_cap, int32_t k, int32_t age) const;

    // ---- windows: drafting's rate measured end to end ----
    // What the model cannot see (a GPU finishing one step's MTP catch-up during the next step, a catch-up
    // the deferral pushes onto the next drafting step, the caller's work per token) shows only in the
    // end-to-end rate of many steps. The engine's own loop times whole windows of WINDOW steps (so does a
    // llama-server of one slot: a step runs from one llama_mtp_draft to the next): windows where the
    // controller decides freely, and windows of plain steps only. While free windows run below plain ones,
    // the following windows decode plainly (every CHECK-th one decides freely again, to see whether that
    // changed); otherwise every CHECK-th window is a plain one, to keep its rate measured.
    static constexpr int32_t WINDOW      = 32;   // steps per window (own loop: whole windows are timed)
    static constexpr int32_t CHECK       = 8;    // every CHECK-th window runs the policy that is behind
    static constexpr int32_t CHECKS_RARE = 2;    //   and free checks that keep failing come up to 2^this as rarely
    static constexpr double  WIN_KEEP    = 0.8;  // window rates: ~5 recent windows of each policy
    static constexpr double  CHECK_KEEP  = 0.5;  // a check window (the policy behind) weighs this much more
    static constexpr double  VETO        = 0.98; // drafting is vetoed while its windows run below this x plain
    static constexpr double  VETO_SHARE  = 0.25; //   and drafted in at least this share of their steps
    static constexpr double  CLEAR       = 1.3; // free windows this far above the modelled plain rate: no plain windows

    realized_rate real_plain;              // tokens per ms of plain windows
    realized_rate real_draft;              // tokens per ms of free windows (the controller drafting as it chooses)
    realized_rate real_share;              // the share of the free windows' steps that drafted (same weights)
    bool          window_plain    = false; // the current window decodes plainly
    bool          window_check    = false; // the current window runs the policy that is behind
    int32_t       window_left     = 0;     // steps left in it (0: the next step opens a window)
    int64_t       n_windows       = 0;
    int64_t       n_free_windows  = 0; // windows of each policy so far (the first one is not measured)
    int64_t       n_plain_windows = 0;
    int32_t       n_failed_checks = 0; // free check windows in a row that left drafting vetoed
    double        window_tok      = 0.0;
    double        window_ms       = 0.0;
    int32_t       window_drafts   = 0; // steps of the current window that drafted

    // own loop: a whole step emitted n_tok tokens in ms (cold: it carried a cold decode, left out of the
    // window's rate; drafted: it drafted); true when it ended a window (the next one opens: open_window)
    bool window_step(int32_t n_tok, double ms, bool cold, bool drafted);
    // the policy of the next window, from the measured rates (blocks: block mode, which times whole blocks of
    // each length end to end, plain ones included: no plain windows)
    void open_window(const step_model & m, bool blocks);
    // free windows were measured slower than plain ones (end to end). Free windows that drafted in fewer
    // than VETO_SHARE of their steps measured the controller's plain steps, not drafting, and veto nothing.
    bool vetoed(const step_model & m) const;
    // free windows run so far above the model's plain rate that plain windows would only cost time
    // (the plain rate: the model's, or the measured one where plain windows ran and measured faster)
    bool clear(const step_model & m) const;
    // a new cost model: the measured windows go
    void forget_windows();

    // ---- sleeping ----
    // Where plain decoding keeps winning for QUIET steps, the MTP side costs even while it drafts nothing: the
    // target outputs its hidden state every step and the deferred rows are written now and then. The engine
    // then sleeps: queue and MTP KV dropped, every step plain, and once every engine on the target context
    // sleeps (a server's slots) its hidden states off: exactly as with MTP off. It wakes after sleep_len steps,
    // rebuilds the MTP KV from there on (the head sees a shorter context at first: only speed depends on it)
    // and probes after WAKE_PROBE steps.
    static constexpr int64_t QUIET      = 512;   // steps in a row without drafting chosen before the MTP side sleeps
    static constexpr int64_t QUIET_FAR  = 128;   //   and where drafting is measured far behind (see quiet_limit)
    static constexpr double  FAR        = 1.05;  //   "far": plain decoding's long-run rate this much above drafting's
    static constexpr int64_t SLEEP_MIN  = 1024;  // steps of the first sleep; a sleep whose waking finds
    static constexpr int64_t SLEEP_MAX  = 16384; //   nothing to draft doubles the next one, up to this
    // steps after waking before a probe: the MTP KV restarts empty, and a draft attends only over the rows
    // written since (a probe too soon measures the head worse than it is)
    static constexpr int64_t WAKE_PROBE = 128;

    int64_t quiet_run  = 0;         // steps since the controller last chose to draft (probes: quiet)
    int64_t sleep_len  = SLEEP_MIN; // the next sleep's length
    bool    asleep     = false;     // the MTP side sleeps
    int64_t sleep_left = 0;         // steps until it wakes
    int64_t wake_probe = 0;         // steps left until the probe after waking (0: none pending)

    // quiet steps before the MTP side sleeps: sooner where drafting's costs are measured (drafts_timed: D's
    // samples) and it is far behind (behind: the planner's last), as each probe that waking would spare costs
    // in proportion to the gap
    int64_t quiet_limit(int64_t drafts_timed, double behind) const {
        return drafts_timed >= cost_model::MEASURED && behind >= FAR ? QUIET_FAR : QUIET;
    }
    // after the plan chose k: whether the MTP side falls asleep at this step (quiet_limit plain steps in a
    // row; drafting chosen, not a probe, resets the run and makes the next sleep short again)
    bool quiet_step(int32_t k, bool probing, int64_t drafts_timed, double behind);
    // the MTP side fell asleep, for sleep_len steps (the next sleep doubles, up to SLEEP_MAX)
    void fell_asleep() {
        asleep     = true;
        sleep_left = sleep_len;
        sleep_len  = std::min(2 * sleep_len, SLEEP_MAX);
        quiet_run  = 0;
    }
    // asleep: a plain step; true when the sleep is over
    bool dormant_step() {
        n_dormant++;
        return --sleep_left <= 0;
    }
    // the MTP side woke: a probe after WAKE_PROBE steps, in a fresh free window (the sleeping steps are no
    // window's; a plain window would hold the probe back, and the MTP side could fall asleep again before it ran)
    void wake();
    // the probe after waking is due now (the MTP KV has rebuilt a little since waking)
    bool wake_due() { return wake_probe > 0 && --wake_probe == 0; }

    // ---- what it did (reset with the engine's stats) ----
    int64_t n_vetoed       = 0;
    int64_t n_dormant      = 0; // steps decoded while the MTP side slept
    int64_t n_blocks_ended = 0; // untimed drafting blocks ended early as they lost (BLK_TRY, hopeless)
};

} // namespace mtp
