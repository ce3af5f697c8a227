#pragma once

// pymtp: the MTP engine's internal state (struct llama_mtp), grouped by concern in the order a
// step uses it. The public C API is native/include/llama-mtp.h; each concern's code is a file:
//
//   llama-mtp.cpp      the C API: set-up, the engine's own loop (prefill/step), caller-decoded
//                      targets (observe/draft/verify for llama-server); it only orchestrates
//   mtp-kv-writer.cpp  the one writer of teacher-forced MTP KV rows (x_p, h_{p-1}), the target's
//                      hidden rows they pair with, and the named rollback (truncate_to)
//   mtp-heads.cpp      several MTP blocks: which head drafts a step, per-head caches kept equal to
//                      a from-scratch pass (cascade), state rings
//   mtp-draft.cpp      drafting: single- and multi-head, parallel heads (K drafts in one decode),
//                      greedy on the backend or with the request's sampler chain (q), inspection (peek)
//   mtp-backend-sampler.cpp  samplers that run where the logits are (drafts' and the own loop's target rows)
//   mtp-verify.cpp     verification: exact match, rejection sampling, synthetic acceptance; where the own
//                      loop's target rows are sampled
//   mtp-dist.cpp       distributions of a sampler chain (p, q) and the residual draw
//   mtp-names.cpp      the one vocabulary of options (draft modes, head policies, limits, "auto")
//   mtp-adaptive.cpp   the adaptive draft controller: how many tokens each step drafts (0..k_max); its parts
//                      mtp-adaptive-{cost,acceptance,planner,supervisor}.cpp (mtp-adaptive.h lists them)

#include "llama-mtp.h"
#include "llama-mtp-testing.h"
#include "mtp-adaptive.h"
#include "mtp-backend-sampler.h"
#include "mtp-dist.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace mtp {

using clock_type = std::chrono::steady_clock;

inline double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// whether the model's decodes run on a GPU (its output layer's device; native/models/model-device.cpp)
bool decodes_on_gpu(const llama_model * model);

// whether the context runs a batch whose sequences hold different row counts as several ubatches (a KV stream
// per sequence, or a recurrent state; native/models/batch-split.cpp)
bool splits_uneven_batches(const llama_context * ctx);

// PYMTP_ADAPTIVE_ALONE=1 in the environment: each engine's controller learns as if it decoded alone (no split
// floor, no shared draft cost; A/B runs)
inline bool adaptive_alone() {
    const char * env = std::getenv("PYMTP_ADAPTIVE_ALONE");
    return env != nullptr && std::strcmp(env, "1") == 0;
}

// add one token (with an optional hidden-state row) to a batch
bool batch_add(llama_batch_ext * batch, llama_seq_id seq, llama_token id, llama_pos pos, const float * h,
               int32_t n_embd, bool output);

// The target's nextn hidden rows of its last decode of this sequence: h_p for p in [p0, p0 + n).
// h_{p-1} is what the MTP entry of position p pairs with, and what a draft after p-1 starts from.
struct target_rows {
    int32_t            n_embd = 0;
    std::vector<float> h;
    llama_pos          p0 = -1;
    int32_t            n  = 0;

    // h_p, or nullptr when the last decode did not produce it
    const float * at(llama_pos p) const {
        return p >= p0 && p < p0 + n ? h.data() + (size_t) (p - p0) * n_embd : nullptr;
    }
    void assign(const float * rows, llama_pos first, int32_t n_rows) {
        h.assign(rows, rows + (size_t) n_rows * n_embd);
        p0 = first;
        n  = n_rows;
    }
    void truncate_to(llama_pos p) { // forget h_q for q >= p
        n = std::max<int32_t>(0, std::min<int32_t>(n, p - p0));
    }
};

// Teacher-forced MTP KV entries not written yet: token x_p at position p with input row h_{p-1}.
struct row_queue {
    int32_t                  n_embd = 0;
    std::vector<llama_token> tok;
    std::vector<llama_pos>   pos;
    std::vector<float>       h;

