"""Tiny random-weight dense GGUFs (llama, qwen2, qwen3, gemma3) with a planted MTP head.

These architectures ship without MTP; pymtp's patch 0003 gives them a DeepSeek-style
MTP block (``blk.{n_layer}.*`` with ``nextn.*``, see native/models/dense-mtp.cpp) and
patch 0004 loads it from a head-only sidecar GGUF. This module writes test models
for both layouts from the same weights:

* ``make_tiny_dense(arch, path)``: one GGUF, trunk + MTP block
  (``block_count = n_layer + 1``, ``<arch>.nextn_predict_layers = 1``);
  ``head=None`` gives a trunk-only model (no nextn key at all).
* ``make_tiny_dense_split(arch, base, head)``: the trunk-only base and the head-only
  sidecar (only ``blk.{n_layer}.*`` tensors and the keys general.architecture,
  <arch>.block_count, <arch>.nextn_predict_layers, <arch>.embedding_length).
* ``write_head_only(src, out)`` / ``write_base_only(src, out)``: split an existing
  full tiny model (or any GGUF with an MTP block) into those two files.

The trunk follows tiny_models' recipe (a planted, untied LM head walking a random
successor cycle, small context-dependent corrections from the layers). ``head="planted"``:
the MTP block's ``eh_proj`` passes ``enorm(emb(x))`` through with a little of
``hnorm(h)`` and the block itself writes little, so through the shared LM head it
predicts ``succ(x)``: what the trunk most likely emits one step later (acceptance
clearly between 0 and 1). ``head="random"``: small random MTP weights (drafts
practically never accepted).

Norm weights are jittered around their nominal value (not all ones), so a reference
implementation that mixes up two norms disagrees. ``dtype="f32"`` stores every tensor
in f32 (for exact comparisons with a numpy reference); the default ``"f16"`` stores
matrices in f16 like a converted model.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import gguf
import numpy as np

from pymtp_devtools.tiny_models import (
    DEFAULT_VOCAB,
    MTP_HIDDEN_MIX,
    MTP_OUT_SCALE,
    RANDOM_STD,
    TRUNK_OUT_SCALE,
    _lm_head,
    _storage_dtype,
    _tname,
    _token_types,
    _tokenizer_kv,
    _Weights,
    _write_tokenizer,
    vocab_path,
)

ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
HEADS = ("planted", "random")
DTYPES = ("f16", "f32")
SIDECAR_SUFFIX = ".mtp.gguf"   # <model stem>.mtp.gguf is picked up automatically by pymtp.Model

NORM_JITTER = 0.2              # norm weights: nominal * U(1 - j, 1 + j)

T = gguf.MODEL_TENSOR


@dataclass(frozen=True)
class DenseDims:
    n_embd: int = 64
    n_layer: int = 2             # trunk layers; the MTP block is blk.{n_layer}
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_ctx_train: int = 4096
    rms_eps: float = 1e-6
    rope_freq_base: float = 10000.0
    # gemma3 only
    rope_freq_base_swa: float = 10000.0
    sliding_window: int = 0
    swa_pattern: int = 0         # every swa_pattern-th layer (1-based) is global
    final_logit_softcapping: float = 0.0


# qwen3 and gemma3 get a head_dim that is not n_embd / n_head, like the real models
ARCH_DIMS = {
    "llama": DenseDims(),
    "qwen2": DenseDims(rope_freq_base=1000000.0),
    "qwen3": DenseDims(head_dim=32, rope_freq_base=1000000.0),
    "gemma3": DenseDims(head_dim=32, rope_freq_base=1000000.0, rope_freq_base_swa=10000.0,
                        sliding_window=8, swa_pattern=2, final_logit_softcapping=30.0),
}


def dims_for(arch: str, **overrides) -> DenseDims:
    if arch not in ARCH_DIMS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    return replace(ARCH_DIMS[arch], **overrides)


def sidecar_path(model_path) -> Path:
    """Where pymtp looks for a model's MTP head: ``<model stem>.mtp.gguf`` next to it."""
    p = Path(model_path)
    return p.with_name(p.stem + SIDECAR_SUFFIX)


# --------------------------------------------------------------------------- weights

def _norm(w: _Weights, name: str, n: int, nominal: float = 1.0) -> None:
    w.put(name, nominal * w.rng(name).uniform(1 - NORM_JITTER, 1 + NORM_JITTER, n).astype(np.float32))


