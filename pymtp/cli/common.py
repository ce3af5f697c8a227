"""Arguments, validation and model loading shared by the CLI subcommands."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from pymtp import options
from pymtp.errors import InvalidArgumentError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keep our hand-wrapped descriptions/epilogs; show defaults only where the help says so."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=32)


def add_debug_flag(parser: argparse.ArgumentParser, *, top_level: bool) -> None:
    # Accepted before and after the subcommand; SUPPRESS keeps a subcommand from
    # overwriting a top-level --debug with False.
    parser.add_argument("--debug", action="store_true",
                        default=False if top_level else argparse.SUPPRESS,
                        help="show the full traceback when something fails")


def add_model_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", nargs="?", default=None,
                        help="path to a .gguf model (default: the built-in SmolLM2-135M-Instruct, "
                             "downloaded on first use)")


def add_engine_args(parser: argparse.ArgumentParser, *, server: bool = False):
    """The engine options, one group for every command that runs a model: generate, chat and
    bench (in this process), and serve (``server=True``: they set llama-server's defaults for
    its requests, the context is per slot, and there is no --verbose). Returns the group, for a
    command's own extras (serve: --dry-run)."""
    requests = "; requests may {} with \"{}\"" if server else ""
    g = parser.add_argument_group("engine")
    g.add_argument("--mtp", choices=options.MTP_MODES, default=options.DEFAULT_MTP,
                   help=f"{options.MTP_HELP} (default: {options.DEFAULT_MTP})")
    g.add_argument("--mtp-head", default=None, metavar="FILE",
                   help="head-only GGUF with the MTP layer(s) for a model that has none, e.g. made by "
                        "`pymtp graft` (default: MODEL's <stem>.mtp.gguf when it exists, or the built-in "
                        "model's shipped head)")
    g.add_argument("--n-draft", type=str, default=options.DEFAULT_N_DRAFT, metavar="auto|K",
                   help=f"{options.N_DRAFT_HELP}{requests.format('lower it', 'mtp_n_draft')} "
                        f"(default: {options.DEFAULT_N_DRAFT})")
    g.add_argument("--draft", choices=options.DRAFT_CHOICES, default=options.DEFAULT_DRAFT,
                   help=f"{options.DRAFT_HELP}{requests.format('choose', 'mtp_draft')} "
                        f"(default: {options.DEFAULT_DRAFT})")
    g.add_argument("--heads", choices=tuple(options.HEAD_POLICIES), default=options.DEFAULT_HEADS,
                   help=f"{options.HEADS_HELP}{requests.format('choose', 'mtp_heads')} "
                        f"(default: {options.DEFAULT_HEADS})")
    g.add_argument("--ctx", type=int, default=4096, metavar="N",
                   help=f"context window{' per slot' if server else ''} in tokens (default: 4096)")
    g.add_argument("--ngl", type=int, default=0, metavar="N",
                   help="layers to offload to the GPU, -1 = all (default: 0)")
    g.add_argument("--threads", type=int, default=None, metavar="N",
                   help="CPU threads (default: chosen by llama.cpp)")
    g.add_argument("--rpc", default=None, metavar="HOST:PORT,...",
                   help="split the offloaded layers across these ggml-rpc-server processes (start one with "
                        "`ggml-rpc-server -p PORT` on each machine; with --ngl 0 all layers go to them)")
    if not server:
        g.add_argument("--verbose", action="store_true", help="show llama.cpp's log output")
    return g


def add_sampling_args(parser: argparse.ArgumentParser, *, default_n: int) -> None:
    g = parser.add_argument_group("sampling")
    g.add_argument("-n", "--max-tokens", dest="n", type=int, default=default_n, metavar="N",
                   help=f"maximum number of tokens to generate (default: {default_n})")
    g.add_argument("--temp", type=float, default=0.0, metavar="T",
                   help="temperature; 0 = greedy, deterministic (default: 0)")
    g.add_argument("--top-k", type=int, default=40, metavar="K", help="top-k sampling (default: 40)")
    g.add_argument("--top-p", type=float, default=0.95, metavar="P",
                   help="nucleus sampling (default: 0.95)")
    g.add_argument("--min-p", type=float, default=0.05, metavar="P",
                   help="min-p sampling (default: 0.05)")
    g.add_argument("--repeat-penalty", type=float, default=1.0, metavar="R",
                   help="repetition penalty, 1 = off (default: 1.0)")
    g.add_argument("--seed", type=int, default=None, metavar="S",
                   help="sampling seed (default: random)")
    g.add_argument("--stop", action="append", default=None, metavar="STR",
                   help="stop when this text is generated (repeatable; \\n and \\t are understood)")