    size_t size() const { return tok.size(); }
    bool   empty() const { return tok.empty(); }
    void   push(llama_token t, llama_pos p, const float * row) {
        tok.push_back(t);
        pos.push_back(p);
        h.insert(h.end(), row, row + n_embd);
    }
    void keep_first(size_t n) {
        tok.resize(n);
        pos.resize(n);
        h.resize(n * (size_t) n_embd);
    }
    void truncate_to(llama_pos p) { // drop entries at positions >= p (positions are increasing)
        size_t n = 0;
        while (n < pos.size() && pos[n] < p) {
            n++;
        }
        keep_first(n);
    }
    void drop_through(llama_pos p) { // drop entries at positions <= p
        size_t n = 0;
        while (n < pos.size() && pos[n] <= p) {
            n++;
        }
        tok.erase(tok.begin(), tok.begin() + n);
        pos.erase(pos.begin(), pos.begin() + n);
        h.erase(h.begin(), h.begin() + n * (size_t) n_embd);
    }
    void clear() { keep_first(0); }
    // entry e as a row of batch (written, no output)
    bool add_to(llama_batch_ext * batch, llama_seq_id seq, size_t e) const {
        return batch_add(batch, seq, tok[e], pos[e], h.data() + e * (size_t) n_embd, n_embd, false);
    }
};

// Output states g_j(p) of one head at its most recent positions: the input of head j+1 at p+1.
// A catch-up reads the row just before the rows it writes; rows further back are only needed after
// a rewind (a prefill reusing a prefix), and a rewind deeper than the ring feeds zeros there.
struct state_ring {
    static constexpr int32_t R      = 64;
    int32_t                  n_embd = 0;
    std::vector<float>       rows;
    std::vector<llama_pos>   pos;

    void          init(int32_t ne);
    const float * get(llama_pos p) const;
    void          put(llama_pos p, const float * h);
    void          truncate_to(llama_pos p);
};

// Rows that head 0 just wrote for one engine (rows row0.. of its last decode, positions p0..,
// tokens toks): the other heads write the same positions next (cascade).
struct head_run {
    llama_mtp *         m;
    int32_t             row0;
    int32_t             n;
    llama_pos           p0;
    const llama_token * toks;
};

} // namespace mtp

struct llama_mtp {
    // ---- set-up (llama_mtp_init) ----
    llama_context *     ctx_tgt = nullptr;
    llama_context *     ctx_mtp = nullptr; // nullptr: plain decoding
    const llama_vocab * vocab   = nullptr;
    llama_mtp_params    params{};
    int32_t             n_embd    = 0; // width of the nextn hidden rows
    int32_t             n_vocab   = 0;
    int32_t             n_ctx     = 0;
    int32_t             n_batch   = 0;
    int32_t             k_max     = LLAMA_MTP_MAX_DRAFT; // recurrent targets: bounded by their rollback snapshots
    bool                recurrent = false;               // recurrent/hybrid target: rolls back only through snapshots
    llama_batch_ext *   batch_tgt = nullptr;
    llama_batch_ext *   batch_mtp = nullptr;
    std::vector<float>  zeros; // the hidden row of a position the engine has no state for

    // ---- the sequence (the engine's own loop: llama_mtp_prefill / llama_mtp_step) ----
    std::vector<llama_token> tokens;                 // held by the target KV, in position order (size == n_past)
    bool                     logits_pending = false; // prefill left logits for the first token
    bool                     has_last       = false; // id_last was emitted but not decoded yet
    llama_token              id_last        = LLAMA_TOKEN_NULL;
    std::vector<llama_token> step_out;                  // the last step's emitted tokens (llama_mtp_step_logprobs)
    bool                     step_sampled_only = false; // it sampled the prefill's last row (-1); otherwise token
                                                        // i came from row i of its verify decode
    // where its target rows are sampled (llama_mtp_set_target_sampling, mtp-verify.cpp): on the host, or by a
    // backend sampler on the target context (the argmax, or the top candidates the request's chain goes on from)
    mtp::backend_pick        target_kind       = mtp::backend_pick::none;
    llama_sampler *          target_sampler    = nullptr;
    uint32_t                 target_rows       = 0;     // the target context's room for output rows per sequence
    bool                     rows_on_backend   = false; // the target decodes on a GPU (or PYMTP_VERIFY_ON_BACKEND=1)

