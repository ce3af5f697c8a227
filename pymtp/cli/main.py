"""The `pymtp` command: argument parsing, dispatch, and the one place errors become exit codes.

Exit codes: 0 ok, 1 error (one line `pymtp: error: ...` on stderr), 2 usage
error (argparse), 130 interrupted with Ctrl-C.
"""

from __future__ import annotations

import argparse
import os
import sys

from pymtp.cli import bench, chat, common, generate, graft, info, rpc_server, serve, trim
from pymtp.errors import PymtpError

SUBCOMMANDS = (info, generate, chat, serve, bench, graft, trim, rpc_server)

DESCRIPTION = """\
pymtp: fast local text generation for GGUF models with multi-token prediction
(MTP) speculative decoding. Models that ship MTP layers (GLM-4.x MoE,
DeepSeek-V3, Qwen3-Next, MiMo, ...) draft several tokens per step with them and
verify the draft in one batch - same output, fewer forward passes.

MODEL is a .gguf file; leave it out to use the built-in SmolLM2-135M-Instruct
(downloaded once, ~100 MB, into $PYMTP_CACHE_DIR/models or ~/.cache/pymtp/models)."""

EPILOG = """\
examples:
  pymtp info model.gguf                      # will MTP run on this model?
  pymtp generate model.gguf -p "Once upon a time"
  pymtp generate --chat -p "Explain KV caches in one paragraph"
  pymtp chat model.gguf --system "Be brief."
  pymtp serve model.gguf --port 8080         # OpenAI-compatible server with MTP
  pymtp rpc-server -p 50052                  # lend this machine's devices to --rpc clients

run `pymtp COMMAND --help` for the options of each command."""


def package_version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("pymtp")
    except PackageNotFoundError:  # running from a source checkout
        import pymtp

        return getattr(pymtp, "__version__", "unknown")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pymtp", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=common.HelpFormatter)
    parser.add_argument("--version", action="version", version=f"pymtp {package_version()}")
    common.add_debug_flag(parser, top_level=True)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def error(message: str) -> None:
    print(f"pymtp: error: {message}", file=sys.stderr)


def _silence_stdout() -> None:
    # After a broken pipe (`pymtp generate ... | head`), stop Python from
    # complaining again when it flushes stdout at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    passthrough: list[str] = []
    if "--" in argv:  # `pymtp serve ... -- ARGS`: ARGS go to llama-server as they are
        i = argv.index("--")
        argv, passthrough = argv[:i], argv[i + 1:]
    try:
        args = parser.parse_args(argv)
        if passthrough and not hasattr(args, "server_args"):
            parser.error(f"`-- {' '.join(passthrough)}`: only `pymtp serve` passes arguments on")
    except SystemExit as e:  # --help, --version, usage errors
        return e.code if isinstance(e.code, int) else 2
    if hasattr(args, "server_args"):
        args.server_args = passthrough
    try:
        return args.handler(args)
    except KeyboardInterrupt:
        if args.debug:
            raise
        print(file=sys.stderr)
        error("interrupted")
        return 130
    except BrokenPipeError:
        if args.debug:
            raise
        _silence_stdout()
        return 1
    except PymtpError as e:
        if args.debug:
            raise
        error(str(e))
        return 1
    except Exception as e:  # a bug, or an environment problem we did not foresee
        if args.debug:
            raise
        error(f"{type(e).__name__}: {e} (run with --debug for the traceback)")
        return 1


if __name__ == "__main__":
    sys.exit(main())
