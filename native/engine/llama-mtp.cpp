// pymtp: the MTP engine's C API (native/include/llama-mtp.h). These functions check arguments and
// orchestrate the parts of the engine (mtp-engine.h): the MTP KV writer, heads, drafting, verification.

#include "mtp-engine.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

llama_mtp_params llama_mtp_default_params(void) {
    llama_mtp_params p{};
    p.n_draft = 3;
    p.n_batch = 0;
    p.seq_id  = 0;
    return p;
}

llama_mtp * llama_mtp_init(llama_context * ctx_tgt, llama_context * ctx_mtp, llama_mtp_params params) {
    if (ctx_tgt == nullptr || params.n_draft < 0 || params.n_draft > LLAMA_MTP_MAX_DRAFT || params.seq_id < 0) {
        return nullptr;
    }
    const llama_model * model = llama_get_model(ctx_tgt);

    auto * m         = new llama_mtp();
    m->ctx_tgt       = ctx_tgt;
    m->ctx_mtp       = ctx_mtp;
    m->vocab         = llama_model_get_vocab(model);
    m->params        = params;
    m->n_embd        = llama_model_n_embd_out(model);
    m->n_vocab       = llama_vocab_n_tokens(m->vocab);
    m->n_ctx         = (int32_t) llama_n_ctx(ctx_tgt);
    m->caller_single = llama_n_seq_max(ctx_tgt) == 1;
    m->n_batch       = params.n_batch > 0 ? std::min<int32_t>(params.n_batch, llama_n_batch(ctx_tgt)) :
                                            (int32_t) llama_n_batch(ctx_tgt);
    m->batch_tgt     = llama_batch_ext_init(ctx_tgt);
    m->zeros.assign(m->n_embd, 0.0f);
    m->target_h.n_embd = m->n_embd;
    m->queue.n_embd    = m->n_embd;
    m->recurrent       = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
    if (m->recurrent) {
        // rejected drafts are rolled back with the context's recurrent-state snapshots
        m->k_max = std::min<int32_t>(LLAMA_MTP_MAX_DRAFT, (int32_t) llama_n_rs_seq(ctx_tgt));
    }

    // the target's rows sampled where it decodes (llama_mtp_verify_on_backend, llama_mtp_set_target_sampling);
    // PYMTP_VERIFY_ON_HOST=1: never (A/B runs); PYMTP_VERIFY_ON_BACKEND=1: on any backend (tests on the CPU)
    m->on_gpu          = mtp::decodes_on_gpu(model);
    m->rows_on_backend = std::getenv("PYMTP_VERIFY_ON_HOST") == nullptr &&
                         (std::getenv("PYMTP_VERIFY_ON_BACKEND") != nullptr || m->on_gpu);
    if (ctx_mtp != nullptr) {
        if (llama_model_n_embd_out(llama_get_model(ctx_mtp)) != m->n_embd ||
            (int32_t) llama_n_ctx(ctx_mtp) < m->n_ctx) {
            llama_batch_ext_free(m->batch_tgt);
            delete m;
            return nullptr;
        }
        m->batch_mtp   = llama_batch_ext_init(ctx_mtp);
        m->ctrl.graphs = m->on_gpu;
        // tests (mtp-draft.cpp, wanted_backend_draft): "0" the host takes every draft row, anything else the backend
        // samples them on a CPU too
        if (const char * env = std::getenv("PYMTP_DRAFT_ON_BACKEND"); env != nullptr) {
            m->backend_draft_off = std::strcmp(env, "0") == 0;
            m->draft_on_backend  = !m->backend_draft_off;
        }
        llama_mtp::hidden_output(ctx_tgt, true);
        llama_set_embeddings_nextn(ctx_mtp, true, /*masked*/ true);
        llama_set_nextn_layer_offset(ctx_mtp, 0);
        m->init_parallel();
    }
    // A/B runs (mtp-adaptive-supervisor.h, cutoff): untimed drafting blocks run their length, probes run where nothing
    // can pay
    if (const char * env = std::getenv("PYMTP_ADAPTIVE_NO_CUTOFF"); env != nullptr && std::strcmp(env, "1") == 0) {
        m->ctrl.cutoff = false;
    }
    // a verify among other sequences' rows runs as a second decode where the context splits uneven batches
    // (mtp-adaptive-cost.h, split_floor); PYMTP_ADAPTIVE_ALONE=1: the controller neither knows that nor shares the
    // draft cost with the slots beside it (llama_mtp_share_costs), as before (A/B runs)
    m->ctrl.splits = !mtp::adaptive_alone() && mtp::splits_uneven_batches(ctx_tgt);
    if (const char * env = std::getenv("PYMTP_ADAPTIVE_START"); env != nullptr && std::strcmp(env, "0") == 0) {
        m->ctrl.start_rules = false; // A/B runs: the controller's start without its rules (mtp-adaptive-supervisor.h)
    }
    // diagnosis (mtp-adaptive.h, trace_step): every engine of the process, MTP on or off, adaptive or a fixed length,
    // appends its steps to the one file; NULL: not traced
    if (const char * trace = std::getenv("PYMTP_ADAPTIVE_TRACE"); trace != nullptr && *trace) {
        static std::atomic<int32_t> n_traced{ 0 };
        m->ctrl.trace    = std::fopen(trace, "a");
        m->ctrl.trace_id = ++n_traced;
    }
    m->truncate_mtp_to(0);
    m->truncate_target_to(0);
    m->warm_up();
    return m;
}

