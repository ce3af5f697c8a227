// Device check of native/ggml-cuda/mmvq-mma.cu (issue 19), without the rest of
// ggml-cuda:
//   1. exactness: random Q4_K/Q5_K/Q6_K weights and q8_1 columns, the kernel vs
//   a host reference written from
//      upstream's dequantize_row_q4_K/q5_K/q6_K (double sums), 2..16 columns,
//      row counts with and without a tail; prints the worst relative error and
//      fails above 1e-5;
//   2. speed: the kernel on the 27B shape's largest Q4_K product (17408 x 5120)
//   for 2..16 columns, in
//      GB/s of weights read (the H100/H200 move ~3.3-4.8 TB/s).
// Build and run on the device, after the pymtp CUDA build
// (bench/device/run_verify_kernels.sh does it):
//   nvcc -O3 -std=c++17 -arch=sm_90 -Ivendor/llama.cpp/ggml/include
//   -Ivendor/llama.cpp/ggml/src \
//        -Inative/ggml-cuda bench/device/mmvq_mma_check.cu -o
//        /tmp/mmvq_mma_check && /tmp/mmvq_mma_check
#include "../../native/ggml-cuda/mmvq-mma.cu"

#include <cmath>
#include <cstdio>
#include <random>
#include <type_traits>
#include <vector>

// what ggml-cuda.cu and ggml-base would provide: CUDA_CHECK's error path and
// GGML_ABORT
[[noreturn]] void ggml_cuda_error(const char * stmt, const char * func, const char * file, int line, const char * msg) {
    fprintf(stderr, "CUDA error %s at %s:%d (%s): %s\n", stmt, file, line, func, msg);
    exit(1);
}

extern "C" [[noreturn]] void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "abort at %s:%d: %s\n", file, line, fmt);
    exit(1);
}

