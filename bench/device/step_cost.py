# Where a decode step's time goes on the GPU (issue 19): the target model's n-token decodes, as the
# engine runs them, timed from the host, and (with --ncu-phase, under Nsight Compute) one decode's
# kernels, for bench/device/kernel_breakdown.py to sort into ops and layer kinds.
#
#     python3 bench/device/step_cost.py MODEL.gguf --json times.json          # timing, n = 1..8
#     ncu --profile-from-start off --csv --page raw --metrics gpu__time_duration.sum \
#         python3 bench/device/step_cost.py MODEL.gguf --ncu-phase 4 > k4.csv   # one 4-token decode
#
# The contexts are the engine's own (pymtp.engine.runtime.Runtime, MTP on, room for 8 drafts:
# the target context keeps 8 recurrent-state snapshots, as a k <= 8 run does); each decode asks
# for every row's logits, as a verify does. Timing per decode: "host" is llama_decode's return
# (graph build, scheduling, kernel or CUDA-graph launch; the GPU works meanwhile), "total" adds the
# wait for the logits (llama_get_logits_ith synchronizes and the rows are copied to the host).
# Decodes only append (positions grow by n each time), so no rollback is timed here; the engine's
# own verify cost V(n) is in pymtp bench's stats.
import argparse
import ctypes as C
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--sizes", default="1,2,3,4,5,6,7,8", help="batch sizes to time (default 1..8)")
    ap.add_argument("--reps", type=int, default=24, help="timed decodes per size (default 24)")
    ap.add_argument("--ncu-phase", type=int, default=0,
                    help="profile one decode of this many tokens between cuProfilerStart/Stop (under ncu)")
    ap.add_argument("--mtp-head", default=None)
    ap.add_argument("--mtp", choices=("on", "off"), default="on",
                    help="off: the plain target context (no rollback snapshots), as MTP off decodes")
    ap.add_argument("--json", default=None)
    ap.add_argument("--dump-logits", default=None, metavar="FILE",
                    help="instead of timing: after the prompt, decode batches of 1..8 tokens once each and write "
                         "every row's logits to FILE (raw float32, in order), to compare two builds or settings")
    a = ap.parse_args()

    from pymtp._native import llama as L
    from pymtp._native import model_calls as M
    from pymtp.engine.runtime import Runtime, RuntimeConfig
    from pymtp.options import DraftLength

    rt = Runtime(Path(a.model).resolve(), RuntimeConfig(n_gpu_layers=99, mtp=a.mtp, n_draft=DraftLength.fixed(8),
                                                         n_ctx=4096, mtp_head=a.mtp_head))
    lib, ctx, n_vocab = L.lib(), rt.ctx, rt.n_vocab
    pos = 0

    def decode(n: int) -> tuple[float, float]:
        nonlocal pos
        toks = [(1000 + 7 * (pos + i)) % 30000 + 100 for i in range(n)]
        t0 = time.perf_counter()
        M.decode(ctx, toks, pos)
        t1 = time.perf_counter()
        lib.llama_get_logits_ith(ctx, n - 1)   # synchronizes
        t2 = time.perf_counter()
        pos += n
        return (t1 - t0) * 1e3, (t2 - t0) * 1e3

    M.decode(ctx, list(range(100, 164)), 0)   # a 64-token prompt
    pos = 64
    if a.dump_logits:
        with open(a.dump_logits, "wb") as f:
            for n in range(1, 9):
                decode(n)
                for i in range(n):
                    row = lib.llama_get_logits_ith(ctx, i)
                    f.write(C.string_at(row, 4 * n_vocab))
        rt.close()
        return 0
    if a.ncu_phase:
        cuda = C.CDLL("libcuda.so.1")
        for _ in range(4):                    # warm: CUDA graph captured for this size
            decode(a.ncu_phase)
        cuda.cuProfilerStart()
        decode(a.ncu_phase)
        cuda.cuProfilerStop()
        return 0

    sizes = [int(s) for s in a.sizes.split(",")]
    res = {}
    for n in sizes:
        for _ in range(4):
            decode(n)
        host, total = zip(*(decode(n) for _ in range(a.reps)))
        res[n] = {"host_ms": statistics.median(host), "total_ms": statistics.median(total),
                  "total_min_ms": min(total)}
    # sizes interleaved (1, n, 1, n, ...) as the engine alternates them: does a size change cost?
    inter = {}
    for n in sizes[1:]:
        for _ in range(2):
            decode(1), decode(n)
        pairs = [(decode(1), decode(n)) for _ in range(a.reps // 2)]
        inter[n] = {"one_ms": statistics.median(p[0][1] for p in pairs),
                    "n_ms": statistics.median(p[1][1] for p in pairs),
                    "one_host_ms": statistics.median(p[0][0] for p in pairs),
                    "n_host_ms": statistics.median(p[1][0] for p in pairs)}
    t1 = res[sizes[0]]["total_ms"]
    print(f"model {os.path.basename(a.model)}  n_vocab {n_vocab}  CUDA graphs "
          f"{'off' if os.environ.get('GGML_CUDA_DISABLE_GRAPHS') else 'on'}")
    print(f"{'n':>3} {'host ms':>8} {'total ms':>9} {'V(n)':>6} {'alternating 1/n: 1 ms':>22} {'n ms':>7}"
          f" {'host 1':>7} {'host n':>7}")
    for n in sizes:
        r, i = res[n], inter.get(n)
        alt = f"{i['one_ms']:22.2f} {i['n_ms']:7.2f} {i['one_host_ms']:7.2f} {i['n_host_ms']:7.2f}" if i else ""
        print(f"{n:3d} {r['host_ms']:8.2f} {r['total_ms']:9.2f} {r['total_ms'] / t1:6.2f} {alt}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": os.path.basename(a.model), "sizes": res, "alternating": inter,
                       "cuda_graphs": not os.environ.get("GGML_CUDA_DISABLE_GRAPHS")}, f, indent=1)
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
