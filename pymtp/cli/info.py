"""`pymtp info`: what a GGUF model is and whether MTP will run on it (header only, instant)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

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
    p.add_argument("--mtp-head", default=None, metavar="FILE",
                   help="the head-only GGUF you would pass to generate/chat/serve (default: the head those "
                        "commands find themselves: the built-in model's shipped head, or MODEL's <stem>.mtp.gguf)")
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


def info_dict(info, will_run: bool, reason: str, head: dict | None = None) -> dict:
    d = info.to_dict()
    d["mtp_will_run"] = will_run
    d["mtp_reason"] = reason
    d["mtp_head"] = head
    return d


def head_in_use(model_path, info, head_arg: str | None) -> dict | None:
    """The head-only GGUF generate/chat/serve would load for this model, as the engine finds it
    (--mtp-head, the built-in model's shipped head, <stem>.mtp.gguf: a head for a model without MTP
    layers, a draft-vocabulary file for a model with them),
    with its MTP layer count; None when there is none."""
    from pymtp.default_model import shipped_head_for
    from pymtp.engine.runtime import sidecar_head
    from pymtp.errors import ModelFileError
    from pymtp.gguf_meta import read_info

    if head_arg is not None:
        path, source = Path(head_arg).expanduser(), "--mtp-head"
        if not path.is_file():
            raise ModelFileError(f"MTP head file not found: {path}")
    elif (path := shipped_head_for(model_path)) is not None:
        source = "shipped with the built-in model"
    elif (path := sidecar_head(Path(model_path))) is not None:
        source = "found next to the model"
    else:
        return None
    from pymtp.graft.acceptance import describe_recorded, recorded

    head = read_info(path)
    prov = head.graft_provenance
    return {"path": str(path), "source": source, "n_mtp_layers": head.n_mtp_layers,
            "acceptance": recorded(head), "acceptance_note": describe_recorded(head),
            "draft_vocab": prov.get("draft_vocab"), "draft_vocab_coverage": prov.get("draft_vocab_coverage"),
            "parallel": prov.get("parallel"), "features": head.feature_head, "matrix_type": prov.get("matrix_type")}


def info_lines(info, will_run: bool, reason: str, head: dict | None = None) -> list[str]:
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
    if head is not None and head.get("acceptance_note"):
        rows.insert(-1, ("head accepts", head["acceptance_note"]))
    if head is not None and head.get("draft_vocab"):
        note = f"{head['draft_vocab']} tokens (pymtp trim)"
        if head.get("draft_vocab_coverage") is not None:
            note += f", {head['draft_vocab_coverage']:.1%} of the base's held-out generated tokens"
        rows.insert(-1, ("draft vocab", note))
    if head is not None and head.get("matrix_type"):
        rows.insert(-1, ("head matrices", f"{head['matrix_type']} (written with --type {head['matrix_type']})"))
    if head is not None and head.get("features"):
        rows.insert(-1, ("feature head", "fed the base's final hidden state fused with two of its layers' "
                                         "inputs (pymtp graft --features)"))
    if head is not None and head.get("parallel"):
        rows.insert(-1, ("parallel head", f"drafts up to {head['parallel']} tokens in one MTP decode "
                                          "(pymtp graft --parallel)"))
    width = max(len(k) for k, _ in rows)
    return [f"{k:<{width}}  {v}" for k, v in rows]


def run(args: argparse.Namespace) -> int:
    from pymtp.gguf_meta import mtp_support, read_info

    path = common.resolve_model_path(args.model)
    info = read_info(path)
    will_run, reason = mtp_support(info)
    head = head_in_use(path, info, args.mtp_head)
    if head is not None and info.n_mtp_layers > 0 and head["draft_vocab"]:
        reason += f"; draft vocabulary from {Path(head['path']).name} ({head['source']})"
    elif head is not None and head["n_mtp_layers"] > 0:
        will_run, reason = True, (f"MTP head {Path(head['path']).name} ({head['source']}), "
                                  f"{head['n_mtp_layers']} MTP layer(s)")
    if args.json:
        print(json.dumps(info_dict(info, will_run, reason, head), indent=2))
    else:
        print("\n".join(info_lines(info, will_run, reason, head)))
    return 0
