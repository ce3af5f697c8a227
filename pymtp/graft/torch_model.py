"""The base model's forward pass in torch, computed from its GGUF tensors as stored, and the
MTP head (the contract with llama.cpp's dense MTP graph, native/models/dense-mtp.cpp).

What llama.cpp computes, and so what this computes:

* RMSNorm(x) = x / sqrt(mean(x^2) + eps) * w (weights as stored; gemma3's already carry +1).
* llama: rope "NORM" (adjacent pairs) on the stored, permuted attn_q/attn_k; qwen2, qwen3,
  gemma3: rope "NEOX" (halves). Optional llama rope_freqs factors divide the angles.
* GQA: query head h reads KV head h // (n_head / n_head_kv).
* qwen3/gemma3: per-head RMSNorm of Q and K before rope; gemma3: embeddings scaled by
  sqrt(n_embd), post-attention/post-FFN norms, GELU (tanh) FFN, sliding-window layers with
  their own rope base, optional final logit softcap.
* The trunk's hidden state h_p is the final-norm output (the input of the LM head).
* A feature head (``pymtp graft --features``, EAGLE-3-style) is fed, in place of h_p, the fused
  f_p = feat . [h_p; RMSNorm(r_a(p)); RMSNorm(r_b(p))] (GGUF blk.L.nextn.eh_proj.feat,
  [3*n_embd, n_embd]; RMSNorm without weight), where r_l is the residual stream entering trunk
  layer l, for the layers ``feature_layers(n_layer)`` (a quarter and half of the depth). The
  trunk graph computes f_p (native/models/dense-mtp.cpp); later draft steps still feed the head its
  own ``out``.

MTP head at position p, inputs (x_p, h_{p-1}) (h_{-1} = 0; a feature head: f_{p-1}):
    e = RMSNorm(tok_embd[x_p]) * enorm            (no gemma3 input scale)
    h = RMSNorm(h_{p-1}) * hnorm
    z = eh_proj([e; h])                           (Linear 2*n_embd -> n_embd, e first)
    z = one decoder block of the arch (global attention, position p, causal over MTP positions)
    out = RMSNorm(z) * shared_head_norm           (the next draft step's h)
    logits = LM head(out)                         (the base's, shared and frozen)

A parallel head (``pymtp graft --parallel K``) also holds K-1 learned mask rows m_1..m_{K-1}
(GGUF blk.L.nextn.hnorm.mask, [n_embd, K-1]) and drafts K tokens in one pass: the entry
(x_p, h_{p-1}) at position p, then mask entries (x_p, h_{p-1} + m_i) at p + i; mask entry i attends
to the MTP entries at positions <= p and to mask entries 1..i of its own pass, and predicts
x_{p+1+i}. The mask entries are dropped after the pass (the MTP KV cache holds only (x_p, h_{p-1})).

Several chained heads (``pymtp graft --heads N``, stored at blk.{n_layer + j}, nextn layer
offset j): head j's entry at position p pairs x_p with g_{j-1}(p-1), where g_{-1} = the trunk's
h and g_j(q) = head j's ``out`` at q; each head attends causally over its own entries (its own
KV cache) and predicts x_{p+1}. See pymtp.graft.train for how they are trained.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..gguf_meta import FEATURE_TENSOR_SUFFIX
from .gguf_weights import BaseGGUF, HParams


@dataclass(frozen=True)
class ArchSpec:
    rope_neox: bool
    qk_norm: bool
    post_norms: bool
    act: str             # "silu" | "gelu"
    embd_scale: bool     # gemma3: inputs scaled by sqrt(n_embd)


ARCH_SPECS = {
    "llama": ArchSpec(rope_neox=False, qk_norm=False, post_norms=False, act="silu", embd_scale=False),
    "qwen2": ArchSpec(rope_neox=True, qk_norm=False, post_norms=False, act="silu", embd_scale=False),
    "qwen3": ArchSpec(rope_neox=True, qk_norm=True, post_norms=False, act="silu", embd_scale=False),
    "gemma3": ArchSpec(rope_neox=True, qk_norm=True, post_norms=True, act="gelu", embd_scale=True),
}

# Tensor name suffixes of one decoder block (GGUF names: blk.N.<suffix>).
BLOCK_REQUIRED = ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                  "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
                  "ffn_down.weight")
BLOCK_OPTIONAL = ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias",
                  "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias")
ARCH_BLOCK_EXTRA = {
    "llama": (),
    "qwen2": (),
    "qwen3": ("attn_q_norm.weight", "attn_k_norm.weight"),
    "gemma3": ("attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
               "post_ffw_norm.weight"),
}
# Optional tensors llama.cpp's dense MTP graph reads, per arch (others would be ignored there).
MTP_OPTIONAL = {
    "llama": ("attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias",
              "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"),
    "qwen2": ("attn_q.bias", "attn_k.bias", "attn_v.bias"),
    "qwen3": ("attn_q.bias", "attn_k.bias", "attn_v.bias"),
    "gemma3": (),
}


def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if w is not None:
        y = y * w.float()
    return y.to(x.dtype)


def _key(suffix: str) -> str:
    return suffix.replace(".", "__")


# --------------------------------------------------------------------------- rope

def rope_tables(positions: torch.Tensor, n_rot: int, base: float, freq_scale: float = 1.0,
                factors: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin of shape positions.shape + (n_rot/2,), as ggml_rope_ext computes them."""
    i = torch.arange(n_rot // 2, device=positions.device, dtype=torch.float64)
    inv = base ** (-2.0 * i / n_rot)
    if factors is not None:
        inv = inv / factors.to(positions.device, torch.float64)
    theta = positions.to(torch.float64)[..., None] * freq_scale * inv
    return torch.cos(theta).float(), torch.sin(theta).float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """x: [B, H, T, hd]; cos/sin: [T, n_rot/2] or [B, T, n_rot/2]."""
    n_rot = cos.shape[-1] * 2
    if cos.dim() == 2:
        cos, sin = cos[None, None], sin[None, None]
    else:
        cos, sin = cos[:, None], sin[:, None]
    xf = x.float()
    xr, rest = xf[..., :n_rot], xf[..., n_rot:]
    if neox:
        x0, x1 = xr[..., : n_rot // 2], xr[..., n_rot // 2:]
        out = torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1)
    else:
        x0, x1 = xr[..., 0::2], xr[..., 1::2]
        out = torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)
    if rest.shape[-1]:
        out = torch.cat([out, rest], dim=-1)
    return out.to(x.dtype)


