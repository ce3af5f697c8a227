#pragma once

// pymtp: the adaptive draft controller. Each step it decides how many tokens to draft, from 0 (a plain
// decode) up to a maximum, and may stop drafting early within the step. It maximises expected tokens
// per unit of time from two models it learns while running:
//
//   cost        per sequence of a target batch: T(n), the target decode (and sampling) when this sequence
//               puts n tokens in the batch, one table per load (sequences in the batch; the engine's own
//               loop is load 1, llama-server reports its busy slots); D, one draft decode; W, the MTP
//               catch-up after a step that accepted drafts (own loop: what those rows add to the next
//               draft decode, which writes them ahead of its own row);
//   acceptance  per draft mode and position, P(draft i accepted | drafts before it accepted) (a position
//               seldom reached leans on the one before it), and the same per bucket of the head's own
//               confidence: the top probability of q, or the softmax top of the MTP logits (greedy
//               drafts: computed next to the argmax, on the backend when it runs there); while nothing
//               is drafted the recent rates drift back towards the long-run ones (text changes).
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

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

namespace mtp {

// A quantity measured over and over: the first sample only until a second replaces it (a first decode
// of a shape is cold: graph building, CUDA graph capture), then the plain mean, then an exponential
// average that follows drift (a machine under other load, a longer context).
struct running_mean {
    double  v = 0.0;
    int64_t n = 0;

    void add(double x, double w = 0.1) {
        n++;
        const double m = (double) std::max<int64_t>(1, n - 1); // samples in the mean, the cold one dropped
        v += (n <= 2 ? 1.0 : std::max(w, 1.0 / m)) * (x - v);
    }
};

// A weighted least-squares line through points (n, y): verify costs by batch size. Its slope is at least 0.
struct line_fit {
    double  sw = 0.0, sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
    int32_t points = 0;
    int32_t last   = 0; // the n of the last point added

    void add(int32_t n, double y, double w = 1.0) {
        sw += w;
        sx += w * n;
        sy += w * y;
        sxx += w * n * n;
        sxy += w * n * y;
        points++;
        last = n;
    }

    // the line's value at n (two points or more)
    double at(int32_t n) const {
        const double slope = std::max(0.0, (sw * sxy - sx * sy) / std::max(1e-12, sw * sxx - sx * sx));
        return (sy - slope * sx) / sw + slope * n;
    }
};

// A ratio of two exponentially decayed sums over windows: tokens per ms of a kind of step as measured end
// to end, or the share of a kind of window's steps that drafted.
struct realized_rate {
    double tok = 0.0;
    double ms  = 0.0;
    double n   = 0.0;

    void add(double tokens, double time_ms, double keep) {
        tok = keep * tok + tokens;
        ms  = keep * ms + time_ms;
        n   = keep * n + 1.0;
    }
    double get() const { return ms > 0.0 ? tok / ms : 0.0; }
};

// Time per step of a kind of step as measured end to end (exponentially decayed sums).
struct realized_cost {
    double ms = 0.0;
    double n  = 0.0;

    void add(double time_ms, double steps, double keep) {
        ms = keep * ms + time_ms;
        n  = keep * n + steps;
    }
    double get() const { return n > 0.0 ? ms / n : 0.0; }
};

// A success rate from exponentially decayed counts, shrunk towards a prior with a weight of
// pseudo-observations.
struct decayed_rate {
    double s = 0.0;
    double n = 0.0;

