// pymtp: MTP speculative decoding engine (see include/llama-mtp.h).

#include "llama-mtp.h"
#include "llama-mtp-dist.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

llama_token argmax(const float * logits, int32_t n_vocab) {
    return (llama_token) (std::max_element(logits, logits + n_vocab) - logits);
}

// Output states g_j(p) of one head at its most recent positions: the input of head j+1 at p+1.
// A catch-up reads the row just before the rows it writes; rows further back are only needed after
// a rewind (llama_mtp_prefill reusing a prefix), and a rewind deeper than the ring feeds zeros there.
struct mtp_ring {
    static constexpr int32_t R = 64;
    int32_t n_embd = 0;
    std::vector<float>     rows;
    std::vector<llama_pos> pos;

    void init(int32_t ne) {
        n_embd = ne;
        rows.assign((size_t) R * ne, 0.0f);
        pos.assign(R, -1);
    }
    const float * get(llama_pos p) const {
        if (p < 0 || pos.empty()) {
            return nullptr;
        }
        const int32_t s = p % R;
        return pos[s] == p ? rows.data() + (size_t) s * n_embd : nullptr;
    }
    void put(llama_pos p, const float * h) {
        const int32_t s = p % R;
        pos[s] = p;
        std::memcpy(rows.data() + (size_t) s * n_embd, h, sizeof(float) * n_embd);
    }
    void drop_from(llama_pos p) {
        for (auto & q : pos) {
            if (q >= p) {
                q = -1;
            }
        }
    }
};

} // namespace

struct llama_mtp {
    llama_context * ctx_tgt = nullptr;
    llama_context * ctx_mtp = nullptr;   // nullptr: plain decoding
    const llama_vocab * vocab = nullptr;

    llama_mtp_params params {};
    int32_t n_embd  = 0;   // width of the nextn hidden rows
    int32_t n_vocab = 0;
    int32_t n_ctx   = 0;
    int32_t n_batch = 0;
    int32_t k_max   = LLAMA_MTP_MAX_DRAFT; // recurrent targets: bounded by their rollback snapshots
    bool    recurrent = false;                // recurrent/hybrid target: rolls back only through snapshots

    llama_batch_ext * batch_tgt = nullptr;
    llama_batch_ext * batch_mtp = nullptr;

    // tokens held by the target KV, in position order (size == n_past)
    std::vector<llama_token> tokens;

    // the MTP KV holds positions [0, mtp_n); invariant between calls: mtp_n == n_past
    int32_t mtp_n = 0;

    // target nextn hidden state of position n_past - 1 (zeros before position 0)
    std::vector<float> pending_h;

    bool        logits_pending = false; // prefill left logits for the first token
    bool        has_last       = false; // id_last was emitted but not decoded yet
    llama_token id_last        = LLAMA_TOKEN_NULL;

    std::vector<llama_token> drafts;
    std::vector<float>       h_draft;

    llama_mtp_draft_mode mode = LLAMA_MTP_DRAFT_GREEDY;
    std::mt19937         rng { 0 };
    std::vector<mtp_dist> q;      // draft distribution of each draft position (chain/stochastic)
    mtp_dist              p;      // target distribution at the position being verified

    llama_mtp_stats stats {};

    // caller-decoded targets (llama_mtp_ext_*): hidden rows of the last observed target run
    std::vector<float>       ext_h;
    llama_pos                ext_h_p0 = -1; // position of ext_h's first row
    int32_t                  ext_h_n  = 0;
    std::vector<llama_token> ext_vt;        // [id_last, drafts] of the last llama_mtp_ext_draft
    bool                     ext_catchup = true; // observe writes MTP KV now (off: queues the entries)
    // MTP KV entries not written yet (catch-up off): x_p at position p with input row h_{p-1}
    std::vector<llama_token> ext_pending_tok;
    std::vector<llama_pos>   ext_pending_pos;
    std::vector<float>       ext_pending_h;

    void ext_pending_push(llama_token tok, llama_pos pos, const float * h) {
        ext_pending_tok.push_back(tok);
        ext_pending_pos.push_back(pos);
        ext_pending_h.insert(ext_pending_h.end(), h, h + n_embd);
    }

    void ext_pending_drop_from(llama_pos p0) {
        size_t n = 0;
        while (n < ext_pending_pos.size() && ext_pending_pos[n] < p0) {
            n++;
        }
        ext_pending_tok.resize(n);
        ext_pending_pos.resize(n);
        ext_pending_h.resize(n * (size_t) n_embd);
    }

    // The caller may also have changed this sequence's MTP KV (e.g. llama-server restoring a cached
    // prompt's state into both contexts): queued entries that the KV already holds are dropped, and
    // when a gap would open between the KV and the queue, the KV restarts at the queue (the head then
    // sees a shorter context: lower acceptance, same output). Positions must stay consecutive.
    void ext_align_pending() {
        const llama_pos mx = llama_memory_seq_pos_max(mem_mtp(), params.seq_id); // -1: empty
        size_t n = 0;
        while (n < ext_pending_pos.size() && ext_pending_pos[n] <= mx) {
            n++;
        }
        if (n > 0) {
            ext_pending_tok.erase(ext_pending_tok.begin(), ext_pending_tok.begin() + n);
            ext_pending_pos.erase(ext_pending_pos.begin(), ext_pending_pos.begin() + n);
            ext_pending_h.erase(ext_pending_h.begin(), ext_pending_h.begin() + n * (size_t) n_embd);
        }
        if (!ext_pending_pos.empty() && mx >= 0 && ext_pending_pos.front() != mx + 1) {
            llama_memory_seq_rm(mem_mtp(), params.seq_id, -1, -1);
        }
        heads_align();
    }

    // The other heads never hold more than head 0; one that lags behind it (its rows were not
    // restored with head 0's) restarts empty: a shorter context for that head, same output.
    void heads_align() {
        if (!multi()) {
            return;
        }
        const llama_pos mx0 = llama_memory_seq_pos_max(mem_mtp(), params.seq_id);
        for (size_t j = 1; j < heads.size(); ++j) {
            llama_memory_t mem = llama_get_memory(heads[j]);
            const llama_pos mx = llama_memory_seq_pos_max(mem, params.seq_id);
            if (mx > mx0) {
                llama_memory_seq_rm(mem, params.seq_id, mx0 + 1, -1);
            } else if (mx < mx0) {
                llama_memory_seq_rm(mem, params.seq_id, -1, -1);
            }
        }
    }

