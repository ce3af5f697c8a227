// pymtp: where a model's decodes run, for the adaptive controller (mtp-adaptive-cost.h, `graphs`): the engine
// uses the public API only, and this needs the model's internals (upstream src/llama-model.h).

#include "llama-model.h"
#include "mtp-engine.h"

bool mtp::decodes_on_gpu(const llama_model * model) {
    if (model == nullptr) {
        return false;
    }
    // the output layer's device: with layers offloaded (-ngl), the logits are computed there
    ggml_backend_dev_t dev = model->dev_output();
    if (dev == nullptr) {
        return false;
    }
    const auto type = ggml_backend_dev_type(dev);
    return type == GGML_BACKEND_DEVICE_TYPE_GPU || type == GGML_BACKEND_DEVICE_TYPE_IGPU;
}
