#pragma once

// pymtp: MTP (multi-token prediction) speculative decoding, one implementation
// used by every front-end (Python bindings through this C API, llama-server).
//
// A llama_mtp drives one sequence of a target context and, optionally, an MTP
// context (LLAMA_CONTEXT_TYPE_MTP) created on the same model. The caller owns
// the generation loop at step granularity:
//
//     llama_mtp_prefill(mtp, prompt, n)          // context := prompt (reuses the common prefix)
//     while (...) {
//         n = llama_mtp_step(mtp, smpl, k, out, cap)   // emits 1..k+1 tokens
//     }
//
// Invariants (see docs/engine.md; the code is in native/engine/, by concern):
//   - the target KV holds exactly the prompt plus every emitted token but the
//     last one (the last emitted token is decoded by the next step);
//   - the MTP KV at position p holds (x_p, h_{p-1}), h = target nextn hidden state;
//   - drafting never touches the target KV or the caller's sampler: the sampler
//     only sees the tokens that are emitted, in order, exactly as without MTP.

#include "llama.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LLAMA_MTP_MAX_DRAFT 16

enum llama_mtp_status {
    LLAMA_MTP_OK           = 0,
    LLAMA_MTP_ERR_CTX_FULL = -1, // no room left in the context
    LLAMA_MTP_ERR_DECODE   = -2, // llama_decode / llama_process failed
    LLAMA_MTP_ERR_ARG      = -3, // invalid argument
    LLAMA_MTP_ERR_STATE    = -4, // call out of order (e.g. step before prefill)
};

// How drafts are chosen and verified.
enum llama_mtp_draft_mode {
    LLAMA_MTP_DRAFT_AUTO       = -1, // the user's "auto": resolve it per request with llama_mtp_draft_mode_auto
                                     // (llama_mtp_set_draft_mode takes it as greedy)
    LLAMA_MTP_DRAFT_GREEDY     = 0,  // argmax of the raw MTP logits; exact-match verification (upstream)
    LLAMA_MTP_DRAFT_CHAIN      = 1,  // top of q = the request's sampler chain on the MTP logits; exact-match
    LLAMA_MTP_DRAFT_STOCHASTIC = 2,  // x ~ q; rejection sampling against p = the chain on the target logits
};

struct llama_mtp_params {
    int32_t      n_draft; // default max draft tokens per step, 0..LLAMA_MTP_MAX_DRAFT (0 = no drafting)
    int32_t      n_batch; // prefill chunk size, 0 = llama_n_batch(ctx_tgt)
    llama_seq_id seq_id;  // the sequence driven in both contexts
};

struct llama_mtp_stats {
    int64_t n_prompt;          // prompt tokens decoded by prefill (after prefix reuse)
    int64_t n_reused;          // prompt tokens reused from the KV cache
    int64_t n_generated;       // tokens emitted by llama_mtp_step
    int64_t n_steps;           // steps that ran a target (verify) decode
    int64_t n_drafted;         // draft tokens proposed
    int64_t n_accepted;        // draft tokens accepted
    int64_t n_draft_decodes;   // MTP-context decodes for drafting
    int64_t n_catchup_decodes; // MTP-context decodes that write teacher-forced KV
    int64_t drafted_per_pos[LLAMA_MTP_MAX_DRAFT];
    int64_t accepted_per_pos[LLAMA_MTP_MAX_DRAFT];
    double  t_prefill_ms; // target + MTP decodes of the prompt
    double  t_draft_ms;   // MTP draft decodes + draft selection
    double  t_verify_ms;  // target decode of [last, drafts...]
    double  t_sample_ms;  // sampling the target distribution(s)
    double  t_catchup_ms; // MTP KV catch-up after acceptance
};

