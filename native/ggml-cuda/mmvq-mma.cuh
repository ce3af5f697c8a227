// pymtp: the quantized mat-vec of a speculative verify batch (2-8 columns) on int8 tensor cores.
// Called from upstream's ggml_cuda_mul_mat_vec_q (patch "ggml-cuda: verify-sized K-quant products on
// tensor cores"); compiled into ggml-cuda from native/ggml-cuda/ (native/CMakeLists.txt).
#pragma once

#include "ggml-cuda/common.cuh"

// Runs dst[:, j] = x * y[:, j] for j < ncols_dst when this kernel supports the case and returns true;
// returns false (nothing launched) otherwise, and the caller runs upstream's MMVQ.
//   x: nrows_x rows of ncols_x values of `type` (stride_row_x blocks apart);
//   y: ncols_dst columns of ncols_x values as q8_1 blocks (stride_col_y blocks apart);
//   dst: ncols_dst columns of nrows_x floats (stride_col_dst floats apart).
// Supported: Q4_K and Q5_K (16-byte aligned rows) with 2 <= ncols_dst <= PYMTP_MMVQ_MMA_MAX_COLS, and Q6_K from 8
// columns (GGML_CUDA_MMVQ_MMA_Q6_K: 0 never, 1 from 2); on by default on Hopper (measured on an H200:
// docs/journal/2026-11-25-verify-tensor-cores.md). GGML_CUDA_MMVQ_MMA=1 turns it on for any NVIDIA GPU from
// Ampere on, GGML_CUDA_MMVQ_MMA=0 off (upstream's MMVQ: the A/B knob).
#define PYMTP_MMVQ_MMA_MAX_COLS 16 // two 8-column n-tiles: a verify batch of up to 4 slots x 4 tokens

// Whether pymtp_mmvq_mma takes this product on this device (what it checks before launching; the
// caller uses it to choose it over MMQ above MMVQ's 8 columns)
bool pymtp_mmvq_mma_takes(ggml_type type, const void * vx, int64_t ncols_x, int64_t stride_row_x, int64_t ncols_dst,
                          int cc);

bool pymtp_mmvq_mma(ggml_type type, const void * vx, const void * vy, float * dst, int64_t ncols_x, int64_t nrows_x,
                    int64_t ncols_dst, int64_t stride_row_x, int64_t stride_col_y, int64_t stride_col_dst, int cc,
                    cudaStream_t stream);
