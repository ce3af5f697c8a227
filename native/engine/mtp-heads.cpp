// pymtp: several MTP blocks (Step-3.5, MiMo-V2, HY-V3, `pymtp graft --heads N`, ...).
//
// Head j at position p reads token x_p and head j-1's output state at p-1 (head 0: the target's
// nextn state h_{p-1}) and predicts x_{p+1}; each head attends over its own KV in its own context.
// Every head's KV is kept equal to a from-scratch pass over the accepted sequence: whenever head 0
// writes teacher-forced rows, the other heads write the same positions in order (cascade), each
// fed the previous head's output states of those rows (and, for the first row, the state kept in
// that head's ring). Drafting uses head_of_step / feeder_of (mtp-draft.cpp).

#include "mtp-engine.h"

#include <algorithm>

void mtp::state_ring::init(int32_t ne) {
    n_embd = ne;
    rows.assign((size_t) R * ne, 0.0f);
    pos.assign(R, -1);
}

const float * mtp::state_ring::get(llama_pos p) const {
    if (p < 0 || pos.empty()) {
        return nullptr;
    }
    const int32_t s = p % R;
    return pos[s] == p ? rows.data() + (size_t) s * n_embd : nullptr;
}

void mtp::state_ring::put(llama_pos p, const float * h) {
    const int32_t s = p % R;
    pos[s]          = p;
    std::memcpy(rows.data() + (size_t) s * n_embd, h, sizeof(float) * n_embd);
}

void mtp::state_ring::truncate_to(llama_pos p) {
    for (auto & q : pos) {
        if (q >= p) {
            q = -1;
        }
    }
}

int32_t llama_mtp::head_of_step(int32_t i) const {
    return policy == LLAMA_MTP_HEADS_FIRST ? 0 : i % (int32_t) heads.size();
}

int32_t llama_mtp::feeder_of(int32_t j) const {
    if (policy == LLAMA_MTP_HEADS_FIRST) {
        return 0;
    }
    return (j + (int32_t) heads.size() - 1) % (int32_t) heads.size();
}

void llama_mtp::heads_truncate_to(llama_pos p) {
    for (size_t j = 1; j < heads.size(); ++j) {
        llama_memory_seq_rm(llama_get_memory(heads[j]), params.seq_id, p <= 0 ? -1 : p, -1);
    }
    for (auto & r : ring) {
        r.truncate_to(std::max<llama_pos>(p, 0));
    }
}

// The other heads never hold more than head 0; one that lags behind it (its rows were not restored
// with head 0's, e.g. by llama-server's prompt cache) restarts empty: a shorter context, same output.
void llama_mtp::heads_align() {
    if (!multi()) {
        return;
    }
    const llama_pos mx0 = llama_memory_seq_pos_max(mem_mtp(), params.seq_id);
    for (size_t j = 1; j < heads.size(); ++j) {
        llama_memory_t  mem = llama_get_memory(heads[j]);
        const llama_pos mx  = llama_memory_seq_pos_max(mem, params.seq_id);
        if (mx > mx0) {
            llama_memory_seq_rm(mem, params.seq_id, mx0 + 1, -1);
        } else if (mx < mx0) {
            llama_memory_seq_rm(mem, params.seq_id, -1, -1);
        }
    }
}

int32_t llama_mtp::cascade(std::vector<mtp::head_run> & runs) {
    if (runs.empty() || !runs[0].m->multi()) {
        return LLAMA_MTP_OK;
    }
    llama_mtp *   m0 = runs[0].m;
    const int32_t nh = (int32_t) m0->heads.size();
    const int32_t ne = m0->n_embd;
    for (int32_t j = 1; j < nh; ++j) {
        llama_context *   prev = m0->heads[j - 1];
        llama_batch_ext * b    = m0->head_batch[j];
        llama_batch_ext_clear(b);
        int32_t row = 0;
        for (auto & r : runs) {
            llama_mtp * m = r.m;
            llama_memory_seq_rm(llama_get_memory(m->heads[j]), m->params.seq_id, r.p0, -1);
            for (int32_t i = 0; i < r.n; ++i) {
                const float * h =
                    i == 0 ? m->ring[j - 1].get(r.p0 - 1) : llama_get_embeddings_nextn_ith(prev, r.row0 + i - 1);
                if (!mtp::batch_add(b, m->params.seq_id, r.toks[i], r.p0 + i, h ? h : m->zeros.data(), ne, false)) {
                    return LLAMA_MTP_ERR_ARG;
                }
            }
        }
        // the inputs are copied into the batch: head j-1's rows can go into its ring now
        for (auto & r : runs) {
            r.m->ring[j - 1].truncate_to(r.p0);
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

int32_t llama_mtp::set_heads(llama_context ** ctx_heads, int32_t n) {
    for (int32_t j = 0; j < n; ++j) {
        llama_context * c = ctx_heads[j];
        if (c == nullptr || llama_model_n_layer_nextn(llama_get_model(c)) < n ||
            llama_model_n_embd_out(llama_get_model(c)) != n_embd || (int32_t) llama_n_ctx(c) < n_ctx) {
            return LLAMA_MTP_ERR_ARG;
        }
        for (int32_t i = 0; i < j; ++i) {
            if (ctx_heads[i] == c) {
                return LLAMA_MTP_ERR_ARG; // one context per head
            }
        }
    }
    llama_mtp_clear(this);
    set_backend_draft(mtp::backend_pick::none); // re-attached to the new set of contexts by the next draft
    for (size_t j = 1; j < head_batch.size(); ++j) {
        llama_batch_ext_free(head_batch[j]);
    }
    heads.clear();
    head_batch.clear();
    ring.clear();
    round_h.clear();
    round_n.clear();
    if (n == 1) {
        llama_set_embeddings_nextn(ctx_mtp, true, /*masked*/ true);
        llama_set_nextn_layer_offset(ctx_mtp, 0);
        return LLAMA_MTP_OK;
    }
    for (int32_t j = 0; j < n; ++j) {
        llama_context * c = ctx_heads[j];
        heads.push_back(c);
        head_batch.push_back(j == 0 ? batch_mtp : llama_batch_ext_init(c));
        // every row's output state feeds the next head
        llama_set_embeddings_nextn(c, true, /*masked*/ false);
        llama_set_nextn_layer_offset(c, j);
        llama_memory_seq_rm(llama_get_memory(c), params.seq_id, -1, -1);
        round_h.emplace_back((size_t) (LLAMA_MTP_MAX_DRAFT + 1) * n_embd, 0.0f);
        round_n.push_back(0);
        if (j + 1 < n) {
            ring.emplace_back();
            ring.back().init(n_embd);
        }
    }
    return LLAMA_MTP_OK;
}
