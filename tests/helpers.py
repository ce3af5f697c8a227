"""Helpers the tests of several files share, in one place (fixtures live in conftest.py, the llama-server
harness in server_harness.py, where the models run in gpu.py).

Imported as ``helpers``: conftest.py puts tests/ on ``sys.path``. PyTorch is imported where a helper needs
it, so engine tests do not load it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections import Counter

import gguf
import numpy as np
import pytest
from scipy.stats import chi2_contingency

import pymtp
from gpu import NGL
from pymtp.chat_template import CHATML_TEMPLATE
from pymtp.cli.main import main


def python_path(*dirs) -> str:
    """PYTHONPATH for a subprocess: these directories, then the caller's own PYTHONPATH (if any)."""
    return os.pathsep.join([*map(str, dirs), *filter(None, [os.environ.get("PYTHONPATH")])])


# --------------------------------------------------------------------------- engine: prompts

PROMPTS = [
    "The quick brown fox", "Once upon a time", "def fibonacci(n):", "In 1905, Albert Einstein",
    "The recipe calls for", "SELECT name FROM users WHERE", "Dear Sir or Madam,", "1, 2, 3, 4,",
    "The capital of France is", "import numpy as np\n", "Q: What is the speed of light?\nA:",
    "Roses are red,", "It was a dark and stormy night", "The mitochondria is", "To be or not to be",
    "<html><body>", "Monday Tuesday Wednesday", "Hello, my name is", "A B C D E F", "Translate to French: cat",
    "The weather today", "{\"key\": [1, 2,",
]
MAX_TOKENS = 24
PROMPT_TOKENS = list(range(10, 40))     # a prompt as token ids of the tiny models' vocabulary


def held_tokens(out) -> list[int]:
    """What the target holds after a generation: every emitted token but the pending last one (an
    end-of-generation token is pending too, and not in out.tokens)."""
    return PROMPT_TOKENS + (out.tokens if out.finish_reason == "eos" else out.tokens[:-1])


def fresh_peek(fresh, seq, k):
    """Close-after-use model ``fresh`` prefills seq[:-1] and peeks the draft after seq[-1]."""
    from pymtp._native import llama as L

    with fresh:
        arr = (L.llama_token * (len(seq) - 1))(*seq[:-1])
        assert fresh.rt.lib.llama_mtp_prefill(fresh.rt.engine, arr, len(seq) - 1) == 0
        return fresh.rt.peek_draft(k, id_last=seq[-1])


# --------------------------------------------------------------------------- exactness: the law of the first tokens

N_SAMPLES = 20_000
N_TOKENS = 4           # first token + one step with up to 3 drafts (k clamps to max_tokens - 1 - done)
PROMPT = "Once upon a time"


def sample_joint(model, n: int, seed0: int, **kw) -> Counter:
    prompt = model.tokenize(PROMPT)
    counts = Counter()
    for i in range(n):
        out = model.generate(prompt, max_tokens=N_TOKENS, seed=seed0 + i, **kw)
        counts[tuple(out.tokens)] += 1
    return counts


def homogeneity_p(a: Counter, b: Counter) -> float:
    """Chi-square p-value that a and b come from one distribution (rare cells pooled)."""
    cells = sorted(set(a) | set(b), key=lambda c: -(a[c] + b[c]))
    table, other = [], [0, 0]
    for c in cells:
        if a[c] + b[c] >= 20:
            table.append([a[c], b[c]])
        else:
            other[0] += a[c]
            other[1] += b[c]
    if sum(other):
        table.append(other)
    return chi2_contingency(table)[1]


def chain_kw(temperature: float) -> dict:
    return dict(temperature=temperature, top_k=8, top_p=0.95, min_p=0.0, repeat_penalty=1.1)


# --------------------------------------------------------------------------- log-probabilities

# CPU: bit-identical rows (batch-invariant kernels); CUDA: a token's row rounds differently in a k+1 verify
# batch than in a 1-token decode (up to 0.024 in a logprob seen on the H100, docs/results/gpu-parity-h100)
LOGPROB_TOL = 0.0 if NGL == 0 else 5e-2


