"""pymtp graft: the torch forward matches llama.cpp, and a tiny end-to-end graft run writes a head
that llama.cpp loads and computes exactly like the trainer's torch head.

The models are tiny random dense GGUFs written here (2 layers, n_embd 64, a synthetic 265-token
byte-level BPE vocabulary), so everything runs in seconds on CPU. Needs PyTorch (the test extra
installs it) and the native library; without either the tests fail.
"""

from __future__ import annotations

import json
import sys

import gguf
import numpy as np
import pytest
import torch  # noqa: F401  (the test extra installs it: a missing torch must fail, not skip)

from helpers import (
    ARCHS,
    CHECK_SEQ,
    CORPUS,
    GRAFT_ARGS,
    N_LAYER,
    D,
    assert_head_drafts_losslessly,
    check_acceptance_step_weights,
    expected_head_names,
    fresh_peek,
    homogeneity_p,
    joint_first_tokens,
    write_tiny,
)
from pymtp.chat_template import CHATML_TEMPLATE  # noqa: E402
from pymtp.cli.main import main  # noqa: E402

# --------------------------------------------------------------------------- tiny models

@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny(tmp_path_factory.mktemp("graft") / "tiny-llama.gguf", "llama", seed=1)


# --------------------------------------------------------------------------- torch vs llama.cpp

@pytest.mark.parametrize("arch,window", [(a, 0) for a in ARCHS] + [("gemma3", 4)])
def test_torch_trunk_matches_llama_cpp(tmp_path, arch, window):
    from pymtp.graft.check import compare_trunk

    path = write_tiny(tmp_path / f"{arch}.gguf", arch, seed=2, sliding_window=window)
    seqs = [[72, 101, 108, 108, 111, 44, 32, 116, 104, 101, 114, 101, 33, 10, 87, 104, 97, 116]]
    r = compare_trunk(path, seqs=seqs, n_threads=1)
    scale = r["per_sequence"][0]["logit_scale"]
    # f32 weights: what is left is float rounding (gemma3: ggml's f16 GELU table)
    assert r["max_abs_diff_logits"] < 2e-3 * max(scale, 1.0), r
    assert r["max_abs_diff_hidden"] < 2e-3, r
    assert r["argmax_agreement"] == 1.0


# --------------------------------------------------------------------------- end to end

def test_a_head_with_a_draft_vocabulary_trains_on_its_tokens(tiny_llama):
    """With a draft vocabulary the distillation loss is the KL between the base's distribution
    renormalised over the kept tokens and the head's over the same tokens (all a head limited to
    them can match), and top-1 agreement is taken inside them: not the whole vocabulary's."""
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel, MTPHead
    from pymtp.graft.train import Distiller, TrainConfig

    bg = load_base(tiny_llama, with_sha=False)
    base = BaseModel(bg)
    head = MTPHead.from_base(bg, init="mix", seed=0, index=0)
    n_vocab, n_embd = base.output.shape
    keep = np.arange(3, n_vocab, 5)
    g = torch.Generator().manual_seed(0)
    h, o = (torch.randn(8, n_embd, generator=g) for _ in range(2))
    tgt = torch.zeros(8, dtype=torch.long)
    cpu, cfg = torch.device("cpu"), TrainConfig(device="cpu")
    kl, _, agree, _ = Distiller(base, head, cfg, cpu, None, vocab_ids=keep)._chunk_loss(o, h, tgt)
    w = base.output[torch.as_tensor(keep)]
    t, s = torch.log_softmax(h @ w.T, -1), torch.log_softmax(o @ w.T, -1)
    torch.testing.assert_close(kl, (t.exp() * (t - s)).sum(-1), rtol=1e-5, atol=1e-6)
    assert torch.equal(agree, s.argmax(-1) == t.argmax(-1))
    kl_full, _, _, _ = Distiller(base, head, cfg, cpu, None)._chunk_loss(o, h, tgt)
    assert not torch.allclose(kl_full, kl, rtol=1e-2)


@pytest.fixture(scope="module")
def grafted(tiny_llama, tmp_path_factory):
    out = tmp_path_factory.mktemp("graft-out")
    head, report = out / "head.gguf", out / "report.json"
    corpus = out / "corpus.txt"
    corpus.write_text(CORPUS)
    rc = main(["graft", str(tiny_llama), "-o", str(head), "--report", str(report),
               "--data-cache", str(out / "cache"), "--corpus", str(corpus), *GRAFT_ARGS])
    assert rc == 0
    (out / "head-default.gguf").write_bytes(head.read_bytes())   # test_resume rewrites head.gguf
    return head, json.loads(report.read_text()), out


def test_acceptance_step_weights(grafted, tiny_llama):
    check_acceptance_step_weights(tiny_llama, grafted[0], steps=3)


def test_graft_loss_decreases_and_agreement_improves(grafted):
    _, report, _ = grafted
    train = report["history"]["train"]
    first = np.mean([r["loss"] for r in train[:3]])
    last = np.mean([r["loss"] for r in train[-2:]])
    assert last < 0.8 * first, train
    val = report["history"]["val"]
    assert val[0]["step"] == 0 and val[-1]["step"] == 30
    assert val[-1]["kl"] < val[0]["kl"]
    assert val[-1]["agree"] > val[0]["agree"]
    assert len(val[-1]["per_step"]) == 2            # --chain 2 by default
    assert 0 <= val[-1]["agree_all"] <= 1
    assert report["data"]["train_sequences"] > 0 and report["data"]["val_sequences"] > 0
    assert report["data"]["generated_sequences"] == 12 and report["data"]["corpus_sequences"] >= 3
    for key in ("data", "hidden_cache", "train", "total"):
        assert report["wall_s"][key] >= 0


