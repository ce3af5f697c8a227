"""Read a base model's GGUF: hyperparameters and tensors dequantized to torch float32.

Tensors are taken exactly as stored (llama's attn_q/attn_k keep the rope permutation
convert_hf_to_gguf applied; gemma3's norms keep their +1), so a forward pass over them
computes what llama.cpp computes from the same file.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from pymtp.errors import PymtpError

# Architectures the graft trainer (and llama.cpp's dense MTP graph) supports.
SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


@dataclass(frozen=True)
class HParams:
    arch: str
    n_layer: int                 # trunk layers (block_count - nextn_predict_layers)
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rms_eps: float
    rope_base: float
    n_rot: int
    rope_freq_scale: float = 1.0          # 1 / linear rope scaling factor
    attn_scale: float = 0.0               # 0: 1/sqrt(head_dim)
    n_ctx_train: int = 0
    name: str = ""
    # gemma3
    sliding_window: int = 0               # 0: no sliding-window layers
    swa_layers: tuple[bool, ...] = field(default_factory=tuple)
    rope_base_swa: float = 10000.0
    final_logit_softcap: float = 0.0
    # tensors present
    tied_embeddings: bool = True
    has_output_bias: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["swa_layers"] = list(self.swa_layers)
        return d


def file_sha256(path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def open_reader(path):
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError) as e:
        raise PymtpError(f"cannot read {path} as GGUF: {e}") from e


def _field(reader, key, default=None):
    f = reader.get_field(key)
    if f is None:
        return default
    v = f.contents()
    return default if v is None else v


def read_hparams(reader) -> HParams:
    """The hyperparameters of the base model in ``reader`` (a gguf.GGUFReader)."""
    arch = _field(reader, "general.architecture")
    if arch not in SUPPORTED_ARCHS:
        raise PymtpError(f"pymtp graft supports the architectures {', '.join(SUPPORTED_ARCHS)}; "
                         f"this model is '{arch}'")
    a = arch
    n_nextn = int(_field(reader, f"{a}.nextn_predict_layers", 0) or 0)
    if n_nextn:
        raise PymtpError(f"the model already has {n_nextn} MTP layer(s) ({a}.nextn_predict_layers); "
                         "graft a head onto a base model without one")
    names = {t.name for t in reader.tensors}
    n_embd = int(_field(reader, f"{a}.embedding_length"))
    n_head = _field(reader, f"{a}.attention.head_count")
    n_head_kv = _field(reader, f"{a}.attention.head_count_kv", n_head)
    if isinstance(n_head, list) or isinstance(n_head_kv, list):
        raise PymtpError("per-layer head counts are not supported by pymtp graft")
    n_head, n_head_kv = int(n_head), int(n_head_kv)
    head_dim = int(_field(reader, f"{a}.attention.key_length", n_embd // n_head))
    n_ff = _field(reader, f"{a}.feed_forward_length")
    if isinstance(n_ff, list):
        raise PymtpError("per-layer feed-forward sizes are not supported by pymtp graft")
    emb = next(t for t in reader.tensors if t.name == "token_embd.weight")
    n_vocab = int(emb.shape[1])
    scaling_type = _field(reader, f"{a}.rope.scaling.type", "none")
    scaling_factor = float(_field(reader, f"{a}.rope.scaling.factor", 1.0) or 1.0)
    if scaling_type not in ("none", "linear") and scaling_factor != 1.0:
        raise PymtpError(f"rope scaling '{scaling_type}' is not supported by pymtp graft")
    freq_scale = 1.0 / scaling_factor if scaling_type == "linear" and scaling_factor > 0 else 1.0
    if "rope_freqs.weight" in names and arch != "llama":
        raise PymtpError("rope frequency factors are only supported for llama")
    n_layer = int(_field(reader, f"{a}.block_count"))
    default_base = 1_000_000.0 if arch in ("qwen2", "qwen3", "gemma3") else 10_000.0
    hp = dict(
        arch=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
        head_dim=head_dim, n_ff=int(n_ff), n_vocab=n_vocab,
        rms_eps=float(_field(reader, f"{a}.attention.layer_norm_rms_epsilon", 1e-6)),
        rope_base=float(_field(reader, f"{a}.rope.freq_base", default_base)),
        n_rot=int(_field(reader, f"{a}.rope.dimension_count", head_dim)),
        rope_freq_scale=freq_scale,
        attn_scale=float(_field(reader, f"{a}.attention.scale", 0.0) or 0.0),
        n_ctx_train=int(_field(reader, f"{a}.context_length", 0) or 0),
        name=str(_field(reader, "general.name", "") or ""),
        tied_embeddings="output.weight" not in names,
        has_output_bias="output.bias" in names,
    )
    if arch == "gemma3":
        n_swa = int(_field(reader, f"{a}.attention.sliding_window", 0) or 0)
        hp["sliding_window"] = n_swa
        if n_swa > 0:
            pattern = _field(reader, f"{a}.attention.sliding_window_pattern")
            if isinstance(pattern, list):
                swa = tuple(bool(x) for x in pattern[:n_layer])
            else:  # llama.cpp's default for gemma3: every 6th layer is global
                period = 6 if pattern is None else int(pattern)
                swa = tuple(period == 0 or (il % period) < (period - 1) for il in range(n_layer))
            hp["swa_layers"] = swa
            hp["rope_base_swa"] = float(_field(reader, f"{a}.rope.freq_base_swa", 10000.0))
        hp["final_logit_softcap"] = float(_field(reader, f"{a}.final_logit_softcapping", 0.0) or 0.0)
        # llama.cpp: 1/sqrt(head_dim), except gemma3-27B (62 layers): 1/sqrt(n_embd / n_head)
        hp["attn_scale"] = 1.0 / math.sqrt(n_embd / n_head if n_layer == 62 else head_dim)
    return HParams(**hp)


def dequantize(tensor) -> np.ndarray:
    """A gguf ReaderTensor as float32 numpy, numpy-shaped (ggml ne reversed)."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize as _dq

    shape = tuple(int(x) for x in reversed(tensor.shape))
    qtype = tensor.tensor_type
    if qtype == GGMLQuantizationType.F32:
        arr = np.asarray(tensor.data, dtype=np.float32)
    elif qtype == GGMLQuantizationType.F16:
        arr = np.asarray(tensor.data).view(np.float16).astype(np.float32)
    else:
        try:
            arr = _dq(np.asarray(tensor.data), qtype)
        except NotImplementedError as e:
            raise PymtpError(f"cannot dequantize {tensor.name} ({qtype.name}) with the gguf package: {e}") from e
    return np.array(arr.reshape(shape), dtype=np.float32, order="C", copy=True)