static void scale_min_k4(int j, const uint8_t * q, int & sc, int & m) {
    if (j < 4) {
        sc = q[j] & 63;
        m  = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m  = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

template <typename block_t>
static double ref_dot(const block_t * row, const block_q8_1 * col, int nsb, bool q5) {
    double acc = 0.0;
    for (int sb = 0; sb < nsb; ++sb) {
        const block_t & b    = row[sb];
        const float     d    = __half2float(__low2half(b.dm));
        const float     dmin = __half2float(__high2half(b.dm));
        for (int s = 0; s < 8; ++s) {
            int sc, m;
            scale_min_k4(s, b.scales, sc, m);
            const block_q8_1 & y    = col[8 * sb + s];
            const float        d8   = __half2float(__low2half(y.ds));
            const float        sum8 = __half2float(__high2half(y.ds));
            long               isum = 0;
            for (int l = 0; l < 32; ++l) {
                const uint8_t byte = b.qs[32 * (s / 2) + l];
                int           q    = s % 2 == 0 ? byte & 0xF : byte >> 4;
                if (q5) {
                    q += ((((const block_q5_K &) b).qh[l] >> s) & 1) << 4;
                }
                isum += q * y.qs[l];
            }
            acc += (double) d * sc * d8 * isum - (double) dmin * m * sum8;
        }
    }
    return acc;
}

// upstream's dequantize_row_q6_K, one row of super-blocks, dotted with q8_1
// columns (double sums)
static double ref_dot_q6_K(const block_q6_K * row, const block_q8_1 * col, int nsb) {
    double acc = 0.0;
    for (int sb = 0; sb < nsb; ++sb) {
        const block_q6_K & b = row[sb];
        const float        d = __half2float(b.d);
        for (int h = 0; h < 2; ++h) {
            const uint8_t * ql = b.ql + 64 * h;
            const uint8_t * qh = b.qh + 32 * h;
            const int8_t *  sc = b.scales + 8 * h;
            for (int l = 0; l < 32; ++l) {
                const int is   = l / 16;
                const int q[4] = {
                    (int8_t) ((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32,
                    (int8_t) ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32,
                    (int8_t) ((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32,
                    (int8_t) ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32,
                };
                for (int j = 0; j < 4; ++j) {
                    const block_q8_1 & y  = col[8 * sb + 4 * h + j];
                    const float        d8 = __half2float(__low2half(y.ds));
                    acc += (double) d * sc[is + 2 * j] * q[j] * d8 * y.qs[l];
                }
            }
        }
    }
    return acc;
}

template <typename block_t>
static void fill_x(std::vector<block_t> & x, std::mt19937 & rng) {
    std::uniform_int_distribution<int>    byte(0, 255);
    std::uniform_real_distribution<float> dd(0.001f, 0.01f);
    for (auto & b : x) {
        uint8_t * p = (uint8_t *) &b;
        for (size_t i = 0; i < sizeof(block_t); ++i) {
            p[i] = (uint8_t) byte(rng);
        }
        if constexpr (std::is_same_v<block_t, block_q6_K>) {
            b.d = __float2half(dd(rng));
        } else {
            b.dm = make_half2(__float2half(dd(rng)), __float2half(dd(rng)));
        }
    }
}

static void fill_y(std::vector<block_q8_1> & y, std::mt19937 & rng) {
    std::uniform_int_distribution<int>    q(-127, 127);
    std::uniform_real_distribution<float> dd(0.01f, 0.02f);
    for (auto & b : y) {
        int sum = 0;
        for (int l = 0; l < 32; ++l) {
            b.qs[l] = (int8_t) q(rng);
            sum += b.qs[l];
        }
        const float d = dd(rng);
        b.ds          = make_half2(__float2half(d), __float2half(d * sum));
    }
}

static const char * type_name(ggml_type type) {
    return type == GGML_TYPE_Q4_K ? "q4_K" : type == GGML_TYPE_Q5_K ? "q5_K" : "q6_K";
}

// Random weights (nrows x nsb super-blocks) and PYMTP_MMVQ_MMA_MAX_COLS q8_1 columns, on the host and the
// device, and room for the result
template <typename block_t>
struct problem {
    const int               nrows, nsb, K;
    std::vector<block_t>    x;
    std::vector<block_q8_1> y;
    void *                  dx = nullptr;
    void *                  dy = nullptr;
    float *                 dd = nullptr;

    problem(int nrows, int nsb, std::mt19937 & rng)
        : nrows(nrows), nsb(nsb), K(nsb * QK_K), x((size_t) nrows * nsb),
          y((size_t) PYMTP_MMVQ_MMA_MAX_COLS * K / QK8_1) {
        fill_x(x, rng);
        fill_y(y, rng);
        CUDA_CHECK(cudaMalloc(&dx, x.size() * sizeof(block_t)));
        CUDA_CHECK(cudaMalloc(&dy, y.size() * sizeof(block_q8_1)));
        CUDA_CHECK(cudaMalloc(&dd, dst_bytes()));
        CUDA_CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(block_t), cudaMemcpyHostToDevice));
        CUDA_CHECK(cudaMemcpy(dy, y.data(), y.size() * sizeof(block_q8_1), cudaMemcpyHostToDevice));
    }

    ~problem() {
        cudaFree(dx);
        cudaFree(dy);
        cudaFree(dd);
    }

    size_t dst_bytes() const { return (size_t) PYMTP_MMVQ_MMA_MAX_COLS * nrows * sizeof(float); }

    bool run(ggml_type type, int ncols) const {
        return pymtp_mmvq_mma(type, dx, dy, dd, K, nrows, ncols, nsb, K / QK8_1, nrows, /*cc=*/900, 0);
    }
};

template <typename block_t>
static bool check(ggml_type type, int nrows, int nsb, std::mt19937 & rng) {
    const problem<block_t> pr(nrows, nsb, rng);
    bool                   ok = true;
    for (int ncols = 2; ncols <= PYMTP_MMVQ_MMA_MAX_COLS; ++ncols) {
        CUDA_CHECK(cudaMemset(pr.dd, 0xff, pr.dst_bytes())); // NaN: unwritten shows
        if (!pr.run(type, ncols)) {
            printf("  %s ncols %d: not taken\n", type_name(type), ncols);
            ok = false;
            continue;
        }
        std::vector<float> out((size_t) PYMTP_MMVQ_MMA_MAX_COLS * nrows);
        CUDA_CHECK(cudaMemcpy(out.data(), pr.dd, pr.dst_bytes(), cudaMemcpyDeviceToHost));
        double worst = 0.0, scale = 0.0;
        for (int j = 0; j < ncols; ++j) {
            for (int r = 0; r < nrows; ++r) {
                const block_t *    row = &pr.x[(size_t) r * nsb];
                const block_q8_1 * col = &pr.y[(size_t) j * pr.K / QK8_1];
                double             ref;
                if constexpr (std::is_same_v<block_t, block_q6_K>) {
                    ref = ref_dot_q6_K(row, col, nsb);
                } else {
                    ref = ref_dot(row, col, nsb, type == GGML_TYPE_Q5_K);
                }
                const double got = out[(size_t) j * nrows + r];
                worst            = std::isfinite(got) ? std::max(worst, std::fabs(got - ref)) : INFINITY;
                scale            = std::max(scale, std::fabs(ref));
            }
        }
        const double rel = worst / scale;
        printf("  %s rows %d K %d ncols %d: max |err| / max |ref| = %.2e\n", type_name(type), nrows, pr.K, ncols, rel);
        ok = ok && rel < 1e-5;
    }
    return ok;
}

template <typename block_t>
static void speed(ggml_type type, int nrows, int nsb) {
    std::mt19937           rng(7);
    const problem<block_t> pr(nrows, nsb, rng);
    cudaEvent_t            e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const double bytes = (double) pr.x.size() * sizeof(block_t);
    for (int ncols : { 2, 4, 8, 12, 16 }) {
        for (int w = 0; w < 5; ++w) {
            pr.run(type, ncols);
        }
        const int reps = 50;
        cudaEventRecord(e0);
        for (int r = 0; r < reps; ++r) {
            pr.run(type, ncols);
        }
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, e0, e1);
        printf("  speed %s %d x %d, ncols %d: %.1f us, %.0f GB/s\n", type_name(type), nrows, pr.K, ncols,
               1e3 * ms / reps, bytes / (ms / reps * 1e-3) / 1e9);
    }
}

int main() {
    setenv("GGML_CUDA_MMVQ_MMA_Q6_K", "1", 1); // Q6_K at every column count (by default only from 8)
    std::mt19937 rng(1234);
    bool         ok = true;
    ok              = check<block_q4_K>(GGML_TYPE_Q4_K, 64, 3, rng) && ok;
    ok              = check<block_q4_K>(GGML_TYPE_Q4_K, 40, 2, rng) && ok; // a row tail
    ok              = check<block_q5_K>(GGML_TYPE_Q5_K, 64, 3, rng) && ok;
    ok              = check<block_q5_K>(GGML_TYPE_Q5_K, 24, 20, rng) && ok;
    ok              = check<block_q6_K>(GGML_TYPE_Q6_K, 64, 3, rng) && ok;
    ok              = check<block_q6_K>(GGML_TYPE_Q6_K, 40, 20, rng) && ok; // a row tail
    speed<block_q4_K>(GGML_TYPE_Q4_K, 17408, 20);
    speed<block_q4_K>(GGML_TYPE_Q4_K, 5120, 20);
    speed<block_q6_K>(GGML_TYPE_Q6_K, 17408, 20);
    printf("mmvq-mma check: %s\n", ok ? "PASSED" : "FAILED");
    return ok ? 0 : 1;
}
