#!/usr/bin/env python3
"""Parallel drafting heads against sequential ones, side by side in one run (issue 18).

Speed: MTP off and every head (NAME=HEAD.gguf) at each draft length, prompt by prompt in an order
rotated per prompt (machine drift hits all alike): tok/s and its ratio to MTP off, mean accepted
length, acceptance per position, draft decodes per step and the draft cost per drafting step as a
fraction of a plain step.

Draft cost (--draft-cost K): D_k, the draft time of a step drafting k tokens over a plain step, for
k = 1..K, every draft accepted (synthetic acceptance 1.0, so every step drafts k): a sequential
head runs k MTP decodes, a parallel one a single decode of k rows. Parallel heads are widened to K
rows with random mask rows for this (cost only: what they draft is not used). --random-mask NAME makes
head NAME parallel the same way even where it has no mask rows (a sequential or random head timed as
a parallel one, e.g. on a realistic shape); --rates R1,R2,.. accepts drafts at those synthetic rates
instead of always (speed at a given acceptance, the same for every head).

    python bench/parallel_heads.py BASE.gguf --head seq=seq.gguf --head par4=par4.gguf \\
        --prompts mtbench --limit 16 -n 128 --n-drafts 1,2,3,4,auto --threads 2
    python bench/parallel_heads.py BASE.gguf --head seq=seq.gguf --head par=par4.gguf --draft-cost 6
    python bench/parallel_heads.py dense-27b.gguf --head seq=H.gguf --head par=H.gguf --random-mask par \
        --draft-cost 6 --ngl 99 --limit 8 -n 128      # H: pymtp_devtools.realistic dense-27b --split-head

--host-argmax adds, for each parallel head, NAME@host: the same head with its MTP context made with
llama.cpp's default of one output per sequence (as another binding's would be), so the greedy argmax
of the pass's K rows runs on the host instead of where the logits are (A/B in one run).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import pymtp
from pymtp.bench.prompts import load_prompts

# numpy (and gguf) load after libllama: on the GPU box a libstdc++ loaded first breaks libllama's
# (bench/device/README.md); every function below runs after the first model is open


def widen(head: Path, k: int, out: Path) -> Path:
    """A copy of a head with k-1 mask rows: a parallel head's own first, then random N(0, 0.02) rows (a
    sequential head gets only random ones: it then drafts as a parallel head, for cost)."""
    import gguf
    import numpy as np

    from pymtp.graft.torch_model import MASK_SUFFIX
    from pymtp.graft.writer import copy_gguf

    r = gguf.GGUFReader(str(head))
    mask = next((t for t in r.tensors if t.name.endswith("." + MASK_SUFFIX)), None)
    if mask is not None:
        name, rows = mask.name, np.array(mask.data, dtype=np.float32).reshape(-1, int(mask.shape[0]))
    else:
        hnorm = next(t for t in r.tensors if t.name.endswith(".nextn.hnorm.weight"))
        name = hnorm.name.removesuffix("nextn.hnorm.weight") + MASK_SUFFIX
        rows = np.zeros((0, int(hnorm.shape[0])), np.float32)
    extra = np.random.default_rng(0).normal(0, 0.02, size=(max(0, k - 1 - len(rows)), rows.shape[1]))
    rows = np.vstack([rows, extra]).astype(np.float32)[: k - 1]
    return copy_gguf(head, out, tensors={name: (rows, None)})


def open_head(model: str, head: Path, host_argmax: bool = False, **common) -> pymtp.Model:
    """A Model drafting with head; host_argmax: its MTP context has room for one output per sequence."""
    if not host_argmax:
        return pymtp.Model(model, mtp="on", mtp_head=head, **common)
    from pymtp.engine import runtime

    room = runtime.mtp_outputs_per_seq
    runtime.mtp_outputs_per_seq = lambda lib, m: 1
    try:
        return pymtp.Model(model, mtp="on", mtp_head=head, **common)
    finally:
        runtime.mtp_outputs_per_seq = room


def is_parallel(head: Path) -> bool:
    import gguf

    return any(t.name.endswith(".nextn.hnorm.mask") for t in gguf.GGUFReader(str(head)).tensors)


def step_ms(stats) -> float:
    return stats.generate_ms / max(stats.n_generated, 1)


def run_configs(models: dict, configs: list, prompts: list, max_tokens: int) -> dict:
    """configs: [(name, model key, n_draft)]; returns {name: [Stats per prompt]}."""
    runs = {name: [] for name, _, _ in configs}
    for i, prompt in enumerate(prompts):
        rot = i % len(configs)
        for name, key, k in configs[rot:] + configs[:rot]:
            m = models[key]
            m.reset()
            kw = {} if k is None else {"n_draft": k}
            runs[name].append(m.generate(prompt, max_tokens=max_tokens, temperature=0.0, seed=i, **kw).stats)
        print(f"\r{i + 1}/{len(prompts)} prompts", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return runs


def summarize(stats: list, plain_ms: float) -> dict:
    import numpy as np

    gen = sum(s.n_generated for s in stats)
    ms = sum(s.generate_ms for s in stats)
    steps = sum(s.n_steps for s in stats)
    drafted = np.sum([np.pad(s.drafted_per_position, (0, 8 - len(s.drafted_per_position))) for s in stats], 0)
    accepted = np.sum([np.pad(s.accepted_per_position, (0, 8 - len(s.accepted_per_position))) for s in stats], 0)
    draft_steps = sum(s.drafted_per_position[0] if s.drafted_per_position else 0 for s in stats)
    draft_ms = sum(s.draft_ms for s in stats)
    n_pos = int(np.max(np.nonzero(drafted)[0]) + 1) if drafted.any() else 0
    return {
        "tok_s": 1000.0 * gen / ms if ms else 0.0,
        "al": gen / steps if steps else 1.0,
        "accept": [float(a / d) if d else 0.0 for a, d in zip(accepted[:n_pos], drafted[:n_pos])],
        "decodes_per_step": sum(s.n_draft_decodes for s in stats) / max(draft_steps, 1),
        "draft_cost": (draft_ms / draft_steps) / plain_ms if draft_steps and plain_ms else 0.0,
        "parallel": max((s.parallel for s in stats), default=0),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--head", action="append", required=True, metavar="NAME=HEAD.gguf")
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--n-drafts", default="1,2,3,4,auto")
    ap.add_argument("--draft-cost", type=int, default=0, metavar="K",
                    help="measure D_k for k = 1..K instead (every draft accepted)")
    ap.add_argument("--random-mask", action="append", default=[], metavar="NAME",
                    help="--draft-cost: time head NAME as a parallel head even without mask rows of its own")
    ap.add_argument("--rates", default=None, metavar="R1,R2,..",
                    help="--draft-cost: synthetic acceptance per position (default: every draft accepted)")
    ap.add_argument("--host-argmax", action="store_true",
                    help="also run each parallel head with the argmax of its rows on the host (NAME@host)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    heads = dict(h.split("=", 1) for h in args.head)
    if set(args.random_mask) - set(heads):
        ap.error(f"--random-mask names no --head: {', '.join(sorted(set(args.random_mask) - set(heads)))}")
    if (args.random_mask or args.rates) and not args.draft_cost:
        ap.error("--random-mask and --rates go with --draft-cost")
    rates = [float(r) for r in args.rates.split(",")] if args.rates else [1.0] * args.draft_cost
    prompts_text = load_prompts(args.prompts)[: args.limit]
    common = dict(n_ctx=2048, n_threads=args.threads, n_gpu_layers=args.ngl)
    tmp = Path(tempfile.mkdtemp(prefix="pymtp-par-"))
    models = {"off": pymtp.Model(args.model, mtp="off", **common)}
    prompts = [models["off"].chat_tokens([{"role": "user", "content": t}]) for t in prompts_text]
    configs = [("off", "off", None)]
    if args.host_argmax:  # (gguf is read after the first model is open)
        heads.update({f"{n}@host": p for n, p in list(heads.items()) if is_parallel(Path(p))})
    if args.draft_cost:
        ks = list(range(1, args.draft_cost + 1))
        for name, path in heads.items():
            path = Path(path)
            if name in args.random_mask or is_parallel(path):
                path = widen(path, args.draft_cost, tmp / f"{name}-wide.gguf")
            m = models[name] = open_head(args.model, path, name.endswith("@host"), **common)
            m.set_synthetic_acceptance(rates)
            configs += [(f"{name} k={k}", name, k) for k in ks]
    else:
        ks = [k if k == "auto" else int(k) for k in args.n_drafts.split(",")]
        for name, path in heads.items():
            host = name.endswith("@host")
            models[name] = open_head(args.model, path, host, **common)
            if "auto" in ks:
                models[name + ":auto"] = open_head(args.model, path, host, **common)
            configs += [(f"{name} k={k}", name + (":auto" if k == "auto" else ""), k) for k in ks]
    runs = run_configs(models, configs, prompts, args.n)
    plain_ms = sum(s.generate_ms for s in runs["off"]) / max(sum(s.n_generated for s in runs["off"]), 1)
    off_tok_s = 1000.0 / plain_ms
    rows = {}
    print(f"{'config':<14} {'tok/s':>7} {'x off':>6} {'AL':>5} {'dec/step':>8} {'D_step':>7}  accept/position")
    for name, _, _ in configs:
        r = rows[name] = summarize(runs[name], plain_ms)
        r["vs_off"] = r["tok_s"] / off_tok_s
        acc = " ".join(f"{a:.2f}" for a in r["accept"])
        print(f"{name:<14} {r['tok_s']:7.1f} {r['vs_off']:6.3f} {r['al']:5.2f} {r['decodes_per_step']:8.2f} "
              f"{r['draft_cost']:7.3f}  {acc}")
    for m in models.values():
        m.close()
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "plain_ms": plain_ms, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
