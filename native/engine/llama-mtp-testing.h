#pragma once

// pymtp: hooks of the MTP engine for tests and benchmarks only. Not part of the public API in
// llama-mtp.h: the output with either hook on is NOT the model's. The symbols are exported from
// libllama so that pymtp's own test suite and `pymtp bench --synthetic-rates` reach them.

#include "llama-mtp.h"

#ifdef __cplusplus
extern "C" {
#endif

// A draft mode that accepts every stochastic draft: BROKEN on purpose, so that the exactness tests can
// show they detect a wrong verifier. Pass it to llama_mtp_set_draft_mode.
#define LLAMA_MTP_DRAFT_TEST_ACCEPT_ALL ((enum llama_mtp_draft_mode) 100)

// BENCHMARKING ONLY: accept drafts at random instead of by verification, with unconditional
// per-position acceptance rates rates[0..n) (rates[i] = P(the first i+1 drafts are all accepted); past
// n the last ratio rates[n-1]/rates[n-2] repeats). Every step still drafts with the MTP head, decodes
// [last, drafts] on the target and samples the target at each position, so the engine's cost is that
// of a head with these rates. A rejected position emits the target's token; drafted end-of-generation
// tokens are never accepted. n = 0 turns it off. Returns LLAMA_MTP_ERR_ARG for rates outside [0, 1].
LLAMA_API int32_t llama_mtp_set_synthetic_rates(struct llama_mtp * mtp, const float * rates, int32_t n);

// TESTS ONLY: pin the adaptive controller's cost model (a plain step plain_ms, a draft decode draft_ms,
// each verified token beyond the first verify_extra_ms more) and stop it learning costs, so that its
// choices depend on acceptance alone and a test can steer it. Acceptance is still learned. plain_ms <= 0
// unpins (costs are learned again from scratch).
LLAMA_API void llama_mtp_pin_adaptive_costs(struct llama_mtp * mtp, double plain_ms, double draft_ms,
                                            double verify_extra_ms);

// TESTS ONLY: as above, with the target decode's time given per size: target_ms[n - 1] for a decode of
// n = 1..n_sizes tokens (past n_sizes, each token adds what the last one did). n_sizes >= 2.
LLAMA_API void llama_mtp_pin_adaptive_target_costs(struct llama_mtp * mtp, const double * target_ms, int32_t n_sizes,
                                                   double draft_ms);

// TESTS ONLY: what the controller has measured end to end, in tokens per ms, over windows of plain
// steps and over windows where it drafted as it chose, and a new window chosen from them at once.
// While pinned (above) nothing overwrites them. They stand for several windows of each policy (a veto
// that rests on a single measured free window is checked by the next window). Drafting is vetoed while free windows run
// slower; where they run 1.3x above the plain rate (the model's, or the measured one if higher), no plain window runs
// at all. A rate <= 0: that policy's windows are not measured yet.
LLAMA_API void llama_mtp_set_realized_rates(struct llama_mtp * mtp, double plain_tok_per_ms, double draft_tok_per_ms);
// The share of the free windows' steps that drafted (set_realized_rates makes it 1): below 0.25 the free
// windows measured plain steps, not drafting, and veto nothing.
LLAMA_API void llama_mtp_set_realized_share(struct llama_mtp * mtp, double share);

// TESTS ONLY: the adaptive controller takes ms as the time of one draft decode of this engine, as if it had
// drafted (the first ones after the start or a waking go untimed: cold), without drafting anything.
LLAMA_API void llama_mtp_time_draft(struct llama_mtp * mtp, double ms);

// TESTS ONLY: how many target decode sizes the engine warmed up at init (mtp-warmup.cpp; 0: none). On a
// GPU it does; PYMTP_WARMUP=1 in the environment makes it do so anywhere, PYMTP_WARMUP=0 never.
LLAMA_API int32_t llama_mtp_warmed_sizes(const struct llama_mtp * mtp);

// TESTS ONLY: how many target decode sizes the engine warmed up for the way of sampling of the last
// llama_mtp_set_target_sampling that warmed one (mtp-warmup.cpp, warm_sampling; 0: none so far).
LLAMA_API int32_t llama_mtp_warmed_sampling(const struct llama_mtp * mtp);

// TESTS ONLY: what samples the target's rows of the own loop (llama_mtp_set_target_sampling): 0 the host,
// 1 the backend's argmax, 2 the backend's top candidates.
LLAMA_API int32_t llama_mtp_target_sampling(const struct llama_mtp * mtp);

#ifdef __cplusplus
}
#endif
