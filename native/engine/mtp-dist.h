#pragma once

// pymtp: distributions of a llama_sampler chain, for MTP drafting and
// rejection-sampling verification (see mtp-draft.cpp, mtp-verify.cpp).

#include "llama.h"

#include <cstdint>
#include <random>
#include <vector>

// The probability distribution a sampler chain draws from: every sampler of the
// chain except its final selector ("dist" or "greedy") applied to the logits,
// then a softmax over the surviving candidates.
struct mtp_dist {
    std::vector<llama_token_data> cand;            // surviving candidates, p normalised
    bool                          one_hot = false; // the chain selects greedily: all mass on the argmax

    // fill from logits with the chain's samplers (no state change: apply only); ids: only these n_ids
    // tokens are candidates (the others' logits are -inf), else the whole vocabulary
    void from_chain(llama_sampler * chain, const float * logits, int32_t n_vocab, const int32_t * ids = nullptr,
                    int32_t n_ids = 0);
    // the same from the candidates a backend sampler left for output row `row` of ctx (their ids and logits;
    // every other token's logit is -inf); false, and nothing changed, where it left none
    bool from_backend(llama_sampler * chain, llama_context * ctx, int32_t row);

    float       prob(llama_token id) const; // 0 for a token that did not survive
    llama_token argmax() const;
    llama_token sample(std::mt19937 & rng) const;

  private:
    void apply_chain(llama_sampler * chain); // the chain's samplers on cand, then the softmax
};

// The selector at the end of a chain: "dist" (stochastic), "greedy", or nullptr.
const char * mtp_chain_selector(llama_sampler * chain);

// Draw from norm(max(0, p - q)) (the speculative-sampling residual); falls back to p
// when p <= q everywhere (then p == q and any draw from p is exact).
llama_token mtp_sample_residual(const mtp_dist & p, const mtp_dist & q, std::mt19937 & rng);
