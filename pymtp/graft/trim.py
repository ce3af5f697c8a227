"""Draft-vocabulary trimming: the MTP head scores only the N tokens the base model itself uses most,
instead of the whole vocabulary. The head's LM head is most of a draft step's cost on small models
(SmolLM2: 576 x 49152 of a ~33M multiply-add step), and the draft step is paid k times per step.

What is written (native/models/dense-mtp.cpp reads it), for each MTP block L of the head file:
  blk.L.nextn.shared_head_head.weight  the chosen N rows of the base's LM head, as stored (same
                                       quantization, bit-identical rows), in token id order
  blk.L.nextn.embed_tokens.d2t         i32 [N]: row -> token id
The graph scatters the N scores to the whole vocabulary, -inf elsewhere, so a token outside the draft
vocabulary has logit -inf: it is never drafted, and every sampler, q and the engine see ordinary
logits. Exactness is untouched (docs/engine.md): greedy verification compares with the target's own
choice, and rejection sampling is exact for any draft distribution q, q = 0 outside the subset
included (the residual max(0, p - q) keeps all of p's mass there).

A model that ships its own MTP layers (qwen35, qwen35moe, glm4moe, step35) gets a draft-vocabulary
file instead, loaded like a head file (``--mtp-head``, or ``<model stem>.mtp.gguf`` next to it):
  blk.L.nextn.shared_head_head.draft   the chosen N rows of the LM head block L uses (its own
                                       shared_head_head, else output, else the tied token_embd)
  blk.L.nextn.embed_tokens.d2t         i32 [N]: row -> token id
for each MTP block L of the model, and the model's arch, width and layer counts.

The tokens are chosen by how often the base emits them in its own generated text (the
self-distillation data of `pymtp graft`, or text the engine generates here), plus the
end-of-generation tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from pymtp.errors import PymtpError

from .acceptance import RECORDED_ACCEPTANCE
from .writer import HEAD_TYPES, copy_gguf, matrix_data

HEAD_NAME = "blk.{}.nextn.shared_head_head.weight"
DRAFT_HEAD_NAME = "blk.{}.nextn.shared_head_head.draft"   # a model's own MTP block (draft-vocabulary file)
D2T_NAME = "blk.{}.nextn.embed_tokens.d2t"


def generated_counts(data, n_vocab: int, val: bool = False) -> np.ndarray:
    """How often each token occurs in the generated part of a graft Dataset's train (or val)
    sequences (corpus text counts whole)."""
    counts = np.zeros(n_vocab, np.int64)
    for i in data.indices(val):
        seq = data.seq(int(i))[int(data.n_prompt[i]):]
        counts += np.bincount(seq[seq < n_vocab], minlength=n_vocab)
    return counts


def choose(counts: np.ndarray, n: int, always=()) -> np.ndarray:
    """The ``n`` token ids to keep, ascending: ``always`` first, then the most counted."""
    n_vocab = len(counts)
    if not 1 <= n < n_vocab:
        raise PymtpError(f"the draft vocabulary must have 1..{n_vocab - 1} tokens (got {n})")
    keep = list(dict.fromkeys(int(t) for t in always if 0 <= int(t) < n_vocab))[:n]
    chosen = set(keep)
    for t in np.argsort(-counts, kind="stable"):
        if len(keep) >= n:
            break
        if int(t) not in chosen:
            keep.append(int(t))
            chosen.add(int(t))
    return np.array(sorted(keep), dtype=np.int64)


def coverage(counts: np.ndarray, ids: np.ndarray) -> float:
    """Share of the counted tokens inside the draft vocabulary (1.0 when nothing was counted)."""
    total = counts.sum()
    return float(counts[ids].sum() / total) if total else 1.0


def _field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def _lm_head(head_reader, base_reader, layer: int):
    """The full-vocabulary LM head the draft rows come from: the head's own, else the base's
    output (or, tied, its token embeddings)."""
    by_name = {t.name: t for t in head_reader.tensors}
    own = by_name.get(HEAD_NAME.format(layer))
    if own is not None:
        return own
    base = {t.name: t for t in base_reader.tensors}
    for name in ("output.weight", "token_embd.weight"):
        if name in base:
            return base[name]
    raise PymtpError("the base model has neither output.weight nor token_embd.weight")


def _draft_tensors(src, ids: np.ndarray, head_name: str, d2t_name: str) -> dict:
    """The rows ``ids`` of the LM head ``src`` as stored, and the row -> token map, for copy_gguf."""
    n_vocab = int(src.shape[1])
    if len(ids) >= n_vocab or ids.min() < 0 or ids.max() >= n_vocab:
        raise PymtpError(f"draft vocabulary ids must be < {n_vocab} and fewer than {n_vocab}")
    return {head_name: (np.asarray(src.data)[ids], src.tensor_type), d2t_name: (ids.astype(np.int32), None)}


def _retyped(reader, head_type: str | None, skip) -> dict:
    """The head's own matrices (2-D f16 or q8_0 tensors, not the names in ``skip``) stored as ``head_type``
    (writer.matrix_data), for copy_gguf; {} for None (as stored). A parallel head's mask rows stay f32."""
    import gguf
    from gguf.quants import dequantize

    if head_type is None:
        return {}
    if head_type not in HEAD_TYPES:
        raise PymtpError(f"matrix type must be one of {', '.join(HEAD_TYPES)} (got {head_type})")
    kinds = (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0)
    return {t.name: matrix_data(dequantize(np.asarray(t.data), t.tensor_type), head_type) for t in reader.tensors
            if t.name not in skip and t.tensor_type in kinds and len(t.shape) == 2}


