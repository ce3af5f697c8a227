#!/usr/bin/env python3
"""Per-position acceptance of an MTP head on a prompt set (hardware-independent numbers).

MT-Bench first turns (or another --prompts set) with the model's chat template, greedy, through
pymtp.graft.acceptance.measure (what `pymtp graft` records on its held-out prompts): the
unconditional acceptance a_i of every draft position i <= K and AL(k) = 1 + a_1 + ... + a_k.
Speed is not measured here: use `pymtp bench` for ratios taken side by side.

    python bench/acceptance.py [MODEL] [--mtp-head HEAD] [--prompts mtbench] [-n 256] [-k 4] [--by-category]

--by-category (MT-Bench only) also reports each of its eight categories apart (writing, roleplay,
reasoning, math, coding, extraction, stem, humanities): where a head accepts less.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from pymtp.bench.prompts import load_prompts, mtbench_categories
from pymtp.graft.acceptance import measure


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
    ap.add_argument("--by-category", action="store_true",
                    help="MT-Bench: also report each category apart (from the same generations)")
    args = ap.parse_args()
    if args.by_category and args.prompts != "mtbench":
        ap.error("--by-category needs --prompts mtbench (the only set with categories)")

    prompts = [[{"role": "user", "content": t}] for t in load_prompts(args.prompts)[: args.limit]]
    t0 = time.time()
    groups = mtbench_categories()[: len(prompts)] if args.by_category else None
    got = measure(args.model, args.mtp_head, prompts, k=args.k, max_tokens=args.n, n_threads=args.threads,
                  on_prompt=lambda i, n: print(f"\r{i}/{n} prompts", end="", file=sys.stderr, flush=True),
                  groups=groups)
    print(file=sys.stderr)
    a, al = got.per_position, got.al_by_k
    result = {"model": args.model, "head": args.mtp_head, "prompts": args.prompts, "max_tokens": args.n,
              "k": args.k, **got.to_dict(), "wall_s": time.time() - t0}
    print("position   " + "  ".join(f"{i + 1:>5}" for i in range(args.k)))
    print("acceptance " + "  ".join(f"{x:5.3f}" for x in a))
    print("AL(k)      " + "  ".join(f"{x:5.2f}" for x in al))
    if args.by_category:
        result["by_category"] = {cat: r.to_dict() for cat, r in got.by_group.items()}
        for cat, r in got.by_group.items():
            print(f"{cat:<10} " + "  ".join(f"{x:5.3f}" for x in r.per_position) + f"   ({r.n_generated} tokens)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
