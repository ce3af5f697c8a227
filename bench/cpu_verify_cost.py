# What an n-token decode (a verify of n - 1 drafts) costs on the CPU, in plain one-token steps (issue 67).
#
#     python bench/cpu_verify_cost.py MODEL.gguf --threads 2                 # V(n), n = 1..8 and 16
#     python bench/cpu_verify_cost.py MODEL.gguf --sizes 1,2,4 --reps 12 --json out.json
#
# The target context is the engine's own (pymtp.engine.runtime.Runtime, MTP on, room for 16 drafts, the
# given threads), as in bench/device/step_cost.py; every row's logits are asked for, as a verify does.
# Sizes are timed round-robin (1, 2, ..., 16, 1, 2, ...) so that load from other processes on a shared
# machine falls on every size alike; V(n) is the median n-token decode over the median 1-token decode.
# On a shared machine the wall times of preempted decodes scatter: "min" is the least disturbed decode, and
# "cpu" the process's CPU time per decode (time.process_time, all threads: with --threads 1 the work itself,
# whatever the machine's load; with more threads it includes their spinning at barriers).
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--sizes", default="1,2,3,4,5,6,7,8,16", help="batch sizes (default 1..8,16)")
    ap.add_argument("--reps", type=int, default=8, help="timed decodes per size (default 8)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mtp", choices=("on", "off"), default="on")
    ap.add_argument("--mtp-head", default=None,
                    help="head-only GGUF (default: the shipped head for the built-in model)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    from pymtp import default_model
    from pymtp._native import llama as L
    from pymtp._native import model_calls as M
    from pymtp.engine.runtime import Runtime, RuntimeConfig
    from pymtp.options import DraftLength

    sizes = [int(s) for s in a.sizes.split(",")]
    n_ctx = 64 + (a.reps + 1) * sum(sizes) + 64
    path = Path(a.model).resolve()
    head = a.mtp_head or default_model.shipped_head_for(path)
    rt = Runtime(path, RuntimeConfig(n_threads=a.threads, mtp=a.mtp, n_draft=DraftLength.fixed(16),
                                     n_ctx=max(4096, n_ctx), mtp_head=str(head) if head and a.mtp == "on" else None))
    lib, ctx = L.lib(), rt.ctx
    pos = 0

    def decode(n: int) -> tuple[float, float]:
        nonlocal pos
        toks = [(1000 + 7 * (pos + i)) % 30000 + 100 for i in range(n)]
        c0, t0 = time.process_time(), time.perf_counter()
        M.decode(ctx, toks, pos)
        lib.llama_get_logits_ith(ctx, n - 1)
        pos += n
        return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3

    M.decode(ctx, list(range(100, 164)), 0)   # a 64-token prompt
    pos = 64
    for n in sizes:                            # warm each size once
        decode(n)
    times: dict[int, list[float]] = {n: [] for n in sizes}
    cpu: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(a.reps):
        for n in sizes:
            w, c = decode(n)
            times[n].append(w)
            cpu[n].append(c)
    med = {n: statistics.median(t) for n, t in times.items()}
    mins = {n: min(t) for n, t in times.items()}
    cmed = {n: statistics.median(t) for n, t in cpu.items()}
    b = 1 if 1 in med else sizes[0]
    print(f"model {os.path.basename(a.model)}  threads {a.threads}  reps {a.reps}  "
          f"GGML_CPU_VERIFY_KERNELS={os.environ.get('GGML_CPU_VERIFY_KERNELS', '')}")
    print(f"{'n':>3} {'median ms':>10} {'min ms':>9} {'cpu ms':>9} {'V med':>6} {'V min':>6} {'V cpu':>6}")
    for n in sizes:
        print(f"{n:3d} {med[n]:10.2f} {mins[n]:9.2f} {cmed[n]:9.2f} {med[n] / med[b]:6.2f} {mins[n] / mins[b]:6.2f}"
              f" {cmed[n] / cmed[b]:6.2f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": os.path.basename(a.model), "threads": a.threads,
                       "mode": os.environ.get("GGML_CPU_VERIFY_KERNELS", ""), "ms": times, "cpu_ms": cpu,
                       "v_median": {n: med[n] / med[b] for n in sizes}, "v_min": {n: mins[n] / mins[b] for n in sizes},
                       "v_cpu": {n: cmed[n] / cmed[b] for n in sizes}}, f, indent=1)
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
