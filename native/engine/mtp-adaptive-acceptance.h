#pragma once

// pymtp: the adaptive controller's acceptance model (mtp-adaptive.h has the whole controller). Per draft
// mode and position, P(draft i accepted | drafts before it accepted), from exponentially decayed counts of
// the drafts verified (a position seldom reached leans on the one before it), and the same per bucket of
// the head's own confidence: the top probability of q, or the softmax top of the MTP logits (greedy drafts:
// computed next to the argmax, on the backend when it runs there). While nothing is drafted the recent
// rates drift back towards the long-run ones (text changes). A step drafting k is expected to emit
// E(k) = 1 + sum_{i<k} prod_{j<=i} a_j tokens.

#include "llama-mtp.h"
#include "mtp-adaptive-measures.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace mtp {

struct acceptance_model {
    static constexpr int32_t K          = LLAMA_MTP_MAX_DRAFT;
    static constexpr int32_t BINS       = 8;     // confidence buckets of [0, 1]
    static constexpr int32_t MODES      = 3;     // greedy, chain, stochastic
    static constexpr double  KEEP       = 0.99;  // acceptance counts decay: ~100 recent drafts per position
    static constexpr double  KEEP_LONG  = 0.999; // the long-run acceptance: ~1000 recent drafts per position
    // Steps without a draft verified after which the recent acceptance counts half, the long-run one the
    // rest (see accept). Text runs easier and harder by the answer and within one: the recent rate that
    // made plain decoding lead says less of the text now the longer nothing measures it.
    static constexpr double  STALE_HALF = 128.0;
    static constexpr double  PRIOR_A    = 0.6; // acceptance before any is measured (optimistic: it probes)
    static constexpr double  PRIOR_W    = 2.0; //   with the weight of this many drafts
    static constexpr double  BIN_W      = 4.0; // a confidence bucket leans on its position's rate with this weight

    int32_t      mode = 0; // draft mode index (0 greedy, 1 chain, 2 stochastic)
    decayed_rate acc[MODES][K];
    decayed_rate acc_long[MODES][K]; // the same over a longer run (KEEP_LONG)
    decayed_rate cal[MODES][K][BINS];
    int64_t      stale        = 0;   // steps since a draft was last verified (asleep ones included)
    double       recent_share = 1.0; // the recent acceptance's weight: 2^(-(stale - 1) / STALE_HALF)

    // estimated P(draft i accepted | drafts before it accepted), at confidence c (< 0: unknown): the recent
    // rate, drawn towards the long-run one as it goes stale
    double accept(int32_t i, float c) const;
    // expected tokens of a step drafting k (every draft kept)
    double tokens(int32_t k) const;
    // a step passed (planned or asleep): the acceptance measured so far is one step older (a step right
    // after a verified one sees it whole)
    void   aged() {
        stale++;
        recent_share = std::exp2(-(double) (stale - 1) / STALE_HALF);
    }
    // a step's k drafts (confidence conf[i], < 0 or missing: unknown) were verified and n_acc accepted
    void observe(int32_t k, int32_t n_acc, const std::vector<float> & conf);
    // nothing drafted yet in this mode: acceptance is the prior's
    bool unmeasured() const { return acc[mode][0].n <= 0.0; }
};

} // namespace mtp
