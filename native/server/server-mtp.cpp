// pymtp: llama-server's MTP components (see server-mtp.h).

#include "server-mtp.h"

#include <algorithm>

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
    common_json adaptive = nullptr;
    if (mtp != nullptr) {
        llama_mtp_adaptive_stats as{};
        llama_mtp_get_adaptive_stats(mtp, &as);
        if (as.k_max > 0) {
            common_json steps = common_json::array();
            int64_t     total = 0;
            for (int k = 0; k <= as.k_max; ++k) {
                steps.push_back(as.steps_per_k[k]);
                total += as.steps_per_k[k];
            }
            common_json accept = common_json::array();
            for (int i = 0; i < as.k_max; ++i) {
                accept.push_back(as.accept[i]);
            }
            adaptive = common_json{
                { "max_draft", as.k_max },
                { "steps_per_draft_length", steps },
                { "plain_share", total > 0 ? (double) as.steps_per_k[0] / (double) total : 0.0 },
                { "probes", as.n_probes },
                { "cut", as.n_cut },
                { "busy_slots", as.load },
                { "est_plain_ms", as.t_target_ms[0] },
                { "est_draft_ms", as.t_draft_ms },
                { "est_switch_ms", as.t_switch_ms },
                { "est_accept", accept },
                { "best_fixed_draft", as.k_best },
                { "est_speedup", as.speedup },
                // one slot alone in its decodes: whole steps timed in windows (tokens per ms), and the
                // steps kept plain because windows that drafted ran slower
                { "realized_plain", as.realized_plain },
                { "realized_draft", as.realized_draft },
                { "vetoed", as.n_vetoed },
                // steps this slot decoded with its MTP side asleep (once every slot sleeps: as with MTP off)
                { "dormant_steps", as.n_dormant },
                // drafting blocks ended early as they lost (several busy slots: blocks are not timed)
                { "blocks_ended", as.n_blocks_ended },
            };
        }
    }
    return common_json{
        { "mode", req.mode },
        { "heads", mtp ? llama_mtp_n_heads(mtp) : 0 },
        { "parallel", mtp ? llama_mtp_parallel(mtp) : 0 },
        { "head_policy", req.head_policy },
        { "verify", engine ? "engine" : "grammar" },
        { "verify_sampling", !req.verify_on_backend ? "cpu" :
                             req.verify_argmax      ? "backend argmax" :
                                                      "backend" },
        { "drafted", n_drafted },
        { "accepted", n_accepted },
        { "steps", n_steps },
        { "acceptance_per_position", per_pos },
        { "mean_accepted_length", n_steps > 0 ? 1.0 + (double) n_accepted / (double) n_steps : 1.0 },
        { "draft_ms", st.t_draft_ms },
        { "verify_ms", st.t_verify_ms + st.t_sample_ms },
        { "catchup_ms", st.t_catchup_ms },
        { "adaptive", adaptive },
    };
}

bool server_mtp_chain_is_argmax(const common_params_sampling & sp) {
    const auto has = [&](common_sampler_type t) {
        return std::find(sp.samplers.begin(), sp.samplers.end(), t) != sp.samplers.end();
    };
    const bool moves_logits = sp.penalty_repeat != 1.0f || sp.penalty_freq != 0.0f || sp.penalty_present != 0.0f ||
                              (sp.dry_multiplier != 0.0f && has(COMMON_SAMPLER_TYPE_DRY)) || !sp.logit_bias.empty() ||
                              sp.ignore_eos || has(COMMON_SAMPLER_TYPE_INFILL);
    const bool drops_top    = (sp.xtc_probability > 0.0f && has(COMMON_SAMPLER_TYPE_XTC)) ||
                              (sp.typ_p < 1.0f && has(COMMON_SAMPLER_TYPE_TYPICAL_P)) ||
                              has(COMMON_SAMPLER_TYPE_ADAPTIVE_P);
    return sp.temp <= 0.0f && sp.dynatemp_range <= 0.0f && sp.mirostat == 0 && has(COMMON_SAMPLER_TYPE_TEMPERATURE) &&
           !moves_logits && !drops_top;
}

llama_sampler * server_mtp_argmax_chain() {
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    llama_sampler_chain_add(chain, llama_sampler_init_greedy());
    return chain;
}