def _block(w: _Weights, arch: str, d: DenseDims, il: int, *, mtp: bool) -> None:
    """One decoder block of ``arch`` at layer ``il`` (trunk or MTP block)."""
    n_q, n_kv = d.head_dim * d.n_head, d.head_dim * d.n_head_kv
    _norm(w, _tname(T.ATTN_NORM, il), d.n_embd)
    w.proj_in(_tname(T.ATTN_Q, il), d.n_embd, n_q, mtp=mtp)
    w.proj_in(_tname(T.ATTN_K, il), d.n_embd, n_kv, mtp=mtp)
    w.proj_in(_tname(T.ATTN_V, il), d.n_embd, n_kv, mtp=mtp)
    if arch == "qwen2":
        for kind, n in ((T.ATTN_Q, n_q), (T.ATTN_K, n_kv), (T.ATTN_V, n_kv)):
            w.bias(_tname(kind, il, ".bias"), n, mtp=mtp)
    if arch in ("qwen3", "gemma3"):
        _norm(w, _tname(T.ATTN_Q_NORM, il), d.head_dim)
        _norm(w, _tname(T.ATTN_K_NORM, il), d.head_dim)
    _norm(w, _tname(T.FFN_NORM, il), d.n_embd)
    w.proj_in(_tname(T.FFN_GATE, il), d.n_embd, d.n_ff, mtp=mtp)
    w.proj_in(_tname(T.FFN_UP, il), d.n_embd, d.n_ff, mtp=mtp)
    if arch == "gemma3":
        # Gemma normalizes what attention/FFN write (post norms): their weights set the size
        # of the write relative to the residual stream (RMS sqrt(n_embd) in the trunk, whose
        # input embeddings are scaled by sqrt(n_embd); ~1 in the MTP block, after eh_proj).
        if mtp and w.head == "random":
            size = RANDOM_STD
        elif mtp:
            size = MTP_OUT_SCALE
        else:
            size = TRUNK_OUT_SCALE * math.sqrt(d.n_embd)
        w.proj_in(_tname(T.ATTN_OUT, il), n_q, d.n_embd, mtp=mtp)
        w.proj_in(_tname(T.FFN_DOWN, il), d.n_ff, d.n_embd, mtp=mtp)
        _norm(w, _tname(T.ATTN_POST_NORM, il), d.n_embd, size)
        _norm(w, _tname(T.FFN_POST_NORM, il), d.n_embd, size)
    else:
        w.proj_out(_tname(T.ATTN_OUT, il), n_q, d.n_embd, mtp=mtp)
        w.proj_out(_tname(T.FFN_DOWN, il), d.n_ff, d.n_embd, mtp=mtp)


def _nextn(w: _Weights, d: DenseDims, il: int) -> None:
    """enorm/hnorm/shared_head_norm and eh_proj (the LM head and embeddings are the trunk's)."""
    _norm(w, _tname(T.NEXTN_ENORM, il), d.n_embd)
    _norm(w, _tname(T.NEXTN_HNORM, il), d.n_embd)
    _norm(w, _tname(T.NEXTN_SHARED_HEAD_NORM, il), d.n_embd)
    name = _tname(T.NEXTN_EH_PROJ, il)
    if w.head == "random":
        w.normal(name, (d.n_embd, 2 * d.n_embd), RANDOM_STD)
        return
    # input is concat[enorm(emb), hnorm(h)], emb first: pass emb through, add a little h
    eh = MTP_HIDDEN_MIX / math.sqrt(d.n_embd) * w.rng(name).standard_normal((d.n_embd, 2 * d.n_embd))
    eh[:, :d.n_embd] = np.eye(d.n_embd)
    w.put(name, eh)


def build_weights(arch: str, token_types: np.ndarray, *, seed: int = 0, head: str | None = "planted",
                  dims: DenseDims | None = None) -> _Weights:
    """All tensors of a tiny ``arch`` model (numpy-shaped: ggml ne reversed)."""
    if arch not in ARCH_DIMS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if head is not None and head not in HEADS:
        raise ValueError(f"unknown head {head!r}; expected one of {HEADS} or None")
    d = dims or ARCH_DIMS[arch]
    w = _Weights(int(seed), head or "planted")
    emb = w.normal(_tname(T.TOKEN_EMBD), (len(token_types), d.n_embd), 1.0)
    _norm(w, _tname(T.OUTPUT_NORM), d.n_embd)
    out = _tname(T.OUTPUT)
    w.put(out, _lm_head(w.rng(out), emb, token_types))
    for il in range(d.n_layer):
        _block(w, arch, d, il, mtp=False)
    if head is not None:
        _block(w, arch, d, d.n_layer, mtp=True)
        _nextn(w, d, d.n_layer)
    return w


# --------------------------------------------------------------------------- writing

