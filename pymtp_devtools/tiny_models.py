"""Tiny random-weight GGUF models with MTP (nextn) layers, for tests.

``make_tiny_model(arch, out_path)`` writes a complete, loadable GGUF for one of
the MTP architectures of our llama.cpp build: a 2-layer trunk, ``n_nextn`` MTP
blocks appended after it (``block_count = n_layer + n_nextn``), the upstream
tensor names and keys, and a real tokenizer copied from one of llama.cpp's
vocab-only test files (``models/ggml-vocab-<vocab>.gguf``) plus a ChatML chat
template.  A model takes ~0.2 s to make and is ~10 MB (f16/f32 only).

Weights are random and deterministic by ``seed``: every tensor draws from its
own stream, seeded from ``(seed, tensor name)``, so the trunk does not depend
on the head mode or on ``n_nextn`` (same seed: same greedy text).

How the weights are planted:

* The LM head is untied: row ``succ(x)`` is ``emb(x)`` plus noise, ``succ`` one
  random cycle through all normal tokens.  The trunk's layers write only a small
  correction into the residual stream, so greedy decoding mostly walks that
  cycle (no short loops, no collapse onto one token) and the context-dependent
  correction makes it step off now and then.  Special tokens (BOS/EOS, FIM ...)
  have zero rows and are never generated, so generation runs to ``n_predict``.
* ``head="planted"``: each MTP block's ``eh_proj`` passes ``enorm(emb(x))``
  through (identity block) with a little of ``hnorm(h)``, and its own
  attention/FFN write very little, so through the shared output norm and LM head
  it predicts ``succ(x)``: what the trunk will most likely pick one step later.
  With the pristine llama-server (``--spec-type draft-mtp --spec-draft-n-max 3``,
  greedy) about 70-80 % of the drafts are accepted: both paths get exercised.
* ``head="random"``: the MTP blocks are drawn at random (std RANDOM_STD):
  drafts are (practically) never accepted.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import gguf
import numpy as np

from pymtp.chat_template import CHATML_TEMPLATE

ARCHS = ("glm4moe", "qwen35", "step35")
HEADS = ("planted", "random")
# BPE vocab with 32k tokens, a BOS that is added to prompts and a distinct EOS; the
# 128k llama-bpe vocab would make the embedding and LM head 16 MB each.
DEFAULT_VOCAB = "deepseek-coder"

# Weight scales. The residual stream is dominated by token_embd, N(0, 1); projections
# writing into it have std <SCALE> / sqrt(fan_in), those reading it 1 / sqrt(fan_in).
TRUNK_OUT_SCALE = 0.2      # trunk attention/FFN/SSM outputs
MTP_OUT_SCALE = 0.05       # planted MTP blocks' attention/FFN outputs
MTP_HIDDEN_MIX = 0.1       # planted eh_proj: weight of the hnorm(h) half next to the identity
RANDOM_STD = 0.02          # head="random": every MTP matrix
# Noise added to the planted LM head rows: how easily the trunk's context-dependent
# correction changes its greedy pick, i.e. how many drafts get rejected (measured with
# seed 0: 1.0 -> ~88 % of drafts accepted, 1.25 -> ~75 %, 1.5 -> ~54 %).
LM_HEAD_NOISE = 1.25

_VOCAB_DIR = "models"
_NORMAL_TOKEN_TYPE = 1


@dataclass(frozen=True)
class TinyDims:
    """Hyperparameters shared by all the tiny models (per-arch extras live in the builders)."""

    n_embd: int = 64
    n_layer: int = 2            # trunk layers, MTP blocks come on top
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 16
    n_ff: int = 128
    n_expert: int = 4
    n_expert_used: int = 2
    n_ff_exp: int = 32
    n_ctx_train: int = 4096
    rms_eps: float = 1e-6
    rope_freq_base: float = 10000.0


DIMS = TinyDims()


# --------------------------------------------------------------------------- tokenizer

def _repo_root() -> Path:
    return Path(__file__).resolve().parents[1]


def resolve_llama_cpp_dir(llama_cpp_dir: str | os.PathLike | None = None) -> Path:
    """The llama.cpp tree to take vocab files from: the argument, else ``<repo>/vendor/llama.cpp``,
    else ``$PYMTP_LLAMA_CPP_DIR``."""
    if llama_cpp_dir is not None:
        return Path(llama_cpp_dir)
    vendored = _repo_root() / "vendor" / "llama.cpp"
    if (vendored / _VOCAB_DIR).is_dir():
        return vendored
    env = os.environ.get("PYMTP_LLAMA_CPP_DIR")
    if env:
        return Path(env)
    raise FileNotFoundError(
        f"no llama.cpp tree: {vendored} does not exist and PYMTP_LLAMA_CPP_DIR is not set")


def vocab_path(vocab: str, llama_cpp_dir: str | os.PathLike | None = None) -> Path:
    path = resolve_llama_cpp_dir(llama_cpp_dir) / _VOCAB_DIR / f"ggml-vocab-{vocab}.gguf"
    if not path.is_file():
        raise FileNotFoundError(f"vocab file not found: {path}")
    return path


class _KVParser:
    """Reads the key/value section of a GGUF file.

    gguf.GGUFReader walks every array element through numpy views and takes
    seconds on a 32k-token vocab; this reads the same data in ~50 ms.
    """

    _SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                10: "<Q", 11: "<q", 12: "<d"}
    _STRING, _ARRAY = 8, 9

    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: str):
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def _string(self) -> bytes:
        n = self._unpack("<Q")
        value = self.data[self.pos:self.pos + n]
        self.pos += n
        return value

    def _value(self, vtype: int):
        if vtype == self._STRING:
            return self._string()
        if vtype == self._ARRAY:
            sub_type, n = self._unpack("<I"), self._unpack("<Q")
            return [self._value(sub_type) for _ in range(n)], sub_type
        return self._unpack(self._SCALARS[vtype])

    def read(self) -> dict[str, tuple]:
        """{key: (type, value, sub_type)} with strings as bytes and arrays as lists."""
        if self.data[:4] != b"GGUF":
            raise ValueError("not a GGUF file")
        self.pos = 4
        version, _n_tensors, n_kv = self._unpack("<I"), self._unpack("<Q"), self._unpack("<Q")
        if version < 2:
            raise ValueError(f"GGUF version {version} not supported")
        kv = {}
        for _ in range(n_kv):
            key = self._string().decode()
            vtype = self._unpack("<I")
            value = self._value(vtype)
            if vtype == self._ARRAY:
                value, sub_type = value
                kv[key] = (vtype, value, sub_type)
            else:
                kv[key] = (vtype, value, None)
        return kv


@functools.lru_cache(maxsize=4)
def _tokenizer_kv(path: Path) -> dict[str, tuple]:
    """The ``tokenizer.*`` key/values of a vocab file (cached: tests make many models)."""
    kv = _KVParser(path.read_bytes()).read()
    return {k: v for k, v in kv.items() if k.startswith("tokenizer.")}


def _token_types(tok_kv: dict[str, tuple]) -> np.ndarray:
    return np.asarray(tok_kv["tokenizer.ggml.token_type"][1], dtype=np.int32)


# --------------------------------------------------------------------------- weights

def _tname(tensor, bid: int | None = None, suffix: str = ".weight") -> str:
    """Upstream GGUF tensor name, e.g. _tname(ATTN_Q, 3) -> 'blk.3.attn_q.weight'."""
    return gguf.TENSOR_NAMES[tensor].format(bid=bid) + suffix


class _Weights:
    """Collects the tensors of one model.

    Arrays are numpy-shaped (ggml ne reversed): a matmul weight with ggml shape
    {n_in, n_out} is a numpy (n_out, n_in) array.
    """

    def __init__(self, seed: int, head: str):
        self.seed = seed
        self.head = head
        self.tensors: dict[str, np.ndarray] = {}

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def put(self, name: str, array: np.ndarray) -> np.ndarray:
        if name in self.tensors:
            raise ValueError(f"duplicate tensor {name}")
        self.tensors[name] = np.ascontiguousarray(array, dtype=np.float32)
        return self.tensors[name]

    def normal(self, name: str, shape: tuple[int, ...], std: float) -> np.ndarray:
        return self.put(name, std * self.rng(name).standard_normal(shape, dtype=np.float32))

    def uniform(self, name: str, shape: tuple[int, ...], low: float, high: float) -> np.ndarray:
        return self.put(name, self.rng(name).uniform(low, high, shape).astype(np.float32))

    def ones(self, name: str, n: int) -> np.ndarray:
        return self.put(name, np.ones(n, dtype=np.float32))

    def in_std(self, n_in: int, mtp: bool) -> float:
        """Std of a projection reading the (normalized) residual stream: unit-variance outputs."""
        if mtp and self.head == "random":
            return RANDOM_STD
        return 1.0 / math.sqrt(n_in)

    def out_std(self, n_in: int, mtp: bool) -> float:
        """Std of a projection writing into the residual stream: small, so the embedding dominates."""
        if mtp and self.head == "random":
            return RANDOM_STD
        return (MTP_OUT_SCALE if mtp else TRUNK_OUT_SCALE) / math.sqrt(n_in)

    def proj_in(self, name: str, n_in: int, n_out: int, *, mtp: bool = False) -> np.ndarray:
        return self.normal(name, (n_out, n_in), self.in_std(n_in, mtp))

    def proj_out(self, name: str, n_in: int, n_out: int, *, mtp: bool = False) -> np.ndarray:
        return self.normal(name, (n_out, n_in), self.out_std(n_in, mtp))

    def bias(self, name: str, n: int, *, mtp: bool = False) -> np.ndarray:
        return self.normal(name, (n,), RANDOM_STD if mtp and self.head == "random" else 0.1)


# Matrices llama.cpp's converter keeps in f32 (the MoE router, the SSM conv kernel).
_F32_MATRICES = ("ffn_gate_inp", "ssm_conv1d")


def _storage_dtype(name: str, array: np.ndarray) -> type:
    """f32 where llama.cpp's converter keeps f32 (1-D, norms, non-weights, _F32_MATRICES), else f16."""
    stem, _, suffix = name.rpartition(".")
    if (array.ndim <= 1 or suffix != "weight" or stem.endswith("_norm")
            or stem.rpartition(".")[2] in _F32_MATRICES):
        return np.float32
    return np.float16


