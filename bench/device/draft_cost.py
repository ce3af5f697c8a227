# What one draft decode of the engine costs on the GPU, from the host and (under Nsight Compute) in
# kernels: the companion of step_cost.py, which times the target's decodes.
#
#     python3 bench/device/draft_cost.py [MODEL.gguf] --json draft.json        # timing, k = 1..4
#     ncu --profile-from-start off --csv --page raw --metrics gpu__time_duration.sum \
#         python3 bench/device/draft_cost.py --ncu-phase 1 > d1.csv             # one 1-token draft
#
# A Model (the built-in one by default) answers a chat prompt with MTP at k=2, so the engine holds a
# real state (MTP KV, hidden states); then llama_mtp_peek_draft(k) drafts k tokens greedily from it, as a
# step's drafting does (the engine's draft decodes, its backend sampler where the MTP context runs on a
# GPU), and drops the rows again. Its wall time is k draft decodes plus the removal of k KV rows (host
# bookkeeping); D_k - D_{k-1} is one chained draft decode.
import argparse
import ctypes as C
import json
import statistics
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model", nargs="?", default=None, help="a .gguf model (default: the built-in one)")
    ap.add_argument("--mtp-head", default=None)
    ap.add_argument("--ks", default="1,2,3,4", help="draft lengths to time (default 1..4)")
    ap.add_argument("--reps", type=int, default=64, help="timed peeks per length (default 64)")
    ap.add_argument("--ngl", type=int, default=99)
    ap.add_argument("--ncu-phase", type=int, default=0,
                    help="profile one peek of this many drafts between cuProfilerStart/Stop (under ncu)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import pymtp
    from pymtp._native import llama as L

    m = pymtp.Model(a.model, n_gpu_layers=a.ngl, n_draft=4, mtp_head=a.mtp_head)
    r = m.chat([{"role": "user", "content": "Explain how a bicycle stays upright, in a few paragraphs."}],
               max_tokens=160, n_draft=2)
    lib, eng = L.lib(), m.rt.engine
    out = (L.llama_token * 8)()

    def peek(k: int) -> float:
        t0 = time.perf_counter()
        n = lib.llama_mtp_peek_draft(eng, -1, k, out, None)
        t1 = time.perf_counter()
        if n != k:
            raise SystemExit(f"peek_draft({k}) returned {n}")
        return (t1 - t0) * 1e3

    if a.ncu_phase:
        cuda = C.CDLL("libcuda.so.1")
        for _ in range(6):                    # warm: graphs built and captured
            peek(a.ncu_phase)
        cuda.cuProfilerStart()
        peek(a.ncu_phase)
        cuda.cuProfilerStop()
        return 0

    ks = [int(s) for s in a.ks.split(",")]
    res = {}
    for k in ks:
        for _ in range(6):
            peek(k)
        t = [peek(k) for _ in range(a.reps)]
        res[k] = {"median_ms": statistics.median(t), "min_ms": min(t)}
    print(f"generated {r.stats.n_generated} tokens, k=2: drafted {r.stats.n_drafted}, accepted {r.stats.n_accepted}")
    print(f"{'k':>3} {'median ms':>10} {'min ms':>8} {'per draft':>10}")
    prev = 0.0
    for k in ks:
        print(f"{k:3d} {res[k]['median_ms']:10.3f} {res[k]['min_ms']:8.3f} {res[k]['median_ms'] - prev:10.3f}")
        prev = res[k]["median_ms"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"peek": res}, f, indent=1)
    m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
