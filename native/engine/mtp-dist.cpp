// pymtp: distributions of a llama_sampler chain (see mtp-dist.h).

#include "mtp-dist.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

const char * mtp_chain_selector(llama_sampler * chain) {
    const int32_t n = llama_sampler_chain_n(chain);
    if (n <= 0) {
        return nullptr;
    }
    const char * name = llama_sampler_name(llama_sampler_chain_get(chain, n - 1));
    if (name && (std::strcmp(name, "dist") == 0 || std::strcmp(name, "greedy") == 0)) {
        return name;
    }
    return nullptr;
}

void mtp_dist::from_chain(llama_sampler * chain, const float * logits, int32_t n_vocab, const int32_t * ids,
                          int32_t n_ids) {
    if (ids != nullptr) {
        cand.resize(n_ids);
        for (int32_t i = 0; i < n_ids; ++i) {
            cand[i] = llama_token_data{ ids[i], logits[ids[i]], 0.0f };
        }
    } else {
        cand.resize(n_vocab);
        for (int32_t i = 0; i < n_vocab; ++i) {
            cand[i] = llama_token_data{ i, logits[i], 0.0f };
        }
    }
    apply_chain(chain);
}

bool mtp_dist::from_backend(llama_sampler * chain, llama_context * ctx, int32_t row) {
    const float * logits = llama_get_sampled_logits_ith(ctx, row);
    if (logits == nullptr) {
        return false;
    }
    const llama_token * ids = llama_get_sampled_candidates_ith(ctx, row);
    const uint32_t      n   = llama_get_sampled_logits_count_ith(ctx, row);
    cand.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
        cand[i] = llama_token_data{ ids[i], logits[i], 0.0f };
    }
    apply_chain(chain);
    return true;
}

void mtp_dist::apply_chain(llama_sampler * chain) {
    llama_token_data_array arr = { cand.data(), cand.size(), -1, false };

    const char *  selector = mtp_chain_selector(chain);
    const int32_t n_apply  = llama_sampler_chain_n(chain) - (selector ? 1 : 0);
    for (int32_t i = 0; i < n_apply; ++i) {
        llama_sampler_apply(llama_sampler_chain_get(chain, i), &arr);
    }
    // samplers shrink the array and may point it elsewhere: keep what survived
    if (arr.data != cand.data() || arr.size != cand.size()) {
        std::vector<llama_token_data> kept(arr.data, arr.data + arr.size);
        cand.swap(kept);
    }

    one_hot = selector && std::strcmp(selector, "greedy") == 0;
    if (cand.empty()) {
        return;
    }
    if (one_hot) {
        auto best =
            std::max_element(cand.begin(), cand.end(),
                             [](const llama_token_data & a, const llama_token_data & b) { return a.logit < b.logit; });
        const llama_token_data top = *best;
        cand.assign(1, top);
        cand[0].p = 1.0f;
        return;
    }
    float max_l = -INFINITY;
    for (const auto & c : cand) {
        max_l = std::max(max_l, c.logit);
    }
    double sum = 0.0;
    for (auto & c : cand) {
        c.p = std::isinf(c.logit) && c.logit < 0 ? 0.0f : (float) std::exp((double) c.logit - max_l);
        sum += c.p;
    }
    for (auto & c : cand) {
        c.p = (float) (c.p / sum);
    }
}

float mtp_dist::prob(llama_token id) const {
    for (const auto & c : cand) {
        if (c.id == id) {
            return c.p;
        }
    }
    return 0.0f;
}

llama_token mtp_dist::argmax() const {
    if (cand.empty()) {
        return LLAMA_TOKEN_NULL;
    }
    return std::max_element(cand.begin(), cand.end(),
                            [](const llama_token_data & a, const llama_token_data & b) { return a.p < b.p; })
        ->id;
}

llama_token mtp_dist::sample(std::mt19937 & rng) const {
    if (cand.empty()) {
        return LLAMA_TOKEN_NULL;
    }
    std::uniform_real_distribution<double> u(0.0, 1.0);
    double                                 r   = u(rng);
    double                                 acc = 0.0;
    for (const auto & c : cand) {
        acc += c.p;
        if (r < acc) {
            return c.id;
        }
    }
    return cand.back().id;
}

llama_token mtp_sample_residual(const mtp_dist & p, const mtp_dist & q, std::mt19937 & rng) {
    std::unordered_map<llama_token, float> qp;
    qp.reserve(q.cand.size() * 2);
    for (const auto & c : q.cand) {
        qp[c.id] = c.p;
    }
    std::vector<llama_token_data> res;
    res.reserve(p.cand.size());
    double sum = 0.0;
    for (const auto & c : p.cand) {
        auto         it = qp.find(c.id);
        const double r  = (double) c.p - (it == qp.end() ? 0.0 : (double) it->second);
        if (r > 0.0) {
            res.push_back({ c.id, c.logit, (float) r });
            sum += r;
        }
    }
    if (res.empty() || sum <= 0.0) {
        return p.sample(rng);
    }
    std::uniform_real_distribution<double> u(0.0, sum);
    const double                           r   = u(rng);
    double                                 acc = 0.0;
    for (const auto & c : res) {
        acc += c.p;
        if (r < acc) {
            return c.id;
        }
    }
    return res.back().id;
}
