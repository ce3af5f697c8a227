#pragma once

// pymtp: samplers that run where the logits are (upstream's backend sampling, llama_set_sampler), so
// that a decode sends back a token or a few candidates instead of rows of logits. The engine attaches
// them to the MTP contexts for drafts (mtp-draft.cpp) and to the target context for its own loop's steps
// (llama-mtp.cpp, llama_mtp_set_target_sampling).

#include "llama.h"

#include <cstdint>

namespace mtp {

enum class backend_pick {
    none,   // nothing: the host takes the rows of logits
    greedy, // the argmax of each row and its softmax probability
    top_k,  // the BACKEND_TOP_K highest logits of each row and their ids: a chain on the host goes on from them
};

constexpr int32_t BACKEND_TOP_K = 128;

// A sampler chain of one sampler of that kind (not none), for llama_set_sampler; when attached, *rows
// receives the context's room for output rows per sequence (not owned: it must outlive the chain).
// The caller frees the chain.
llama_sampler * make_backend_sampler(backend_pick kind, uint32_t * rows);

// What the target's rows of a request with this chain can be sampled by: greedy where the chain is a greedy
// selector alone; top_k where it begins with a top-k that keeps at most BACKEND_TOP_K (then its top-k keeps the
// same tokens of the candidates as of the row, whatever follows); none otherwise (penalties first, no top-k,
// a larger one).
backend_pick chain_pick(llama_sampler * chain);

} // namespace mtp
