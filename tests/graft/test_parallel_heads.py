"""Parallel drafting heads (pymtp graft --parallel K): K drafts in one MTP decode.

A tiny end-to-end graft writes a parallel head; the native engine drafts with it in one decode per
step (what torch computes for the pass), stays lossless (greedy identity, the joint law at T>0 by
chi-square), and after random accept/reject patterns its MTP KV equals a fresh replay's (the mask
rows never stay). Models: the tiny random dense GGUFs of test_graft (CPU, seconds).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

import pymtp
from helpers import (
    CHECK_SEQ,
    CORPUS,
    GRAFT_ARGS,
    N_LAYER,
    D,
    assert_engine_draft_is_torchs_pass,
    assert_same_logprobs,
    check_acceptance_step_weights,
    distill_inputs,
    expected_head_names,
    fresh_peek,
    graft_tiny,
    homogeneity_p,
    joint_first_tokens,
    write_tiny,
)
from pymtp.cli.main import main

K = 3


@pytest.fixture(scope="module")
def parallel_head(tmp_path_factory):
    return graft_tiny(tmp_path_factory.mktemp("graft-parallel"), "par", "--parallel", str(K))


def open_model(base, head, **kw):
    return pymtp.Model(base, mtp="on", mtp_head=head, n_ctx=256, n_threads=1, **kw)


def test_parallel_head_file_and_training(parallel_head):
    """The head holds its K-1 mask rows (f32, [n_embd, K-1]) next to an ordinary head's tensors;
    every entry of the pass learns (KL down, agreement up)."""
    _, head, report = parallel_head
    r = gguf.GGUFReader(str(head))
    names = {t.name for t in r.tensors}
    mask = f"blk.{N_LAYER}.nextn.hnorm.mask"
    assert names == expected_head_names(N_LAYER) | {mask}
    t = next(t for t in r.tensors if t.name == mask)
    assert [int(x) for x in t.shape] == [D, K - 1]
    assert t.tensor_type == gguf.GGMLQuantizationType.F32
    assert r.get_field("pymtp.graft.parallel").contents() == K
    val = report["history"]["val"]
    first, last = val[0]["per_step"], val[-1]["per_step"]
    assert len(first) == len(last) == K
    for i in range(K):
        assert last[i]["kl"] < first[i]["kl"], (i, first[i], last[i])
    assert report["acceptance"]["k"] == K


def test_acceptance_step_weights_of_a_parallel_pass(parallel_head):
    """--step-weights acceptance over a parallel pass: entry i is weighted by entries 0..i-1 of its own pass."""
    base, head, _ = parallel_head
    check_acceptance_step_weights(base, head, steps=K)


def test_step_decay_weights_the_entries(parallel_head):
    """--step-decay R: entry i of a parallel pass counts R^i in the loss, the total being
    sum_i R^i KL_i / sum_i R^i (KL_i: entry i's mean over its loss positions); a small R keeps the one
    block on entry 0."""
    import contextlib

    from pymtp.graft.train import Distiller, TrainConfig

    base, head, x, valid, lmask, h = distill_inputs(parallel_head[0], parallel_head[1])
    losses = {}
    for r in (0.5, 0.1, 1.0):
        cfg = TrainConfig(device="cpu", seq_len=64, chain=1, chain_weight=r, features=False)
        with torch.no_grad():
            loss, stats = Distiller(base, head, cfg, torch.device("cpu"), contextlib.nullcontext)(x, valid, lmask, h)
        assert len(stats) == K
        w = [r ** i for i in range(K)]
        assert float(loss) == pytest.approx(sum(wi * st["kl"] for wi, st in zip(w, stats)) / sum(w), rel=1e-4)
        losses[r] = float(loss)
    # the later entries' KL is larger (they predict further ahead): weighting them less lowers the total
    assert losses[0.1] < losses[0.5] < losses[1.0]


def test_engine_drafts_the_pass_torch_computes(parallel_head):
    """One engine draft (peek) of K tokens = torch's parallel pass at the last position: the same
    logits for every entry, from one MTP decode."""
    base_path, head_path = parallel_head[0], parallel_head[1]
    with open_model(base_path, head_path, n_draft=K) as m:
        assert m.parallel == K
    assert_engine_draft_is_torchs_pass(base_path, head_path, K)


@pytest.mark.parametrize("n_draft", [K, "auto"])
def test_parallel_head_is_lossless_one_decode_a_step(parallel_head, n_draft):
    base, head, _ = parallel_head
    with pymtp.Model(base, mtp="off", n_ctx=256, n_threads=1) as off:
        ref = off.generate(CHECK_SEQ, max_tokens=48).tokens
    with open_model(base, head, n_draft=n_draft) as m:
        m.set_synthetic_acceptance([0.9, 0.8, 0.7])       # drafts get accepted: long steps happen
        gen = m.generate(CHECK_SEQ, max_tokens=48)
    with open_model(base, head, n_draft=n_draft) as m:
        out = m.generate(CHECK_SEQ, max_tokens=48)
    assert out.tokens == ref
    s = gen.stats.to_dict()
    assert s["parallel"] == K and "parallel=3" in gen.stats.summary_line()
    assert s["n_drafted"] > s["n_draft_decodes"] > 0        # several drafts per MTP decode
    assert max(len(s["drafted_per_position"]), 0) <= K


def test_parallel_head_logprobs_equal_mtp_offs(parallel_head):
    """Every response field equals MTP off's with a parallel head too: a token's logprob and its top
    alternatives come from the target's verify rows, whichever pass drafted the token."""

    base, head, _ = parallel_head
    accepted = 0
    with pymtp.Model(base, mtp="off", n_ctx=256, n_threads=1) as off, open_model(base, head, n_draft=K) as on:
        for start in (0, 3, 7):
            prompt = CHECK_SEQ[start:]
            ref = off.generate(prompt, max_tokens=32, logprobs=3)
            got = on.generate(prompt, max_tokens=32, logprobs=3)
            assert got.tokens == ref.tokens
            assert_same_logprobs(got.logprobs, ref.logprobs, f"prompt from {start}")
            accepted += got.stats.n_accepted
    assert accepted > 0  # drafted tokens, from the pass's rows, were among those reported


def test_the_pass_drafts_alike_on_the_backend_and_on_the_host(parallel_head, monkeypatch):
    """Greedy drafts of a parallel pass are the argmax of each row, taken where the logits are on a GPU
    (here forced on the CPU backend): pymtp makes its MTP context with room for K outputs per sequence.
    A context made with llama.cpp's default of one (another binding's) cannot sample K rows of one
    sequence there, and the engine takes the argmax on the host instead: the same drafts, the same
    output, no failed decode."""
    from pymtp.engine import runtime

    base, head, _ = parallel_head
    monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", "1")
    with open_model(base, head, n_draft=K) as m:
        backend = m.generate(CHECK_SEQ, max_tokens=48)
    monkeypatch.setattr(runtime, "mtp_outputs_per_seq", lambda lib, model: 1)
    with open_model(base, head, n_draft=K) as m:
        host = m.generate(CHECK_SEQ, max_tokens=48)
    assert backend.tokens == host.tokens
    assert backend.stats.n_accepted == host.stats.n_accepted > 0
    assert backend.stats.n_drafted == host.stats.n_drafted


def test_parallel_head_caches_equal_a_fresh_replay(parallel_head):
    """After random accept/reject patterns the MTP KV holds what a fresh prefill of the accepted
    tokens writes: the next draft (tokens and logits) equals a fresh engine's."""

    base, head, _ = parallel_head
    with open_model(base, head, n_draft=K) as m:
        m.set_synthetic_acceptance([0.8, 0.5, 0.3])
        gen = m.generate(CHECK_SEQ, max_tokens=37)
        held = CHECK_SEQ + (gen.tokens if gen.finish_reason == "eos" else gen.tokens[:-1])
        assert gen.stats.n_accepted > 0 and gen.stats.n_drafted > gen.stats.n_accepted
        toks, logits = m.rt.peek_draft(K, id_last=CHECK_SEQ[0])
    ftoks, flogits = fresh_peek(open_model(base, head, n_draft=K), held + [CHECK_SEQ[0]], K)
    assert toks == ftoks
    assert float(np.abs(np.asarray(logits) - np.asarray(flogits)).max()) < 0.02


def test_parallel_stochastic_drafting_is_exact(parallel_head):
    """Rejection sampling with q_i from entry i's logits keeps the target's law: the joint law of
    the first 3 tokens equals plain sampling (chi-square) while drafts are accepted."""

    base, head, _ = parallel_head
    n = 4000
    with pymtp.Model(base, mtp="off", n_ctx=128, n_threads=1) as m:
        plain, _ = joint_first_tokens(m, n, 0)
    with pymtp.Model(base, mtp="on", mtp_head=head, n_draft=2, n_ctx=128, n_threads=1) as m:
        drafted, accepted = joint_first_tokens(m, n, 10**6, draft="stochastic")
    assert accepted > 50
    assert homogeneity_p(plain, drafted) > 1e-3


@pytest.mark.gpu
def test_llama_server_drafts_with_the_parallel_head(parallel_head, tmp_path):
    """llama-server --mtp takes the parallel head as any head: its steps draft several tokens from one
    MTP decode, and the response's timings say parallel = K."""
    from server_harness import Server

    base, head, _ = parallel_head
    req = {"prompt": "Hello there", "n_predict": 24, "temperature": 0}
    texts = {}
    for mtp in ("on", "off"):
        server = Server(base, tmp_path / f"server-{mtp}.log", mtp=mtp, mtp_head=head if mtp == "on" else None)
        try:
            status, body = server.post("/completion", req)
            assert status == 200, body
            texts[mtp] = body["content"]
            if mtp == "on":
                t = body["timings"]["mtp"]
                assert t["parallel"] == K and t["drafted"] > 0, t
        finally:
            server.stop()
    assert texts["on"] == texts["off"]


def test_pymtp_info_says_parallel(parallel_head, capsys):
    base, head, _ = parallel_head
    assert main(["info", str(base), "--mtp-head", str(head)]) == 0
    out = capsys.readouterr().out
    assert f"drafts up to {K} tokens in one MTP decode" in out


@pytest.mark.parametrize("extra,message", [(["--parallel", "1"], "--parallel must be in 2..8"),
                                           (["--parallel", "3", "--step-decay", "0"], "--step-decay must be in"),
                                           (["--parallel", "3", "--step-decay", "1.5"], "--step-decay must be in"),
                                           (["--parallel", "3", "--step-decay", "0.2", "--step-weights", "acceptance"],
                                            "does not go with --step-weights acceptance"),
                                           (["--parallel", "3", "--heads", "2"], "neither --heads N nor --chain"),
                                           (["--parallel", "3", "--chain", "2"], "neither --heads N nor --chain")])
def test_parallel_bad_arguments(parallel_head, tmp_path, capsys, extra, message):
    rc = main(["graft", str(parallel_head[0]), "-o", str(tmp_path / "h.gguf"), *extra])
    assert rc != 0
    assert message in capsys.readouterr().err


def test_a_parallel_head_from_a_trained_sequential_one(tmp_path):
    """--init-head: a parallel head started from a trained sequential head keeps that head's block (at a
    vanishing learning rate the written block is the original's) with new mask rows, drafts that head's
    first token, and says where it started; a trimmed q8_0 copy starts the same block."""
    base, seq, _ = graft_tiny(tmp_path, "seq")
    args = [a if a != "3e-3" else "1e-12" for a in GRAFT_ARGS]
    par = tmp_path / "par.gguf"
    assert main(["graft", str(base), "-o", str(par), "--parallel", str(K), "--init-head", str(seq), "--step-decay",
                 "0.2", "--data-cache", str(tmp_path / "cache"), "--corpus", str(tmp_path / "corpus.txt"), *args]) == 0
    r_seq, r_par = gguf.GGUFReader(str(seq)), gguf.GGUFReader(str(par))
    seq_t = {t.name: np.array(t.data) for t in r_seq.tensors}
    par_t = {t.name: np.array(t.data) for t in r_par.tensors}
    mask = f"blk.{N_LAYER}.nextn.hnorm.mask"
    assert set(par_t) == set(seq_t) | {mask}
    for name, w in seq_t.items():
        assert np.allclose(par_t[name].astype(np.float32), w.astype(np.float32), atol=2e-3), name
    assert r_par.get_field("pymtp.graft.parallel").contents() == K
    assert r_par.get_field("pymtp.graft.init_head").contents() == "seq.gguf"
    assert r_par.get_field("pymtp.graft.step_decay").contents() == pytest.approx(0.2)
    assert r_seq.get_field("pymtp.graft.step_decay") is None     # the default (0.5) is not written
    # the pass's first entry is the sequential head's own draft: the same first draft token
    m_seq = open_model(base, seq, n_draft=1)
    m_par = open_model(base, par, n_draft=K)

    assert fresh_peek(m_seq, CHECK_SEQ, 1)[0][0] == fresh_peek(m_par, CHECK_SEQ, K)[0][0]

    # a trimmed (and q8_0) copy starts the same block: the draft vocabulary is dropped, the matrices dequantized
    from pymtp.graft import trim
    from pymtp.graft.tokenizer import Tokenizer

    with Tokenizer(base) as tok:
        counts = np.bincount(np.asarray(tok.tokenize(CORPUS, add_special=False)), minlength=tok.n_vocab)
    keep = trim.choose(counts, 40)
    small = trim.trim_head(seq, base, keep, tmp_path / "seq-trimmed.gguf", head_type="q8_0")
    par2 = tmp_path / "par2.gguf"
    assert main(["graft", str(base), "-o", str(par2), "--parallel", str(K), "--init-head", str(small),
                 "--data-cache", str(tmp_path / "cache"), "--corpus", str(tmp_path / "corpus.txt"), *args]) == 0
    par2_t = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(par2)).tensors}
    assert set(par2_t) == set(par_t)
    for name, w in seq_t.items():
        assert np.allclose(par2_t[name].astype(np.float32), w.astype(np.float32), atol=3e-2), name