// Load a model together with a head-only GGUF holding its MTP layer(s) (blk.{n_layer}.*, e.g. from
// `pymtp graft`), as if they came from one file; params.load_mtp must be on for the head to be used.
// The head must match the model (architecture, width, block count) and the model must have no MTP
// layers of its own; a mismatch fails the load with "MTP head <file>: ..." in the log. (A function, not
// a llama_model_params field: that struct stays as upstream has it, for every binding.)
// A model with MTP layers of its own takes a draft-vocabulary file made by `pymtp trim` the same way
// (its MTP blocks then score only those tokens; "MTP draft vocabulary <file>: ..." on a mismatch).
LLAMA_API struct llama_model * llama_model_load_from_file_with_mtp_head(const char *              path_model,
                                                                        const char *              path_mtp_head,
                                                                        struct llama_model_params params);

// Whether the MTP layers of a model of this architecture (its general.architecture, e.g. "qwen35")
// can take a draft-vocabulary file.
LLAMA_API bool llama_mtp_draft_vocab_arch(const char * arch);

LLAMA_API struct llama_mtp_params llama_mtp_default_params(void);

// ctx_mtp may be NULL: the engine then runs plain one-token-per-step decoding
// through the same code path. Returns NULL on invalid arguments.
// Enables nextn embeddings on both contexts when ctx_mtp is given.
LLAMA_API struct llama_mtp * llama_mtp_init(struct llama_context * ctx_tgt, struct llama_context * ctx_mtp,
                                            struct llama_mtp_params params);

LLAMA_API void llama_mtp_free(struct llama_mtp * mtp);

// Make the context hold exactly tokens[0..n_tokens) and leave the logits of the
// last one pending for the next llama_mtp_step. The longest prefix shared with
// what the context already holds is kept (recurrent targets that cannot roll
// back that far are re-decoded from scratch). Returns LLAMA_MTP_OK or an error.
LLAMA_API int32_t llama_mtp_prefill(struct llama_mtp * mtp, const llama_token * tokens, int32_t n_tokens);

// One generation step. The first step after prefill samples one token from the
// pending logits. Later steps draft up to n_draft tokens with the MTP head
// (n_draft < 0: the default from params; clamped to the room left in the
// context), verify them in one batched target decode and sample the target
// distribution with smpl at each position: exact match (greedy/chain modes)
// accepts drafts while they equal the sampled token; stochastic mode accepts
// x with probability min(1, p(x)/q(x)) and otherwise draws from norm(max(0, p-q)).
// smpl only ever accepts the emitted tokens, in order; drafting uses a clone. Writes the emitted tokens (1..n_draft+1)
// to out and returns their number, or a negative llama_mtp_status. Stops early after an end-of-generation token.
LLAMA_API int32_t llama_mtp_step(struct llama_mtp * mtp, struct llama_sampler * smpl, int32_t n_draft,
                                 llama_token * out, int32_t n_out_max);

// Log-probabilities of the i-th token (0-based) the last llama_mtp_step emitted, from the target's
// own logits row for it: the model's distribution before any sampler (what llama.cpp's server
// reports by default and llama-cpp-python's logprobs). Writes the token's log-probability to
// *logprob (may be NULL) and the n_top most likely tokens, most likely first, to top_ids and
// top_logprobs. Returns how many top entries were written, or LLAMA_MTP_ERR_ARG (i out of range,
// n_top < 0, NULL arrays with n_top > 0) or LLAMA_MTP_ERR_STATE (no step since the last prefill or
// clear). The rows are the verify batch's, so this costs no decode; they stay valid until the next
// prefill, step or clear.
LLAMA_API int32_t llama_mtp_step_logprobs(struct llama_mtp * mtp, int32_t i, int32_t n_top, float * logprob,
                                          llama_token * top_ids, float * top_logprobs);

// Choose how the following steps draft and verify, and seed the engine's own RNG
// (used by stochastic drafting and rejection sampling; the chain's RNG is left alone
// in that mode). Chains that end in "greedy" always verify by exact match, so at
// temperature 0 every mode gives the same tokens.
LLAMA_API void llama_mtp_set_draft_mode(struct llama_mtp * mtp, enum llama_mtp_draft_mode mode, uint32_t seed);