    // ---- the MTP KV writer (mtp-kv-writer.cpp) ----
    mtp::target_rows target_h;     // the target's hidden rows of its last decode
    mtp::row_queue   queue;        // teacher-forced entries waiting to be written
    int32_t          n_mtp_kv = 0; // head 0's MTP KV holds [0, n_mtp_kv); between own-loop steps == n_past

    // ---- heads (mtp-heads.cpp): several MTP blocks; empty: one head, ctx_mtp ----
    std::vector<llama_context *>    heads;      // heads[0] == ctx_mtp
    std::vector<llama_batch_ext *>  head_batch; // head_batch[0] == batch_mtp
    llama_mtp_head_policy           policy = LLAMA_MTP_HEADS_PER_LAYER;
    std::vector<mtp::state_ring>    ring; // ring[j]: exact output states of head j (j < n_heads - 1)
    // this draft round: head j's output state at position p0 + t is round_h[j] row t (t < round_n[j])
    std::vector<std::vector<float>> round_h;
    std::vector<int32_t>            round_n;

    // ---- drafting (mtp-draft.cpp) ----
    llama_mtp_draft_mode         mode = LLAMA_MTP_DRAFT_GREEDY;
    std::mt19937                 rng{ 0 }; // stochastic drafts, rejection tests, synthetic acceptance
    std::vector<llama_token>     drafts;   // this step's drafts
    std::vector<mtp_dist>        q;        // their draft distributions (chain/stochastic modes)
    std::vector<float>           h_draft;  // the head's output state fed to its next draft step
    // what a draft decode samples on the backend (mtp-backend-sampler.h): nothing (the host takes the logits
    // row), the greedy argmax, or the top candidates that a chain/stochastic draft's q is made from
    std::vector<llama_sampler *> backend_samplers; // that sampler, one per MTP context
    mtp::backend_pick            backend_kind      = mtp::backend_pick::none;
    bool                         backend_draft_off = false; // not offloadable (or a test): the host takes the row
    std::vector<uint32_t>        backend_rows; // per MTP context: its outputs per sequence (told the backend sampler)
    float *                      peek_logits = nullptr; // llama_mtp_peek_draft: each step's MTP logits
    float                        draft_conf  = -1.0f;   // the head's confidence in the last draft (< 0: unknown)
    // parallel head (llama_model_mtp_parallel): one decode drafts up to n_par tokens; 0: one per decode
    int32_t                      n_par       = 0;
    std::vector<float>           par_mask; // its n_par - 1 mask rows (n_embd each)
    std::vector<float>           par_h;    // this step's input rows: h0, then h0 + mask_i
    bool draft_on_backend = false;         // PYMTP_DRAFT_ON_BACKEND=1: what is sampled there on a GPU is on a CPU too

    // per MTP context, the tokens its draft rows can hold (draft_support); empty: the whole vocabulary
    using draft_ids = std::vector<int32_t>;
    std::vector<std::pair<const llama_context *, draft_ids>> support;

    // ---- adaptive draft length (mtp-adaptive.cpp) ----
    mtp::controller             ctrl;
    mtp::clock_type::time_point step_exit{}; // when the last llama_mtp_step returned (the caller's time after it)
    bool                        step_exited = false;
    // caller-decoded (llama-server): one step of a sequence runs from one llama_mtp_draft to the next, and
    // emits as many tokens as their positions differ. Where the target context holds this sequence only
    // (a server of one slot), whole steps are timed that way for the controller's windows, as the own
    // loop times them.
    mtp::clock_type::time_point caller_t{};                // the last llama_mtp_draft's entry
    llama_pos                   caller_pos        = -1;    // its position (-1: no step under way that can be timed)
    bool                        caller_single     = false; // the target context holds one sequence (set at init)
    // traced (PYMTP_ADAPTIVE_TRACE, a server of one slot): the step under way's plan (-1: none or asleep),
    // its target decode, and the draft and catch-up ms totals when it began
    int32_t                     caller_k_plan     = -1;
    double                      caller_target_ms  = 0.0;
    double                      caller_draft_ms   = 0.0;
    double                      caller_catchup_ms = 0.0;