def test_head_gguf_contract(grafted):
    head, report, _ = grafted
    r = gguf.GGUFReader(str(head))
    names = {t.name for t in r.tensors}
    assert names == expected_head_names(N_LAYER)
    types = {t.name: t.tensor_type for t in r.tensors}
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    L = N_LAYER
    assert shapes[f"blk.{L}.nextn.eh_proj.weight"] == [2 * D, D]          # ggml {2*n_embd, n_embd}
    assert types[f"blk.{L}.nextn.eh_proj.weight"] == gguf.GGMLQuantizationType.F16
    assert types[f"blk.{L}.attn_q.weight"] == gguf.GGMLQuantizationType.F16
    for n in ("nextn.enorm", "nextn.hnorm", "nextn.shared_head_norm", "attn_norm", "ffn_norm"):
        assert types[f"blk.{L}.{n}.weight"] == gguf.GGMLQuantizationType.F32
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    graft_kv = {k: v for k, v in kv.items() if k.startswith("pymtp.graft.")}
    other = {k: v for k, v in kv.items() if not k.startswith("pymtp.graft.")}
    assert set(other) == {"general.architecture", "general.name", "llama.nextn_predict_layers",
                          "llama.block_count", "llama.embedding_length"}
    assert other["general.architecture"] == "llama"
    assert other["llama.nextn_predict_layers"] == 1
    assert other["llama.block_count"] == N_LAYER + 1
    assert other["llama.embedding_length"] == D
    assert graft_kv["pymtp.graft.base_file"] == "tiny-llama.gguf"
    assert len(graft_kv["pymtp.graft.base_sha256"]) == 64
    assert graft_kv["pymtp.graft.steps"] == 30
    assert graft_kv["pymtp.graft.final_loss"] > 0
    # the held-out acceptance check, measured through the native engine, is recorded in the head
    acc = report["acceptance"]
    assert acc["n_prompts"] == 3 and acc["k"] == 3 and acc["n_generated"] > 0
    assert len(acc["accept_per_position"]) == 3 and all(0 <= a <= 1 for a in acc["accept_per_position"])
    assert graft_kv["pymtp.graft.acceptance"] == ",".join(f"{a:.4f}" for a in acc["accept_per_position"])
    assert graft_kv["pymtp.graft.acceptance_prompts"] == 3


def test_merge_head(grafted, tiny_llama, tmp_path):
    from pymtp.gguf_meta import read_info
    from pymtp.graft.writer import merge_head

    head, _, _ = grafted
    merged = merge_head(tiny_llama, head, tmp_path / "merged.gguf")
    info = read_info(merged)
    assert info.n_mtp_layers == 1 and info.n_layer == N_LAYER + 1 and info.has_mtp_tensors
    r = gguf.GGUFReader(str(merged))
    names = {t.name for t in r.tensors}
    base_names = {t.name for t in gguf.GGUFReader(str(tiny_llama)).tensors}
    assert names == base_names | expected_head_names(N_LAYER)
    assert r.get_field("tokenizer.chat_template").contents() == CHATML_TEMPLATE
    assert r.get_field("pymtp.graft.steps").contents() == 30


def test_llama_cpp_runs_the_grafted_head_like_torch(grafted, tiny_llama):
    """The head file is loaded by llama.cpp (dense MTP graph) and its logits are the trainer's."""
    from pymtp.graft.check import compare_head

    head, _, _ = grafted
    seqs = [[72, 101, 108, 108, 111, 44, 32, 116, 104, 101, 114, 101, 33, 10, 87, 104, 97, 116, 32, 105, 115]]
    r = compare_head(tiny_llama, head, seqs=seqs, n_threads=1)
    assert r["max_abs_diff_target_hidden"] < 2e-3, r
    # f16 head matrices: llama.cpp rounds the activations to f16 for them as well
    assert r["max_abs_diff_mtp_logits"] < 5e-2, r
    assert r["mtp_argmax_agreement"] == 1.0, r


def test_generation_uses_the_head(grafted, tiny_llama):
    head, _, _ = grafted
    assert_head_drafts_losslessly(tiny_llama, head, n_draft=2)


def test_resume_continues_from_checkpoint(grafted, tiny_llama):
    head, _, out = grafted
    report2 = out / "report2.json"
    rc = main(["graft", str(tiny_llama), "-o", str(head), "--report", str(report2), "--resume",
               "--data-cache", str(out / "cache"), "--corpus", str(out / "corpus.txt"),
               *GRAFT_ARGS[:5], "36", *GRAFT_ARGS[6:]])
    assert rc == 0
    rep = json.loads(report2.read_text())
    assert rep["final"]["step"] == 36
    steps = [r["step"] for r in rep["history"]["train"]]
    assert steps[0] == 1 and steps[-1] == 36 and 30 in steps   # history carried over
    assert rep["wall_s"]["data"] < 30                              # generated data reused