    // write the queued entries of these engines (one MTP context) with as few decodes as fit a batch
    static int32_t ext_flush(const std::vector<llama_mtp *> & ms) {
        if (ms.empty()) {
            return LLAMA_MTP_OK;
        }
        llama_mtp * m0 = ms[0];
        const size_t cap = std::max<uint32_t>(1, llama_n_batch(m0->ctx_mtp));
        for (llama_mtp * m : ms) {
            m->ext_align_pending();
        }
        std::vector<size_t> next(ms.size(), 0);
        std::vector<head_run> runs;
        for (;;) {
            llama_batch_ext_clear(m0->batch_mtp);
            runs.clear();
            size_t n_rows = 0;
            for (size_t j = 0; j < ms.size() && n_rows < cap; ++j) {
                llama_mtp * m = ms[j];
                const size_t e0 = next[j];
                for (; next[j] < m->ext_pending_tok.size() && n_rows < cap; ++next[j], ++n_rows) {
                    const size_t e = next[j];
                    if (!batch_add(m0->batch_mtp, m->params.seq_id, m->ext_pending_tok[e], m->ext_pending_pos[e],
                                   m->ext_pending_h.data() + e * m->n_embd, m->n_embd, false)) {
                        return LLAMA_MTP_ERR_ARG;
                    }
                }
                if (next[j] > e0 && m0->multi()) { // the rows the other heads write next
                    runs.push_back({ m, (int32_t) (n_rows - (next[j] - e0)), (int32_t) (next[j] - e0),
                                     m->ext_pending_pos[e0], m->ext_pending_tok.data() + e0 });
                }
            }
            if (n_rows == 0) {
                break;
            }
            if (llama_process(m0->ctx_mtp, LLAMA_PROCESS_TYPE_DECODE, m0->batch_mtp) != 0) {
                return LLAMA_MTP_ERR_DECODE;
            }
            if (const int32_t rc = cascade(runs); rc != LLAMA_MTP_OK) {
                return rc;
            }
        }
        for (llama_mtp * m : ms) {
            if (!m->ext_pending_pos.empty()) {
                m->stats.n_catchup_decodes++;
                m->mtp_n = m->ext_pending_pos.back() + 1;
            }
            m->ext_pending_tok.clear();
            m->ext_pending_pos.clear();
            m->ext_pending_h.clear();
        }
        return LLAMA_MTP_OK;
    }
    std::vector<float>       zeros;

    // h_p from the last observed run, or zeros when it is not there (only lowers draft quality)
    const float * ext_h_at(llama_pos p) const {
        if (p >= ext_h_p0 && p < ext_h_p0 + ext_h_n) {
            return ext_h.data() + (size_t) (p - ext_h_p0) * n_embd;
        }
        return zeros.data();
    }

    // synthetic acceptance (benchmarking): conditional P(accept draft i | drafts < i accepted)
    std::vector<double> synth_cond;

    // ---- multi-head (heads.size() > 1) ----
    std::vector<llama_context *>   heads;   // heads[0] == ctx_mtp; empty: single head
    std::vector<llama_batch_ext *> hbatch;  // hbatch[0] == batch_mtp
    llama_mtp_head_policy policy = LLAMA_MTP_HEADS_PER_LAYER;
    std::vector<mtp_ring> ring;             // ring[j]: exact output states of head j (j < n_heads - 1)
    // this draft round: head j's output state at position p0 + t is round_h[j] row t (t < round_n[j])
    std::vector<std::vector<float>> round_h;
    std::vector<int32_t>            round_n;

    bool multi() const { return heads.size() > 1; }
    int32_t n_heads() const { return ctx_mtp == nullptr ? 0 : multi() ? (int32_t) heads.size() : 1; }

    // drop every position >= p0 of this sequence from all heads (p0 = -1: everything)
    void heads_rm_from(llama_pos p0) {
        for (size_t j = 1; j < heads.size(); ++j) {
            llama_memory_seq_rm(llama_get_memory(heads[j]), params.seq_id, p0, -1);
        }
        for (auto & r : ring) {
            r.drop_from(std::max<llama_pos>(p0, 0));
        }
    }

    // which head drafts step i, and which head's state at p-1 feeds a draft row at p > p0
    int32_t head_of_step(int32_t i) const {
        return policy == LLAMA_MTP_HEADS_FIRST ? 0 : i % (int32_t) heads.size();
    }
    int32_t feeder_of(int32_t j) const {
        if (policy == LLAMA_MTP_HEADS_FIRST) {
            return 0;
        }
        return (j + (int32_t) heads.size() - 1) % (int32_t) heads.size();
    }

    // Rows that head 0 just wrote (row0.. of its last decode, positions p0.., tokens toks) for one
    // engine: the catch-up of the other heads, in order, each fed the previous head's states.
    struct head_run {
        llama_mtp *         m;
        int32_t             row0;
        int32_t             n;
        llama_pos           p0;
        const llama_token * toks;
    };
    static int32_t cascade(std::vector<head_run> & runs) {
        if (runs.empty() || !runs[0].m->multi()) {
            return LLAMA_MTP_OK;
        }
        llama_mtp * m0 = runs[0].m;
        const int32_t nh = (int32_t) m0->heads.size();
        const int32_t ne = m0->n_embd;
        for (int32_t j = 1; j < nh; ++j) {
            llama_context * prev = m0->heads[j - 1];
            llama_batch_ext * b  = m0->hbatch[j];
            llama_batch_ext_clear(b);
            int32_t row = 0;
            for (auto & r : runs) {
                llama_mtp * m = r.m;
                llama_memory_seq_rm(llama_get_memory(m->heads[j]), m->params.seq_id, r.p0, -1);
                for (int32_t i = 0; i < r.n; ++i) {
                    const float * h = i == 0 ? m->ring[j - 1].get(r.p0 - 1)
                                             : llama_get_embeddings_nextn_ith(prev, r.row0 + i - 1);
                    if (!batch_add(b, m->params.seq_id, r.toks[i], r.p0 + i, h ? h : m->zeros.data(), ne, false)) {
                        return LLAMA_MTP_ERR_ARG;
                    }
                }
            }
            // the inputs are copied into the batch: head j-1's rows can go into its ring now
            for (auto & r : runs) {
                r.m->ring[j - 1].drop_from(r.p0);
                for (int32_t i = 0; i < r.n; ++i) {
                    r.m->ring[j - 1].put(r.p0 + i, llama_get_embeddings_nextn_ith(prev, r.row0 + i));
                }
                r.row0 = row;
                row += r.n;
            }
            if (llama_process(m0->heads[j], LLAMA_PROCESS_TYPE_DECODE, b) != 0) {
                return LLAMA_MTP_ERR_DECODE;
            }
            for (auto & r : runs) {
                r.m->stats.n_catchup_decodes++;
            }
        }
        return LLAMA_MTP_OK;
    }

