"""`pymtp rpc-server`: serve this machine's devices to other pymtp / llama.cpp processes (ggml RPC)."""

from __future__ import annotations

import argparse
import os
import sys

from pymtp.cli import common
from pymtp.errors import InvalidArgumentError

DESCRIPTION = """\
Run the bundled ggml-rpc-server: this machine's devices (its GPUs, or its CPU) become devices of
the processes that name it with --rpc HOST:PORT (pymtp generate/chat/bench/serve, pymtp.Model(rpc=...),
llama-server --rpc), which split a model's offloaded layers across all of them. The MTP engine runs
in the client as usual; only the layers' computation travels.

The protocol has no authentication or encryption: listen on 127.0.0.1 (the default) or on a
trusted network only."""

EPILOG = """\
examples:
  pymtp rpc-server -p 50052                              # on each machine (or twice here, two ports)
  pymtp generate model.gguf --rpc 10.0.0.2:50052,10.0.0.3:50052 -p "Hello"
  pymtp serve model.gguf --rpc 127.0.0.1:50052,127.0.0.1:50053"""


def register(subparsers) -> None:
    p = subparsers.add_parser("rpc-server", help="serve this machine's devices to --rpc clients (ggml RPC)",
                              description=DESCRIPTION, epilog=EPILOG, formatter_class=common.HelpFormatter)
    p.add_argument("-H", "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    p.add_argument("-p", "--port", type=int, default=50052, help="port (default: 50052)")
    p.add_argument("-t", "--threads", type=int, default=None, metavar="N", help="CPU threads (default: ggml's)")
    p.add_argument("-c", "--cache", action="store_true",
                   help="cache received tensors on local disk (faster reloads of the same model)")
    p.set_defaults(handler=run)


def server_binary():
    from pymtp._native.lib import bundled_binary

    return bundled_binary("ggml-rpc-server", "this pymtp was built without RPC (PYMTP_RPC=OFF)")


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise InvalidArgumentError(f"--port must be in 1..65535 (got {args.port})")
    if args.threads is not None and args.threads < 1:
        raise InvalidArgumentError(f"--threads must be >= 1 (got {args.threads})")
    argv = [str(server_binary()), "-H", args.host, "-p", str(args.port)]
    if args.threads is not None:
        argv += ["-t", str(args.threads)]
    if args.cache:
        argv += ["-c"]
    sys.stdout.flush()
    os.execv(argv[0], argv)   # the server is the process from here on (signals, exit code)
    return 0