# --------------------------------------------------------------------------- block

class Block(nn.Module):
    """One decoder block of the arch, holding its GGUF tensors (by suffix) as parameters."""

    def __init__(self, hp: HParams, tensors: dict, *, trainable: bool, swa: bool = False):
        super().__init__()
        self.hp = hp
        self.spec = ARCH_SPECS[hp.arch]
        self.swa = swa
        self.suffixes = []
        for suffix, t in tensors.items():
            self.register_parameter(_key(suffix), nn.Parameter(t.clone() if trainable else t,
                                                               requires_grad=trainable))
            self.suffixes.append(suffix)
        missing = [s for s in BLOCK_REQUIRED + ARCH_BLOCK_EXTRA[hp.arch] if s not in self.suffixes]
        if missing:
            raise ValueError(f"block is missing tensor(s) {missing}")

    def w(self, suffix: str):
        return getattr(self, _key(suffix), None)

    def _lin(self, x, name):
        return F.linear(x, self.w(name + ".weight"), self.w(name + ".bias"))

    def qkv(self, x: torch.Tensor, cos, sin):
        hp = self.hp
        B, T, _ = x.shape
        q = self._lin(x, "attn_q").view(B, T, hp.n_head, hp.head_dim).transpose(1, 2)
        k = self._lin(x, "attn_k").view(B, T, hp.n_head_kv, hp.head_dim).transpose(1, 2)
        v = self._lin(x, "attn_v").view(B, T, hp.n_head_kv, hp.head_dim).transpose(1, 2)
        if self.spec.qk_norm:
            q = rms_norm(q, self.w("attn_q_norm.weight"), hp.rms_eps)
            k = rms_norm(k, self.w("attn_k_norm.weight"), hp.rms_eps)
        q = apply_rope(q, cos, sin, self.spec.rope_neox)
        k = apply_rope(k, cos, sin, self.spec.rope_neox)
        return q, k, v

    @property
    def kq_scale(self) -> float:
        hp = self.hp
        return hp.attn_scale if hp.attn_scale else 1.0 / math.sqrt(hp.head_dim)

    def attn_out_ffn(self, x: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        """Residual adds, FFN (and gemma3's post norms) after the attention output ``att``."""
        hp, spec = self.hp, self.spec
        B, T = x.shape[:2]
        att = att.transpose(1, 2).reshape(B, T, hp.n_head * hp.head_dim)
        cur = self._lin(att, "attn_output")
        if spec.post_norms:
            cur = rms_norm(cur, self.w("post_attention_norm.weight"), hp.rms_eps)
        ffn_inp = cur + x
        cur = rms_norm(ffn_inp, self.w("ffn_norm.weight"), hp.rms_eps)
        gate = self._lin(cur, "ffn_gate")
        gate = F.silu(gate) if spec.act == "silu" else F.gelu(gate, approximate="tanh")
        cur = self._lin(gate * self._lin(cur, "ffn_up"), "ffn_down")
        if spec.post_norms:
            cur = rms_norm(cur, self.w("post_ffw_norm.weight"), hp.rms_eps)
        return cur + ffn_inp

    def forward(self, x, cos, sin, mask=None, is_causal=False, cache=None):
        """x: [B, T, D]. mask: bool [B|1, 1, T, S] (True = attend) or None with is_causal.
        cache: (k_buf, v_buf, start) to write this step's K/V at [start, start+T) and attend
        over [0, start+T)."""
        cur = rms_norm(x, self.w("attn_norm.weight"), self.hp.rms_eps)
        q, k, v = self.qkv(cur, cos, sin)
        if cache is not None:
            k_buf, v_buf, start = cache
            k_buf[:, :, start:start + k.shape[2]] = k.to(k_buf.dtype)
            v_buf[:, :, start:start + v.shape[2]] = v.to(v_buf.dtype)
            k, v = k_buf[:, :, :start + k.shape[2]], v_buf[:, :, :start + v.shape[2]]
        att = attention(q, k, v, self.kq_scale, mask=mask, is_causal=is_causal and mask is None)
        return self.attn_out_ffn(x, att)


def attention(q, k, v, scale, mask=None, is_causal=False):
    """SDPA with GQA: q [B, H, T, hd], k/v [B, Hkv, S, hd]; query head h reads KV head h // (H/Hkv).
    mask: bool, broadcastable to [B, 1, T, S] (True = attend)."""
    B, H, T, hd = q.shape
    n_kv = k.shape[1]
    groups = H // n_kv
    dtype = q.dtype if q.dtype == k.dtype == v.dtype else torch.float32
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if groups > 1 and mask is not None:
        # fold the query heads of one KV head into the query axis: no copy of K/V
        qg = q.reshape(B, n_kv, groups * T, hd)
        m = mask.unsqueeze(2).expand(mask.shape[0], 1, groups, T, mask.shape[-1])
        m = m.reshape(mask.shape[0], 1, groups * T, mask.shape[-1])
        out = F.scaled_dot_product_attention(qg, k, v, attn_mask=m, scale=scale)
        return out.reshape(B, H, T, hd)
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)


