// pymtp: a run of same-shaped copies in one kernel (see cpy-batch.cuh).
//
// Where the runs come from: with rollback snapshots, a DeltaNet layer's conv state after each of the
// batch's last tokens goes to its own snapshot slot (upstream's build_conv_state: one ggml_cpy per slot,
// a strided view of the conv input into a contiguous slot). The copies share their shapes and strides
// and differ only in their offsets; between them the graph has only the views they read and write.
// Upstream runs each as its own cpy_scalar kernel, ~3 us of launch-bound work for 24-30k floats.
// Here they run as one grid: blockIdx.y picks the copy. Each element is copied as it was, so results
// are unchanged.

#include "cpy-batch.cuh"

#include <cstdlib>
#include <cstring>

namespace {

struct cpy_batch_args {
    const char * src[PYMTP_CPY_BATCH_MAX];
    char *       dst[PYMTP_CPY_BATCH_MAX];
    int64_t      ne_src[4];
    int64_t      nb_src[4];
    int64_t      ne_dst[4];
    int64_t      nb_dst[4];
};

// the byte offset of the idx-th element (in ggml's element order) of a tensor of shape ne and strides nb
__device__ __forceinline__ int64_t offset_of(int64_t idx, const int64_t (&ne)[4], const int64_t (&nb)[4]) {
    const int64_t i0 = idx % ne[0];
    idx /= ne[0];
    const int64_t i1 = idx % ne[1];
    idx /= ne[1];
    const int64_t i2 = idx % ne[2];
    const int64_t i3 = idx / ne[2];
    return i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3];
}

template <typename T>
__global__ void cpy_batch_kernel(const cpy_batch_args args, const int64_t n) {
    const int64_t idx = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n) {
        return;
    }
    // as ggml_cpy: the idx-th element of the source goes to the idx-th element of the destination
    const int64_t s                   = offset_of(idx, args.ne_src, args.nb_src);
    const int64_t d                   = offset_of(idx, args.ne_dst, args.nb_dst);
    *(T *) (args.dst[blockIdx.y] + d) = *(const T *) (args.src[blockIdx.y] + s);
}

bool is_noop(const ggml_tensor * t) { // as ggml-cuda's own rule: nothing to launch
    return ggml_is_empty(t) || t->op == GGML_OP_RESHAPE || t->op == GGML_OP_TRANSPOSE || t->op == GGML_OP_VIEW ||
           t->op == GGML_OP_PERMUTE || t->op == GGML_OP_NONE;
}

// a copy this kernel takes: same type both sides, one element per block of 2 or 4 bytes
bool takes(const ggml_tensor * cpy) {
    const ggml_tensor * src = cpy->src[0];
    const ggml_tensor * dst = cpy->src[1];
    return cpy->op == GGML_OP_CPY && src->type == dst->type && ggml_blck_size(src->type) == 1 &&
           (ggml_type_size(src->type) == 2 || ggml_type_size(src->type) == 4) &&
           ggml_nelements(src) == ggml_nelements(dst);
}

bool same_copy_but_offsets(const ggml_tensor * a, const ggml_tensor * b) {
    for (int k = 0; k < 2; ++k) {
        const ggml_tensor * x = a->src[k];
        const ggml_tensor * y = b->src[k];
        if (x->type != y->type || !ggml_are_same_shape(x, y) || !ggml_are_same_stride(x, y)) {
            return false;
        }
    }
    return true;
}

bool overlap(const ggml_tensor * a, const ggml_tensor * b) {
    const char * a0 = (const char *) a->data;
    const char * b0 = (const char *) b->data;
    return a0 < b0 + ggml_nbytes(b) && b0 < a0 + ggml_nbytes(a);
}

bool enabled() {
    static const bool on = [] {
        const char * s = getenv("GGML_CUDA_NO_CPY_BATCH");
        return !(s && std::atoi(s) != 0);
    }();
    return on;
}

} // namespace

int pymtp_cpy_batch(ggml_backend_cuda_context & ctx, const ggml_cgraph * cgraph, int i) {
    const ggml_tensor * first = cgraph->nodes[i];
    if (!enabled() || !takes(first)) {
        return 0;
    }
    int run[PYMTP_CPY_BATCH_MAX];
    int n_run    = 0;
    run[n_run++] = i;
    for (int j = i + 1; j < cgraph->n_nodes && n_run < PYMTP_CPY_BATCH_MAX; ++j) {
        const ggml_tensor * node = cgraph->nodes[j];
        if (is_noop(node) || (node->flags & GGML_TENSOR_FLAG_COMPUTE) == 0) {
            continue;
        }
        if (!takes(node) || !same_copy_but_offsets(first, node)) {
            break;
        }
        run[n_run++] = j;
    }
    if (n_run < 2) {
        return 0;
    }
    // the copies run in any order: none may write what another (or itself) reads
    for (int a = 0; a < n_run; ++a) {
        for (int b = 0; b < n_run; ++b) {
            if (overlap(cgraph->nodes[run[a]]->src[1], cgraph->nodes[run[b]]->src[0])) {
                return 0;
            }
        }
    }

    cpy_batch_args args;
    std::memset(&args, 0, sizeof(args));
    const ggml_tensor * src = first->src[0];
    const ggml_tensor * dst = first->src[1];
    for (int k = 0; k < 4; ++k) {
        args.ne_src[k] = src->ne[k];
        args.nb_src[k] = (int64_t) src->nb[k];
        args.ne_dst[k] = dst->ne[k];
        args.nb_dst[k] = (int64_t) dst->nb[k];
    }
    for (int c = 0; c < n_run; ++c) {
        args.src[c] = (const char *) cgraph->nodes[run[c]]->src[0]->data;
        args.dst[c] = (char *) cgraph->nodes[run[c]]->src[1]->data;
    }
    const int64_t n = ggml_nelements(src);
    const dim3    grid((unsigned) ((n + 255) / 256), (unsigned) n_run);
    if (ggml_type_size(src->type) == 4) {
        cpy_batch_kernel<uint32_t><<<grid, 256, 0, ctx.stream()>>>(args, n);
    } else {
        cpy_batch_kernel<uint16_t><<<grid, 256, 0, ctx.stream()>>>(args, n);
    }
    CUDA_CHECK(cudaGetLastError());
    return run[n_run - 1] - i;
}
