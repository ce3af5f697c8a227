"""Random-weight GGUFs of realistic shape with one MTP layer, for engine-cost benchmarks.

    python -m pymtp_devtools.realistic qwen35-27b OUT.gguf            # ~16 GB, Qwen3.5-27B-like
    python -m pymtp_devtools.realistic qwen35moe-35b-a3b OUT.gguf     # ~20 GB, Qwen3.5-35B-A3B-like
    python -m pymtp_devtools.realistic dense-27b OUT.gguf --split-head HEAD.gguf   # ~15 GB + its MTP block
    python -m pymtp_devtools.realistic qwen35-27b small.gguf --scale 0.05 --n-vocab 0   # tests

What "realistic" means here: the tensor shapes, layer pattern and hyperparameters of the
public Qwen3.5-27B / Qwen3.5-35B-A3B configs (64 resp. 40 layers, Gated DeltaNet layers with a
gated full-attention layer every 4th, 248320-word vocabulary, one MTP block), stored with the
tensor types llama.cpp's Q4_K_M recipe picks (llama-quant.cpp: Q4_K for most matrices, Q6_K for
output.weight and for attn_v / ffn_down on the "more bits" layers, Q5_K for the DeltaNet's fused
attn_qkv, F32 for norms, 1-D tensors, the MoE router and the conv kernel). The weights are
random, so only the cost of a decode is realistic, not the text: use the file with synthetic
acceptance (``--synthetic-rates`` / ``--spec-synth-rates``).

``dense-27b`` is the 27B shape's dense twin for pymtp's own MTP graph (native/models/dense-mtp.cpp,
which grafted and parallel heads use; upstream's qwen35 MTP graph has neither): the same widths,
depth, attention heads and vocabulary, but every layer plain full attention of the qwen3
architecture (q/k norms, no output gate, no DeltaNet). ``--split-head`` writes its MTP block as a
head-only sidecar and the trunk without it, as a grafted model is laid out.

How the weights are made: the quantized payloads (4-/5-/6-/8-bit codes) are random bytes and
only the block headers are set, so every block dequantizes to zero-mean values of a chosen std
(1/sqrt(fan_in) for matrices reading the residual stream, 0.2/sqrt(fan_in) for those writing it,
like tiny_models), which keeps activations finite through all layers. Rows of the LM head that
belong to non-normal tokens (special tokens, the padding up to the vocabulary size) are zero, so
greedy decoding never emits end-of-generation tokens or empty pieces and runs to n_predict.

Tensors are streamed to disk chunk by chunk (never more than a few hundred MB in memory) and
the random payload is drawn on all cores; tokenizer and tensor naming come from tiny_models
(the tokenizer: llama.cpp's vocab-only ggml-vocab-qwen35.gguf, padded to the vocabulary size).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import gguf
import numpy as np

from pymtp_devtools.tiny_models import (
    _NORMAL_TOKEN_TYPE,
    TRUNK_OUT_SCALE,
    _tname,
    _tokenizer_kv,
    _write_tokenizer,
    resolve_llama_cpp_dir,
)

Q = gguf.GGMLQuantizationType
T = gguf.MODEL_TENSOR

# vocab-only GGUFs tried in order (the CUDA bundle carries only deepseek-coder's; the Qwen one can
# be passed with --vocab-file): only the tokenizer's behaviour differs, not the cost
VOCAB_CANDIDATES = ("qwen35", "qwen2", "deepseek-coder")


@dataclass(frozen=True)
class Shape:
    arch: str                    # "qwen35" (dense), "qwen35moe", or "qwen3" (every layer full attention)
    n_layer: int                 # trunk layers; one MTP block comes on top
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int = 256
    rope_dims: int = 64          # partial_rotary_factor 0.25
    rope_sections: tuple = (11, 11, 10, 0)
    n_ff: int = 0                # dense FFN
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    n_ff_shexp: int = 0
    ssm_d_state: int = 128       # linear_key_head_dim = linear_value_head_dim
    ssm_n_group: int = 16        # linear_num_key_heads
    ssm_dt_rank: int = 48        # linear_num_value_heads
    ssm_d_conv: int = 4
    full_attn_interval: int = 4
    n_vocab: int = 248320        # 0: the tokenizer's own size
    n_ctx_train: int = 262144
    rope_freq_base: float = 1e7
    rms_eps: float = 1e-6

    @property
    def n_layer_all(self) -> int:
        return self.n_layer + 1

    def is_recurrent(self, il: int) -> bool:
        return il < self.n_layer and (il + 1) % self.full_attn_interval != 0

    @property
    def gated_attention(self) -> bool:
        """Qwen3.5's full attention gates its output (Q and the gate in one matrix); qwen3's does not."""
        return self.arch != "qwen3"


# From the public configs (config.json text_config of Qwen/Qwen3.5-27B and Qwen/Qwen3.5-35B-A3B).
PRESETS = {
    "qwen35-27b": Shape("qwen35", n_layer=64, n_embd=5120, n_head=24, n_head_kv=4, n_ff=17408,
                        ssm_n_group=16, ssm_dt_rank=48),
    "qwen35moe-35b-a3b": Shape("qwen35moe", n_layer=40, n_embd=2048, n_head=16, n_head_kv=2,
                               n_expert=256, n_expert_used=8, n_ff_exp=512, n_ff_shexp=512,
                               ssm_n_group=16, ssm_dt_rank=32),
    # the 27B shape's dense twin: Qwen3.5-27B's widths, heads and vocabulary, every layer qwen3 attention
    "dense-27b": Shape("qwen3", n_layer=64, n_embd=5120, n_head=24, n_head_kv=4, n_ff=17408, rope_dims=256,
                       rope_sections=(), full_attn_interval=1),
}


def _round_to(x: float, m: int, lo: int) -> int:
    return max(lo, int(round(x / m)) * m)


def scaled(shape: Shape, s: float) -> Shape:
    """The same architecture with widths, head counts, experts and depth times ``s`` (for tests).

    Widths stay multiples of 256 (K-quant rows), head ratios (GQA, DeltaNet value/key heads) are
    kept, the layer count stays a multiple of the full-attention interval."""
    if s == 1.0:
        return shape
    kv = max(1, round(shape.n_head_kv * s))
    groups = max(1, round(shape.ssm_n_group * s))
    experts = max(shape.n_expert_used, round(shape.n_expert * s)) if shape.n_expert else 0
    return replace(
        shape,
        n_layer=_round_to(shape.n_layer * s, shape.full_attn_interval, shape.full_attn_interval),
        n_embd=_round_to(shape.n_embd * s, 256, 256),
        n_head=kv * (shape.n_head // shape.n_head_kv), n_head_kv=kv,
        n_ff=_round_to(shape.n_ff * s, 256, 256) if shape.n_ff else 0,
        n_expert=experts,
        n_ff_exp=_round_to(shape.n_ff_exp * s, 256, 256) if shape.n_ff_exp else 0,
        n_ff_shexp=_round_to(shape.n_ff_shexp * s, 256, 256) if shape.n_ff_shexp else 0,
        ssm_n_group=groups, ssm_dt_rank=groups * (shape.ssm_dt_rank // shape.ssm_n_group))


# --------------------------------------------------------------------------- tensor plan

@dataclass
class TensorPlan:
    name: str
    shape: tuple           # numpy order (outermost first); the last axis is the row (ggml ne0)
    qtype: Q
    init: str              # "ones", "normal", "uniform", "quant"
    std: float = 0.0
    low: float = 0.0
    high: float = 0.0
    zero_rows: np.ndarray | None = None    # rows of the LM head to zero (non-normal tokens)

    @property
    def n_elements(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        block, size = gguf.GGML_QUANT_SIZES[self.qtype]
        return self.n_elements // block * size


def _more_bits(i: int, n: int) -> bool:
    """llama-quant.cpp's use_more_bits: which attn_v / ffn_down get Q6_K in Q4_K_M."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _kquant(n_in: int, want: Q) -> Q:
    """``want`` if rows of n_in fit its blocks, else Q8_0 (32-blocks), else F16."""
    if n_in % gguf.GGML_QUANT_SIZES[want][0] == 0:
        return want
    return Q.Q8_0 if n_in % 32 == 0 else Q.F16


