"""Position-1 acceptance of the same prompts under different engines: a fixed length, the default (auto),
and auto made to draft on every step or after a stretch of plain steps.

Why: at T=0.7 on the H100 the default's own drafts accepted 0.39-0.45 at position 1 where a fixed k=1 Model
in the same run accepted 0.59 (docs/journal/2026-11-28-gpu-catch-up-and-sampling.md, "What the default measures at
T=0.7"). A lower acceptance
in auto's drafts could have been a fault of its paths (the catch-up rows it defers while plain decoding leads,
the graphs of the sizes it switches between, the rows sampled on the backend) or of where it drafts (a few
dozen drafts, early in the first answers). This tells them apart: "auto-pin" is auto with its costs pinned so
that every step drafts, "auto-defer" decodes plainly for the first DEFER tokens of each answer (catch-up
deferred), then drafts on every step. Where those accept what the fixed length accepts, the paths are sound.

    python bench/accept_by_engine.py [--temp 0.7] [--limit 16] [-n 192] [--ngl 99] [--defer 40] [MODEL]

Run it once per environment to compare paths (e.g. PYMTP_VERIFY_ON_HOST=1 PYMTP_DRAFT_ON_BACKEND=0,
GGML_CUDA_DISABLE_GRAPHS=1): at the same seeds the drafts and their outcomes should not move. At T=0 it also
counts the answers whose text differs from MTP off's (on a CPU none; on a GPU, CUDA's kernels are not batch
invariant, docs/lossless.md).
"""

from __future__ import annotations

import argparse

from pymtp import Model
from pymtp.bench.prompts import load_prompts

# pinned costs (plain step, draft decode, each verified token beyond the first, ms): drafting or plain wins
DRAFT_WINS = (10.0, 0.01, 0.01)
PLAIN_WINS = (1.0, 5.0, 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--temp", type=float, default=0.7, help="temperature (default: 0.7); prompt i has seed i")
    ap.add_argument("--limit", type=int, default=16, help="MT-Bench first turns (default: 16)")
    ap.add_argument("-n", type=int, default=192, help="tokens per answer (default: 192)")
    ap.add_argument("--ngl", type=int, default=0, help="layers on the GPU (default: 0)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's)")
    ap.add_argument("--defer", type=int, default=40, help="auto-defer: plain tokens before it drafts (default: 40)")
    args = ap.parse_args()
    if args.limit < 1 or args.n < 2 or args.defer < 0:
        ap.error("--limit >= 1, -n >= 2 and --defer >= 0")

    kw = dict(n_gpu_layers=args.ngl, n_threads=args.threads)
    models = {"off": Model(args.model, mtp="off", **kw), "k=1": Model(args.model, n_draft=1, **kw),
              "auto": Model(args.model, n_draft="auto", **kw), "auto-pin": Model(args.model, n_draft="auto", **kw),
              "auto-defer": Model(args.model, n_draft="auto", **kw)}
    prompts = [models["off"].chat_tokens([{"role": "user", "content": p}])
               for p in load_prompts("mtbench")[:args.limit]]
    tally = {name: {"drafted": 0, "accepted": 0, "tokens": 0, "ms": 0.0, "unlike_off": 0} for name in models}
    for i, prompt in enumerate(prompts):
        texts = {}
        for name, m in models.items():
            m.reset()
            gen = dict(max_tokens=args.n, temperature=args.temp, seed=i, stream=True)
            if name != "off":
                gen.update(draft="auto", n_draft=1 if name == "k=1" else "auto")
            pin = m.rt.lib.llama_mtp_pin_adaptive_costs
            if name == "auto-pin":
                pin(m.rt.engine, *DRAFT_WINS)
            elif name == "auto-defer":
                pin(m.rt.engine, *PLAIN_WINS)
            stream = m.generate(prompt, **gen)
            for j, _ in enumerate(stream):
                if name == "auto-defer" and j == args.defer:
                    pin(m.rt.engine, *DRAFT_WINS)
            out = stream.result
            s, t = out.stats, tally[name]
            if s.drafted_per_position:
                t["drafted"] += s.drafted_per_position[0]
                t["accepted"] += s.accepted_per_position[0]
            t["tokens"] += s.n_generated
            t["ms"] += s.generate_ms
            texts[name] = out.text
        for name in models:
            tally[name]["unlike_off"] += texts[name] != texts["off"]
    print(f"T={args.temp}, {len(prompts)} MT-Bench first turns x {args.n} tokens")
    for name, t in tally.items():
        acc = f"{t['accepted']}/{t['drafted']} = {t['accepted'] / t['drafted']:.3f}" if t["drafted"] else "-"
        line = f"{name:10s} position 1 accepted {acc:22s} {1000 * t['tokens'] / t['ms']:8.1f} tok/s"
        if args.temp == 0:
            line += f"  answers unlike MTP off's: {t['unlike_off']} of {len(prompts)}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
