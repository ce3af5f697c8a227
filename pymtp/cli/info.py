"""`pymtp info`: what a GGUF model is and whether MTP will run on it (header only, instant)."""

from __future__ import annotations

import argparse
import json

from pymtp.cli import common

DESCRIPTION = """\
Show what a GGUF model file contains: architecture, size, parameter count,
quantization, layer count, the number of MTP (multi-token prediction) layers,
and whether pymtp will use them for speculative decoding - and if not, why.

Only the file header is read (no native library, no tensor data), so this is
instant even for very large models."""

EPILOG = """\
examples:
  pymtp info                          # the built-in default model
  pymtp info ~/models/GLM-4.5-Air-Q4_K_M.gguf
  pymtp info model.gguf --json | jq .mtp_will_run"""


def register(subparsers) -> None:
    p = subparsers.add_parser("info", help="show a model's architecture, size and MTP support",
                              description=DESCRIPTION, epilog=EPILOG,
                              formatter_class=common.HelpFormatter)
    common.add_model_arg(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    common.add_debug_flag(p, top_level=False)
    p.set_defaults(handler=run)


def human_size(n_bytes: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n_bytes < 1000 or unit == "TB":
            return f"{n_bytes:.0f} {unit}" if unit == "B" else f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    raise AssertionError("unreachable")


def human_count(n: int) -> str:
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return str(n)


def info_dict(info, will_run: bool, reason: str) -> dict:
    d = info.to_dict()
    d["mtp_will_run"] = will_run
    d["mtp_reason"] = reason
    return d


def info_lines(info, will_run: bool, reason: str) -> list[str]:
    def opt(value):
        return "unknown" if value is None else str(value)

    rows = [
        ("model", str(info.path)),
        ("name", opt(info.name)),
        ("architecture", info.architecture),
        ("file size", f"{human_size(info.file_size)} ({info.file_size} bytes)"),
        ("parameters", f"{human_count(info.n_params)} ({info.n_params})"),
        ("quantization", info.quantization),
        ("layers", opt(info.n_layer)),
        ("context length", opt(info.context_length)),
        ("MTP layers", str(info.n_mtp_layers)),
        ("MTP", ("yes: " if will_run else "no: ") + reason),
        ("chat template", "yes" if info.chat_template else "no (ChatML is used)"),
    ]
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def run(args: argparse.Namespace) -> int:
    from pymtp.gguf_meta import mtp_support, read_info

    info = read_info(common.resolve_model_path(args.model))
    will_run, reason = mtp_support(info)
    if args.json:
        print(json.dumps(info_dict(info, will_run, reason), indent=2))
    else:
        print("\n".join(info_lines(info, will_run, reason)))
    return 0
