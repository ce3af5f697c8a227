"""`pymtp serve`: the bundled llama-server with MTP on, an OpenAI-compatible HTTP API."""

from __future__ import annotations

import argparse
import sys

from pymtp import options
from pymtp.cli import common

DESCRIPTION = """\
Serve a GGUF model over HTTP with the bundled llama-server (OpenAI-compatible
/v1/chat/completions and /v1/completions, plus llama.cpp's /completion,
/health and /metrics). When the model has MTP layers - or a head-only GGUF is
found (--mtp-head, MODEL's <stem>.mtp.gguf, or the head shipped with the
built-in model) - the server starts with --mtp: every request is drafted by the
MTP head and verified by the model, with the same output as without MTP.

With --n-draft auto (the default) each step drafts 0..{adaptive} tokens, as many
as the engine measures to pay for the number of busy slots; a number drafts that
many every step. Requests may set "mtp_draft" ({draft}) and "mtp_n_draft"
(0..{max_draft}, a cap); responses carry per-request MTP statistics in
timings.mtp, with what the adaptive controller did under "adaptive".

What one request may cost is limited; over a limit it gets a 400 naming the
limit and its flag. A body without max_tokens generates 16 tokens on
/v1/completions (OpenAI's default) and elsewhere until the answer ends or the
slot's context (--ctx) is full; --n-predict and --max-tokens-limit change that.
At most 20 top log probabilities per token, 16 stop strings, 64 prompts, 256 KiB
of grammar/json_schema/tools, 16 MiB of body, nesting 64 deep: llama-server's
--max-top-logprobs, --max-stop, --max-prompts, --max-grammar-bytes,
--max-body-bytes, --max-json-depth change them (pass them after `--`).

Arguments after `--` go to llama-server unchanged (see `pymtp serve -- --help`).""".format(
    draft="|".join(options.DRAFT_CHOICES), max_draft=options.MAX_DRAFT, adaptive=options.ADAPTIVE_MAX_DRAFT)

EPILOG = """\
examples:
  pymtp serve                                  # built-in model + shipped head on :8080
  pymtp serve model.gguf --port 9000 --parallel 4
  pymtp serve model.gguf --mtp-head model.mtp.gguf --n-draft 2
  pymtp serve model.gguf -- --metrics --api-key secret

  curl http://127.0.0.1:8080/v1/chat/completions \\
       -d '{"messages": [{"role": "user", "content": "Hi"}], "mtp_n_draft": 3}'"""


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="serve a model over HTTP (OpenAI-compatible) with MTP",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    g = p.add_argument_group("server")
    g.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    g.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    g.add_argument("--parallel", "-np", type=int, default=1, metavar="N",
                   help="requests served at once, each in its own slot (default: 1)")
    g.add_argument("--n-predict", type=int, default=None, metavar="N",
                   help="tokens a request generates when its body sets no max_tokens (default: 16 on "
                        "/v1/completions as OpenAI; elsewhere until the answer ends or the slot's context is full)")
    g.add_argument("--max-tokens-limit", type=int, default=None, metavar="N",
                   help="the most tokens one request may generate: a body asking more gets a 400, one asking "
                        "none generates at most N (default: 0, no limit but the slot's context)")
    g.add_argument("--ready-timeout", type=float, default=300.0, metavar="S",
                   help="seconds to wait for the model to load (default: 300)")
    e = common.add_engine_args(p, server=True)
    e.add_argument("--dry-run", action="store_true",
                   help="print the llama-server command line and exit")
    p.set_defaults(server_args=[])  # filled by main() from the arguments after `--`
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pymtp.server import (
        Terminated,
        plan_launch,
        signals_raise_interrupt,
        start_server,
        stop_server,
        wait_until_ready,
    )

    extra = list(args.server_args or [])
    path = common.resolve_model_path(args.model)
    launch = plan_launch(path, host=args.host, port=args.port, mtp=args.mtp, mtp_head=args.mtp_head,
                         n_draft=args.n_draft, draft=args.draft, ctx=args.ctx, parallel=args.parallel,
                         ngl=args.ngl, threads=args.threads, heads=args.heads, rpc=args.rpc,
                         n_predict=args.n_predict, max_tokens_limit=args.max_tokens_limit, extra=extra)
    for note in launch.notes:
        print(f"pymtp: {note}", file=sys.stderr)
    if args.dry_run:
        print(" ".join(launch.argv))
        return 0

    # SIGTERM/SIGHUP (systemd, docker stop, a closed terminal) stop the server like Ctrl-C; if this
    # process is killed outright, the kernel stops the server (start_server)
    with signals_raise_interrupt():
        proc = start_server(launch.argv)
        try:
            wait_until_ready(launch.url, proc, timeout=args.ready_timeout)
            mtp = "on" + (f", head {launch.mtp_head.name}" if launch.mtp_head else "") if launch.mtp else "off"
            print(f"pymtp: serving {path.name} at {launch.url}  (MTP {mtp}; OpenAI API at {launch.url}/v1; "
                  "Ctrl-C stops)", file=sys.stderr, flush=True)
            return proc.wait()
        except Terminated as e:
            stop_server(proc)
            print(f"pymtp: stopped ({e})", file=sys.stderr, flush=True)
            return 0
        except BaseException:  # Ctrl-C included: never leave the server running
            stop_server(proc)
            raise