    void add(bool ok, double keep) {
        s = keep * s + (ok ? 1.0 : 0.0);
        n = keep * n + 1.0;
    }
    double get(double prior, double weight) const { return (s + prior * weight) / (n + weight); }
};

struct controller {
    static constexpr int32_t K           = LLAMA_MTP_MAX_DRAFT;
    static constexpr int32_t LOADS       = 16;    // loads 1..16 tracked apart (more: as 16)
    static constexpr int32_t BINS        = 8;     // confidence buckets of [0, 1]
    static constexpr int32_t MODES       = 3;     // greedy, chain, stochastic
    static constexpr int32_t QUEUE       = 256;   // deferred MTP rows written once this many wait
    static constexpr double  KEEP        = 0.99;  // acceptance counts decay: ~100 recent drafts per position
    static constexpr double  KEEP_LONG   = 0.999; // the long-run acceptance: ~1000 recent drafts per position
    // Steps without a draft verified after which the recent acceptance counts half, the long-run one the
    // rest (see accept). Text runs easier and harder by the answer and within one: the recent rate that
    // made plain decoding lead says less of the text now the longer nothing measures it. (The simulator,
    // the built-in model's H200 costs, answers 0.65-1.35x as easy every 150 steps: 12 runs of 40 slept
    // through easy text after one hard stretch, 0.99x of MTP off where fixed k=3 ran 1.09x; with this,
    // 6 of 40, and auto +0.7% over 100 seeds, +1.4% on smol-v3-h100.)
    static constexpr double  STALE_HALF  = 128.0;
    static constexpr double  PRIOR_A     = 0.6; // acceptance before any is measured (optimistic: it probes)
    static constexpr double  PRIOR_W     = 2.0;
    static constexpr double  PRIOR_D     = 0.25; // a draft decode before one is timed, in plain steps
    static constexpr double  PRIOR_DV    = 0.15; // extra verify cost per token before measured, in plain steps
    static constexpr double  DWELL       = 16.0; // steps a change of decode size is expected to last
    static constexpr int32_t BLOCK       = 16;   // block mode: steps that keep one draft length, at least
    static constexpr int32_t BLOCK_MAX   = 256;  //   and at most (see block_len)
    static constexpr double  BLOCK_SHARE = 0.05; //   a block's two changes of size: this share of its plain steps
    static constexpr double  SWEEP =
        0.85; // block mode: a length not yet run is tried where the model puts it this close
    static constexpr int32_t BLK_SKIP  = 2;   // block mode: a block's first steps (a change of size) are not timed
    static constexpr double  BLK_KEEP  = 0.7; // block mode: realized costs per length, ~3 recent blocks
    // block mode where blocks are not timed end to end (several sequences share the batch): a drafting
    // block (a choice or a probe) ends once BLK_TRY steps of it have re-measured its costs and acceptance
    // and the model no longer puts its length ahead of plain decoding. (Four llama-server slots on this
    // 2-core CPU: a slot chose a 16-step k=7 block from a model that its first step corrected to half
    // plain's rate, and held it; on an H200 blocks there run up to 256 steps, and four slots lost 10-44%
    // in the rounds where slots woke and probed.)
    static constexpr int32_t BLK_TRY   = 8;
    static constexpr double  FREE      = 0.05; // block mode when a size change costs more than this of a plain step
    static constexpr int32_t WINDOW    = 32;   // steps per window (own loop: whole windows are timed)
    static constexpr int32_t CHECK     = 8;    // every 8th window runs the policy that is behind
    static constexpr double  WIN_KEEP  = 0.8;  // window rates: ~5 recent windows of each policy
    static constexpr double  VETO      = 0.98; // drafting is vetoed while its windows run below this x plain
    static constexpr int64_t QUIET     = 512;  // steps in a row without drafting chosen before the MTP side sleeps
    static constexpr int64_t QUIET_FAR = 128;  //   and where drafting is measured far behind (see quiet_limit)
    static constexpr double  FAR    = 1.05; //   "far": plain decoding's long-run rate this much above drafting's best
    // Near break-even the choice leans to plain decoding: a plain step while awake costs AWAKE more than
    // one asleep (the hidden state output and the deferred rows: H100, SmolLM2 2.4%; this 2-core CPU
    // ~1.7%), which is what plain decoding costs in the long run (it sleeps), and the model's own errors
    // there run optimistic for drafting (acceptance learned from ~100 drafts, a length's block cost the
    // recent average of noisy blocks it kept winning: +1.5-3% in the simulator), so drafting must also
    // lead by MARGIN. Drafting is chosen over plain decoding only where its modelled rate is LEAD x
    // plain's (awake) rate.
    static constexpr double  AWAKE  = 0.02;
    static constexpr double  MARGIN = 0.02;
    static constexpr double  LEAD   = (1.0 + MARGIN) / (1.0 - AWAKE);
    static constexpr int64_t SLEEP_MIN    = 1024;  // steps of the first sleep; a sleep whose waking finds
    static constexpr int64_t SLEEP_MAX    = 16384; //   nothing to draft doubles the next one, up to this
    // steps after waking before a probe: the MTP KV restarts empty, and a draft attends only over the rows
    // written since (SmolLM2's v2 head on 12 MT-Bench answers, position 1 / 2 with the MTP KV cut to the
    // last 32 rows: 0.471 / 0.194, 64: 0.503 / 0.234, 128: 0.516 / 0.251, whole: 0.536 / 0.264). A probe
    // 32 steps after waking measured a head 12% worse than it was (and the server's one-slot engine slept
    // again where k=2 ran 1.04-1.09x of plain); 128 awake plain steps cost ~3 plain steps a wake (AWAKE).
    static constexpr int64_t WAKE_PROBE   = 128;
    static constexpr int32_t COLD_DRAFTS  = 4; // draft decodes left untimed at the start and after waking (new graphs)
    static constexpr int32_t COLD_TARGETS = 8; // target decodes left untimed at the start and after waking (H100,
                                               //   SmolLM2: the first ~10 take 3-12 ms against 1.3 ms warm)
    static constexpr double  CLEAR      = 1.3; // free windows this far above the modelled plain rate: no plain windows
    static constexpr double  CHECK_KEEP = 0.5; // a check window (the policy behind) weighs this much more

