# Which op first computes a token's row differently in a one-token decode than in a 2-token decode? (the search
# behind patch 0030; bench/device/batch_invariance.py says whether they differ at all)
#
#     cd /tmp && LD_PRELOAD=<the system libstdc++> python3 $REPO/bench/device/first_diverging_op.py MODEL.gguf [N]
#
# A context as the engine makes one (llama.cpp's default KV type, flash attention auto, all layers on the GPU) with
# an eval callback that copies every contiguous F32 node to the host. After the same prompt, one decode of a token
# alone and one of it with a second token (N rows, default 2); per node name, the token's row in each, compared.
# Prints the nodes in graph order with the first differences. The callback runs the graph node by node, so
# ggml-cuda's fusions and CUDA graphs are off here: a difference that only the fused graph has does not show.
#
#     ... first_diverging_op.py MODEL.gguf --prefill
#
# instead compares a 96-token prefill's nodes as MTP off decodes it (the last row's logits only) with MTP on's target
# (every row's hidden state kept, patch 0031's two tails of the last layer), node by node where the shapes match.
import ctypes as C
import sys

import numpy as np

from pymtp._native import llama as L
from pymtp._native import model_calls as M
from pymtp._native.lib import load

PROMPT = [1, 450, 4955, 310, 278, 14010, 3965, 16410, 297, 278, 285, 2027, 23275, 6462, 29892, 746]
CB = C.CFUNCTYPE(C.c_bool, C.c_void_p, C.c_bool, C.c_void_p)


class Recorder:
    """An eval callback that copies every contiguous F32 node of a decode to the host, by name, in graph order (a
    node of the same name may run twice: patch 0031's two tails)"""

    def __init__(self):
        self.dll = load()   # the ggml functions, through libllama's dependencies
        for fn, res, args in [("ggml_get_name", C.c_char_p, [C.c_void_p]), ("ggml_nbytes", C.c_size_t, [C.c_void_p]),
                              ("ggml_is_contiguous", C.c_bool, [C.c_void_p]),
                              ("ggml_backend_tensor_get", None, [C.c_void_p, C.c_void_p, C.c_size_t, C.c_size_t])]:
            getattr(self.dll, fn).restype, getattr(self.dll, fn).argtypes = res, args
        self.seen: dict[str, list[np.ndarray]] = {}
        self.order: list[str] = []
        self.cb = CB(self._node)   # kept alive as long as the contexts that call it

    def _node(self, t, ask, _ud):
        if ask:
            return True
        if C.c_int32.from_address(t).value != 0 or not self.dll.ggml_is_contiguous(t):
            return True
        ne = [C.c_int64.from_address(t + 16 + 8 * i).value for i in range(4)]
        name = self.dll.ggml_get_name(t).decode()
        buf = np.empty(int(np.prod(ne)), dtype=np.float32)
        self.dll.ggml_backend_tensor_get(t, buf.ctypes.data, 0, buf.nbytes)
        if name not in self.seen:
            self.order.append(name)
            self.seen[name] = []
        self.seen[name].append(buf.reshape(ne[::-1]))
        return True

    def decode(self, ctx, tokens: list[int], pos0: int, outputs=None) -> tuple[dict[str, list[np.ndarray]], list[str]]:
        """decode tokens in ctx and return the nodes this decode computed, and their order"""
        self.seen, self.order = {}, []
        M.decode(ctx, tokens, pos0, outputs=outputs)
        return self.seen, self.order

    def context(self, model, n_batch: int):
        """a context as the engine makes one (llama.cpp's defaults), every node passed to this recorder"""
        cp = L.lib().llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max, cp.no_perf = 512, n_batch, n_batch, 1, True
        cp.cb_eval = C.cast(self.cb, C.c_void_p)
        return L.lib().llama_init_from_model(model, cp)


def main() -> int:
    path = sys.argv[1]
    prefill = len(sys.argv) > 2 and sys.argv[2] == "--prefill"
    model = M.load_model(path, n_gpu_layers=99)
    rec = Recorder()
    if prefill:
        return compare_prefill(model, rec, path)
    return compare_rows(model, rec, path, int(sys.argv[2]) if len(sys.argv) > 2 else 2)


def compare_rows(model, rec: Recorder, path: str, n: int) -> int:
    """a token decoded alone against row 0 of the same token decoded with n - 1 more, node by node"""
    lib = L.lib()
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    prompt = [t % n_vocab for t in PROMPT]
    tail = [(prompt[-1] * 7 + i * 13) % n_vocab for i in range(n)]
    ctx = rec.context(model, 64)

    def run(rows: int) -> tuple[dict[str, np.ndarray], list[str]]:
        lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), -1, -1, -1)
        M.decode(ctx, prompt, 0, outputs=[len(prompt) - 1])
        seen, order = rec.decode(ctx, tail[:rows], len(prompt))
        return {k: v[-1] for k, v in seen.items()}, order

    one, names = run(1)
    many, _ = run(n)
    shown = 0
    for name in names:
        a, b = one[name], many.get(name)
        if b is None or a.ndim != b.ndim:
            continue
        axes = [i for i in range(a.ndim) if a.shape[i] == 1 and b.shape[i] == n]
        if a.shape == b.shape:
            row_b = b
        elif len(axes) == 1 and all(a.shape[i] == b.shape[i] for i in range(a.ndim) if i != axes[0]):
            row_b = np.take(b, [0], axis=axes[0])
        else:
            continue
        if np.array_equal(a, row_b):
            continue
        with np.errstate(invalid="ignore"):
            d = float(np.nanmax(np.abs(a - row_b)))
        print(f"  {name:28s} {tuple(a.shape)} vs {tuple(b.shape)}: max |diff| {d:.3g}")
        shown += 1
        if shown >= 12:
            break
    print(f"{path}: {len(names)} F32 nodes, 1 row vs row 0 of {n}: " + ("all bitwise" if shown == 0 else
                                                                       f"first {shown} that differ above"))
    lib.llama_free(ctx)
    return 0


def compare_prefill(model, rec: Recorder, path: str) -> int:
    """--prefill: a 96-token prefill in a plain context and in one that keeps every row's hidden state; prints the
    nodes that differ (where shapes match) and the last row's logits"""
    lib = L.lib()
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    prompt = [(7 + 13 * i) % n_vocab for i in range(96)]
    runs = []
    for all_rows in (False, True):
        ctx = rec.context(model, 128)
        if all_rows:
            M.set_nextn_outputs(ctx, True)
        seen, order = rec.decode(ctx, prompt, 0, outputs=[len(prompt) - 1])
        logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()
        runs.append((seen, order, logits))
        lib.llama_free(ctx)
    (plain, names, la), (split, _, lb) = runs
    shown = 0
    for name in names:
        for a in plain[name]:
            same_shape = [b for b in split.get(name, []) if b.shape == a.shape]
            if not same_shape or any(np.array_equal(a, b) for b in same_shape):
                continue
            d = min(float(np.nanmax(np.abs(a - b))) for b in same_shape)
            print(f"  {name:28s} {tuple(a.shape)}: max |diff| {d:.3g}")
            shown += 1
        if shown >= 12:
            break
    d = float(np.abs(la - lb).max())
    print(f"{path}: prefill of 96, {len(names)} F32 node names, plain vs every row's hidden state kept: "
          + ("all bitwise" if shown == 0 else f"first {shown} that differ above")
          + "; last row's logits (node by node, no fusions): " + ("bitwise" if d == 0 else f"max |diff| {d:.3g}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
