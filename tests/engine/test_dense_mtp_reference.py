"""An independent numpy implementation of the dense-arch trunk and MTP block agrees with llama.cpp.

For llama, qwen2, qwen3 and gemma3 (native/models/dense-mtp.cpp), a tiny f32 GGUF is read back with the
``gguf`` package and run in numpy (float64): RoPE (normal / NeoX), GQA attention with a
causal (and for gemma3's local layers, sliding-window) mask, RMS norms, q/k norms, biases,
SiLU/GELU FFNs, gemma3's input scale, post norms and final logit softcap. That is compared
with llama.cpp driven through ctypes, both contexts with f32 KV caches and no flash
attention so that the only differences left are float rounding:

(a) the target context's hidden state h_p (llama_get_embeddings_nextn_ith: the final-norm
    output, what the MTP head consumes) and its logits, for every prompt position;
(b) the MTP context (LLAMA_CONTEXT_TYPE_MTP) fed teacher-forced pairs (x_p, h_{p-1}) for the
    prompt and then two draft-style single-token steps (the second fed the head's own output
    hidden state): its logits and its output hidden state at every position.

The MTP math (the contract with the head trainer) is spelled out in ``mtp_forward``.
"""

from __future__ import annotations

import ctypes as C
import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from pymtp_devtools import tiny_dense as td  # noqa: E402

# tolerance relative to the scale of the compared quantity (max |x|, at least 1)
RTOL = 1e-3


# --------------------------------------------------------------------------- numpy reference

def rms_norm(x, w, eps):
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_ggml(x):
    """ggml's CPU GELU: tanh approximation looked up in an f16 table (input and output are f16)."""
    xh = np.asarray(x, dtype=np.float16).astype(np.float64)
    y = 0.5 * xh * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * xh * (1.0 + 0.044715 * xh * xh)))
    y = y.astype(np.float16).astype(np.float64)
    return np.where(x <= -10.0, 0.0, np.where(x >= 10.0, x, y))


def rope(x, pos, n_rot, base, neox):
    """x: (T, n_head, head_dim); ggml's NORM (adjacent pairs) or NEOX (halves) rotation."""
    half = n_rot // 2
    inv = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]           # (T, half)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if neox:
        x1, x2 = x[..., :half], x[..., half:n_rot]
        out[..., :half] = x1 * cos - x2 * sin
        out[..., half:n_rot] = x2 * cos + x1 * sin
    else:
        x1, x2 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = x1 * cos - x2 * sin
        out[..., 1:n_rot:2] = x1 * sin + x2 * cos
    return out


def attention(q, k, v, pos, scale, window):
    """Causal GQA attention over a whole sequence; window: sliding window (0 = none)."""
    T, n_head, hd = q.shape
    n_kv = k.shape[1]
    pos = np.asarray(pos)
    masked = pos[None, :] > pos[:, None]                                         # key after query
    if window:
        masked |= (pos[:, None] - pos[None, :]) >= window
    out = np.empty((T, n_head, hd))
    for h in range(n_head):
        g = h // (n_head // n_kv)
        s = q[:, h, :] @ k[:, g, :].T * scale
        s = np.where(masked, -np.inf, s)
        s = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, g, :]
    return out.reshape(T, n_head * hd)