    int32_t k_max  = 0;     // 0: off, every step drafts the length it is given
    int32_t par    = 0;     // a parallel head drafts up to par tokens in one decode (0: one per decode)
    bool    pinned = false; // tests: the cost model is fixed (llama_mtp_pin_adaptive_costs)

    // ---- learned ----
    running_mean  target[LOADS][K + 1];           // T(n) of the whole batch at load l + 1: index n - 1 (steady decodes)
    bool          steady_seen[LOADS][K + 1] = {}; // T(n) has steady samples (else changed-size ones stand in)
    // On a GPU (graphs), the decodes of a size that build its graphs are left untimed: its first decode
    // (graph built) and the first one right after a decode of the same size (the CUDA graph captured).
    // H100, the first sizes of a run: the 27B shape, a 4-token verify 28.6 ms, 45 ms, then 35.6 ms at its
    // first repeat, against 19-21 ms warm; SmolLM2, a 2-token verify 7.3-7.9 ms against ~1.6 ms. As
    // samples they made verifies look 2-4x dearer and drafting lost for a whole run.
    bool          graphs                    = false; // the target decodes on a GPU (per-size graphs, captured)
    bool          size_met[LOADS][K + 1]    = {};    // a decode of this size has been seen
    bool          size_held[LOADS][K + 1]   = {};    // a decode of this size right after one of the same size
    running_mean  draft_own;                         // D, as this engine timed it (see drafts())
    running_mean  catchup;                           // W
    running_mean  overhead;  // O: a step's time outside the parts above (the caller's loop included)
    running_mean  sampling;  // caller-decoded targets: sampling one verified row (the caller times
                             // only the decode; the engine's own loop times both together)
    running_mean  switching; // S: what a decode of a new size costs on top of a steady one (a GPU
                             // backend re-captures its graph: ~2 slow decodes after each change)
    decayed_rate  acc[MODES][K];
    decayed_rate  acc_long[MODES][K]; // the same over a longer run (KEEP_LONG)
    int64_t       stale        = 0;   // steps since a draft was last verified (asleep ones included)
    double        recent_share = 1.0; // the recent acceptance's weight: 2^(-(stale - 1) / STALE_HALF)
    decayed_rate  cal[MODES][K][BINS];
    // What the model cannot see (a GPU finishing one step's MTP catch-up during the next step, a catch-up
    // the deferral pushes onto the next drafting step, the caller's work per token) shows only in the
    // end-to-end rate of many steps. The engine's own loop times whole windows of WINDOW steps (so does a
    // llama-server of one slot: a step runs from one llama_mtp_draft to the next): windows
    // where the controller decides freely, and windows of plain steps only. While free windows run below
    // plain ones, the following windows decode plainly (every CHECK-th one decides freely again, to see
    // whether that changed); otherwise every CHECK-th window is a plain one, to keep its rate measured.
    realized_rate real_plain;              // tokens per ms of plain windows
    realized_rate real_draft;              // tokens per ms of free windows (the controller drafting as it chooses)
    realized_rate real_share;              // the share of the free windows' steps that drafted (same weights)
    bool          window_plain    = false; // the current window decodes plainly
    int32_t       window_left     = 0;     // steps left in it (0: the next step opens a window)
    int64_t       n_windows       = 0;
    int64_t       n_free_windows  = 0; // windows of each policy so far (the first one is not measured)
    int64_t       n_plain_windows = 0;
    int32_t       n_failed_checks = 0; // free check windows in a row that left drafting vetoed
    // Sleeping: where plain decoding keeps winning for QUIET steps, the MTP side costs even while it
    // drafts nothing: the target outputs its hidden state every step and the deferred rows are written
    // now and then (H100, SmolLM2: 2.4% of a plain step; this 2-core CPU, four llama-server slots that
    // never drafted: 0.96x of MTP off). The engine then sleeps: queue and MTP KV dropped, every step
    // plain, and once every engine on the target context sleeps (a server's slots) its hidden states
    // off: exactly as with MTP off. It wakes after sleep_len steps, rebuilds the MTP KV from there on
    // (the head sees a shorter context at first: only speed depends on it) and probes after WAKE_PROBE
    // steps.
    int64_t       quiet_run       = 0; // steps since the controller last chose to draft (probes: quiet)
    double  behind      = 1.0; // the last plan: plain decoding's long-run (asleep) rate over the best drafting length's
                               //   (1: drafting leads)
    int64_t sleep_len   = SLEEP_MIN;   // the next sleep's length
    bool    asleep      = false;       // the MTP side sleeps
    int64_t sleep_left  = 0;           // steps until it wakes
    int64_t wake_probe  = 0;           // steps left until the probe after waking (0: none pending)
    int32_t cold_drafts = COLD_DRAFTS; // draft decodes left untimed (new graphs: at the start, after waking)
    int32_t cold_targets              = COLD_TARGETS; // target decodes left untimed (the same)
    int32_t cold_catchups             = COLD_DRAFTS;  // catch-up decodes left untimed (the same)
    bool    step_cold                 = false;        // a decode of the step under way went untimed as cold
    // A new generation's first steps carry its start: the prompt's MTP catch-up lands in the first timed part,
    // and on a GPU each decode size's graph is captured again at its first use (new KV window). Timed, they would
    // make whichever length ran across a start look dear; they are left out of every timing (began: GEN_COLD
    // steps from the next plan on). docs/adaptive.md, "Warm-up and a fresh engine's start".
    static constexpr int32_t GEN_COLD = 2;
    int32_t                  gen_cold = 0;     // steps of a new generation still to leave untimed
    bool                     step_gen = false; // the step under way is one of them
    // a new generation (sequence) starts on this engine: its first steps go untimed
    void                     began() { gen_cold = start_rules ? GEN_COLD : 0; }
    // The rules of a fresh engine's start: primed costs (prime), a new generation's first steps untimed (began),
    // a first drafting block while acceptance is unmeasured (plan_block). PYMTP_ADAPTIVE_START=0 in the
    // environment turns all three off (A/B runs against the controller without them).
    bool                     start_rules = true;
    static constexpr double  OPTIMISM    = 0.85; // the first probe's length: the best if each draft accepted this often
    bool    catchup_met[K + 1]           = {};   // a catch-up decode of this many rows has been seen (GPU: captured)
    bool    window_check                 = false; // the current window runs the policy that is behind
    double  window_tok                   = 0.0;
    double  window_ms                    = 0.0;
    int32_t window_drafts                = 0; // steps of the current window that drafted