    llama_memory_t mem_tgt() const { return llama_get_memory(ctx_tgt); }
    llama_memory_t mem_mtp() const { return llama_get_memory(ctx_mtp); }
    int32_t n_past() const { return (int32_t) tokens.size(); }

    // add one token (with an optional hidden-state row) to a batch
    static bool batch_add(llama_batch_ext * batch, llama_seq_id seq, llama_token id, llama_pos pos,
                          const float * h, int32_t n_embd, bool output) {
        const int32_t idx = llama_batch_ext_add_token(batch, seq, id);
        if (idx < 0) {
            return false;
        }
        llama_batch_ext_set_pos(batch, idx, &pos);
        if (h != nullptr) {
            llama_embd e = { h, 1, (size_t) n_embd };
            if (!llama_batch_ext_set_embd_token(batch, idx, e)) {
                return false;
            }
        }
        llama_batch_ext_set_output_logits(batch, idx, output);
        return true;
    }

    // decode toks[0..n) at positions p0.. on the target; logits for all rows or only the last
    int32_t decode_target(const llama_token * toks, int32_t n, llama_pos p0, bool all_logits, bool last_logits) {
        llama_batch_ext_clear(batch_tgt);
        for (int32_t i = 0; i < n; ++i) {
            const bool out = all_logits || (last_logits && i == n - 1);
            if (!batch_add(batch_tgt, params.seq_id, toks[i], p0 + i, nullptr, 0, out)) {
                return LLAMA_MTP_ERR_ARG;
            }
        }
        return llama_process(ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch_tgt) == 0 ? LLAMA_MTP_OK : LLAMA_MTP_ERR_DECODE;
    }

    // Teacher-forced MTP KV for target positions [s, s+n): entry p pairs token x_p
    // with the target hidden state h_{p-1}. h_rows holds h_s..h_{s+n-1} (row i = h_{s+i});
    // h_{s-1} is pending_h. Entries below mtp_n already exist and are skipped.
    // Afterwards pending_h = h_{s+n-1}.
    int32_t catch_up(const llama_token * toks, int32_t n, llama_pos s, const float * h_rows) {
        if (ctx_mtp == nullptr || n <= 0) {
            return LLAMA_MTP_OK;
        }
        const auto t0 = clock_type::now();
        GGML_ASSERT(mtp_n >= s && "MTP KV must not lag behind the target");

        llama_batch_ext_clear(batch_mtp);
        int32_t n_add = 0;
        for (llama_pos p = std::max<llama_pos>(s, mtp_n); p < s + n; ++p) {
            const float * h = p == s ? pending_h.data() : h_rows + (size_t) (p - 1 - s) * n_embd;
            if (!batch_add(batch_mtp, params.seq_id, toks[p - s], p, h, n_embd, false)) {
                return LLAMA_MTP_ERR_ARG;
            }
            n_add++;
        }
        if (n_add > 0) {
            if (llama_process(ctx_mtp, LLAMA_PROCESS_TYPE_DECODE, batch_mtp) != 0) {
                return LLAMA_MTP_ERR_DECODE;
            }
            stats.n_catchup_decodes++;
            if (multi()) { // the other heads write the same positions
                const llama_pos a = s + n - n_add;
                std::vector<head_run> runs = { { this, 0, n_add, a, toks + (a - s) } };
                if (const int32_t rc = cascade(runs); rc != LLAMA_MTP_OK) {
                    return rc;
                }
            }
            mtp_n = s + n;
        }
        std::memcpy(pending_h.data(), h_rows + (size_t) (n - 1) * n_embd, sizeof(float) * n_embd);
        stats.t_catchup_ms += ms_since(t0);
        return LLAMA_MTP_OK;
    }

    // Draft up to k tokens: head 0 applied autoregressively, each step fed the MTP
    // head's own hidden output. greedy: argmax of the raw MTP logits; chain /
    // stochastic: q = the request's sampler chain (a clone, advanced along the draft
    // path only) on the MTP logits, then its top or a draw from it. Leaves the MTP
    // KV at [0, n_past + 1): the entry of position n_past, (id_last, h_{n_past-1}),
    // is exactly the teacher-forced one and is kept.
    int32_t draft(int32_t k, llama_sampler * smpl) {
        return draft_at(n_past(), id_last, pending_h.data(), k, smpl, /*keep_first*/ true);
    }

