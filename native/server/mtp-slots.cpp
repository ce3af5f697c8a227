// pymtp: the MTP engines of llama-server's slots (see mtp-slots.h).

#include "mtp-slots.h"

#include "log.h"

#include <algorithm>
#include <stdexcept>

mtp_slots::mtp_slots(llama_context * ctx_tgt, llama_context * ctx_mtp, int32_t n_seq, int32_t n_max_) {
    if (ctx_tgt == nullptr || ctx_mtp == nullptr) {
        throw std::runtime_error("--mtp requires the target and MTP contexts");
    }
    n_max = std::min(n_max_, llama_mtp_draft_limit());
    mtps.assign(n_seq, nullptr);
    for (llama_seq_id s = 0; s < n_seq; ++s) {
        llama_mtp_params mp = llama_mtp_default_params();
        mp.n_draft          = n_max;
        mp.seq_id           = s;
        mtps[s]             = llama_mtp_init(ctx_tgt, ctx_mtp, mp);
        if (mtps[s] == nullptr) {
            for (auto * m : mtps) {
                llama_mtp_free(m);
            }
            throw std::runtime_error(
                "failed to initialize the MTP engine (MTP context too small or head width mismatch)");
        }
    }
    for (llama_seq_id s = 1; s < n_seq; ++s) {
        llama_mtp_share_costs(mtps[s], mtps[0]); // one MTP context: one draft decode cost
    }
    n_max = std::min(n_max, llama_mtp_max_draft(mtps[0]));
    out.resize(llama_mtp_draft_limit() + 1);
    seen.assign(n_seq, false);
    LOG_INF("pymtp MTP engine: %d sequences, n_draft <= %d\n", n_seq, n_max);
}

mtp_slots::~mtp_slots() {
    for (auto * m : mtps) {
        llama_mtp_free(m);
    }
}

llama_mtp * mtp_slots::get(llama_seq_id seq) const {
    return seq >= 0 && seq < (llama_seq_id) mtps.size() ? mtps[seq] : nullptr;
}

bool mtp_slots::flush() {
    if (!runs.empty() && llama_mtp_observe_runs(runs.data(), (int32_t) runs.size()) != LLAMA_MTP_OK) {
        LOG_ERR("MTP catch-up failed for %zu sequence(s)\n", runs.size());
        return false;
    }
    runs.clear();
    std::fill(seen.begin(), seen.end(), false);
    return true;
}

bool mtp_slots::observe(const llama_token * toks, const llama_seq_id * seq, const llama_pos * pos, int32_t n) {
    runs.clear();
    std::fill(seen.begin(), seen.end(), false);
    for (int32_t i = 0; i < n;) {
        const llama_seq_id s  = seq[i];
        const llama_pos    p0 = pos[i];
        int32_t            j  = i + 1;
        while (j < n && seq[j] == s && pos[j] == p0 + (j - i)) {
            j++;
        }
        if (llama_mtp * m = get(s)) {
            if (seen[s] && !flush()) {
                return false;
            }
            seen[s] = true;
            runs.push_back({ m, toks + i, j - i, p0, i });
        }
        i = j;
    }
    return flush();
}

bool mtp_slots::draft(llama_seq_id seq, llama_sampler * chain, llama_token id_last, llama_pos pos0, int32_t k,
                      std::vector<llama_token> & result) {
    llama_mtp * m = get(seq);
    if (m == nullptr) {
        return false;
    }
    k               = k < 0 ? n_max : std::min(k, n_max);
    const int32_t n = llama_mtp_draft(m, chain, id_last, pos0, k, out.data());
    if (n < 0) {
        LOG_ERR("MTP draft failed for seq %d (%d)\n", (int) seq, (int) n);
        return false;
    }
    result.assign(out.begin(), out.begin() + n);
    return true;
}

bool mtp_slots::set_heads(llama_context * ctx_mtp, const std::vector<llama_context *> & ctx_heads,
                          const char * policy) {
    std::vector<llama_context *> all = { ctx_mtp };
    all.insert(all.end(), ctx_heads.begin(), ctx_heads.end());
    for (llama_mtp * m : mtps) {
        if (llama_mtp_set_heads(m, all.data(), (int32_t) all.size()) != LLAMA_MTP_OK) {
            return false;
        }
        llama_mtp_set_head_policy(m, (llama_mtp_head_policy) llama_mtp_head_policy_from_name(policy));
    }
    return true;
}
