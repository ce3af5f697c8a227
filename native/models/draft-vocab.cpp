// pymtp: draft vocabularies (pymtp trim); the file layouts are in draft-vocab.h.

#include "draft-vocab.h"

#include "gguf.h"
#include "llama-mtp.h"
#include "llama-impl.h"
#include "llama-model-loader.h"
#include "models/models.h" // upstream src/ is on the llama target's include path

#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr const char * draft_suffix = ".draft";                  // blk.L.nextn.shared_head_head.draft
constexpr const char * d2t_suffix   = ".d2t";                    // blk.L.nextn.embed_tokens.d2t
constexpr const char * scatter_name = "mtp_draft_vocab_scatter"; // the set_rows of the scatter

std::string head_name(llm_arch arch, int il) {
    return LLM_TN(arch)(LLM_TENSOR_NEXTN_SHARED_HEAD_HEAD, draft_suffix + 1, il).str();
}

std::string d2t_name(llm_arch arch, int il) {
    return LLM_TN(arch)(LLM_TENSOR_NEXTN_EMBED_TOKENS, d2t_suffix + 1, il).str();
}

bool ends_with(const std::string & s, const char * suffix) {
    const size_t n = strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// vocabulary size from the model's tokenizer metadata (-1 when it has none)
int64_t n_vocab_of(const gguf_context * meta) {
    const int kid = gguf_find_key(meta, "tokenizer.ggml.tokens");
    return kid < 0 ? -1 : (int64_t) gguf_get_arr_n(meta, kid);
}

} // namespace

bool llama_mtp_draft_vocab_supported(llm_arch arch) {
    // the archs whose MTP graph calls llama_mtp_draft_vocab_logits (patch "MTP graphs: draft vocabulary")
    switch (arch) {
        case LLM_ARCH_QWEN35:
        case LLM_ARCH_QWEN35MOE:
        case LLM_ARCH_GLM4_MOE:
        case LLM_ARCH_STEP35:
            return true;
        default:
            return false;
    }
}

bool llama_mtp_draft_vocab_arch(const char * arch) {
    return arch != nullptr && llama_mtp_draft_vocab_supported(llm_arch_from_string(arch));
}

