// pymtp: the quantized mat-vec of a speculative verify batch (2-16 columns) on int8 tensor cores: Q4_K and
// Q5_K, and Q6_K from 8 columns (its kernel is the last one below).
//
// Why: upstream's MMVQ computes every (row, column) pair with dp4a, so a 4-column product executes
// about twice the instructions per weight byte of a 1-column one and stops being bound by memory: on
// the 27B shape a 4-token decode cost 1.48 plain steps on an H200, 1.21 with this kernel
// (docs/journal/2026-11-25-verify-tensor-cores.md). Here one mma.sync.m16n8k32 takes 16 rows
// x 32 values x 8 columns at once (two of them for 9-16 columns).
//
// Layout: a CUDA block of MMA_WARPS warps owns 16 rows; the warps take its super-blocks (256 values
// of each row) round-robin, each accumulating its own partial sums, which shared memory adds up at
// the end. A warp issues every load of a super-block first (the rows' 16-byte headers d/dmin/scales
// as one int4 each, the quants as 8-byte loads, y's quants and ds), then runs one mma per 32-value
// sub-block (= one q8_1 block of y) and n-tile. Per thread (g = lane / 4, t = lane % 4, the mma
// fragment coordinates):
//   A (weights, rows g and g + 8): bytes 8t..8t+7 of the sub-block's 32-byte chunk; low nibbles are
//     sub-block 2c, high nibbles sub-block 2c+1 (Q5_K: plus the fifth bit from qh);
//   B (y, column 8n + g): bytes 8t..8t+7 of the sub-block's q8_1 block, the same values;
//   C (int32, rows g and g + 8, columns 8n + 2t and 8n + 2t + 1), scaled per sub-block as MMVQ does:
//     d * sc * d8 * C - dmin * m * sum8 (sum8: the q8_1 block's float sum, patch 0016's form).
// Rounding differs from MMVQ's (the int32 sums are the same; the float sums are grouped differently),
// as MMVQ's own 1-column and 5-8-column kernels differ from each other. Device check against a host
// reference: bench/device/mmvq_mma_check.cu.

#include "mmvq-mma.cuh"

#include "ggml-cuda/vecdotq.cuh" // get_int_b4 (4-byte aligned quants), get_int_b2 (Q6_K: 2-byte aligned)

#include <cstdlib>
#include <type_traits>

static constexpr int MMA_WARPS = 4;  // warps per CUDA block (16 rows); they share its super-blocks
static constexpr int MMA_ROWS  = 16; // rows per CUDA block: the mma's M

// c += a * b: 16x32 (s8, row-major) times 32x8 (s8, column-major), int32 accumulators
static __device__ __forceinline__ void mma_s8_m16n8k32(int (&c)[4], const int (&a)[4], const int (&b)[2]) {
#ifdef AMPERE_MMA_AVAILABLE
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    GGML_UNUSED_VARS(c, a, b);
    NO_DEVICE_CODE;
#endif
}

// c += a * b: 16x16 (s8, row-major) times 16x8 (s8, column-major), int32 accumulators (Q6_K: a scale per
// 16 values)
static __device__ __forceinline__ void mma_s8_m16n8k16(int (&c)[4], const int (&a)[2], const int b) {
#ifdef AMPERE_MMA_AVAILABLE
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b));
#else
    GGML_UNUSED_VARS(c, a, b);
    NO_DEVICE_CODE;
#endif
}

// The y columns a thread reads in n-tile n: B's column 8n + g, C's columns 8n + 2t and 8n + 2t + 1 (columns
// past the end read column 0, valid memory; their results are not written)
template <int NT>
static __device__ __forceinline__ void
mma_columns(const block_q8_1 * y, const int ncols_dst, const int64_t stride_col_y, const int g, const int t,
            const block_q8_1 * (&yb)[NT], const block_q8_1 * (&yc0)[NT], const block_q8_1 * (&yc1)[NT]) {
#pragma unroll
    for (int n = 0; n < NT; ++n) {
        const int cb = 8 * n + g, c0 = 8 * n + 2 * t, c1 = c0 + 1;
        yb[n]  = y + (cb < ncols_dst ? cb : 0) * stride_col_y;
        yc0[n] = y + (c0 < ncols_dst ? c0 : 0) * stride_col_y;
        yc1[n] = y + (c1 < ncols_dst ? c1 : 0) * stride_col_y;
    }
}

