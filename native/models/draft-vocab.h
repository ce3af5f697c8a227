// pymtp: draft vocabularies (pymtp trim). An MTP block's LM head scores only N tokens (the ones the
// base model uses most) instead of the whole vocabulary; the N scores are scattered back to a
// whole-vocabulary row that is -inf everywhere else, so samplers, q and the engine see ordinary logits.
//
// Two file layouts carry one:
//   - a head-only GGUF of a dense model (pymtp graft's heads, read by dense-mtp.cpp):
//       blk.L.nextn.shared_head_head.weight  [n_embd, N]  the N rows of the base's LM head, as stored
//       blk.L.nextn.embed_tokens.d2t         i32 [N]      row -> token id
//   - a draft-vocabulary file for a model with its own MTP layers, loaded like a head file
//     (llama_model_load_from_file_with_mtp_head); it holds only, for some of the model's MTP blocks L:
//       blk.L.nextn.shared_head_head.draft   [n_embd, N]  the N rows of the LM head block L uses
//                                                         (its own shared_head_head, else output)
//       blk.L.nextn.embed_tokens.d2t         i32 [N]
//     and the model's general.architecture, embedding_length, block_count and nextn_predict_layers.
//     Upstream's MTP graphs of the archs in llama_mtp_draft_vocab_supported() call
//     llama_mtp_draft_vocab_logits() where they multiply by the LM head (patch "MTP graphs: draft
//     vocabulary").
#pragma once

#include "llama-arch.h"

#include <cstdint>

struct ggml_context;
struct ggml_tensor;
struct gguf_context;
struct llama_model;
struct llama_model_base;
struct llama_model_loader;

// whether the arch's MTP graph scores a draft vocabulary from a draft-vocabulary file
bool llama_mtp_draft_vocab_supported(llm_arch arch);

// When the head file `fname` (metadata `head`, tensors in `ctx_head`) is a draft-vocabulary file for
// the loader's model (n_layer_all layers, n_nextn of them MTP blocks), checks it against the model,
// adds its tensors to the loader (taking ctx_head) and returns true; false when it is not one (no
// tensor named like a draft vocabulary's). Throws std::runtime_error naming the problem on a mismatch.
bool llama_mtp_add_draft_vocab_file(llama_model_loader & ml, const char * fname, gguf_context * head,
                                    ggml_context * ctx_head, int64_t n_layer_all, int64_t n_nextn);

// creates blk.L.nextn.shared_head_head.draft and its d2t for the MTP blocks that have them (after the
// arch's own tensors; skipped unless load_mtp)
void llama_mtp_draft_vocab_load_tensors(llama_model_base & m, llama_model_loader & ml);

// The whole-vocabulary logits [n_vocab, n_out] of MTP block il's draft vocabulary for the head-normed
// rows cur [n_embd, n_out] (times the LM head's per-tensor scale head_s when it has one); nullptr when
// the block has no draft vocabulary (the graph then multiplies by its LM head as usual).
ggml_tensor * llama_mtp_draft_vocab_logits(ggml_context * ctx, const llama_model & model, int il, ggml_tensor * cur,
                                           ggml_tensor * head_s);

// Scores [N, n_out] of block il's draft vocabulary -> [n_vocab, n_out]: -inf everywhere, then row
// d2t[i] takes score i.
ggml_tensor * llama_mtp_scatter_draft_vocab(ggml_context * ctx, const llama_model & model, int il,
                                            ggml_tensor * logits);

// When `logits` is the set_rows of a one-row scatter above (what the engine's greedy sampler finds
// behind the logits row it is given), sets *scores to the N scores [N] and *d2t to the block's d2t [N] and returns
// true: the argmax and softmax of the N scores, the argmax mapped through d2t, equal those of the whole-vocabulary row
// (its other entries are -inf) without building it. false for anything else (an untrimmed head,
// several output rows).
bool llama_mtp_draft_vocab_scores(ggml_context * ctx, ggml_tensor * logits, ggml_tensor ** scores, ggml_tensor ** d2t);