class _Planner:
    def __init__(self, shape: Shape):
        self.s = shape
        self.tensors: list[TensorPlan] = []
        self.i_attn_v = 0
        self.n_attn_v = sum(1 for il in range(shape.n_layer_all) if not shape.is_recurrent(il))

    def add(self, t: TensorPlan) -> None:
        self.tensors.append(t)

    def ones(self, name: str, n: int) -> None:
        self.add(TensorPlan(name, (n,), Q.F32, "ones"))

    def f32(self, name: str, shape: tuple, std: float) -> None:
        self.add(TensorPlan(name, shape, Q.F32, "normal", std=std))

    def mat(self, name: str, n_in: int, n_out: int, *, out: bool = False, want: Q = Q.Q4_K,
            n_mat: int = 0) -> None:
        """A matmul weight {n_in, n_out} (x n_mat experts): reads (std 1/sqrt(n_in)) or writes
        (std TRUNK_OUT_SCALE/sqrt(n_in)) the residual stream."""
        std = (TRUNK_OUT_SCALE if out else 1.0) / math.sqrt(n_in)
        shape = (n_mat, n_out, n_in) if n_mat else (n_out, n_in)
        self.add(TensorPlan(name, shape, _kquant(n_in, want), "quant", std=std))

    def down_type(self, il: int) -> Q:
        return Q.Q6_K if _more_bits(il, self.s.n_layer_all) else Q.Q4_K

    def attention(self, il: int) -> None:
        s = self.s
        n_q, n_kv = s.head_dim * s.n_head, s.head_dim * s.n_head_kv
        self.mat(_tname(T.ATTN_Q, il), s.n_embd, 2 * n_q if s.gated_attention else n_q)  # (Q and its gate)
        self.mat(_tname(T.ATTN_K, il), s.n_embd, n_kv)
        v_type = Q.Q6_K if _more_bits(self.i_attn_v, self.n_attn_v) else Q.Q4_K
        self.i_attn_v += 1
        self.mat(_tname(T.ATTN_V, il), s.n_embd, n_kv, want=v_type)
        self.ones(_tname(T.ATTN_Q_NORM, il), s.head_dim)
        self.ones(_tname(T.ATTN_K_NORM, il), s.head_dim)
        self.mat(_tname(T.ATTN_OUT, il), n_q, s.n_embd, out=True)

    def gated_delta_net(self, il: int) -> None:
        s = self.s
        key_dim = s.ssm_d_state * s.ssm_n_group
        value_dim = s.ssm_d_state * s.ssm_dt_rank
        conv_dim = 2 * key_dim + value_dim
        self.mat(_tname(T.ATTN_QKV, il), s.n_embd, conv_dim, want=Q.Q5_K)
        self.mat(_tname(T.ATTN_GATE, il), s.n_embd, value_dim)
        self.f32(_tname(T.SSM_CONV1D, il), (conv_dim, s.ssm_d_conv), 1.0 / math.sqrt(s.ssm_d_conv))
        self.f32(_tname(T.SSM_DT, il, ".bias"), (s.ssm_dt_rank,), 0.5)
        self.add(TensorPlan(_tname(T.SSM_A, il, ""), (s.ssm_dt_rank,), Q.F32, "uniform",
                            low=-4.0, high=-1.0))                     # -exp(A_log)
        self.mat(_tname(T.SSM_BETA, il), s.n_embd, s.ssm_dt_rank)
        self.mat(_tname(T.SSM_ALPHA, il), s.n_embd, s.ssm_dt_rank)
        self.ones(_tname(T.SSM_NORM, il), s.ssm_d_state)
        self.mat(_tname(T.SSM_OUT, il), value_dim, s.n_embd, out=True)

    def ffn(self, il: int) -> None:
        s = self.s
        if not s.n_expert:
            self.mat(_tname(T.FFN_GATE, il), s.n_embd, s.n_ff)
            self.mat(_tname(T.FFN_UP, il), s.n_embd, s.n_ff)
            self.mat(_tname(T.FFN_DOWN, il), s.n_ff, s.n_embd, out=True, want=self.down_type(il))
            return
        self.f32(_tname(T.FFN_GATE_INP, il), (s.n_expert, s.n_embd), 1.0 / math.sqrt(s.n_embd))
        self.mat(_tname(T.FFN_GATE_EXP, il), s.n_embd, s.n_ff_exp, n_mat=s.n_expert)
        self.mat(_tname(T.FFN_UP_EXP, il), s.n_embd, s.n_ff_exp, n_mat=s.n_expert)
        self.mat(_tname(T.FFN_DOWN_EXP, il), s.n_ff_exp, s.n_embd, out=True, n_mat=s.n_expert,
                 want=self.down_type(il))
        self.f32(_tname(T.FFN_GATE_INP_SHEXP, il), (s.n_embd,), 1.0 / math.sqrt(s.n_embd))
        self.mat(_tname(T.FFN_GATE_SHEXP, il), s.n_embd, s.n_ff_shexp)
        self.mat(_tname(T.FFN_UP_SHEXP, il), s.n_embd, s.n_ff_shexp)
        self.mat(_tname(T.FFN_DOWN_SHEXP, il), s.n_ff_shexp, s.n_embd, out=True, want=self.down_type(il))

    def plan(self, token_types: np.ndarray) -> list[TensorPlan]:
        s = self.s
        n_vocab = len(token_types)
        self.add(TensorPlan(_tname(T.TOKEN_EMBD), (n_vocab, s.n_embd), _kquant(s.n_embd, Q.Q4_K),
                            "quant", std=1.0))
        self.ones(_tname(T.OUTPUT_NORM), s.n_embd)
        self.add(TensorPlan(_tname(T.OUTPUT), (n_vocab, s.n_embd), _kquant(s.n_embd, Q.Q6_K), "quant",
                            std=1.0 / math.sqrt(s.n_embd),
                            zero_rows=np.flatnonzero(token_types != _NORMAL_TOKEN_TYPE)))
        for il in range(s.n_layer_all):
            self.ones(_tname(T.ATTN_NORM, il), s.n_embd)
            # the norm before the FFN: qwen35 names it attn_post_norm, qwen3 ffn_norm
            self.ones(_tname(T.ATTN_POST_NORM if s.gated_attention else T.FFN_NORM, il), s.n_embd)
            if s.is_recurrent(il):
                self.gated_delta_net(il)
            else:
                self.attention(il)
            self.ffn(il)
            if il >= s.n_layer:                          # the MTP block's nextn wiring
                self.ones(_tname(T.NEXTN_ENORM, il), s.n_embd)
                self.ones(_tname(T.NEXTN_HNORM, il), s.n_embd)
                self.ones(_tname(T.NEXTN_SHARED_HEAD_NORM, il), s.n_embd)
                self.mat(_tname(T.NEXTN_EH_PROJ, il), 2 * s.n_embd, s.n_embd)
        return self.tensors


