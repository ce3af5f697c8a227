"""Multi-head MTP (issue 5): head policies, exact per-head caches, losslessness.

Models with several MTP layers draft step i with head i mod n ("per_layer"), head 0 at every step
("first") or head i with at most n drafts ("capped", upstream's choice). Every head's KV must hold
what a from-scratch pass over the accepted sequence would hold: we check it through the next
draft's MTP logits, which read every head's whole cache (step j runs head j), against a fresh
engine that prefills the accepted sequence, after generations with random accept/reject patterns
(synthetic acceptance) and after a prefix-reusing prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu import NGL
from helpers import N_SAMPLES, PROMPT_TOKENS, chain_kw, fresh_peek, held_tokens, homogeneity_p, sample_joint

pytestmark = pytest.mark.gpu

MULTI_ARCHS = ("step35", "glm4moe", "qwen35")   # step35: upstream's multi-head arch; the others: lifted limit
POLICIES = ("per_layer", "first", "capped")
N_HEADS = 3
RATES = [0.8, 0.6, 0.45, 0.3, 0.2]               # synthetic: a varied accept/reject pattern every step
# Logits of an incremental engine and a fresh replay differ by float rounding only (the target
# decodes the same tokens in other batch shapes: <= 0.01 seen); a wrong head cache moves them far more.
TOL = 0.02


def open_model(path, **kw):
    import pymtp

    kw.setdefault("n_ctx", 512)
    kw.setdefault("n_batch", 64)
    return pymtp.Model(path, n_threads=1, n_gpu_layers=NGL, **kw)


@pytest.fixture(scope="module", params=MULTI_ARCHS)
def multi_path(request, tiny_model_path):
    return tiny_model_path(request.param, n_nextn=N_HEADS)


def replay_peek(path, seq, heads, n_draft, k):
    """A fresh engine on ``path`` that replays seq (see fresh_peek)."""
    return fresh_peek(open_model(path, n_draft=n_draft, heads=heads), seq, k)


def max_diff(a, b) -> float:
    return float(np.abs(np.asarray(a) - np.asarray(b)).max())


def test_all_heads_in_use(multi_path):
    for heads, n in (("per_layer", N_HEADS), ("capped", N_HEADS), ("first", 1)):
        m = open_model(multi_path, n_draft=5, heads=heads)
        try:
            assert m.n_mtp_layers == N_HEADS
            assert m.n_heads == n, heads
            assert heads in m.mtp_reason or heads == "first"
        finally:
            m.close()


@pytest.mark.parametrize("heads", POLICIES)
@pytest.mark.parametrize("n_draft", [2, 5])
def test_lossless_at_temperature_zero(multi_path, heads, n_draft):
    off = open_model(multi_path, mtp="off")
    ref = off.generate(PROMPT_TOKENS, max_tokens=64, temperature=0).tokens
    off.close()
    m = open_model(multi_path, n_draft=n_draft, heads=heads)
    out = m.generate(PROMPT_TOKENS, max_tokens=64, temperature=0)
    m.close()
    assert out.tokens == ref
    assert out.stats.n_accepted > 0  # planted heads: the drafts were really used
    drafted = out.stats.drafted_per_position
    if heads == "capped":
        assert len(drafted) <= N_HEADS
    else:
        assert len(drafted) == n_draft


@pytest.mark.parametrize("heads", POLICIES)
def test_head_caches_equal_a_fresh_replay(multi_path, heads):
    """After steps with random accept/reject patterns, every head's cache is the teacher-forced one."""
    m = open_model(multi_path, n_draft=5, heads=heads)
    try:
        m.set_synthetic_acceptance(RATES)
        out = m.generate(PROMPT_TOKENS, max_tokens=47, temperature=0)
        acc = out.stats.accepted_per_position
        assert 0 < sum(acc) < sum(out.stats.drafted_per_position)  # some accepted, some rejected
        seq = held_tokens(out) + [PROMPT_TOKENS[0]]
        toks, logits = m.rt.peek_draft(5, id_last=seq[-1])
        # peeking leaves the state alone: the same answer twice
        toks2, logits2 = m.rt.peek_draft(5, id_last=seq[-1])
    finally:
        m.close()
    assert toks == toks2 and max_diff(logits, logits2) == 0.0
    ftoks, flogits = replay_peek(multi_path, seq, heads, 5, 5)
    assert toks == ftoks
    assert len(logits) == (N_HEADS if heads == "capped" else 5)
    assert max_diff(logits, flogits) < TOL

    # the comparison has the power to see a wrong cache: the last context token changed moves the
    # logits by > 5 (a catch-up that feeds heads >= 1 wrong states fails the check above as well)
    seq_bad = list(seq)
    seq_bad[-2] = (seq_bad[-2] + 1) % 1000
    _, blogits = replay_peek(multi_path, seq_bad, heads, 5, 5)
    assert max_diff(logits, blogits) > 5 * TOL


def test_head_caches_exact_after_a_prefix_reusing_prefill(multi_path):
    """A second prompt sharing a prefix rewinds all heads; their caches stay exact."""
    m = open_model(multi_path, n_draft=5, heads="per_layer")
    try:
        m.set_synthetic_acceptance(RATES)
        first = m.generate(PROMPT_TOKENS, max_tokens=30, temperature=0)
        # keep all but the last 6 generated tokens, then new ones: the engine reuses the prefix
        prompt2 = PROMPT_TOKENS + first.tokens[:-6] + [77, 78, 79]
        second = m.generate(prompt2, max_tokens=20, temperature=0)
        if m.rt.recurrent:
            assert second.stats.n_reused == 0  # qwen35: a recurrent target starts over (no rollback)
        else:
            assert second.stats.n_reused > len(PROMPT_TOKENS)
        seq = prompt2 + (second.tokens if second.finish_reason == "eos" else second.tokens[:-1]) + [PROMPT_TOKENS[0]]
        toks, logits = m.rt.peek_draft(5, id_last=seq[-1])
    finally:
        m.close()
    ftoks, flogits = replay_peek(multi_path, seq, "per_layer", 5, 5)
    assert toks == ftoks
    assert max_diff(logits, flogits) < TOL


def test_heads_argument_is_checked(multi_path):
    from pymtp.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="heads must be one of"):
        open_model(multi_path, heads="all")


@pytest.fixture(scope="module")
def multi_exact_pair(tiny_model_path):
    path = tiny_model_path("step35", n_nextn=N_HEADS)
    on = open_model(path, n_ctx=256, n_batch=32, mtp="on", n_draft=3, heads="per_layer")
    off = open_model(path, n_ctx=256, n_batch=32, mtp="off")
    yield on, off
    on.close()
    off.close()


@pytest.mark.slow
def test_stochastic_per_layer_matches_plain_sampling(multi_exact_pair):
    """Rejection sampling with drafts from three different heads keeps the output distribution."""
    on, off = multi_exact_pair
    kw = chain_kw(1.0)
    a = sample_joint(on, N_SAMPLES, 2_000_000, draft="stochastic", **kw)
    b = sample_joint(off, N_SAMPLES, 3_000_000, **kw)
    assert on.n_heads == N_HEADS
    assert homogeneity_p(a, b) > 1e-3