def test_q8_0_head(tmp_path):
    from pymtp.graft.writer import write_head_gguf

    rng = np.random.default_rng(0)
    tensors = {"blk.2.attn_q.weight": rng.standard_normal((64, 64)).astype(np.float32),
               "blk.2.attn_norm.weight": np.ones(64, np.float32)}
    path = write_head_gguf(tmp_path / "h.gguf", "llama", 2, 64, tensors, head_type="q8_0")
    r = gguf.GGUFReader(str(path))
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.2.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert types["blk.2.attn_norm.weight"] == gguf.GGMLQuantizationType.F32


def test_q8_0_graft_is_checked_against_its_f16_original(tiny_llama, tmp_path):
    """A q8_0 head (here with a draft vocabulary too) is measured next to its f16 original, with the
    same draft vocabulary, on the same held-out prompts; the report says what quantization cost."""
    head, report = tmp_path / "q8.gguf", tmp_path / "r.json"
    args = ["--samples", "6", "--gen-tokens", "16", "--steps", "2", "--batch", "2", "--seq-len", "128",
            "--device", "cpu", "--threads", "1", "--quiet", "--data-cache", str(tmp_path / "cache"),
            "--type", "q8_0", "--draft-vocab", "64", "--check-prompts", "2", "--report", str(report)]
    assert main(["graft", str(tiny_llama), "-o", str(head), *args]) == 0
    acc = json.loads(report.read_text())["acceptance"]
    assert acc["n_prompts"] == 2 and acc["f16"]["n_prompts"] == 2
    assert acc["quantization_loss"] == acc["f16"]["accept_per_position"][0] - acc["accept_per_position"][0]
    r = gguf.GGUFReader(str(head))
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types[f"blk.{N_LAYER}.attn_q.weight"] == gguf.GGMLQuantizationType.Q8_0
    assert r.get_field("pymtp.graft.draft_vocab").contents() == 64
    assert r.get_field("pymtp.graft.matrix_type").contents() == "q8_0"    # pymtp info shows it
    assert not list(tmp_path.glob("*f16-check*"))                  # the f16 copy is removed


def test_missing_torch_is_one_clear_line(monkeypatch, capsys, tiny_llama, tmp_path):
    monkeypatch.setitem(sys.modules, "torch", None)
    rc = main(["graft", str(tiny_llama), "-o", str(tmp_path / "h.gguf")])
    assert rc == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pymtp: error: pymtp graft needs PyTorch: pip install 'pymtp[graft]'"]


def test_prompt_set_is_varied_and_deterministic():
    from pymtp.graft.prompts import build_prompts

    a, b = build_prompts(600, seed=3), build_prompts(600, seed=3)
    assert a == b
    texts = [p if isinstance(p, str) else p[-1]["content"] for p in a]
    assert len({json.dumps(p) for p in a}) == 600
    raw = sum(isinstance(p, str) for p in a)
    assert 20 < raw < 150
    assert sum("def " in t or "function" in t or "program" in t for t in texts) > 30


@pytest.mark.parametrize("arch,window", [("llama", 0), ("gemma3", 4)])
def test_torch_kv_cached_generation_matches_llama_cpp(tmp_path, arch, window):
    """Batched, left-padded, KV-cached greedy sampling in torch == llama.cpp greedy decoding."""
    import pymtp
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel

    path = write_tiny(tmp_path / f"{arch}.gguf", arch, seed=5, sliding_window=window)
    prompts = [[72, 101, 108, 108, 111], [87, 104, 97, 116, 32, 105, 115, 32, 97, 110, 32, 97]]
    base = BaseModel(load_base(path, with_sha=False))
    got = base.generate(prompts, 12, [0.0, 0.0], eog_ids=())
    with pymtp.Model(path, mtp="off", n_ctx=256, n_threads=1) as m:
        want = [m.generate(p, max_tokens=12, temperature=0.0).tokens for p in prompts]
    assert got == want


ARCH_EXTRAS = {"qwen2": {"attn_q.bias", "attn_k.bias", "attn_v.bias"},
               "qwen3": {"attn_q_norm.weight", "attn_k_norm.weight"},
               "gemma3": {"attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
                          "post_ffw_norm.weight"}}


@pytest.mark.parametrize("arch,window", [("qwen2", 0), ("qwen3", 0), ("gemma3", 4)])
def test_graft_other_archs(tmp_path, arch, window):
    """qwen2/qwen3/gemma3: the head carries the arch's extra tensors, and llama.cpp runs it like torch."""
    from pymtp.graft.check import compare_head

    base = write_tiny(tmp_path / f"{arch}.gguf", arch, seed=3, sliding_window=window)
    head = tmp_path / f"{arch}.mtp.gguf"
    args = ["--samples", "6", "--gen-tokens", "16", "--steps", "4", "--batch", "2", "--seq-len", "320",
            "--device", "cpu", "--threads", "1", "--quiet", "--data-cache", str(tmp_path / "cache")]
    assert main(["graft", str(base), "-o", str(head), *args]) == 0
    names = {t.name for t in gguf.GGUFReader(str(head)).tensors}
    extras = {f"blk.{N_LAYER}.{s}" for s in ARCH_EXTRAS[arch]}
    # a feature head, pymtp graft's default: its fusion matrix too
    assert names == expected_head_names(N_LAYER) | extras | {f"blk.{N_LAYER}.nextn.eh_proj.feat"}
    seqs = [[72, 101, 108, 108, 111, 44, 32, 116, 104, 101, 114, 101, 33, 10, 87, 104, 97, 116]]
    r = compare_head(base, head, seqs=seqs, n_threads=1)
    assert r["max_abs_diff_mtp_logits"] < 5e-2, r
    assert r["mtp_argmax_agreement"] == 1.0, r