# ------------------------------------------------------------------------ quant payloads

_Q_STD_Q4 = math.sqrt((16 ** 2 - 1) / 12)     # std of a uniform 4-bit code
_Q_STD_Q5 = math.sqrt((32 ** 2 - 1) / 12)
_Q_STD_Q6 = math.sqrt((64 ** 2 - 1) / 12)
_Q_STD_Q8 = math.sqrt((256 ** 2 - 1) / 12)
_SC_LO, _SC_HI = 24, 64                        # 6-bit sub-block scales drawn from [24, 63]
_SC_RMS = math.sqrt(np.mean(np.arange(_SC_LO, _SC_HI, dtype=np.float64) ** 2))


def _f16_bytes(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype(np.float16)).view(np.uint8).reshape(*x.shape, 2)


def _pack_k_scales(sc: np.ndarray) -> np.ndarray:
    """The 12-byte scales field of Q4_K/Q5_K for 8 six-bit scales per block, with min == scale
    (ggml's get_scale_min_k4 layout), so a block's codes are centred: d*sc*(q - mid)."""
    sc = sc.astype(np.uint8)
    out = np.empty((sc.shape[0], 12), dtype=np.uint8)
    lo, hi = sc[:, :4], sc[:, 4:]
    out[:, 0:4] = lo | ((hi >> 4) << 6)          # scales 0-3 + top bits of scales 4-7
    out[:, 4:8] = lo | ((hi >> 4) << 6)          # mins 0-3 (= scales) + top bits of mins 4-7
    out[:, 8:12] = (hi & 0xF) | ((hi & 0xF) << 4)
    return out


