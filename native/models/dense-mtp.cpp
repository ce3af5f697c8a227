// pymtp: a DeepSeek-style MTP (nextn) block for dense architectures that ship
// without one (llama, qwen2, qwen3, gemma3), so that a separately trained head
// can draft for them. The math is a contract with pymtp's head trainer:
//
//   h_p  = the trunk's final-norm output (input of the LM head), published by
//          the trunk graph as t_h_nextn
//          a feature head (pymtp graft --features, EAGLE-3-style) holds
//          blk.{n_layer}.nextn.eh_proj.feat {n_embd * (1 + F), n_embd}; the trunk then publishes
//          feat . concat(h_p, RMSNorm(r_a(p)), ...) instead (RMSNorm without weight), r_l = the
//          residual stream entering trunk layer l, for the F layers dense_mtp_feature_layers(n_layer);
//          later draft steps still feed the block its own output
//   MTP position p, inputs (x_p, h_{p-1}):
//     e   = RMSNorm(embd(x_p)) * nextn.enorm        embd: nextn.embed_tokens, else tok_embd
//                                                    (gemma3: no sqrt(n_embd) input scale)
//     h   = RMSNorm(h_{p-1})   * nextn.hnorm
//     z   = nextn.eh_proj . concat(e, h)            ggml {2*n_embd, n_embd}: e first, then h
//     z   = one decoder block of the arch at il = n_layer (+ nextn_layer_offset),
//           a global-attention layer
//     out = RMSNorm(z) * nextn.shared_head_norm     (output_norm when absent)
//     t_h_nextn = out                                (fed to the next draft step)
//     logits = (nextn.shared_head_head, else output [+ output.bias]) . out
//              (gemma3: the model's final logit softcap when it has one)
//     draft vocabulary (pymtp trim): shared_head_head has N rows (the N most used tokens) and
//     embed_tokens.d2t maps row i to its token id; the logits come back over the whole vocabulary,
//     -inf outside
//   all norms: eps = the model's RMS eps; weights used as stored (like the trunk).
//   parallel drafting (pymtp graft --parallel K): the head also holds blk.L.nextn.hnorm.mask
//     [n_embd, K-1]; one decode drafts K tokens from the rows (x_p, h_{p-1}) at p and
//     (x_p, h_{p-1} + mask_i) at p + i (i = 1..K-1), row i predicting x_{p+1+i}; the graph is the one
//     above (the engine builds the rows: llama_model_mtp_parallel, native/engine/mtp-draft.cpp)

#include "draft-vocab.h"
#include "models/models.h" // upstream src/ is on the llama target's include path

#include <algorithm>
#include <map>
#include <vector>

// whether an output row's sequence has no backend sampler: llama_context copies the logits back
// only then (its needs_raw_logits), so only then must the graph compute them whatever the samplers use
static bool dense_mtp_raw_logits_needed(const llama_ubatch &                            ubatch,
                                        const std::map<llama_seq_id, llama_sampler *> & samplers) {
    if (samplers.empty() || ubatch.output == nullptr) {
        return true;
    }
    for (uint32_t i = 0; i < ubatch.n_tokens; ++i) {
        if (!ubatch.output[i]) {
            continue;
        }
        for (int32_t j = 0; j < ubatch.n_seq_id[i]; ++j) {
            if (samplers.find(ubatch.seq_id[i][j]) == samplers.end()) {
                return true;
            }
        }
    }
    return false;
}

// the trunk layers whose input a feature head fuses with h, in order: a quarter and half of the depth
// (the same rule as pymtp.graft.torch_model.feature_layers)
static std::vector<int> dense_mtp_feature_layers(int n_layer) {
    std::vector<int> taps;
    for (int il : { n_layer / 4, n_layer / 2 }) {
        il = std::min(std::max(il, 1), n_layer - 1);
        if (std::find(taps.begin(), taps.end(), il) == taps.end()) {
            taps.push_back(il);
        }
    }
    return taps;
}