// Forget the sequence: both contexts drop every position of the engine's sequence and the
// next llama_mtp_prefill starts from an empty context (no prefix reuse). For callers that
// need a cold start, e.g. to time prompt processing, or to free the KV between conversations.
LLAMA_API void llama_mtp_clear(struct llama_mtp * mtp);

// Tokens held by the target context (the last emitted token is not among them).
LLAMA_API int32_t llama_mtp_n_past(const struct llama_mtp * mtp);

// Whether drafting is possible (an MTP context was given).
LLAMA_API bool llama_mtp_has_draft(const struct llama_mtp * mtp);

// The largest draft a step can use: LLAMA_MTP_MAX_DRAFT, or for recurrent/hybrid
// targets the context's n_rs_seq (rollback snapshots); 0 without an MTP context.
LLAMA_API int32_t llama_mtp_max_draft(const struct llama_mtp * mtp);

LLAMA_API void llama_mtp_get_stats(const struct llama_mtp * mtp, struct llama_mtp_stats * out);
LLAMA_API void llama_mtp_reset_stats(struct llama_mtp * mtp);

// ---- Caller-decoded targets (llama-server) ----
// A server batches several sequences into one target decode, owns the target KV and trims
// the MTP context's KV of each sequence together with the target's (common_memory). Instead
// of llama_mtp_prefill/llama_mtp_step it then calls, per sequence:
//
//     decode the target                       (the caller: prompt chunks, [id_last, drafts])
//     llama_mtp_observe(mtp, ...)         after every target decode that held this sequence
//     n = llama_mtp_draft(mtp, ...)       before adding [id_last, drafts] to the next batch
//     llama_mtp_verify(mtp, ...)          after that batch: emits 1..n+1 tokens
//
// Drafting and verification are the same code as llama_mtp_step's (modes, rejection sampling,
// synthetic rates, stats). The caller removes rejected positions from both contexts.

// The target just decoded tokens toks[0..n) of this sequence at positions p0..p0+n-1, as rows
// row0..row0+n-1 of that decode. Writes their MTP KV entries (x_p paired with h_{p-1}; entries at
// >= p0 are replaced) and keeps their hidden states for the next draft / observe.
LLAMA_API int32_t llama_mtp_observe(struct llama_mtp * mtp, const llama_token * toks, int32_t n_tokens, llama_pos p0,
                                    int32_t row0);

// llama_mtp_observe for several sequences of one target decode (engines sharing one MTP
// context, one run per sequence), written with a single MTP decode.
struct llama_mtp_run {
    struct llama_mtp *  mtp;
    const llama_token * toks;
    int32_t             n_tokens;
    llama_pos           p0;
    int32_t             row0;
};
LLAMA_API int32_t llama_mtp_observe_runs(const struct llama_mtp_run * runs, int32_t n_runs);

// Draft up to n_draft tokens after id_last, which the caller will decode at position pos.
// chain: the request's sampler chain (cloned, never advanced; NULL drafts greedily). Leaves the
// MTP KV of this sequence at [0, pos). Writes the drafts to out and returns their number (>= 0).
LLAMA_API int32_t llama_mtp_draft(struct llama_mtp * mtp, struct llama_sampler * chain, llama_token id_last,
                                  llama_pos pos, int32_t n_draft, llama_token * out);

// The caller decoded [id_last, the first n_draft drafts of the last llama_mtp_draft] as rows
// row0..row0+n_draft with logits on every row. Verifies them like llama_mtp_step (chain accepts the
// emitted tokens, in order), writes the emitted tokens (1..n_draft+1) to out and returns their number.
LLAMA_API int32_t llama_mtp_verify(struct llama_mtp * mtp, struct llama_sampler * chain, int32_t row0, int32_t n_draft,
                                   llama_token * out, int32_t n_out_max);

