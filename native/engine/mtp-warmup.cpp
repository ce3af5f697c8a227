// pymtp: the engine's warm-up on a GPU. Before the first step, every target decode size a step can
// verify (1..k+1 rows, k up to the adaptive default) and the MTP decodes after it are run twice: the
// first decode of a size builds its graph (and loads its kernels: CUDA loads modules lazily), the second,
// a repeat, captures its CUDA graph. Everything decoded is removed again; the engine starts empty.
//
// Why: on a GPU those first decodes cost 5-10x a warm one (the H100, the built-in model: a first 3-row
// verify 14.2 ms, a 2-row one 16.9 ms, against 1.6-1.8 ms warm), and they came in the first steps of a
// Model, where the adaptive controller is learning what each length costs: its estimate of a size change
// rose to 12 ms, and it spent the first ~560 of ~1900 steps trying lengths at 0.47-0.65 tokens/ms where
// the one it settled on ran 0.78. Warmed, the first 3-row verify took 2.8 ms, and auto ran 0.95 of the
// best fixed length on the H100 where it ran 0.87 (docs/benchmarks.md, "A warm start on the GPU, stale
// acceptance and the 9-row verify"). The MTP decodes warmed are the ones a step runs after such a verify: a
// draft decode with the verified rows ahead of its own, and a lone draft row (greedy drafts: the backend
// argmax attached). Not warmed: stochastic drafts' decodes (they output the logits) and the catch-up of a
// prompt; the controller leaves its first decodes untimed as before.

#include "mtp-engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

bool llama_mtp::warms_up() const {
    if (const char * env = std::getenv("PYMTP_WARMUP"); env != nullptr && *env) {
        return std::strcmp(env, "0") != 0; // tests run it on the CPU; "0" turns it off
    }
    return ctrl.graphs;
}

void llama_mtp::warm_up() {
    if (ctx_mtp == nullptr || !warms_up()) {
        return;
    }
    // the sizes this engine verifies: at most its n_draft + 1 rows (llama-server sizes the target's outputs per
    // sequence for that many; more aborted it in llama_context::output_reserve)
    const int32_t n_max =
        std::min({ params.n_draft, k_max, llama_mtp_adaptive_default_max(), n_ctx - 3, n_batch - 1 }) + 1;
    llama_token tok = llama_vocab_bos(vocab);
    if (tok < 0 || tok >= n_vocab) {
        tok = 0;
    }
    const std::vector<llama_token> toks(std::max(n_max, 1), tok);
    bool                           ok = true;
    for (int32_t n = 1; n <= n_max && ok; ++n) {
        for (int32_t rep = 0; rep < 2 && ok; ++rep) {
            // as a step decodes them: a verify outputs every row's logits, a plain step the last row's
            ok = decode_target(toks.data(), n, 0, n > 1, true) == LLAMA_MTP_OK; // false: no room in the context
            // then the MTP decodes of a step after it: the first draft decode writes the step's n rows ahead of
            // its own (queue_ahead: n + 1 rows), a draft after a step that accepted none decodes 1 row
            if (ok) {
                ok = catch_up(toks.data(), n, 0, /*for_draft*/ true) == LLAMA_MTP_OK &&
                     draft_at(n, tok, h_at(n - 1), 1, nullptr, /*keep_first*/ true) == LLAMA_MTP_OK &&
                     draft_at(n + 1, tok, h_at(n), 1, nullptr, /*keep_first*/ true) == LLAMA_MTP_OK;
            }
            truncate_target_to(0);
            truncate_mtp_to(0);
        }
        n_warmed = ok ? n : n_warmed;
    }
    stats = llama_mtp_stats{};
}