ggml_tensor * llama_dense_mtp_h_nextn(const llama_model & model, ggml_context * ctx, const llm_graph_result * res,
                                      ggml_tensor * h, ggml_tensor * out_rows) {
    const auto & hparams = model.hparams;
    if (hparams.n_layer_nextn == 0) {
        return h;
    }
    const std::string name = LLM_TN(model.arch)(LLM_TENSOR_NEXTN_EH_PROJ, "feat", hparams.n_layer()).str();
    ggml_tensor *     feat = const_cast<ggml_tensor *>(model.get_tensor(name.c_str()));
    if (feat == nullptr || feat->buffer == nullptr) {
        return h; // an ordinary head: fed h itself (or the head was not loaded)
    }
    ggml_tensor * x = h;
    for (int il : dense_mtp_feature_layers((int) hparams.n_layer())) {
        ggml_tensor * r = res->get_layer_inp(il);
        GGML_ASSERT(r != nullptr && "feature head: the trunk graph does not record its layer inputs");
        r = ggml_rms_norm(ctx, r, hparams.f_norm_rms_eps);
        if (out_rows != nullptr) {
            r = ggml_get_rows(ctx, r, out_rows);
        }
        x = ggml_concat(ctx, x, r, 0);
    }
    ggml_tensor * fused = ggml_mul_mat(ctx, feat, x);
    // a branch of its own (nothing else reads it): the graph must compute it
    ggml_build_forward_expand(res->get_gf(), fused);
    return fused;
}

