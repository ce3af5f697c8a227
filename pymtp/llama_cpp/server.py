"""llama-cpp-python's OpenAI-compatible server, its models run by ``pymtp.llama_cpp.Llama`` (MTP).

    python -m pymtp.llama_cpp.server --model model.gguf [--mtp auto] [--n-draft auto] [--draft auto]
                                     [--mtp-head head.gguf] [--heads per_layer] [llama_cpp.server options]

Every option of ``python -m llama_cpp.server`` works as there (``--help`` lists them after the MTP
ones); needs its extra: ``pip install 'llama-cpp-python[server]==0.3.36'`` (with the CMAKE_ARGS of
``pymtp.llama_cpp.INSTALL``, so that it builds nothing). Each model the server loads gets the MTP
settings given here.
"""

from __future__ import annotations

import argparse
import sys
import types

from .. import options

MTP_OPTIONS = ("mtp", "mtp_head", "n_draft", "draft", "heads")


def mtp_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pymtp.llama_cpp.server", add_help=False)
    g = p.add_argument_group("MTP (pymtp)")
    g.add_argument("--mtp", choices=options.MTP_MODES, default=options.DEFAULT_MTP,
                   help="; ".join(f"{k}: {v}" for k, v in options.MTP_MODE_HELP.items()))
    g.add_argument("--mtp-head", default=None, metavar="GGUF",
                   help="head-only GGUF with the MTP layer(s), from 'pymtp graft' (default: <model stem>.mtp.gguf "
                        "next to the model, if any)")
    g.add_argument("--n-draft", default=options.DEFAULT_N_DRAFT, type=options.DraftLength.parse, metavar="auto|K",
                   help=f"tokens drafted a step: 'auto' (0..{options.ADAPTIVE_MAX_DRAFT}, as many as pay) or "
                        f"0..{options.MAX_DRAFT}")
    g.add_argument("--draft", choices=options.DRAFT_CHOICES, default=options.DEFAULT_DRAFT,
                   help="; ".join(f"{k}: {v}" for k, v in options.DRAFT_MODE_HELP.items()))
    g.add_argument("--heads", choices=tuple(options.HEAD_POLICIES), default=options.DEFAULT_HEADS,
                   help="several MTP layers: " + "; ".join(f"{k}: {v}" for k, v in options.HEAD_POLICY_HELP.items()))
    return p


def use_mtp_models(llama_cpp_module, mtp_kwargs: dict) -> None:
    """Make llama_cpp.server build its models with pymtp.llama_cpp.Llama and these MTP settings (its
    model loader looks ``Llama`` up on the llama_cpp module it imported)."""
    import llama_cpp.server.model as server_model

    from .llama import Llama

    class ServerLlama(Llama):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**mtp_kwargs, **kwargs})

    proxy = types.ModuleType("llama_cpp")
    proxy.__dict__.update(vars(llama_cpp_module))
    proxy.Llama = ServerLlama
    server_model.llama_cpp = proxy


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    mine = mtp_parser()
    if any(a in ("-h", "--help") for a in argv):
        mine.print_help()
        print("\nllama_cpp.server options:\n")
    args, rest = mine.parse_known_args(argv)
    from . import llama_cpp  # binds llama_cpp to pymtp's library first
    try:
        import llama_cpp.server.__main__ as server_main
    except ImportError as e:
        sys.exit(f"pymtp.llama_cpp.server needs llama-cpp-python's server extra ({e.name} is missing): "
                 "CMAKE_ARGS=\"-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF\" pip install 'llama-cpp-python[server]==0.3.36'")
    use_mtp_models(llama_cpp, {k: getattr(args, k) for k in MTP_OPTIONS})
    sys.argv = [f"{sys.executable} -m pymtp.llama_cpp.server", *rest]
    server_main.main()


if __name__ == "__main__":
    main()