def block_tensors(tensors: dict, il: int, arch: str, *, for_mtp: bool = False) -> dict:
    """{suffix: tensor} of block ``il`` (required + arch extras + the optional ones present)."""
    out = {}
    optional = MTP_OPTIONAL[arch] if for_mtp else BLOCK_OPTIONAL
    for suffix in BLOCK_REQUIRED + ARCH_BLOCK_EXTRA[arch] + optional:
        name = f"blk.{il}.{suffix}"
        if name in tensors:
            out[suffix] = tensors[name]
    return out


# --------------------------------------------------------------------------- base model

def feature_layers(n_layer: int) -> tuple:
    """The trunk layers whose input residual stream a feature head fuses with h (in this order):
    a quarter and half of the depth (the same rule as native/models/dense-mtp.cpp)."""
    taps = []
    for il in (n_layer // 4, n_layer // 2):
        il = min(max(il, 1), n_layer - 1)
        if il not in taps:
            taps.append(il)
    return tuple(taps)


class BaseModel(nn.Module):
    """The frozen trunk + LM head of a GGUF base model."""

    def __init__(self, base: BaseGGUF, dtype: torch.dtype = torch.float32, device="cpu"):
        super().__init__()
        hp = self.hp = base.hparams
        self.spec = ARCH_SPECS[hp.arch]
        t = {k: v.to(device=device, dtype=dtype if v.dim() >= 2 else torch.float32)
             for k, v in base.tensors.items()}
        self.register_buffer("tok_embd", t["token_embd.weight"], persistent=False)
        self.register_buffer("output_norm", t["output_norm.weight"], persistent=False)
        self.register_buffer("output", t.get("output.weight", t["token_embd.weight"]), persistent=False)
        self.register_buffer("output_bias", t.get("output.bias"), persistent=False)
        self.register_buffer("rope_freqs", t.get("rope_freqs.weight"), persistent=False)
        swa = hp.swa_layers or (False,) * hp.n_layer
        self.layers = nn.ModuleList(
            Block(hp, block_tensors(t, il, hp.arch), trainable=False, swa=swa[il]) for il in range(hp.n_layer))
        self.requires_grad_(False)
        self.dtype = dtype

    @property
    def device(self):
        return self.tok_embd.device

    # -- pieces ------------------------------------------------------------------

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embd[tokens]
        if self.spec.embd_scale:
            x = x * math.sqrt(self.hp.n_embd)
        return x

    def rope(self, positions: torch.Tensor, swa: bool = False):
        hp = self.hp
        if swa:
            return rope_tables(positions, hp.n_rot, hp.rope_base_swa, 1.0)
        return rope_tables(positions, hp.n_rot, hp.rope_base, hp.rope_freq_scale, self.rope_freqs)

    def logits(self, hidden: torch.Tensor, rows: tuple | None = None) -> torch.Tensor:
        """The LM head's scores of ``hidden``; rows = (weight, bias) of a subset of the vocabulary
        (output_rows) scores only those tokens."""
        weight, bias = rows if rows is not None else (self.output, self.output_bias)
        out = F.linear(hidden, weight, bias)
        cap = self.hp.final_logit_softcap
        if cap:
            out = torch.tanh(out / cap) * cap
        return out

    def output_rows(self, ids) -> tuple:
        """(weight, bias) of the LM head's rows for the token ids ``ids``, in that order (copies)."""
        idx = torch.as_tensor(np.asarray(ids), dtype=torch.long, device=self.output.device)
        return self.output[idx].contiguous(), None if self.output_bias is None else self.output_bias[idx]

    # -- forward -------------------------------------------------------------------

    def forward(self, tokens: torch.Tensor, taps: tuple = ()) -> torch.Tensor:
        """Final-norm hidden states [B, T, D] of right-padded (or unpadded) sequences starting at
        position 0 (causal attention: padding after a sequence never affects it). taps: trunk layers
        whose input residual stream, RMS-normed without weight, follows h: [B, T, D * (1 + len(taps))]
        (a feature head's input, see MTPHead.fuse)."""
        hp = self.hp
        T = tokens.shape[1]
        pos = torch.arange(T, device=tokens.device)
        tables = {False: self.rope(pos, False)}
        masks = {False: None}
        if hp.sliding_window and any(hp.swa_layers):
            tables[True] = self.rope(pos, True)
            d = pos[:, None] - pos[None, :]
            masks[True] = ((d >= 0) & (d < hp.sliding_window))[None, None]
        x = self.embed(tokens)
        tapped = {}
        for il, layer in enumerate(self.layers):
            if il in taps:
                tapped[il] = rms_norm(x, None, hp.rms_eps)
            cos, sin = tables[layer.swa]
            x = layer(x, cos, sin, mask=masks[layer.swa], is_causal=True)
        h = rms_norm(x, self.output_norm, hp.rms_eps)
        return torch.cat([h] + [tapped[il] for il in taps], dim=-1) if taps else h

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new: int, temperatures, top_p: float = 0.95,
                 eog_ids=(), generator: torch.Generator | None = None) -> list[list[int]]:
        """Sample continuations of ``prompts`` (batched, KV-cached, left-padded). Per-row
        temperature (0 = greedy), nucleus top_p. Each continuation ends at its first
        end-of-generation token (included) or after ``max_new`` tokens."""
        hp, dev = self.hp, self.device
        B = len(prompts)
        lens = torch.tensor([len(p) for p in prompts], device=dev)
        P = int(lens.max())
        Tmax = P + max_new
        pad = P - lens
        tokens = torch.zeros(B, P, dtype=torch.long, device=dev)
        for b, p in enumerate(prompts):
            tokens[b, P - len(p):] = torch.tensor(p, dtype=torch.long, device=dev)
        idx = torch.arange(Tmax, device=dev)
        key_pos = idx[None, :] - pad[:, None]                 # [B, Tmax] absolute positions
        key_ok = key_pos >= 0
        temps = torch.as_tensor(temperatures, dtype=torch.float32, device=dev).reshape(B)
        eog = torch.tensor(sorted(set(int(t) for t in eog_ids)) or [-1], device=dev)
        caches = [(torch.zeros(B, hp.n_head_kv, Tmax, hp.head_dim, dtype=self.dtype, device=dev),
                   torch.zeros(B, hp.n_head_kv, Tmax, hp.head_dim, dtype=self.dtype, device=dev))
                  for _ in self.layers]
        use_swa = bool(hp.sliding_window and any(hp.swa_layers))

        def step(x_tokens, start):
            T = x_tokens.shape[1]
            qpos = key_pos[:, start:start + T]                 # [B, T]
            kpos = key_pos[:, :start + T]                      # [B, S]
            base_mask = (key_ok[:, None, :start + T] & (kpos[:, None, :] <= qpos[:, :, None])
                         & (idx[None, None, :start + T] <= (start + torch.arange(T, device=dev))[None, :, None]))
            masks = {False: base_mask[:, None]}
            tables = {False: self.rope(qpos.clamp(min=0), False)}
            if use_swa:
                masks[True] = (base_mask & (qpos[:, :, None] - kpos[:, None, :] < hp.sliding_window))[:, None]
                tables[True] = self.rope(qpos.clamp(min=0), True)
            x = self.embed(x_tokens)
            for layer, (kb, vb) in zip(self.layers, caches):
                cos, sin = tables[layer.swa]
                x = layer(x, cos, sin, mask=masks[layer.swa], cache=(kb, vb, start))
            h = rms_norm(x[:, -1], self.output_norm, hp.rms_eps)
            return self.logits(h).float()

        out = torch.zeros(B, max_new, dtype=torch.long, device=dev)
        done = torch.zeros(B, dtype=torch.bool, device=dev)
        n_out = torch.full((B,), max_new, dtype=torch.long, device=dev)
        logits = step(tokens, 0)
        for t in range(max_new):
            nxt = sample(logits, temps, top_p, generator)
            out[:, t] = nxt
            hit = torch.isin(nxt, eog) & ~done
            n_out = torch.where(hit, torch.full_like(n_out, t + 1), n_out)
            done |= hit
            if bool(done.all()) or t + 1 == max_new:
                break
            logits = step(nxt[:, None], P + t)
        out, n_out = out.cpu(), n_out.cpu()
        return [out[b, :int(n_out[b])].tolist() for b in range(B)]