    // What engines drafting on one MTP context (llama-server's slots, llama_mtp_share_costs) learn together:
    // D, which any one's draft decode times for all, and the context's first draft decodes (its graphs built
    // and captured), left untimed once for the group instead of once per engine (after waking each engine's
    // own first ones still are: its KV restarted). (Four slots on an H200: each slot drafted 3 times in a
    // bench's first requests, all untimed as its first 4, so D stayed unknown and every slot probed at four
    // slots after waking to time it, before it could tell that no draft pays there.) Null: this engine's own.
    struct draft_costs {
        running_mean d;
        int32_t      cold = 0; // the context's first draft decodes still to go untimed
    };
    std::shared_ptr<draft_costs> draft_group;

    running_mean &       drafts() { return draft_group ? draft_group->d : draft_own; }
    const running_mean & drafts() const { return draft_group ? draft_group->d : draft_own; }

    // A parallel head (par > 1): D of a pass of n rows (index n - 1), timed on passes with nothing written ahead.
    // The rows are not free: H200, the built-in model, 1-4 rows 0.205 / 0.250 / 0.320 / 0.381 of a plain step,
    // and one D for every size, timed on a 4-row probe, made a 1-row pass look twice its cost (auto chose plain
    // steps and k=1 over k=2: docs/journal/2026-11-29-parallel-head-training.md). On a GPU each size
    // builds and captures its own graphs: its first pass and its first repeat go untimed, as target sizes do.
    running_mean pass_d[K];
    bool         pass_met[K]  = {};
    bool         pass_held[K] = {};
    int32_t      pass_prev    = 0; // the last pass's rows