// The warps' partial sums added up in shared memory; warp 0 writes rows g, g + 8 x columns 8n + 2t, 8n + 2t + 1
template <int NT>
static __device__ __forceinline__ void mma_write(const float (&acc)[NT][4], float * dst, const int nrows,
                                                 const int ncols_dst, const int64_t stride_col_dst, const int row0,
                                                 const int row1, const int t) {
    const int        lane = threadIdx.x;
    const int        warp = threadIdx.y;
    __shared__ float partial[MMA_WARPS][NT][4][WARP_SIZE];
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            partial[warp][n][i][lane] = acc[n][i];
        }
    }
    __syncthreads();
    if (warp != 0) {
        return;
    }
#pragma unroll
    for (int n = 0; n < NT; ++n) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < MMA_WARPS; ++w) {
                sum += partial[w][n][i][lane];
            }
            const int row = i < 2 ? row0 : row1;
            const int col = 8 * n + 2 * t + i % 2;
            if (row < nrows && col < ncols_dst) {
                dst[col * stride_col_dst + row] = sum;
            }
        }
    }
}

// Sub-block s's 6-bit scale (sc) or min (m) of a Q4_K/Q5_K super-block, from its 16-byte header
// h = {dm, scales[0..3], scales[4..7], scales[8..11]} (upstream's get_scale_min_k4, unpacked four at a time)
static __device__ __forceinline__ int kquant_sc(const int4 h, const int s) {
    const uint32_t lo4 = (uint32_t) h.y & 0x3f3f3f3f;
    const uint32_t hi4 = ((uint32_t) h.w & 0x0f0f0f0f) | (((uint32_t) h.y >> 2) & 0x30303030);
    return ((s < 4 ? lo4 : hi4) >> (8 * (s % 4))) & 0xff;
}

static __device__ __forceinline__ int kquant_m(const int4 h, const int s) {
    const uint32_t lo4 = (uint32_t) h.z & 0x3f3f3f3f;
    const uint32_t hi4 = (((uint32_t) h.w >> 4) & 0x0f0f0f0f) | (((uint32_t) h.z >> 2) & 0x30303030);
    return ((s < 4 ? lo4 : hi4) >> (8 * (s % 4))) & 0xff;
}