class Reference:
    """The model of a tiny dense GGUF, evaluated in float64 numpy."""

    def __init__(self, path):
        r = gguf.GGUFReader(str(path))
        f = lambda key, default=None: (r.fields[key].contents() if key in r.fields else default)  # noqa: E731
        self.arch = a = f("general.architecture")
        self.n_embd = int(f(f"{a}.embedding_length"))
        self.n_nextn = int(f(f"{a}.nextn_predict_layers", 0))
        self.n_layer = int(f(f"{a}.block_count")) - self.n_nextn
        self.n_head = int(f(f"{a}.attention.head_count"))
        self.n_head_kv = int(f(f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = int(f(f"{a}.attention.key_length", self.n_embd // self.n_head))
        self.n_rot = int(f(f"{a}.rope.dimension_count", self.head_dim))
        self.eps = float(f(f"{a}.attention.layer_norm_rms_epsilon"))
        self.base = float(f(f"{a}.rope.freq_base", 10000.0))
        self.base_swa = float(f(f"{a}.rope.freq_base_swa", 10000.0))
        self.window = int(f(f"{a}.attention.sliding_window", 0))
        self.swa_pattern = int(f(f"{a}.attention.sliding_window_pattern", 0))
        self.softcap = float(f(f"{a}.final_logit_softcapping", 0.0))
        self.neox = a != "llama"
        self.w = {t.name: np.asarray(t.data, dtype=np.float64).reshape([int(x) for x in reversed(t.shape)])
                  for t in r.tensors}

    def t(self, name, il=None):
        key = (name if il is None else f"blk.{il}.{name}") + ("" if name.endswith((".weight", ".bias")) else ".weight")
        return self.w.get(key)

    def is_swa(self, il):
        # gemma3: set_swa_pattern(n): layer il is local when il % n < n - 1; MTP layers are global
        return (self.arch == "gemma3" and self.window > 0 and il < self.n_layer
                and il % self.swa_pattern < self.swa_pattern - 1)

    def block(self, il, x, pos):
        """One decoder block of the arch (trunk layer or the MTP block) over a whole sequence."""
        T = x.shape[0]
        a = rms_norm(x, self.t("attn_norm", il), self.eps)
        proj = lambda name, inp: inp @ self.t(name, il).T + (0 if self.t(name + ".bias", il) is None  # noqa: E731
                                                           else self.t(name + ".bias", il))
        q = proj("attn_q", a).reshape(T, self.n_head, self.head_dim)
        k = proj("attn_k", a).reshape(T, self.n_head_kv, self.head_dim)
        v = proj("attn_v", a).reshape(T, self.n_head_kv, self.head_dim)
        if self.t("attn_q_norm", il) is not None:
            q = rms_norm(q, self.t("attn_q_norm", il), self.eps)
            k = rms_norm(k, self.t("attn_k_norm", il), self.eps)
        swa = self.is_swa(il)
        base = self.base_swa if swa else self.base
        q = rope(q, pos, self.n_rot, base, self.neox)
        k = rope(k, pos, self.n_rot, base, self.neox)
        o = attention(q, k, v, pos, 1.0 / math.sqrt(self.head_dim), self.window if swa else 0)
        o = o @ self.t("attn_output", il).T
        if self.arch == "gemma3":
            o = rms_norm(o, self.t("post_attention_norm", il), self.eps)
        x = x + o
        f = rms_norm(x, self.t("ffn_norm", il), self.eps)
        g, u = f @ self.t("ffn_gate", il).T, f @ self.t("ffn_up", il).T
        act = gelu_ggml(g) * u if self.arch == "gemma3" else silu(g) * u
        d = act @ self.t("ffn_down", il).T
        if self.arch == "gemma3":
            d = rms_norm(d, self.t("post_ffw_norm", il), self.eps)
        return x + d

    def lm_head(self, h, head=None):
        logits = h @ (self.w["output.weight"] if head is None else head).T
        if self.softcap:
            logits = self.softcap * np.tanh(logits / self.softcap)
        return logits

    def trunk(self, tokens):
        """(h, logits) for every position: h_p = the final-norm output (the LM head's input)."""
        pos = np.arange(len(tokens))
        x = self.w["token_embd.weight"][tokens]
        if self.arch == "gemma3":
            x = x * math.sqrt(self.n_embd)
        for il in range(self.n_layer):
            x = self.block(il, x, pos)
        h = rms_norm(x, self.w["output_norm.weight"], self.eps)
        return h, self.lm_head(h)

    def mtp_forward(self, tokens, hidden, pos):
        """The MTP block at positions ``pos`` with inputs (x_p, h_{p-1}) = (tokens[i], hidden[i]).

        e = RMSNorm(embd(x_p)) * enorm; h = RMSNorm(h_{p-1}) * hnorm; z = eh_proj . [e; h];
        z = decoder block at il = n_layer (global attention over the MTP KV: all earlier pairs);
        out = RMSNorm(z) * shared_head_norm (output_norm if absent); logits = head . out.
        """
        L = self.n_layer
        emb = self.t("nextn.embed_tokens", L)
        emb = self.w["token_embd.weight"] if emb is None else emb
        e = rms_norm(emb[tokens], self.t("nextn.enorm", L), self.eps)          # no gemma sqrt(n_embd) scale
        h = rms_norm(hidden, self.t("nextn.hnorm", L), self.eps)
        z = np.concatenate([e, h], axis=1) @ self.t("nextn.eh_proj", L).T
        z = self.block(L, z, pos)
        norm = self.t("nextn.shared_head_norm", L)
        out = rms_norm(z, self.w["output_norm.weight"] if norm is None else norm, self.eps)
        return out, self.lm_head(out, self.t("nextn.shared_head_head", L))


# --------------------------------------------------------------------------- llama.cpp side

class Native:
    """A model with a target and an MTP context, f32 KV caches, no flash attention."""

    def __init__(self, path):
        from pymtp._native import llama as L
        self.L, self.lib = L, L.lib()
        mp = self.lib.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mtp = True
        self.model = self.lib.llama_model_load_from_file(str(path).encode(), mp)
        assert self.model, L.last_log_lines()
        self.n_embd = self.lib.llama_model_n_embd(self.model)
        self.n_vocab = self.lib.llama_vocab_n_tokens(self.lib.llama_model_get_vocab(self.model))
        self.ctx = self._ctx(L.LLAMA_CONTEXT_TYPE_DEFAULT)
        self.ctx_mtp = self._ctx(L.LLAMA_CONTEXT_TYPE_MTP)
        assert self.ctx and self.ctx_mtp, L.last_log_lines()
        self.lib.llama_set_embeddings_nextn(self.ctx, True, False)     # every row: like the engine
        self.lib.llama_set_embeddings_nextn(self.ctx_mtp, True, True)  # output rows: like the engine

    def _ctx(self, ctx_type):
        cp = self.lib.llama_context_default_params()
        cp.n_ctx = 256
        cp.n_batch = cp.n_ubatch = 64
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = 1
        cp.ctx_type = ctx_type
        cp.type_k = cp.type_v = 0          # GGML_TYPE_F32
        cp.flash_attn_type = 0             # disabled
        cp.no_perf = True
        return self.lib.llama_init_from_model(self.model, cp)

    def decode(self, ctx, tokens, pos0, hidden=None, last_only=False):
        """Decode tokens at pos0.. (with hidden-state rows for the MTP context), outputs everywhere
        (or on the last row only); returns (logits of the output rows, nextn hidden of every
        row) as (n_out, n_vocab) and (n, n_embd) arrays (the context must then be unmasked)."""
        n = len(tokens)
        tok = (self.L.llama_token * n)(*tokens)
        pos = (self.L.llama_pos * n)(*range(pos0, pos0 + n))
        out = (C.c_int8 * n)(*([0] * (n - 1) + [1] if last_only else [1] * n))
        batch = self.L.llama_batch(n_tokens=n, token=tok, pos=pos, logits=out)
        if hidden is not None:
            emb = np.ascontiguousarray(hidden, dtype=np.float32)
            assert emb.shape == (n, self.n_embd)
            batch.embd = emb.ctypes.data_as(C.POINTER(C.c_float))
        assert self.lib.llama_decode(ctx, batch) == 0, self.L.last_log_lines()
        logits = np.array([np.ctypeslib.as_array(self.lib.llama_get_logits_ith(ctx, i), (self.n_vocab,))
                           for i in range(n) if out[i]], dtype=np.float64)
        h = np.array([np.ctypeslib.as_array(self.lib.llama_get_embeddings_nextn_ith(ctx, i), (self.n_embd,))
                      for i in range(n)], dtype=np.float64)
        return logits, h

    def close(self):
        self.lib.llama_free(self.ctx_mtp)
        self.lib.llama_free(self.ctx)
        self.lib.llama_model_free(self.model)


def assert_close(got, want, what):
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got - want)))
    assert err < RTOL * scale, f"{what}: max abs diff {err:.3g} (scale {scale:.3g})"


# --------------------------------------------------------------------------- tests

PROMPT = [100, 2000, 31, 7, 5000, 12345, 42, 999, 31000, 64, 8, 1717, 3, 250]   # 14 > gemma3 window 8


# gemma3 twice: with local (sliding-window) layers, i.e. an iswa KV cache, and without
VARIANTS = {**{a: {} for a in td.ARCHS}, "gemma3-global": {"sliding_window": 0, "final_logit_softcapping": 0.0}}


@pytest.fixture(scope="module", params=list(VARIANTS))
def setup(request, tmp_path_factory):
    arch = request.param.split("-")[0]
    dims = td.dims_for(arch, **VARIANTS[request.param])
    path = td.make_tiny_dense(arch, tmp_path_factory.mktemp("ref") / f"{request.param}-f32.gguf", seed=7,
                              dtype="f32", dims=dims)
    ref, nat = Reference(path), Native(path)
    yield arch, ref, nat
    nat.close()


def test_reference_reads_the_model(setup):
    arch, ref, nat = setup
    assert ref.arch == arch and ref.n_nextn == 1 and ref.n_layer == td.dims_for(arch).n_layer
    assert ref.n_embd == nat.n_embd


def test_target_hidden_and_logits(setup):
    arch, ref, nat = setup
    h_ref, logits_ref = ref.trunk(PROMPT)
    logits, h = nat.decode(nat.ctx, PROMPT, 0)
    assert_close(h, h_ref, f"{arch} target hidden h_p")
    assert_close(logits, logits_ref, f"{arch} target logits")
    assert (logits.argmax(1) == logits_ref.argmax(1)).all()


def test_mtp_logits_and_hidden(setup):
    arch, ref, nat = setup
    mem = nat.lib.llama_get_memory
    # fresh state in both contexts (the fixture is shared by the tests of one arch)
    for ctx in (nat.ctx, nat.ctx_mtp):
        assert nat.lib.llama_memory_seq_rm(mem(ctx), 0, -1, -1)
    _, h_tgt = nat.decode(nat.ctx, PROMPT, 0)

    # teacher-forced pairs (x_p, h_{p-1}) for the prompt, h_{-1} = 0
    n = len(PROMPT)
    h_in = np.vstack([np.zeros((1, nat.n_embd)), h_tgt[:-1]])
    logits, out = nat.decode(nat.ctx_mtp, PROMPT, 0, h_in)

    # two draft steps: (x_n, h_{n-1}) at n, then (argmax, the head's own output hidden) at n+1
    x_n = int(np.argmax(ref.trunk(PROMPT)[1][-1]))
    l1, o1 = nat.decode(nat.ctx_mtp, [x_n], n, h_tgt[-1:])
    d1 = int(np.argmax(l1[0]))
    l2, o2 = nat.decode(nat.ctx_mtp, [d1], n + 1, o1)

    toks = PROMPT + [x_n, d1]
    hid = np.vstack([h_in, h_tgt[-1:], o1])
    out_ref, logits_ref = ref.mtp_forward(toks, hid, np.arange(n + 2))
    got_logits = np.vstack([logits, l1, l2])
    got_out = np.vstack([out, o1, o2])
    assert_close(got_out, out_ref, f"{arch} MTP output hidden (t_h_nextn)")
    assert_close(got_logits, logits_ref, f"{arch} MTP logits")
    assert (got_logits.argmax(1) == logits_ref.argmax(1)).all()


def test_planted_head_predicts_one_step_further(setup):
    """Sanity of the planted head: MTP at p (given x_p) mostly agrees with the trunk at p+1."""
    arch, ref, _ = setup
    h, logits = ref.trunk(PROMPT)
    nxt = logits.argmax(1)                                   # trunk's x_{p+1} given x_0..x_p
    toks = PROMPT[1:] + [int(nxt[-1])]                        # x_1..x_n
    hidden = h                                                # h_0..h_{n-1}
    _, mtp_logits = ref.mtp_forward(toks, hidden, np.arange(1, len(PROMPT) + 1))
    seq = PROMPT + [int(nxt[-1])]
    h2, logits2 = ref.trunk(seq)
    agree = np.mean(mtp_logits.argmax(1) == logits2.argmax(1)[1:])
    assert agree > 0.3, f"{arch}: planted head agrees with the trunk only {agree:.0%} of the time"


def test_mtp_context_unmasked(setup):
    """An unmasked MTP context returns the head's output hidden state for every row, not just outputs."""
    arch, ref, nat = setup
    mem = nat.lib.llama_get_memory
    for ctx in (nat.ctx, nat.ctx_mtp):
        assert nat.lib.llama_memory_seq_rm(mem(ctx), 0, -1, -1)
    _, h_tgt = nat.decode(nat.ctx, PROMPT, 0)
    h_in = np.vstack([np.zeros((1, nat.n_embd)), h_tgt[:-1]])
    nat.lib.llama_set_embeddings_nextn(nat.ctx_mtp, True, False)
    try:
        logits, out = nat.decode(nat.ctx_mtp, PROMPT, 0, h_in, last_only=True)
    finally:
        nat.lib.llama_set_embeddings_nextn(nat.ctx_mtp, True, True)
    out_ref, logits_ref = ref.mtp_forward(PROMPT, h_in, np.arange(len(PROMPT)))
    assert out.shape == out_ref.shape
    assert_close(out, out_ref, f"{arch} unmasked MTP output hidden")
    assert_close(logits, logits_ref[-1:], f"{arch} unmasked MTP logits")
