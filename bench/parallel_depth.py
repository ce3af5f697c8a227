#!/usr/bin/env python3
"""Would a second block lift a parallel head's later mask rows? A torch-only experiment (issue 18).

A parallel head drafts K tokens in one pass of one block: mask row i attends to the real rows and to
the pass's earlier mask rows, but in one block it reads their *inputs* (keys and values come before
the FFN), never what they drafted. Its position-3 acceptance stays at ~0.03 whatever the recipe
(docs/journal/2026-11-29-parallel-head-training.md, "Training levers for the mask rows"). With a second block,
row i's attention
there reads row i-1's first-block output, the state its draft comes from.

This trains such a head with pymtp graft's own pipeline (data, hidden cache, distillation loss,
schedule, validation): `pymtp graft`'s arguments, `--parallel K` included, plus --depth 2 (the second
block starts as the identity: a copy of the first with attn_output and ffn_down zeroed). Nothing is
written as GGUF (the native engine drafts with one block): the trained head is saved as a torch
state dict (-o's name with .pt), the comparison as JSON (--report). --eval-head NAME=HEAD.gguf
measures trained heads on the same validation set, teacher-forced, K entries each (a sequential
head chained K steps), so the new head's per-entry `in_a_row` (the share of positions where every
entry up to it agrees with the base: what greedy drafting accepts) is read against theirs.

    python bench/parallel_depth.py BASE.gguf -o deep.pt --parallel 4 --depth 2 --samples 10000 \\
        --steps 3000 --no-features --check-prompts 0 --eval-head seq=seq.gguf --eval-head par4=par4.gguf
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pymtp.cli import graft as graft_cli  # noqa: E402


def deepen(head, depth: int):
    """Give a parallel MTPHead depth - 1 more blocks, each starting as the identity."""
    import torch

    from pymtp.graft.torch_model import Block

    extra = []
    for _ in range(depth - 1):
        t = {s: head.block.w(s).detach().clone() for s in head.block.suffixes}
        for s in ("attn_output.weight", "ffn_down.weight"):
            t[s] = torch.zeros_like(t[s])
        extra.append(Block(head.hp, t, trainable=True))
    head.extra_blocks = torch.nn.ModuleList(extra)
    head.__class__ = type("DeepParallelHead", (head.__class__,), {"parallel_forward": _deep_parallel_forward})
    return head


def _deep_parallel_forward(self, emb, h_prev, cos, sin) -> list:
    """MTPHead.parallel_forward through every block: block b's entry i attends to the real entries' and the
    pass's entries 1..i block-b keys and values (computed from their block-(b-1) outputs)."""
    from pymtp.graft.torch_model import parallel_block, rms_norm

    xs = self.parallel_rows(emb, h_prev)
    for blk in [self.block, *self.extra_blocks]:
        xs = parallel_block(blk, xs, cos, sin)
    return [rms_norm(x, self.shared_head_norm, self.hp.rms_eps) for x in xs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    graft_cli.register(sub)
    p = sub.choices["graft"]
    p.add_argument("--depth", type=int, default=2, help="blocks of the parallel pass (default 2)")
    p.add_argument("--eval-head", action="append", default=[], metavar="NAME=HEAD.gguf",
                   help="a trained head to measure on the same validation set")
    args = ap.parse_args(["graft", *(argv if argv is not None else sys.argv[1:])])
    graft_cli.validate(args)
    if not args.parallel:
        ap.error("--parallel K is needed")
    evals = [e.split("=", 1) for e in args.eval_head]
    out = Path(args.output)
    base = graft_cli.common.resolve_model_path(args.model)
    tok = graft_cli.open_tokenizer(base, args)

    import torch

    from pymtp.graft import train
    from pymtp.graft.data import GenConfig

    job = train.GraftJob(
        base=Path(base), out=out.with_suffix(".unused.gguf"),
        train=train.TrainConfig(steps=args.steps, batch=args.batch, seq_len=args.seq_len, lr=args.lr,
                                seed=args.seed, device=args.device, chain=1, parallel=args.parallel,
                                init=args.init, ce_weight=args.ce_weight, cache_gb=args.cache_gb,
                                threads=args.threads, loss_positions=args.loss_positions,
                                features=args.features, step_weights=args.step_weights),
        gen=GenConfig(samples=args.samples, gen_tokens=args.gen_tokens, seed=args.seed,
                      greedy_frac=args.greedy_frac, self_prompts=args.self_prompts),
        corpus=[Path(f) for f in args.corpus], data_cache=args.data_cache, gen_batch=args.gen_batch,
        progress=not args.quiet, tokenizer=tok, check_prompts=0)
    result = {"depth": args.depth, "parallel": args.parallel, "steps": args.steps, "heads": {}}

    build, run_train, write_head = train._build_models, train._train, train._write_head

    def build_deep(job_, device, log):
        base_g, base_m, inits = build(job_, device, log)
        deepen(inits[0], args.depth)
        log(f"parallel head of {args.depth} blocks, {sum(p.numel() for p in inits[0].parameters())} parameters")
        return base_g, base_m, inits

    def train_then_compare(job_, dist, hid, data, opt, ckpt, state, val_idx, n_heads, log):
        wall = run_train(job_, dist, hid, data, opt, ckpt, state, val_idx, n_heads, log)
        batch = max(job_.train.batch, 1)
        result["heads"][f"depth{args.depth}"] = train.evaluate(dist, hid, val_idx, batch)
        result["history"] = state.history
        result["train_wall_s"] = wall
        hp = dist.base.hp
        for name, path in evals:
            head = train.MTPHead.from_gguf(hp, path).to(dist.device)
            cfg = dataclasses.replace(job_.train, chain=1 if head.parallel else args.parallel)
            d = train.Distiller(dist.base, head, cfg, dist.device, dist.autocast)
            result["heads"][name] = train.evaluate(d, hid, val_idx, batch)
            log(f"{name}: in a row " + " / ".join(f"{s['in_a_row']:.3f}" for s in result["heads"][name]["per_step"]))
        torch.save(dist.head.state_dict(), out.with_suffix(".pt"))
        return wall

    train._build_models, train._train = build_deep, train_then_compare
    train._write_head = lambda *a, **k: []            # a deep head has no GGUF form
    try:
        train.graft(job)
    finally:
        # graft's own steps back (a caller in the same process, e.g. a test session, grafts as usual)
        train._build_models, train._train, train._write_head = build, run_train, write_head
        tok.close()
        job.ckpt_path.unlink(missing_ok=True)     # graft's checkpoint: this run cannot be resumed
    for name, v in result["heads"].items():
        print(f"{name:>10}: in a row " + " / ".join(f"{s['in_a_row']:.3f}" for s in v["per_step"])
              + "   agree " + " / ".join(f"{s['agree']:.3f}" for s in v["per_step"]))
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