void llama_mtp_free(llama_mtp * mtp) {
    if (mtp == nullptr) {
        return;
    }
    llama_batch_ext_free(mtp->batch_tgt);
    if (mtp->batch_mtp) {
        llama_batch_ext_free(mtp->batch_mtp);
    }
    for (size_t j = 1; j < mtp->head_batch.size(); ++j) {
        llama_batch_ext_free(mtp->head_batch[j]);
    }
    mtp->set_backend_draft(mtp::backend_pick::none); // the contexts outlive the engine
    mtp->set_target_pick(mtp::backend_pick::none);
    if (mtp->ctx_mtp != nullptr && !mtp->ctrl.asleep) {
        llama_mtp::hidden_output(mtp->ctx_tgt, false);
    }
    if (mtp->ctrl.trace) {
        std::fclose(mtp->ctrl.trace);
    }
    delete mtp;
}

// ---- the engine's own loop ----

int32_t llama_mtp_prefill(llama_mtp * m, const llama_token * toks, int32_t n) {
    if (m == nullptr || toks == nullptr || n <= 0) {
        return LLAMA_MTP_ERR_ARG;
    }
    if (n > m->n_ctx) {
        return LLAMA_MTP_ERR_CTX_FULL;
    }
    const auto t0 = mtp::clock_type::now();
    m->ctrl.began(); // a generation starts: its first steps carry its start (mtp-adaptive-supervisor.h, GEN_COLD)

    // longest common prefix with the KV; at least the last token is decoded again
    int32_t c = 0;
    while (c < m->n_past() && c < n && m->tokens[c] == toks[c]) {
        c++;
    }
    const int32_t t = std::min(c, n - 1);

    if (t != m->n_past()) {
        // Rewind. With MTP, the entry of position t needs h_{t-1}, so the target re-decodes from t-1
        // while the MTP KV keeps [0, t). Without MTP the target re-decodes from t-1 too: the target must
        // be fed exactly the same chunks with MTP on and off, since a token decoded in a batch of another
        // size gets logits that differ in the last bits (kernels that are not batch-size invariant) and
        // greedy near-ties would flip. For the same reason a recurrent/hybrid target never rolls back
        // through its draft snapshots here (plain decoding has none): it starts over, as it does
        // without MTP.
        int32_t keep_tgt = std::max(t - 1, 0);
        int32_t keep_mtp = t;
        if (m->recurrent || !m->truncate_target_to(keep_tgt)) {
            m->truncate_target_to(0);
            keep_tgt = 0;
            keep_mtp = 0;
        }
        m->truncate_mtp_to(keep_mtp);
        m->tokens.resize(keep_tgt);
    }

    m->stats.n_reused += m->n_past();
    for (int32_t s = m->n_past(); s < n;) {
        const int32_t len = std::min(m->n_batch, n - s);
        int32_t       rc  = m->decode_target(toks + s, len, s, false, s + len == n);
        if (rc == LLAMA_MTP_OK) {
            rc = m->catch_up(toks + s, len, s);
        }
        if (rc != LLAMA_MTP_OK) {
            llama_mtp_clear(m); // leave a consistent (empty) state behind
            return rc;
        }
        m->tokens.insert(m->tokens.end(), toks + s, toks + s + len);
        m->stats.n_prompt += len;
        s += len;
    }

    m->logits_pending = true;
    m->has_last       = false;
    m->step_out.clear();
    m->stats.t_prefill_ms += mtp::ms_since(t0);
    return LLAMA_MTP_OK;
}

