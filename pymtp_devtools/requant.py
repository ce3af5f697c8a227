"""A real model with its tensors of one quantization type rewritten in another, for tests of CPU
kernel paths a shipped file does not reach.

    python -m pymtp_devtools.requant IN.gguf OUT.gguf --from Q4_1 --to Q4_0
    python -m pymtp_devtools.requant IN.gguf OUT.gguf --to Q4_K_M     (llama.cpp's quantizer)

The built-in SmolLM2 is Q4_1, which ggml-cpu multiplies through llamafile's tinyBLAS (patch 0004
makes that batch-size invariant). Q4_0, Q4_K and Q8_0 weights instead go to ggml-cpu's repack buffer
(interleaved 8x8 blocks, a gemv kernel for one row and a gemm kernel for several) on AVX2/AVX512
machines: a Q4_0 copy of the same model runs that path with real weights. The values are
dequantized and quantized again (gguf's numpy quantizers), so the copy is a slightly different,
still sensible model.
"""

from __future__ import annotations

import argparse
import ctypes
from pathlib import Path

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants


def requantize(src: str | Path, dst: str | Path, src_type: QT, dst_type: QT) -> int:
    """Write dst = src with every tensor of src_type stored as dst_type; returns how many changed (0: src
    has none, and nothing is written)."""
    from pymtp.graft.writer import copy_gguf

    reader = gguf.GGUFReader(str(src))
    tensors = {t.name: (quants.quantize(quants.dequantize(t.data, src_type), dst_type), dst_type)
               for t in reader.tensors if t.tensor_type == src_type}
    if tensors:
        copy_gguf(src, dst, tensors=tensors)  # every key and every other tensor as stored
    return len(tensors)


# llama.cpp's own quantizer (libllama's llama_model_quantize), for types gguf's numpy code cannot write
LLAMA_FTYPES = {"Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}


class _QuantizeParams(ctypes.Structure):
    """llama_model_quantize_params of the pinned llama.h (read only through the library's defaults)."""

    _fields_ = [("nthread", ctypes.c_int32), ("ftype", ctypes.c_int), ("output_tensor_type", ctypes.c_int),
                ("token_embedding_type", ctypes.c_int), ("allow_requantize", ctypes.c_bool),
                ("quantize_output_tensor", ctypes.c_bool), ("only_copy", ctypes.c_bool), ("pure", ctypes.c_bool),
                ("keep_split", ctypes.c_bool), ("dry_run", ctypes.c_bool), ("imatrix", ctypes.c_void_p),
                ("kv_overrides", ctypes.c_void_p), ("tt_overrides", ctypes.c_void_p),
                ("prune_layers", ctypes.c_void_p), ("max_buf_size", ctypes.c_size_t)]


def llama_quantize(src: str | Path, dst: str | Path, ftype: str, nthread: int = 2) -> None:
    """Write dst = src requantized by llama.cpp (allow_requantize: a quantized src is dequantized first),
    to the mix ``ftype`` (a key of LLAMA_FTYPES). Raises RuntimeError when llama.cpp fails."""
    from pymtp._native import lib as native
    from pymtp._native import llama as L

    L.lib()                                    # the backend is initialised
    dll = native.load()
    dll.llama_model_quantize_default_params.restype = _QuantizeParams
    dll.llama_model_quantize.restype = ctypes.c_uint32
    dll.llama_model_quantize.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(_QuantizeParams)]
    qp = dll.llama_model_quantize_default_params()
    qp.ftype, qp.allow_requantize, qp.nthread = LLAMA_FTYPES[ftype], True, nthread
    if dll.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(qp)) != 0:
        raise RuntimeError(f"llama_model_quantize failed: {L.last_log_lines()}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--from", dest="src_type", default="Q4_1", help="the type to rewrite (default Q4_1)")
    ap.add_argument("--to", dest="dst_type", default="Q4_0",
                    help=f"the type to write (default Q4_0); {', '.join(LLAMA_FTYPES)}: the whole model "
                         "through llama.cpp's own quantizer (--from is not used)")
    args = ap.parse_args(argv)
    if not Path(args.src).is_file():
        ap.error(f"{args.src}: no such file")
    if Path(args.dst).resolve() == Path(args.src).resolve():
        ap.error("the output must not be the input file")
    if args.dst_type.upper() in LLAMA_FTYPES:
        llama_quantize(args.src, args.dst, args.dst_type.upper())
        print(f"{args.dst}: {args.src} as {args.dst_type.upper()} (llama.cpp's quantizer)")
        return 0
    try:
        src_type, dst_type = QT[args.src_type.upper()], QT[args.dst_type.upper()]
    except KeyError as e:
        ap.error(f"unknown quantization type {e.args[0]}")
    n = requantize(args.src, args.dst, src_type, dst_type)
    if n == 0:
        ap.error(f"{args.src} has no {src_type.name} tensor")
    print(f"{args.dst}: {n} tensors {src_type.name} -> {dst_type.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