bool llama_mtp_add_draft_vocab_file(llama_model_loader & ml, const char * fname, gguf_context * head,
                                    ggml_context * ctx_head, int64_t n_layer_all, int64_t n_nextn) {
    auto fail = [&](const std::string & why) {
        return std::runtime_error(format("MTP draft vocabulary %s: %s", fname, why.c_str()));
    };

    // a draft-vocabulary file is one whose tensors are named like one; anything else is not ours to judge
    bool any = false;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_head); t; t = ggml_get_next_tensor(ctx_head, t)) {
        any = any || ends_with(t->name, draft_suffix) || ends_with(t->name, d2t_suffix);
    }
    if (!any) {
        return false;
    }

    const llm_arch arch = ml.get_arch();
    if (!llama_mtp_draft_vocab_supported(arch)) {
        throw fail(format("the %s MTP graph has no draft vocabulary (supported: qwen35, qwen35moe, glm4moe, step35)",
                          llm_arch_name(arch)));
    }
    const std::string kv_block = LLM_KV(arch)(LLM_KV_BLOCK_COUNT);
    const int         kid      = gguf_find_key(head, kv_block.c_str());
    if (kid < 0 || gguf_get_kv_type(head, kid) != GGUF_TYPE_UINT32 || gguf_get_val_u32(head, kid) != n_layer_all) {
        throw fail(format("%s must be the model's %lld (the file was made for another model)", kv_block.c_str(),
                          (long long) n_layer_all));
    }
    const int64_t n_vocab = n_vocab_of(ml.metadata);

    // the draft rows and the map of each block, for the model's MTP blocks only
    const int64_t first    = n_layer_all - n_nextn;
    int           n_blocks = 0;
    for (int64_t il = first; il < n_layer_all; ++il) {
        ggml_tensor * w   = ggml_get_tensor(ctx_head, head_name(arch, (int) il).c_str());
        ggml_tensor * d2t = ggml_get_tensor(ctx_head, d2t_name(arch, (int) il).c_str());
        if (!w && !d2t) {
            continue;
        }
        if (!w || !d2t) {
            throw fail(format("MTP block %lld needs both %s and %s", (long long) il, head_name(arch, (int) il).c_str(),
                              d2t_name(arch, (int) il).c_str()));
        }
        if (d2t->type != GGML_TYPE_I32 || ggml_n_dims(d2t) != 1 || d2t->ne[0] != w->ne[1]) {
            throw fail(
                format("%s must be i32 [%lld] (one token id per row of %s)", d2t->name, (long long) w->ne[1], w->name));
        }
        if (n_vocab > 0 && w->ne[1] >= n_vocab) {
            throw fail(format("%s has %lld rows; a draft vocabulary is smaller than the model's %lld tokens", w->name,
                              (long long) w->ne[1], (long long) n_vocab));
        }
        n_blocks++;
    }
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_head); t; t = ggml_get_next_tensor(ctx_head, t)) {
        int il = -1;
        if (sscanf(t->name, "blk.%d.", &il) != 1 || il < first || il >= n_layer_all ||
            (t->name != head_name(arch, il) && t->name != d2t_name(arch, il))) {
            throw fail(format("unexpected tensor '%s' (a draft-vocabulary file holds only "
                              "blk.L.nextn.shared_head_head.draft and blk.L.nextn.embed_tokens.d2t of the "
                              "model's MTP blocks %lld..%lld)",
                              t->name, (long long) first, (long long) n_layer_all - 1));
        }
    }
    GGML_ASSERT(n_blocks > 0);

    // the tensors join the model's like one more split file
    const uint16_t idx = (uint16_t) ml.files.size();
    ml.files.emplace_back(new llama_file(fname, "rb", ml.use_direct_io));
    llama_file * file = ml.files.back().get();
    try {
        for (ggml_tensor * t = ggml_get_first_tensor(ctx_head); t; t = ggml_get_next_tensor(ctx_head, t)) {
            llama_model_loader::llama_tensor_weight tw(file, idx, head, t);
            if (t->type == GGML_TYPE_I32) { // d2t: every id a token of the model, ascending (no repeats)
                std::vector<int32_t> ids(t->ne[0]);
                file->seek(tw.offs, SEEK_SET);
                file->read_raw(ids.data(), ids.size() * sizeof(int32_t));
                for (size_t i = 0; i < ids.size(); ++i) {
                    if (ids[i] < 0 || (n_vocab > 0 && ids[i] >= n_vocab) || (i > 0 && ids[i] <= ids[i - 1])) {
                        throw fail(format("%s: entry %zu is %d; the ids must be ascending tokens of the model "
                                          "(0..%lld)",
                                          t->name, i, ids[i], (long long) n_vocab - 1));
                    }
                }
            }
            if (ml.weights_map.find(t->name) != ml.weights_map.end()) {
                throw fail(format("tensor '%s' is also in the model", t->name));
            }
            ml.n_elements += ggml_nelements(t);
            ml.n_bytes += ggml_nbytes(t);
            ml.weights_map.emplace(t->name, tw);
        }
    } catch (...) {
        for (ggml_tensor * t = ggml_get_first_tensor(ctx_head); t; t = ggml_get_next_tensor(ctx_head, t)) {
            auto it = ml.weights_map.find(t->name);
            if (it != ml.weights_map.end() && it->second.idx == idx) {
                ml.n_elements -= ggml_nelements(t);
                ml.n_bytes -= ggml_nbytes(t);
                ml.weights_map.erase(it);
            }
        }
        ml.files.pop_back();
        throw;
    }
    ml.n_tensors = ml.weights_map.size();

    LLAMA_LOG_INFO("%s: MTP draft vocabulary for %d MTP block(s) from %s\n", __func__, n_blocks, fname);
    return true;
}