    // draft() from an explicit start: tok0 at position p0, fed hidden state h0 (= h_{p0-1}).
    // keep_first: keep the MTP KV entry of p0 (it is the teacher-forced one); otherwise the
    // MTP KV is left at [0, p0) (caller-decoded targets re-write p0 when the target decodes it).
    // smpl == nullptr drafts greedily whatever the mode.
    int32_t draft_at(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * smpl, bool keep_first) {
        drafts.clear();
        q.clear();
        if (k <= 0) {
            return LLAMA_MTP_OK;
        }
        if (multi()) {
            return draft_multi(p0, tok0, h0, k, smpl);
        }
        const auto t0 = clock_type::now();
        llama_sampler * path = draft_path(smpl);

        llama_token tok = tok0;
        h_draft.assign(h0, h0 + n_embd);
        int32_t rc = LLAMA_MTP_OK;
        for (int32_t i = 0; i < k; ++i) {
            llama_batch_ext_clear(batch_mtp);
            if (!batch_add(batch_mtp, params.seq_id, tok, p0 + i, h_draft.data(), n_embd, true)) {
                rc = LLAMA_MTP_ERR_ARG;
                break;
            }
            if (llama_process(ctx_mtp, LLAMA_PROCESS_TYPE_DECODE, batch_mtp) != 0) {
                rc = LLAMA_MTP_ERR_DECODE;
                break;
            }
            stats.n_draft_decodes++;

            tok = choose_draft(path, ctx_mtp, 0, i);
            if (tok == LLAMA_TOKEN_NULL) {
                break; // the chain left no candidate
            }
            drafts.push_back(tok);
            if (llama_vocab_is_eog(vocab, tok)) {
                break; // nothing worth drafting after the end
            }
            const float * h = llama_get_embeddings_nextn_ith(ctx_mtp, 0);
            std::memcpy(h_draft.data(), h, sizeof(float) * n_embd);
        }
        if (path) {
            llama_sampler_free(path);
        }
        const llama_pos keep = keep_first ? p0 + 1 : p0;
        llama_memory_seq_rm(mem_mtp(), params.seq_id, keep, -1);
        mtp_n = keep;
        stats.t_draft_ms += ms_since(t0);
        return rc;
    }

