// pymtp: drafting. The MTP head(s) propose up to k tokens after tok0, autoregressively, each step
// fed the head's own output state (a parallel head: all of them in one decode, draft_parallel). greedy: the argmax of
// the raw MTP logits (on the backend when it can be); chain / stochastic: q = the request's sampler chain (a clone,
// advanced along the draft path only) on the MTP logits, then its top (chain) or a draw from it (stochastic). Drafting
// never touches the target context or the caller's sampler.

#include "mtp-engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace {

llama_token argmax(const float * logits, int32_t n_vocab) {
    return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
}

// softmax probability of the largest logit: the head's confidence in a greedy draft
float top_prob(const float * logits, int32_t n_vocab, float max_logit) {
    double sum = 0.0;
    for (int32_t v = 0; v < n_vocab; ++v) {
        sum += std::exp((double) (logits[v] - max_logit));
    }
    return (float) (1.0 / sum);
}

} // namespace

// tok0 at position p0, fed hidden state h0 (= h_{p0-1}). keep_first: keep the MTP KV entry of p0
// (it is the teacher-forced one); otherwise the MTP KV is left at [0, p0) (caller-decoded targets
// re-write p0 when the target decodes it). smpl == nullptr drafts greedily whatever the mode.
int32_t llama_mtp::draft_at(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * smpl,
                            bool keep_first) {
    drafts.clear();
    q.clear();
    if (k <= 0) {
        return LLAMA_MTP_OK;
    }
    // the queued entries: in the first draft decode (ahead of its rows) or written apart first
    if (const int32_t rc = write_unless_ahead(p0, n_par > 1 ? std::min(k, n_par) : 1); rc != LLAMA_MTP_OK) {
        return rc;
    }
    const auto      t0   = mtp::clock_type::now();
    llama_sampler * path = draft_path(smpl);
    const int32_t   rc = multi() ? draft_multi(p0, tok0, h0, k, path) : draft_single(p0, tok0, h0, k, path, keep_first);
    if (path) {
        llama_sampler_free(path);
    }
    stats.t_draft_ms += mtp::ms_since(t0);
    return rc;
}

int32_t llama_mtp::draft_single(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path,
                                bool keep_first) {
    if (n_par > 1) {
        return draft_parallel(p0, tok0, h0, k, path, keep_first);
    }
    llama_token tok = tok0;
    h_draft.assign(h0, h0 + n_embd);
    int32_t rc = LLAMA_MTP_OK;
    for (int32_t i = 0; i < k; ++i) {
        const auto t0 = mtp::clock_type::now();
        llama_batch_ext_clear(batch_mtp);
        const int32_t row = i == 0 ? queue_ahead() : 0; // the draft row's index: after the queued entries
        if (row < 0) {
            rc = LLAMA_MTP_ERR_ARG;
            break;
        }
        if (!mtp::batch_add(batch_mtp, params.seq_id, tok, p0 + i, h_draft.data(), n_embd, true)) {
            rc = LLAMA_MTP_ERR_ARG;
            break;
        }
        if (llama_process(ctx_mtp, LLAMA_PROCESS_TYPE_DECODE, batch_mtp) != 0) {
            rc = LLAMA_MTP_ERR_DECODE;
            break;
        }
        stats.n_draft_decodes++;

        tok = choose_draft(path, ctx_mtp, row, i);
        timed_draft_decode(row, mtp::ms_since(t0));
        if (!take_draft(tok, i)) {
            break;
        }
        const float * h = llama_get_embeddings_nextn_ith(ctx_mtp, row);
        std::memcpy(h_draft.data(), h, sizeof(float) * n_embd);
    }
    truncate_mtp_to(keep_first ? p0 + 1 : p0);
    return rc;
}