def _fill_blocks(blocks: np.ndarray, qtype: Q, std: float, rng: np.random.Generator) -> None:
    """Overwrite the headers of random-payload blocks (n_blocks, block_bytes) in place so that
    every block dequantizes to zero-mean values of std ``std``."""
    nb = blocks.shape[0]
    if qtype in (Q.Q4_K, Q.Q5_K):
        half_range = 7.5 if qtype == Q.Q4_K else 15.5
        code_std = _Q_STD_Q4 if qtype == Q.Q4_K else _Q_STD_Q5
        d = np.full(nb, std / (_SC_RMS * code_std), dtype=np.float32)
        blocks[:, 0:2] = _f16_bytes(d)
        blocks[:, 2:4] = _f16_bytes(d * half_range)               # dmin: value = d*sc*(q - mid)
        blocks[:, 4:16] = _pack_k_scales(rng.integers(_SC_LO, _SC_HI, (nb, 8), dtype=np.uint8))
    elif qtype == Q.Q6_K:
        sc = rng.integers(_SC_LO, _SC_HI, (nb, 16), dtype=np.int16)
        sc *= rng.choice(np.array([-1, 1], dtype=np.int16), (nb, 16))   # signs cancel the -0.5 offset
        blocks[:, 192:208] = sc.astype(np.int8).view(np.uint8)
        blocks[:, 208:210] = _f16_bytes(np.full(nb, std / (_SC_RMS * _Q_STD_Q6), dtype=np.float32))
    elif qtype == Q.Q8_0:
        blocks[:, 0:2] = _f16_bytes(np.full(nb, std / _Q_STD_Q8, dtype=np.float32))
    else:
        raise ValueError(f"no random payload for {qtype.name}")