    // ---- verification (mtp-verify.cpp) ----
    mtp_dist                 p;           // target distribution at the position being verified
    std::vector<llama_token> verify_toks; // caller-decoded targets: [id_last, drafts] of the last draft
    std::vector<double>      synth_cond;  // benchmarking: P(accept draft i | drafts < i accepted)

    llama_mtp_stats stats{};

    // -- MTP KV writer, rollback (mtp-kv-writer.cpp) --
    llama_memory_t mem_tgt() const { return llama_get_memory(ctx_tgt); }
    llama_memory_t mem_mtp() const { return llama_get_memory(ctx_mtp); }
    int32_t        n_past() const { return (int32_t) tokens.size(); }

    // the target's nextn row h_p of its last decode, or zeros (only lowers draft quality)
    const float *  h_at(llama_pos p) const;
    // the target decoded toks[0..n) at positions p0.. as rows row0.. of its last decode (hidden rows
    // h_all): queue their MTP entries (x_p with h_{p-1}) replacing anything at >= p0, keep the rows
    void           observe(const llama_token * toks, int32_t n, llama_pos p0, const float * h_all, int32_t row0);
    // write the queued entries of these engines (one MTP context) in as few MTP decodes as fit a batch
    static int32_t write_queued(const std::vector<llama_mtp *> & engines);
    // the caller may have changed this sequence's MTP KV: drop queued entries it holds, restart on a gap
    void           align_queue();
    // rollback: the MTP side (every head's KV, rings, queue, hidden rows) keeps positions [0, p)
    void           truncate_mtp_to(llama_pos p);
    // rollback: the target KV keeps [0, p); false when it cannot (a recurrent state without a snapshot)
    bool           truncate_target_to(llama_pos p);
    // the target decodes toks[0..n) at positions p0..; logits for all rows or only the last
    int32_t        decode_target(const llama_token * toks, int32_t n, llama_pos p0, bool all_logits, bool last_logits);
    // own loop: after a target decode of toks at p0.., write their MTP entries (or queue them while the
    // controller defers the catch-up). for_draft: a verified step's entries, which a single head's next draft
    // decode writes ahead of its own row (queue_ahead): one MTP decode a step instead of two
    int32_t        catch_up(const llama_token * toks, int32_t n, llama_pos p0, bool for_draft = false);
    // Before a draft decode of n_after rows from p0: the queued entries are written now unless that decode can
    // write them ahead of its rows (they end at p0 - 1, one decode holds them all, one head)
    int32_t        write_unless_ahead(llama_pos p0, int32_t n_after);
    // then, on the cleared batch_mtp: the queued entries as its first rows; how many (-1: the batch is full)
    int32_t        queue_ahead();
    // write the entries deferred while plain decoding led: the MTP KV must be complete before a draft
    int32_t        flush_deferred();
    // the MTP side sleeps (queue, hidden rows and MTP KV dropped; nothing observed is kept) and wakes (the
    // MTP KV restarts at the next observed position). The target's hidden-state output is its context's:
    // it stops once every engine on that context sleeps (a server's slots each sleep on their own) and
    // comes back with the first one that wakes (hidden_output)
    void           sleep();
    void           wake();
    // this engine's share of its target context's hidden-state output: on while any engine there is awake
    static void    hidden_output(llama_context * ctx_tgt, bool awake);
    // the adaptive controller's draft length for this step (at most k), asleep or awake: asleep, 0 (a plain
    // step, as with MTP off) and a step nearer waking; awake, plan(k), falling asleep where plain decoding
    // has kept winning. k_plan: what plan() allowed, traced (-1: asleep, no plan)
    int32_t        plan_step(int32_t k, int32_t * k_plan);
    // whether observed entries wait in the queue (the controller defers and the queue is not full)
    bool           defers() const { return ctrl.defer_catchup() && queue.size() < mtp::controller::QUEUE; }

