// pymtp: the quantized mat-vec of a speculative verify batch (2-8 columns) on int8 tensor cores.
//
// Why: upstream's MMVQ computes every (row, column) pair with dp4a, so a 4-column product executes
// about twice the instructions per weight byte of a 1-column one and stops being bound by memory: on
// the 27B shape a 4-token decode cost 1.48 plain steps on an H200 (docs/benchmarks.md, issue 19).
// Here one mma.sync.m16n8k32 takes 16 rows x 32 values x 8 columns at once; the instructions per
// weight byte drop below MMVQ's for one column, whatever the column count up to 8.
//
// Layout: a CUDA block of MMA_WARPS warps owns 16 rows; a "unit" is one 32-byte chunk of a K-quant
// super-block (two 32-value sub-blocks, each one q8_1 block of y), and the warps share a row group's
// units round-robin, each accumulating its own partial sums, which shared memory adds up at the end.
// Per unit and thread (g = lane / 4, t = lane % 4, the mma fragment coordinates):
//   A (weights, rows g and g + 8): bytes 4t..4t+3 and 16+4t..16+4t+3 of the chunk; low nibbles are
//     sub-block 2c, high nibbles sub-block 2c+1 (Q5_K: plus the high bit from qh);
//   B (y, column g): the same bytes of the sub-block's q8_1 block;
//   C (int32, rows g and g + 8, columns 2t and 2t+1), scaled per sub-block as MMVQ does:
//     d * sc * d8 * C - dmin * m * sum8 (sum8: the q8_1 block's float sum, patch 0016's form).
// Rounding differs from MMVQ's (the int32 sums are the same; the float sums are grouped differently),
// as MMVQ's own 1-column and 5-8-column kernels differ from each other.

#include "mmvq-mma.cuh"

#include <cstdlib>
#include <type_traits>

static constexpr int MMA_WARPS = 8;   // warps per CUDA block (16 rows)
static constexpr int MMA_ROWS  = 16;  // rows per CUDA block: the mma's M

static __device__ __forceinline__ int load_int(const void * p, const int i32) {
    return ((const int *) p)[i32];  // K-quant and q8_1 blocks keep their quants 4-byte aligned
}

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

// The 6-bit scales and mins of sub-blocks 2c and 2c+1 of a Q4_K/Q5_K super-block, times d and dmin
// (upstream's get_scale_min_k4, two sub-blocks at a time as vec_dot_q4_K_q8_1 decodes them).
static __device__ __forceinline__ void kquant_scales(const uint8_t * scales_u8, const half2 dm, const int c,
                                                     float (&dsc)[2], float (&dmm)[2]) {
    const uint16_t * scales = (const uint16_t *) scales_u8;
    const int        jm     = c & 1;
    const uint32_t   s0     = scales[jm + 0];
    const uint32_t   s2     = scales[jm + 2];
    const uint32_t   s4     = scales[jm + 4];
    const uint32_t   hi     = (uint32_t) -(int32_t) (c >= 2);

    const uint32_t sc = ((s0 & 0x3f3f) & ~hi) | ((((s4 >> 0) & 0x0f0f) | ((s0 & 0xc0c0) >> 2)) & hi);
    const uint32_t m  = ((s2 & 0x3f3f) & ~hi) | ((((s4 >> 4) & 0x0f0f) | ((s2 & 0xc0c0) >> 2)) & hi);

    const float2 dmf = __half22float2(dm);
    dsc[0] = dmf.x * (float) (sc & 0xff);
    dsc[1] = dmf.x * (float) (sc >> 8);
    dmm[0] = dmf.y * (float) (m & 0xff);
    dmm[1] = dmf.y * (float) (m >> 8);
}

// A fragments of sub-blocks 2c (lo) and 2c+1 (hi) for rows g (x0) and g + 8 (x1)
template <ggml_type type>
static __device__ __forceinline__ void kquant_a(const void * x0, const void * x1, const int c, const int t,
                                                int (&lo)[4], int (&hi)[4]) {
    static_assert(type == GGML_TYPE_Q4_K || type == GGML_TYPE_Q5_K, "Q4_K or Q5_K");
    const uint8_t * qs0 = type == GGML_TYPE_Q4_K ? ((const block_q4_K *) x0)->qs : ((const block_q5_K *) x0)->qs;
    const uint8_t * qs1 = type == GGML_TYPE_Q4_K ? ((const block_q4_K *) x1)->qs : ((const block_q5_K *) x1)->qs;
    // fragment order: a0 = (row g, k 4t..), a1 = (row g+8, k 4t..), a2 = (row g, k 16+4t..), a3 = (row g+8, k 16+4t..)
    const int v[4] = {
        load_int(qs0 + 32 * c, t), load_int(qs1 + 32 * c, t), load_int(qs0 + 32 * c, 4 + t),
        load_int(qs1 + 32 * c, 4 + t),
    };
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        lo[i] = v[i] & 0x0F0F0F0F;
        hi[i] = (v[i] >> 4) & 0x0F0F0F0F;
    }
    if constexpr (type == GGML_TYPE_Q5_K) {
        const uint8_t * qh0 = ((const block_q5_K *) x0)->qh;
        const uint8_t * qh1 = ((const block_q5_K *) x1)->qh;
        const int       h[4] = { load_int(qh0, t), load_int(qh1, t), load_int(qh0, 4 + t), load_int(qh1, 4 + t) };
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            lo[i] |= ((h[i] >> (2 * c + 0)) << 4) & 0x10101010;
            hi[i] |= ((h[i] >> (2 * c + 1)) << 4) & 0x10101010;
        }
    }
}