@pytest.mark.parametrize("extra,message", [
    (["--parallel", "2"], "a parallel head of K = 3: pass --parallel 3 (got 2)"),
    ([], "a parallel head of K = 3: pass --parallel 3"),
    (["--heads", "2"], "--init-head continues one head: it takes no --heads N"),
])
def test_init_head_refuses_what_it_cannot_continue(parallel_head, tmp_path, capsys, extra, message):
    base, head, _ = parallel_head
    rc = main(["graft", str(base), "-o", str(tmp_path / "h.gguf"), "--init-head", str(head), *extra,
               "--corpus", str(head.parent / "corpus.txt"), "--data-cache", str(head.parent / "cache"), *GRAFT_ARGS])
    assert rc != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "h.gguf").exists()


def test_init_head_of_another_base_is_refused(parallel_head, tmp_path, capsys):
    _, head, _ = parallel_head
    other = write_tiny(tmp_path / "other.gguf", "llama", seed=7)
    rc = main(["graft", str(other), "-o", str(tmp_path / "h.gguf"), "--init-head", str(head), "--parallel",
               str(K), "--corpus", str(head.parent / "corpus.txt"), *GRAFT_ARGS])
    assert rc != 0
    assert "trained for another base" in capsys.readouterr().err


def test_a_second_block_for_the_mask_rows(parallel_head, tmp_path):
    """bench/parallel_depth.py (a torch-only experiment): the second block starts as the identity (the
    pass gives the one-block head's outputs), a run trains it with graft's pipeline, and the report
    holds its entries next to those of a trained head measured on the same validation set."""
    import json
    import sys
    from pathlib import Path

    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import MTPHead, rope_tables

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import parallel_depth

    base, head_path, _ = parallel_head
    hp = load_base(base, with_sha=False).hparams
    head = MTPHead.from_gguf(hp, head_path)
    T = 7
    cos, sin = rope_tables(torch.arange(T + K), hp.n_rot, hp.rope_base, hp.rope_freq_scale, None)
    g = torch.Generator().manual_seed(0)
    emb, h_prev = torch.randn(2, T, D, generator=g), torch.randn(2, T, D, generator=g)
    with torch.no_grad():
        one = head.parallel_forward(emb, h_prev, cos, sin)
        two = parallel_depth.deepen(head, 2).parallel_forward(emb, h_prev, cos, sin)
    assert len(one) == len(two) == K
    for a, b in zip(one, two):
        assert torch.equal(a, b)

    corpus = tmp_path / "corpus.txt"
    corpus.write_text(CORPUS)
    out, report = tmp_path / "deep.pt", tmp_path / "deep.json"
    assert parallel_depth.main([str(base), "-o", str(out), "--report", str(report), "--parallel", str(K),
                                "--depth", "2", "--eval-head", f"par={head_path}", "--corpus", str(corpus),
                                "--data-cache", str(tmp_path / "cache"), *GRAFT_ARGS]) == 0
    r = json.loads(report.read_text())
    assert set(r["heads"]) == {"depth2", "par"}
    for v in r["heads"].values():
        assert len(v["per_step"]) == K
        assert v["per_step"][0]["n"] == r["heads"]["par"]["per_step"][0]["n"] > 0   # the same positions
    val = r["history"]["val"]
    assert val[-1]["per_step"][0]["kl"] < val[0]["per_step"][0]["kl"]
    state = torch.load(out, weights_only=True)
    assert float(state["extra_blocks.0.attn_output__weight"].abs().max()) > 0   # the second block trained
    assert not list(tmp_path.glob("deep.unused.gguf*"))   # neither a head file nor graft's checkpoint is left
