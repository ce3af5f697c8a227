#!/usr/bin/env python3
"""Does a grafted head accept in the engine what it agrees with in training? (issue 17)

Greedy answers to MT-Bench first turns are generated through the engine with the head at k=1 (its
position-1 acceptance a1 recorded); then, on exactly those token sequences, the head is run
teacher-forced twice: in llama.cpp's MTP context (the trunk's own hidden states) and in torch
(pymtp.graft's BaseModel + MTPHead: what training optimised). For each it prints the top-1
agreement with the text over every generated row, and over the rows a k=1 run drafts at (a draft
accepted skips the next row), which must reproduce the engine's a1. It also prints how often torch's
trunk argmax equals llama.cpp's greedy token (the teacher training used against the one the engine
verifies with), and the torch head's agreement with each.

    python bench/head_agreement.py [--mtp-head HEAD] [--limit 8] [-n 192] [--threads 2]

Equal numbers in every line mean the engine runs the head exactly as trained: what the head loses
on MT-Bench against its validation agreement is then the data, not the engine.
"""

from __future__ import annotations

import argparse
import sys


def generate(base: str, head: str, prompts: list, n: int, threads) -> tuple[list, float, int]:
    """[(prompt tokens, generated tokens)], the engine's k=1 acceptance and its number of drafts."""
    import pymtp

    seqs, acc, dra = [], 0, 0
    with pymtp.Model(base, mtp="on", n_draft=1, mtp_head=head, n_threads=threads) as m:
        for p in prompts:
            c = m.chat([{"role": "user", "content": p}], max_tokens=n, draft="greedy")
            acc += c.stats.accepted_per_position[0]
            dra += c.stats.drafted_per_position[0]
            seqs.append((list(c.prompt_tokens), list(c.tokens)))
    return seqs, acc / max(dra, 1), dra


def native_argmax(base: str, head: str, seqs: list, threads) -> list:
    """llama.cpp, teacher-forced (pymtp.graft.check.llama_cpp_head_rows): the head's argmax per row."""
    from pymtp.graft.check import llama_cpp_head_rows

    ref = llama_cpp_head_rows(base, head, [p + g for p, g in seqs], 1, threads)
    return [per_head[0][0].argmax(-1) for _, per_head in ref]


def torch_argmax(base: str, head: str, seqs: list) -> tuple[list, list]:
    """torch, teacher-forced as in training (pymtp.graft.check.torch_head_rows): (the head's argmax per
    row, the trunk's argmax per row)."""
    from pymtp.graft.check import torch_head_rows
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel, MTPHead

    bg = load_base(base, with_sha=False)
    trunk, mtp = BaseModel(bg), MTPHead.from_gguf(bg.hparams, head)
    heads, trunks = [], []
    for p, g in seqs:
        _, trunk_logits, outs = torch_head_rows(trunk, [mtp], p + g)
        heads.append(outs[0][0].argmax(-1))
        trunks.append(trunk_logits.argmax(-1))
    return heads, trunks


def agreement(seqs: list, preds: list) -> tuple[float, float]:
    """(agreement with the text over every generated row, over the rows a k=1 run drafts at). Row r
    (entry (x_r, h_{r-1})) predicts token r+1."""
    all_hit = all_n = vis_hit = vis_n = 0
    for (prompt, gen), pred in zip(seqs, preds):
        seq = prompt + gen
        for r in range(len(prompt), len(seq) - 1):
            all_hit += int(pred[r] == seq[r + 1])
            all_n += 1
        r = len(prompt)
        while r < len(seq) - 1:
            ok = pred[r] == seq[r + 1]
            vis_hit, vis_n = vis_hit + int(ok), vis_n + 1
            r += 2 if ok else 1
    return all_hit / max(all_n, 1), vis_hit / max(vis_n, 1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None, help="base GGUF (default: the built-in model)")
    ap.add_argument("--mtp-head", default=None, help="head GGUF (default: the built-in model's shipped head)")
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--limit", type=int, default=8)
    ap.add_argument("-n", type=int, default=192)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    from pathlib import Path

    from pymtp.bench.prompts import load_prompts
    from pymtp.default_model import default_model_path, shipped_head_for

    base = args.model or str(default_model_path())
    head = args.mtp_head or shipped_head_for(Path(base))
    if head is None:
        ap.error(f"no head ships for {base}: pass --mtp-head")
    head = str(head)
    seqs, a1, n = generate(base, head, load_prompts(args.prompts)[: args.limit], args.n, args.threads)
    print(f"engine, k=1: a1 {a1:.4f} over {n} drafts")
    nat = native_argmax(base, head, seqs, args.threads)
    heads, trunks = torch_argmax(base, head, seqs)
    for name, preds in (("llama.cpp MTP context", nat), ("torch (training's forward)", heads)):
        every, visited = agreement(seqs, preds)
        print(f"{name:<28} every generated row {every:.4f}, rows a k=1 run drafts at {visited:.4f}")
    same, _ = agreement(seqs, trunks)          # the trunk's argmax against the engine's greedy text
    gen_rows = [(len(p), len(p) + len(g) - 1) for p, g in seqs]
    teacher = sum(int((h[a:b] == t[a:b]).sum()) for (a, b), h, t in zip(gen_rows, heads, trunks))
    rows = sum(b - a for a, b in gen_rows)
    print(f"torch trunk argmax == llama.cpp greedy token: {same:.4f}; torch head == torch trunk argmax: "
          f"{teacher / rows:.4f} ({rows} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