def trim_head(head, base, ids: np.ndarray, out, *, extra_provenance: dict | None = None,
              head_type: str | None = None) -> Path:
    """Write ``out``: the head-only GGUF ``head`` (of the dense base ``base``) with a draft
    vocabulary of the token ids ``ids`` in each of its MTP blocks, and its own matrices stored as
    ``head_type`` ("f16" or "q8_0"; None: as stored). The draft vocabulary's LM-head rows stay the
    base's, as stored."""
    import gguf

    head, base, out = Path(head), Path(base), Path(out)
    rh, rb = gguf.GGUFReader(str(head)), gguf.GGUFReader(str(base))
    arch = _field(rh, "general.architecture")
    if _field(rb, "general.architecture") != arch:
        raise PymtpError(f"the head is for '{arch}', the base is '{_field(rb, 'general.architecture')}'")
    n_heads = int(_field(rh, f"{arch}.nextn_predict_layers") or 0)
    if n_heads <= 0:
        raise PymtpError(f"{head} has no MTP layers ({arch}.nextn_predict_layers)")
    n_layer = int(_field(rh, f"{arch}.block_count")) - n_heads
    if any(t.name.endswith(".d2t") for t in rh.tensors):
        raise PymtpError(f"{head} already has a draft vocabulary; trim the untrimmed head instead")
    layers = range(n_layer, n_layer + n_heads)
    ids = np.asarray(ids, dtype=np.int64)

    new = {}
    for L in layers:
        new.update(_draft_tensors(_lm_head(rh, rb, L), ids, HEAD_NAME.format(L), D2T_NAME.format(L)))
    new.update(_retyped(rh, head_type, skip=set(new)))

    # the measured acceptance was the untrimmed head's: it no longer applies
    provenance = {"draft_vocab": int(len(ids)), **({"matrix_type": head_type} if head_type else {}),
                  **(extra_provenance or {})}
    return copy_gguf(head, out, provenance=provenance, drop_provenance=RECORDED_ACCEPTANCE, tensors=new)


def draft_vocab_file(base, ids: np.ndarray, out, *, extra_provenance: dict | None = None) -> Path:
    """Write ``out``: a draft-vocabulary file of the token ids ``ids`` for each of the MTP blocks of
    ``base``, a model with its own MTP layers."""
    import gguf

    from .writer import write_draft_vocab_gguf

    base, out = Path(base), Path(out)
    rb = gguf.GGUFReader(str(base))
    arch = _field(rb, "general.architecture")
    n_nextn = int(_field(rb, f"{arch}.nextn_predict_layers") or 0)
    if n_nextn <= 0:
        raise PymtpError(f"{base.name} has no MTP layers of its own ({arch}.nextn_predict_layers)")
    n_all = int(_field(rb, f"{arch}.block_count"))
    ids = np.asarray(ids, dtype=np.int64)
    new = {}
    for L in range(n_all - n_nextn, n_all):   # the block's own LM head, else the model's (_lm_head)
        new.update(_draft_tensors(_lm_head(rb, rb, L), ids, DRAFT_HEAD_NAME.format(L), D2T_NAME.format(L)))
    name = _field(rb, "general.name")
    return write_draft_vocab_gguf(
        out, arch, n_embd=int(_field(rb, f"{arch}.embedding_length")), n_layer_all=n_all, n_nextn=n_nextn,
        tensors=new, name=f"{name} draft vocabulary" if name else "",
        provenance={"base_file": base.name, "draft_vocab": int(len(ids)), **(extra_provenance or {})})


def load_counts(path) -> tuple[np.ndarray, np.ndarray | None]:
    """Token counts saved by `pymtp trim --save-counts`: (train, held-out or None) from an npz with 'train' (and
    'val'), or (counts, None) from a .npy."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path) as z:
                return np.asarray(z["train"], np.int64), (np.asarray(z["val"], np.int64) if "val" in z else None)
        return np.asarray(np.load(path), np.int64), None
    except (OSError, KeyError, ValueError) as e:
        raise PymtpError(f"cannot read token counts from {path}: {e}") from e


def cached_graft_data(base_sha256: str, cache_dir) -> Path | None:
    """The newest data set `pymtp graft` generated for this base, if one is cached."""
    root = Path(cache_dir)
    found = []
    for cfg in root.glob("gen-*/config.json"):
        try:
            meta = json.loads(cfg.read_text())
        except (OSError, ValueError):
            continue
        data = cfg.parent / "data.npz"
        if meta.get("base_sha256") == base_sha256 and data.is_file():
            found.append(data)
    return max(found, key=lambda p: p.stat().st_mtime) if found else None