int32_t llama_mtp_step(llama_mtp * m, llama_sampler * smpl, int32_t n_draft, llama_token * out, int32_t n_out_max) {
    if (m == nullptr || smpl == nullptr || out == nullptr || n_out_max < 1) {
        return LLAMA_MTP_ERR_ARG;
    }
    const auto   t_entry = mtp::clock_type::now();
    const double gap =
        m->step_exited ? std::chrono::duration<double, std::milli>(t_entry - m->step_exit).count() : -1.0;
    if (m->logits_pending) {
        const auto        t0  = mtp::clock_type::now();
        const llama_token tok = llama_sampler_sample(smpl, m->ctx_tgt, -1);
        m->stats.t_sample_ms += mtp::ms_since(t0);
        m->logits_pending = false;
        m->has_last       = true;
        m->id_last        = tok;
        m->stats.n_generated++;
        out[0] = tok;
        m->step_out.assign(1, tok);
        m->step_sampled_only = true;
        m->step_exit         = mtp::clock_type::now();
        m->step_exited       = true;
        return 1;
    }
    const double draft_ms0 = m->stats.t_draft_ms, catchup_ms0 = m->stats.t_catchup_ms;
    if (!m->has_last) {
        return LLAMA_MTP_ERR_STATE;
    }
    const int32_t n_past = m->n_past();
    if (n_past >= m->n_ctx) {
        return LLAMA_MTP_ERR_CTX_FULL;
    }

    int32_t k = n_draft < 0 ? m->params.n_draft : n_draft;
    k         = std::min({ k, m->k_max, m->n_ctx - 1 - n_past, n_out_max - 1 });
    if (m->ctx_mtp == nullptr || k < 0) {
        k = 0;
    }
    int32_t k_plan = -1; // traced: what plan() allowed (-1: no plan this step)
    if (m->ctx_mtp != nullptr && m->ctrl.on()) {
        m->ctrl.load = 1;
        k            = m->plan_step(k, &k_plan); // the most this step drafts; it may stop earlier
    }
    // draft after id_last; the MTP KV entry of n_past, (id_last, h_{n_past-1}), is the teacher-forced one.
    // The entries queued before it (the last step's, or deferred ones) are written first: by the draft
    // decode itself where it can (queue_ahead), else apart
    int32_t rc = m->draft_at(n_past, m->id_last, m->h_at(n_past - 1), k, smpl, /*keep_first*/ true);
    if (rc != LLAMA_MTP_OK) {
        return rc;
    }
    k = (int32_t) m->drafts.size();
    m->ctrl.drafted(k);

    // verify: one target decode of [id_last, d_1..d_k] with logits everywhere
    std::vector<llama_token> & vt = m->verify_toks;
    vt.assign(1, m->id_last);
    vt.insert(vt.end(), m->drafts.begin(), m->drafts.end());
    const auto t0 = mtp::clock_type::now();
    rc            = m->decode_target(vt.data(), k + 1, n_past, true, true);
    m->stats.t_verify_ms += mtp::ms_since(t0);
    if (rc != LLAMA_MTP_OK) {
        return rc;
    }
    m->stats.n_steps++;

    const int32_t n_out = m->verify(smpl, vt, k, out, 0);
    m->step_out.assign(out, out + n_out);
    m->step_sampled_only   = false;
    const double target_ms = mtp::ms_since(t0);
    m->ctrl.timed_target(k + 1, 1, target_ms); // the decode and the sampling of its rows

    // keep [id_last, accepted drafts] in the target; drop the rest
    if (n_out - 1 < k && !m->truncate_target_to(n_past + n_out)) {
        return LLAMA_MTP_ERR_STATE; // cannot roll back: never continue from a polluted context
    }
    m->tokens.insert(m->tokens.end(), vt.begin(), vt.begin() + n_out);
    const auto t1 = mtp::clock_type::now();
    // a drafting step's rows wait for the next draft decode; a plain step's are written as before (queued
    // too, they made the H100's awake plain steps at T=0.7 3-9% slower, for a reason not found)
    rc            = m->catch_up(vt.data(), n_out, n_past, /*for_draft*/ k > 0);
    if (n_out > 1 && m->queue.empty()) { // written apart (queued: the next draft decode writes them, timed there)
        m->ctrl.timed_catchup(n_out, mtp::ms_since(t1));
    }
    m->id_last = out[n_out - 1];
    if (gap >= 0.0) { // what the step cost outside its timed parts, and the caller's time before it
        const double step_ms = mtp::ms_since(t_entry);
        const double parts   = (m->stats.t_draft_ms - draft_ms0) + target_ms + (m->stats.t_catchup_ms - catchup_ms0);
        m->ctrl.timed_overhead(gap + std::max(0.0, step_ms - parts));
        if (!m->ctrl.asleep) {
            m->ctrl.stepped(n_out, gap + step_ms); // end to end, for the controller's windows
        }
        m->ctrl.trace_step(k_plan, k, n_out, m->stats.t_draft_ms - draft_ms0, target_ms,
                           m->stats.t_catchup_ms - catchup_ms0, gap, step_ms);
    }
    m->step_exit   = mtp::clock_type::now();
    m->step_exited = true;
    return rc == LLAMA_MTP_OK ? n_out : rc;
}