    // -- warm-up (mtp-warmup.cpp) --
    bool    on_gpu = false; // the target decodes on a GPU (graphs built per decode size, CUDA graphs captured)
    // whether the engine warms up: on a GPU (PYMTP_WARMUP=1 anywhere, 0 never)
    bool    warms_up() const;
    // the target decode sizes a step of this engine can make: 1..warm_sizes()
    int32_t warm_sizes() const;
    // decode every verify and catch-up size twice and remove it all: graphs built and captured before
    // the first step (the engine's state after it is the one before)
    void    warm_up();
    int32_t n_warmed = 0; // target decode sizes warmed up (1..n_warmed)
    // each target decode size 1..warm_sizes() twice as a step makes it (with_mtp: and the MTP decodes after it,
    // drafts following draft_chain, nullptr: greedy), all removed again; the sizes done before a decode failed
    int32_t warm_decodes(llama_sampler * draft_chain, bool with_mtp);
    // after warm_decodes: each warmed size, a lone draft row and changes of size timed warm, as the controller's
    // prior (controller::prime)
    void    time_warm_sizes();
    // the same for a request's way of sampling (llama_mtp_set_target_sampling: the backend samplers it attaches
    // change every size's graphs), once per way, on an empty context; the request's state is left untouched
    void    warm_sampling(llama_sampler * chain);
    int32_t warmed_way        = -1; // the way of sampling last warmed (3 x target kind + draft kind; -1: none)
    int32_t n_warmed_sampling = 0;  // target decode sizes warmed up for it

    // -- heads (mtp-heads.cpp) --
    bool           multi() const { return heads.size() > 1; }
    int32_t        n_heads() const { return ctx_mtp == nullptr ? 0 : multi() ? (int32_t) heads.size() : 1; }
    int32_t        head_of_step(int32_t i) const;  // which head drafts step i
    int32_t        feeder_of(int32_t j) const;     // whose state at p-1 feeds head j's draft row at p
    void           heads_truncate_to(llama_pos p); // heads 1.. and the rings keep [0, p) (p = -1: nothing)
    void           heads_align();                  // heads 1.. never hold more than head 0
    static int32_t cascade(std::vector<mtp::head_run> & runs);
    int32_t        set_heads(llama_context ** ctx_heads, int32_t n);

    // -- drafting (mtp-draft.cpp) --
    int32_t           draft_at(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * smpl,
                               bool keep_first);
    int32_t           draft_single(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path,
                                   bool keep_first);
    int32_t           draft_multi(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path);
    int32_t           draft_parallel(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path,
                                     bool keep_first);
    void              init_parallel(); // n_par and the mask rows of ctx_mtp's head 0
    llama_sampler *   draft_path(llama_sampler * smpl);
    llama_token       choose_draft(llama_sampler * path, llama_context * ctx, int32_t row, int32_t i);
    // after choose_draft: ask the controller whether draft i stays and whether another follows
    bool              keep_draft(int32_t i, bool * more);
    // draft i (from choose_draft) joins `drafts` when it exists and the controller keeps it; whether
    // drafting goes on (false: none left, cut, an end-of-generation token, or the next does not pay)
    bool              take_draft(llama_token tok, int32_t i);
    // a draft decode's time for the controller; n_ahead: queued entries it wrote before its own rows
    void              timed_draft_decode(int32_t n_ahead, double ms, int32_t rows = 0); // rows: a parallel pass
    void              set_backend_draft(mtp::backend_pick kind);
    mtp::backend_pick wanted_backend_draft(const llama_sampler * path) const;

    // The tokens that draft rows of ctx can hold, found from its first row: a head with a draft vocabulary
    // scores N tokens and leaves -inf everywhere else. Empty: the whole vocabulary.
    const draft_ids & draft_support(const llama_context * ctx, const float * logits);

    // -- verification (mtp-verify.cpp) --
    int32_t verify(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out,
                   int32_t row0);
    int32_t verify_exact(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out,
                         int32_t row0);
    int32_t verify_stochastic(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out,
                              int32_t row0);
    bool    synthetic_accept(int32_t i, llama_token draft_tok);
    void    set_target_pick(mtp::backend_pick kind);
};
