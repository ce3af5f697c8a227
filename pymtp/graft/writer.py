"""Write a grafted MTP head as a head-only GGUF ("sidecar"), or merge it into the base.

Head-only file (what llama.cpp loads next to the base: llama_model_load_from_file_with_mtp_head), N heads (default 1):
    general.architecture            the base's arch
    general.name
    <arch>.nextn_predict_layers     N
    <arch>.block_count              n_layer + N
    <arch>.embedding_length         n_embd
    pymtp.graft.*                   provenance (base file, base sha256, steps, final loss, ...)
    tensors blk.{n_layer + j}.*     head j (j = 0..N-1): the block (base names) +
                                    nextn.eh_proj/enorm/hnorm/shared_head_norm
                                    (+ nextn.eh_proj.feat: a feature head, pymtp graft --features)

Matrices are f16 (default) or q8_0; 1-D tensors (norms, biases) and a parallel head's mask rows
(blk.L.nextn.hnorm.mask, pymtp graft --parallel K) stay f32.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from pymtp.errors import PymtpError
from pymtp.gguf_meta import GRAFT_PREFIX as PROVENANCE_PREFIX

HEAD_TYPES = ("f16", "q8_0")


def _kv_type(value):
    import gguf

    if isinstance(value, bool):
        return gguf.GGUFValueType.BOOL
    if isinstance(value, int):
        return gguf.GGUFValueType.UINT64 if value >= 0 else gguf.GGUFValueType.INT64
    if isinstance(value, float):
        return gguf.GGUFValueType.FLOAT32
    return gguf.GGUFValueType.STRING


def matrix_data(array: np.ndarray, head_type: str):
    """(data as stored, ggml type) of a head matrix stored as ``head_type``: q8_0 where its rows split into
    q8_0's 32-value blocks, else f16."""
    import gguf
    from gguf.quants import quantize

    array = np.ascontiguousarray(array, dtype=np.float32)
    if head_type == "q8_0" and array.shape[-1] % 32 == 0:
        return quantize(array, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    return array.astype(np.float16), gguf.GGMLQuantizationType.F16


def _add_tensor(gw, name: str, array: np.ndarray, head_type: str) -> None:
    array = np.ascontiguousarray(array, dtype=np.float32)
    if array.ndim < 2 or name.endswith(".mask"):   # a parallel head's mask rows stay f32
        gw.add_tensor(name, array)
    else:
        data, qtype = matrix_data(array, head_type)
        gw.add_tensor(name, data, raw_dtype=qtype)


def _atomic_target(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.with_name(out.name + ".part")


def write_head_gguf(out, arch: str, n_layer: int, n_embd: int, tensors: dict, *, name: str = "",
                    head_type: str = "f16", provenance: dict | None = None, n_heads: int = 1) -> Path:
    """Write the head-only GGUF. ``tensors``: {gguf name: float32 numpy (numpy-shaped)} of the
    ``n_heads`` MTP blocks blk.{n_layer} .. blk.{n_layer + n_heads - 1}."""
    import gguf

    if head_type not in HEAD_TYPES:
        raise PymtpError(f"--type must be one of {', '.join(HEAD_TYPES)} (got {head_type!r})")
    out = Path(out)
    tmp = _atomic_target(out)
    gw = gguf.GGUFWriter(str(tmp), arch)
    try:
        gw.add_name(name or "MTP head (pymtp graft)")
        gw.add_uint32(f"{arch}.nextn_predict_layers", n_heads)
        gw.add_uint32(f"{arch}.block_count", n_layer + n_heads)
        gw.add_uint32(f"{arch}.embedding_length", n_embd)
        for key, value in (provenance or {}).items():
            if value is None:
                continue
            gw.add_key_value(PROVENANCE_PREFIX + key, value, _kv_type(value))
        for tname in sorted(tensors):
            _add_tensor(gw, tname, tensors[tname], head_type)
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_tensors_to_file()
    finally:
        gw.close()
    os.replace(tmp, out)
    return out


def merge_head(base, head, out) -> Path:
    """One GGUF = the base + the head's tensors, with <arch>.nextn_predict_layers = N and
    <arch>.block_count = n_layer + N for a file of N heads (the "head inside the main GGUF"
    variant). Tensors are copied as stored (no requantization)."""
    import gguf

    base, head, out = Path(base), Path(head), Path(out)
    rb, rh = gguf.GGUFReader(str(base)), gguf.GGUFReader(str(head))

    def field(r, key):
        f = r.get_field(key)
        return None if f is None else f.contents()

    arch = field(rb, "general.architecture")
    if field(rh, "general.architecture") != arch:
        raise PymtpError(f"the head is for '{field(rh, 'general.architecture')}', the base is '{arch}'")
    n_layer = int(field(rb, f"{arch}.block_count"))
    if int(field(rb, f"{arch}.nextn_predict_layers") or 0):
        raise PymtpError(f"{base} already has MTP layers")
    n_heads = int(field(rh, f"{arch}.nextn_predict_layers") or 1)
    if int(field(rh, f"{arch}.block_count")) != n_layer + n_heads:
        raise PymtpError(f"the head was trained for a base with "
                         f"{int(field(rh, f'{arch}.block_count')) - n_heads} layers; {base} has {n_layer}")
    base_names = {t.name for t in rb.tensors}
    clash = [t.name for t in rh.tensors if t.name in base_names]
    if clash:
        raise PymtpError(f"head tensor {clash[0]} already exists in the base")

    overrides = {f"{arch}.block_count": n_layer + n_heads}
    tmp = _atomic_target(out)
    gw = gguf.GGUFWriter(str(tmp), arch, endianess=rb.endianess)
    try:
        for f in rb.fields.values():
            if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF."):
                continue
            if f.name == f"{arch}.nextn_predict_layers":
                continue
            vtype = f.types[0]
            sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            value = overrides.get(f.name, f.contents())
            gw.add_key_value(f.name, value, vtype, sub_type=sub)
        gw.add_uint32(f"{arch}.nextn_predict_layers", n_heads)
        for f in rh.fields.values():
            if f.name.startswith(PROVENANCE_PREFIX):
                gw.add_key_value(f.name, f.contents(), f.types[0])
        tensors = list(rb.tensors) + list(rh.tensors)
        for t in tensors:
            gw.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_ti_data_to_file()
        for t in rb.tensors:
            gw.write_tensor_data(t.data, tensor_endianess=rb.endianess)
        for t in rh.tensors:
            gw.write_tensor_data(t.data, tensor_endianess=rh.endianess)
    finally:
        gw.close()
    os.replace(tmp, out)
    return out


def copy_gguf(src, out, *, provenance: dict | None = None, drop_provenance=(), tensors: dict | None = None) -> Path:
    """Write ``out`` (may be ``src`` itself) as a copy of the GGUF ``src``: every key but the
    provenance keys named in ``drop_provenance``, then ``provenance`` (pymtp.graft.* keys, set or
    replaced), every tensor as stored except those in ``tensors`` ({name: (numpy array, ggml type
    or None for f32/i32 arrays)}), which replace or add tensors."""
    import gguf

    src = Path(src)
    r = gguf.GGUFReader(str(src))
    arch = r.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    provenance = {k: v for k, v in (provenance or {}).items() if v is not None}
    skip = {PROVENANCE_PREFIX + k for k in (*drop_provenance, *provenance)}
    fields = []
    for f in r.fields.values():
        if f.name == gguf.Keys.General.ARCHITECTURE or f.name.startswith("GGUF.") or f.name in skip:
            continue
        vtype = f.types[0]
        fields.append((f.name, f.contents(), vtype, f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None))
    tensors = tensors or {}
    rows = [(t.name, np.asarray(t.data), t.tensor_type) for t in r.tensors if t.name not in tensors]
    return _write_gguf(out, arch, fields, provenance, rows + _typed(tensors), endianess=r.endianess)


def write_draft_vocab_gguf(out, arch: str, *, n_embd: int, n_layer_all: int, n_nextn: int, tensors: dict,
                           name: str = "", provenance: dict | None = None) -> Path:
    """Write a draft-vocabulary file for a model with its own MTP layers (native/models/draft-vocab.h):
    the model's arch, width and layer counts, and ``tensors`` ({name: (numpy array, ggml type or
    None)}: blk.L.nextn.shared_head_head.draft and blk.L.nextn.embed_tokens.d2t)."""
    import gguf

    u32 = gguf.GGUFValueType.UINT32
    fields = [(f"{arch}.embedding_length", n_embd, u32, None), (f"{arch}.block_count", n_layer_all, u32, None),
              (f"{arch}.nextn_predict_layers", n_nextn, u32, None)]
    if name:
        fields.insert(0, (gguf.Keys.General.NAME, name, gguf.GGUFValueType.STRING, None))
    provenance = {k: v for k, v in (provenance or {}).items() if v is not None}
    return _write_gguf(out, arch, fields, provenance, _typed(tensors))


def _typed(tensors: dict) -> list:
    import gguf

    rows = []
    for name, (arr, qtype) in tensors.items():
        if qtype is None:
            qtype = gguf.GGMLQuantizationType.I32 if arr.dtype == np.int32 else gguf.GGMLQuantizationType.F32
        rows.append((name, arr, qtype))
    return rows


def _write_gguf(out, arch: str, fields: list, provenance: dict, rows: list, endianess=None) -> Path:
    """Write ``out`` atomically: ``fields`` [(key, value, type, array item type)], the provenance
    keys, then the tensors ``rows`` [(name, numpy data as stored, ggml type)]."""
    import gguf

    out = Path(out)
    endianess = gguf.GGUFEndian.LITTLE if endianess is None else endianess
    tmp = _atomic_target(out)
    gw = gguf.GGUFWriter(str(tmp), arch, endianess=endianess)
    try:
        for key, value, vtype, sub in fields:
            gw.add_key_value(key, value, vtype, sub_type=sub)
        for key, value in provenance.items():
            gw.add_key_value(PROVENANCE_PREFIX + key, value, _kv_type(value))
        for name, arr, qtype in rows:
            gw.add_tensor_info(name, arr.shape, arr.dtype, arr.nbytes, raw_dtype=qtype)
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_ti_data_to_file()
        for _, arr, _ in rows:
            gw.write_tensor_data(arr, tensor_endianess=endianess)
    finally:
        gw.close()
    os.replace(tmp, out)
    return out