// Whether the verify rows are best sampled where the target computes them: true where it decodes on a
// GPU. A caller whose request verifies by exact match on the top token (greedy drafts at temperature
// <= 0, no token probabilities asked) then sets its chain as the target context's backend sampler
// (llama_set_sampler): the chain samples each verify row on the GPU and only the tokens come back,
// instead of (n_draft + 1) rows of logits sampled on the CPU. llama_mtp_verify takes the backend's
// tokens through llama_sampler_sample. In the environment, PYMTP_VERIFY_ON_HOST=1 makes it false (A/B
// runs) and PYMTP_VERIFY_ON_BACKEND=1 true on any backend (tests of that path on the CPU).
LLAMA_API bool llama_mtp_verify_on_backend(const struct llama_mtp * mtp);

// How the engine's own loop (llama_mtp_prefill, llama_mtp_step) samples the target's rows, set before a
// generation's prompt with the request's chain (inspected, not kept; NULL: the host, as before). Where
// the target decodes on a GPU (llama_mtp_verify_on_backend's rule) and the caller reads no whole rows
// (rows_needed false: no token probabilities, llama_mtp_step_logprobs), a backend sampler on the target
// context takes each row's argmax where the chain is a greedy selector alone, or its 128 highest logits
// where the chain begins with a top-k of at most 128 (the chain then goes on from them on the host: its
// own top-k keeps the same tokens). Only a token or 128 candidates come back instead of a row of logits;
// the tokens, and at T > 0 their distribution, are those of the host's chain over the whole row. Other
// chains (penalties first, no top-k, a larger one), and a target context without room for a verify's
// rows of one sequence (n_outputs_max_per_seq), keep the host's. Lasts until the next call.
LLAMA_API void llama_mtp_set_target_sampling(struct llama_mtp * mtp, struct llama_sampler * chain, bool rows_needed);

// ---- Adaptive draft length ----
// With the controller on, each step drafts between 0 (a plain decode) and k_max tokens, whatever it
// expects to emit the most tokens per second: it learns on the running machine what a plain step, a
// draft decode and a verify of n tokens cost, and how often each draft position is accepted (per draft
// mode, and per bucket of the head's confidence in the draft), and stops a draft early where the next
// token is unlikely to pay. While plain decoding measures faster it defers the MTP catch-up and
// re-probes now and then. Output never depends on it (drafting only changes speed). The n_draft a step
// is given (llama_mtp_step, llama_mtp_draft) stays a cap. Learned estimates survive
// llama_mtp_reset_stats and llama_mtp_clear; the counters of what it did reset with the stats.

// The default maximum draft length of the adaptive controller (a user's "auto"): 7, so that a verify
// holds at most 8 rows.
LLAMA_API int32_t llama_mtp_adaptive_default_max(void);

// k_max > 0: the controller chooses each step's draft length in 0..k_max (clamped to
// llama_mtp_max_draft); 0: off, every step drafts the n_draft it is given (the default).
LLAMA_API void llama_mtp_set_adaptive(struct llama_mtp * mtp, int32_t k_max);

// Caller-decoded targets: the target decode holding this sequence's [id_last, drafts of the last
// llama_mtp_draft] (or only id_last when it drafted nothing) took ms, with n_seqs sequences generating
// n_tokens tokens in that batch. Feeds the controller's cost model (as a batch where each sequence put
// n_tokens / n_seqs tokens: what one slot's choice costs depends on what the others put in), and the
// verify time of the stats when it held drafts. Report only decodes without prompt tokens.
LLAMA_API void llama_mtp_report_decode(struct llama_mtp * mtp, int32_t n_seqs, int32_t n_tokens, double ms);