void llama_dense_mtp_load_tensors(llama_model_base & m, llama_model_loader & ml) {
    const auto & hparams = m.hparams;
    const auto & tn      = m.tn;

    if (hparams.n_layer_nextn == 0) {
        return;
    }
    if (hparams.n_expert > 0) {
        throw std::runtime_error(
            format("%s: MTP (nextn) layers are only supported on dense models (n_expert = 0)", llm_arch_name(m.arch)));
    }

    const int flags = ml.load_mtp ? 0 : llama_model_loader::TENSOR_SKIP;
    const int opt   = flags | llama_model_loader::TENSOR_NOT_REQUIRED;

    const int64_t n_embd  = hparams.n_embd;
    const int64_t n_vocab = m.vocab.n_tokens();

    for (uint32_t il = hparams.n_layer(); il < hparams.n_layer_all; ++il) {
        auto & layer = m.layers[il];

        const int64_t n_head        = hparams.n_head(il);
        const int64_t n_embd_head_k = hparams.n_embd_head_k(il);
        const int64_t n_embd_k_gqa  = hparams.n_embd_k_gqa(il);
        const int64_t n_embd_v_gqa  = hparams.n_embd_v_gqa(il);
        const int64_t n_ff          = hparams.n_ff(il);

        // the decoder block, named like the trunk's blocks
        layer.attn_norm = m.create_tensor(tn(LLM_TENSOR_ATTN_NORM, "weight", il), { n_embd }, flags);
        m.create_tensor_qkv(layer, il, n_embd, n_embd_head_k * n_head, n_embd_k_gqa, n_embd_v_gqa, flags);
        layer.wo = m.create_tensor(tn(LLM_TENSOR_ATTN_OUT, "weight", il), { n_embd_head_k * n_head, n_embd }, flags);

        if (m.arch == LLM_ARCH_LLAMA) {
            layer.wo_b = m.create_tensor(tn(LLM_TENSOR_ATTN_OUT, "bias", il), { n_embd }, opt);
        }
        if (m.arch == LLM_ARCH_QWEN3 || m.arch == LLM_ARCH_GEMMA3) {
            layer.attn_q_norm = m.create_tensor(tn(LLM_TENSOR_ATTN_Q_NORM, "weight", il), { n_embd_head_k }, flags);
            layer.attn_k_norm = m.create_tensor(tn(LLM_TENSOR_ATTN_K_NORM, "weight", il), { n_embd_head_k }, flags);
        }
        if (m.arch == LLM_ARCH_GEMMA3) {
            layer.attn_post_norm = m.create_tensor(tn(LLM_TENSOR_ATTN_POST_NORM, "weight", il), { n_embd }, flags);
        }

        layer.ffn_norm = m.create_tensor(tn(LLM_TENSOR_FFN_NORM, "weight", il), { n_embd }, flags);
        layer.ffn_gate = m.create_tensor(tn(LLM_TENSOR_FFN_GATE, "weight", il), { n_embd, n_ff }, flags);
        layer.ffn_down = m.create_tensor(tn(LLM_TENSOR_FFN_DOWN, "weight", il), { n_ff, n_embd }, flags);
        layer.ffn_up   = m.create_tensor(tn(LLM_TENSOR_FFN_UP, "weight", il), { n_embd, n_ff }, flags);

        if (m.arch == LLM_ARCH_LLAMA) {
            layer.ffn_gate_b = m.create_tensor(tn(LLM_TENSOR_FFN_GATE, "bias", il), { n_ff }, opt);
            layer.ffn_down_b = m.create_tensor(tn(LLM_TENSOR_FFN_DOWN, "bias", il), { n_embd }, opt);
            layer.ffn_up_b   = m.create_tensor(tn(LLM_TENSOR_FFN_UP, "bias", il), { n_ff }, opt);
        }
        if (m.arch == LLM_ARCH_GEMMA3) {
            layer.ffn_post_norm = m.create_tensor(tn(LLM_TENSOR_FFN_POST_NORM, "weight", il), { n_embd }, flags);
        }

        // the MTP wiring
        layer.nextn.eh_proj =
            m.create_tensor(tn(LLM_TENSOR_NEXTN_EH_PROJ, "weight", il), { 2 * n_embd, n_embd }, flags);
        layer.nextn.enorm = m.create_tensor(tn(LLM_TENSOR_NEXTN_ENORM, "weight", il), { n_embd }, flags);
        layer.nextn.hnorm = m.create_tensor(tn(LLM_TENSOR_NEXTN_HNORM, "weight", il), { n_embd }, flags);
        layer.nextn.shared_head_norm =
            m.create_tensor(tn(LLM_TENSOR_NEXTN_SHARED_HEAD_NORM, "weight", il), { n_embd }, opt);
        // the head's own LM head: the whole vocabulary, or a draft vocabulary of N rows with the map d2t:
        // row -> token id (see the graph below)
        const auto    head_name      = tn(LLM_TENSOR_NEXTN_SHARED_HEAD_HEAD, "weight", il);
        const auto *  head_meta      = ml.get_tensor_meta(head_name.str().c_str());
        const int64_t n_rows         = head_meta ? head_meta->ne[1] : n_vocab;
        layer.nextn.shared_head_head = m.create_tensor(head_name, { n_embd, n_rows }, opt);
        if (n_rows != n_vocab) {
            m.create_tensor(tn(LLM_TENSOR_NEXTN_EMBED_TOKENS, "d2t", il), { n_rows }, flags);
        }
        layer.nextn.embed_tokens =
            m.create_tensor(tn(LLM_TENSOR_NEXTN_EMBED_TOKENS, "weight", il), { n_embd, n_vocab }, opt);
        // a parallel-drafting head (pymtp graft --parallel K): its K-1 learned mask rows, read by the engine
        // (llama_model_mtp_parallel); the graph itself is the same for every row
        const auto mask_name = tn(LLM_TENSOR_NEXTN_HNORM, "mask", il);
        if (const auto * mask_meta = ml.get_tensor_meta(mask_name.str().c_str())) {
            m.create_tensor(mask_name, { n_embd, mask_meta->ne[1] }, flags);
        }
        // a feature head (the first head only): its fusion of h and trunk layer inputs, computed by the
        // trunk graph (llama_dense_mtp_h_nextn)
        const auto feat_name = tn(LLM_TENSOR_NEXTN_EH_PROJ, "feat", il);
        if (il == hparams.n_layer() && ml.get_tensor_meta(feat_name.str().c_str())) {
            const int64_t n_feat = (int64_t) dense_mtp_feature_layers((int) hparams.n_layer()).size();
            m.create_tensor(feat_name, { n_embd * (1 + n_feat), n_embd }, flags);
        }
    }
}