void llama_mtp_set_draft_mode(llama_mtp * mtp, llama_mtp_draft_mode mode, uint32_t seed) {
    if (mtp) {
        mtp->mode      = mode == LLAMA_MTP_DRAFT_AUTO ? LLAMA_MTP_DRAFT_GREEDY : mode;
        // the controller keeps acceptance per mode (the test mode accepts like a stochastic one)
        mtp->ctrl.mode = mtp->mode == LLAMA_MTP_DRAFT_GREEDY ? 0 : mtp->mode == LLAMA_MTP_DRAFT_CHAIN ? 1 : 2;
        // salted: the request's chain seeds its own RNG with the same seed, and the two streams must be
        // independent (identical streams correlate draft/verify draws with the first token's draw)
        std::seed_seq seq{ seed, 0x6d747021u };
        mtp->rng.seed(seq);
    }
}

void llama_mtp_clear(llama_mtp * m) {
    if (m == nullptr) {
        return;
    }
    m->truncate_target_to(0);
    m->truncate_mtp_to(0);
    m->tokens.clear();
    m->logits_pending = false;
    m->has_last       = false;
    m->caller_pos     = -1;
    m->id_last        = LLAMA_TOKEN_NULL;
    m->step_out.clear();
}

int32_t llama_mtp_step_logprobs(llama_mtp * m, int32_t i, int32_t n_top, float * logprob, llama_token * top_ids,
                                float * top_logprobs) {
    if (m == nullptr || n_top < 0 || (n_top > 0 && (top_ids == nullptr || top_logprobs == nullptr))) {
        return LLAMA_MTP_ERR_ARG;
    }
    if (m->step_out.empty()) {
        return LLAMA_MTP_ERR_STATE;
    }
    if (i < 0 || i >= (int32_t) m->step_out.size()) {
        return LLAMA_MTP_ERR_ARG;
    }
    if (m->target_kind != mtp::backend_pick::none) {
        return LLAMA_MTP_ERR_STATE; // the rows stayed where they were sampled (llama_mtp_set_target_sampling)
    }
    // a step's token i came from row i of its verify decode; the first token after a prefill (the step
    // that only sampled) from the prefill's last row
    const float * row = llama_get_logits_ith(m->ctx_tgt, m->step_sampled_only ? -1 : i);
    if (row == nullptr) {
        return LLAMA_MTP_ERR_STATE;
    }
    const int32_t n   = m->n_vocab;
    // log-sum-exp in double: the same value whatever order the rows were computed in
    const float   mx  = *std::max_element(row, row + n);
    double        sum = 0.0;
    for (int32_t t = 0; t < n; ++t) {
        sum += std::exp((double) row[t] - mx);
    }
    const double lse = mx + std::log(sum);
    if (logprob != nullptr) {
        *logprob = (float) (row[m->step_out[i]] - lse);
    }
    // the n_top most likely, best first (equal logits by token id: a deterministic order), kept sorted in
    // top_ids while scanning the row once
    n_top          = std::min(n_top, n);
    auto    better = [row](llama_token a, llama_token b) { return row[a] > row[b] || (row[a] == row[b] && a < b); };
    int32_t kept   = 0;
    for (llama_token t = 0; t < n && n_top > 0; ++t) {
        if (kept == n_top && !better(t, top_ids[kept - 1])) {
            continue;
        }
        int32_t j = kept < n_top ? kept++ : kept - 1;
        for (; j > 0 && better(t, top_ids[j - 1]); --j) {
            top_ids[j] = top_ids[j - 1];
        }
        top_ids[j] = t;
    }
    for (int32_t j = 0; j < n_top; ++j) {
        top_logprobs[j] = (float) (row[top_ids[j]] - lse);
    }
    return n_top;
}

int32_t llama_mtp_set_synthetic_rates(llama_mtp * m, const float * rates, int32_t n) {
    if (m == nullptr || n < 0 || (n > 0 && rates == nullptr) || n > LLAMA_MTP_MAX_DRAFT) {
        return LLAMA_MTP_ERR_ARG;
    }
    std::vector<double> cond;
    double              prev = 1.0;
    for (int32_t i = 0; i < n; ++i) {
        if (!(rates[i] >= 0.0f && rates[i] <= 1.0f)) {
            return LLAMA_MTP_ERR_ARG;
        }
        // unconditional a_i -> conditional a_i / a_{i-1}; past the last rate, the last ratio repeats
        cond.push_back(prev > 0.0 ? std::min(1.0, rates[i] / prev) : 0.0);
        prev = rates[i];
    }
    m->synth_cond = std::move(cond);
    return LLAMA_MTP_OK;
}