# --------------------------------------------------------------------------- --heads N

N_HEADS = 3


@pytest.fixture(scope="module")
def grafted_heads(grafted, tiny_llama):
    """--heads 3 on the same data as ``grafted`` (its generated-data cache is reused)."""
    _, _, out = grafted
    head, report = out / "heads3.gguf", out / "heads3.json"
    rc = main(["graft", str(tiny_llama), "-o", str(head), "--report", str(report), "--heads", str(N_HEADS),
               "--data-cache", str(out / "cache"), "--corpus", str(out / "corpus.txt"), *GRAFT_ARGS])
    assert rc == 0
    return head, json.loads(report.read_text())


def test_heads_gguf_holds_n_blocks(grafted_heads):
    head, _ = grafted_heads
    r = gguf.GGUFReader(str(head))
    names = {t.name for t in r.tensors}
    want = set().union(*(expected_head_names(N_LAYER + j) for j in range(N_HEADS)))
    assert names == want
    kv = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    assert kv["llama.nextn_predict_layers"] == N_HEADS
    assert kv["llama.block_count"] == N_LAYER + N_HEADS
    assert kv["llama.embedding_length"] == D
    assert kv["pymtp.graft.heads"] == N_HEADS
    assert len(kv["pymtp.graft.val_top1_agreement_per_head"].split(",")) == N_HEADS
    # the heads are distinct blocks (own init noise, own training)
    t = {t.name: np.array(t.data, dtype=np.float32) for t in r.tensors}
    for j in range(1, N_HEADS):
        a, b = t[f"blk.{N_LAYER}.nextn.eh_proj.weight"], t[f"blk.{N_LAYER + j}.nextn.eh_proj.weight"]
        assert a.shape == b.shape and not np.array_equal(a, b)


def test_heads_every_head_learns(grafted_heads):
    _, report = grafted_heads
    assert report["head"]["n_heads"] == N_HEADS
    val = report["history"]["val"]
    assert val[0]["step"] == 0 and val[-1]["step"] == 30
    first, last = val[0]["per_step"], val[-1]["per_step"]
    assert len(first) == len(last) == N_HEADS
    for j in range(N_HEADS):
        assert last[j]["kl"] < 0.8 * first[j]["kl"], (j, first[j], last[j])
        assert last[j]["agree"] > first[j]["agree"], (j, first[j], last[j])
    train = report["history"]["train"]
    for j in range(N_HEADS):
        a = np.mean([r["kl_per_head"][j] for r in train[:3]])
        b = np.mean([r["kl_per_head"][j] for r in train[-2:]])
        assert b < 0.8 * a, (j, a, b)
    assert report["val_top1_per_head"] == [s["agree"] for s in last]


def test_llama_cpp_runs_each_grafted_head_like_torch(grafted_heads, tiny_llama):
    """llama.cpp loads the N-head sidecar; head j (llama_set_nextn_layer_offset(ctx, j), fed
    llama.cpp's own head j-1 output) computes what the trainer's torch chain computes."""
    from pymtp.graft.check import compare_head

    head, _ = grafted_heads
    r = compare_head(tiny_llama, head, seqs=[CHECK_SEQ], n_threads=1)
    assert r["n_heads"] == N_HEADS and len(r["per_head"]) == N_HEADS
    assert r["max_abs_diff_target_hidden"] < 2e-3, r
    for p in r["per_head"]:
        assert p["max_abs_diff_mtp_logits"] < 5e-2, r
        assert p["mtp_argmax_agreement"] == 1.0, r


def test_heads_merge_and_generate(grafted_heads, tiny_llama, tmp_path):
    from pymtp.gguf_meta import read_info
    from pymtp.graft.writer import merge_head

    head, _ = grafted_heads
    assert read_info(head).n_mtp_layers == N_HEADS
    merged = merge_head(tiny_llama, head, tmp_path / "merged.gguf")
    info = read_info(merged)
    assert info.n_mtp_layers == N_HEADS and info.n_layer == N_LAYER + N_HEADS
    assert_head_drafts_losslessly(tiny_llama, head, n_draft=3)


def test_heads_1_is_the_single_head_recipe(grafted, tiny_llama):
    """--heads 1 writes exactly the default run's bytes (same seed, same data)."""
    _, _, out = grafted
    head = out / "heads1.gguf"
    rc = main(["graft", str(tiny_llama), "-o", str(head), "--heads", "1",
               "--data-cache", str(out / "cache"), "--corpus", str(out / "corpus.txt"), *GRAFT_ARGS])
    assert rc == 0
    assert head.read_bytes() == (out / "head-default.gguf").read_bytes()


@pytest.mark.parametrize("extra,message", [(["--heads", "0"], "--heads must be in 1..8"),
                                           (["--heads", "2", "--chain", "3"], "--chain applies to --heads 1")])
def test_heads_bad_arguments(tiny_llama, tmp_path, capsys, extra, message):
    rc = main(["graft", str(tiny_llama), "-o", str(tmp_path / "h.gguf"), *extra])
    assert rc != 0
    assert message in capsys.readouterr().err