// The mma's k order within a 32-value sub-block is a permutation shared by A and B: thread t holds
// values 8t..8t+7 (k = 4t..4t+3 -> values 8t..8t+3, k = 16+4t..16+4t+3 -> values 8t+4..8t+7), so a
// thread reads 8 contiguous bytes of a row's quants and of a q8_1 block. A dot product does not care.
template <ggml_type type, int NT> // NT: n-tiles of 8 columns (1: up to 8 columns, 2: up to 16)
__launch_bounds__(MMA_WARPS * WARP_SIZE, 1) static __global__
    void mmvq_mma_kernel(const void * __restrict__ vx, const block_q8_1 * __restrict__ y, float * __restrict__ dst,
                         const int nrows, const int ncols_dst, const int n_superblocks, const int64_t stride_row_x,
                         const int64_t stride_col_y, const int64_t stride_col_dst) {
    using block_t = std::conditional_t<type == GGML_TYPE_Q4_K, block_q4_K, block_q5_K>;

    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    const int g    = lane / 4;
    const int t    = lane % 4;

    const int row0 = blockIdx.x * MMA_ROWS + g;
    const int row1 = row0 + 8;

    // rows past the end read row 0 (valid memory); their results are not written
    const block_t *    x0 = (const block_t *) vx + (row0 < nrows ? row0 : 0) * stride_row_x;
    const block_t *    x1 = (const block_t *) vx + (row1 < nrows ? row1 : 0) * stride_row_x;
    const block_q8_1 * yb[NT];
    const block_q8_1 * yc0[NT];
    const block_q8_1 * yc1[NT];
    mma_columns<NT>(y, ncols_dst, stride_col_y, g, t, yb, yc0, yc1);

    float acc[NT][4] = {};

    for (int sb = warp; sb < n_superblocks; sb += MMA_WARPS) {
        // every load of the super-block first, so that they are in flight together
        const int4 h0 = *(const int4 *) (x0 + sb); // dm, scales
        const int4 h1 = *(const int4 *) (x1 + sb);
        int2       q0[4], q1[4];
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            q0[c] = *(const int2 *) (x0[sb].qs + 32 * c + 8 * t);
            q1[c] = *(const int2 *) (x1[sb].qs + 32 * c + 8 * t);
        }
        int2 qh0 = make_int2(0, 0), qh1 = make_int2(0, 0);
        if constexpr (type == GGML_TYPE_Q5_K) {
            qh0 = *(const int2 *) (((const block_q5_K *) x0)[sb].qh + 8 * t);
            qh1 = *(const int2 *) (((const block_q5_K *) x1)[sb].qh + 8 * t);
        }
        int   b[NT][8][2];
        half2 ds0[NT][8], ds1[NT][8];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int s = 0; s < 8; ++s) {
                b[n][s][0] = get_int_b4(yb[n][8 * sb + s].qs, 2 * t);
                b[n][s][1] = get_int_b4(yb[n][8 * sb + s].qs, 2 * t + 1);
                ds0[n][s]  = yc0[n][8 * sb + s].ds;
                ds1[n][s]  = yc1[n][8 * sb + s].ds;
            }
        }

        const float2 dm0 = __half22float2(*(const half2 *) &h0.x);
        const float2 dm1 = __half22float2(*(const half2 *) &h1.x);
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const int c     = s / 2;
            const int shift = 4 * (s % 2); // low nibbles: sub-block 2c, high nibbles: 2c+1
            int       a[4]  = {
                      (q0[c].x >> shift) & 0x0F0F0F0F, // row g,   values 8t..8t+3
                      (q1[c].x >> shift) & 0x0F0F0F0F, // row g+8, values 8t..8t+3
                      (q0[c].y >> shift) & 0x0F0F0F0F, // row g,   values 8t+4..8t+7
                      (q1[c].y >> shift) & 0x0F0F0F0F, // row g+8, values 8t+4..8t+7
            };
            if constexpr (type == GGML_TYPE_Q5_K) { // qh byte l: bit s is the fifth bit of value l
                a[0] |= ((qh0.x >> s) << 4) & 0x10101010;
                a[1] |= ((qh1.x >> s) << 4) & 0x10101010;
                a[2] |= ((qh0.y >> s) << 4) & 0x10101010;
                a[3] |= ((qh1.y >> s) << 4) & 0x10101010;
            }
            const float dsc0 = dm0.x * (float) kquant_sc(h0, s);
            const float dmm0 = dm0.y * (float) kquant_m(h0, s);
            const float dsc1 = dm1.x * (float) kquant_sc(h1, s);
            const float dmm1 = dm1.y * (float) kquant_m(h1, s);
#pragma unroll
            for (int n = 0; n < NT; ++n) {
                int C[4] = { 0, 0, 0, 0 };
                mma_s8_m16n8k32(C, a, b[n][s]);

                const float2 y0 = __half22float2(ds0[n][s]);
                const float2 y1 = __half22float2(ds1[n][s]);
                acc[n][0] += dsc0 * y0.x * (float) C[0] - dmm0 * y0.y;
                acc[n][1] += dsc0 * y1.x * (float) C[1] - dmm0 * y1.y;
                acc[n][2] += dsc1 * y0.x * (float) C[2] - dmm1 * y0.y;
                acc[n][3] += dsc1 * y1.x * (float) C[3] - dmm1 * y1.y;
            }
        }
    }

    mma_write<NT>(acc, dst, nrows, ncols_dst, stride_col_dst, row0, row1, t);
}

