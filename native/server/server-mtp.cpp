// pymtp: llama-server's MTP components (see server-mtp.h).

#include "server-mtp.h"

#include "log.h"

#include <algorithm>
#include <cmath>

void server_mtp_autotune::init(int32_t n_slots) {
    arms.assign(n_slots + 1, {});
    best.assign(n_slots + 1, -1);
}

bool server_mtp_autotune::decided(int32_t c) const {
    return c > 0 && c < (int32_t) arms.size() && arms[c][0].n >= n_warmup && arms[c][1].n >= n_warmup;
}

bool server_mtp_autotune::choose(int32_t c) {
    if (c <= 0 || c >= (int32_t) arms.size()) {
        return true;
    }
    const auto & a = arms[c];
    iter++;
    if (a[1].n < n_warmup) {
        return true;
    }
    if (a[0].n < n_warmup) {
        return false;
    }
    const bool     draft  = a[1].tps >= a[0].tps;
    // re-measure the slower arm every 16th iteration when the two are close, rarely when it is far
    // behind (each such iteration costs in proportion to the gap): 16 * (best/slower)^4, <= 256
    const double   hi     = std::max(a[0].tps, a[1].tps);
    const double   slower = std::max(1e-9, std::min(a[0].tps, a[1].tps));
    const uint64_t every  = (uint64_t) std::min(256.0, 16.0 * std::pow(hi / slower, 4.0));
    return iter % std::max<uint64_t>(every, 16) == 0 ? !draft : draft;
}

void server_mtp_autotune::update(int32_t c, bool draft, int32_t n_tokens, double secs) {
    if (c <= 0 || c >= (int32_t) arms.size() || secs <= 0.0 || n_tokens <= 0) {
        return;
    }
    auto & a = arms[c][draft ? 1 : 0];
    a.n++;
    const double w = a.n <= n_warmup ? 1.0 / a.n : 0.1;
    a.tok += w * (n_tokens - a.tok);
    a.secs += w * (secs - a.secs);
    a.tps          = a.tok / a.secs;
    const auto & b = arms[c];
    if (b[0].n >= n_warmup && b[1].n >= n_warmup) {
        const int8_t now = b[1].tps >= b[0].tps ? 1 : 0;
        if (now != best[c]) {
            best[c] = now;
            LOG_INF("srv  MTP adaptive: %d generating slot(s): drafting %.1f tok/s, plain %.1f tok/s -> %s\n", c,
                    b[1].tps, b[0].tps, now ? "drafting" : "plain decoding");
        }
    }
}

common_json server_mtp_timings(const llama_mtp * mtp, const server_mtp_request & req) {
    llama_mtp_stats st{};
    llama_mtp_get_stats(mtp, &st);
    const bool    engine     = req.engine_verified;
    const int64_t n_drafted  = engine ? st.n_drafted : req.slot_drafted;
    const int64_t n_accepted = engine ? st.n_accepted : req.slot_accepted;
    const int64_t n_steps    = engine ? st.n_steps : req.slot_steps;
    common_json   per_pos    = common_json::array();
    if (engine) {
        for (int i = 0; i < LLAMA_MTP_MAX_DRAFT && st.drafted_per_pos[i] > 0; ++i) {
            per_pos.push_back((double) st.accepted_per_pos[i] / (double) st.drafted_per_pos[i]);
        }
    } else if (req.slot_accepted_per_pos != nullptr) {
        for (const uint64_t a : *req.slot_accepted_per_pos) {
            per_pos.push_back(n_steps > 0 ? (double) a / (double) n_steps : 0.0);
        }
    }
    return common_json{
        { "mode", req.mode },
        { "heads", mtp ? llama_mtp_n_heads(mtp) : 0 },
        { "head_policy", req.head_policy },
        { "verify", engine ? "engine" : "grammar" },
        { "drafted", n_drafted },
        { "accepted", n_accepted },
        { "steps", n_steps },
        { "acceptance_per_position", per_pos },
        { "mean_accepted_length", n_steps > 0 ? 1.0 + (double) n_accepted / (double) n_steps : 1.0 },
        { "draft_ms", st.t_draft_ms },
        { "verify_ms", st.t_verify_ms + st.t_sample_ms },
        { "catchup_ms", st.t_catchup_ms },
    };
}
