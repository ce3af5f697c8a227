#pragma once

// pymtp: llama-server's MTP components that are not upstream's: the "timings.mtp" object of a response,
// and the greedy argmax that samples a greedy request's verify rows on the GPU (patch 0027)
// (--mtp-adaptive is the engine's own controller, native/engine/mtp-adaptive.cpp). Compiled into
// llama-server's server-context library by native/CMakeLists.txt; tools/server/server-context.cpp
// calls it.

#include "common.h" // common_params_sampling (upstream common/)
#include "json.h"   // common_json (upstream common/)
#include "llama-mtp.h"

#include <string>
#include <vector>

// What a request's MTP statistics came from: the engine, or (grammar / reasoning budget) the slot's
// own speculative counters, since common_sampler_sample_and_accept_n verified its drafts.
struct server_mtp_request {
    std::string                   mode;            // resolved draft mode
    std::string                   head_policy;     // head policy of the request
    bool                          engine_verified; // false: the grammar-aware sampler verified
    int64_t                       slot_drafted;
    int64_t                       slot_accepted;
    int64_t                       slot_steps;
    const std::vector<uint64_t> * slot_accepted_per_pos;
    bool                          verify_on_backend; // the verify rows were sampled by the target's backend sampler
    bool                          verify_argmax;     //   a greedy argmax (the request's chain picks the top logit)
};

// The response's "timings.mtp": mode, heads, how drafts were verified and where the verify rows were
// sampled ("cpu", "backend": the request's chain, "backend argmax": a greedy argmax standing in for a
// chain that picks the top logit), drafted, accepted, steps, per-position acceptance, mean accepted
// length, draft / verify / catch-up ms, and what the adaptive controller did ("adaptive").
common_json server_mtp_timings(const llama_mtp * mtp, const server_mtp_request & req);

// Whether a request's sampler chain picks the top logit of every row: temperature <= 0 with the
// temperature sampler in the chain and nothing that moves logits or can drop the top token (no
// penalties, DRY, logit bias or ignore_eos, XTC, typical-p, dynamic temperature, infill, adaptive-p,
// mirostat). Such a request's verify rows need only their argmax, which a greedy backend sampler
// computes where the logits are (one small kernel per row instead of the chain's top-k, top-p and
// min-p over the whole vocabulary).
bool server_mtp_chain_is_argmax(const common_params_sampling & sp);

// A backend sampler chain holding only the greedy argmax (the caller owns it).
llama_sampler * server_mtp_argmax_chain();
