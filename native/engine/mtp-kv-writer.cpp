// pymtp: the one writer of teacher-forced MTP KV rows, and the engine's named rollback.
//
// The MTP KV entry of position p pairs the token x_p with the target's nextn hidden state h_{p-1}
// (zeros before position 0). Every path writes it the same way: the target decodes some tokens,
// observe() queues their entries (the first one paired with the previous decode's last row) and
// keeps the decode's hidden rows, and write_queued() writes the queue in as few MTP decodes as fit a
// batch, then lets the other heads write the same positions (cascade). The engine's own loop writes
// prefill chunks and plain steps' entries at once, and a drafting step's in its next draft decode, ahead
// of the draft row (write_unless_ahead, queue_ahead; one head); llama-server batches every slot's
// entries into one MTP decode, or defers them while it is not drafting.

#include "mtp-engine.h"

#include <algorithm>
#include <map>
#include <mutex>

bool mtp::batch_add(llama_batch_ext * batch, llama_seq_id seq, llama_token id, llama_pos pos, const float * h,
                    int32_t n_embd, bool output) {
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

const float * llama_mtp::h_at(llama_pos p) const {
    const float * h = target_h.at(p);
    return h ? h : zeros.data();
}

void llama_mtp::observe(const llama_token * toks, int32_t n, llama_pos p0, const float * h_all, int32_t row0) {
    const float * h_run = h_all + (size_t) row0 * n_embd;
    queue.truncate_to(p0);
    if (!queue.empty() && queue.pos.back() != p0 - 1) {
        // the positions between were filled behind the engine's back (llama-server's prompt cache restored
        // a saved prompt into the target and MTP contexts): the rows queued before cannot be written next
        // to these (an MTP decode of non-consecutive positions fails: H100, four slots, HTTP 500)
        queue.clear();
    }
    for (int32_t i = 0; i < n; ++i) {
        queue.push(toks[i], p0 + i, i == 0 ? h_at(p0 - 1) : h_run + (size_t) (i - 1) * n_embd);
    }
    target_h.assign(h_run, p0, n);
}

void llama_mtp::align_queue() {
    const llama_pos mx = llama_memory_seq_pos_max(mem_mtp(), params.seq_id); // -1: empty
    queue.drop_through(mx);
    // a gap between the KV and the queue: the KV restarts at the queue (the head then sees a shorter
    // context: lower acceptance, same output); positions must stay consecutive
    if (!queue.empty() && mx >= 0 && queue.pos.front() != mx + 1) {
        llama_memory_seq_rm(mem_mtp(), params.seq_id, -1, -1);
    }
    heads_align();
}

int32_t llama_mtp::write_queued(const std::vector<llama_mtp *> & engines) {
    if (engines.empty()) {
        return LLAMA_MTP_OK;
    }
    llama_mtp *  m0  = engines[0];
    const size_t cap = std::max<uint32_t>(1, llama_n_batch(m0->ctx_mtp));
    for (llama_mtp * m : engines) {
        m->align_queue();
    }
    std::vector<size_t>        next(engines.size(), 0);
    std::vector<mtp::head_run> runs;
    for (;;) {
        llama_batch_ext_clear(m0->batch_mtp);
        runs.clear();
        size_t n_rows = 0;
        for (size_t j = 0; j < engines.size() && n_rows < cap; ++j) {
            llama_mtp *  m  = engines[j];
            const size_t e0 = next[j];
            for (; next[j] < m->queue.size() && n_rows < cap; ++next[j], ++n_rows) {
                if (!m->queue.add_to(m0->batch_mtp, m->params.seq_id, next[j])) {
                    return LLAMA_MTP_ERR_ARG;
                }
            }
            if (next[j] > e0) {
                m->stats.n_catchup_decodes++;
                if (m0->multi()) { // the rows the other heads write next
                    runs.push_back({ m, (int32_t) (n_rows - (next[j] - e0)), (int32_t) (next[j] - e0), m->queue.pos[e0],
                                     m->queue.tok.data() + e0 });
                }
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
    for (llama_mtp * m : engines) {
        m->queue.clear();
    }
    return LLAMA_MTP_OK;
}

int32_t llama_mtp::catch_up(const llama_token * toks, int32_t n, llama_pos p0, bool for_draft) {
    if (ctx_mtp == nullptr || n <= 0 || ctrl.asleep) {
        return LLAMA_MTP_OK; // asleep: no hidden states to pair, nothing kept (the MTP KV restarts on waking)
    }
    const auto t0 = mtp::clock_type::now();
    observe(toks, n, p0, llama_get_embeddings_nextn(ctx_tgt), 0);
    if (defers()) {
        ctrl.n_deferred += n;
        return LLAMA_MTP_OK; // written in one batch before the next draft (or once the queue is full)
    }
    if (for_draft && !multi() && queue.size() < mtp::controller::QUEUE) {
        return LLAMA_MTP_OK; // the next draft decode writes them ahead of its row (queue_ahead)
    }
    const int32_t rc = write_queued({ this });
    stats.t_catchup_ms += mtp::ms_since(t0);
    return rc;
}

void llama_mtp::hidden_output(llama_context * ctx_tgt, bool awake) {
    // engines awake per target context (a server's slots share one; the engine's own loop has its own)
    static std::mutex                     mu;
    static std::map<llama_context *, int> n_awake;
    const std::lock_guard<std::mutex>     lock(mu);
    int &                                 n = n_awake[ctx_tgt];
    n                                       = std::max(0, n + (awake ? 1 : -1));
    llama_set_embeddings_nextn(ctx_tgt, n > 0, /*masked*/ false);
    if (n == 0) {
        n_awake.erase(ctx_tgt);
    }
}

void llama_mtp::sleep() {
    if (ctx_mtp == nullptr || ctrl.asleep) {
        return;
    }
    hidden_output(ctx_tgt, false);
    truncate_mtp_to(0);
    target_h.truncate_to(0);
    ctrl.fell_asleep();
}

void llama_mtp::wake() {
    if (!ctrl.asleep) {
        return;
    }
    hidden_output(ctx_tgt, true);
    ctrl.woke();
}

int32_t llama_mtp::write_unless_ahead(llama_pos p0, int32_t n_after) {
    if (queue.empty()) {
        return LLAMA_MTP_OK;
    }
    align_queue();
    const size_t cap = std::max<uint32_t>(1, llama_n_batch(ctx_mtp));
    if (multi() || queue.empty() || queue.pos.back() != p0 - 1 || queue.size() + (size_t) n_after > cap) {
        return flush_deferred();
    }
    return LLAMA_MTP_OK;
}

int32_t llama_mtp::queue_ahead() {
    for (size_t e = 0; e < queue.size(); ++e) {
        if (!queue.add_to(batch_mtp, params.seq_id, e)) {
            return -1;
        }
    }
    const int32_t n = (int32_t) queue.size();
    queue.clear();
    return n;
}

int32_t llama_mtp::flush_deferred() {
    if (ctx_mtp == nullptr || queue.empty()) {
        return LLAMA_MTP_OK;
    }
    const auto    t0 = mtp::clock_type::now();
    const int32_t rc = write_queued({ this });
    stats.t_catchup_ms += mtp::ms_since(t0);
    return rc;
}

void llama_mtp::truncate_mtp_to(llama_pos p) {
    if (ctx_mtp == nullptr) {
        return;
    }
    p = std::max<llama_pos>(p, 0);
    llama_memory_seq_rm(mem_mtp(), params.seq_id, p == 0 ? -1 : p, -1);
    heads_truncate_to(p);
    queue.truncate_to(p);
}

bool llama_mtp::truncate_target_to(llama_pos p) {
    p = std::max<llama_pos>(p, 0);
    target_h.truncate_to(p);
    return llama_memory_seq_rm(mem_tgt(), params.seq_id, p == 0 ? -1 : p, -1);
}

int32_t llama_mtp::decode_target(const llama_token * toks, int32_t n, llama_pos p0, bool all_logits, bool last_logits) {
    llama_batch_ext_clear(batch_tgt);
    for (int32_t i = 0; i < n; ++i) {
        const bool out = all_logits || (last_logits && i == n - 1);
        if (!mtp::batch_add(batch_tgt, params.seq_id, toks[i], p0 + i, nullptr, 0, out)) {
            return LLAMA_MTP_ERR_ARG;
        }
    }
    return llama_process(ctx_tgt, LLAMA_PROCESS_TYPE_DECODE, batch_tgt) == 0 ? LLAMA_MTP_OK : LLAMA_MTP_ERR_DECODE;
}