# ------------------------------------------------------------------- shared blocks

def _embeddings(w: _Weights, d: TinyDims, token_types: np.ndarray) -> None:
    """token_embd, output_norm and a planted, untied LM head (see _lm_head)."""
    n_vocab = len(token_types)
    emb = w.normal(_tname(gguf.MODEL_TENSOR.TOKEN_EMBD), (n_vocab, d.n_embd), 1.0)
    w.ones(_tname(gguf.MODEL_TENSOR.OUTPUT_NORM), d.n_embd)
    output = _tname(gguf.MODEL_TENSOR.OUTPUT)
    w.put(output, _lm_head(w.rng(output), emb, token_types))


def _lm_head(rng: np.random.Generator, emb: np.ndarray, token_types: np.ndarray) -> np.ndarray:
    """LM head whose greedy choice for a residual ~emb(x) is succ(x), succ one random cycle
    through all normal tokens: row succ(x) is emb(x) plus LM_HEAD_NOISE of noise.

    So greedy text does not loop (unless context steers it), and the noise sets how easily
    the trunk's small context-dependent correction changes the choice. Rows of special
    tokens are 0 (logit 0, far below the top logit): they are never generated.
    """
    normal = np.flatnonzero(token_types == _NORMAL_TOKEN_TYPE)
    cycle = rng.permutation(normal)
    head = np.zeros_like(emb)
    head[np.roll(cycle, -1)] = emb[cycle] + LM_HEAD_NOISE * rng.standard_normal(
        (len(cycle), emb.shape[1]), dtype=np.float32)
    return head