def assert_same_logprobs(a: list, b: list, where: str) -> None:
    assert len(a) == len(b), where
    for i, (x, y) in enumerate(zip(a, b)):
        assert x.token == y.token and x.text == y.text, f"{where}: token {i}"
        assert abs(x.logprob - y.logprob) <= LOGPROB_TOL, f"{where}: token {i}: {x.logprob} vs {y.logprob}"
        assert all(abs(p - q) <= LOGPROB_TOL for (_, _, p), (_, _, q) in zip(x.top, y.top)), f"{where}: token {i}"
        for j, ((tx, _, px), (ty, _, _)) in enumerate(zip(x.top, y.top)):
            # the same ids in the same order; on CUDA two alternatives within rounding may swap
            near_tie = LOGPROB_TOL > 0 and any(abs(px - q) <= 2 * LOGPROB_TOL for k, (t, _, q) in enumerate(x.top)
                                               if t == ty and k != j)
            assert tx == ty or near_tie, f"{where}: token {i}: top ids {x.top} vs {y.top}"


# --------------------------------------------------------------------------- graft: tiny dense models and heads

D, N_LAYER, N_HEAD, N_KV, HEAD_DIM, N_FF = 64, 2, 4, 2, 16, 128
ARCHS = ("llama", "qwen2", "qwen3", "gemma3")