struct llama_mtp_adaptive_stats {
    int32_t k_max;                                // 0: the controller is off
    int32_t load;                                 // sequences generating in the last target batch
    int64_t steps_per_k[LLAMA_MTP_MAX_DRAFT + 1]; // steps that drafted k tokens (k = 0: plain decodes)
    int64_t n_probes;                             // steps against the current choice, to re-measure it (a draft
                                                  // while plain decoding leads, a plain step while drafting does)
    int64_t n_cut;                                // drafts dropped as unlikely to pay (confidence, cost)
    int64_t n_extended;                           // drafts taken one past the rule to keep longer lengths measured
    int64_t n_deferred;                           // MTP rows whose writing waited (plain decoding led)
    double  t_draft_ms;                           // estimate: one draft decode
    double  t_overhead_ms; // estimate: a step's time outside decodes (the caller's loop included)
    double  t_switch_ms;   // estimate: extra cost of a target decode whose size just changed
    double  t_target_ms[LLAMA_MTP_MAX_DRAFT + 1]; // estimate: target decode + sampling of n = i + 1 tokens,
                                                  // per sequence ([0]: a plain step)
    float   accept[LLAMA_MTP_MAX_DRAFT];          // estimate: P(draft i accepted | the drafts before it were)
    int32_t k_best;                               // the fixed draft length these estimates favour now
    double  speedup;                              // its expected speed relative to plain decoding
    double  realized_plain;                       // own loop: tokens per ms of recent windows of plain steps
    double  realized_draft;                       // own loop: tokens per ms of recent windows where the
                                                  // controller drafted as it chose (0: none measured yet)
    int64_t n_vetoed;                             // steps kept plain because free windows ran slower
    int64_t n_dormant;                            // steps decoded while the MTP side slept (no hidden
                                                  // states, no MTP KV: as with MTP off) as drafting did not pay
    int64_t n_blocks_ended;                       // drafting blocks ended early as they lost (block mode where
                                                  // blocks are not timed end to end: several busy slots)
};

// Engines drafting on one MTP context, each its own sequence (llama-server's slots): `mtp` learns the cost of
// a draft decode together with `with` (and every engine already sharing with it), so that an engine whose own
// drafts have all been cold (untimed) still knows it, and the context's first draft decodes (graphs built) go
// untimed once for the group. Call it before either engine drafts. Nothing if the two use different MTP
// contexts. The engines of a group must not run on different threads at once (llama-server's slots take turns).
LLAMA_API void llama_mtp_share_costs(struct llama_mtp * mtp, struct llama_mtp * with);

// What the controller did since the last llama_mtp_reset_stats, and its current estimates.
LLAMA_API void llama_mtp_get_adaptive_stats(const struct llama_mtp * mtp, struct llama_mtp_adaptive_stats * out);

// ---- Multi-head MTP (several MTP blocks: Step-3.5, MiMo-V2, HY-V3, `pymtp graft --heads N`, ...) ----
// Head j at position p reads token x_p and head j-1's output state at p-1 (head 0: the target's
// nextn state h_{p-1}), and predicts x_{p+1}; each head attends over its own KV. The engine keeps
// every head's KV equal to a from-scratch pass over the accepted sequence (docs/engine.md).
enum llama_mtp_head_policy {
    LLAMA_MTP_HEADS_PER_LAYER = 0, // draft step i runs head i mod n_heads (n_draft may exceed n_heads)
    LLAMA_MTP_HEADS_FIRST     = 1, // every step runs head 0, fed its own previous output
    LLAMA_MTP_HEADS_CAPPED    = 2, // step i runs head i; the draft stops after n_heads tokens (upstream)
};

// Give the engine one MTP context per head: ctx_heads[j] runs MTP block j (the engine sets its nextn
// layer offset to j and unmasks its nextn embeddings); ctx_heads[0] must be the ctx_mtp of
// llama_mtp_init, and all must be MTP contexts on models with >= n_heads MTP blocks. One context per
// head keeps each head's compute graph (no rebuild when drafting switches heads). n_heads = 1 returns
// to single-head drafting. Drops the engine's sequence (as llama_mtp_clear). Returns LLAMA_MTP_OK or
// LLAMA_MTP_ERR_ARG.
LLAMA_API int32_t llama_mtp_set_heads(struct llama_mtp * mtp, struct llama_context ** ctx_heads, int32_t n_heads);

