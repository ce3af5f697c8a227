// pymtp: verification. The target's logits rows row0..row0+k hold its distribution after
// [id_last, d_1..d_k]; the caller's sampler chain samples each position in order and only ever
// accepts the emitted tokens, so the output is exactly what plain decoding would sample.

#include "mtp-engine.h"

#include <algorithm>

// Sample the target distribution position by position with the caller's chain (vt = [id_last,
// d_1..d_k]) and count the step. Rejection sampling when drafts were drawn from q and the chain
// samples; exact match otherwise (and without drafts: plain sampling, exactly as without MTP).
int32_t llama_mtp::verify(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out,
                          int32_t row0) {
    const auto    t0         = mtp::clock_type::now();
    const char *  selector   = mtp_chain_selector(smpl);
    const bool    stochastic = k > 0 && synth_cond.empty() &&
                               (mode == LLAMA_MTP_DRAFT_STOCHASTIC || mode == LLAMA_MTP_DRAFT_TEST_ACCEPT_ALL) &&
                               selector != nullptr && std::strcmp(selector, "dist") == 0;
    const int32_t n_out = stochastic ? verify_stochastic(smpl, vt, k, out, row0) : verify_exact(smpl, vt, k, out, row0);
    for (int32_t i = 0; i < k; ++i) {
        stats.drafted_per_pos[i]++;
    }
    stats.t_sample_ms += mtp::ms_since(t0);
    ctrl.verified(k, n_out - 1);
    stats.n_drafted += k;
    stats.n_accepted += n_out - 1;
    stats.n_generated += n_out;
    return n_out;
}

// Exact match: accept drafts while they equal the sampled token.
int32_t llama_mtp::verify_exact(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out,
                                int32_t row0) {
    int32_t n_out = 0;
    for (int32_t i = 0; i <= k; ++i) {
        llama_token tok   = llama_sampler_sample(smpl, ctx_tgt, row0 + i);
        bool        match = i < k && tok == vt[i + 1];
        if (i < k && !synth_cond.empty()) {
            match = synthetic_accept(i, vt[i + 1]);
            tok   = match ? vt[i + 1] : tok;
        }
        out[n_out++] = tok;
        // an end-of-generation token ends the step even when it matches the draft
        if (!match || llama_vocab_is_eog(vocab, tok)) {
            break;
        }
        stats.accepted_per_pos[i]++;
    }
    return n_out;
}

// benchmarking only: a target-independent accept decision for draft position i
bool llama_mtp::synthetic_accept(int32_t i, llama_token draft_tok) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    const double                           c = synth_cond[std::min<size_t>(i, synth_cond.size() - 1)];
    return u(rng) < c && !llama_vocab_is_eog(vocab, draft_tok);
}

// Rejection sampling (speculative sampling): accept d_i with probability min(1, p(d_i)/q(d_i)); on
// rejection emit a draw from norm(max(0, p - q)) and stop; after k acceptances emit a bonus draw from
// p. The output distribution is exactly the chain's distribution p at every position.
int32_t llama_mtp::verify_stochastic(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k,
                                     llama_token * out, int32_t row0) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    int32_t                                n_out = 0;
    for (int32_t i = 0; i <= k; ++i) {
        // the candidates a backend sampler chose (set_target_pick: the chain's own top-k keeps the same ones),
        // else the row
        if (!p.from_backend(smpl, ctx_tgt, row0 + i)) {
            p.from_chain(smpl, llama_get_logits_ith(ctx_tgt, row0 + i), n_vocab);
        }
        llama_token tok;
        bool        accepted = false;
        if (i == k || i >= (int32_t) q.size()) {
            tok = p.sample(rng);
        } else {
            const llama_token x  = vt[i + 1];
            const double      px = p.prob(x);
            const double      qx = q[i].prob(x);
            accepted             = mode == LLAMA_MTP_DRAFT_TEST_ACCEPT_ALL || (qx > 0.0 && u(rng) * qx < px);
            tok                  = accepted ? x : mtp_sample_residual(p, q[i], rng);
        }
        llama_sampler_accept(smpl, tok);
        out[n_out++] = tok;
        if (!accepted || llama_vocab_is_eog(vocab, tok)) {
            break;
        }
        stats.accepted_per_pos[i]++;
    }
    return n_out;
}

// The own loop's target rows sampled where they are computed (llama_mtp_set_target_sampling): a backend
// sampler of that kind on the target context, or none. A context without room for a verify's rows of one
// sequence (llama_context_params.n_outputs_max_per_seq) keeps the host's.
void llama_mtp::set_target_pick(mtp::backend_pick kind) {
    if (kind == target_kind) {
        return;
    }
    llama_set_sampler(ctx_tgt, params.seq_id, nullptr);
    if (target_sampler != nullptr) {
        llama_sampler_free(target_sampler);
        target_sampler = nullptr;
    }
    target_kind = mtp::backend_pick::none;
    if (kind == mtp::backend_pick::none) {
        return;
    }
    target_sampler        = mtp::make_backend_sampler(kind, &target_rows);
    const uint32_t needed = ctx_mtp != nullptr ? (uint32_t) k_max + 1 : 1;
    if (!llama_set_sampler(ctx_tgt, params.seq_id, target_sampler) || target_rows < needed) {
        llama_set_sampler(ctx_tgt, params.seq_id, nullptr);
        llama_sampler_free(target_sampler);
        target_sampler = nullptr;
        return;
    }
    target_kind = kind;
}