    // Multi-head drafting. Step i runs head j = head_of_step(i) on the rows it has not seen this round,
    // positions from p0 (or just after its rows of an earlier step) to p0 + i: the row at p0 is
    // (tok0, head j-1's exact state at p0-1; head 0: h0), a row at p > p0 is (the draft token at p,
    // the state of head feeder_of(j) at p-1 from this round). So each head's context holds the same
    // entries as in a teacher-forced pass over [accepted, drafts], and one decode per step suffices.
    // The draft token of step i is the argmax / chain pick of head j's logits at p0 + i. Afterwards
    // every head drops this round's rows: the MTP KVs end at p0 (the catch-up writes p0 exactly).
    int32_t draft_multi(llama_pos p0, llama_token tok0, const float * h0, int32_t k, llama_sampler * smpl) {
        const auto t0 = clock_type::now();
        const int32_t nh = (int32_t) heads.size();
        if (policy == LLAMA_MTP_HEADS_CAPPED) {
            k = std::min(k, nh);
        }
        llama_sampler * path = draft_path(smpl);
        std::fill(round_n.begin(), round_n.end(), 0);
        int32_t rc = LLAMA_MTP_OK;
        for (int32_t i = 0; i < k; ++i) {
            const int32_t j  = head_of_step(i);
            const int32_t fj = feeder_of(j);
            llama_batch_ext * b = hbatch[j];
            llama_batch_ext_clear(b);
            const llama_pos start = p0 + round_n[j];
            int32_t n_rows = 0;
            for (llama_pos p = start; p <= p0 + i; ++p, ++n_rows) {
                const llama_token tok = p == p0 ? tok0 : drafts[p - p0 - 1];
                const float * h;
                if (p == p0) {
                    h = j == 0 ? h0 : ring[j - 1].get(p0 - 1);
                } else {
                    GGML_ASSERT(round_n[fj] > p - 1 - p0);
                    h = round_h[fj].data() + (size_t) (p - 1 - p0) * n_embd;
                }
                if (!batch_add(b, params.seq_id, tok, p, h ? h : zeros.data(), n_embd, p == p0 + i)) {
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
            if (tok == LLAMA_TOKEN_NULL) {
                break; // the chain left no candidate
            }
            drafts.push_back(tok);
            if (llama_vocab_is_eog(vocab, tok)) {
                break;
            }
        }
        if (path) {
            llama_sampler_free(path);
        }
        for (int32_t j = 0; j < nh; ++j) {
            if (round_n[j] > 0) {
                llama_memory_seq_rm(llama_get_memory(heads[j]), params.seq_id, p0, -1);
            }
        }
        mtp_n = std::min<int32_t>(mtp_n, p0);
        stats.t_draft_ms += ms_since(t0);
        return rc;
    }

    float * peek_logits = nullptr; // llama_mtp_peek_draft: where each draft step's MTP logits go

    // Greedy drafts need only the argmax of the MTP logits: a backend sampler (greedy) on the MTP
    // contexts computes it where the logits are (the GPU) and copies one token back instead of a
    // vocabulary of logits. Attached while drafting greedily; detached when a draft needs the logits
    // (chain/stochastic modes take the request's chain on them, peeks return them).
    // one chain per context (a chain is set up for one context's backend, once)
    std::vector<llama_sampler *> bsmpls;
    bool bsmpl_on = false;
    bool no_bsmpl = false;

    void backend_greedy(bool on) {
        if (on == bsmpl_on || ctx_mtp == nullptr) {
            return;
        }
        std::vector<llama_context *> ctxs = multi() ? heads : std::vector<llama_context *>{ ctx_mtp };
        if (!on) {
            for (llama_context * c : ctxs) {
                llama_set_sampler(c, params.seq_id, nullptr);
            }
            for (llama_sampler * s : bsmpls) {
                llama_sampler_free(s);
            }
            bsmpls.clear();
            bsmpl_on = false;
            return;
        }
        bool ok = true;
        for (llama_context * c : ctxs) {
            llama_sampler * s = llama_sampler_chain_init(llama_sampler_chain_default_params());
            llama_sampler_chain_add(s, llama_sampler_init_greedy());
            bsmpls.push_back(s);
            ok = llama_set_sampler(c, params.seq_id, s) && ok;
        }
        bsmpl_on = true;
        if (!ok) { // not offloadable here (e.g. a tensor-split model): the host argmax
            backend_greedy(false);
            no_bsmpl = true;
        }
    }

    // The sampler a draft follows: nullptr for greedy drafts (then the backend argmax is attached),
    // else a clone of the request's chain, advanced along the draft path only. The caller frees it.
    llama_sampler * draft_path(llama_sampler * smpl) {
        llama_sampler * path = mode == LLAMA_MTP_DRAFT_GREEDY || smpl == nullptr ? nullptr : llama_sampler_clone(smpl);
        backend_greedy(path == nullptr && peek_logits == nullptr && !no_bsmpl);
        return path;
    }

    // Draft step i's token from output row `row` of ctx: the argmax (on the backend when attached),
    // or with a chain, q = the chain on the MTP logits and its top (chain) or a draw (stochastic);
    // LLAMA_TOKEN_NULL when the chain leaves no candidate. A peek gets the step's logits.
    llama_token choose_draft(llama_sampler * path, llama_context * ctx, int32_t row, int32_t i) {
        const float * logits = bsmpl_on ? nullptr : llama_get_logits_ith(ctx, row);
        if (peek_logits) {
            std::memcpy(peek_logits + (size_t) i * n_vocab, logits, sizeof(float) * n_vocab);
        }
        if (path == nullptr) {
            return bsmpl_on ? llama_get_sampled_token_ith(ctx, row) : argmax(logits, n_vocab);
        }
        q.emplace_back();
        q.back().from_chain(path, logits, n_vocab);
        const bool sample = mode != LLAMA_MTP_DRAFT_CHAIN && !q.back().one_hot;
        const llama_token tok = sample ? q.back().sample(rng) : q.back().argmax();
        if (tok == LLAMA_TOKEN_NULL) {
            q.pop_back();
            return tok;
        }
        llama_sampler_accept(path, tok);
        return tok;
    }

    // Exact-match verification: sample the target with the chain at each position,
    // accept drafts while they equal the sampled token. vt = [id_last, d_1..d_k].
    int32_t verify_exact(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out, int32_t row0 = 0) {
        int32_t n_out = 0;
        for (int32_t i = 0; i <= k; ++i) {
            llama_token tok = llama_sampler_sample(smpl, ctx_tgt, row0 + i);
            bool match = i < k && tok == vt[i + 1];
            if (i < k && !synth_cond.empty()) {
                match = synthetic_accept(i, vt[i + 1]);
                tok = match ? vt[i + 1] : tok;
            }
            out[n_out++] = tok;
            // an end-of-generation token ends the step even when it matches the draft
            if (!match || llama_vocab_is_eog(vocab, tok)) {
                break;
            }
            stats.accepted_per_pos[i]++;
        }
        return n_out;
    }

    // benchmarking only: a target-independent accept decision for draft position i
    bool synthetic_accept(int32_t i, llama_token draft_tok) {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        const double c = synth_cond[std::min<size_t>(i, synth_cond.size() - 1)];
        return u(rng) < c && !llama_vocab_is_eog(vocab, draft_tok);
    }

    // Rejection sampling (speculative sampling): accept d_i with probability
    // min(1, p(d_i)/q(d_i)); on rejection emit a draw from norm(max(0, p - q)) and stop;
    // after k acceptances emit a bonus draw from p. The output distribution is exactly
    // the chain's distribution p at every position. smpl accepts the emitted tokens.
    int32_t verify_stochastic(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out, int32_t row0 = 0) {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        int32_t n_out = 0;
        for (int32_t i = 0; i <= k; ++i) {
            p.from_chain(smpl, llama_get_logits_ith(ctx_tgt, row0 + i), n_vocab);
            llama_token tok;
            bool accepted = false;
            if (i == k || i >= (int32_t) q.size()) {
                tok = p.sample(rng);
            } else {
                const llama_token x = vt[i + 1];
                const double px = p.prob(x);
                const double qx = q[i].prob(x);
                accepted = mode == LLAMA_MTP_DRAFT_TEST_ACCEPT_ALL || (qx > 0.0 && u(rng) * qx < px);
                tok = accepted ? x : mtp_sample_residual(p, q[i], rng);
            }
            llama_sampler_accept(smpl, tok);
            out[n_out++] = tok;
            if (!accepted || llama_vocab_is_eog(vocab, tok)) {
                break;
            }
            stats.accepted_per_pos[i]++;
        }
        return n_out;
    }

    // Sample the target distribution position by position with the caller's chain at
    // logits rows row0..row0+k (vt = [id_last, d_1..d_k]) and count the step.
    int32_t verify(llama_sampler * smpl, const std::vector<llama_token> & vt, int32_t k, llama_token * out, int32_t row0) {
        const auto t0 = clock_type::now();
        const char * selector = mtp_chain_selector(smpl);
        // without drafts there is nothing to reject: plain sampling, exactly as without MTP
        const bool stochastic = k > 0 && synth_cond.empty() &&
                                (mode == LLAMA_MTP_DRAFT_STOCHASTIC || mode == LLAMA_MTP_DRAFT_TEST_ACCEPT_ALL) &&
                                selector != nullptr && std::strcmp(selector, "dist") == 0;
        const int32_t n_out = stochastic ? verify_stochastic(smpl, vt, k, out, row0) : verify_exact(smpl, vt, k, out, row0);
        for (int32_t i = 0; i < k; ++i) {
            stats.drafted_per_pos[i]++;
        }
        stats.t_sample_ms += ms_since(t0);
        stats.n_drafted   += k;
        stats.n_accepted  += n_out - 1;
        stats.n_generated += n_out;
        return n_out;
    }
};

llama_mtp_params llama_mtp_default_params(void) {
    llama_mtp_params p {};
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

    auto * m = new llama_mtp();
    m->ctx_tgt = ctx_tgt;
    m->ctx_mtp = ctx_mtp;
    m->vocab   = llama_model_get_vocab(model);
    m->params  = params;
    m->n_embd  = llama_model_n_embd_out(model);
    m->n_vocab = llama_vocab_n_tokens(m->vocab);
    m->n_ctx   = (int32_t) llama_n_ctx(ctx_tgt);
    m->n_batch = params.n_batch > 0 ? std::min<int32_t>(params.n_batch, llama_n_batch(ctx_tgt)) : (int32_t) llama_n_batch(ctx_tgt);
    m->batch_tgt = llama_batch_ext_init(ctx_tgt);
    m->pending_h.assign(m->n_embd, 0.0f);
    m->zeros.assign(m->n_embd, 0.0f);
    m->recurrent = llama_model_is_recurrent(model) || llama_model_is_hybrid(model);
    if (m->recurrent) {
        // rejected drafts are rolled back with the context's recurrent-state snapshots
        m->k_max = std::min<int32_t>(LLAMA_MTP_MAX_DRAFT, (int32_t) llama_n_rs_seq(ctx_tgt));
    }

    if (ctx_mtp != nullptr) {
        if (llama_model_n_embd_out(llama_get_model(ctx_mtp)) != m->n_embd ||
            (int32_t) llama_n_ctx(ctx_mtp) < m->n_ctx) {
            llama_batch_ext_free(m->batch_tgt);
            delete m;
            return nullptr;
        }
        m->batch_mtp = llama_batch_ext_init(ctx_mtp);
        llama_set_embeddings_nextn(ctx_tgt, true, /*masked*/ false);
        llama_set_embeddings_nextn(ctx_mtp, true, /*masked*/ true);
        llama_set_nextn_layer_offset(ctx_mtp, 0);
        llama_memory_seq_rm(m->mem_mtp(), params.seq_id, -1, -1);
    }
    llama_memory_seq_rm(m->mem_tgt(), params.seq_id, -1, -1);
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
    for (size_t j = 1; j < mtp->hbatch.size(); ++j) {
        llama_batch_ext_free(mtp->hbatch[j]);
    }
    mtp->backend_greedy(false); // the contexts outlive the engine
    delete mtp;
}

int32_t llama_mtp_prefill(llama_mtp * m, const llama_token * toks, int32_t n) {
    if (m == nullptr || toks == nullptr || n <= 0) {
        return LLAMA_MTP_ERR_ARG;
    }
    if (n > m->n_ctx) {
        return LLAMA_MTP_ERR_CTX_FULL;
    }
    const auto t0 = clock_type::now();
    const bool has_mtp = m->ctx_mtp != nullptr;

    // longest common prefix with the KV; at least the last token is decoded again
    int32_t c = 0;
    while (c < m->n_past() && c < n && m->tokens[c] == toks[c]) {
        c++;
    }
    const int32_t t = std::min(c, n - 1);

    if (t != m->n_past()) {
        // rewind. With MTP, the entry of position t needs h_{t-1}, so the target
        // re-decodes from t-1 while the MTP KV keeps [0, t). Without MTP the target
        // re-decodes from t-1 too: the target must be fed exactly the same chunks with
        // MTP on and off, since a token decoded in a batch of another size gets logits
        // that differ in the last bits (CPU kernels are not batch-size invariant) and
        // greedy near-ties would flip. For the same reason a recurrent/hybrid target
        // never rolls back through its draft snapshots here (plain decoding has none):
        // it starts over, as it does without MTP.
        int32_t keep_tgt = std::max(t - 1, 0);
        int32_t keep_mtp = t;
        if (m->recurrent || !llama_memory_seq_rm(m->mem_tgt(), m->params.seq_id, keep_tgt, -1)) {
            // a recurrent target cannot roll back that far without snapshots: start over
            llama_memory_seq_rm(m->mem_tgt(), m->params.seq_id, -1, -1);
            keep_tgt = 0;
            keep_mtp = 0;
        }
        if (has_mtp) {
            keep_mtp = std::min(keep_mtp, m->mtp_n);
            llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, keep_mtp, -1);
            m->heads_rm_from(keep_mtp);
            m->mtp_n = keep_mtp;
        }
        if (keep_tgt == 0) {
            std::fill(m->pending_h.begin(), m->pending_h.end(), 0.0f);
        }
        m->tokens.resize(keep_tgt);
    }

    m->stats.n_reused += m->n_past();
    for (int32_t s = m->n_past(); s < n; ) {
        const int32_t len = std::min(m->n_batch, n - s);
        int32_t rc = m->decode_target(toks + s, len, s, false, s + len == n);
        if (rc == LLAMA_MTP_OK && has_mtp) {
            rc = m->catch_up(toks + s, len, s, llama_get_embeddings_nextn(m->ctx_tgt));
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
    m->has_last = false;
    m->stats.t_prefill_ms += ms_since(t0);
    return LLAMA_MTP_OK;
}

int32_t llama_mtp_step(llama_mtp * m, llama_sampler * smpl, int32_t n_draft, llama_token * out, int32_t n_out_max) {
    if (m == nullptr || smpl == nullptr || out == nullptr || n_out_max < 1) {
        return LLAMA_MTP_ERR_ARG;
    }
    if (m->logits_pending) {
        const auto t0 = clock_type::now();
        const llama_token tok = llama_sampler_sample(smpl, m->ctx_tgt, -1);
        m->stats.t_sample_ms += ms_since(t0);
        m->logits_pending = false;
        m->has_last = true;
        m->id_last = tok;
        m->stats.n_generated++;
        out[0] = tok;
        return 1;
    }
    if (!m->has_last) {
        return LLAMA_MTP_ERR_STATE;
    }
    const int32_t n_past = m->n_past();
    if (n_past >= m->n_ctx) {
        return LLAMA_MTP_ERR_CTX_FULL;
    }

    int32_t k = n_draft < 0 ? m->params.n_draft : n_draft;
    k = std::min({ k, m->k_max, m->n_ctx - 1 - n_past, n_out_max - 1 });
    if (m->ctx_mtp == nullptr || k < 0) {
        k = 0;
    }

    int32_t rc = m->draft(k, smpl);
    if (rc != LLAMA_MTP_OK) {
        return rc;
    }
    k = (int32_t) m->drafts.size();

    // verify: one target decode of [id_last, d_1..d_k] with logits everywhere
    auto t0 = clock_type::now();
    std::vector<llama_token> & vt = m->drafts; // reuse: prepend id_last
    vt.insert(vt.begin(), m->id_last);
    rc = m->decode_target(vt.data(), k + 1, n_past, true, true);
    m->stats.t_verify_ms += ms_since(t0);
    if (rc != LLAMA_MTP_OK) {
        vt.erase(vt.begin());
        return rc;
    }
    m->stats.n_steps++;

    const int32_t n_out = m->verify(smpl, vt, k, out, 0);

    // keep [id_last, accepted drafts] in the target; drop the rest
    if (n_out - 1 < k && !llama_memory_seq_rm(m->mem_tgt(), m->params.seq_id, n_past + n_out, -1)) {
        return LLAMA_MTP_ERR_STATE; // cannot roll back: never continue from a polluted context
    }
    const float * h_rows = m->ctx_mtp ? llama_get_embeddings_nextn(m->ctx_tgt) : nullptr;
    m->tokens.insert(m->tokens.end(), vt.begin(), vt.begin() + n_out);
    rc = m->ctx_mtp ? m->catch_up(vt.data(), n_out, n_past, h_rows) : LLAMA_MTP_OK;
    vt.clear();
    m->id_last = out[n_out - 1];
    return rc == LLAMA_MTP_OK ? n_out : rc;
}

void llama_mtp_set_draft_mode(llama_mtp * mtp, llama_mtp_draft_mode mode, uint32_t seed) {
    if (mtp) {
        mtp->mode = mode;
        // salted: the request's chain seeds its own RNG with the same seed, and the two
        // streams must be independent (identical streams correlate draft/verify draws
        // with the first token's draw)
        std::seed_seq seq { seed, 0x6d747021u };
        mtp->rng.seed(seq);
    }
}

void llama_mtp_clear(llama_mtp * m) {
    if (m == nullptr) {
        return;
    }
    llama_memory_seq_rm(m->mem_tgt(), m->params.seq_id, -1, -1);
    if (m->ctx_mtp) {
        llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, -1, -1);
        m->heads_rm_from(-1);
    }
    m->tokens.clear();
    m->mtp_n = 0;
    m->ext_pending_tok.clear();
    m->ext_pending_pos.clear();
    m->ext_pending_h.clear();
    m->ext_h_n = 0;
    std::fill(m->pending_h.begin(), m->pending_h.end(), 0.0f);
    m->logits_pending = false;
    m->has_last = false;
    m->id_last = LLAMA_TOKEN_NULL;
}

int32_t llama_mtp_set_synthetic_rates(llama_mtp * m, const float * rates, int32_t n) {
    if (m == nullptr || n < 0 || (n > 0 && rates == nullptr) || n > LLAMA_MTP_MAX_DRAFT) {
        return LLAMA_MTP_ERR_ARG;
    }
    std::vector<double> cond;
    double prev = 1.0;
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
        mtp->stats = llama_mtp_stats {};
    }
}

int32_t llama_mtp_set_heads(llama_mtp * m, llama_context ** ctx_heads, int32_t n_heads) {
    if (m == nullptr || m->ctx_mtp == nullptr || ctx_heads == nullptr || n_heads < 1 ||
        n_heads > LLAMA_MTP_MAX_DRAFT || ctx_heads[0] != m->ctx_mtp) {
        return LLAMA_MTP_ERR_ARG;
    }
    for (int32_t j = 0; j < n_heads; ++j) {
        llama_context * c = ctx_heads[j];
        if (c == nullptr || llama_model_n_layer_nextn(llama_get_model(c)) < n_heads ||
            llama_model_n_embd_out(llama_get_model(c)) != m->n_embd || (int32_t) llama_n_ctx(c) < m->n_ctx) {
            return LLAMA_MTP_ERR_ARG;
        }
        for (int32_t i = 0; i < j; ++i) {
            if (ctx_heads[i] == c) {
                return LLAMA_MTP_ERR_ARG; // one context per head
            }
        }
    }
    llama_mtp_clear(m);
    m->backend_greedy(false); // re-attached to the new set of contexts by the next greedy draft
    for (size_t j = 1; j < m->hbatch.size(); ++j) {
        llama_batch_ext_free(m->hbatch[j]);
    }
    m->heads.clear();
    m->hbatch.clear();
    m->ring.clear();
    m->round_h.clear();
    m->round_n.clear();
    if (n_heads == 1) {
        llama_set_embeddings_nextn(m->ctx_mtp, true, /*masked*/ true);
        llama_set_nextn_layer_offset(m->ctx_mtp, 0);
        return LLAMA_MTP_OK;
    }
    for (int32_t j = 0; j < n_heads; ++j) {
        llama_context * c = ctx_heads[j];
        m->heads.push_back(c);
        m->hbatch.push_back(j == 0 ? m->batch_mtp : llama_batch_ext_init(c));
        // every row's output state feeds the next head
        llama_set_embeddings_nextn(c, true, /*masked*/ false);
        llama_set_nextn_layer_offset(c, j);
        llama_memory_seq_rm(llama_get_memory(c), m->params.seq_id, -1, -1);
        m->round_h.emplace_back((size_t) (LLAMA_MTP_MAX_DRAFT + 1) * m->n_embd, 0.0f);
        m->round_n.push_back(0);
        if (j + 1 < n_heads) {
            m->ring.emplace_back();
            m->ring.back().init(m->n_embd);
        }
    }
    return LLAMA_MTP_OK;
}

void llama_mtp_set_head_policy(llama_mtp * m, llama_mtp_head_policy policy) {
    if (m && (policy == LLAMA_MTP_HEADS_PER_LAYER || policy == LLAMA_MTP_HEADS_FIRST || policy == LLAMA_MTP_HEADS_CAPPED)) {
        m->policy = policy;
    }
}

int32_t llama_mtp_n_heads(const llama_mtp * m) {
    return m ? m->n_heads() : 0;
}

int32_t llama_mtp_peek_draft(llama_mtp * m, llama_token id_last, int32_t k, llama_token * out, float * logits) {
    if (m == nullptr || k < 0 || k > LLAMA_MTP_MAX_DRAFT || (k > 0 && out == nullptr)) {
        return LLAMA_MTP_ERR_ARG;
    }
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
    const llama_mtp_stats saved_stats = m->stats;
    const auto saved_mode = m->mode;
    const int32_t saved_mtp_n = m->mtp_n;
    const llama_pos p0 = m->n_past();
    m->mode = LLAMA_MTP_DRAFT_GREEDY;
    m->peek_logits = logits;
    // between steps every head's MTP KV ends at p0; the draft rows are dropped again afterwards
    const int32_t rc = m->draft_at(p0, id_last, m->pending_h.data(), k, nullptr, /*keep_first*/ false);
    m->peek_logits = nullptr;
    m->mode = saved_mode;
    const int32_t n = (int32_t) m->drafts.size();
    std::copy(m->drafts.begin(), m->drafts.end(), out);
    m->drafts.clear();
    m->q.clear();
    m->stats = saved_stats;
    GGML_ASSERT(saved_mtp_n == p0 && "between steps the MTP KV ends where the target's does");
    return rc == LLAMA_MTP_OK ? n : rc;
}

size_t llama_mtp_abi_sizeof(int32_t which) {
    switch (which) {
        case 0: return sizeof(llama_mtp_params);
        case 1: return sizeof(llama_mtp_stats);
        case 2: return sizeof(llama_model_params);
        case 3: return sizeof(llama_context_params);
        default: return 0;
    }
}

// ---- caller-decoded targets (llama-server) ----

int32_t llama_mtp_ext_observe(llama_mtp * m, const llama_token * toks, int32_t n, llama_pos p0, int32_t row0) {
    const llama_mtp_ext_run run = { m, toks, n, p0, row0 };
    return llama_mtp_ext_observe_runs(&run, 1);
}

int32_t llama_mtp_ext_observe_runs(const llama_mtp_ext_run * runs, int32_t n_runs) {
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
        for (int32_t q = 0; q < r; ++q) {
            if (runs[q].mtp == run.mtp || runs[q].mtp->params.seq_id == run.mtp->params.seq_id) {
                return LLAMA_MTP_ERR_ARG; // one run per sequence and decode
            }
        }
    }
    if (m0->ctx_mtp == nullptr) {
        return LLAMA_MTP_OK;
    }
    const auto t0 = clock_type::now();
    const float * h_all = llama_get_embeddings_nextn(m0->ctx_tgt);
    if (h_all == nullptr) {
        return LLAMA_MTP_ERR_STATE;
    }
    const int32_t n_embd = m0->n_embd;