void llama_mtp_time_draft(llama_mtp * m, double ms) {
    if (m != nullptr) {
        m->ctrl.timed_draft(ms);
    }
}

void llama_mtp_pin_adaptive_costs(llama_mtp * m, double plain_ms, double draft_ms, double verify_extra_ms) {
    if (m) {
        m->wake();
        m->ctrl.pin_costs(plain_ms, draft_ms, verify_extra_ms);
    }
}

void llama_mtp_pin_adaptive_target_costs(llama_mtp * m, const double * target_ms, int32_t n_sizes, double draft_ms) {
    if (m && target_ms && n_sizes >= 2) {
        m->wake();
        m->ctrl.pin_costs(target_ms[0], draft_ms, target_ms[1] - target_ms[0]);
        const double extra = target_ms[n_sizes - 1] - target_ms[n_sizes - 2];
        for (int32_t n = 1; n <= mtp::controller::K + 1; ++n) {
            const double t           = n <= n_sizes ? target_ms[n - 1] : target_ms[n_sizes - 1] + extra * (n - n_sizes);
            m->ctrl.target[0][n - 1] = mtp::running_mean{ t, 1000 };
        }
    }
}

// a measured ratio as if several windows had found it (tests); r <= 0: not measured yet
static mtp::realized_rate measured(double r) {
    return r > 0.0 ? mtp::realized_rate{ r * 100.0, 100.0, 5.0 } : mtp::realized_rate{};
}

void llama_mtp_set_realized_rates(llama_mtp * m, double plain_tok_per_ms, double draft_tok_per_ms) {
    if (m) {
        m->ctrl.real_plain      = measured(plain_tok_per_ms);
        m->ctrl.real_draft      = measured(draft_tok_per_ms);
        m->ctrl.real_share      = measured(draft_tok_per_ms > 0.0 ? 1.0 : 0.0); // windows that drafted every step
        m->ctrl.n_windows       = 0;
        m->ctrl.n_failed_checks = 0;
        // rates as from several windows of each policy (a veto resting on one free window is checked at once)
        m->ctrl.n_free_windows  = std::max<int64_t>(m->ctrl.n_free_windows, 4);
        m->ctrl.n_plain_windows = std::max<int64_t>(m->ctrl.n_plain_windows, 4);
        m->ctrl.window_check    = false;
        m->ctrl.next_window();
    }
}

void llama_mtp_set_realized_share(llama_mtp * m, double share) {
    if (m) {
        m->ctrl.real_share = measured(share);
        m->ctrl.next_window();
    }
}

int32_t llama_mtp_warmed_sizes(const llama_mtp * m) {
    return m ? m->n_warmed : 0;
}

int32_t llama_mtp_warmed_sampling(const llama_mtp * m) {
    return m ? m->n_warmed_sampling : 0;
}

int32_t llama_mtp_target_sampling(const llama_mtp * m) {
    return m ? (int32_t) m->target_kind : 0;
}

int32_t llama_mtp_n_past(const llama_mtp * mtp) {
    return mtp ? mtp->n_past() : 0;
}

bool llama_mtp_has_draft(const llama_mtp * mtp) {
    return mtp && mtp->ctx_mtp != nullptr;
}

int32_t llama_mtp_max_draft(const llama_mtp * mtp) {
    return mtp && mtp->ctx_mtp ? mtp->k_max : 0;
}

void llama_mtp_get_stats(const llama_mtp * mtp, llama_mtp_stats * out) {
    if (mtp && out) {
        *out = mtp->stats;
    }
}

void llama_mtp_reset_stats(llama_mtp * mtp) {
    if (mtp) {
        mtp->stats = llama_mtp_stats{};
        mtp->ctrl.reset_stats();
    }
}

// ---- several MTP heads ----

int32_t llama_mtp_set_heads(llama_mtp * m, llama_context ** ctx_heads, int32_t n_heads) {
    if (m == nullptr || m->ctx_mtp == nullptr || ctx_heads == nullptr || n_heads < 1 || n_heads > LLAMA_MTP_MAX_DRAFT ||
        ctx_heads[0] != m->ctx_mtp) {
        return LLAMA_MTP_ERR_ARG;
    }
    return m->set_heads(ctx_heads, n_heads);
}

void llama_mtp_set_head_policy(llama_mtp * m, llama_mtp_head_policy policy) {
    if (m &&
        (policy == LLAMA_MTP_HEADS_PER_LAYER || policy == LLAMA_MTP_HEADS_FIRST || policy == LLAMA_MTP_HEADS_CAPPED)) {
        m->policy = policy;
    }
}

int32_t llama_mtp_n_heads(const llama_mtp * m) {
    return m ? m->n_heads() : 0;
}

int32_t llama_mtp_parallel(const llama_mtp * m) {
    return m && !m->multi() ? m->n_par : 0;
}

