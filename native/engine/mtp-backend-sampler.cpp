// pymtp: samplers that run where the logits are (see mtp-backend-sampler.h).

#include "mtp-backend-sampler.h"

#include "draft-vocab.h"
#include "ggml.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

using mtp::BACKEND_TOP_K;

// The argmax as a backend sampler: of a greedy draft's MTP logits, or of a target row of a greedy request,
// with its softmax probability (a draft's confidence), computed where the logits are; only the token and
// this one float come back to the host (not the logits row). With a draft vocabulary both are taken over
// its N scores, the argmax mapped through d2t: the same token (d2t is in token order, so a tie too goes to
// the first) and the same probability as over the whole-vocabulary row, which then is never built (its other entries
// are -inf; dense-mtp.cpp leaves the row uncomputed when no one reads it, and on a CPU building it cost ~0.6 ms of a
// ~1.7 ms step).
void greedy_apply(llama_sampler *, llama_token_data_array * cur_p) { // on the host: the argmax
    cur_p->selected = 0;
    for (size_t i = 1; i < cur_p->size; ++i) {
        if (cur_p->data[i].logit > cur_p->data[cur_p->selected].logit) {
            cur_p->selected = (int64_t) i;
        }
    }
}

bool greedy_backend_init(llama_sampler * smpl, ggml_backend_buffer_type_t, uint32_t n_outputs_max_per_seq) {
    // the context's room for output rows of one sequence, for the engine (a parallel head's pass has K)
    *(uint32_t *) smpl->ctx = n_outputs_max_per_seq;
    return true; // argmax, soft_max and get_rows: every backend that runs upstream's greedy has them
}

// build_sampling's pad of the logits: rows appended to a matrix, nothing else (so the padded tensor
// begins with the matrix's elements, in order)
bool appends_rows(const ggml_tensor * t) {
    if (t->op != GGML_OP_PAD || t->src[0]->ne[2] != 1 || t->src[0]->ne[3] != 1) {
        return false;
    }
    for (int i = 0; i < 8; ++i) { // lp0 rp0 lp1 rp1 lp2 rp2 lp3 rp3
        if (i != 3 && t->op_params[i] != 0) {
            return false;
        }
    }
    return true;
}

// The tensor the graph computes whose elements the sampler's row is: back through build_sampling's
// view of the first row of the logits padded with a dummy row, and reshapes, while every step's
// source is contiguous (so the row's elements are its source's first ones), to a tensor of exactly
// the row's size; else the row. For a one-row decode the padded copy of the row then is not computed.
ggml_tensor * row_source(ggml_tensor * row) {
    ggml_tensor * t = row;
    while ((t->op == GGML_OP_VIEW && t->view_offs == 0) || t->op == GGML_OP_RESHAPE || appends_rows(t)) {
        if (!ggml_is_contiguous(t->src[0])) {
            break;
        }
        t = t->src[0];
    }
    return ggml_nelements(t) == ggml_nelements(row) ? t : row;
}

// The scores a sampler of `row` works on, 1-d: a draft vocabulary's N scores (*d2t: their token ids), else
// the row itself (*d2t null)
ggml_tensor * row_scores(ggml_context * ctx, ggml_tensor * row, ggml_tensor ** d2t) {
    ggml_tensor * src    = row_source(row);
    ggml_tensor * scores = nullptr;
    if (!llama_mtp_draft_vocab_scores(ctx, src, &scores, d2t)) {
        *d2t   = nullptr;
        scores = ggml_reshape_1d(ctx, src, ggml_nelements(src));
    }
    return scores;
}

// the entries at indices `idx` of a 1-d tensor x of n entries
ggml_tensor * entries_at(ggml_context * ctx, ggml_tensor * x, ggml_tensor * idx, int64_t n) {
    return ggml_get_rows(ctx, ggml_reshape_2d(ctx, x, 1, n), idx);
}

// the token ids of indices `idx` into n scores (row_scores): through d2t where there is one
ggml_tensor * token_ids(ggml_context * ctx, ggml_tensor * d2t, ggml_tensor * idx, int64_t n) {
    return d2t ? entries_at(ctx, d2t, idx, n) : idx;
}

void greedy_backend_apply(llama_sampler *, ggml_context * ctx, ggml_cgraph *, llama_sampler_data * data) {
    if (data->logits == nullptr) {
        return;
    }
    ggml_tensor * d2t    = nullptr;
    ggml_tensor * scores = row_scores(ctx, data->logits, &d2t);
    const int64_t n      = ggml_nelements(scores);
    ggml_tensor * top    = ggml_argmax(ctx, scores); // i32 [1], an index into scores
    ggml_tensor * probs  = ggml_soft_max(ctx, scores);
    data->probs          = entries_at(ctx, probs, top, n);
    data->sampled        = token_ids(ctx, d2t, top, n);
    data->logits         = nullptr;
}

