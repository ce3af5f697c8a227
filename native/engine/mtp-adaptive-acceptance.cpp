// pymtp: the adaptive controller's acceptance model (see mtp-adaptive-acceptance.h).

#include "mtp-adaptive-acceptance.h"

#include <algorithm>

namespace mtp {

// rate of position i from per-position counts: a position seldom reached leans on the one before it (then on PRIOR_A)
static double chained_rate(const decayed_rate * r, int32_t i) {
    double x = acceptance_model::PRIOR_A;
    for (int32_t j = 0; j <= i; ++j) {
        x = r[j].get(x, acceptance_model::PRIOR_W);
    }
    return x;
}

double acceptance_model::accept(int32_t i, float c) const {
    i        = std::clamp(i, 0, K - 1);
    double a = chained_rate(acc[mode], i);
    if (recent_share < 1.0) { // stale: drawn towards the long-run rate (while drafting, nothing to do)
        a = recent_share * a + (1.0 - recent_share) * chained_rate(acc_long[mode], i);
    }
    if (c < 0.0f) {
        return a;
    }
    const int32_t b = std::clamp((int32_t) (c * BINS), 0, BINS - 1);
    return cal[mode][i][b].get(a, BIN_W); // shrunk towards the position's rate while the bucket is young
}

double acceptance_model::tokens(int32_t k) const {
    double e = 1.0;
    double p = 1.0;
    for (int32_t i = 0; i < k; ++i) {
        p *= accept(i, -1.0f);
        e += p;
    }
    return e;
}

void acceptance_model::observe(int32_t k, int32_t n_acc, const std::vector<float> & conf) {
    stale        = 0;
    recent_share = 1.0;
    // P(draft i accepted | drafts before it accepted) is observed for i <= n_acc
    for (int32_t i = 0; i < std::min(k, n_acc + 1) && i < K; ++i) {
        const bool ok = i < n_acc;
        acc[mode][i].add(ok, KEEP);
        acc_long[mode][i].add(ok, KEEP_LONG);
        const float c = i < (int32_t) conf.size() ? conf[i] : -1.0f;
        if (c >= 0.0f) {
            cal[mode][i][std::clamp((int32_t) (c * BINS), 0, BINS - 1)].add(ok, KEEP);
        }
    }
}

} // namespace mtp
