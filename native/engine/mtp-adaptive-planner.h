#pragma once

// pymtp: the adaptive controller's planner (mtp-adaptive.h has the whole controller): the choice of each
// step's draft length from the models (step_model), and within the step where the drafts stop.
//
// Per step (a change of decode size cheap): the best ratio E/C over k = 0..k_cap is the rate R to beat,
// drafting only where it beats plain decoding by LEAD, and within the step after each draft the draft is
// kept only if some length it leads to pays at rate R (keep_draft).
//
// Block mode: where a change of decode size is dear (a GPU backend re-captures its graph for ~2 decodes
// after each change), per-step choices would keep the graphs cold; the planner then chooses a draft length
// for BLOCK steps at a time and drafts exactly that (no cuts). In its own loop the engine times the steady
// steps of whole blocks end to end: a length's realized time per step replaces the model's cost of it, and
// scales the model's costs of lengths not yet run (the model misses what lands between its timed parts).
// Tokens per step come from the learned acceptance, not from the block's own luck (a block's tokens vary far
// more than its time). A neighbour of the choice not yet measured gets the next block, a short one (so the
// choice climbs to the best length in a few blocks), and once both are, every NEIGHBOUR_EVERY-th block tries
// k+1, k-1 or plain in turn, to keep them measured.

#include "mtp-adaptive-step.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mtp {

struct planner {
    static constexpr int32_t K               = LLAMA_MTP_MAX_DRAFT;
    // Near break-even the choice leans to plain decoding: a plain step while awake costs AWAKE more than one
    // asleep (the hidden state output and the deferred rows), which is what plain decoding costs in the long
    // run (it sleeps), and the model's own errors there run optimistic for drafting (acceptance learned from
    // ~100 drafts, a length's block cost the recent average of noisy blocks it kept winning), so drafting must
    // also lead by MARGIN. Drafting is chosen over plain decoding only where its modelled rate is LEAD x
    // plain's (awake) rate.
    static constexpr double  AWAKE           = 0.02;
    static constexpr double  MARGIN          = 0.02;
    static constexpr double  LEAD            = (1.0 + MARGIN) / (1.0 - AWAKE);
    static constexpr int32_t EXPLORE_EVERY   = 16;   // every this many drafts the cut rule stops goes one further
    static constexpr double  FREE            = 0.05; // block mode when a size change costs more than this of a plain
    static constexpr int64_t BLOCK_AFTER     = 4;    //   step, measured this many times
    static constexpr int32_t BLOCK           = 16;   // block mode: steps that keep one draft length, at least
    static constexpr int32_t BLOCK_MAX       = 256;  //   and at most (see block_len)
    static constexpr double  BLOCK_SHARE     = 0.05; //   a block's two changes of size: this share of its plain steps
    static constexpr double  BLOCK_CHANGES   = 2.0;  //   (changes of size per block: into its length and out of it)
    static constexpr double  SWEEP           = 0.85; // a length not yet run is tried where the model puts it this close
    static constexpr int32_t BLK_SKIP        = 2;    // a block's first steps (a change of size) are not timed
    static constexpr int32_t BLK_STEPS       = 3;    // a block's realized time counts from this many steady steps
    static constexpr double  BLK_KEEP        = 0.7;  // realized costs per length: ~3 recent blocks
    static constexpr int32_t NEIGHBOUR_EVERY = 8;    // every this many blocks one tries a neighbour (k+1, k-1, plain)
    static constexpr double  NEIGHBOUR_POW   = 8.0;  // a measured neighbour behind by a gap g: g^this times as rarely,
    static constexpr double  NEIGHBOUR_RARE  = 16.0; //   at most this many times
    static constexpr double  OPTIMISM = 0.85; // the first probe's length: the best if each draft accepted this often

    // ---- the current step ----
    double             rate      = 0.0; // R: tokens per ms the step must beat
    double             p_all     = 1.0; // probability that every draft kept so far is accepted
    bool               probing   = false;
    bool               plain     = false; // this step drafts nothing (catch-up may be deferred)
    int32_t            step_cap  = 0;     // the most this step may draft (plan's cap)
    int64_t            n_stops   = 0;     // drafts stopped by the rule (every EXPLORE_EVERY-th goes one further)
    bool               extending = false; // this draft explores one position past the rule's stop
    bool               hold      = false; // block mode: this step drafts exactly its planned length
    int32_t            k_last    = 0;     // what the last step drafted
    std::vector<float> conf;              // confidence of each kept draft of this step (< 0: unknown)
    double behind = 1.0; // the last plan: plain decoding's long-run (asleep) rate over the best drafting length's
                         //   (1: drafting leads)

    // ---- block mode ----
    int32_t       block_k         = -1;    // the draft length of the current block
    int32_t       block_left      = 0;     // steps left in it
    int64_t       blk_since_probe = 0;     // blocks since one tried a neighbour
    int32_t       blk_age         = 0;     // steps of the current block planned so far
    bool          blk_probe       = false; // the current block tries a neighbour
    realized_cost blk[K + 1];        // own loop: time per step realized by recent blocks of each length (in block_unit)
    double        blk_time  = 0.0;   // the current block's steady steps so far, in block_unit (end to end, caller
    int32_t       blk_steps = 0;     //   included; steps that drafted the block's length, after its first BLK_SKIP)
    int32_t       blk_seen  = 0;     // steps of the current block so far
    bool          own_loop  = false; // whole steps are timed (the engine's own loop; a one-slot llama-server)