def sample(logits: torch.Tensor, temps: torch.Tensor, top_p: float,
           generator: torch.Generator | None) -> torch.Tensor:
    """One token per row: argmax where temps == 0, else temperature + nucleus sampling."""
    greedy = logits.argmax(-1)
    t = temps.clamp(min=1e-4)[:, None]
    probs = torch.softmax(logits / t, dim=-1)
    sp, si = probs.sort(dim=-1, descending=True)
    keep = (sp.cumsum(-1) - sp) < top_p
    keep[:, 0] = True
    sp = sp * keep
    choice = torch.multinomial(sp / sp.sum(-1, keepdim=True), 1, generator=generator).squeeze(-1)
    sampled = si.gather(-1, choice[:, None]).squeeze(-1)
    return torch.where(temps > 0, sampled, greedy)


# --------------------------------------------------------------------------- MTP head

NEXTN_SUFFIXES = ("nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight",
                  "nextn.shared_head_norm.weight")

INIT_CHOICES = ("mix", "h", "e")
MASK_SUFFIX = "nextn.hnorm.mask"   # a parallel head's mask rows (native/models/parallel-draft.cpp)


class MTPHead(nn.Module):
    """The trainable MTP block; embeddings and the LM head come from the (frozen) base."""

    def __init__(self, hp: HParams, block: dict, eh_proj: torch.Tensor, enorm: torch.Tensor,
                 hnorm: torch.Tensor, shared_head_norm: torch.Tensor, index: int = 0,
                 mask: torch.Tensor | None = None, feat: torch.Tensor | None = None):
        super().__init__()
        self.hp = hp
        self.index = index          # nextn layer offset: the head is stored at blk.{n_layer + index}
        self.block = Block(hp, block, trainable=True, swa=False)
        self.eh_proj = nn.Parameter(eh_proj.clone().float())
        self.enorm = nn.Parameter(enorm.clone().float())
        self.hnorm = nn.Parameter(hnorm.clone().float())
        self.shared_head_norm = nn.Parameter(shared_head_norm.clone().float())
        # parallel drafting: the K-1 mask rows [K-1, n_embd] (None: an ordinary head)
        self.mask = None if mask is None else nn.Parameter(mask.clone().float())
        # a feature head: [n_embd, n_embd * (1 + taps)] fusing [h; trunk features] (None: h alone)
        self.feat = None if feat is None else nn.Parameter(feat.clone().float())

    @property
    def features(self) -> int:
        """Trunk features fused with h (0: an ordinary head fed h itself)."""
        return 0 if self.feat is None else self.feat.shape[1] // self.hp.n_embd - 1

    def make_features(self, seed: int = 0) -> "MTPHead":
        """Fuse h with the trunk features of feature_layers(n_layer): feat starts as [I | noise], so the
        head starts fed h itself."""
        D = self.hp.n_embd
        n = len(feature_layers(self.hp.n_layer))
        g = torch.Generator().manual_seed(seed + 104729)
        feat = torch.randn(D, D * (1 + n), generator=g) * (0.02 / math.sqrt(D))
        feat[:, :D] += torch.eye(D)
        self.feat = nn.Parameter(feat)
        return self

    def fuse(self, h_full: torch.Tensor) -> torch.Tensor:
        """The head's input hidden state from the trunk's rows [h; features...] (what the trunk graph
        publishes as t_h_nextn): feat . h_full for a feature head, else h."""
        if self.feat is None:
            return h_full[..., :self.hp.n_embd]
        return F.linear(h_full, self.feat.to(h_full.dtype))

    @property
    def parallel(self) -> int:
        """K: tokens one pass drafts (0: an ordinary head, one token per pass)."""
        return 0 if self.mask is None else int(self.mask.shape[0]) + 1

    def make_parallel(self, k: int, seed: int = 0) -> "MTPHead":
        """Give the head K-1 mask rows, N(0, 0.02) (mask entries start as copies of the real one)."""
        if k < 2:
            raise ValueError(f"a parallel head drafts K >= 2 tokens a pass (got {k})")
        g = torch.Generator().manual_seed(seed + 7919)
        self.mask = nn.Parameter(torch.randn(k - 1, self.hp.n_embd, generator=g) * 0.02)
        return self

    @classmethod
    def from_base(cls, base: BaseGGUF, init: str = "mix", seed: int = 0, index: int = 0) -> "MTPHead":
        """Warm start: the block is a copy of the base's last layer; norms are ones, the output
        norm is the base's final norm; eh_proj per ``init``:

        * "mix" (default): [I/2 + noise | I/2 + noise]: z = (e + h)/2 - token and context equally;
        * "h": [noise | I]: z = h - starts as the trunk's own last hidden;
        * "e": [I | noise]: z = e - starts from the token embedding.
        noise: N(0, 0.02/sqrt(n_embd))."""
        hp = base.hparams
        t = base.tensors
        D = hp.n_embd
        g = torch.Generator().manual_seed(seed)
        eh = torch.randn(D, 2 * D, generator=g) * (0.02 / math.sqrt(D))
        eye = torch.eye(D)
        if init == "mix":
            eh[:, :D] += 0.5 * eye
            eh[:, D:] += 0.5 * eye
        elif init == "h":
            eh[:, D:] += eye
        elif init == "e":
            eh[:, :D] += eye
        else:
            raise ValueError(f"unknown init {init!r}; expected one of {INIT_CHOICES}")
        block = {k: v.float() for k, v in block_tensors(t, hp.n_layer - 1, hp.arch, for_mtp=True).items()}
        ones = torch.ones(D)
        return cls(hp, block, eh, ones, ones, t["output_norm.weight"].float(), index=index)

    @classmethod
    def from_gguf(cls, hp: HParams, path, index: int = 0) -> "MTPHead":
        """Head ``index`` of a head-only (or merged) GGUF: block hp.n_layer + index (a draft vocabulary's
        tensors, pymtp trim's, are not the head's and are left out)."""
        from .gguf_weights import load_tensors, open_reader

        L = hp.n_layer + index
        reader = open_reader(path)
        own = {*NEXTN_SUFFIXES, MASK_SUFFIX, FEATURE_TENSOR_SUFFIX}
        names = [t.name for t in reader.tensors if t.name.startswith(f"blk.{L}.")
                 and (not t.name.startswith(f"blk.{L}.nextn.") or t.name[len(f"blk.{L}."):] in own)]
        if not names:
            raise ValueError(f"{path} has no tensors blk.{L}.* (head {index})")
        t = load_tensors(reader, names)
        block = {n[len(f"blk.{L}."):]: v for n, v in t.items() if not n.startswith(f"blk.{L}.nextn.")}
        nx = {s: t[f"blk.{L}.{s}"] for s in NEXTN_SUFFIXES}
        return cls(hp, block, nx["nextn.eh_proj.weight"], nx["nextn.enorm.weight"],
                   nx["nextn.hnorm.weight"], nx["nextn.shared_head_norm.weight"], index=index,
                   mask=t.get(f"blk.{L}.{MASK_SUFFIX}"), feat=t.get(f"blk.{L}.{FEATURE_TENSOR_SUFFIX}"))

    def gguf_tensors(self) -> dict:
        """{gguf name: float32 numpy} of the head at block index n_layer + index."""
        L = self.hp.n_layer + self.index
        out = {}
        for suffix in self.block.suffixes:
            out[f"blk.{L}.{suffix}"] = self.block.w(suffix).detach().float().cpu().numpy()
        out[f"blk.{L}.nextn.eh_proj.weight"] = self.eh_proj.detach().float().cpu().numpy()
        out[f"blk.{L}.nextn.enorm.weight"] = self.enorm.detach().float().cpu().numpy()
        out[f"blk.{L}.nextn.hnorm.weight"] = self.hnorm.detach().float().cpu().numpy()
        out[f"blk.{L}.nextn.shared_head_norm.weight"] = self.shared_head_norm.detach().float().cpu().numpy()
        if self.mask is not None:
            out[f"blk.{L}.{MASK_SUFFIX}"] = self.mask.detach().float().cpu().numpy()
        if self.feat is not None:
            out[f"blk.{L}.{FEATURE_TENSOR_SUFFIX}"] = self.feat.detach().float().cpu().numpy()
        return out

    def project(self, emb: torch.Tensor, h_prev: torch.Tensor) -> torch.Tensor:
        eps = self.hp.rms_eps
        e = rms_norm(emb, self.enorm, eps)
        h = rms_norm(h_prev, self.hnorm, eps)
        return F.linear(torch.cat([e, h], dim=-1), self.eh_proj)

    def forward(self, emb: torch.Tensor, h_prev: torch.Tensor, cos, sin, history=None):
        """One pass of the head over a whole sequence.

        emb: raw token embeddings [B, T, D] of x_p; h_prev: [B, T, D] the h paired with each x_p.
        history=None: teacher-forced pass (causal attention over the pass's own positions).
        history=[(k, v), ...] of the earlier passes s' = 0..s-1: chained draft step s, where
        position q attends to pass 0's keys at positions <= q - s, pass s' >= 1 at q - (s - s'),
        and its own key at q - exactly the MTP KV cache of draft step s+1 at inference.
        Returns (out [B, T, D] = RMSNorm(z) * shared_head_norm, (k, v) of this pass)."""
        blk = self.block
        x = self.project(emb, h_prev)
        cur = rms_norm(x, blk.w("attn_norm.weight"), self.hp.rms_eps)
        q, k, v = blk.qkv(cur, cos, sin)
        if history is None:
            att = attention(q, k, v, blk.kq_scale, is_causal=True)
        else:
            att = chained_attention(q, k, v, history, blk.kq_scale)
        z = blk.attn_out_ffn(x, att)
        return rms_norm(z, self.shared_head_norm, self.hp.rms_eps), (k, v)


    def parallel_forward(self, emb: torch.Tensor, h_prev: torch.Tensor, cos, sin) -> list:
        """One parallel pass per position p of a whole sequence (teacher-forced): [out_0, .., out_{K-1}],
        each [B, T, D]; out_i at index p is mask entry i of the pass anchored at p (out_0: the real
        entry (x_p, h_{p-1})), which predicts x_{p+1+i}. cos/sin: rope tables of >= T + K - 1 positions."""
        xs = parallel_block(self.block, self.parallel_rows(emb, h_prev), cos, sin)
        return [rms_norm(z, self.shared_head_norm, self.hp.rms_eps) for z in xs]

    def parallel_rows(self, emb: torch.Tensor, h_prev: torch.Tensor) -> list:
        """The block inputs of the pass's K entries: (x_p, h_{p-1}), then (x_p, h_{p-1} + mask_i)."""
        return [self.project(emb, h_prev if i == 0 else h_prev + self.mask[i - 1].to(h_prev.dtype))
                for i in range(self.parallel)]


