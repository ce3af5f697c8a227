"""Build and run the adaptive controller's simulator (controller_sim.cpp) on a machine described by
key=value settings; prints its JSON, or a table with --table.

    python bench/controller_sim/run.py                        # the H100 27B shape as measured
    python bench/controller_sim/run.py --preset smol-h100 --table
    python bench/controller_sim/run.py switch_ms=0 v=1,1.45,1.5,1.6 --table
    python bench/controller_sim/run.py prompt=128 new_size_ms=6 trace=/tmp/sim.tsv --table   # as the H100 traced it

The real controller (native/engine/mtp-adaptive*.cpp, CONTROLLER_SOURCES) is compiled in; only the machine
is simulated, so a change to the controller can be tried on the shapes that the device measured, in seconds
and without its noise. Speed claims still come from `pymtp bench` on the device."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# the adaptive controller's sources (native/engine/mtp-adaptive.h lists its parts; native/CMakeLists.txt builds them)
CONTROLLER_SOURCES = ("mtp-adaptive.cpp", "mtp-adaptive-cost.cpp", "mtp-adaptive-acceptance.cpp",
                      "mtp-adaptive-planner.cpp", "mtp-adaptive-supervisor.cpp")

# Machines as measured (docs/adaptive.md, "Diagnosing it", lists each source): the H100 with the qwen35 27B
# shape (V(n) of the target's
# own forward from step_cost.py, D 0.07-0.08 plain steps, a size change 4-6 ms of host time), the
# built-in SmolLM2 on the H100 (pymtp bench: D 0.18-0.21, V(2) 1.19, acceptance of the shipped head),
# the built-in model on this 2-core CPU (D 0.33, V(2) 1.7, a size change ~2 ms), and a 2-core CPU
# where drafting loses by more (V(2) ~1.8, D 0.12 of a larger model).
PRESETS = {
    "27b-h100": [],
    "smol-h100": ["plain_ms=1.25", "v=1,1.2,1.35,1.5,1.65,1.8,1.95,2.1,2.25", "sample_ms=0.02", "switch_ms=0.5",
                  "draft_ms=0.25", "row_ms=0.01", "catchup_ms=0.2", "hidden_ms=0.03", "rates=0.57,0.2,0.07,0.02",
                  "tokens=4096"],
    # the built-in model on the H100 with the v3 head (2026-11-26 trace, docs/results/adaptive-2026-11-26-h100):
    # a verify nearly flat from 2 rows on, a size change ~1-2 ms, v3's acceptance, answers easier or harder
    "smol-v3-h100": ["plain_ms=1.25", "v=1,1.14,1.2,1.22,1.25,1.28,1.31,1.34,1.37", "sample_ms=0.02",
                     "switch_ms=1.2", "draft_ms=0.25", "row_ms=0.01", "catchup_ms=0.2", "hidden_ms=0.03",
                     "rates=0.62,0.38,0.25,0.18,0.13,0.09,0.06,0.04", "acc_spread=0.35", "acc_seg=150",
                     "prompt=192", "tokens=3072"],
    # the same at T=0.7 as the H100 measured it on 2026-11-26 night (docs/results/adaptive-2026-11-26-night:
    # stochastic drafts D 0.31-0.33, V(2) 1.25, acceptance 0.57 / 0.34; fixed k=1 0.91x, k=2 0.90x), with
    # the stalls its trace showed (0.8% of plain decodes 2-15x their median, +2.5 ms on average)
    "smol-v3-h100-t07": ["plain_ms=1.25", "v=1,1.25,1.35,1.4,1.45,1.5,1.55,1.6,1.65", "sample_ms=0.02",
                         "switch_ms=1.2", "draft_ms=0.4", "row_ms=0.01", "catchup_ms=0.2", "hidden_ms=0.03",
                         "rates=0.57,0.34,0.2,0.12,0.07", "acc_spread=0.35", "acc_seg=150", "prompt=192",
                         "tokens=15360", "cold_ms=1.6", "wake_target_ms=3", "spike_p=0.008", "spike_ms=2.5"],
    # the built-in model with v3 on the H200/H100 as the 2026-11-27 traces measured it per draft length
    # (docs/results/gpu-2026-11-27c: target decodes 1.28 ms plain, 1.51-1.80 for 2-8 rows and 3.7 for 9, one
    # past the mat-vec path's 8 columns; drafts ~0.19 ms; catch-ups ~0.17; S ~1.4-1.9 ms), 24 answers of 192
    # tokens, and every graph re-captured at each 256-cell step of the KV window and each new answer (patch
    # 0018: one slow decode). Fixed k=3 1.09x of MTP off, k=2 1.07x, auto 0.94 of k=3 over 100 seeds: the
    # device's gap (interleaved, auto 0.86-0.96 of fixed k=2), which the presets above miss
    "smol-v3-h200": ["plain_ms=1.25", "sample_ms=0.02", "v=1,1.18,1.25,1.25,1.3,1.3,1.38,1.38,2.9", "draft_ms=0.19",
                     "catchup_ms=0.17", "row_ms=0.005", "hidden_ms=0.03", "switch_ms=1.6", "back_ms=1",
                     "caller_ms=0.04", "rates=0.62,0.38,0.25,0.18,0.13,0.09,0.06,0.04", "acc_spread=0.35",
                     "acc_seg=150", "prompt=192", "tokens=4608", "new_size_ms=3", "capture_ms=2", "cold_ms=2",
                     "wake_target_ms=2", "jitter=0.05", "recapture_ms=2.5"],
    # the built-in model with head v4 on an H200 after patch 0031 (2026-11-28, sixth session,
    # docs/results/gpu-2026-11-28f): a verify of 2-3 rows costs a plain step (the vector kernels per row), drafts
    # ~0.23 ms, a change of decode size ~0.5 ms, the KV window in steps of 1024 cells (patch ed903d5); fixed
    # k=1 1.35x of MTP off, k=2 1.38x, auto 1.33x at T=0 (16 answers x 192)
    "smol-v4-h200": ["plain_ms=1.2", "sample_ms=0.02", "v=1,1.01,1.04,1.21,1.27,1.35,1.43,1.52,2.9", "draft_ms=0.23",
                     "catchup_ms=0.04", "row_ms=0.005", "hidden_ms=0.03", "switch_ms=0.5", "back_ms=0.1",
                     "caller_ms=0.03", "rates=0.66,0.40,0.25,0.17,0.12,0.08,0.05,0.03", "acc_spread=0.35",
                     "acc_seg=150", "prompt=192", "tokens=3072", "new_size_ms=3", "capture_ms=2", "cold_ms=2",
                     "wake_target_ms=2", "jitter=0.05", "recapture_ms=2.5", "window=1024"],
    # the same machine with the parallel head par4w (issue 18; 2026-11-29,
    # docs/results/parallel-heads/h200-2026-11-29b): one pass drafts up to 4 tokens, its 1-4 rows
    # 0.205 / 0.250 / 0.320 / 0.381 of a 1.265 ms plain step, the head's acceptance by position
    # 0.56 / 0.20 / 0.04 / 0.005; fixed k=1 1.27x of MTP off, k=2 1.28x, k=3 1.11x
    "smol-par4w-h200": ["plain_ms=1.265", "sample_ms=0.02", "v=1,1.01,1.04,1.21,1.27,1.35,1.43,1.52,2.9",
                        "draft_ms=0.26", "par=4", "par_row_ms=0.074", "catchup_ms=0.04", "row_ms=0.005",
                        "hidden_ms=0.03", "switch_ms=0.5", "back_ms=0.1", "caller_ms=0.03",
                        "rates=0.56,0.20,0.04,0.005", "acc_spread=0.35", "acc_seg=150", "prompt=192",
                        "tokens=3072", "new_size_ms=3", "capture_ms=2", "cold_ms=2", "wake_target_ms=2",
                        "jitter=0.05", "recapture_ms=2.5", "window=1024"],
    "smol-cpu": ["gpu=0", "plain_ms=11", "v=1,1.7,2.3,2.9,3.5,4.1,4.7,5.3,5.9", "sample_ms=0.05", "switch_ms=2",
                 "draft_ms=3.6", "row_ms=0.3", "catchup_ms=1", "async_share=0", "hidden_ms=0.2", "cold_ms=5",
                 "rates=0.58,0.2,0.07,0.02", "tokens=4096"],
    # Gemma 3 270M (Q4_K_M, 262144-token vocabulary) on this 2-core CPU with an 8192-token draft vocabulary
    # and patch 0028 (2026-11-27, docs/results/trimmed-greedy-2026-11-27/gemma): D 0.07, V(2) 1.25, V(3) 1.45,
    # V(4) 1.8, the real head's acceptance simulated as in its bench (--synthetic-rates 0.51,0.30), eight
    # 128-token answers: fixed k=1 ran 1.10-1.15x of MTP off, k=2 1.09-1.10x, auto 1.00-1.12x
    "gemma-cpu": ["gpu=0", "plain_ms=25", "v=1,1.25,1.45,1.8,2.2,2.6,3.0,3.4,3.8", "sample_ms=0.1", "switch_ms=1",
                  "draft_ms=1.8", "row_ms=0.3", "catchup_ms=0.5", "async_share=0", "hidden_ms=0.3", "cold_ms=4.3",
                  "cold_n=1", "rates=0.51,0.30", "prompt=128", "tokens=1024", "jitter=0.06"],
    # the same CPU with the head trained on an H200 (2026-11-27, docs/results/gemma-head-2026-11-27): the
    # base model's own looping text, MT-Bench acceptance 0.86 / 0.76 / 0.69 / 0.64, verify costs from
    # step_cost.py (steep from 4 rows); fixed k=3-4 ran 1.59-1.68x of MTP off, auto 1.48-1.58x
    "gemma-h1-cpu": ["gpu=0", "plain_ms=24", "v=1,1.27,1.44,1.85,2.2,2.5,2.9,3.4,4.6", "sample_ms=0.1",
                     "switch_ms=1", "draft_ms=1.6", "row_ms=0.3", "catchup_ms=0.5", "async_share=0",
                     "hidden_ms=0.3", "cold_ms=4.3", "cold_n=1", "rates=0.87,0.76,0.67,0.61,0.55,0.5,0.46,0.42",
                     "acc_spread=0.2", "acc_seg=100", "prompt=128", "tokens=1280", "jitter=0.06"],
    # the same head on an H200 (2026-11-27, docs/results/gemma-head-2026-11-27: fixed k=1..4 1.05x, 1.17x, 1.27x,
    # 1.27x of MTP off, k=6 1.26x): a plain step 1.8 ms of launches, V(2..7) fitted to those runs (the first verify
    # row is dear: the 262144-token output layer), a change of decode size ~3 ms (verifies of alternating sizes
    # took 4-7 ms), drafts D 0.11-0.18; the default slept at 0.97x
    "gemma-h1-h200": ["plain_ms=1.8", "v=1,1.47,1.78,2.0,2.34,2.6,2.9,3.2,3.5", "sample_ms=0.02", "switch_ms=3",
                      "draft_ms=0.28", "row_ms=0.01", "catchup_ms=0.2", "hidden_ms=0.03", "cold_ms=6",
                      "new_size_ms=3", "capture_ms=2", "wake_target_ms=2", "jitter=0.05",
                      "rates=0.86,0.76,0.69,0.635,0.58,0.53,0.48,0.44", "acc_spread=0.2", "acc_seg=100", "prompt=128",
                      "tokens=2048"],
    # four llama-server slots of the built-in model with head v4 (8192 tokens) on an H200 as traced on 2026-11-28
    # (docs/results/server-slots-2026-11-28): the simulated slot among three plain ones; a plain batch 1.65 ms, one
    # slot's verify row takes it to 3.8 ms (2 rows ~3.9), a change of the batch's size ~9 ms (graphs captured
    # again), a draft decode 0.41 ms, as much as a slot's share of a plain batch: no draft can pay, and each
    # probe costs the other slots too. 24 answers of 128 tokens; the real head's rates
    "smol-v4-h200-4slots": ["load=4", "plain_ms=1.65", "sample_ms=0.0", "v=1,2.3,2.36,2.42,2.48,2.54,2.6,2.66,2.72",
                            "draft_ms=0.41", "catchup_ms=0.15", "row_ms=0.005", "hidden_ms=0.05", "switch_ms=9",
                            "back_ms=1", "caller_ms=0.4", "rates=0.61,0.37,0.24,0.17,0.12,0.08,0.05,0.03",
                            "acc_spread=0.35", "acc_seg=150", "prompt=128", "prefill_ms=0.3", "tokens=3072",
                            "new_size_ms=3", "capture_ms=2", "cold_ms=2", "wake_target_ms=2", "jitter=0.05"],
    "cpu-loses": ["gpu=0", "plain_ms=30", "v=1,1.8,2.6,3.4,4.2,5,5.8,6.6,7.4", "sample_ms=0.05", "switch_ms=1",
                  "draft_ms=3.5", "row_ms=1", "catchup_ms=1", "async_share=0", "hidden_ms=0.5"],
}
# gemma-h1-cpu at T=0.7: stochastic drafts (the MTP logits on the host: D 0.14), acceptance 0.81 / 0.65 / 0.55 /
# 0.47; fixed k=2 ran 1.36-1.40x, auto 1.03x (asleep) and 1.11x (a k=8 start, then ~190 vetoed steps). Later
# settings override earlier ones.
PRESETS["gemma-h1-cpu-t07"] = PRESETS["gemma-h1-cpu"] + ["draft_ms=3.4", "rates=0.81,0.65,0.55,0.47,0.4,0.34"]


def build(out_dir: Path | None = None) -> Path:
    """Compile the simulator with the engine's controller; returns the executable's path."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        raise RuntimeError("controller_sim: no C++ compiler (c++, g++ or clang++) on PATH")
    llama = REPO / "vendor" / "llama.cpp"
    if not (llama / "include" / "llama.h").is_file():
        raise RuntimeError(f"controller_sim: {llama} has no include/llama.h; build pymtp first (it fetches the tree)")
    out_dir = Path(out_dir or tempfile.mkdtemp(prefix="controller-sim-"))
    exe = out_dir / "controller_sim"
    cmd = [cxx, "-O2", "-std=c++17", f"-I{REPO / 'native' / 'engine'}", f"-I{REPO / 'native' / 'include'}",
           f"-I{llama / 'include'}", f"-I{llama / 'ggml' / 'include'}", str(HERE / "controller_sim.cpp"),
           *(str(REPO / "native" / "engine" / src) for src in CONTROLLER_SOURCES), "-o", str(exe)]
    subprocess.run(cmd, check=True)
    return exe