def test_heads_help(capsys):
    try:
        main(["graft", "--help"])
    except SystemExit:
        pass
    text = capsys.readouterr().out
    assert "--heads N" in text and "head j-1" in text


@pytest.mark.parametrize("heads", ["per_layer", "first", "capped"])
def test_grafted_heads_engine_lossless_and_caches_exact(grafted_heads, tiny_llama, heads):
    """The engine on a grafted 3-head sidecar (dense llama): every policy keeps the text, and after
    random accept/reject patterns each head's cache equals a fresh replay of the accepted tokens."""
    import numpy as np

    import pymtp

    head, _ = grafted_heads
    prompt = CHECK_SEQ
    with pymtp.Model(tiny_llama, mtp="off", n_ctx=256, n_threads=1) as off:
        ref = off.generate(prompt, max_tokens=40).tokens

    def model():
        return pymtp.Model(tiny_llama, mtp="on", mtp_head=head, n_draft=5, heads=heads, n_ctx=256, n_threads=1)

    with model() as m:
        assert m.n_heads == (1 if heads == "first" else N_HEADS)
        out = m.generate(prompt, max_tokens=40)
        assert out.tokens == ref
        assert out.stats.n_drafted > 0
        m.set_synthetic_acceptance([0.8, 0.6, 0.45, 0.3, 0.2])
        gen = m.generate(prompt, max_tokens=33)
        # what the target holds: every emitted token but the pending last one (an end-of-generation
        # token is pending and not in gen.tokens); both engines draft after the same token
        held = prompt + (gen.tokens if gen.finish_reason == "eos" else gen.tokens[:-1])
        toks, logits = m.rt.peek_draft(5, id_last=CHECK_SEQ[0])
    ftoks, flogits = fresh_peek(model(), held + [CHECK_SEQ[0]], 5)
    assert toks == ftoks
    assert float(np.abs(np.asarray(logits) - np.asarray(flogits)).max()) < 0.02


# --------------------------------------------------------------------------- draft vocabulary (pymtp trim)

def _trimmed(grafted, tiny_llama, tmp_path, n=40):
    """The grafted head with a draft vocabulary of the n tokens the corpus uses most."""
    from pymtp.graft import trim
    from pymtp.graft.tokenizer import Tokenizer

    head, _, _ = grafted
    with Tokenizer(tiny_llama) as tok:
        ids = tok.tokenize(CORPUS, add_special=False)
        n_vocab, eog = tok.n_vocab, list(tok.eog_ids)
    counts = np.bincount(np.asarray(ids), minlength=n_vocab)
    keep = trim.choose(counts, n, always=eog)
    assert len(keep) == n and set(eog) <= set(keep.tolist())
    out = trim.trim_head(head, tiny_llama, keep, tmp_path / "trimmed.gguf")
    return out, keep, n_vocab


def test_trimmed_head_scores_only_its_draft_vocabulary(grafted, tiny_llama, tmp_path):
    """The draft logits of a trimmed head are the full head's on the kept tokens (the rows are the
    base's LM-head rows as stored) and -inf elsewhere, so every draft is a kept token."""
    import pymtp

    head, _, _ = grafted
    trimmed, keep, n_vocab = _trimmed(grafted, tiny_llama, tmp_path)
    r = gguf.GGUFReader(str(trimmed))
    shapes = {t.name: [int(x) for x in t.shape] for t in r.tensors}
    L = N_LAYER
    assert shapes[f"blk.{L}.nextn.shared_head_head.weight"] == [D, len(keep)]
    d2t = {t.name: t for t in r.tensors}[f"blk.{L}.nextn.embed_tokens.d2t"]
    assert d2t.tensor_type == gguf.GGMLQuantizationType.I32 and d2t.data.tolist() == keep.tolist()
    assert r.get_field("pymtp.graft.draft_vocab").contents() == len(keep)
    assert r.get_field("pymtp.graft.acceptance") is None          # measured on the untrimmed head only

    prompt = "The quick brown fox jumps over the"
    peeks = {}
    for name, path in (("full", head), ("trimmed", trimmed)):
        with pymtp.Model(tiny_llama, mtp="on", mtp_head=path, n_draft=3, n_ctx=256, n_threads=1) as m:
            m.generate(prompt, max_tokens=1)
            peeks[name] = m.rt.peek_draft(3)
    full, cut = (np.array(peeks[k][1]) for k in ("full", "trimmed"))
    outside = np.setdiff1d(np.arange(n_vocab), keep)
    assert np.all(np.isneginf(cut[:, outside]))
    assert np.all(np.isin(peeks["trimmed"][0], keep))
    # step 1 sees the same input with both heads: identical scores on the kept tokens
    np.testing.assert_allclose(cut[0, keep], full[0, keep], rtol=0, atol=1e-5)


def test_trimmed_head_is_lossless(grafted, tiny_llama, tmp_path):
    trimmed, _, _ = _trimmed(grafted, tiny_llama, tmp_path)
    assert_head_drafts_losslessly(tiny_llama, trimmed, n_draft=3)


