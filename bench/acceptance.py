#!/usr/bin/env python3
"""Per-position acceptance of an MTP head on a prompt set (hardware-independent numbers).

One greedy run with MTP at draft length K gives the unconditional acceptance a_i of every
position i <= K (a draft at position i is reached only when 1..i-1 were accepted), hence the
mean accepted length AL(k) = 1 + a_1 + ... + a_k for every k <= K. Speed is not measured here:
use `pymtp bench` for ratios taken side by side.

    python bench/acceptance.py [MODEL] [--mtp-head HEAD] [--prompts mtbench] [-n 256] [-k 4]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import pymtp
from pymtp.bench.prompts import load_prompts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--mtp-head", default=None)
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    prompts = load_prompts(args.prompts)[: args.limit]
    acc = [0] * args.k
    dra = [0] * args.k
    steps = accepted = generated = 0
    t0 = time.time()
    with pymtp.Model(args.model, mtp="on", n_draft=args.k, mtp_head=args.mtp_head, n_threads=args.threads) as m:
        model_path, head_path = str(m.path), str(m.mtp_head)
        for i, text in enumerate(prompts):
            s = m.chat([{"role": "user", "content": text}], max_tokens=args.n, draft="greedy").stats
            for j, (a, d) in enumerate(zip(s.accepted_per_position, s.drafted_per_position)):
                acc[j] += a
                dra[j] += d
            steps += s.n_steps
            accepted += s.n_accepted
            generated += s.n_generated
            print(f"\r{i + 1}/{len(prompts)} prompts", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    a = [x / d if d else 0.0 for x, d in zip(acc, dra)]
    al = [1 + sum(a[:k]) for k in range(1, args.k + 1)]
    result = {"model": model_path, "head": head_path, "prompts": args.prompts, "n_prompts": len(prompts),
              "max_tokens": args.n, "k": args.k, "accept_per_position": a, "AL_by_k": al,
              "measured_AL_at_k": (accepted + steps) / steps if steps else 1.0, "n_generated": generated,
              "wall_s": time.time() - t0}
    print("position   " + "  ".join(f"{i + 1:>5}" for i in range(args.k)))
    print("acceptance " + "  ".join(f"{x:5.3f}" for x in a))
    print("AL(k)      " + "  ".join(f"{x:5.2f}" for x in al))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