def check(ok: bool, message: str) -> None:
    """A command-line value out of range: a clear error (exit 2 through main), nothing done."""
    if not ok:
        raise InvalidArgumentError(message)


def validate_args(args: argparse.Namespace) -> None:
    """Reject out-of-range values before anything slow happens."""
    try:
        args.n_draft = options.DraftLength.parse(args.n_draft)   # typed from here on down to the engine
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"--n-draft: {e}") from None
    check(args.ctx >= 1, f"--ctx must be >= 1 (got {args.ctx})")
    check(args.threads is None or args.threads >= 1, f"--threads must be >= 1 (got {args.threads})")
    check(args.ngl >= -1, f"--ngl must be >= -1 (got {args.ngl})")
    check(args.n >= 1, f"-n must be >= 1 (got {args.n})")
    check(args.temp >= 0, f"--temp must be >= 0 (got {args.temp})")
    check(args.top_k >= 0, f"--top-k must be >= 0 (got {args.top_k})")
    check(0 <= args.top_p <= 1, f"--top-p must be in 0..1 (got {args.top_p})")
    check(0 <= args.min_p <= 1, f"--min-p must be in 0..1 (got {args.min_p})")
    check(args.repeat_penalty > 0, f"--repeat-penalty must be > 0 (got {args.repeat_penalty})")
    check(not args.stop or all(args.stop), "--stop must not be empty")


def resolve_model_path(model_arg: str | None) -> Path:
    """The model the user named, or the built-in default (announced on stderr)."""
    if model_arg is not None:
        from pymtp.gguf_meta import check_gguf_path

        return check_gguf_path(model_arg)
    from pymtp import default_model

    path = default_model.default_model_path(progress=True)
    print(f"using built-in default model {default_model.DEFAULT_MODEL_NAME} ({path})", file=sys.stderr)
    return path


def model_class():
    """The engine class, imported lazily (tests replace this function)."""
    from pymtp.model import Model

    return Model


def load_model(args: argparse.Namespace):
    """Open the model named by ``args`` with the engine settings from the command line."""
    path = resolve_model_path(args.model)
    kwargs = {}
    if getattr(args, "mtp_head", None) is not None:
        kwargs["mtp_head"] = Path(args.mtp_head)
    if getattr(args, "rpc", None) is not None:
        kwargs["rpc"] = args.rpc
    model = model_class()(
        path,
        n_ctx=args.ctx,
        n_gpu_layers=args.ngl,
        n_threads=args.threads,
        mtp=args.mtp,
        n_draft=args.n_draft,
        heads=getattr(args, "heads", options.DEFAULT_HEADS),
        verbose=args.verbose,
        **kwargs,
    )
    if args.mtp == options.MTP_AUTO and not model.mtp_enabled:
        print(f"pymtp: MTP off: {model.mtp_reason}", file=sys.stderr)
    return model


def sampling_kwargs(args: argparse.Namespace) -> dict:
    """Keyword arguments for Model.generate() from the sampling flags."""
    return dict(
        max_tokens=args.n,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        repeat_penalty=args.repeat_penalty,
        seed=args.seed,
        stop=[unescape(s) for s in args.stop] if args.stop else None,
        draft=getattr(args, "draft", options.DEFAULT_DRAFT),
    )


def unescape(text: str) -> str:
    """Turn the two-character sequences \\n, \\t and \\\\ typed on a command line into real characters."""
    return re.sub(r"\\([nt\\])", lambda m: {"n": "\n", "t": "\t", "\\": "\\"}[m.group(1)], text)


def dim(text: str, stream) -> str:
    """Wrap ``text`` in the ANSI 'dim' style when ``stream`` is a colour-capable terminal."""
    if os.environ.get("NO_COLOR") or not getattr(stream, "isatty", lambda: False)():
        return text
    return f"\033[2m{text}\033[0m"
