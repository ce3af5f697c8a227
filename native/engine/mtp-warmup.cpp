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
// best fixed length on the H100 where it ran 0.87 (docs/journal/2026-11-27-gpu-default-sessions.md, "A warm start on
// the GPU, stale acceptance and the 9-row verify"). The MTP decodes warmed are the ones a step runs after such a
// verify: a draft decode with the verified rows ahead of its own, and a lone draft row (greedy drafts: the backend
// argmax attached). A request's way of sampling (the backend samplers on the target and the MTP contexts: other
// graphs) is warmed the same way when it first comes (warm_sampling). Not warmed: the catch-up of a prompt; the
// controller leaves its first decodes untimed as before.

#include "mtp-engine.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

bool llama_mtp::warms_up() const {
    if (const char * env = std::getenv("PYMTP_WARMUP"); env != nullptr && *env) {
        return std::strcmp(env, "0") != 0; // tests run it on the CPU; "0" turns it off
    }
    return on_gpu;
}

int32_t llama_mtp::warm_sizes() const {
    if (ctx_mtp == nullptr) {
        return 1; // MTP off: plain decodes only
    }
    // the sizes this engine verifies: at most its n_draft + 1 rows (llama-server sizes the target's outputs per
    // sequence for that many; more aborted it in llama_context::output_reserve)
    return std::min({ params.n_draft, k_max, llama_mtp_adaptive_default_max(), n_ctx - 3, n_batch - 1 }) + 1;
}

// the token every warm-up decode holds (what it decodes is removed again; only the shapes matter)
static llama_token warm_token(const llama_vocab * vocab, int32_t n_vocab) {
    const llama_token tok = llama_vocab_bos(vocab);
    return tok < 0 || tok >= n_vocab ? 0 : tok;
}

// a way of sampling: what samples the target's rows and what the drafts' (warmed_way)
static int32_t way_of(mtp::backend_pick target, mtp::backend_pick draft) {
    return 3 * (int32_t) target + (int32_t) draft;
}

int32_t llama_mtp::warm_decodes(llama_sampler * draft_chain, bool with_mtp) {
    const int32_t                  n_max = warm_sizes();
    const llama_token              tok   = warm_token(vocab, n_vocab);
    const std::vector<llama_token> toks(std::max(n_max, 1), tok);
    int32_t                        n_done = 0;
    for (int32_t n = 1; n <= n_max; ++n) {
        for (int32_t rep = 0; rep < 2; ++rep) {
            // as a step decodes them: a verify outputs every row's logits, a plain step the last row's
            bool ok = decode_target(toks.data(), n, 0, n > 1, true) == LLAMA_MTP_OK; // false: no room in the context
            // then the MTP decodes of a step after it: the first draft decode writes the step's n rows ahead of
            // its own (queue_ahead: n + 1 rows), a draft after a step that accepted none decodes 1 row. Several
            // heads draft from an MTP KV that ends at the draft's position (the catch-up writes it), so they make
            // no such lone row here
            if (ok && with_mtp) {
                ok = catch_up(toks.data(), n, 0, /*for_draft*/ true) == LLAMA_MTP_OK &&
                     draft_at(n, tok, h_at(n - 1), 1, draft_chain, /*keep_first*/ true) == LLAMA_MTP_OK &&
                     (multi() || draft_at(n + 1, tok, h_at(n), 1, draft_chain, /*keep_first*/ true) == LLAMA_MTP_OK);
            }
            truncate_target_to(0);
            truncate_mtp_to(0);
            if (!ok) {
                return n_done;
            }
        }
        n_done = n;
    }
    return n_done;
}

// The adaptive controller's prior (mtp-adaptive-cost.h, prime), right after the warm-up built and captured every
// size's graphs: each target decode size once more as a repeat (what it costs warm), a lone draft row (D), and decodes
// that change size (S: what one costs over its warm repeat). A fresh engine then plans its first steps with costs of
// this machine, not with plain steps and probes that time them. (PYMTP_ADAPTIVE_START=0: not primed;
// mtp-adaptive-supervisor.h, start_rules.)
void llama_mtp::time_warm_sizes() {
    if (!ctrl.start_rules) {
        return;
    }
    const int32_t n_max = n_warmed;
    if (n_max < 1) {
        return;
    }
    const llama_token              tok = warm_token(vocab, n_vocab);
    const std::vector<llama_token> toks(n_max, tok);
    auto                           timed = [&](int32_t n) {
        const auto t0 = mtp::clock_type::now();
        const bool ok = decode_target(toks.data(), n, 0, n > 1, true) == LLAMA_MTP_OK;
        llama_synchronize(ctx_tgt);
        const double ms = mtp::ms_since(t0);
        truncate_target_to(0);
        return ok ? ms : -1.0;
    };
    std::vector<double> t(n_max, -1.0);
    for (int32_t n = 1; n <= n_max; ++n) {
        timed(n);            // the size's graph back in use
        t[n - 1] = timed(n); // a repeat: warm
    }
    double  s   = 0.0;
    int32_t n_s = 0;
    for (int32_t rep = 0; rep < 2 && n_max >= 2 && t[0] > 0.0 && t[n_max - 1] > 0.0; ++rep) {
        timed(n_max);
        const double a = timed(1); // a plain decode after a verify
        const double b = timed(n_max);
        if (a > 0.0 && b > 0.0) {
            s += std::max(0.0, a - t[0]) + std::max(0.0, b - t[n_max - 1]);
            n_s += 2;
        }
    }
    // D: a lone draft row after a one-token step, the second time (several heads make no lone row)
    double d = -1.0;
    for (int32_t rep = 0; rep < 2 && !multi(); ++rep) {
        bool       ok = decode_target(toks.data(), 1, 0, false, true) == LLAMA_MTP_OK &&
                        catch_up(toks.data(), 1, 0, /*for_draft*/ true) == LLAMA_MTP_OK &&
                        draft_at(1, tok, h_at(0), 1, nullptr, /*keep_first*/ true) == LLAMA_MTP_OK;
        const auto t0 = mtp::clock_type::now();
        ok            = ok && draft_at(2, tok, h_at(1), 1, nullptr, /*keep_first*/ true) == LLAMA_MTP_OK;
        d             = ok ? mtp::ms_since(t0) : -1.0;
        truncate_target_to(0);
        truncate_mtp_to(0);
    }
    drafts.clear();
    q.clear();
    ctrl.prime(t.data(), n_max, d, n_s > 0 ? s / n_s : -1.0);
}