def _attention(w: _Weights, il: int, n_embd: int, n_head: int, n_head_kv: int, head_dim: int, *,
               mtp: bool, q_mult: int = 1, qk_norm: bool = False, qkv_bias: bool = False) -> None:
    """attn_q/k/v/output (+ optional q/k norms and q/k/v biases). ``q_mult=2``: Q carries a gate."""
    T = gguf.MODEL_TENSOR
    n_q, n_kv = head_dim * n_head, head_dim * n_head_kv
    w.proj_in(_tname(T.ATTN_Q, il), n_embd, n_q * q_mult, mtp=mtp)
    w.proj_in(_tname(T.ATTN_K, il), n_embd, n_kv, mtp=mtp)
    w.proj_in(_tname(T.ATTN_V, il), n_embd, n_kv, mtp=mtp)
    if qkv_bias:
        for kind, n in ((T.ATTN_Q, n_q * q_mult), (T.ATTN_K, n_kv), (T.ATTN_V, n_kv)):
            w.bias(_tname(kind, il, ".bias"), n, mtp=mtp)
    if qk_norm:
        w.ones(_tname(T.ATTN_Q_NORM, il), head_dim)
        w.ones(_tname(T.ATTN_K_NORM, il), head_dim)
    w.proj_out(_tname(T.ATTN_OUT, il), n_q, n_embd, mtp=mtp)