def load_tensors(reader, names=None, dtype=None, device=None) -> dict:
    """{name: torch tensor} for ``names`` (default: all), dequantized one at a time."""
    import torch

    wanted = None if names is None else set(names)
    out = {}
    for t in reader.tensors:
        if wanted is not None and t.name not in wanted:
            continue
        arr = torch.from_numpy(dequantize(t))
        if dtype is not None or device is not None:
            arr = arr.to(device=device, dtype=dtype)
        out[t.name] = arr
    if wanted is not None and wanted - set(out):
        missing = sorted(wanted - set(out))
        raise PymtpError(f"the model has no tensor(s) {', '.join(missing[:4])}")
    return out


@dataclass
class BaseGGUF:
    """A base model file: where it is, its hyperparameters and its (dequantized) tensors."""

    path: Path
    hparams: HParams
    tensors: dict                     # name -> torch.Tensor (float32 unless a dtype was given)
    sha256: str = ""


def load_base(path, dtype=None, device=None, with_sha: bool = True) -> BaseGGUF:
    path = Path(path)
    reader = open_reader(path)
    hp = read_hparams(reader)
    tensors = load_tensors(reader, dtype=dtype, device=device)
    return BaseGGUF(path=path, hparams=hp, tensors=tensors, sha256=file_sha256(path) if with_sha else "")