@pytest.mark.parametrize("which", ["full", "trimmed"])
def test_greedy_drafts_alike_on_the_backend_and_on_the_host(grafted, tiny_llama, tmp_path, monkeypatch, which):
    """A greedy draft's argmax and confidence come from a backend sampler that, for a draft
    vocabulary, works on the N scores and maps the argmax through d2t (the whole-vocabulary row is not
    built). With every draft accepted at random (synthetic rates) the text is the drafts themselves,
    so it must equal the text of the host's argmax over the whole row (PYMTP_DRAFT_ON_BACKEND=0)."""
    import pymtp

    head = grafted[0] if which == "full" else _trimmed(grafted, tiny_llama, tmp_path)[0]
    outs = {}
    for where in ("backend", "host"):
        if where == "host":
            monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", "0")
        with pymtp.Model(tiny_llama, mtp="on", mtp_head=head, n_draft=3, n_ctx=256, n_threads=1) as m:
            m.set_synthetic_acceptance([0.9, 0.8, 0.7])
            outs[where] = m.generate("The quick brown fox", max_tokens=48, seed=7)  # seeds the random acceptance
    b, h = outs["backend"], outs["host"]
    assert b.tokens == h.tokens
    assert b.stats.n_accepted == h.stats.n_accepted > 10
    assert b.stats.accepted_per_position == h.stats.accepted_per_position


def test_trimmed_head_stochastic_drafting_is_exact(grafted, tiny_llama, tmp_path):
    """Rejection sampling with q on the draft vocabulary only (q = 0 elsewhere) keeps the target's
    distribution: the joint law of the first tokens equals plain sampling (chi-square), while drafts
    are accepted; a verifier that accepts every draft is rejected by the same test."""
    import pymtp

    trimmed, keep, _ = _trimmed(grafted, tiny_llama, tmp_path, n=24)
    n = 5000
    with pymtp.Model(tiny_llama, mtp="off", n_ctx=128, n_threads=1) as m:
        plain, _ = joint_first_tokens(m, n, 0)
    with pymtp.Model(tiny_llama, mtp="on", mtp_head=trimmed, n_draft=2, n_ctx=128, n_threads=1) as m:
        drafted, accepted = joint_first_tokens(m, n, 10**6, draft="stochastic")
    assert accepted > 50
    # the target puts real mass outside the draft vocabulary, so a wrong residual would show
    outside = sum(c for t, c in plain.items() if any(x not in set(keep.tolist()) for x in t))
    assert outside > n // 10
    assert homogeneity_p(plain, drafted) > 1e-3


def test_trimmed_head_backend_candidates_map_to_tokens(grafted, tiny_llama, tmp_path, monkeypatch):
    """A stochastic draft from the backend's candidates (mtp-top-k) over a draft vocabulary of 24 scores takes all of
    them, mapped through d2t: the same q as the host's chain over the row, so the same seeds emit the same tokens
    and accept the same drafts."""
    import pymtp

    trimmed, _, _ = _trimmed(grafted, tiny_llama, tmp_path, n=24)
    runs = []
    for backend in ("0", "1"):
        monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", backend)   # read when the engine is made
        with pymtp.Model(tiny_llama, mtp="on", mtp_head=trimmed, n_draft=3, n_ctx=128, n_threads=1) as m:
            outs = [m.generate("The quick brown", max_tokens=24, temperature=1.0, seed=s, draft="stochastic")
                    for s in range(6)]
        runs.append(([o.tokens for o in outs], sum(o.stats.n_accepted for o in outs)))
    assert runs[1][1] > 0
    assert runs[1] == runs[0]


