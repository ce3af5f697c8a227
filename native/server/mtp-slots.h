#pragma once

// pymtp: the MTP engines of llama-server's slots. One llama_mtp per sequence (seq_id = slot id) on
// the one shared MTP context, so upstream's slot machinery (batching, prompt cache, checkpoints,
// memory trims of both contexts) stays as it is. llama-server's speculative type for --mtp
// (common/speculative.cpp) forwards to this; compiled into llama-common by native/CMakeLists.txt.

#include "llama-mtp.h"

#include <vector>

struct mtp_slots {
    // throws std::runtime_error when an engine cannot start (MTP context too small, head width mismatch)
    mtp_slots(llama_context * ctx_tgt, llama_context * ctx_mtp, int32_t n_seq, int32_t n_max);
    ~mtp_slots();
    mtp_slots(const mtp_slots &)             = delete;
    mtp_slots & operator=(const mtp_slots &) = delete;

    // the engine of a sequence, nullptr outside 0..n_seq-1
    llama_mtp * get(llama_seq_id seq) const;

    // The target just decoded toks[i] of sequence seq[i] at position pos[i], as row i of its batch: each
    // engine writes its MTP entries. Runs of consecutive positions of one sequence; every sequence's run
    // in one MTP decode (a sequence that appears twice in one batch is written in a second decode).
    bool observe(const llama_token * toks, const llama_seq_id * seq, const llama_pos * pos, int32_t n);

    // Draft up to min(k, n_max) tokens (k < 0: n_max) for seq after id_last at pos0, with the request's
    // chain (nullptr: greedy). Leaves the drafts in result; false on an engine error.
    bool draft(llama_seq_id seq, llama_sampler * chain, llama_token id_last, llama_pos pos0, int32_t k,
               std::vector<llama_token> & result);

    // Models with several MTP layers: the contexts of heads 1.. and the default head policy by name.
    bool set_heads(llama_context * ctx_mtp, const std::vector<llama_context *> & ctx_heads, const char * policy);

    int32_t n_max = 0; // the most tokens a step drafts (the engines' and the recurrent state's cap)

  private:
    std::vector<llama_mtp *>   mtps; // per seq_id
    std::vector<llama_token>   out;
    std::vector<llama_mtp_run> runs;
    std::vector<bool>          seen;
    bool                       flush();
};