int32_t llama_mtp_peek_draft(llama_mtp * m, llama_token id_last, int32_t k, llama_token * out, float * logits) {
    if (m == nullptr || k < 0 || k > LLAMA_MTP_MAX_DRAFT || (k > 0 && out == nullptr)) {
        return LLAMA_MTP_ERR_ARG;
    }
    m->wake(); // inspection: a sleeping engine's MTP KV restarts here
    if (id_last == LLAMA_TOKEN_NULL) {
        if (!m->has_last) {
            return LLAMA_MTP_ERR_STATE;
        }
        id_last = m->id_last;
    }
    if (m->ctx_mtp == nullptr || k == 0) {
        return 0;
    }
    if (m->n_past() + k >= m->n_ctx) {
        return LLAMA_MTP_ERR_CTX_FULL;
    }
    if (const int32_t rc_flush = m->flush_deferred(); rc_flush != LLAMA_MTP_OK) {
        return rc_flush;
    }
    const llama_pos p0 = m->n_past();
    GGML_ASSERT(llama_memory_seq_pos_max(m->mem_mtp(), m->params.seq_id) + 1 == p0 &&
                "between steps the MTP KV ends where the target's does");
    const llama_mtp_stats saved_stats = m->stats;
    const auto            saved_mode  = m->mode;
    m->mode                           = LLAMA_MTP_DRAFT_GREEDY;
    m->peek_logits                    = logits;
    // the draft rows are dropped again afterwards: every head's MTP KV ends at p0
    const int32_t rc                  = m->draft_at(p0, id_last, m->h_at(p0 - 1), k, nullptr, /*keep_first*/ false);
    m->peek_logits                    = nullptr;
    m->mode                           = saved_mode;
    const int32_t n                   = (int32_t) m->drafts.size();
    std::copy(m->drafts.begin(), m->drafts.end(), out);
    m->drafts.clear();
    m->q.clear();
    m->stats = saved_stats;
    return rc == LLAMA_MTP_OK ? n : rc;
}

size_t llama_mtp_abi_sizeof(int32_t which) {
    switch (which) {
        case 0:
            return sizeof(llama_mtp_params);
        case 1:
            return sizeof(llama_mtp_stats);
        case 2:
            return sizeof(llama_model_params);
        case 3:
            return sizeof(llama_context_params);
        case 4:
            return sizeof(llama_mtp_adaptive_stats);
        default:
            return 0;
    }
}

// ---- caller-decoded targets (llama-server) ----

int32_t llama_mtp_observe(llama_mtp * m, const llama_token * toks, int32_t n, llama_pos p0, int32_t row0) {
    const llama_mtp_run run = { m, toks, n, p0, row0 };
    return llama_mtp_observe_runs(&run, 1);
}

int32_t llama_mtp_observe_runs(const llama_mtp_run * runs, int32_t n_runs) {
    if (runs == nullptr || n_runs <= 0) {
        return n_runs == 0 ? LLAMA_MTP_OK : LLAMA_MTP_ERR_ARG;
    }
    llama_mtp * m0 = runs[0].mtp;
    for (int32_t r = 0; r < n_runs; ++r) {
        const auto & run = runs[r];
        if (run.mtp == nullptr || run.toks == nullptr || run.n_tokens <= 0 || run.p0 < 0 || run.row0 < 0 ||
            run.mtp->ctx_mtp != m0->ctx_mtp || run.mtp->ctx_tgt != m0->ctx_tgt) {
            return LLAMA_MTP_ERR_ARG;
        }
        for (int32_t i = 0; i < r; ++i) {
            if (runs[i].mtp == run.mtp || runs[i].mtp->params.seq_id == run.mtp->params.seq_id) {
                return LLAMA_MTP_ERR_ARG; // one run per sequence and decode
            }
        }
    }
    std::vector<const llama_mtp_run *> awake; // an engine asleep keeps nothing
    for (int32_t r = 0; r < n_runs; ++r) {
        if (runs[r].p0 != runs[r].mtp->caller_pos) {
            runs[r].mtp->caller_pos = -1; // not the rows of the step under way (a prompt): no step to time
        }
        if (!runs[r].mtp->ctrl.asleep) {
            awake.push_back(&runs[r]);
        }
    }
    if (m0->ctx_mtp == nullptr || awake.empty()) {
        return LLAMA_MTP_OK; // all asleep: nothing kept (the target may have output no hidden states)
    }
    const auto    t0    = mtp::clock_type::now();
    const float * h_all = llama_get_embeddings_nextn(m0->ctx_tgt);
    if (h_all == nullptr) {
        return LLAMA_MTP_ERR_STATE;
    }
    // the caller decoded these positions again: whatever the MTP side held there is replaced
    std::vector<llama_mtp *> now;
    for (const llama_mtp_run * run : awake) {
        run->mtp->truncate_mtp_to(run->p0);
        run->mtp->observe(run->toks, run->n_tokens, run->p0, h_all, run->row0);
        if (!run->mtp->defers()) {
            now.push_back(run->mtp);
        } else {
            run->mtp->ctrl.n_deferred += run->n_tokens;
        }
    }
    // the sequences that catch up now share as few MTP decodes as fit a batch
    const int32_t rc = llama_mtp::write_queued(now);
    const double  ms = mtp::ms_since(t0) / (double) awake.size();
    for (const llama_mtp_run * run : awake) {
        run->mtp->stats.t_catchup_ms += ms; // the shared decode, split evenly
        if (run->n_tokens > 1 && run->n_tokens <= run->mtp->ctrl.k_max + 1 && !now.empty()) {
            run->mtp->ctrl.timed_catchup(run->n_tokens, ms); // a verified step's rows (not a prompt chunk)
        }
    }
    return rc;
}