    // ---- the current step ----
    int32_t       mode            = 0;   // draft mode index (0 greedy, 1 chain, 2 stochastic)
    int32_t       load            = 1;   // sequences in the target batch (last reported)
    double        rate            = 0.0; // R: tokens per ms the step must beat
    double        p_all           = 1.0; // probability that every draft kept so far is accepted
    bool          probing         = false;
    bool          plain           = false; // this step drafts nothing (catch-up may be deferred)
    int32_t       pending         = 0;     // tokens of this sequence in the coming target decode (caller-decoded)
    int32_t       step_cap        = 0;     // the most this step may draft (plan's cap)
    int32_t       n_prev[2]       = {};    // sizes of the last two target decodes of this sequence
    int64_t       plain_run       = 0;     // plain steps since the last drafting one
    int64_t       draft_run       = 0;     // drafting steps since the last plain one
    int64_t       n_stops         = 0;     // drafts stopped by the rule (every 16th goes one further)
    bool          extending       = false; // this draft explores one position past the rule's stop
    bool          hold            = false; // block mode: this step drafts exactly its planned length
    int32_t       block_k         = -1;    // block mode: the draft length of the current block
    int32_t       block_left      = 0;     // block mode: steps left in it
    int64_t       n_blocks        = 0;
    int64_t       blk_since_probe = 0; // block mode: blocks since one tried a neighbour
    int32_t       blk_age         = 0; // block mode: steps of the current block planned so far
    // untimed drafting blocks end where they lose (BLK_TRY), and nothing probes where no acceptance could pay
    // (hopeless); PYMTP_ADAPTIVE_NO_CUTOFF=1 in the environment turns both off (A/B runs)
    bool          cutoff          = true;
    bool          blk_probe       = false; // block mode: the current block tries a neighbour
    realized_cost blk[K + 1];              // block mode, own loop: time per step realized by recent blocks of each
                                           //   length (in block_unit)
    double  blk_time  = 0.0;   // the current block's steady steps so far, in block_unit (end to end, caller included)
    int32_t blk_steps = 0;     //   (steps that drafted the block's length, after its first BLK_SKIP)
    int32_t blk_seen  = 0;     // steps of the current block so far
    int32_t k_last    = 0;     // what the last step drafted
    bool    own_loop  = false; // whole steps are timed (the engine's own loop; a one-slot llama-server)
    std::vector<float> conf;   // confidence of each kept draft of this step (< 0: unknown)

    // ---- what it did (reset with the engine's stats) ----
    int64_t steps_k[K + 1] = {};
    int64_t n_probes       = 0;
    int64_t n_cut          = 0;
    int64_t n_extended     = 0;
    int64_t n_deferred     = 0;
    int64_t n_vetoed       = 0;
    int64_t n_dormant      = 0; // steps decoded while the MTP side slept
    int64_t n_blocks_ended = 0; // untimed drafting blocks ended early as they lost (BLK_TRY, hopeless)