template <bool iswa>
llm_build_dense_mtp<iswa>::llm_build_dense_mtp(const llama_model & model, const llm_graph_params & params)
    : llm_graph_context(params) {
    const llm_arch arch = model.arch;
    GGML_ASSERT(
        (arch == LLM_ARCH_LLAMA || arch == LLM_ARCH_QWEN2 || arch == LLM_ARCH_QWEN3 || arch == LLM_ARCH_GEMMA3) &&
        "dense MTP graph: unsupported architecture");
    GGML_ASSERT(hparams.n_layer_nextn > 0 && "dense MTP graph requires n_layer_nextn > 0");
    GGML_ASSERT(cparams.nextn_layer_offset >= 0 && cparams.nextn_layer_offset < (int) hparams.n_layer_nextn &&
                "nextn_layer_offset out of range [0, n_layer_nextn)");

    const int    il    = hparams.n_layer() + cparams.nextn_layer_offset;
    const auto & layer = model.layers[il];

    GGML_ASSERT(layer.nextn.eh_proj && "MTP block missing nextn.eh_proj (was the model loaded with load_mtp?)");
    GGML_ASSERT(layer.nextn.enorm && "MTP block missing nextn.enorm");
    GGML_ASSERT(layer.nextn.hnorm && "MTP block missing nextn.hnorm");

    const int64_t n_embd_head = hparams.n_embd_head_v(il);
    GGML_ASSERT(n_embd_head == hparams.n_embd_head_k(il));

    const int64_t n_head_l    = hparams.n_head(il);
    const int64_t n_head_kv_l = hparams.n_head_kv(il);
    const int     n_rot_l     = hparams.n_rot(il);

    // inputs: token x_p and hidden state h_{p-1} in the same batch entry
    auto inp = std::make_unique<llm_graph_input_embd_h>(hparams.n_embd);

    inp->tokens = ggml_new_tensor_1d(ctx0, GGML_TYPE_I32, n_tokens);
    ggml_set_input(inp->tokens);

    inp->embd = ggml_new_tensor_2d(ctx0, GGML_TYPE_F32, hparams.n_embd_inp(), n_tokens);
    ggml_set_input(inp->embd);

    ggml_tensor * tok_embd;
    if (ubatch.token) {
        ggml_tensor * tok_embd_w = layer.nextn.embed_tokens ? layer.nextn.embed_tokens : model.tok_embd;
        tok_embd                 = ggml_get_rows(ctx0, tok_embd_w, inp->tokens);
    } else {
        tok_embd = inp->embd;
    }
    cb(tok_embd, "mtp_tok_embd", il);

    inp->h = ggml_new_tensor_2d(ctx0, GGML_TYPE_F32, hparams.n_embd, n_tokens);
    ggml_set_input(inp->h);
    ggml_set_name(inp->h, "mtp_h_input");

    ggml_tensor * h_embd = inp->h;

    res->add_input(std::move(inp));

    ggml_tensor * inp_pos     = build_inp_pos();
    ggml_tensor * inp_out_ids = build_inp_out_ids();

    using inp_attn_type      = std::conditional_t<iswa, llm_graph_input_attn_kv_iswa, llm_graph_input_attn_kv>;
    inp_attn_type * inp_attn = nullptr;
    if constexpr (iswa) {
        inp_attn = build_attn_inp_kv_iswa();
    } else {
        inp_attn = build_attn_inp_kv();
    }

    // e = RMSNorm(embd(x_p)) * enorm, h = RMSNorm(h_{p-1}) * hnorm, z = eh_proj . [e; h]
    ggml_tensor * e_norm = build_norm(tok_embd, layer.nextn.enorm, nullptr, LLM_NORM_RMS, il);
    cb(e_norm, "mtp_enorm", il);

    ggml_tensor * h_norm = build_norm(h_embd, layer.nextn.hnorm, nullptr, LLM_NORM_RMS, il);
    cb(h_norm, "mtp_hnorm", il);

    ggml_tensor * concat = ggml_concat(ctx0, e_norm, h_norm, /*dim=*/0);
    cb(concat, "mtp_concat", il);

    ggml_tensor * cur = build_lora_mm(layer.nextn.eh_proj, concat, layer.nextn.eh_proj_s);
    cb(cur, "mtp_eh_proj", il);

    ggml_tensor * inpSA = cur;

    // one decoder block of the arch, as a global-attention layer
    cur = build_norm(cur, layer.attn_norm, nullptr, LLM_NORM_RMS, il);
    cb(cur, "mtp_attn_norm", il);

    {
        auto [Qcur, Kcur, Vcur] = build_qkv(layer, cur, n_embd_head, n_head_l, n_head_kv_l, il);

        if (layer.attn_q_norm) { // qwen3, gemma3
            Qcur = build_norm(Qcur, layer.attn_q_norm, nullptr, LLM_NORM_RMS, il);
            cb(Qcur, "mtp_Qcur_normed", il);
        }
        if (layer.attn_k_norm) {
            Kcur = build_norm(Kcur, layer.attn_k_norm, nullptr, LLM_NORM_RMS, il);
            cb(Kcur, "mtp_Kcur_normed", il);
        }

        // llama3-style rope frequency factors are one tensor shared by all layers
        ggml_tensor * rope_factors = arch == LLM_ARCH_LLAMA ? model.get_rope_factors(cparams, 0) : nullptr;

        Qcur = ggml_rope_ext(ctx0, Qcur, inp_pos, rope_factors, n_rot_l, rope_type, n_ctx_orig, freq_base, freq_scale,
                             ext_factor, attn_factor, beta_fast, beta_slow);
        Kcur = ggml_rope_ext(ctx0, Kcur, inp_pos, rope_factors, n_rot_l, rope_type, n_ctx_orig, freq_base, freq_scale,
                             ext_factor, attn_factor, beta_fast, beta_slow);

        if (arch == LLM_ARCH_LLAMA && hparams.use_kq_norm) {
            Qcur = ggml_rms_norm(ctx0, Qcur, hparams.f_norm_rms_eps);
            Kcur = ggml_rms_norm(ctx0, Kcur, hparams.f_norm_rms_eps);
        }

        cb(Qcur, "mtp_Qcur", il);
        cb(Kcur, "mtp_Kcur", il);
        cb(Vcur, "mtp_Vcur", il);

        float kq_scale = 1.0f / sqrtf(float(n_embd_head));
        if (arch == LLM_ARCH_LLAMA && hparams.f_attention_scale != 0.0f) {
            kq_scale = hparams.f_attention_scale;
        }
        if (arch == LLM_ARCH_GEMMA3) {
            // like the trunk: Q is scaled, the attention itself is not
            Qcur     = ggml_scale(ctx0, Qcur, hparams.f_attention_scale);
            kq_scale = 1.0f;
        }

        cur = build_attn(inp_attn, layer.wo, layer.wo_b, layer.wo_s, Qcur, Kcur, Vcur, nullptr, nullptr, nullptr,
                         kq_scale, il);
        cb(cur, "mtp_attn_out", il);
    }

    // masked mode (the MTP context): the rows without an output only feed the KV cache
    const bool all_rows = !cparams.embeddings_nextn_masked;
    if (!all_rows && inp_out_ids) {
        cur   = ggml_get_rows(ctx0, cur, inp_out_ids);
        inpSA = ggml_get_rows(ctx0, inpSA, inp_out_ids);
    }

    if (arch == LLM_ARCH_GEMMA3) {
        cur = build_norm(cur, layer.attn_post_norm, nullptr, LLM_NORM_RMS, il);
        cb(cur, "mtp_attn_post_norm", il);
    }

    ggml_tensor * ffn_inp = ggml_add(ctx0, cur, inpSA);
    cb(ffn_inp, "mtp_ffn_inp", il);

    cur = build_norm(ffn_inp, layer.ffn_norm, nullptr, LLM_NORM_RMS, il);
    cb(cur, "mtp_ffn_norm", il);

    cur = build_ffn(cur, layer.ffn_up, layer.ffn_up_b, layer.ffn_up_s, layer.ffn_gate, layer.ffn_gate_b,
                    layer.ffn_gate_s, layer.ffn_down, layer.ffn_down_b, layer.ffn_down_s, nullptr,
                    arch == LLM_ARCH_GEMMA3 ? LLM_FFN_GELU : LLM_FFN_SILU, LLM_FFN_PAR, il);
    cb(cur, "mtp_ffn_out", il);

    if (arch == LLM_ARCH_GEMMA3) {
        cur = build_norm(cur, layer.ffn_post_norm, nullptr, LLM_NORM_RMS, il);
        cb(cur, "mtp_ffn_post_norm", il);
    }

    cur = ggml_add(ctx0, cur, ffn_inp);
    cb(cur, "mtp_post_ffn", il);

    // out = RMSNorm(z) * shared_head_norm: the hidden state of the next draft step
    ggml_tensor * head_norm_w = layer.nextn.shared_head_norm ? layer.nextn.shared_head_norm : model.output_norm;
    GGML_ASSERT(head_norm_w && "dense MTP graph: missing both nextn.shared_head_norm and output_norm");
    cur = build_norm(cur, head_norm_w, nullptr, LLM_NORM_RMS, -1);

    cb(cur, "h_nextn", -1);
    res->t_h_nextn = cur;

    if (all_rows && inp_out_ids) {
        cur = ggml_get_rows(ctx0, cur, inp_out_ids);
    }
    cb(cur, "mtp_shared_head_norm", -1);

    // logits = head . out
    const bool    own_head = layer.nextn.shared_head_head != nullptr;
    ggml_tensor * head_w   = own_head ? layer.nextn.shared_head_head : model.output;
    ggml_tensor * head_s   = own_head ? layer.nextn.shared_head_head_s : model.output_s;
    GGML_ASSERT(head_w && "dense MTP graph: missing LM head (nextn.shared_head_head or output)");
    cur = build_lora_mm(head_w, cur, head_s);

    if (!own_head && model.output_b != nullptr) { // qwen2 checkpoints with an LM-head bias
        cur = ggml_add(ctx0, cur, model.output_b);
    }
    if (arch == LLM_ARCH_GEMMA3 && hparams.f_final_logit_softcapping) {
        cur = ggml_scale(ctx0, cur, 1.0f / hparams.f_final_logit_softcapping);
        cur = ggml_tanh(ctx0, cur);
        cur = ggml_scale(ctx0, cur, hparams.f_final_logit_softcapping);
    }
    // A draft vocabulary (pymtp trim): the head scored only its rows; scatter them to the whole
    // vocabulary, -inf for every other token, so samplers, q and the engine see ordinary logits
    if (own_head && head_w->ne[1] != (int64_t) model.vocab.n_tokens()) {
        cur = llama_mtp_scatter_draft_vocab(ctx0, model, il, cur);
    }
    cb(cur, "result_output", -1);
    res->t_logits = cur;

    if (dense_mtp_raw_logits_needed(ubatch, samplers)) {
        ggml_build_forward_expand(gf, cur);
    } else {
        // every output row is sampled on the backend: the logits are not copied back, so only what
        // the samplers take from them is computed (build_sampling adds them; the engine's greedy
        // draft of a draft vocabulary takes only the N scores, not the scattered row)
        ggml_build_forward_expand(gf, res->t_h_nextn);
    }
}

template struct llm_build_dense_mtp<false>;
template struct llm_build_dense_mtp<true>;