def _hparams(gw: gguf.GGUFWriter, arch: str, d: DenseDims, n_nextn: int) -> None:
    gw.add_context_length(d.n_ctx_train)
    gw.add_embedding_length(d.n_embd)
    gw.add_block_count(d.n_layer + n_nextn)
    if n_nextn:
        gw.add_nextn_predict_layers(n_nextn)
    gw.add_feed_forward_length(d.n_ff)
    gw.add_head_count(d.n_head)
    gw.add_head_count_kv(d.n_head_kv)
    gw.add_key_length(d.head_dim)
    gw.add_value_length(d.head_dim)
    gw.add_rope_dimension_count(d.head_dim)
    gw.add_layer_norm_rms_eps(d.rms_eps)
    gw.add_rope_freq_base(d.rope_freq_base)
    if arch == "gemma3":
        if d.sliding_window:
            gw.add_sliding_window(d.sliding_window)
            gw.add_sliding_window_pattern(d.swa_pattern)
            gw.add_rope_freq_base_swa(d.rope_freq_base_swa)
        if d.final_logit_softcapping:
            gw.add_final_logit_softcapping(d.final_logit_softcapping)


def _store(name: str, array: np.ndarray, dtype: str) -> np.ndarray:
    return array if dtype == "f32" else array.astype(_storage_dtype(name, array), copy=False)


def _is_head_tensor(name: str, n_layer: int) -> bool:
    return name.startswith(f"blk.{n_layer}.")