    // queue the entries (x_p paired with h_{p-1}: the first from the sequence's previous run, the
    // rest from this one), replacing anything at >= p0; then keep this run's hidden rows
    std::vector<llama_mtp *> flush;
    for (int32_t r = 0; r < n_runs; ++r) {
        const auto & run = runs[r];
        llama_mtp * m = run.mtp;
        const float * h_tgt = h_all + (size_t) run.row0 * n_embd;
        llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, run.p0, -1);
        m->heads_rm_from(run.p0);
        m->mtp_n = std::min<int32_t>(m->mtp_n, run.p0);
        m->ext_pending_drop_from(run.p0);
        for (int32_t i = 0; i < run.n_tokens; ++i) {
            const float * h = i == 0 ? m->ext_h_at(run.p0 - 1) : h_tgt + (size_t) (i - 1) * n_embd;
            m->ext_pending_push(run.toks[i], run.p0 + i, h);
        }
        m->ext_h.assign(h_tgt, h_tgt + (size_t) run.n_tokens * n_embd);
        m->ext_h_p0 = run.p0;
        m->ext_h_n  = run.n_tokens;
        if (m->ext_catchup) {
            flush.push_back(m);
        }
    }
    // write the queued entries of the sequences that catch up now, as few MTP decodes as fit
    const int32_t rc = llama_mtp::ext_flush(flush);
    const double ms = ms_since(t0) / n_runs;
    for (int32_t r = 0; r < n_runs; ++r) {
        runs[r].mtp->stats.t_catchup_ms += ms; // the shared decode, split evenly
    }
    return rc;
}