def simulate(settings: list[str], exe: Path | None = None) -> dict:
    exe = exe or build()
    r = subprocess.run([str(exe), *settings], capture_output=True, text=True)
    if r.returncode != 0:
        raise ValueError(r.stderr.strip() or f"controller_sim exited with {r.returncode}")
    return json.loads(r.stdout)


def table(res: dict) -> str:
    lines = [f"{'config':8} {'tok/ms':>8} {'speedup':>8} {'tok/step':>8}  steps per draft length"]
    for name, r in res["runs"].items():
        lines.append(f"{name:8} {r['tok_per_ms']:8.4f} {r['speedup']:7.3f}x {r['tokens_per_step']:8.2f}  "
                     f"{r['steps_per_k']}")
    best = max((r["speedup"], n) for n, r in res["runs"].items() if n.startswith("k="))
    auto = res["runs"]["auto"]["speedup"]
    lines.append(f"auto / best fixed ({best[1]}): {auto / best[0]:.3f}; controller: "
                 + json.dumps({k: v for k, v in res["auto"].items() if k != "est_target_ms"}))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="27b-h100",
                    help="a measured machine to start from (default: 27b-h100); settings after it override")
    ap.add_argument("--table", action="store_true", help="print a table instead of JSON")
    ap.add_argument("settings", nargs="*", metavar="KEY=VALUE",
                    help="plain_ms, v (V(1),V(2),..), sample_ms, switch_ms, draft_ms, row_ms, catchup_ms, "
                         "async_share, caller_ms, hidden_ms, cold_ms, cold_n, prompt, prefill_ms, new_size_ms, "
                         "capture_ms, gpu, jitter, acc_spread, acc_seg, hard_at, hard_tokens, hard_factor, "
                         "open_tokens, open_factor, ctx_loss, ctx_tau, wake_target_ms, "
                         "wake_target_n, rates, conf, load, cutoff, tokens, cap, max_k, seed, trace "
                         "(controller_sim.cpp says what each is)")
    args = ap.parse_args(argv)
    try:
        res = simulate(PRESETS[args.preset] + args.settings)
    except ValueError as e:
        ap.error(str(e))
    print(table(res) if args.table else json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