def _write(path: Path, arch: str, d: DenseDims, tensors: dict[str, np.ndarray], *, n_nextn: int,
           tok_kv: dict | None, name: str, dtype: str, extra: dict[str, str | int] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    gw = gguf.GGUFWriter(str(path), arch)
    try:
        gw.add_name(name)
        if tok_kv is None:  # head-only sidecar: just what the loader needs
            gw.add_block_count(d.n_layer + n_nextn)
            gw.add_nextn_predict_layers(n_nextn)
            gw.add_embedding_length(d.n_embd)
        else:
            gw.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
            _hparams(gw, arch, d, n_nextn)
            _write_tokenizer(gw, tok_kv)
        for key, value in (extra or {}).items():
            (gw.add_string if isinstance(value, str) else gw.add_uint32)(key, value)
        for tname, array in tensors.items():
            gw.add_tensor(tname, _store(tname, array, dtype))
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_tensors_to_file()
    finally:
        gw.close()
    return path


def _prepare(arch, seed, head, dims, vocab, llama_cpp_dir):
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    d = dims or dims_for(arch)
    tok_kv = _tokenizer_kv(vocab_path(vocab, llama_cpp_dir))
    w = build_weights(arch, _token_types(tok_kv), seed=seed, head=head, dims=d)
    return d, tok_kv, w


def _check_dtype(dtype: str) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; expected one of {DTYPES}")


def make_tiny_dense(arch: str, out_path, *, seed: int = 0, head: str | None = "planted",
                    dtype: str = "f16", dims: DenseDims | None = None, vocab: str = DEFAULT_VOCAB,
                    llama_cpp_dir=None) -> Path:
    """Write a tiny ``arch`` GGUF with the MTP block in the same file (``head=None``: trunk only)."""
    _check_dtype(dtype)
    d, tok_kv, w = _prepare(arch, seed, head, dims, vocab, llama_cpp_dir)
    n_nextn = 0 if head is None else 1
    return _write(out_path, arch, d, w.tensors, n_nextn=n_nextn, tok_kv=tok_kv, dtype=dtype,
                  name=f"tiny-{arch}-{head or 'nohead'}-seed{seed}",
                  extra={"pymtp.tiny.head": head or "none", "pymtp.tiny.seed": int(seed),
                         "pymtp.tiny.vocab": vocab})


def make_tiny_dense_split(arch: str, base_path, head_path=None, *, seed: int = 0, head: str = "planted",
                          dtype: str = "f16", dims: DenseDims | None = None, vocab: str = DEFAULT_VOCAB,
                          llama_cpp_dir=None) -> tuple[Path, Path]:
    """Write the trunk-only base GGUF and the head-only sidecar (default ``<base stem>.mtp.gguf``).

    Same weights as ``make_tiny_dense`` with the same arguments: loading base + sidecar
    gives the same model as loading the single file.
    """
    _check_dtype(dtype)
    if head is None:
        raise ValueError("a split model needs a head ('planted' or 'random')")
    d, tok_kv, w = _prepare(arch, seed, head, dims, vocab, llama_cpp_dir)
    base_t = {k: v for k, v in w.tensors.items() if not _is_head_tensor(k, d.n_layer)}
    head_t = {k: v for k, v in w.tensors.items() if _is_head_tensor(k, d.n_layer)}
    base = _write(base_path, arch, d, base_t, n_nextn=0, tok_kv=tok_kv, dtype=dtype,
                  name=f"tiny-{arch}-base-seed{seed}",
                  extra={"pymtp.tiny.head": "none", "pymtp.tiny.seed": int(seed), "pymtp.tiny.vocab": vocab})
    head_path = sidecar_path(base) if head_path is None else Path(head_path)
    side = _write(head_path, arch, d, head_t, n_nextn=1, tok_kv=None, dtype=dtype,
                  name=f"tiny-{arch}-mtp-head-{head}-seed{seed}")
    return base, side


# ------------------------------------------------------------------ splitting existing files

def _read(path) -> tuple[gguf.GGUFReader, str, int, int]:
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    n_all = int(r.fields[f"{arch}.block_count"].contents())
    f = r.fields.get(f"{arch}.nextn_predict_layers")
    n_nextn = int(f.contents()) if f is not None else 0
    return r, arch, n_all, n_nextn


def _raw_tensors(r: gguf.GGUFReader, keep) -> list:
    return [t for t in r.tensors if keep(t.name)]


def _copy_kv(src: gguf.GGUFReader, gw: gguf.GGUFWriter, skip: set[str]) -> None:
    for key, field in src.fields.items():
        if key in skip or key.startswith("GGUF.") or key == "general.architecture":
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            gw.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            gw.add_key_value(key, field.contents(), vtype)


def _write_raw(path, arch: str, tensors, kv_writer) -> Path:
    path = Path(path)
    gw = gguf.GGUFWriter(str(path), arch)
    try:
        kv_writer(gw)
        for t in tensors:
            # t.data is numpy-shaped (bytes per row for quantized types), as add_tensor wants it
            data = np.asarray(t.data)
            gw.add_tensor(t.name, data, raw_shape=data.shape, raw_dtype=t.tensor_type)
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_tensors_to_file()
    finally:
        gw.close()
    return path


def write_head_only(src, out_path) -> Path:
    """Extract the MTP block(s) of a GGUF into a head-only sidecar GGUF."""
    r, arch, n_all, n_nextn = _read(src)
    if n_nextn <= 0:
        raise ValueError(f"{src}: no MTP layers ({arch}.nextn_predict_layers absent or 0)")
    n_layer = n_all - n_nextn
    emb = int(r.fields[f"{arch}.embedding_length"].contents())
    head = _raw_tensors(r, lambda n: any(n.startswith(f"blk.{il}.") for il in range(n_layer, n_all)))

    def kv(gw):
        gw.add_name(f"{Path(src).stem} MTP head")
        gw.add_block_count(n_all)
        gw.add_nextn_predict_layers(n_nextn)
        gw.add_embedding_length(emb)

    return _write_raw(out_path, arch, head, kv)


def write_base_only(src, out_path) -> Path:
    """Copy a GGUF without its MTP block(s): block_count = n_layer, no nextn key."""
    r, arch, n_all, n_nextn = _read(src)
    n_layer = n_all - n_nextn
    trunk = _raw_tensors(r, lambda n: not any(n.startswith(f"blk.{il}.") for il in range(n_layer, n_all)))

    def kv(gw):
        _copy_kv(r, gw, skip={f"{arch}.block_count", f"{arch}.nextn_predict_layers"})
        gw.add_block_count(n_layer)

    return _write_raw(out_path, arch, trunk, kv)


# ------------------------------------------------------------------------ CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pymtp_devtools.tiny_dense",
        description="Write a tiny random dense GGUF (llama/qwen2/qwen3/gemma3) with a planted MTP head.")
    parser.add_argument("arch", choices=ARCHS)
    parser.add_argument("out", type=Path, help="output .gguf path (with --split: the base model)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--head", choices=(*HEADS, "none"), default="planted")
    parser.add_argument("--dtype", choices=DTYPES, default="f16")
    parser.add_argument("--split", action="store_true",
                        help="write the base without the head plus the head as <stem>.mtp.gguf")
    parser.add_argument("--vocab", default=DEFAULT_VOCAB)
    parser.add_argument("--llama-cpp-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    head = None if args.head == "none" else args.head
    kw = dict(seed=args.seed, dtype=args.dtype, vocab=args.vocab, llama_cpp_dir=args.llama_cpp_dir)
    if args.split:
        paths = make_tiny_dense_split(args.arch, args.out, head=head or "planted", **kw)
    else:
        paths = (make_tiny_dense(args.arch, args.out, head=head, **kw),)
    for p in paths:
        print(f"{p}: {p.stat().st_size / 1e6:.1f} MB", file=sys.stderr)
    print(f"done in {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
