"""One k=1 draft decode timed alone: time_draft_decode.py HEAD [ITERS] (built-in model, 2 threads)."""

import ctypes as C
import sys
import time

import numpy as np

from pymtp import Model
from pymtp._native import llama as L
from pymtp.bench.prompts import load_prompts


def main() -> None:
    head = sys.argv[1]
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 400
    m = Model(None, n_draft=1, n_threads=2, mtp_head=head)
    p = m.chat_tokens([{"role": "user", "content": load_prompts("mtbench")[0]}])
    m.generate(p, max_tokens=64, temperature=0.0, n_draft=1)
    rt = m.rt
    out = (L.llama_token * 1)()
    logits = (C.c_float * rt.n_vocab)()
    peek = rt.lib.llama_mtp_peek_draft
    for _ in range(20):
        peek(rt.engine, -1, 1, out, logits)
    t = time.perf_counter()
    for _ in range(iters):
        peek(rt.engine, -1, 1, out, logits)
    print(f"{head}: peek_draft(k=1) {(time.perf_counter() - t) / iters * 1000:.3f} ms")
    big = np.ones(100_000_000 // 8)
    total = 0.0
    for _ in range(100):
        big += 1.0  # stream ~200 MB through the caches
        t = time.perf_counter()
        peek(rt.engine, -1, 1, out, logits)
        total += time.perf_counter() - t
    print(f"   after streaming 200 MB through the caches: {total / 100 * 1000:.3f} ms")


if __name__ == "__main__":
    main()