def parallel_block(blk: Block, xs: list, cos, sin) -> list:
    """One block over a parallel pass's entries xs ([B, T, D] each; entry i sits at position p + i): entry i
    attends to the real entries (xs[0]'s) at positions <= p and to the pass's entries 1..i."""
    T = xs[0].shape[1]
    qkv = [blk.qkv(rms_norm(x, blk.w("attn_norm.weight"), blk.hp.rms_eps), cos[i:i + T], sin[i:i + T])
           for i, x in enumerate(xs)]
    ks, vs = [k for _, k, _ in qkv], [v for _, _, v in qkv]
    return [blk.attn_out_ffn(x, parallel_attention(qkv[i][0], ks[0], vs[0], ks[1:i + 1], vs[1:i + 1],
                                                   blk.kq_scale)) for i, x in enumerate(xs)]


def _repeat_kv(t: torch.Tensor, groups: int) -> torch.Tensor:
    """GQA: KV heads [B, Hkv, ...] -> one per query head [B, Hkv * groups, ...], as float32."""
    return t.repeat_interleave(groups, dim=1).float() if groups > 1 else t.float()


def parallel_attention(q, k0, v0, ks, vs, scale):
    """Attention of mask entry i = len(ks) of the passes anchored at every p: over the real entries at
    positions <= p (k0, v0: [B, Hkv, T, hd]) and the pass's own mask entries 1..i (ks[j] at the same p)."""
    groups = q.shape[1] // k0.shape[1]

    def rep(t):
        return _repeat_kv(t, groups)

    qf = q.float()
    T = q.shape[2]
    pos = torch.arange(T, device=q.device)
    scores = [torch.where((pos[None, :] <= pos[:, None])[None, None], qf @ rep(k0).transpose(-1, -2) * scale,
                          float("-inf"))]
    vals = [rep(v) for v in vs]
    for k in ks:
        scores.append((qf * rep(k)).sum(-1, keepdim=True) * scale)
    p = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
    out = p[..., :T] @ rep(v0)
    for j, v in enumerate(vals):
        out = out + p[..., T + j: T + j + 1] * v
    return out.to(q.dtype)


