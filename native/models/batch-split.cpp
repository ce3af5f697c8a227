// pymtp: whether libllama splits a batch whose sequences hold different numbers of rows, for the adaptive
// controller (mtp-adaptive-cost.h, `splits`): the engine uses the public API only, and this needs the context's
// parameters (upstream src/llama-context.h).

#include "llama-context.h"
#include "llama-model.h"
#include "mtp-engine.h"

bool mtp::splits_uneven_batches(const llama_context * ctx) {
    if (ctx == nullptr) {
        return false;
    }
    const llama_cparams & cp = ctx->get_cparams();
    if (cp.n_seq_max <= 1) {
        return false;
    }
    // A KV cache with one stream per sequence (kv_unified off: llama-server with --parallel N and no
    // --kv-unified) takes a batch in ubatches holding as many rows of each sequence (split_equal): a batch
    // where one sequence verifies drafts among plain ones runs as two graphs. Recurrent and hybrid memories
    // split that way whatever kv_unified says.
    const llama_model & model = ctx->get_model();
    return !cp.kv_unified || llama_model_is_recurrent(&model) || llama_model_is_hybrid(&model);
}