def _byte_vocab():
    """GPT-2 style byte-level BPE: 256 byte tokens, 6 merges, ChatML specials."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    b2u = dict(zip(bs, [chr(c) for c in cs]))
    pairs = [("Ġ", "t"), ("h", "e"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n")]
    tokens = [b2u[b] for b in range(256)] + [a + b for a, b in pairs]
    n_normal = len(tokens)
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    return tokens, [1] * n_normal + [3] * 3, [f"{a} {b}" for a, b in pairs], n_normal


def write_tiny(path, arch="llama", seed=0, f32=True, sliding_window=0):
    """A trunk-only tiny model of ``arch`` (random weights; an untied LM head)."""
    tokens, types, merges, n_normal = _byte_vocab()
    V = len(tokens)
    rng = np.random.default_rng(seed)
    hd = 32 if arch in ("qwen3", "gemma3") else HEAD_DIM   # head_dim != n_embd / n_head
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"tiny-{arch}")
    w.add_context_length(2048)
    w.add_embedding_length(D)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    if arch == "gemma3" and sliding_window:
        w.add_sliding_window(sliding_window)
        w.add_uint32("gemma3.attention.sliding_window_pattern", 2)
        w.add_rope_freq_base_swa(1000.0)
        w.add_final_logit_softcapping(20.0)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(n_normal)
    w.add_eos_token_id(n_normal + 2)
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML_TEMPLATE)

    def mat(name, shape, std):
        a = rng.standard_normal(shape) * std
        w.add_tensor(name, a.astype(np.float32 if f32 else np.float16))

    def vec(name, n, nominal=1.0):
        w.add_tensor(name, (nominal * rng.uniform(0.8, 1.2, n)).astype(np.float32))

    mat("token_embd.weight", (V, D), 1.0)
    mat("output.weight", (V, D), D ** -0.5 * 3)
    vec("output_norm.weight", D)
    for il in range(N_LAYER):
        b = f"blk.{il}."
        vec(b + "attn_norm.weight", D)
        vec(b + "ffn_norm.weight", D)
        mat(b + "attn_q.weight", (N_HEAD * hd, D), D ** -0.5)
        mat(b + "attn_k.weight", (N_KV * hd, D), D ** -0.5)
        mat(b + "attn_v.weight", (N_KV * hd, D), D ** -0.5)
        mat(b + "attn_output.weight", (D, N_HEAD * hd), 0.5 * (N_HEAD * hd) ** -0.5)
        mat(b + "ffn_gate.weight", (N_FF, D), D ** -0.5)
        mat(b + "ffn_up.weight", (N_FF, D), D ** -0.5)
        mat(b + "ffn_down.weight", (D, N_FF), 0.5 * N_FF ** -0.5)
        if arch == "qwen2":
            for n, size in (("attn_q", N_HEAD * hd), ("attn_k", N_KV * hd), ("attn_v", N_KV * hd)):
                w.add_tensor(b + n + ".bias", (0.1 * rng.standard_normal(size)).astype(np.float32))
        if arch in ("qwen3", "gemma3"):
            vec(b + "attn_q_norm.weight", hd)
            vec(b + "attn_k_norm.weight", hd)
        if arch == "gemma3":
            vec(b + "post_attention_norm.weight", D)
            vec(b + "post_ffw_norm.weight", D)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# byte-level vocabulary: a chat prompt is ~100-250 tokens, the generated part 40
# --no-features: these tests hold the ordinary head's contract (feature heads: test_feature_heads.py)
GRAFT_ARGS = ["--samples", "12", "--gen-tokens", "40", "--steps", "30", "--batch", "4", "--seq-len", "320",
              "--lr", "3e-3", "--device", "cpu", "--threads", "1", "--quiet", "--check-prompts", "3",
              "--no-features"]


def graft_tiny(out, name: str, *extra: str, args=GRAFT_ARGS):
    """A tiny llama base in ``out`` and a head grafted for it on CORPUS with ``args`` + ``extra``:
    (base, head, its report)."""
    base = write_tiny(out / "tiny-llama.gguf", "llama", seed=1)
    corpus = out / "corpus.txt"
    corpus.write_text(CORPUS)
    head, report = out / f"{name}.gguf", out / f"{name}.json"
    assert main(["graft", str(base), "-o", str(head), "--report", str(report), *extra,
                 "--data-cache", str(out / "cache"), "--corpus", str(corpus), *args]) == 0
    return base, head, json.loads(report.read_text())


def expected_head_names(n_layer):
    L = n_layer
    names = {f"blk.{L}.{s}.weight" for s in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                                               "ffn_norm", "ffn_gate", "ffn_up", "ffn_down",
                                               "nextn.eh_proj", "nextn.enorm", "nextn.hnorm",
                                               "nextn.shared_head_norm")}
    return names


CORPUS = ("The quick brown fox jumps over the lazy dog. " * 8 + "\n\n"
          + "In the beginning there was the word, and the word was written down. " * 12)


def distill_inputs(base_path, head_path):
    """What a Distiller takes, on the tiny corpus: (base, head, x, valid, lmask, h): two 64-token rows, the
    second ending at 50, the first two positions of each outside the loss."""
    import torch

    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel, MTPHead

    bg = load_base(base_path, with_sha=False)
    base = BaseModel(bg)
    head = MTPHead.from_gguf(bg.hparams, head_path)
    text = list(CORPUS.encode())
    B, T = 2, 64
    x = torch.tensor([text[:T], text[40:40 + T]])
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[1, 50:] = False
    lmask = valid.clone()
    lmask[:, :2] = False
    with torch.no_grad():
        h = base(x, ())
    return base, head, x, valid, lmask, h


def check_acceptance_step_weights(base_path, head_path, steps: int):
    """--step-weights acceptance: a later draft step's loss at a position is weighted by the chance that
    the earlier steps' drafts for the same anchor are all accepted, prod (1 - TV(base, head)); the total
    is the weighted mean over every step's rows. Checked against the losses recomputed step by step on
    the corpus with the trained head: a chained step s at p continues the anchor p - s (its earlier steps
    sit at p - s .. p - 1), a parallel entry i at p is anchored at p itself. The same walk gives
    validation's "in_a_row" (greedy drafts accepted in a row, teacher-forced)."""
    import torch

    from pymtp.graft.train import Distiller, TrainConfig

    base, head, x, valid, lmask, h = distill_inputs(base_path, head_path)
    parallel = head.parallel
    B, T = x.shape
    cpu = torch.device("cpu")

    def run(weights):
        cfg = TrainConfig(device="cpu", seq_len=T, chain=1 if parallel else steps, step_weights=weights,
                          chain_weight=1.0, features=False)
        d = Distiller(base, head, cfg, cpu, contextlib.nullcontext)
        with torch.no_grad():
            return d, *d(x, valid, lmask, h)

    d, loss, stats = run("acceptance")
    _, loss_geo, stats_geo = run("geometric")
    assert len(stats) == steps
    assert [st["agree"] for st in stats] == [st["agree"] for st in stats_geo]

    # each step's per-position KL, agreement and acceptance chance, recomputed, as [B, T] (0 elsewhere)
    cos, sin = d.cos, d.sin
    emb = base.tok_embd[x]
    h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
    kls, keeps, agrees, rows_of = [], [], [], []
    with torch.no_grad():
        if parallel:
            outs = head.parallel_forward(emb, h_prev, cos[:T + parallel - 1], sin[:T + parallel - 1])
        else:
            outs, history, hp_ = [], [], h_prev
            for s in range(steps):
                out, kv = head(emb, hp_, cos[:T], sin[:T], history=history or None)
                history.append(kv)
                outs.append(out)
                hp_ = torch.cat([torch.zeros_like(out[:, :1]), out[:, :-1]], dim=1)
        pos = torch.arange(T)
        for i, out in enumerate(outs):
            if parallel:
                ahead = torch.zeros_like(valid)
                ahead[:, :T - i] = valid[:, i:]
                rows, shift = lmask & ahead, i
            else:
                rows, shift = lmask & (pos[None, :] >= i), 0
            b, p = rows.nonzero(as_tuple=True)
            kl, _, agree, keep = d._chunk_loss(out[b, p], h[b, p + shift], x[b, p])
            o, t = (torch.softmax(base.logits(v), -1) for v in (out[b, p], h[b, p + shift]))
            torch.testing.assert_close(keep, 1 - 0.5 * (o - t).abs().sum(-1), rtol=1e-4, atol=1e-5)
            K, L, A = torch.zeros(B, T), torch.zeros(B, T), torch.zeros(B, T)
            K[b, p], L[b, p], A[b, p] = keep, kl, agree.float()
            kls.append(L), keeps.append(K), agrees.append(A), rows_of.append(rows)
    num = den = 0.0
    for s in range(steps):
        reach, streak = torch.ones(B, T), agrees[s]
        for j in range(s):      # the earlier steps of this step's anchor
            reach = reach * (keeps[j] if parallel else torch.roll(keeps[j], s - j, dims=1))
            streak = streak * (agrees[j] if parallel else torch.roll(agrees[j], s - j, dims=1))
        in_a_row = float((streak * rows_of[s]).sum() / rows_of[s].sum())
        assert stats[s]["in_a_row"] == pytest.approx(in_a_row)
        w = reach * rows_of[s]
        num = num + (w * kls[s]).sum() / rows_of[s].sum()
        den = den + w.sum() / rows_of[s].sum()
        if s:
            assert 0.0 < float(w[rows_of[s]].mean()) < 0.99
            assert in_a_row <= stats[s]["agree"]
            if not parallel:    # (the tiny parallel head's later entries agree with nothing yet)
                assert 0.0 < in_a_row < stats[s]["agree"], (s, in_a_row, stats[s]["agree"])
    torch.testing.assert_close(loss, num / den, rtol=1e-4, atol=1e-6)
    assert not torch.allclose(loss, loss_geo, rtol=1e-3)