int32_t llama_mtp_draft(llama_mtp * m, llama_sampler * chain, llama_token id_last, llama_pos pos, int32_t n_draft,
                        llama_token * out) {
    if (m == nullptr || pos < 0 || n_draft < 0 || (n_draft > 0 && out == nullptr)) {
        return LLAMA_MTP_ERR_ARG;
    }
    // the step that ended here, end to end (the caller's work in it included): for the controller's windows
    // (a server of one slot only: with several, measured on the CPU, 4 slots ran 0.88x of plain with these
    // windows against 1.00x without them, in runs of three rounds each), and traced as the own loop's steps
    const auto t_entry = mtp::clock_type::now();
    const bool next    = m->caller_pos >= 0 && pos > m->caller_pos && pos - m->caller_pos <= m->ctrl.k_max + 1;
    if (!next) {
        m->ctrl.began(); // not the step after the last one: a new generation (a request) on this sequence
    } else {
        const int32_t n_out   = pos - m->caller_pos;
        const double  step_ms = std::chrono::duration<double, std::milli>(t_entry - m->caller_t).count();
        if (m->caller_single && !m->ctrl.asleep) {
            m->ctrl.stepped(n_out, step_ms);
        }
        m->ctrl.trace_step(m->caller_k_plan, (int32_t) m->drafts.size(), n_out,
                           m->stats.t_draft_ms - m->caller_draft_ms, m->caller_target_ms,
                           m->stats.t_catchup_ms - m->caller_catchup_ms, -1.0, step_ms, m->params.seq_id);
    }
    m->verify_toks.assign(1, id_last);
    m->drafts.clear();
    m->q.clear();
    m->caller_t          = t_entry;
    m->caller_pos        = pos;
    m->caller_draft_ms   = m->stats.t_draft_ms;
    m->caller_catchup_ms = m->stats.t_catchup_ms;
    m->caller_k_plan     = -1;
    int32_t k            = std::min({ n_draft, m->k_max, m->n_ctx - 1 - (int32_t) pos });
    if (m->ctx_mtp != nullptr && m->ctrl.on()) {
        // at the load of the last reported decode; each slot sleeps as the own loop does (the target's
        // hidden-state output stops once every slot sleeps)
        k = m->plan_step(k, &m->caller_k_plan);
    }
    m->ctrl.pending = 1;
    if (m->ctx_mtp == nullptr || k <= 0) {
        m->ctrl.drafted(0);
        return 0;
    }
    m->truncate_mtp_to(pos);
    if (!m->queue.empty()) {
        // entries deferred while catch-up was off: the MTP KV must be contiguous before drafting
        const auto    t0       = mtp::clock_type::now();
        const int32_t rc_write = llama_mtp::write_queued({ m });
        m->stats.t_catchup_ms += mtp::ms_since(t0);
        if (rc_write != LLAMA_MTP_OK) {
            return rc_write;
        }
    }
    // the first draft entry goes at pos: the KV must end at pos-1 (or be empty)
    const llama_pos mx = llama_memory_seq_pos_max(m->mem_mtp(), m->params.seq_id);
    if (mx >= 0 && mx != pos - 1) {
        llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, -1, -1);
    }
    m->heads_align();
    const int32_t rc = m->draft_at(pos, id_last, m->h_at(pos - 1), k, chain, /*keep_first*/ false);
    if (rc != LLAMA_MTP_OK) {
        m->drafts.clear();
        m->q.clear();
        return rc;
    }
    std::copy(m->drafts.begin(), m->drafts.end(), out);
    m->verify_toks.insert(m->verify_toks.end(), m->drafts.begin(), m->drafts.end());
    m->ctrl.drafted((int32_t) m->drafts.size());
    m->ctrl.pending = (int32_t) m->drafts.size() + 1;
    return (int32_t) m->drafts.size();
}