def test_pymtp_trim_cli(grafted, tiny_llama, tmp_path, capsys):
    from pymtp.graft.tokenizer import Tokenizer

    head, _, _ = grafted
    with Tokenizer(tiny_llama) as tok:
        n_vocab = tok.n_vocab
        ids = tok.tokenize(CORPUS, add_special=False)
    counts = tmp_path / "counts.npz"
    np.savez(counts, train=np.bincount(np.asarray(ids), minlength=n_vocab), val=np.bincount(np.asarray(ids[:50]),
                                                                                          minlength=n_vocab))
    out = tmp_path / "t.gguf"
    assert main(["trim", str(tiny_llama), "--mtp-head", str(head), "-n", "32", "-o", str(out),
                 "--counts", str(counts), "--check-prompts", "2", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "draft vocabulary of 32 of" in text and "held-out coverage" in text
    assert "acceptance of the trimmed head" in text
    assert main(["info", str(tiny_llama), "--mtp-head", str(out)]) == 0
    info = capsys.readouterr().out
    assert "draft vocab     32 tokens (pymtp trim)" in info
    assert "head accepts" in info                     # the trimmed head's own, from --check-prompts
    assert_head_drafts_losslessly(tiny_llama, out, n_draft=2)
    # counts as a plain .npy (no held-out part): the same vocabulary
    npy, out_npy = tmp_path / "counts.npy", tmp_path / "t-npy.gguf"
    np.save(npy, np.bincount(np.asarray(ids), minlength=n_vocab))
    assert main(["trim", str(tiny_llama), "--mtp-head", str(head), "-n", "32", "-o", str(out_npy),
                 "--counts", str(npy), "--threads", "1"]) == 0
    assert "draft vocabulary of 32 of" in capsys.readouterr().out
    def d2t(path):
        return next(t for t in gguf.GGUFReader(str(path)).tensors if t.name.endswith(".d2t")).data.tolist()

    assert d2t(out_npy) == d2t(out)
    # bad input: a clear error, nothing written
    for argv, message in (
            (["-n", str(n_vocab)], "smaller than the vocabulary"),
            (["-n", "0"], "-n must be >= 1"),
            (["--mtp-head", str(out), "-n", "16"], "already has a draft vocabulary"),
            (["--counts", str(tmp_path / "missing.npz"), "-n", "16"], "--counts: no such file")):
        argv = ["trim", str(tiny_llama), "--mtp-head", str(head), "--counts", str(counts), "-o",
                str(tmp_path / "bad.gguf"), *argv]
        assert main(argv) != 0
        assert message in capsys.readouterr().err
        assert not (tmp_path / "bad.gguf").exists()


def test_trimmed_head_with_q8_0_matrices(grafted, tiny_llama, tmp_path, capsys):
    """pymtp trim --type q8_0 stores the head's own matrices in 8 bits (a cheaper draft step on a CPU): every
    f16 matrix becomes q8_0, the draft vocabulary's rows stay the base's as stored, the norms f32; its draft
    scores stay near the f16 head's, it drafts losslessly, and --check-prompts compares it with the same
    trim of the matrices as stored."""
    from gguf.quants import dequantize

    import pymtp
    from pymtp.graft import trim
    from pymtp.graft.tokenizer import Tokenizer

    head, _, _ = grafted
    f16, keep, _ = _trimmed(grafted, tiny_llama, tmp_path)
    q8 = trim.trim_head(head, tiny_llama, keep, tmp_path / "q8.gguf", head_type="q8_0")
    a = {t.name: t for t in gguf.GGUFReader(str(f16)).tensors}
    b = {t.name: t for t in gguf.GGUFReader(str(q8)).tensors}
    assert a.keys() == b.keys()
    lm_head = f"blk.{N_LAYER}.nextn.shared_head_head.weight"
    matrices = [n for n, t in a.items() if t.tensor_type == gguf.GGMLQuantizationType.F16 and len(t.shape) == 2]
    assert len(matrices) >= 7
    for name, t in a.items():
        if name in matrices:
            assert b[name].tensor_type == gguf.GGMLQuantizationType.Q8_0, name
            x = np.asarray(t.data, np.float32)
            err = np.abs(dequantize(np.asarray(b[name].data), b[name].tensor_type) - x).max()
            assert 0 < err <= np.abs(x).max() / 100, name                 # 8-bit blocks, not a copy
        else:                                                              # norms, d2t, the base's LM-head rows
            assert b[name].tensor_type == t.tensor_type and np.array_equal(b[name].data, t.data), name
    assert lm_head not in matrices
    r = gguf.GGUFReader(str(q8))
    assert r.get_field("pymtp.graft.matrix_type").contents() == "q8_0"

    prompt = "The quick brown fox jumps over the"
    peeks = {}
    for name, path in (("f16", f16), ("q8", q8)):
        with pymtp.Model(tiny_llama, mtp="on", mtp_head=path, n_draft=3, n_ctx=256, n_threads=1) as m:
            m.generate(prompt, max_tokens=1)
            peeks[name] = np.array(m.rt.peek_draft(1)[1])[0, keep]
    spread = peeks["f16"].max() - peeks["f16"].min()
    assert 0 < np.abs(peeks["q8"] - peeks["f16"]).max() < 0.05 * spread
    assert_head_drafts_losslessly(tiny_llama, q8, n_draft=3)

    counts = tmp_path / "counts.npz"
    with Tokenizer(tiny_llama) as tok:
        np.savez(counts, train=np.bincount(np.asarray(tok.tokenize(CORPUS, add_special=False)), minlength=tok.n_vocab))
    out = tmp_path / "cli-q8.gguf"
    assert main(["trim", str(tiny_llama), "--mtp-head", str(head), "-n", "32", "-o", str(out), "--type", "q8_0",
                 "--counts", str(counts), "--check-prompts", "2", "--threads", "1"]) == 0
    text = capsys.readouterr().out
    assert "its matrices q8_0" in text
    assert "trimmed head, matrices as stored" in text and "trimmed head, q8_0 matrices" in text
    assert sorted(p.name for p in tmp_path.glob("cli-q8*")) == ["cli-q8.gguf"]     # the check's copy is gone
    assert main(["info", str(tiny_llama), "--mtp-head", str(out)]) == 0
    assert "head matrices   q8_0 (written with --type q8_0)" in capsys.readouterr().out


def test_pymtp_trim_counts_tokens_in_the_bases_own_answers(grafted, tiny_llama, tmp_path, capsys):
    """Without --counts or cached graft data, the engine generates answers to count tokens in."""
    head, _, _ = grafted
    out, counts = tmp_path / "t.gguf", tmp_path / "c.npz"
    assert main(["trim", str(tiny_llama), "--mtp-head", str(head), "-n", "40", "-o", str(out), "--samples", "10",
                 "--gen-tokens", "12", "--threads", "1", "--data-cache", str(tmp_path / "empty"),
                 "--save-counts", str(counts)]) == 0
    assert "from 10 answers generated here" in capsys.readouterr().out
    with np.load(counts) as z:
        assert z["train"].sum() + z["val"].sum() == 10 * 12 and z["val"].sum() == 12     # every 10th held out
    assert gguf.GGUFReader(str(out)).get_field("pymtp.graft.draft_vocab").contents() == 40


# --------------------------------------------------------------------------- training data

def test_replies_of_a_model_without_a_chat_template_end_at_chatml_turn_markers(tiny_llama, tmp_path):
    """A base model gets ChatML, writes "<|im_end|>" as text and goes on with the next turns itself (Gemma
    3 270M at T=0); Model.chat and `pymtp chat` stop there, so the graft data does too: a generated reply
    ends before the token in which a marker begins (a marker spans several byte tokens here). A model
    with its own template keeps the whole reply (its end-of-turn token ends it)."""
    from pymtp.graft.data import GenConfig, cut_at_stops, generate_dataset, sample_plan
    from pymtp.graft.tokenizer import Tokenizer

    with Tokenizer(tiny_llama) as tok:
        reply = "Sure, here it is.<|im_end|>\n<|im_start|>user\nAnd more?"
        ids = tok.tokenize(reply, add_special=False, parse_special=False)
        assert len(tok.tokenize("<|im_end|>", add_special=False, parse_special=False)) > 1
        cut = cut_at_stops(ids, tok.piece, ["<|im_end|>", "<|im_start|>"])
        assert tok.detokenize(cut) == "Sure, here it is."
        assert cut_at_stops(ids, tok.piece, ["never there"]) == ids
        assert cut_at_stops(ids, tok.piece, None) == ids

        class Base:  # the torch model's generate(): every reply is the one above
            device = "cpu"

            def generate(self, prompts, n, temps, **kw):
                return [list(ids) for _ in prompts]

        cfg = GenConfig(samples=4, gen_tokens=len(ids))
        prompts, plan = sample_plan(cfg)
        chat = [i for i, (pi, _, _) in enumerate(plan) if isinstance(prompts[pi], list)]
        assert chat, "the built-in prompt set holds chat prompts"
        for template, want in ((None, "Sure, here it is."), ("{{ messages }}", reply)):
            tok.chat_template = template
            data = generate_dataset(Base(), tok, cfg, tmp_path / str(bool(template)), "sha", progress=False,
                                    log=lambda *a: None)
            for i in chat:
                assert tok.detokenize(data.seq(i)[data.n_prompt[i]:]) == want


def test_self_written_prompts_are_user_turns_the_base_writes_from_its_template(tiny_llama, tmp_path):
    """--self-prompts F: that share of the sequences answers a user's turn the base wrote itself, sampled
    from its chat template's text before a user message. The prompt is that text + the turn (without its
    end-of-turn token) + the template's text after it; a turn that never ends, is too short or repeats an
    earlier one is dropped; the first ones are held out like the built-in validation prompts. F = 0 leaves
    the plan (and the data's cache key) as they were."""
    from pymtp.graft.data import GenConfig, generate_dataset, sample_plan
    from pymtp.graft.self_prompts import MAX_USER_TOKENS, chat_frame
    from pymtp.graft.tokenizer import Tokenizer

    with Tokenizer(tiny_llama) as tok:
        before, after = chat_frame(tok)
        q = "Hello there, who are you?"
        assert before + tok.tokenize(q, add_special=False) + after == tok.chat_tokens([{"role": "user", "content": q}])
        eog = tok.eog_ids[0]
        reply = tok.tokenize("An answer.", add_special=False)

        class Base:  # turns: #0 never ends, #2 repeats #1, #3 is too short, the rest are distinct
            device = "cpu"
            turns = 0

            def generate(self, prompts, n, temps, **kw):
                out = []
                for p in prompts:
                    if p != before:
                        out.append(list(reply))
                        continue
                    i, Base.turns = Base.turns, Base.turns + 1
                    msg = tok.tokenize(f"Question number {1 if i == 2 else i}?", add_special=False)
                    out.append([65] * MAX_USER_TOKENS if i == 0 else [65, eog] if i == 3 else msg + [eog])
                return out

        cfg = GenConfig(samples=40, gen_tokens=len(reply), self_prompts=0.5)
        prompts, plan = sample_plan(cfg)
        own = [(i, pi - len(prompts), v) for i, (pi, _, v) in enumerate(plan) if pi >= len(prompts)]
        assert [j for _, j, _ in own] == list(range(20)) and [v for _, _, v in own] == [True] + [False] * 19
        data = generate_dataset(Base(), tok, cfg, tmp_path, "sha", progress=False, gen_batch=8, log=lambda *a: None)
        asked = [tok.detokenize(data.seq(i)[:data.n_prompt[i]]) for i, _, _ in own]
        assert asked == [tok.detokenize(before) + f"Question number {j}?" + tok.detokenize(after)
                         for j in [1] + list(range(4, 23))]
        assert [bool(data.is_val[i]) for i, _, _ in own] == [v for _, _, v in own]
        assert all(tok.detokenize(data.seq(i)[data.n_prompt[i]:]) == "An answer." for i, _, _ in own)
        assert (tmp_path / f"gen-{cfg.key('sha')}" / "self-prompts.npz").is_file()

        plain = GenConfig(samples=40)
        assert sample_plan(plain)[1] == sample_plan(GenConfig(samples=40, self_prompts=0.0))[1]
        assert all(pi < len(prompts) for pi, _, _ in sample_plan(plain)[1])
        assert plain.key("sha") != cfg.key("sha") and "self_prompts" not in str(plain.key("sha"))