// Which head drafts each step (default per_layer). May change at any time: all heads stay consistent.
LLAMA_API void llama_mtp_set_head_policy(struct llama_mtp * mtp, enum llama_mtp_head_policy policy);

// Number of heads the engine drafts with (1 without llama_mtp_set_heads; 0 without an MTP context).
LLAMA_API int32_t llama_mtp_n_heads(const struct llama_mtp * mtp);

// ---- Parallel drafting (`pymtp graft --parallel K`) ----
// A parallel head drafts up to K tokens in one MTP decode: the row (x_p, h_{p-1}) at position p and K-1
// mask rows (x_p, h_{p-1} + mask_i) at p + i, mask_i learned rows stored with the head
// (blk.{n_layer + head}.nextn.hnorm.mask, [n_embd, K-1]); row i's logits draft x_{p+1+i}.
// Returns K for MTP block `head` of the model (1: an ordinary head; 0: no such block) and, when rows is
// not NULL, copies the K-1 mask rows (n_embd floats each) there.
LLAMA_API int32_t llama_model_mtp_parallel(const struct llama_model * model, int32_t head, float * rows);

// Tokens one draft decode of the engine gives: K with a parallel head (single-head drafting; the
// engine then drafts at most K tokens a step), 0 when it drafts one token per decode.
LLAMA_API int32_t llama_mtp_parallel(const struct llama_mtp * mtp);

// Inspection: the greedy draft of k tokens (k <= LLAMA_MTP_MAX_DRAFT) that would follow id_last at
// position llama_mtp_n_past, from the current state, and the raw MTP logits of each step
// (logits: NULL or k * n_vocab floats). id_last = LLAMA_TOKEN_NULL: the engine's own pending token.
// Leaves the engine's state and stats as they were. Returns the number of drafted tokens or an error.
LLAMA_API int32_t llama_mtp_peek_draft(struct llama_mtp * mtp, llama_token id_last, int32_t k, llama_token * out,
                                       float * logits);

// ---- One vocabulary: the option names every surface uses (CLI, Python, llama-server requests) ----

// The most tokens a step may draft (LLAMA_MTP_MAX_DRAFT).
LLAMA_API int32_t llama_mtp_draft_limit(void);

// The name of a draft mode ("greedy", "chain", "stochastic", "auto"), NULL for other values.
// Iterate i = 0, 1, ... until NULL to list the modes.
LLAMA_API const char * llama_mtp_draft_mode_name(int32_t mode);

// The draft mode of a name ("auto" -> LLAMA_MTP_DRAFT_AUTO), LLAMA_MTP_ERR_ARG when unknown.
LLAMA_API int32_t llama_mtp_draft_mode_from_name(const char * name);

// What a user may choose, for help texts and errors: "auto, greedy, chain, stochastic".
LLAMA_API const char * llama_mtp_draft_choices(void);

// The "auto" rule, the one place it is defined: stochastic drafting with rejection sampling when the
// request samples (temperature > 0); at temperature 0 the chain's pick when penalties reshape the
// distribution (repeat, frequency or presence penalty), else the plain argmax.
LLAMA_API enum llama_mtp_draft_mode llama_mtp_draft_mode_auto(float temperature, bool penalties);

// The name of a head policy ("per_layer", "first", "capped"), NULL for other values.
LLAMA_API const char * llama_mtp_head_policy_name(int32_t policy);

// The head policy of a name, LLAMA_MTP_ERR_ARG when unknown.
LLAMA_API int32_t llama_mtp_head_policy_from_name(const char * name);

// What a user may choose: "per_layer, first, capped".
LLAMA_API const char * llama_mtp_head_policy_choices(void);

// ABI check for bindings: sizeof of the public structs they mirror.
// which: 0 llama_mtp_params, 1 llama_mtp_stats, 2 llama_model_params, 3 llama_context_params,
// 4 llama_mtp_adaptive_stats
LLAMA_API size_t llama_mtp_abi_sizeof(int32_t which);

#ifdef __cplusplus
}
#endif