int32_t llama_mtp_ext_draft(llama_mtp * m, llama_sampler * chain, llama_token id_last, llama_pos pos,
                            int32_t n_draft, llama_token * out) {
    if (m == nullptr || pos < 0 || n_draft < 0 || (n_draft > 0 && out == nullptr)) {
        return LLAMA_MTP_ERR_ARG;
    }
    m->ext_vt.assign(1, id_last);
    m->drafts.clear();
    m->q.clear();
    const int32_t k = std::min({ n_draft, m->k_max, m->n_ctx - 1 - (int32_t) pos });
    if (m->ctx_mtp == nullptr || k <= 0) {
        return 0;
    }
    llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, pos, -1);
    m->heads_rm_from(pos);
    m->ext_pending_drop_from(pos);
    if (!m->ext_pending_tok.empty()) {
        // entries deferred while catch-up was off: the MTP KV must be contiguous before drafting
        const auto t0 = clock_type::now();
        std::vector<llama_mtp *> one = { m };
        const int32_t rc_flush = llama_mtp::ext_flush(one);
        m->stats.t_catchup_ms += ms_since(t0);
        if (rc_flush != LLAMA_MTP_OK) {
            return rc_flush;
        }
    }
    {
        // the first draft entry goes at pos: the KV must end at pos-1 (or be empty)
        const llama_pos mx = llama_memory_seq_pos_max(m->mem_mtp(), m->params.seq_id);
        if (mx >= 0 && mx != pos - 1) {
            llama_memory_seq_rm(m->mem_mtp(), m->params.seq_id, -1, -1);
        }
        m->heads_align();
    }
    const int32_t rc = m->draft_at(pos, id_last, m->ext_h_at(pos - 1), k, chain, /*keep_first*/ false);
    if (rc != LLAMA_MTP_OK) {
        m->drafts.clear();
        m->q.clear();
        return rc;
    }
    std::copy(m->drafts.begin(), m->drafts.end(), out);
    m->ext_vt.insert(m->ext_vt.end(), m->drafts.begin(), m->drafts.end());
    return (int32_t) m->drafts.size();
}

int32_t llama_mtp_ext_verify(llama_mtp * m, llama_sampler * chain, int32_t row0, int32_t n_draft,
                             llama_token * out, int32_t n_out_max) {
    if (m == nullptr || chain == nullptr || out == nullptr || row0 < 0 || n_draft < 0 ||
        n_draft + 1 > (int32_t) m->ext_vt.size() || n_out_max < n_draft + 1) {
        return LLAMA_MTP_ERR_ARG;
    }
    std::vector<llama_token> vt(m->ext_vt.begin(), m->ext_vt.begin() + n_draft + 1);
    if ((int32_t) m->q.size() > n_draft) {
        m->q.resize(n_draft);
    }
    const int32_t n_out = m->verify(chain, vt, n_draft, out, row0);
    m->stats.n_steps++;
    m->ext_vt.clear();
    return n_out;
}

void llama_mtp_ext_set_catchup(llama_mtp * m, bool enabled) {
    if (m) {
        m->ext_catchup = enabled;
    }
}

void llama_mtp_ext_add_verify_time(llama_mtp * m, double ms) {
    if (m) {
        m->stats.t_verify_ms += ms;
    }
}