// The candidates a chain on the host goes on from: the BACKEND_TOP_K highest logits of a row (over a draft
// vocabulary's N scores, mapped through d2t), chosen where the logits are; only their ids and logits come back.
// - A chain/stochastic draft: the request's chain (a clone) turns them into q. q is then the chain over those
//   candidates instead of the whole row: the same q wherever the chain keeps at most BACKEND_TOP_K by its own top-k
//   (40 by default) and the penalties do not lift a token from outside them, and rejection sampling is exact for
//   whatever q the drafts are drawn from (docs/engine.md, "Draft modes"). On an H100 the host's chain over a
//   49152-token row and the row's copy made a stochastic draft cost 0.49 ms against 0.28 for a greedy one
//   (SmolLM2, T=0.7).
// - A target row, where the request's chain begins with a top-k of at most BACKEND_TOP_K: its top-k keeps the same
//   tokens of the candidates as of the row, so the chain gives the same p (llama_sampler_sample takes the
//   candidates in place of the row).
void top_k_apply(llama_sampler *, llama_token_data_array * cur_p) { // on the host: the BACKEND_TOP_K highest, in order
    if (cur_p->size > (size_t) BACKEND_TOP_K) {
        std::partial_sort(cur_p->data, cur_p->data + BACKEND_TOP_K, cur_p->data + cur_p->size,
                          [](const llama_token_data & a, const llama_token_data & b) { return a.logit > b.logit; });
        cur_p->size   = BACKEND_TOP_K;
        cur_p->sorted = true;
    }
}

void top_k_backend_apply(llama_sampler *, ggml_context * ctx, ggml_cgraph *, llama_sampler_data * data) {
    if (data->logits == nullptr) {
        return;
    }
    ggml_tensor * d2t    = nullptr;
    ggml_tensor * scores = row_scores(ctx, data->logits, &d2t);
    const int64_t n      = ggml_nelements(scores);
    ggml_tensor * top = ggml_top_k(ctx, scores, (int) std::min<int64_t>(BACKEND_TOP_K, n)); // i32, indices into scores
    data->logits      = entries_at(ctx, scores, top, n);
    data->candidates  = token_ids(ctx, d2t, top, n);
}

llama_sampler_i top_k_iface = {
    /* .name              = */ [](const llama_sampler *) { return "mtp-top-k"; },
    /* .accept            = */ nullptr,
    /* .apply             = */ top_k_apply,
    /* .reset             = */ nullptr,
    /* .clone             = */ nullptr,
    /* .free              = */ nullptr,
    /* .backend_init      = */ greedy_backend_init, // top_k: ggml-cpu and ggml-cuda have it; elsewhere the scheduler
                                                    // runs it on the CPU
    /* .backend_accept    = */ nullptr,
    /* .backend_apply     = */ top_k_backend_apply,
    /* .backend_set_input = */ nullptr,
    /* .backend_reset     = */ nullptr,
    /* .copy_state        = */ nullptr,
};

llama_sampler_i greedy_iface = {
    /* .name              = */ [](const llama_sampler *) { return "mtp-greedy"; },
    /* .accept            = */ nullptr,
    /* .apply             = */ greedy_apply,
    /* .reset             = */ nullptr,
    /* .clone             = */ nullptr,
    /* .free              = */ nullptr,
    /* .backend_init      = */ greedy_backend_init,
    /* .backend_accept    = */ nullptr,
    /* .backend_apply     = */ greedy_backend_apply,
    /* .backend_set_input = */ nullptr,
    /* .backend_reset     = */ nullptr,
    /* .copy_state        = */ nullptr,
};

} // namespace

llama_sampler * mtp::make_backend_sampler(backend_pick kind, uint32_t * rows) {
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain,
                            llama_sampler_init(kind == backend_pick::greedy ? &greedy_iface : &top_k_iface, rows));
    return chain;
}

mtp::backend_pick mtp::chain_pick(llama_sampler * chain) {
    const int32_t n = chain ? llama_sampler_chain_n(chain) : 0;
    if (n <= 0) {
        return backend_pick::none;
    }
    const llama_sampler * first = llama_sampler_chain_get(chain, 0);
    const char *          name  = llama_sampler_name(first);
    if (n == 1 && std::strcmp(name, "greedy") == 0) {
        return backend_pick::greedy;
    }
    if (std::strcmp(name, "top-k") != 0) {
        return backend_pick::none;
    }
    // how many of a row its top-k keeps: applied (a clone, so no state moves) to more than BACKEND_TOP_K logits
    std::vector<llama_token_data> row(2 * BACKEND_TOP_K);
    for (size_t i = 0; i < row.size(); ++i) {
        row[i] = llama_token_data{ (llama_token) i, -(float) i, 0.0f };
    }
    llama_token_data_array arr   = { row.data(), row.size(), -1, false };
    llama_sampler *        probe = llama_sampler_clone(first);
    llama_sampler_apply(probe, &arr);
    llama_sampler_free(probe);
    return arr.size >= 1 && arr.size <= (size_t) BACKEND_TOP_K ? backend_pick::top_k : backend_pick::none;
}