    bool    on() const { return k_max > 0; }
    // quiet steps before the MTP side sleeps. Where drafting's costs are measured and it is far
    // behind, sooner: each probe that waking would spare costs in proportion to the gap (the 2-core CPU,
    // SmolLM2, drafting ~11% behind: awake, the probes and check blocks of a 1024-step run cost ~1-2%)
    int64_t quiet_limit() const { return drafts().n >= 3 && behind >= FAR ? QUIET_FAR : QUIET; }
    // after plan() chose k: whether the MTP side falls asleep at this step (quiet_limit plain
    // steps in a row; drafting chosen resets the run and makes the next sleep short again)
    bool    sleeps_now(int32_t k) {
        if (k > 0 && !probing) {
            quiet_run = 0;
            sleep_len = SLEEP_MIN;
            return false;
        }
        // never before the probe after waking has run (WAKE_PROBE equals QUIET_FAR: a plain window
        // that held the probe back let the quiet run put the MTP side back to sleep unprobed)
        return ++quiet_run >= quiet_limit() && k == 0 && wake_probe == 0;
    }
    // the MTP side fell asleep, for sleep_len steps (the next sleep doubles, up to SLEEP_MAX)
    void fell_asleep() {
        asleep     = true;
        sleep_left = sleep_len;
        sleep_len  = std::min(2 * sleep_len, SLEEP_MAX);
        quiet_run  = 0;
    }
    // asleep: this step is a plain one; true when the sleep is over (the caller wakes its MTP side)
    bool asleep_step() {
        n_dormant++;
        aged();
        return --sleep_left <= 0;
    }
    // how far drafting's best rate is behind plain decoding's long-run (asleep) rate
    static double lag(double plain_rate, double draft_rate) {
        return plain_rate / (1.0 - AWAKE) / std::max(draft_rate, 1e-12);
    }
    // free windows were measured slower than plain ones (end to end). Free windows that drafted in fewer
    // than a quarter of their steps measured the controller's plain steps, not drafting, and veto nothing.
    // (The simulator with Gemma 3 270M's CPU costs at T=0.7: a first draft rejected, the next free window
    // all plain steps and two probes, measured 0.96x of the plain one; the veto then held plain decoding
    // until the MTP side slept, 0.99x of MTP off where k=2 ran 1.4x. A real run ended asleep at 1.03x.)
    bool vetoed() const {
        return !clear() && real_plain.n > 0.0 && real_draft.n > 0.0 && real_share.get() >= 0.25 &&
               real_draft.get() < VETO * real_plain.get();
    }
    // free windows run so far above the model's plain rate that plain windows would only cost time
    // (the plain rate: the model's, or the measured one where plain windows ran and measured faster)
    bool clear() const {
        const double r0 = std::max(ratio(0), real_plain.n > 0.0 ? real_plain.get() : 0.0);
        return real_draft.n > 0.0 && r0 > 0.0 && real_draft.get() >= CLEAR * r0;
    }
    // the policy of the next window, from the measured rates
    void    next_window();
    // own loop: a whole step (the caller's time before it included) emitted n_tok tokens in ms
    void    stepped(int32_t n_tok, double ms);
    // Block mode: where a change of decode size is dear (a GPU backend re-captures its graph for ~2
    // decodes after each change), per-step choices would keep the graphs cold; the controller then
    // chooses a draft length for BLOCK steps at a time and drafts exactly that (no cuts). In its own loop
    // the engine times the steady steps of whole blocks end to end: a length's realized time per step
    // replaces the model's cost of it, and scales the model's costs of lengths not yet run (the model
    // misses what lands between its timed parts). Tokens per step come from the learned acceptance, not
    // from the block's own luck (16 steps of 4-token drafts vary ~8% in tokens, ~1% in time). A
    // neighbour of the choice not yet measured gets the next block, a short one (so the choice climbs
    // to the best length in a few blocks), and once both are, every 8th block tries k+1, k-1 or plain in
    // turn, to keep them measured.
    bool    blocky() const { return switching.n >= 4 && 2.0 * switching.v > FREE * plain_batch_cost(); }
    // a plain step's estimated time for the whole batch (target_cost is per sequence)
    double  plain_batch_cost() const { return target_cost(1) * std::clamp(load, 1, LOADS); }
    int32_t plan_block(int32_t k_cap);
    // block mode: each length's time per step as its blocks realized it end to end (own loop), else the model's
    // scaled by realized/modelled over the lengths that ran (the model misses what lands between its timed parts)
    struct block_view {
        const controller & c;
        int32_t            k_cap;
        double             unit;        // realized block costs are kept in this unit (block_unit)
        double             scale = 1.0; // realized / modelled time over the lengths whose blocks ran
        block_view(const controller & c, int32_t k_cap);
        double time(int32_t k) const { return c.blk[k].n > 0.0 ? c.blk[k].get() * unit : scale * c.step_time(k); }
        double rate(int32_t k) const { return c.tokens(k) / std::max(time(k), 1e-12); }
        bool   known(int32_t k) const { return k >= 0 && k <= k_cap && c.blk[k].n > 0.0; }
    };
    void    end_block();                                    // the ended block's realized time per step, recorded
    void    new_block(int32_t k_cap, bool woke, bool ends); // the next block's length and whether it probes
    // the best length for a new block (cur: the length running now, no change of size to pay)
    int32_t block_choice(const block_view & v, int32_t cur, int32_t blen) const;
    // the length a block may try instead of best_k (*fresh: one not yet run, tried at once)
    int32_t block_alternative(const block_view & v, int32_t best_k, bool * fresh) const;
    // the length the next block probes instead of best_k (-1: none)
    int32_t block_probe(const block_view & v, int32_t best_k, int32_t best_draft_k, bool woke);
    // the first probe while acceptance is unmeasured (OPTIMISM)
    int32_t first_probe(const block_view & v) const;
    // block mode: steps per block, so that a block's two changes of size (2 S) cost at most BLOCK_SHARE of
    // as many plain steps (BLOCK..BLOCK_MAX; a probe block is half as long)
    int32_t block_len() const;
    // block mode: the unit of realized block costs. On a CPU, plain steps of now (the modelled plain
    // step, which follows the latest plain decodes): its speed drifts (this 2-core machine: plain steps
    // 10.2-13.8 ms within one run), and in ms a k=1 block timed while it ran fast beat plain blocks timed
    // later while it ran slow, so drafting resumed where it lost ~15%. On a GPU, ms: its plain cost
    // moves with graph captures and size changes, not with the machine (the simulated H100 with dear
    // size changes drifted to k=4 at 0.91x where k=2 ran 1.01x, in plain steps).
    double  block_unit() const { return graphs ? 1.0 : step_time(0); }
    // Drafting cannot pay at this load whatever the acceptance: with every draft accepted, each length's
    // step (its draft decodes, and a verify at least as dear as the cheapest one measured steady here, or a
    // plain step) still emits fewer tokens per ms than plain decoding. Measured costs only (three draft
    // decodes timed, a steady plain batch at this load). Then no probe drafts: acceptance cannot change
    // the answer, only costs can. (Four llama-server slots on an H200, the built-in model: a draft decode
    // took 0.41 ms against a plain batch's 0.42 ms per slot, and a slot's verify row took the batch from
    // 1.65 to 3.8 ms; each slot's probe after waking cost the round 5-10%.)
    bool    hopeless(int32_t k_cap) const;
    // Where the target context splits a batch whose sequences hold different row counts (splits: a KV stream
    // per sequence, llama-server's --parallel N without --kv-unified; a recurrent state), a verify among plain
    // sequences runs as two decodes: one row of every sequence, then this one's other rows. Its least cost
    // per sequence at this load, as target_cost counts it: its share of the plain batch, plus a whole decode
    // (at least a one-row decode timed where this sequence ran alone, else that share: L rows cost no more
    // than L one-row decodes); 0 where nothing splits. hopeless() takes it as the least a verify costs. (Four
    // slots on an H200, the built-in model: one slot's verify row took the batch from 1.46 to 3.37 ms,
    // bench/batch_split_cost.py.)
    double  split_floor() const;
    bool    splits = false;
    // block mode: whole blocks are timed end to end (the engine's own loop, a one-slot llama-server)
    bool    blocks_timed() const { return own_loop && load <= 1; }