template <ggml_type type>
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
    const int col0 = 2 * t;
    const int col1 = 2 * t + 1;

    // rows and columns past the end read row/column 0 (valid memory); their results are not written
    const block_t *    x0  = (const block_t *) vx + (row0 < nrows ? row0 : 0) * stride_row_x;
    const block_t *    x1  = (const block_t *) vx + (row1 < nrows ? row1 : 0) * stride_row_x;
    const block_q8_1 * yb  = y + (g < ncols_dst ? g : 0) * stride_col_y;        // B: column g
    const block_q8_1 * yc0 = y + (col0 < ncols_dst ? col0 : 0) * stride_col_y;  // C: columns 2t, 2t+1
    const block_q8_1 * yc1 = y + (col1 < ncols_dst ? col1 : 0) * stride_col_y;

    float acc[4] = { 0.0f, 0.0f, 0.0f, 0.0f };

    const int n_units = 4 * n_superblocks;
#pragma unroll 2
    for (int u = warp; u < n_units; u += MMA_WARPS) {
        const int sb = u / 4;
        const int c  = u % 4;

        int a_lo[4], a_hi[4];
        kquant_a<type>(x0 + sb, x1 + sb, c, t, a_lo, a_hi);

        float dsc0[2], dmm0[2], dsc1[2], dmm1[2];
        kquant_scales(x0[sb].scales, x0[sb].dm, c, dsc0, dmm0);
        kquant_scales(x1[sb].scales, x1[sb].dm, c, dsc1, dmm1);

#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int          ib = 8 * sb + 2 * c + i;  // the sub-block's q8_1 block
            const int          b[2] = { load_int(yb[ib].qs, t), load_int(yb[ib].qs, 4 + t) };
            int                C[4] = { 0, 0, 0, 0 };
            mma_s8_m16n8k32(C, i == 0 ? a_lo : a_hi, b);

            const float2 ds0 = __half22float2(yc0[ib].ds);
            const float2 ds1 = __half22float2(yc1[ib].ds);
            acc[0] += dsc0[i] * ds0.x * (float) C[0] - dmm0[i] * ds0.y;
            acc[1] += dsc0[i] * ds1.x * (float) C[1] - dmm0[i] * ds1.y;
            acc[2] += dsc1[i] * ds0.x * (float) C[2] - dmm1[i] * ds0.y;
            acc[3] += dsc1[i] * ds1.x * (float) C[3] - dmm1[i] * ds1.y;
        }
    }

    __shared__ float partial[MMA_WARPS][4][WARP_SIZE];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        partial[warp][i][lane] = acc[i];
    }
    __syncthreads();
    if (warp != 0) {
        return;
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < MMA_WARPS; ++w) {
            s += partial[w][i][lane];
        }
        acc[i] = s;
    }
    if (row0 < nrows && col0 < ncols_dst) {
        dst[col0 * stride_col_dst + row0] = acc[0];
    }
    if (row0 < nrows && col1 < ncols_dst) {
        dst[col1 * stride_col_dst + row0] = acc[1];
    }
    if (row1 < nrows && col0 < ncols_dst) {
        dst[col0 * stride_col_dst + row1] = acc[2];
    }
    if (row1 < nrows && col1 < ncols_dst) {
        dst[col1 * stride_col_dst + row1] = acc[3];
    }
}

static bool mmvq_mma_enabled() {
    static const bool on = [] {
        const char * s = getenv("GGML_CUDA_MMVQ_MMA");
        return s == nullptr || atoi(s) != 0;
    }();
    return on;
}

bool pymtp_mmvq_mma(ggml_type type, const void * vx, const void * vy, float * dst, int64_t ncols_x, int64_t nrows_x,
                    int64_t ncols_dst, int64_t stride_row_x, int64_t stride_col_y, int64_t stride_col_dst, int cc,
                    cudaStream_t stream) {
    if (type != GGML_TYPE_Q4_K && type != GGML_TYPE_Q5_K) {
        return false;
    }
    if (ncols_dst < 2 || ncols_dst > 8 || ncols_x % QK_K != 0 || !ampere_mma_available(cc) || !mmvq_mma_enabled()) {
        return false;
    }
    const dim3 blocks((unsigned) ((nrows_x + MMA_ROWS - 1) / MMA_ROWS), 1, 1);
    const dim3 threads(WARP_SIZE, MMA_WARPS, 1);
    const int  n_superblocks = (int) (ncols_x / QK_K);
    const auto * y = (const block_q8_1 *) vy;
    if (type == GGML_TYPE_Q4_K) {
        mmvq_mma_kernel<GGML_TYPE_Q4_K><<<blocks, threads, 0, stream>>>(
            vx, y, dst, (int) nrows_x, (int) ncols_dst, n_superblocks, stride_row_x, stride_col_y, stride_col_dst);
    } else {
        mmvq_mma_kernel<GGML_TYPE_Q5_K><<<blocks, threads, 0, stream>>>(
            vx, y, dst, (int) nrows_x, (int) ncols_dst, n_superblocks, stride_row_x, stride_col_y, stride_col_dst);
    }
    CUDA_CHECK(cudaGetLastError());
    return true;
}
