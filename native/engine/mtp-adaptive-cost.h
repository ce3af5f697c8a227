#pragma once

// pymtp: the adaptive controller's cost model (mtp-adaptive.h has the whole controller). What a step of
// length k costs, per sequence of the target batch, from costs learned while the controller runs:
//
//   T(n)  the target decode (and sampling) when this sequence puts n tokens in the batch, one table per
//         load (sequences in the batch; the engine's own loop is load 1, llama-server reports its busy
//         slots); sizes not timed come from a line through the timed ones
//   D     one draft decode (a parallel head: one per pass size)
//   W     the MTP catch-up after a step that accepted drafts (own loop: what those rows add to the next
//         draft decode, which writes them ahead of its own row)
//   S     what a decode of a new size costs on top of a steady one
//   O     a step's time outside those parts (the caller's loop included)
//
// A step drafting k costs O + k D + T(k + 1) + W a_0 (a_0: the first draft's acceptance), a plain step
// T(1) + O. The engine reports each timed part (learn_*); the warm-up's timings at load prime it (prime).
// Cold decodes (graphs built or captured, a KV just restarted, a new generation's start) are left untimed.

#include "llama-mtp.h"
#include "mtp-adaptive-measures.h"

#include <algorithm>
#include <cstdint>
#include <memory>

namespace mtp {

struct cost_model {
    static constexpr int32_t K              = LLAMA_MTP_MAX_DRAFT;
    static constexpr int32_t LOADS          = 16;    // loads 1..16 tracked apart (more: as 16)
    static constexpr double  PRIOR_D        = 0.25;  // a draft decode before one is timed, in plain steps
    static constexpr double  PRIOR_DV       = 0.15;  // extra verify cost per token before measured, in plain steps
    static constexpr double  DWELL          = 16.0;  // steps a change of decode size is expected to last
    static constexpr double  CHANGE_DECODES = 2.0;   // a change of decode size costs about this many slow decodes
    static constexpr int32_t COLD_DRAFTS    = 4;     // draft and catch-up decodes left untimed at the start and after
                                                     //   waking (new graphs, the MTP KV restarted)
    static constexpr int32_t COLD_TARGETS   = 8;     // target decodes left untimed at the start and after waking
    static constexpr int64_t PRIOR_N        = 12;    // samples each of the warm-up's timings stands for (prime)
    static constexpr int64_t WARM           = 2;     // samples of a cost that hold a warm one (the cold first replaced)
    static constexpr int64_t MEASURED       = 3;     // samples after which a cost counts as measured; later samples
    static constexpr double  OUTLIER        = 4.0;   //   count at most this many times its mean (a stalled decode)
    static constexpr double  OVERHEAD_SLACK = 0.05;  // ms O's cap allows above OUTLIER x its mean
    static constexpr double  OVERHEAD_MAX   = 100.0; // ms: a step's time outside its parts above this is a pause
    static constexpr int64_t FIT_SAMPLES    = 20;    // a verify size weighs its samples in T(n)'s line, up to this
    static constexpr double  FIT_STEADY     = 4.0;   //   and a steady size's weigh this much more
    static constexpr double  CHANGED_MIN    = 0.5;   // a changed-size sample less S stands for at least this of itself
    static constexpr double  DRIFT_LOW      = 0.5;   // a changed-size decode less S follows drift only where it
    static constexpr double  DRIFT_HIGH     = 2.0;   //   lands within this band of T(n)

    bool    pinned  = false; // tests: the cost model is fixed (llama_mtp_pin_adaptive_costs)
    int32_t par     = 0;     // a parallel head drafts up to par tokens in one decode (0: one per decode)
    int32_t load    = 1;     // sequences in the target batch (last reported)
    int32_t pending = 0;     // tokens of this sequence in the coming target decode (caller-decoded)