    // ---- what it did (reset with the engine's stats) ----
    int64_t n_probes   = 0;
    int64_t n_cut      = 0;
    int64_t n_extended = 0;
    int64_t n_blocks   = 0;

    // a new step: nothing drafted, kept or decided yet
    void begin_step();

    // ---- per step ----
    struct choice {
        int32_t best_k  = 0;   // the best length (0: plain decoding leads)
        double  best    = 0.0; // its rate now, a change of size included
        int32_t probe_k = 0;   // the best drafting length (where plain leads: what a probe drafts)
        double  probe   = 0.0; //   and its rate now
    };
    // the best length now, each length's change of decode size included; sets rate and behind
    choice        choose(const step_model & m, int32_t k_cap);
    // how far drafting's best rate is behind plain decoding's long-run (asleep) rate
    static double lag(double plain_rate, double draft_rate) {
        return plain_rate / (1.0 - AWAKE) / std::max(draft_rate, 1e-12);
    }
    // after draft i (0-based) with confidence c: whether to keep it; *more: whether to draft another
    bool   keep_draft(const step_model & m, int32_t i, float c, bool * more);
    // the best value (expected tokens - R x time) over the lengths j >= i a kept draft i leads to, where
    // P(drafts 0..i all accepted) = p and the verify would otherwise hold n_from rows
    double best_extension(const step_model & m, int32_t i, double p, int32_t n_from) const;

    // ---- block mode ----
    // a change of decode size is dear enough for block mode
    static bool block_mode(const cost_model & c) {
        return c.switching.n >= BLOCK_AFTER && cost_model::CHANGE_DECODES * c.switching.v > FREE * c.plain_batch_cost();
    }
    // steps per block, so that a block's two changes of size cost at most BLOCK_SHARE of as many plain steps
    // (BLOCK..BLOCK_MAX; a probe block is half as long)
    static int32_t block_len(const cost_model & c);
    // the unit of realized block costs: on a CPU plain steps of now (the modelled plain step, which follows the
    // latest plain decodes: a CPU's speed drifts, and blocks timed at different speeds compare only in it); on
    // a GPU ms (its plain cost moves with graph captures and size changes, not with the machine)
    static double  block_unit(const step_model & m) { return m.cost.graphs ? 1.0 : m.time(0); }
    // whole blocks are timed end to end (the engine's own loop, a one-slot llama-server)
    bool           blocks_timed(const cost_model & c) const { return own_loop && c.load <= 1; }
    // each length's time per step as its blocks realized it end to end (own loop), else the model's scaled by
    // realized/modelled over the lengths that ran (the model misses what lands between its timed parts)
    struct block_view {
        const planner &    p;
        const step_model & m;
        int32_t            k_cap;
        double             unit;        // realized block costs are kept in this unit (block_unit)
        double             scale = 1.0; // realized / modelled time over the lengths whose blocks ran
        block_view(const planner & owner, const step_model & models, int32_t cap);
        double time(int32_t k) const { return p.blk[k].n > 0.0 ? p.blk[k].get() * unit : scale * m.time(k); }
        double rate(int32_t k) const { return m.tokens(k) / std::max(time(k), 1e-12); }
        bool   known(int32_t k) const { return k >= 0 && k <= k_cap && p.blk[k].n > 0.0; }
    };
    // what the supervisor rules for a new block
    struct block_rules {
        bool woke     = false; // just woken, the MTP KV rebuilt a little: where plain leads, probe drafting
        bool ends     = false; // the block ended early as it lost: a change of size is charged to it, not to plain
        bool hopeless = false; // no drafting can pay at this load: no drafting probe
        bool first    = false; // the start rules hold and nothing is drafted yet: a first probe (first_probe)
    };
    // the next block's length and whether it probes
    void    new_block(const step_model & m, int32_t k_cap, const block_rules & r);
    // the ended block's realized time per step, recorded
    void    end_block();
    // the best length for a new block (cur: the length running now, no change of size to pay)
    int32_t block_choice(const block_view & v, int32_t cur, int32_t blen) const;
    // the length a block may try instead of best_k (*fresh: one not yet run, tried at once)
    int32_t block_alternative(const block_view & v, int32_t best_k, bool * fresh) const;
    // the length the next block probes instead of best_k (-1: none)
    int32_t block_probe(const block_view & v, int32_t best_k, int32_t best_draft_k, const block_rules & r);
    // the first probe while acceptance is unmeasured (OPTIMISM)
    int32_t first_probe(const block_view & v) const;
    // own loop: a whole step of the current block took ms (cold: it carried a cold decode, not timed)
    void    time_block_step(const step_model & m, double ms, bool cold);
    // a new cost model: the realized block costs go
    void    forget_blocks();
};

} // namespace mtp