int32_t llama_mtp_verify(llama_mtp * m, llama_sampler * chain, int32_t row0, int32_t n_draft, llama_token * out,
                         int32_t n_out_max) {
    if (m == nullptr || chain == nullptr || out == nullptr || row0 < 0 || n_draft < 0 ||
        n_draft + 1 > (int32_t) m->verify_toks.size() || n_out_max < n_draft + 1) {
        return LLAMA_MTP_ERR_ARG;
    }
    std::vector<llama_token> vt(m->verify_toks.begin(), m->verify_toks.begin() + n_draft + 1);
    if ((int32_t) m->q.size() > n_draft) {
        m->q.resize(n_draft);
    }
    const auto    t0    = mtp::clock_type::now();
    const int32_t n_out = m->verify(chain, vt, n_draft, out, row0);
    m->ctrl.timed_sampling(n_draft + 1, mtp::ms_since(t0)); // the caller timed only the decode
    m->stats.n_steps++;
    m->verify_toks.clear();
    return n_out;
}

bool llama_mtp_verify_on_backend(const llama_mtp * m) {
    return m != nullptr && m->ctx_mtp != nullptr && m->rows_on_backend;
}

void llama_mtp_set_target_sampling(llama_mtp * m, llama_sampler * chain, bool rows_needed) {
    if (m == nullptr) {
        return;
    }
    m->set_target_pick(m->rows_on_backend && !rows_needed ? mtp::chain_pick(chain) : mtp::backend_pick::none);
    m->warm_sampling(chain); // the graphs with those samplers, before the prompt (mtp-warmup.cpp)
}

void llama_mtp_report_decode(llama_mtp * m, int32_t n_seqs, int32_t n_tokens, double ms) {
    if (m == nullptr || m->ctrl.pending <= 0 || n_seqs < 1) {
        return;
    }
    if (m->ctrl.pending > 1) {
        m->stats.t_verify_ms += ms;
    }
    m->caller_target_ms = ms; // traced
    m->ctrl.timed_batch(m->ctrl.pending, n_seqs, n_tokens, ms);
    m->ctrl.pending = 0;
}

// ---- adaptive draft length ----

int32_t llama_mtp::plan_step(int32_t k, int32_t * k_plan) {
    if (ctrl.asleep) {
        *k_plan = -1;
        if (ctrl.asleep_step()) {
            wake(); // from the next step on
        }
        return 0;
    }
    k       = ctrl.plan(k);
    *k_plan = k;
    if (ctrl.sleeps_now(k)) {
        sleep(); // plain decoding has kept winning: this step is the first asleep
    }
    return k;
}

int32_t llama_mtp_adaptive_default_max(void) {
    // verifies of at most 8 rows: ggml-cuda's quantized mat-vec takes up to 8 columns, and a 9th row moves
    // every product to the tiled kernels (H200, the built-in model: a 9-row verify 5.4-6.3 ms against
    // 3.5-3.7 for 8 rows). Sweeping k=8 cost the GPU runs time; the simulator with those costs puts auto
    // 1.1% higher without it (60 seeds), and no preset lower on average
    // (docs/journal/2026-11-27-gpu-default-sessions.md, "A warm start on the GPU, stale acceptance and the
    // 9-row verify")
    return 7;
}

void llama_mtp_set_adaptive(llama_mtp * m, int32_t k_max) {
    if (m) {
        m->ctrl.k_max = std::clamp<int32_t>(k_max, 0, m->ctx_mtp ? m->k_max : 0);
        m->ctrl.plain = false;
        if (m->ctrl.k_max == 0) {
            m->wake(); // fixed-length drafting: the MTP side must be awake (a sleep outlives generations)
        }
    }
}

void llama_mtp_share_costs(llama_mtp * m, llama_mtp * with) {
    if (m == nullptr || with == nullptr || m == with || m->ctx_mtp == nullptr || m->ctx_mtp != with->ctx_mtp ||
        mtp::adaptive_alone()) {
        return;
    }
    auto & group = with->ctrl.draft_group;
    if (!group) {
        group                  = std::make_shared<mtp::controller::draft_costs>();
        group->d               = with->ctrl.draft_own;
        group->cold            = with->ctrl.cold_drafts; // the context's first draft decodes: the group's, untimed once
        with->ctrl.cold_drafts = 0;
    }
    m->ctrl.draft_group = group;
    m->ctrl.cold_drafts = 0; // (before m drafts: its first ones are the group's)
}

void llama_mtp_get_adaptive_stats(const llama_mtp * m, llama_mtp_adaptive_stats * out) {
    if (m && out) {
        m->ctrl.fill_stats(out);
    }
}