void llama_mtp_draft_vocab_load_tensors(llama_model_base & m, llama_model_loader & ml) {
    const auto &  hparams = m.hparams;
    const int64_t n_vocab = m.vocab.n_tokens();
    const int     flags   = ml.load_mtp ? 0 : llama_model_loader::TENSOR_SKIP;

    for (uint32_t il = hparams.n_layer(); il < hparams.n_layer_all; ++il) {
        const auto   name = head_name(m.arch, (int) il);
        const auto * meta = ml.get_tensor_meta(name.c_str());
        if (meta == nullptr) {
            continue;
        }
        const int64_t n_rows = meta->ne[1];
        if (n_rows >= n_vocab) {
            throw std::runtime_error(format("MTP draft vocabulary: %s has %lld rows, the vocabulary %lld tokens",
                                            name.c_str(), (long long) n_rows, (long long) n_vocab));
        }
        m.create_tensor(m.tn(LLM_TENSOR_NEXTN_SHARED_HEAD_HEAD, draft_suffix + 1, (int) il), { hparams.n_embd, n_rows },
                        flags);
        m.create_tensor(m.tn(LLM_TENSOR_NEXTN_EMBED_TOKENS, d2t_suffix + 1, (int) il), { n_rows }, flags);
    }
}

ggml_tensor * llama_mtp_draft_vocab_logits(ggml_context * ctx, const llama_model & model, int il, ggml_tensor * cur,
                                           ggml_tensor * head_s) {
    const auto    name = head_name(model.arch, il);
    ggml_tensor * w    = const_cast<ggml_tensor *>(model.get_tensor(name.c_str()));
    if (w == nullptr) {
        return nullptr;
    }
    cur = ggml_mul_mat(ctx, w, cur);
    if (head_s) {
        cur = ggml_mul(ctx, cur, head_s);
    }
    return llama_mtp_scatter_draft_vocab(ctx, model, il, cur);
}

// set_rows: one thread per kept score on CUDA, where a gather by token (one block per vocabulary
// entry) cost more than the smaller LM head saved
ggml_tensor * llama_mtp_scatter_draft_vocab(ggml_context * ctx, const llama_model & model, int il,
                                            ggml_tensor * logits) {
    const auto    name = d2t_name(model.arch, il);
    ggml_tensor * d2t  = const_cast<ggml_tensor *>(model.get_tensor(name.c_str()));
    GGML_ASSERT(d2t && "MTP draft vocabulary: the block's d2t tensor is missing");

    const int64_t n_vocab = model.vocab.n_tokens();
    const int64_t n_rows  = logits->ne[0];
    const int64_t n_out   = logits->ne[1];
    if (n_out == 0) { // a decode without outputs (and the graph reserve for one)
        return ggml_reshape_2d(ctx, logits, n_vocab, 0);
    }
    // [n_out, n_vocab] of -inf (arange only gives the shape; fill overwrites it). Filled as one row: the
    // CPU fills a tensor row by row, and n_vocab rows of n_out floats (one, for a draft) cost ~0.6 ms a
    // draft on this 2-core x86 with Gemma 3's 262144 tokens, where one row of them is a memset
    ggml_tensor * full = ggml_arange(ctx, 0.0f, (float) (n_vocab * n_out), 1.0f);
    full               = ggml_reshape_2d(ctx, ggml_fill_inplace(ctx, full, -INFINITY), n_out, n_vocab);
    // rows of [n_out, N] are the draft vocabulary's scores; row i goes to token d2t[i]
    ggml_tensor * rows =
        n_out == 1 ? ggml_reshape_2d(ctx, logits, 1, n_rows) : ggml_cont(ctx, ggml_transpose(ctx, logits));
    full = ggml_set_rows(ctx, full, rows, d2t);
    ggml_set_name(full, scatter_name);
    return n_out == 1 ? ggml_reshape_2d(ctx, full, n_vocab, 1) : ggml_cont(ctx, ggml_transpose(ctx, full));
}

bool llama_mtp_draft_vocab_scores(ggml_context * ctx, ggml_tensor * logits, ggml_tensor ** scores, ggml_tensor ** d2t) {
    if (logits->op != GGML_OP_SET_ROWS || std::strcmp(logits->name, scatter_name) != 0 || logits->ne[0] != 1) {
        return false; // not a one-row scatter (a multi-row one is laid out [n_out, n_vocab])
    }
    ggml_tensor * rows = logits->src[0]; // [1, N], contiguous (set_rows' sources: rows, indices, destination)
    *scores            = ggml_reshape_1d(ctx, rows, ggml_nelements(rows));
    *d2t               = logits->src[1];
    return true;
}
