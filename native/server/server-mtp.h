#pragma once

// pymtp: llama-server's MTP components that are not upstream's: --mtp-adaptive (draft only while it
// measures faster) and the "timings.mtp" object of a response. Compiled into llama-server's
// server-context library by native/CMakeLists.txt; tools/server/server-context.cpp calls them.

#include "json.h" // common_json (upstream common/)
#include "llama-mtp.h"

#include <array>
#include <string>
#include <vector>

// --mtp-adaptive. Drafting pays only when the tokens it adds outweigh what it costs, and that depends
// on the head's acceptance, the hardware and how many slots share the target batch. For each number of
// generating slots, keep the throughput of the update loop (tokens emitted per second, iterations
// without prompt processing only) with and without drafting; use the better one and re-measure the
// other now and then (every 16th iteration when they are close, up to every 256th when the other is
// far behind). Both arms give the same tokens (exactness does not depend on drafting), so this only
// ever trades speed.
struct server_mtp_autotune {
    struct arm {
        double  tps  = 0.0; // tokens / seconds over the measured iterations (EMA of both)
        double  tok  = 0.0;
        double  secs = 0.0;
        int32_t n    = 0;
    };
    static constexpr int32_t n_warmup = 8;

    std::vector<std::array<arm, 2>> arms; // [n_generating][0: plain, 1: drafting]
    std::vector<int8_t>             best; // last reported choice per level, -1 none
    uint64_t                        iter = 0;

    void init(int32_t n_slots);
    // both arms measured at this level: plain iterations may skip the MTP catch-up
    bool decided(int32_t n_generating) const;
    // whether this iteration drafts
    bool choose(int32_t n_generating);
    // an iteration with n_generating slots emitted n_tokens in secs
    void update(int32_t n_generating, bool draft, int32_t n_tokens, double secs);
};

// What a request's MTP statistics came from: the engine, or (grammar / reasoning budget) the slot's
// own speculative counters, since common_sampler_sample_and_accept_n verified its drafts.
struct server_mtp_request {
    std::string                   mode;            // resolved draft mode
    std::string                   head_policy;     // head policy of the request
    bool                          engine_verified; // false: the grammar-aware sampler verified
    int64_t                       slot_drafted;
    int64_t                       slot_accepted;
    int64_t                       slot_steps;
    const std::vector<uint64_t> * slot_accepted_per_pos;
};

// The response's "timings.mtp": mode, heads, drafted, accepted, steps, per-position acceptance, mean
// accepted length, draft / verify / catch-up ms.
common_json server_mtp_timings(const llama_mtp * mtp, const server_mtp_request & req);