def _dense_ffn(w: _Weights, il: int, n_embd: int, n_ff: int, *, mtp: bool) -> None:
    T = gguf.MODEL_TENSOR
    w.proj_in(_tname(T.FFN_GATE, il), n_embd, n_ff, mtp=mtp)
    w.proj_in(_tname(T.FFN_UP, il), n_embd, n_ff, mtp=mtp)
    w.proj_out(_tname(T.FFN_DOWN, il), n_ff, n_embd, mtp=mtp)


def _moe_ffn(w: _Weights, il: int, d: TinyDims, n_ff_shexp: int, *, mtp: bool) -> None:
    """Routed experts with a sigmoid router + selection bias, plus one shared expert."""
    T = gguf.MODEL_TENSOR
    w.proj_in(_tname(T.FFN_GATE_INP, il), d.n_embd, d.n_expert, mtp=mtp)
    w.normal(_tname(T.FFN_EXP_PROBS_B, il, ".bias"), (d.n_expert,), 0.1)
    experts = (d.n_expert, d.n_ff_exp, d.n_embd)
    w.normal(_tname(T.FFN_GATE_EXP, il), experts, w.in_std(d.n_embd, mtp))
    w.normal(_tname(T.FFN_UP_EXP, il), experts, w.in_std(d.n_embd, mtp))
    w.normal(_tname(T.FFN_DOWN_EXP, il), (d.n_expert, d.n_embd, d.n_ff_exp), w.out_std(d.n_ff_exp, mtp))
    w.proj_in(_tname(T.FFN_GATE_SHEXP, il), d.n_embd, n_ff_shexp, mtp=mtp)
    w.proj_in(_tname(T.FFN_UP_SHEXP, il), d.n_embd, n_ff_shexp, mtp=mtp)
    w.proj_out(_tname(T.FFN_DOWN_SHEXP, il), n_ff_shexp, d.n_embd, mtp=mtp)


def _nextn(w: _Weights, il: int, n_embd: int) -> None:
    """The MTP wiring: enorm/hnorm, eh_proj and a shared_head_norm (LM head is the trunk's)."""
    T = gguf.MODEL_TENSOR
    w.ones(_tname(T.NEXTN_ENORM, il), n_embd)
    w.ones(_tname(T.NEXTN_HNORM, il), n_embd)
    w.ones(_tname(T.NEXTN_SHARED_HEAD_NORM, il), n_embd)
    name = _tname(T.NEXTN_EH_PROJ, il)
    if w.head == "random":
        w.normal(name, (n_embd, 2 * n_embd), RANDOM_STD)
        return
    # The input is concat[enorm(emb), hnorm(h)], emb first: pass emb through, add a little h.
    eh = MTP_HIDDEN_MIX / math.sqrt(n_embd) * w.rng(name).standard_normal((n_embd, 2 * n_embd))
    eh[:, :n_embd] = np.eye(n_embd)
    w.put(name, eh)


# ------------------------------------------------------------------------ archs

@dataclass(frozen=True)
class _Arch:
    name: str
    default_n_nextn: int
    max_n_nextn: int            # what the arch's MTP graph supports
    tensors: Callable           # (weights, dims, n_nextn) -> None
    hparams: Callable           # (GGUFWriter, dims, n_nextn) -> None


# glm4moe: GLM-4.5 style. Layer 0 dense, the rest (and the MTP block) MoE with a shared expert.
_GLM_DENSE_LEAD = 1


def _glm4moe_tensors(w: _Weights, d: TinyDims, n_nextn: int) -> None:
    T = gguf.MODEL_TENSOR
    for il in range(d.n_layer + n_nextn):
        mtp = il >= d.n_layer
        w.ones(_tname(T.ATTN_NORM, il), d.n_embd)
        _attention(w, il, d.n_embd, d.n_head, d.n_head_kv, d.head_dim, mtp=mtp, qkv_bias=True)
        w.ones(_tname(T.ATTN_POST_NORM, il), d.n_embd)
        if il < _GLM_DENSE_LEAD:
            _dense_ffn(w, il, d.n_embd, d.n_ff, mtp=mtp)
        else:
            _moe_ffn(w, il, d, d.n_ff_exp, mtp=mtp)
        if mtp:
            _nextn(w, il, d.n_embd)


