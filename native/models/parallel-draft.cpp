// pymtp: parallel-drafting heads (pymtp graft --parallel K). Such a head drafts K tokens in one MTP
// decode: the row (x_p, h_{p-1}) at position p, then K-1 mask rows (x_p, h_{p-1} + mask_i) at p + i,
// where mask_i are learned rows stored with the head (blk.L.nextn.hnorm.mask, [n_embd, K-1]; the
// contract with pymtp.graft.torch_model). The engine builds the rows; this reads the mask rows.

#include "ggml-backend.h"
#include "llama-mtp.h"
#include "llama-model.h"

#include <cstring>
#include <vector>

int32_t llama_model_mtp_parallel(const llama_model * model, int32_t head, float * rows) {
    if (model == nullptr || head < 0 || head >= (int32_t) model->hparams.n_layer_nextn) {
        return 0;
    }
    const int           il   = (int) model->hparams.n_layer() + head;
    const std::string   name = LLM_TN(model->arch)(LLM_TENSOR_NEXTN_HNORM, "mask", il).str();
    const ggml_tensor * t    = model->get_tensor(name.c_str());
    if (t == nullptr || t->buffer == nullptr) {
        return 1; // an ordinary head (or its tensors were not loaded)
    }
    const int64_t n_embd = t->ne[0];
    const int64_t n_mask = t->ne[1];
    if (rows != nullptr) {
        std::vector<uint8_t> raw(ggml_nbytes(t));
        ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
        const auto * traits = ggml_get_type_traits(t->type);
        if (t->type == GGML_TYPE_F32) {
            std::memcpy(rows, raw.data(), sizeof(float) * n_embd * n_mask);
        } else if (traits->to_float != nullptr) {
            traits->to_float(raw.data(), rows, n_embd * n_mask);
        } else {
            return 1;
        }
    }
    return (int32_t) n_mask + 1;
}