    // ---- learned ----
    running_mean target[LOADS][K + 1];           // T(n) of the whole batch at load l + 1: index n - 1 (steady decodes)
    bool         steady_seen[LOADS][K + 1] = {}; // T(n) has steady samples (else changed-size ones stand in)
    // On a GPU (graphs), the decodes of a size that build its graphs are left untimed: its first decode
    // (graph built) and the first one right after a decode of the same size (the CUDA graph captured).
    bool         graphs                    = false; // the target decodes on a GPU (per-size graphs, captured)
    bool         size_met[LOADS][K + 1]    = {};    // a decode of this size has been seen
    bool         size_held[LOADS][K + 1]   = {};    // a decode of this size right after one of the same size
    running_mean draft_own;                         // D, as this engine timed it (see drafts())
    running_mean catchup;                           // W
    running_mean overhead;                          // O: a step's time outside the parts above
    running_mean sampling;       // caller-decoded targets: sampling one verified row (the caller times
                                 // only the decode; the engine's own loop times both together)
    running_mean switching;      // S: what a decode of a new size costs on top of a steady one (a GPU
                                 // backend re-captures its graph: ~2 slow decodes after each change)
    int32_t      n_prev[2] = {}; // sizes of the last two target decodes of this sequence

    // What engines drafting on one MTP context (llama-server's slots, llama_mtp_share_costs) learn together:
    // D, which any one's draft decode times for all, and the context's first draft decodes (its graphs built
    // and captured), left untimed once for the group instead of once per engine (after waking each engine's
    // own first ones still are: its KV restarted). Null: this engine's own.
    struct draft_costs {
        running_mean d;
        int32_t      cold = 0; // the context's first draft decodes still to go untimed
    };
    std::shared_ptr<draft_costs> draft_group;

    running_mean &       drafts() { return draft_group ? draft_group->d : draft_own; }
    const running_mean & drafts() const { return draft_group ? draft_group->d : draft_own; }

    // A parallel head (par > 1): D of a pass of n rows (index n - 1), timed on passes with nothing written
    // ahead; each size has its own (the rows are not free). On a GPU each size builds and captures its own
    // graphs: its first pass and its first repeat go untimed, as target sizes do.
    running_mean pass_d[K];
    bool         pass_met[K]  = {};
    bool         pass_held[K] = {};
    int32_t      pass_prev    = 0; // the last pass's rows

    // Cold decodes, left untimed: the first ones at the start and after waking, and a new generation's
    // first steps (step_gen, set by the controller's start rule)
    int32_t cold_drafts        = COLD_DRAFTS;  // draft decodes left untimed
    int32_t cold_targets       = COLD_TARGETS; // target decodes left untimed
    int32_t cold_catchups      = COLD_DRAFTS;  // catch-up decodes left untimed
    bool    catchup_met[K + 1] = {};           // a catch-up decode of this many rows has been seen (GPU: captured)
    bool    step_cold          = false;        // a decode of the step under way went untimed as cold
    bool    step_gen           = false;        // the step under way is one of a new generation's first
    bool    primed             = false;        // prime() timed the target's decode sizes

    // ---- estimates (ms) ----
    // estimated time per sequence of a target decode holding n tokens of this sequence
    double target_cost(int32_t n) const;
    // the whole batch's time of a steady decode of n >= 2 tokens (at the current load) from steady samples
    // alone: the size's own, else extrapolated from the other sizes that ran steady (0: no steady plain step)
    double steady_cost(int32_t n) const;
    // Where the target context splits a batch whose sequences hold different row counts (splits: a KV stream
    // per sequence, llama-server's --parallel N without --kv-unified; a recurrent state), a verify among plain
    // sequences runs as two decodes: one row of every sequence, then this one's other rows. Its least cost
    // per sequence at this load, as target_cost counts it: its share of the plain batch, plus a whole decode
    // (at least a one-row decode timed where this sequence ran alone, else that share: L rows cost no more
    // than L one-row decodes); 0 where nothing splits.
    double split_floor() const;
    bool   splits = false;
    // a plain step's estimated time for the whole batch (target_cost is per sequence)
    double plain_batch_cost() const { return target_cost(1) * std::clamp(load, 1, LOADS); }
    // the plain cost is not measured: not at all, or (several sequences) not MEASURED times steady at this load
    bool   plain_unknown() const;
    double draft_cost() const;
    // the draft decodes of a step drafting k: k, or one per par tokens with a parallel head (within a pass the
    // next draft adds nothing: the cut rule takes differences of this)
    double draft_time(int32_t k) const { return (par > 1 ? (k + par - 1) / par : k) * draft_cost(); }
    // D of a parallel head's pass of n rows: its own, else the nearest size timed, else D
    double pass_cost(int32_t n) const;
    // what a step drafting k spends drafting: draft_time(k), a parallel head's passes by their rows
    double step_draft_time(int32_t k) const;
    // one-off cost of a target decode of n tokens now: CHANGE_DECODES x S when n differs from the last size,
    // charged over the DWELL steps a choice is expected to last
    double switch_cost(int32_t n) const;
    // a target decode of n tokens of this sequence now: its estimated time and any change of size
    double size_cost(int32_t n) const { return target_cost(n) + switch_cost(n); }
    // the modelled time of a step drafting k (k = 0: a plain step), its first draft accepted at accept0
    double step_ms(int32_t k, double accept0) const;