    // estimated time per sequence of a target decode holding n tokens of this sequence (ms)
    double target_cost(int32_t n) const;
    // the whole batch's time of a steady decode of n >= 2 tokens (at the current load) from steady samples
    // alone: the size's own, else extrapolated from the other sizes that ran steady (0: no steady plain step)
    double steady_cost(int32_t n) const;
    double draft_cost() const;
    // the draft decodes of a step drafting k: k, or one per par tokens with a parallel head (within a pass the
    // next draft adds nothing: keep() and best_extension() take differences of this)
    double draft_time(int32_t k) const { return (par > 1 ? (k + par - 1) / par : k) * draft_cost(); }
    // D of a parallel head's pass of n rows: its own, else the nearest size timed, else D
    double pass_cost(int32_t n) const;
    // what a step drafting k spends drafting: draft_time(k), a parallel head's passes by their rows
    double step_draft_time(int32_t k) const;
    // estimated P(draft i accepted | drafts before it accepted), at confidence c (< 0: unknown): the recent
    // rate, drawn towards the long-run one as it goes stale
    double accept(int32_t i, float c) const;
    // a step passed (planned or asleep): the acceptance measured so far is one step older (a step right
    // after a verified one sees it whole)
    void   aged() {
        stale++;
        recent_share = std::exp2(-(double) (stale - 1) / STALE_HALF);
    }
    // expected tokens of a step drafting k (every draft kept), and that step's modelled time (ms)
    double tokens(int32_t k) const;
    double step_time(int32_t k) const;
    // expected tokens per ms of drafting k (k = 0: plain decoding)
    double ratio(int32_t k, double extra_ms = 0.0) const; // extra_ms: a one-off cost of this step
    // a step's time outside its timed parts, and the caller's time between steps (learned while on)
    void   timed_overhead(double ms) {
        if (on() && !pinned && ms >= 0.0 && ms < 100.0) {
            overhead.add(overhead.n >= 3 ? std::min(ms, 4.0 * overhead.v + 0.05) : ms);
        }
    }
    // one-off cost of a target decode of n tokens now: S when n differs from the last size
    double switch_cost(int32_t n) const;