// Q6_K: 16 sub-blocks of 16 values with an int8 scale each, so one m16n8k16 mma per 16 values. Value
// v = 128h + 32j + l of a super-block (h < 2, j < 4, l < 32) is the low (j < 2) or high nibble of
// ql[64h + 32(j%2) + l] with bits 2j, 2j+1 of qh[32h + l] above it, minus 32, scaled by
// scales[8h + 2j + l/16] (upstream's dequantize_row_q6_K); it lies in q8_1 block 4h + j of y. Thread
// t takes l = 16e + 4t .. 16e + 4t + 3 of each half e, the mma's k = 4t..4t+3 for A and B alike.
template <int NT>
__launch_bounds__(MMA_WARPS * WARP_SIZE, 1) static __global__
    void mmvq_mma_q6_K_kernel(const void * __restrict__ vx, const block_q8_1 * __restrict__ y, float * __restrict__ dst,
                              const int nrows, const int ncols_dst, const int n_superblocks, const int64_t stride_row_x,
                              const int64_t stride_col_y, const int64_t stride_col_dst) {
    const int lane = threadIdx.x;
    const int warp = threadIdx.y;
    const int g    = lane / 4;
    const int t    = lane % 4;

    const int row0 = blockIdx.x * MMA_ROWS + g;
    const int row1 = row0 + 8;

    const block_q6_K * x0 = (const block_q6_K *) vx + (row0 < nrows ? row0 : 0) * stride_row_x;
    const block_q6_K * x1 = (const block_q6_K *) vx + (row1 < nrows ? row1 : 0) * stride_row_x;
    const block_q8_1 * yb[NT];
    const block_q8_1 * yc0[NT];
    const block_q8_1 * yc1[NT];
    mma_columns<NT>(y, ncols_dst, stride_col_y, g, t, yb, yc0, yc1);

    float acc[NT][4] = {};

    for (int sb = warp; sb < n_superblocks; sb += MMA_WARPS) {
        const block_q6_K * b0 = x0 + sb;
        const block_q6_K * b1 = x1 + sb;
        int                ql0[8], ql1[8], qh0[4], qh1[4], sc0[4], sc1[4];
#pragma unroll
        for (int i = 0; i < 8; ++i) { // i = 4h + 2(j%2) + e: bytes 64h + 32(j%2) + 16e + 4t
            ql0[i] = get_int_b2(b0->ql, 4 * i + t);
            ql1[i] = get_int_b2(b1->ql, 4 * i + t);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) { // i = 2h + e: bytes 32h + 16e + 4t
            qh0[i] = get_int_b2(b0->qh, 4 * i + t);
            qh1[i] = get_int_b2(b1->qh, 4 * i + t);
            sc0[i] = get_int_b2(b0->scales, i);
            sc1[i] = get_int_b2(b1->scales, i);
        }
        const float d0 = __half2float(b0->d);
        const float d1 = __half2float(b1->d);

        int   b[NT][8][2];
        half2 ds0[NT][8], ds1[NT][8];
#pragma unroll
        for (int n = 0; n < NT; ++n) {
#pragma unroll
            for (int blk = 0; blk < 8; ++blk) {
                b[n][blk][0] = get_int_b4(yb[n][8 * sb + blk].qs, t);
                b[n][blk][1] = get_int_b4(yb[n][8 * sb + blk].qs, 4 + t);
                ds0[n][blk]  = yc0[n][8 * sb + blk].ds;
                ds1[n][blk]  = yc1[n][8 * sb + blk].ds;
            }
        }

#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int iql   = 4 * h + 2 * (j % 2) + e;
                    const int iqh   = 2 * h + e;
                    const int shift = 4 * (j / 2);
                    const int q0    = ((ql0[iql] >> shift) & 0x0F0F0F0F) | (((qh0[iqh] >> (2 * j)) & 0x03030303) << 4);
                    const int q1    = ((ql1[iql] >> shift) & 0x0F0F0F0F) | (((qh1[iqh] >> (2 * j)) & 0x03030303) << 4);
                    const int a[2]  = { (int) __vsub4(q0, 0x20202020), (int) __vsub4(q1, 0x20202020) };

                    const int   s    = 8 * h + 2 * j + e; // the 16 values' scale
                    const float dsc0 = d0 * (float) (int8_t) (sc0[s / 4] >> (8 * (s % 4)));
                    const float dsc1 = d1 * (float) (int8_t) (sc1[s / 4] >> (8 * (s % 4)));
                    const int   blk  = 4 * h + j;
#pragma unroll
                    for (int n = 0; n < NT; ++n) {
                        int C[4] = { 0, 0, 0, 0 };
                        mma_s8_m16n8k16(C, a, b[n][blk][e]);
                        const float y0 = __low2float(ds0[n][blk]);
                        const float y1 = __low2float(ds1[n][blk]);
                        acc[n][0] += dsc0 * y0 * (float) C[0];
                        acc[n][1] += dsc0 * y1 * (float) C[1];
                        acc[n][2] += dsc1 * y0 * (float) C[2];
                        acc[n][3] += dsc1 * y1 * (float) C[3];
                    }
                }
            }
        }
    }

    mma_write<NT>(acc, dst, nrows, ncols_dst, stride_col_dst, row0, row1, t);
}