    // ---- learning: on, the controller runs (costs are learned only then) ----
    // a target decode holding n tokens of this sequence, among n_load sequences, took ms
    void learn_target(bool on, int32_t n, int32_t n_load, double ms);
    // caller-decoded: a decode of n_tokens rows of n_seqs sequences, `own` of them this one's, took ms
    void learn_batch(bool on, int32_t own, int32_t n_seqs, int32_t n_tokens, double ms);
    // caller-decoded: verifying n rows (sampling) took ms
    void learn_sampling(bool on, int32_t n, double ms) {
        if (on && !pinned && n > 0) {
            sampling.add(ms / n);
        }
    }
    // the MTP catch-up of a verified step's n rows took ms (its cold decodes untimed, as the drafts' are)
    void learn_catchup(bool on, int32_t n, double ms);
    // a draft decode and its draft choice took ms; rows > 0: a parallel head's pass of rows
    void learn_draft(bool on, double ms, int32_t rows);
    // a step's time outside its timed parts, and the caller's time between steps
    void learn_overhead(bool on, double ms) {
        if (on && !pinned && ms >= 0.0 && ms < OVERHEAD_MAX) {
            overhead.add(overhead.n >= MEASURED ? std::min(ms, OUTLIER * overhead.v + OVERHEAD_SLACK) : ms);
        }
    }
    // a pass of this many rows now: whether its graphs are warm (always off a GPU; see pass_d)
    bool pass_warm(int32_t rows);
    // whether the step that ended carried a cold decode or a new generation's start (and the next one starts clean)
    bool take_untimed() {
        const bool cold = step_cold || step_gen;
        step_cold       = false;
        return cold;
    }
    // the MTP side woke: its context's graphs and KV are new, so its first decodes go untimed again
    void restart_cold();

    // Costs measured at load: the engine's warm-up on a GPU (mtp-warmup.cpp, time_warm_sizes) times each target
    // decode size 1..n_sizes at load 1 with its graphs captured (t_ms[n - 1]), a lone draft decode (D) and a change
    // of decode size (S). Each stands as PRIOR_N samples, so the first steps plan with measured costs (and block
    // mode starts at once where S is dear) instead of plain steps and probes that time them; the decodes of the
    // requests take over as they come (running means). Costs of 0 or less are left unmeasured.
    void prime(const double * t_ms, int32_t n_sizes, double d_ms, double s_ms);
    // tests: the costs fixed (plain_ms > 0: T(n) = plain_ms + verify_extra_ms (n - 1), D = draft_ms), or
    // learned afresh (plain_ms <= 0)
    void pin(double plain_ms, double draft_ms, double verify_extra_ms);

  private:
    // a cost sample, capped once the cost is measured (a stalled decode moves it little)
    static void add_capped(running_mean & m, double ms) { m.add(m.n >= MEASURED ? std::min(ms, OUTLIER * m.v) : ms); }
    // a target decode of n tokens (repeat: the same size as the last one): whether it is timed; a cold one
    // (the start, a new generation, its size's graphs built or captured) is not
    bool        warm_target(int32_t n, bool repeat);
    // a timed target decode of n tokens: T(n) where the size stayed, else a changed-size sample (and of S)
    void        add_target(int32_t n, double ms, bool steady);
    // T(n)'s value from size j's samples: steady ones as they are, changed-size ones less S (at least CHANGED_MIN)
    double      sample_value(int32_t l, int32_t j) const;
    // T(n) of a size not known from its own samples: a line through the known verify sizes, else the prior's slope
    double      fitted_cost(int32_t l, int32_t n, bool warm) const;
};

} // namespace mtp