    // a target decode of n tokens of this sequence now: its estimated time and any change of size
    double  size_cost(int32_t n) const;
    // the best value (expected tokens - R x time) over the lengths j >= i a kept draft i leads to, where
    // P(drafts 0..i all accepted) = p and the verify would otherwise hold n_from rows
    double  best_extension(int32_t i, double p, int32_t n_from) const;
    // before drafting: the most tokens this step may draft (0: a plain step); k_cap is the caller's cap
    int32_t plan(int32_t k_cap);
    // after draft i (0-based) with confidence c: whether to keep it; *more: whether to draft another
    bool    keep(int32_t i, float c, bool * more);
    // the step drafted k tokens (after any cut)
    void    drafted(int32_t k);
    // verification of the step's k drafts accepted n_acc of them
    void    verified(int32_t k, int32_t n_acc);
    // a target decode holding n tokens of this sequence, among `load` sequences, took ms (learned while on)
    void    timed_target(int32_t n, int32_t n_load, double ms);
    // caller-decoded: a decode of n_tokens rows of n_seqs sequences, `own` of them this one's, took ms
    void    timed_batch(int32_t own, int32_t n_seqs, int32_t n_tokens, double ms);
    // caller-decoded: verifying n rows (sampling) took ms; the MTP catch-up of a verified step took ms
    void    timed_sampling(int32_t n, double ms) {
        if (on() && !pinned && n > 0) {
            sampling.add(ms / n);
        }
    }
    // the MTP catch-up of a verified step's n rows took ms. Its cold decodes go untimed as the drafts' do:
    // the first ones at the start and after waking, and on a GPU the first of each size (graphs built and
    // captured). Timed, they made W 6 ms against 0.2 warm (H100, SmolLM2, llama-server of one slot: the
    // first two catch-ups 7.8 and 15 ms), and drafting looked 0.2-0.7 ms a step dearer than it was for
    // hundreds of steps, long enough to send the MTP side to sleep where k=2 ran 1.09x of MTP off.
    void timed_catchup(int32_t n, double ms) {
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
        if (on() && !pinned) {
            catchup.add(catchup.n >= 3 ? std::min(ms, 4.0 * catchup.v) : ms);
        }
    }
    // a draft decode and its draft choice took ms (learned while on); rows > 0: a parallel head's pass of rows
    void timed_draft(double ms, int32_t rows = 0) {
        if (step_gen) {
            return;
        }
        if (rows > 0 && !pass_warm(rows)) {
            step_cold = true;
            return;
        }
        if (cold_drafts > 0) {
            step_cold = true;
            cold_drafts--; // just woken: the MTP context's KV restarted, its graphs are new (H100: D 0.2 -> 1.8)
            return;
        }
        if (draft_group && draft_group->cold > 0) { // the group's context is new
            step_cold = true;
            draft_group->cold--;
            return;
        }
        if (on() && !pinned) {
            running_mean & d = drafts();
            d.add(d.n >= 3 ? std::min(ms, 4.0 * d.v) : ms);
            if (rows > 0) {
                running_mean & p = pass_d[std::min(rows, K) - 1];
                p.add(p.n >= 3 ? std::min(ms, 4.0 * p.v) : ms);
            }
        }
    }
    // a pass of this many rows now: whether its graphs are warm (always off a GPU; see pass_d)
    bool pass_warm(int32_t rows) {
        const int32_t i    = std::min(rows, K) - 1;
        const bool    held = rows == pass_prev;
        pass_prev          = rows;
        if (!graphs || (pass_met[i] && (!held || pass_held[i]))) {
            return true;
        }
        (pass_met[i] ? pass_held[i] : pass_met[i]) = true;
        return false;
    }
    // the MTP side woke (own loop): new graphs and KV, so the first decodes go untimed, and a probe
    // after WAKE_PROBE steps. (Discounting the acceptance measured before the sleep, so that the probe's
    // drafts would move it more, was tried: it pulled the estimate towards the optimistic prior, and on the
    // H100 at T=0.7 auto drafted where every length lost, 0.87-0.91x of MTP off.)
    void woke();
    // whether teacher-forced MTP rows may wait (plain decoding leads)
    bool defer_catchup() const { return on() && plain && !probing; }

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

    // Costs measured at load: the engine's warm-up on a GPU (mtp-warmup.cpp, time_warm_sizes) times each target
    // decode size 1..n_sizes at load 1 with its graphs captured (t_ms[n - 1]), a lone draft decode (D) and a change
    // of decode size (S). Each stands as PRIOR_N samples, so the first steps plan with measured costs (and block
    // mode starts at once where S is dear) instead of plain steps and probes that time them; the decodes of the
    // requests take over as they come (running means). Costs of 0 or less are left unmeasured.
    static constexpr int64_t PRIOR_N = 12;
    bool                     primed  = false; // prime() timed the target's decode sizes
    void                     prime(const double * t_ms, int32_t n_sizes, double d_ms, double s_ms);
    void                     pin_costs(double plain_ms, double draft_ms, double verify_extra_ms);
    void                     reset_stats();
    void                     fill_stats(llama_mtp_adaptive_stats * out) const;
};

} // namespace mtp