def _shift(x: torch.Tensor, d: int) -> torch.Tensor:
    """x[..., q, :] -> x[..., q - d, :] along dim -2 (zeros where q < d)."""
    if d == 0:
        return x
    return F.pad(x, (0, 0, d, 0))[..., : x.shape[-2], :]


def chained_attention(q, k, v, history, scale):
    """Attention of draft step s = len(history) (see MTPHead.forward)."""
    s = len(history)
    groups = q.shape[1] // k.shape[1]

    def rep(t):
        return _repeat_kv(t, groups)

    qf = q.float()
    T = q.shape[2]
    k0, v0 = rep(history[0][0]), rep(history[0][1])
    pos = torch.arange(T, device=q.device)
    scores = [torch.where((pos[None, :] <= pos[:, None] - s)[None, None],
                          qf @ k0.transpose(-1, -2) * scale, float("-inf"))]
    vals = []
    for i in range(1, s + 1):
        ki, vi = (k, v) if i == s else history[i]
        d = s - i
        ki, vi = _shift(rep(ki), d), _shift(rep(vi), d)
        sc = (qf * ki).sum(-1, keepdim=True) * scale
        scores.append(torch.where((pos >= d)[None, None, :, None], sc, float("-inf")))
        vals.append(vi)
    p = torch.softmax(torch.cat(scores, dim=-1), dim=-1)
    out = p[..., :T] @ v0
    for j, vi in enumerate(vals):
        out = out + p[..., T + j: T + j + 1] * vi
    return out.to(q.dtype)