def _glm4moe_hparams(gw, d: TinyDims, n_nextn: int) -> None:
    _common_hparams(gw, d, n_nextn)
    gw.add_head_count(d.n_head)
    gw.add_head_count_kv(d.n_head_kv)
    gw.add_rope_dimension_count(d.head_dim // 2)          # partial_rotary_factor 0.5
    gw.add_expert_count(d.n_expert)
    gw.add_expert_used_count(d.n_expert_used)
    gw.add_expert_feed_forward_length(d.n_ff_exp)
    gw.add_expert_shared_count(1)
    gw.add_leading_dense_block_count(_GLM_DENSE_LEAD)
    gw.add_expert_weights_scale(1.0)
    gw.add_expert_weights_norm(True)
    gw.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


# qwen35: Qwen3.5 dense hybrid. Gated DeltaNet layers with a full-attention layer every
# _QWEN_FULL_ATTN_INTERVAL; the MTP block is a full-attention block (Q carries a gate).
_QWEN_FULL_ATTN_INTERVAL = 2
_QWEN_HEAD_DIM = 32
_QWEN_ROPE_DIMS = 8                         # partial rotary: 1/4 of the head
_QWEN_ROPE_SECTIONS = (2, 1, 1, 0)          # interleaved MRoPE (text only: t = h = w)
_QWEN_SSM = dict(d_conv=4, d_state=16, n_group=2, dt_rank=4)   # 2 k-heads, 4 v-heads of 16


def _qwen35_is_recurrent(il: int, d: TinyDims) -> bool:
    return il < d.n_layer and (il + 1) % _QWEN_FULL_ATTN_INTERVAL != 0


def _qwen35_gated_delta_net(w: _Weights, il: int, d: TinyDims) -> None:
    T = gguf.MODEL_TENSOR
    s = _QWEN_SSM
    key_dim = s["d_state"] * s["n_group"]
    value_dim = s["d_state"] * s["dt_rank"]
    conv_dim = 2 * key_dim + value_dim
    w.proj_in(_tname(T.ATTN_QKV, il), d.n_embd, conv_dim)
    w.proj_in(_tname(T.ATTN_GATE, il), d.n_embd, value_dim)
    w.normal(_tname(T.SSM_CONV1D, il), (conv_dim, s["d_conv"]), 1.0 / math.sqrt(s["d_conv"]))
    w.normal(_tname(T.SSM_DT, il, ".bias"), (s["dt_rank"],), 0.5)
    w.uniform(_tname(T.SSM_A, il, ""), (s["dt_rank"],), -4.0, -1.0)   # -exp(A_log)
    w.proj_in(_tname(T.SSM_BETA, il), d.n_embd, s["dt_rank"])
    w.proj_in(_tname(T.SSM_ALPHA, il), d.n_embd, s["dt_rank"])
    w.ones(_tname(T.SSM_NORM, il), s["d_state"])
    w.proj_out(_tname(T.SSM_OUT, il), value_dim, d.n_embd)


def _qwen35_tensors(w: _Weights, d: TinyDims, n_nextn: int) -> None:
    T = gguf.MODEL_TENSOR
    for il in range(d.n_layer + n_nextn):
        mtp = il >= d.n_layer
        w.ones(_tname(T.ATTN_NORM, il), d.n_embd)
        w.ones(_tname(T.ATTN_POST_NORM, il), d.n_embd)
        if _qwen35_is_recurrent(il, d):
            _qwen35_gated_delta_net(w, il, d)
        else:
            _attention(w, il, d.n_embd, d.n_head, d.n_head_kv, _QWEN_HEAD_DIM,
                       mtp=mtp, q_mult=2, qk_norm=True)
        _dense_ffn(w, il, d.n_embd, d.n_ff, mtp=mtp)
        if mtp:
            _nextn(w, il, d.n_embd)


def _qwen35_hparams(gw, d: TinyDims, n_nextn: int) -> None:
    s = _QWEN_SSM
    _common_hparams(gw, d, n_nextn)
    gw.add_head_count(d.n_head)
    gw.add_head_count_kv(d.n_head_kv)
    gw.add_key_length(_QWEN_HEAD_DIM)
    gw.add_value_length(_QWEN_HEAD_DIM)
    gw.add_rope_dimension_count(_QWEN_ROPE_DIMS)
    gw.add_rope_dimension_sections(list(_QWEN_ROPE_SECTIONS))
    gw.add_ssm_conv_kernel(s["d_conv"])
    gw.add_ssm_state_size(s["d_state"])
    gw.add_ssm_group_count(s["n_group"])
    gw.add_ssm_time_step_rank(s["dt_rank"])
    gw.add_ssm_inner_size(s["d_state"] * s["dt_rank"])
    gw.add_full_attention_interval(_QWEN_FULL_ATTN_INTERVAL)


# step35: Step-3.5 style. Sliding-window and full attention layers (full ones rotate half
# the head), per-layer head counts, a head-wise attention gate, layer 0 dense and the rest
# MoE; n_nextn chained MTP blocks (each one its own decoder layer).
_STEP_LAYER_SWA = (False, True)             # trunk pattern, repeated; MTP blocks are SWA
_STEP_SWA_HEADS = (2, 1)                    # (n_head, n_head_kv) of SWA layers
_STEP_SLIDING_WINDOW = 16
_STEP_DENSE_LEAD = 1
_STEP_N_FF_SHEXP = 32


def _step35_is_swa(il: int, d: TinyDims) -> bool:
    return il >= d.n_layer or _STEP_LAYER_SWA[il % len(_STEP_LAYER_SWA)]


def _step35_heads(il: int, d: TinyDims) -> tuple[int, int]:
    return _STEP_SWA_HEADS if _step35_is_swa(il, d) else (d.n_head, d.n_head_kv)


def _step35_tensors(w: _Weights, d: TinyDims, n_nextn: int) -> None:
    T = gguf.MODEL_TENSOR
    for il in range(d.n_layer + n_nextn):
        mtp = il >= d.n_layer
        n_head, n_head_kv = _step35_heads(il, d)
        w.ones(_tname(T.ATTN_NORM, il), d.n_embd)
        _attention(w, il, d.n_embd, n_head, n_head_kv, d.head_dim, mtp=mtp, qk_norm=True)
        w.proj_in(_tname(T.ATTN_GATE, il), d.n_embd, n_head, mtp=mtp)
        w.ones(_tname(T.FFN_NORM, il), d.n_embd)
        if il < _STEP_DENSE_LEAD:
            _dense_ffn(w, il, d.n_embd, d.n_ff, mtp=mtp)
        else:
            _moe_ffn(w, il, d, _STEP_N_FF_SHEXP, mtp=mtp)
        if mtp:
            _nextn(w, il, d.n_embd)


def _step35_hparams(gw, d: TinyDims, n_nextn: int) -> None:
    layers = range(d.n_layer + n_nextn)
    _common_hparams(gw, d, n_nextn)
    gw.add_head_count([_step35_heads(il, d)[0] for il in layers])
    gw.add_head_count_kv([_step35_heads(il, d)[1] for il in layers])
    gw.add_key_length(d.head_dim)
    gw.add_value_length(d.head_dim)
    gw.add_rope_freq_base_swa(d.rope_freq_base)
    gw.add_sliding_window(_STEP_SLIDING_WINDOW)
    gw.add_sliding_window_pattern([_step35_is_swa(il, d) for il in layers])
    gw.add_expert_count(d.n_expert)
    gw.add_expert_used_count(d.n_expert_used)
    gw.add_expert_feed_forward_length(d.n_ff_exp)
    gw.add_expert_shared_feed_forward_length(_STEP_N_FF_SHEXP)
    gw.add_leading_dense_block_count(_STEP_DENSE_LEAD)
    gw.add_expert_weights_scale(1.0)
    gw.add_expert_weights_norm(True)
    gw.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


def _common_hparams(gw, d: TinyDims, n_nextn: int) -> None:
    gw.add_context_length(d.n_ctx_train)
    gw.add_embedding_length(d.n_embd)
    gw.add_block_count(d.n_layer + n_nextn)
    gw.add_nextn_predict_layers(n_nextn)
    gw.add_feed_forward_length(d.n_ff)
    gw.add_layer_norm_rms_eps(d.rms_eps)
    gw.add_rope_freq_base(d.rope_freq_base)


_ARCHS = {
    "glm4moe": _Arch("glm4moe", 1, 3, _glm4moe_tensors, _glm4moe_hparams),
    "qwen35": _Arch("qwen35", 1, 3, _qwen35_tensors, _qwen35_hparams),
    "step35": _Arch("step35", 3, 8, _step35_tensors, _step35_hparams),
}
assert tuple(_ARCHS) == ARCHS


# ------------------------------------------------------------------------ writing

def _write_tokenizer(gw, tok_kv: dict[str, tuple]) -> None:
    for key, (vtype, value, sub_type) in tok_kv.items():
        if key == gguf.Keys.Tokenizer.CHAT_TEMPLATE:
            continue
        gw.add_key_value(key, value, gguf.GGUFValueType(vtype),
                         sub_type=None if sub_type is None else gguf.GGUFValueType(sub_type))
    gw.add_chat_template(CHATML_TEMPLATE)


def _write_gguf(path: Path, arch: _Arch, weights: _Weights, tok_kv: dict[str, tuple],
                n_nextn: int, vocab: str) -> None:
    gw = gguf.GGUFWriter(str(path), arch.name)
    try:
        gw.add_name(f"tiny-{arch.name}-{weights.head}-seed{weights.seed}")
        gw.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        gw.add_string("pymtp.tiny.head", weights.head)
        gw.add_uint32("pymtp.tiny.seed", weights.seed)
        gw.add_string("pymtp.tiny.vocab", vocab)
        arch.hparams(gw, DIMS, n_nextn)
        _write_tokenizer(gw, tok_kv)
        for name, array in weights.tensors.items():
            gw.add_tensor(name, array.astype(_storage_dtype(name, array), copy=False))
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_tensors_to_file()
    finally:
        gw.close()


def make_tiny_model(arch: str, out_path, *, seed: int = 0, n_nextn: int | None = None,
                    head: str = "planted", vocab: str = DEFAULT_VOCAB,
                    llama_cpp_dir=None) -> Path:
    """Write a tiny random GGUF of ``arch`` with ``n_nextn`` MTP blocks to ``out_path``.

    ``n_nextn`` defaults to 1 (glm4moe, qwen35: their MTP graphs run one block) or
    3 (step35: chained heads); 0 gives a trunk-only model that still declares
    ``nextn_predict_layers = 0``.  ``head`` is "planted" (MTP agrees with the trunk
    most of the time) or "random".  Returns the path written.
    """
    if arch not in _ARCHS:
        raise ValueError(f"unknown arch {arch!r}; expected one of {ARCHS}")
    if head not in HEADS:
        raise ValueError(f"unknown head {head!r}; expected one of {HEADS}")
    if int(seed) < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    spec = _ARCHS[arch]
    n_nextn = spec.default_n_nextn if n_nextn is None else int(n_nextn)
    if not 0 <= n_nextn <= spec.max_n_nextn:
        raise ValueError(f"{arch}: n_nextn must be in [0, {spec.max_n_nextn}], got {n_nextn}")

    tok_kv = _tokenizer_kv(vocab_path(vocab, llama_cpp_dir))
    weights = _Weights(int(seed), head)
    _embeddings(weights, DIMS, _token_types(tok_kv))
    spec.tensors(weights, DIMS, n_nextn)

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    _write_gguf(out_path, spec, weights, tok_kv, n_nextn, vocab)
    return out_path


# ------------------------------------------------------------------------ CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pymtp_devtools.tiny_models",
        description="Write a tiny random-weight GGUF model with MTP layers (for tests).")
    parser.add_argument("arch", choices=ARCHS)
    parser.add_argument("out", type=Path, help="output .gguf path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--head", choices=HEADS, default="planted")
    parser.add_argument("--n-nextn", type=int, default=None, help="number of MTP blocks")
    parser.add_argument("--vocab", default=DEFAULT_VOCAB,
                        help="llama.cpp vocab file: models/ggml-vocab-<VOCAB>.gguf")
    parser.add_argument("--llama-cpp-dir", type=Path, default=None)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    path = make_tiny_model(args.arch, args.out, seed=args.seed, n_nextn=args.n_nextn,
                           head=args.head, vocab=args.vocab, llama_cpp_dir=args.llama_cpp_dir)
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - t0:.2f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