// GGML_CUDA_MMVQ_MMA: unset = on where measured (Hopper: H100/H200), 1 = on for every NVIDIA GPU from
// Ampere on, 0 = off (upstream's MMVQ for every product)
static bool mmvq_mma_enabled(const int cc) {
    static const int env = [] {
        const char * s = getenv("GGML_CUDA_MMVQ_MMA");
        return s == nullptr ? -1 : atoi(s) != 0;
    }();
    if (!ampere_mma_available(cc) || env == 0) {
        return false;
    }
    return env == 1 || (cc >= GGML_CUDA_CC_HOPPER && cc < GGML_CUDA_CC_HOPPER + 100);
}

// The fewest columns a Q6_K product takes the kernel from. Measured on the 27B shape (H200;
// docs/journal/2026-11-25-verify-tensor-cores.md, "Q6_K"): the 4-token decode cost the same either way, the 2-token one
// more (V 1.14 vs 1.08 with MMVQ), the 8-token one less (1.49 vs 1.56): MMVQ's Q6_K kernel already scales well to a few
// columns. So from 8 on; GGML_CUDA_MMVQ_MMA_Q6_K=0: never, =1: from 2 (the device check uses it).
static int mmvq_mma_q6_K_min_cols() {
    static const int n = [] {
        const char * s = getenv("GGML_CUDA_MMVQ_MMA_Q6_K");
        return s == nullptr ? 8 : atoi(s) != 0 ? 2 : PYMTP_MMVQ_MMA_MAX_COLS + 1;
    }();
    return n;
}

bool pymtp_mmvq_mma_takes(ggml_type type, const void * vx, int64_t ncols_x, int64_t stride_row_x, int64_t ncols_dst,
                          int cc) {
    const bool q6_K = type == GGML_TYPE_Q6_K && ncols_dst >= mmvq_mma_q6_K_min_cols();
    if ((type != GGML_TYPE_Q4_K && type != GGML_TYPE_Q5_K && !q6_K) || ncols_dst < 2 ||
        ncols_dst > PYMTP_MMVQ_MMA_MAX_COLS || ncols_x % QK_K != 0 || !mmvq_mma_enabled(cc)) {
        return false;
    }
    if (q6_K) {
        return true; // read 2 bytes at a time
    }
    // each Q4_K/Q5_K super-block's 16-byte header is read as one int4
    const size_t block_size = type == GGML_TYPE_Q4_K ? sizeof(block_q4_K) : sizeof(block_q5_K);
    return (uintptr_t) vx % 16 == 0 && (stride_row_x * block_size) % 16 == 0;
}

bool pymtp_mmvq_mma(ggml_type type, const void * vx, const void * vy, float * dst, int64_t ncols_x, int64_t nrows_x,
                    int64_t ncols_dst, int64_t stride_row_x, int64_t stride_col_y, int64_t stride_col_dst, int cc,
                    cudaStream_t stream) {
    if (!pymtp_mmvq_mma_takes(type, vx, ncols_x, stride_row_x, ncols_dst, cc)) {
        return false;
    }
    const dim3   blocks((unsigned) ((nrows_x + MMA_ROWS - 1) / MMA_ROWS), 1, 1);
    const dim3   threads(WARP_SIZE, MMA_WARPS, 1);
    const int    n_superblocks = (int) (ncols_x / QK_K);
    const auto * y             = (const block_q8_1 *) vy;
#define PYMTP_MMA_ARGS                                                                                                 \
    vx, y, dst, (int) nrows_x, (int) ncols_dst, n_superblocks, stride_row_x, stride_col_y, stride_col_dst
    const bool two_tiles = ncols_dst > 8;
    if (type == GGML_TYPE_Q4_K && two_tiles) {
        mmvq_mma_kernel<GGML_TYPE_Q4_K, 2><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    } else if (type == GGML_TYPE_Q4_K) {
        mmvq_mma_kernel<GGML_TYPE_Q4_K, 1><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    } else if (type == GGML_TYPE_Q5_K && two_tiles) {
        mmvq_mma_kernel<GGML_TYPE_Q5_K, 2><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    } else if (type == GGML_TYPE_Q5_K) {
        mmvq_mma_kernel<GGML_TYPE_Q5_K, 1><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    } else if (two_tiles) {
        mmvq_mma_q6_K_kernel<2><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    } else {
        mmvq_mma_q6_K_kernel<1><<<blocks, threads, 0, stream>>>(PYMTP_MMA_ARGS);
    }
#undef PYMTP_MMA_ARGS
    CUDA_CHECK(cudaGetLastError());
    return true;
}