def _zero_block_scales(blocks: np.ndarray, qtype: Q) -> None:
    if qtype in (Q.Q4_K, Q.Q5_K, Q.Q8_0):
        blocks[:, 0:4 if qtype != Q.Q8_0 else 2] = 0
    elif qtype == Q.Q6_K:
        blocks[:, 208:210] = 0
    else:
        blocks[:] = 0


CHUNK_BYTES = 32 << 20


def _chunk_rows(t: TensorPlan) -> int:
    row_bytes = t.nbytes // (t.n_elements // t.shape[-1])
    return max(1, CHUNK_BYTES // row_bytes)


def _make_chunk(t: TensorPlan, seed: int, row0: int, row1: int) -> np.ndarray:
    """Rows [row0, row1) of tensor t (rows over all leading axes), as bytes."""
    n_in = t.shape[-1]
    rng = np.random.Generator(np.random.SFC64([seed, zlib.crc32(t.name.encode()), row0]))
    n = (row1 - row0) * n_in
    if t.qtype in (Q.F32, Q.F16):
        dtype = np.float32 if t.qtype == Q.F32 else np.float16
        return (t.std * rng.standard_normal(n, dtype=np.float32)).astype(dtype).view(np.uint8)
    block, size = gguf.GGML_QUANT_SIZES[t.qtype]
    nb = n // block
    raw = rng.bit_generator.random_raw((nb * size + 7) // 8).view(np.uint8)[: nb * size]
    blocks = raw.reshape(nb, size)
    _fill_blocks(blocks, t.qtype, t.std, rng)
    if t.zero_rows is not None:
        sel = t.zero_rows[(t.zero_rows >= row0) & (t.zero_rows < row1)] - row0
        if sel.size:
            bpr = n_in // block
            idx = (sel[:, None] * bpr + np.arange(bpr)[None, :]).ravel()
            sub = blocks[idx]
            _zero_block_scales(sub, t.qtype)
            blocks[idx] = sub
    return blocks.reshape(-1)


def _small_tensor(t: TensorPlan, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(t.name.encode())])
    if t.init == "ones":
        a = np.ones(t.shape, dtype=np.float32)
    elif t.init == "uniform":
        a = rng.uniform(t.low, t.high, t.shape).astype(np.float32)
    else:
        a = (t.std * rng.standard_normal(t.shape)).astype(np.float32)
    return a.view(np.uint8).reshape(-1)


def _jobs(tensors: list[TensorPlan], seed: int):
    """(tensor index, callable) per chunk, in file order."""
    for i, t in enumerate(tensors):
        if t.init != "quant" and t.qtype == Q.F32 and t.n_elements <= (CHUNK_BYTES // 4):
            yield i, (lambda t=t: _small_tensor(t, seed))
            continue
        n_rows = t.n_elements // t.shape[-1]
        step = _chunk_rows(t)
        for r0 in range(0, n_rows, step):
            r1 = min(n_rows, r0 + step)
            yield i, (lambda t=t, r0=r0, r1=r1: _make_chunk(t, seed, r0, r1))


def _ordered_parallel(jobs, workers: int) -> Iterator:
    """Run (key, fn) jobs on a thread pool, yield (key, result) in order, at most 2*workers ahead."""
    window = max(2, 2 * workers)
    with ThreadPoolExecutor(workers) as ex:
        pending = []
        for key, fn in jobs:
            pending.append((key, ex.submit(fn)))
            if len(pending) >= window:
                k, f = pending.pop(0)
                yield k, f.result()
        for k, f in pending:
            yield k, f.result()


# ------------------------------------------------------------------------ tokenizer, hparams

def _find_vocab(vocab_file: str | os.PathLike | None, llama_cpp_dir=None) -> Path:
    if vocab_file:
        return Path(vocab_file)
    env = os.environ.get("PYMTP_VOCAB_FILE")
    if env:
        return Path(env)
    models = resolve_llama_cpp_dir(llama_cpp_dir) / "models"
    for v in VOCAB_CANDIDATES:
        p = models / f"ggml-vocab-{v}.gguf"
        if p.is_file():
            return p
    raise FileNotFoundError(f"no vocab file among {VOCAB_CANDIDATES} in {models}; pass --vocab-file")


def _padded_tokenizer(tok_kv: dict, n_vocab: int) -> tuple[dict, np.ndarray]:
    """The tokenizer key/values with tokens/token_type (and scores) padded to n_vocab with
    '[PAD<i>]' UNUSED tokens, as llama.cpp's converter pads Qwen vocabularies."""
    kv = dict(tok_kv)
    tokens = list(kv["tokenizer.ggml.tokens"][1])
    types = list(kv["tokenizer.ggml.token_type"][1])
    n_tok = len(tokens)
    if n_vocab and n_vocab < n_tok:
        raise ValueError(f"n_vocab {n_vocab} is below the tokenizer's {n_tok} tokens")
    pad = max(0, (n_vocab or n_tok) - n_tok)
    if pad:
        tokens += [f"[PAD{i}]".encode() for i in range(n_tok, n_tok + pad)]
        types += [int(gguf.TokenType.UNUSED)] * pad
        vt, _, st = kv["tokenizer.ggml.tokens"]
        kv["tokenizer.ggml.tokens"] = (vt, tokens, st)
        vt, _, st = kv["tokenizer.ggml.token_type"]
        kv["tokenizer.ggml.token_type"] = (vt, types, st)
        if "tokenizer.ggml.scores" in kv:
            vt, scores, st = kv["tokenizer.ggml.scores"]
            kv["tokenizer.ggml.scores"] = (vt, list(scores) + [0.0] * pad, st)
    return kv, np.asarray(types, dtype=np.int32)


def _hparams(gw: gguf.GGUFWriter, s: Shape) -> None:
    gw.add_context_length(s.n_ctx_train)
    gw.add_embedding_length(s.n_embd)
    gw.add_block_count(s.n_layer_all)
    gw.add_nextn_predict_layers(1)
    gw.add_feed_forward_length(s.n_ff)
    gw.add_layer_norm_rms_eps(s.rms_eps)
    gw.add_rope_freq_base(s.rope_freq_base)
    gw.add_head_count(s.n_head)
    gw.add_head_count_kv(s.n_head_kv)
    gw.add_key_length(s.head_dim)
    gw.add_value_length(s.head_dim)
    gw.add_rope_dimension_count(s.rope_dims)
    if s.arch == "qwen3":
        return
    gw.add_rope_dimension_sections(list(s.rope_sections))
    gw.add_ssm_conv_kernel(s.ssm_d_conv)
    gw.add_ssm_state_size(s.ssm_d_state)
    gw.add_ssm_group_count(s.ssm_n_group)
    gw.add_ssm_time_step_rank(s.ssm_dt_rank)
    gw.add_ssm_inner_size(s.ssm_d_state * s.ssm_dt_rank)
    gw.add_full_attention_interval(s.full_attn_interval)
    if s.n_expert:
        gw.add_expert_count(s.n_expert)
        gw.add_expert_used_count(s.n_expert_used)
        gw.add_expert_feed_forward_length(s.n_ff_exp)
        gw.add_expert_shared_feed_forward_length(s.n_ff_shexp)


# ------------------------------------------------------------------------ writing

def make_realistic_model(preset: str | Shape, out_path, *, scale: float = 1.0, n_layer: int | None = None,
                         n_vocab: int | None = None, seed: int = 0, vocab_file=None, workers: int | None = None,
                         progress: bool = False) -> Path:
    """Write a random-weight GGUF of ``preset``'s shape (see PRESETS) with one MTP block.

    ``scale`` shrinks widths/heads/experts/depth for tests, ``n_layer`` overrides the trunk
    depth, ``n_vocab`` the vocabulary size (0: the tokenizer's own). Returns the path."""
    shape = PRESETS[preset] if isinstance(preset, str) else preset
    shape = scaled(shape, scale)
    if n_layer is not None:
        shape = replace(shape, n_layer=int(n_layer))
    if n_vocab is not None:
        shape = replace(shape, n_vocab=int(n_vocab))
    vocab = _find_vocab(vocab_file)
    tok_kv, token_types = _padded_tokenizer(_tokenizer_kv(vocab), shape.n_vocab)
    tensors = _Planner(shape).plan(token_types)

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    gw = gguf.GGUFWriter(str(out_path), shape.arch)
    t0 = time.perf_counter()
    try:
        name = preset if isinstance(preset, str) else shape.arch
        gw.add_name(f"random-{name}" + (f"-x{scale:g}" if scale != 1.0 else ""))
        gw.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
        gw.add_quantization_version(gguf.GGML_QUANT_VERSION)
        gw.add_string("pymtp.realistic.preset", name)
        gw.add_uint32("pymtp.realistic.seed", int(seed))
        gw.add_string("pymtp.realistic.vocab", vocab.name)
        _hparams(gw, shape)
        _write_tokenizer(gw, tok_kv)
        for t in tensors:
            gw.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes, raw_dtype=t.qtype)
        gw.write_header_to_file()
        gw.write_kv_data_to_file()
        gw.write_ti_data_to_file()
        fout = gw.fout[0]
        align = gw.data_alignment
        fout.write(bytes(-fout.tell() % align))
        total = sum(t.nbytes for t in tensors)
        written, last_i, tensor_written = 0, -1, 0
        for i, data in _ordered_parallel(_jobs(tensors, seed), workers or os.cpu_count() or 1):
            if i != last_i:
                if last_i >= 0:
                    assert tensor_written == tensors[last_i].nbytes, tensors[last_i].name
                    fout.write(bytes(-tensor_written % align))
                last_i, tensor_written = i, 0
            fout.write(memoryview(data))
            tensor_written += data.nbytes
            written += data.nbytes
            if progress and written % (1 << 30) < data.nbytes:
                el = time.perf_counter() - t0
                print(f"\r  {written / 1e9:.1f} / {total / 1e9:.1f} GB  ({written / 1e9 / el:.2f} GB/s)",
                      end="", file=sys.stderr, flush=True)
        assert tensor_written == tensors[last_i].nbytes, tensors[last_i].name
        fout.write(bytes(-tensor_written % align))
        if progress:
            print(file=sys.stderr)
    finally:
        gw.close()
    return out_path


def describe(preset: str, scale: float = 1.0) -> str:
    s = scaled(PRESETS[preset], scale)
    return ", ".join(f"{k}={v}" for k, v in s.__dict__.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pymtp_devtools.realistic",
                                 description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("preset", choices=sorted(PRESETS))
    ap.add_argument("out", type=Path)
    ap.add_argument("--scale", type=float, default=1.0,
                    help="shrink widths, heads, experts and depth by this factor (tests; default 1)")
    ap.add_argument("--n-layer", type=int, default=None, help="trunk layers (after --scale)")
    ap.add_argument("--n-vocab", type=int, default=None,
                    help="vocabulary size (default: the preset's 248320; 0: the tokenizer's own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-file", default=None,
                    help="vocab-only GGUF to take the tokenizer from (default: $PYMTP_VOCAB_FILE, else "
                         "ggml-vocab-{qwen35,qwen2,deepseek-coder}.gguf of the llama.cpp tree)")
    ap.add_argument("--workers", type=int, default=None, help="threads drawing random payload (default: all)")
    ap.add_argument("--split-head", type=Path, default=None, metavar="HEAD.gguf",
                    help="move the MTP block into this head-only sidecar; OUT keeps the trunk alone "
                         "(dense-27b: how a grafted head is laid out)")
    args = ap.parse_args(argv)
    shape = scaled(PRESETS[args.preset], args.scale)
    if args.n_layer is not None:
        shape = replace(shape, n_layer=args.n_layer)
    print(f"{args.preset}: {', '.join(f'{k}={v}' for k, v in shape.__dict__.items())}", file=sys.stderr)
    t0 = time.perf_counter()
    path = make_realistic_model(args.preset, args.out, scale=args.scale, n_layer=args.n_layer,
                                n_vocab=args.n_vocab, seed=args.seed, vocab_file=args.vocab_file,
                                workers=args.workers, progress=True)
    dt = time.perf_counter() - t0
    size = path.stat().st_size
    print(f"{path}: {size / 1e9:.2f} GB in {dt:.1f} s ({size / 1e9 / dt:.2f} GB/s)", file=sys.stderr)
    if args.split_head is not None:
        split_head(path, args.split_head)
        print(f"{args.split_head}: the MTP block ({args.split_head.stat().st_size / 1e9:.2f} GB); {path}: the trunk",
              file=sys.stderr)
    return 0


def split_head(path: Path, head: Path) -> None:
    """Move the MTP block of ``path`` into the head-only sidecar ``head`` (the trunk stays in ``path``)."""
    from pymtp_devtools.tiny_dense import write_base_only, write_head_only

    write_head_only(path, head)
    trunk = path.with_name(path.name + ".trunk")
    write_base_only(path, trunk)
    trunk.replace(path)


if __name__ == "__main__":
    sys.exit(main())
