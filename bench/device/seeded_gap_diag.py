# Where MTP on and MTP off part at T > 0 on a GPU, and why (a diagnosis of tests/engine/test_dense_mtp.py::
# test_seeded_sampling_identical_on_off, which compares them token for token at the same seeds).
#
#     cd /tmp && REPO=/path/to/repo LD_PRELOAD=<the system libstdc++> python3 $REPO/bench/device/seeded_gap_diag.py
#
# The test's tiny dense model (gemma3 by default, ARCH=...), the test's prompts, settings and seeds; for each seed,
# the first token where the two generations differ; there, that row's logits from a decode of the whole prefix
# against the same row in decodes of 1-4 rows (MTP off's plain step is a 1-row decode, MTP on's verify a decode of
# k+1 rows), and the two tokens' logits and ranks among the top the chain keeps. Run from /tmp: the installed
# package, with pymtp_devtools from the repository. (On the GPU box numpy must not load its libstdc++ first:
# bench/device/README.md.)
import os
import sys
from pathlib import Path

import pymtp
from pymtp._native import llama as L
from pymtp._native import model_calls as M

sys.path.append(os.environ["REPO"])
import numpy as np  # noqa: E402

import pymtp_devtools.tiny_dense as td  # noqa: E402

ARCH = os.environ.get("ARCH", "gemma3")
PROMPTS = ["The quick brown fox", "Once upon a time", "def fibonacci(n):"]
OPTS = dict(n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=int(os.environ.get("NGL", "99")))
KW = dict(max_tokens=24, temperature=0.8, top_k=40, top_p=0.95, min_p=0.0)


def main() -> int:
    full = td.make_tiny_dense(ARCH, Path(f"/tmp/{ARCH}-full.gguf"), seed=4321)
    off = pymtp.Model(full, mtp="off", **OPTS)
    on = pymtp.Model(full, mtp="on", n_draft=5, **OPTS)
    probe = pymtp.Model(full, mtp="off", **OPTS)
    lib = L.lib()

    def row_logits(prefix: list[int], tail: int) -> np.ndarray:
        """the last row's logits: the prefix in one decode (tail 0), or all but its last `tail` tokens and then those"""
        ctx = probe.rt.ctx
        lib.llama_memory_seq_rm(lib.llama_get_memory(ctx), -1, -1, -1)
        M.decode(ctx, prefix[:len(prefix) - tail], 0)
        if tail:
            M.decode(ctx, prefix[len(prefix) - tail:], len(prefix) - tail)
        return np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(probe.rt.n_vocab,)).copy()

    for seed in range(len(PROMPTS)):
        a = off.generate(PROMPTS[seed], seed=seed, **KW).tokens
        b = on.generate(PROMPTS[seed], seed=seed, n_draft=3, draft="chain", **KW).tokens
        i = next((j for j in range(min(len(a), len(b))) if a[j] != b[j]), None)
        print(f"seed {seed}: first difference at {i}" + (f": off {a[i]} on {b[i]}" if i is not None else ""))
        if i is None:
            continue
        pre = off.tokenize(PROMPTS[seed]) + a[:i]
        x = row_logits(pre, 0)
        for tail in (1, 2, 3, 4):
            d = np.abs(row_logits(pre, tail) - x).max()
            print(f"  that row in a {tail}-row decode against the whole prefix's decode: max |diff| {d:.3g}")
        order = np.argsort(-x)[:KW["top_k"]]
        z = x[order] / KW["temperature"]
        p = np.exp(z - z.max())
        p /= p.sum()
        print(f"  top tokens (id, logit, p at T={KW['temperature']} over the top {KW['top_k']}):")
        for r, t in enumerate(order[:12]):
            mark = ("  <- off" if t == a[i] else "") + ("  <- on" if t == b[i] else "")
            print(f"    {r:2d} {t:6d} {x[t]:9.5f} {p[r]:.4f}{mark}")
        for t in (a[i], b[i]):
            print(f"  token {t}: rank {int((x > x[t]).sum())}, logit {x[t]:.5f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