// A parallel head: one decode of the rows (tok0, h0) at p0 and (tok0, h0 + mask_i) at p0 + i
// (i = 1..k-1, k <= n_par); row i's logits give draft i. Each row's logits depend only on the accepted
// sequence (never on the drafts before it), so q for draft i (chain/stochastic: the request's chain,
// advanced along the draft path, on row i) is a distribution given the drafts before it, as rejection
// sampling needs. The mask rows leave the MTP KV like a sequential draft's rows do.
int32_t llama_mtp::draft_parallel(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path,
                                  bool keep_first) {
    const auto    t0 = mtp::clock_type::now();
    const int32_t n  = std::min(k, n_par);
    par_h.resize((size_t) n * n_embd);
    std::memcpy(par_h.data(), h0, sizeof(float) * n_embd);
    for (int32_t i = 1; i < n; ++i) {
        const float * m   = par_mask.data() + (size_t) (i - 1) * n_embd;
        float *       row = par_h.data() + (size_t) i * n_embd;
        for (int32_t e = 0; e < n_embd; ++e) {
            row[e] = h0[e] + m[e];
        }
    }
    llama_batch_ext_clear(batch_mtp);
    const int32_t row0 = queue_ahead(); // the pass's first row in the batch: after the queued entries
    int32_t       rc   = row0 < 0 ? LLAMA_MTP_ERR_ARG : LLAMA_MTP_OK;
    for (int32_t i = 0; i < n && rc == LLAMA_MTP_OK; ++i) {
        if (!mtp::batch_add(batch_mtp, params.seq_id, tok0, p0 + i, par_h.data() + (size_t) i * n_embd, n_embd, true)) {
            rc = LLAMA_MTP_ERR_ARG;
        }
    }
    if (rc == LLAMA_MTP_OK && llama_process(ctx_mtp, LLAMA_PROCESS_TYPE_DECODE, batch_mtp) != 0) {
        rc = LLAMA_MTP_ERR_DECODE;
    }
    if (rc == LLAMA_MTP_OK) {
        stats.n_draft_decodes++;
        for (int32_t i = 0; i < n; ++i) {
            const llama_token tok = choose_draft(path, ctx_mtp, row0 + i, i);
            if (i == 0) {
                timed_draft_decode(row0, mtp::ms_since(t0), n); // the whole pass: its rows' draft cost
            }
            if (!take_draft(tok, i)) {
                break;
            }
        }
    }
    truncate_mtp_to(keep_first ? p0 + 1 : p0);
    return rc;
}

void llama_mtp::timed_draft_decode(int32_t n_ahead, double ms, int32_t rows) {
    if (!ctrl.on()) {
        return; // a fixed length (or the warm-up, before the controller is set): nothing to learn
    }
    if (n_ahead == 0) {
        ctrl.timed_draft(ms, rows);
    } else if (n_ahead <= mtp::controller::K && ctrl.drafts().n > 0) {
        // a verified step's entries written ahead of the draft row: what they add is the controller's W
        // (the catch-up it charges a step that accepts), the draft decode itself costs D as before (a
        // parallel head's pass: D of its rows)
        ctrl.timed_catchup(n_ahead + 1, std::max(0.0, ms - (rows > 0 ? ctrl.pass_cost(rows) : ctrl.drafts().v)));
    } // more rows (deferred while plain decoding led) go untimed, as their separate write did
}

void llama_mtp::init_parallel() {
    n_par = 0;
    par_mask.clear();
    const llama_model * model = llama_get_model(ctx_mtp);
    const int32_t       n     = llama_model_mtp_parallel(model, 0, nullptr);
    if (n > 1) {
        par_mask.resize((size_t) (n - 1) * n_embd);
        if (llama_model_mtp_parallel(model, 0, par_mask.data()) == n) {
            n_par    = n;
            k_max    = std::min(k_max, n_par); // one decode, at most K drafts a step
            ctrl.par = n_par;
        }
    }
}