void llama_mtp::warm_up() {
    if (ctx_mtp == nullptr || !warms_up()) {
        return;
    }
    n_warmed = warm_decodes(nullptr, /*with_mtp*/ true);
    time_warm_sizes();
    stats      = llama_mtp_stats{};
    warmed_way = way_of(mtp::backend_pick::none, mtp::backend_pick::greedy);
}

// The graphs of a request's way of sampling. llama_mtp_set_target_sampling attaches a backend sampler to the
// target context (the argmax, or the top candidates), and a T > 0 request's drafts take the MTP context's top
// candidates (mtp-top-k): each adds nodes to the graph of every decode size, so the graphs that warm_up() built
// at init are not the ones these decodes run. On the H100 (the built-in model, T=0.7;
// docs/journal/2026-11-28-gpu-catch-up-and-sampling.md, "What the default measures at T=0.7 on a GPU") each such
// size's first two decodes took 5-14 ms against 1.3-2.1 warm (the graph built, then captured): 5-9 of the
// default's drafting steps, 44-66 ms of its 3.8 s of decoding (1.2-1.8%), and the first two steps of every Model,
// MTP off's included. So, once per way of sampling and only on an empty context (a conversation's prefix is kept
// for the request to reuse), the decodes a step makes are run twice with those samplers attached (the drafts as
// the request will draft them), and a plain decode without the hidden-state output (the graph of a sleeping
// engine's steps); then all of it is removed. Nothing of the request changes: the drafts' random stream, the stats
// and the controller are as they were.
void llama_mtp::warm_sampling(llama_sampler * chain) {
    if (!warms_up() || !tokens.empty() || llama_memory_seq_pos_max(mem_tgt(), params.seq_id) >= 0) {
        return;
    }
    if (const char * env = std::getenv("PYMTP_WARMUP_SAMPLING"); env != nullptr && std::strcmp(env, "0") == 0) {
        return; // A/B runs: the init warm-up only
    }
    llama_sampler *         draft_chain = ctx_mtp != nullptr && mode != LLAMA_MTP_DRAFT_GREEDY ? chain : nullptr;
    const mtp::backend_pick draft_kind =
        ctx_mtp == nullptr ? mtp::backend_pick::none : wanted_backend_draft(draft_chain);
    const int32_t way = way_of(target_kind, draft_kind);
    if (way == warmed_way) {
        return;
    }
    warmed_way = way;
    if (target_kind == mtp::backend_pick::none && draft_kind != mtp::backend_pick::top_k) {
        return; // the graphs warm_up() built (or, MTP off, a plain decode's, built by the prompt's last chunk)
    }
    const std::mt19937    rng0    = rng;
    const llama_mtp_stats stats0  = stats;
    const int32_t         ctrl_k0 = ctrl.k_max;
    ctrl.k_max                    = 0; // the controller learns nothing from these decodes

    // a sleeping MTP side (a sleep outlives generations) writes and drafts nothing until it wakes: target only
    const bool mtp_too = ctx_mtp != nullptr && !ctrl.asleep;
    n_warmed_sampling  = warm_decodes(draft_chain, mtp_too);
    bool ok            = n_warmed_sampling == warm_sizes();
    // a sleeping engine's plain decodes output no hidden state: another graph (its first two decodes cost ~16 ms
    // at each fall asleep on the H100). Only this engine's switch: it is awake, so the output comes back on.
    if (ok && mtp_too) {
        llama_set_embeddings_nextn(ctx_tgt, false, /*masked*/ false);
        const llama_token tok = warm_token(vocab, n_vocab);
        for (int32_t rep = 0; rep < 2 && ok; ++rep) {
            ok = decode_target(&tok, 1, 0, false, true) == LLAMA_MTP_OK;
            truncate_target_to(0);
        }
        llama_set_embeddings_nextn(ctx_tgt, true, /*masked*/ false);
    }
    drafts.clear();
    q.clear();
    rng        = rng0;
    stats      = stats0;
    ctrl.k_max = ctrl_k0;
}
