#pragma once

// pymtp: what the adaptive controller's planner and supervisor ask of its two models (mtp-adaptive.h): a
// step of length k's expected tokens (the acceptance model), its modelled time (the cost model) and their
// ratio, the rate a choice is judged by. Read-only: the models learn only from what the engine reports.

#include "mtp-adaptive-acceptance.h"
#include "mtp-adaptive-cost.h"

#include <cstdint>

namespace mtp {

struct step_model {
    const cost_model &       cost;
    const acceptance_model & acceptance;

    // expected tokens of a step drafting k (every draft kept)
    double tokens(int32_t k) const { return acceptance.tokens(k); }
    // the modelled time of a step drafting k (ms; k = 0: a plain step)
    double time(int32_t k) const { return cost.step_ms(k, acceptance.accept(0, -1.0f)); }
    // expected tokens per ms of drafting k (k = 0: plain decoding); extra_ms: a one-off cost of this step
    double ratio(int32_t k, double extra_ms = 0.0) const {
        if (cost.target_cost(1) <= 0.0) {
            return 0.0;
        }
        return tokens(k) / (time(k) + extra_ms);
    }
};

} // namespace mtp