def assert_head_drafts_losslessly(base, head, n_draft: int) -> None:
    """The base with the head drafts, and its greedy text equals the base's without MTP."""
    with pymtp.Model(base, mtp="on", mtp_head=head, n_draft=n_draft, n_ctx=256, n_threads=1) as m:
        assert m.mtp_enabled
        out = m.generate("Hello", max_tokens=16)
        assert out.stats.to_dict()["n_drafted"] > 0
    with pymtp.Model(base, mtp="off", n_ctx=256, n_threads=1) as m:
        assert m.generate("Hello", max_tokens=16).tokens == out.tokens       # lossless


CHECK_SEQ = [72, 101, 108, 108, 111, 44, 32, 116, 104, 101, 114, 101, 33, 10, 87, 104, 97, 116, 32, 105, 115]


def joint_first_tokens(m, n: int, seed0: int, **extra):
    """(Counter of the first 3 tokens after "The quick brown" over n seeds at T=1, drafts accepted)."""
    kw = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0)
    prompt, counts, accepted = m.tokenize("The quick brown"), Counter(), 0
    for i in range(n):
        out = m.generate(prompt, max_tokens=3, seed=seed0 + i, **kw, **extra)
        counts[tuple(out.tokens)] += 1
        accepted += out.stats.n_accepted
    return counts, accepted


def assert_engine_draft_is_torchs_pass(base_path, head_path, k: int):
    """One engine draft (peek) of k tokens after CHECK_SEQ = torch's parallel pass at its last position
    (fed the fusion of the trunk features for a feature head): the same logits for every entry, from one
    MTP decode, and their argmaxes as the tokens. Returns the torch head."""
    import torch

    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel, MTPHead, feature_layers, rope_tables

    seq = CHECK_SEQ
    fresh = pymtp.Model(base_path, mtp="on", mtp_head=head_path, n_ctx=256, n_threads=1, n_draft=k)
    toks, logits = fresh_peek(fresh, seq, k)
    assert len(toks) == k
    base_g = load_base(base_path, with_sha=False)
    base, hp = BaseModel(base_g), base_g.hparams
    head = MTPHead.from_gguf(hp, head_path)
    assert head.parallel == k
    T = len(seq)
    with torch.no_grad():
        x = torch.tensor([seq])
        h = head.fuse(base(x, feature_layers(hp.n_layer) if head.features else ()))
        cos, sin = rope_tables(torch.arange(T + k), hp.n_rot, hp.rope_base, hp.rope_freq_scale, base.rope_freqs)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], dim=1)
        outs = head.parallel_forward(base.tok_embd[x], h_prev, cos, sin)
        want = np.stack([base.logits(o[0, -1]).numpy() for o in outs])
    got = np.asarray(logits, dtype=np.float32).reshape(k, -1)
    assert float(np.abs(got - want).max()) < 5e-2          # f16 head matrices
    assert toks == [int(w.argmax()) for w in want]
    return head