// Step i runs head j = head_of_step(i) on the rows it has not seen this round, positions from p0 (or
// just after its rows of an earlier step) to p0 + i: the row at p0 is (tok0, head j-1's exact state at
// p0-1; head 0: h0), a row at p > p0 is (the draft token at p, the state of head feeder_of(j) at p-1
// from this round). So each head's context holds the same entries as in a teacher-forced pass over
// [accepted, drafts], and one decode per step suffices. The draft token of step i is the argmax /
// chain pick of head j's logits at p0 + i. Afterwards every head drops this round's rows: the MTP KVs
// end at p0 (the catch-up writes p0 exactly).
int32_t llama_mtp::draft_multi(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * path) {
    const int32_t nh = (int32_t) heads.size();
    if (policy == LLAMA_MTP_HEADS_CAPPED) {
        k = std::min(k, nh);
    }
    std::fill(round_n.begin(), round_n.end(), 0);
    int32_t rc = LLAMA_MTP_OK;
    for (int32_t i = 0; i < k; ++i) {
        const auto        t0     = mtp::clock_type::now();
        const int32_t     j      = head_of_step(i);
        const int32_t     feeder = feeder_of(j);
        llama_batch_ext * b      = head_batch[j];
        llama_batch_ext_clear(b);
        const llama_pos start  = p0 + round_n[j];
        int32_t         n_rows = 0;
        for (llama_pos pos = start; pos <= p0 + i; ++pos, ++n_rows) {
            const llama_token tok = pos == p0 ? tok0 : drafts[pos - p0 - 1];
            const float *     h;
            if (pos == p0) {
                h = j == 0 ? h0 : ring[j - 1].get(p0 - 1);
            } else {
                GGML_ASSERT(round_n[feeder] > pos - 1 - p0);
                h = round_h[feeder].data() + (size_t) (pos - 1 - p0) * n_embd;
            }
            if (!mtp::batch_add(b, params.seq_id, tok, pos, h ? h : zeros.data(), n_embd, pos == p0 + i)) {
                rc = LLAMA_MTP_ERR_ARG;
                break;
            }
        }
        if (rc != LLAMA_MTP_OK) {
            break;
        }
        if (llama_process(heads[j], LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
            rc = LLAMA_MTP_ERR_DECODE;
            break;
        }
        stats.n_draft_decodes++;
        for (int32_t r = 0; r < n_rows; ++r) {
            std::memcpy(round_h[j].data() + (size_t) (start - p0 + r) * n_embd,
                        llama_get_embeddings_nextn_ith(heads[j], r), sizeof(float) * n_embd);
        }
        round_n[j] = i + 1;

        const llama_token tok = choose_draft(path, heads[j], n_rows - 1, i);
        ctrl.timed_draft(mtp::ms_since(t0));
        if (!take_draft(tok, i)) {
            break;
        }
    }
    truncate_mtp_to(p0);
    return rc;
}

// Greedy drafts need only the argmax of the MTP logits and its probability (the controller's
// confidence): a backend sampler (mtp-greedy, mtp-backend-sampler.cpp) on the MTP contexts computes both
// where the logits are (the GPU) and copies one token and one float back instead of a vocabulary of
// logits. Chain/stochastic drafts need the candidates their q is made from (mtp-top-k): 128 ids
// and logits instead of the row. Attached while drafting so; detached when a draft needs the row (peeks
// return it). One chain per context (a chain is set up for one context's backend, once).
void llama_mtp::set_backend_draft(mtp::backend_pick kind) {
    if (kind == backend_kind || ctx_mtp == nullptr) {
        return;
    }
    std::vector<llama_context *> ctxs = multi() ? heads : std::vector<llama_context *>{ ctx_mtp };
    for (llama_context * c : ctxs) {
        llama_set_sampler(c, params.seq_id, nullptr);
    }
    for (llama_sampler * s : backend_samplers) {
        llama_sampler_free(s);
    }
    backend_samplers.clear();
    backend_kind = mtp::backend_pick::none;
    if (kind == mtp::backend_pick::none) {
        return;
    }
    bool ok = true;
    backend_rows.assign(ctxs.size(), 0);
    for (size_t i = 0; i < ctxs.size(); ++i) {
        llama_sampler * s = mtp::make_backend_sampler(kind, &backend_rows[i]);
        backend_samplers.push_back(s);
        ok = llama_set_sampler(ctxs[i], params.seq_id, s) && ok;
    }
    backend_kind               = kind;
    // a parallel head's pass samples its K rows of one sequence there: a context made with room for fewer
    // outputs per sequence (llama_context_params.n_outputs_max_per_seq, 1 by default) takes the host's
    const uint32_t rows_needed = (uint32_t) std::max(1, n_par);
    ok = ok && std::all_of(backend_rows.begin(), backend_rows.end(), [&](uint32_t r) { return r >= rows_needed; });
    if (!ok) { // not offloadable here (e.g. a tensor-split model): the host takes the rows
        set_backend_draft(mtp::backend_pick::none);
        backend_draft_off = true;
    }
}

// What the next draft decodes sample on the backend. Greedy drafts: the argmax, on every backend (a parallel
// head's pass only on a GPU: on a CPU its K sampling subgraphs cost more than the host's argmax, 2-core x86,
// SmolLM2, D_6 0.61 vs 0.56 of a plain step). Chain/stochastic drafts: the top candidates, on a GPU (on a CPU
// the host's chain over the row is ~50 us of a ~4 ms draft, and ggml-cpu's top_k is no faster).
// PYMTP_DRAFT_ON_BACKEND=1 in the environment: as on a GPU on any backend (tests of that path on a CPU);
// PYMTP_DRAFT_ON_BACKEND=0: never (tests of the host's path).
mtp::backend_pick llama_mtp::wanted_backend_draft(const llama_sampler * path) const {
    if (peek_logits != nullptr || backend_draft_off) {
        return mtp::backend_pick::none;
    }
    const bool gpu = ctrl.graphs || draft_on_backend;
    if (path == nullptr) {
        return n_par <= 1 || gpu ? mtp::backend_pick::greedy : mtp::backend_pick::none;
    }
    return gpu ? mtp::backend_pick::top_k : mtp::backend_pick::none;
}

// The sampler a draft follows: nullptr for greedy drafts, else a clone of the request's chain, advanced
// along the draft path only. The caller frees it.
llama_sampler * llama_mtp::draft_path(llama_sampler * smpl) {
    llama_sampler * path = mode == LLAMA_MTP_DRAFT_GREEDY || smpl == nullptr ? nullptr : llama_sampler_clone(smpl);
    set_backend_draft(wanted_backend_draft(path));
    return path;
}

// Draft step i's token from output row `row` of ctx: the argmax (on the backend when attached), or with
// a chain, q = the chain on the MTP logits and its top (chain) or a draw (stochastic); LLAMA_TOKEN_NULL
// when the chain leaves no candidate. A peek gets the step's logits.
llama_token llama_mtp::choose_draft(llama_sampler * path, llama_context * ctx, int32_t row, int32_t i) {
    const float * logits = backend_kind != mtp::backend_pick::none ? nullptr : llama_get_logits_ith(ctx, row);
    if (peek_logits) {
        std::memcpy(peek_logits + (size_t) i * n_vocab, logits, sizeof(float) * n_vocab);
    }
    draft_conf = -1.0f;
    if (path == nullptr) {
        if (backend_kind == mtp::backend_pick::greedy) { // the argmax and its probability, from the backend sampler
            if (llama_get_sampled_probs_count_ith(ctx, row) == 1) {
                draft_conf = llama_get_sampled_probs_ith(ctx, row)[0];
            }
            return llama_get_sampled_token_ith(ctx, row);
        }
        const llama_token tok = argmax(logits, n_vocab);
        if (ctrl.on()) {
            draft_conf = top_prob(logits, n_vocab, logits[tok]);
        }
        return tok;
    }
    // q is the request's chain over the tokens the head can draft: with a draft vocabulary its N scores,
    // not the whole row (Gemma 3 270M, 262144 tokens: the chain's samplers over the row cost more than
    // the draft decode itself on an H200). The tokens left out are -inf, so the usual samplers give the same q;
    // and rejection sampling is exact for any q that the drafts are drawn from.
    q.emplace_back();
    if (backend_kind == mtp::backend_pick::top_k) {
        q.back().from_backend(path, ctx, row); // the candidates the backend chose (mtp-top-k); none: q stays empty
    } else {
        const draft_ids & ids = draft_support(ctx, logits);
        q.back().from_chain(path, logits, n_vocab, ids.empty() ? nullptr : ids.data(), (int32_t) ids.size());
    }
    const bool        sample = mode != LLAMA_MTP_DRAFT_CHAIN && !q.back().one_hot;
    const llama_token tok    = sample ? q.back().sample(rng) : q.back().argmax();
    if (tok == LLAMA_TOKEN_NULL) {
        q.pop_back();
        return tok;
    }
    // the top of q, not q(tok): in stochastic mode whether a draft stays must not depend on which token
    // was drawn (only on q), or the kept drafts would no longer be draws from q and rejection sampling
    // would lose its exactness; q is a function of the drafts before it, so this is safe
    draft_conf = q.back().prob(q.back().argmax());
    llama_sampler_accept(path, tok);
    return tok;
}

const llama_mtp::draft_ids & llama_mtp::draft_support(const llama_context * ctx, const float * logits) {
    for (const auto & s : support) {
        if (s.first == ctx) {
            return s.second;
        }
    }
    draft_ids ids;
    for (int32_t v = 0; v < n_vocab; ++v) {
        if (!(std::isinf(logits[v]) && logits[v] < 0.0f)) {
            ids.push_back(v);
        }
    }
    if (2 * (int64_t) ids.size() > n_vocab) {
        ids.clear(); // an untrimmed head: the whole row
    }
    support.emplace_back(ctx, std::move(ids));
    return support.back().second;
}

bool llama_mtp::take_draft(llama_token tok, int32_t i) {
    if (tok == LLAMA_TOKEN_NULL) {
        return false; // the chain left no candidate
    }
    bool more = true;
    if (!keep_draft(i, &more)) {
        return false; // the controller expects this draft not to pay
    }
    drafts.push_back(tok);
    // nothing worth drafting after the end, or the next draft is not expected to pay
    return !llama_vocab_is_eog(vocab, tok) && more;
}

bool llama_mtp::keep_draft(int32_t i, bool * more) {
    if (ctrl.keep(i, draft_conf, more)) {
        return true;
    }
    if ((int32_t) q.size() > i) {
        q.resize(i); // the dropped draft's distribution goes with it
    }
    return false;
}
