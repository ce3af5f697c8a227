// pymtp: a run of same-shaped copies in one kernel. A DeltaNet layer with rollback snapshots copies its
// conv state into one snapshot slot per token of the batch: a 4-token verify makes 4 small copies per
// layer, each its own launch-bound kernel (~3 us; 192 on the 27B shape, 120 on the 35B-A3B). Called from
// upstream's ggml_cuda_try_fuse (patch "ggml-cuda: a run of same-shaped copies in one kernel"); compiled
// into ggml-cuda from native/ggml-cuda/ (native/CMakeLists.txt).
#pragma once

#include "ggml-cuda/common.cuh"

#define PYMTP_CPY_BATCH_MAX 16 // copies per launch (a verify of up to 15 drafts)

// When cgraph->nodes[i] is a GGML_OP_CPY that starts a run of 2 or more copies that differ only in where
// they read and write (same types, shapes and strides; only view and no-op nodes between them; no copy
// reads what another writes), copies them all in one kernel and returns how many nodes the caller skips
// (the last copy's index - i). Returns 0 (nothing launched) otherwise, and the caller runs the copy as
// before. GGML_CUDA_NO_CPY_BATCH=1 turns it off (upstream's one kernel per copy: the A/B knob).
int pymtp_cpy_batch(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i);
