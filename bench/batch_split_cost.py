#!/usr/bin/env python3
"""What a target decode costs when the sequences in its batch hold different numbers of rows.

llama-server's slots each decode their own rows in one shared batch: a slot verifying k drafts puts k + 1
rows in it, a plain slot one. Where the KV cache keeps a stream per sequence (llama-server with --parallel N
and no --kv-unified), libllama splits a batch into ubatches holding as many rows of each sequence (and
consecutive sequence ids only): [1, 2, 1, 1] becomes a 4-row ubatch and a 1-row one, two graph runs. With
one unified stream the batch runs whole. This times each shape both ways, on the same model and machine.

    python bench/batch_split_cost.py [MODEL] [--ngl 99] [--threads 2] [--seqs 4] [--ctx 512] [--reps 30]

MODEL defaults to the built-in SmolLM2-135M-Instruct. Each sequence first holds --ctx/4 prompt tokens;
every timed decode is removed again, so all shapes see the same cache.
"""

from __future__ import annotations

import argparse
import ctypes as C
import statistics
import time
from pathlib import Path

from pymtp._native import llama as L
from pymtp._native.model_calls import free_model, load_model


def shapes(n_seqs: int) -> list[tuple[int, ...]]:
    """Rows per sequence: all plain, one sequence verifying 1 and 3 drafts, every sequence verifying 1,
    and a batch without sequence 1 (ids not consecutive)."""
    plain = (1,) * n_seqs
    out = [plain, (1, 2) + (1,) * (n_seqs - 2), (1, 4) + (1,) * (n_seqs - 2), (2,) * n_seqs]
    if n_seqs >= 3:
        out.append((1, 0) + (1,) * (n_seqs - 2))
    return out


class Batch:
    def __init__(self, n_max: int) -> None:
        self.tok = (L.llama_token * n_max)()
        self.pos = (L.llama_pos * n_max)()
        self.nsq = (C.c_int32 * n_max)()
        self.sid = [(L.llama_seq_id * 1)() for _ in range(n_max)]
        self.sidp = (C.POINTER(L.llama_seq_id) * n_max)(*[C.cast(s, C.POINTER(L.llama_seq_id)) for s in self.sid])
        self.lg = (C.c_int8 * n_max)()

    def fill(self, rows: list[tuple[int, int, int]]) -> L.llama_batch:
        """rows: (token, position, sequence); every row outputs logits (a verify's rows do)."""
        for i, (t, p, s) in enumerate(rows):
            self.tok[i], self.pos[i], self.nsq[i], self.lg[i] = t, p, 1, 1
            self.sid[i][0] = s
        b = L.llama_batch()
        b.n_tokens = len(rows)
        b.token, b.pos, b.n_seq_id, b.seq_id, b.logits = self.tok, self.pos, self.nsq, self.sidp, self.lg
        b.embd = None
        return b


def run(model, args, unified: bool) -> dict[tuple[int, ...], float]:
    lib = L.lib()
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = args.ctx * args.seqs, 512, 512
    cp.n_seq_max, cp.kv_unified = args.seqs, unified
    if args.threads:
        cp.n_threads = cp.n_threads_batch = args.threads
    ctx = lib.llama_init_from_model(model, cp)
    if not ctx:
        raise SystemExit("could not create the context: " + L.last_log_lines())
    mem = lib.llama_get_memory(ctx)
    batch = Batch(512)
    n0 = args.ctx // 4
    for s in range(args.seqs):  # a prompt per sequence
        if lib.llama_decode(ctx, batch.fill([(100 + (7 * i + s) % 900, i, s) for i in range(n0)])) != 0:
            raise SystemExit("prefill failed")
    out = {}
    for shape in shapes(args.seqs):
        rows = [(200 + j, n0 + j, s) for s, k in enumerate(shape) for j in range(k)]
        times = []
        for r in range(args.reps + 3):
            b = batch.fill(rows)
            t0 = time.perf_counter()
            if lib.llama_decode(ctx, b) != 0:
                raise SystemExit(f"decode of {shape} failed")
            lib.llama_get_logits_ith(ctx, -1)  # synchronises a GPU backend
            if r >= 3:
                times.append((time.perf_counter() - t0) * 1e3)
            for s in range(args.seqs):
                lib.llama_memory_seq_rm(mem, s, n0, -1)
        out[shape] = statistics.median(times)
    lib.llama_free(ctx)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--ctx", type=int, default=512, help="KV cells per sequence (default: 512)")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    if args.model is None:
        from pymtp.default_model import default_model_path
        args.model = default_model_path()
    model = load_model(Path(args.model), n_gpu_layers=args.ngl, load_mtp=False)
    if not model:
        raise SystemExit("could not load the model: " + L.last_log_lines())
    try:
        # each way twice, in turn, keeping the second: the first one of a process loads kernels and warms caches
        res = {u: run(model, args, u) for u in (False, True) * 2}
    finally:
        free_model(model)
    print(f"{Path(args.model).name}, {args.seqs} sequences, ngl {args.ngl}; median ms per decode "
          f"(x the all-plain batch of the same cache)")
    print(f"{'rows per sequence':<22} {'one stream per seq':>20} {'unified (--kv-unified)':>24}")
    base = {u: res[u][(1,) * args.seqs] for u in res}
    for shape in shapes(args.seqs):
        cells = [f"{res[u][shape]:7.2f} ({res[u][shape] / base[u]:.2f}x)" for u in (False, True)]
        print(f"{str(list(shape)):<22} {cells[0]:>20} {cells[1]:>24}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
