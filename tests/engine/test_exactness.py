"""Stochastic drafting with rejection sampling is exact in distribution.

The joint distribution of the first generated tokens with MTP 'stochastic' must
match plain sampling without MTP (chi-square test of homogeneity over >= 20k
samples each), at T = 0.7 and 1.0 with top-k, top-p and a repetition penalty.
The same test must reject a deliberately broken verifier that accepts every
draft, so it has the power to catch a real bug.
"""

from __future__ import annotations

from collections import Counter

import pytest

from helpers import N_SAMPLES, PROMPT, chain_kw, homogeneity_p, sample_joint

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def exact_pair(tiny_model_path):
    import pymtp

    path = tiny_model_path("glm4moe")
    on = pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="on", n_draft=3)
    off = pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="off")
    yield on, off
    on.close()
    off.close()


@pytest.fixture(scope="module")
def plain_samples(exact_pair):
    """Plain sampling (MTP off) per temperature, drawn once and shared by the tests."""
    _, off = exact_pair
    cache = {}

    def get(temperature: float) -> Counter:
        if temperature not in cache:
            cache[temperature] = sample_joint(off, N_SAMPLES, 1_000_000, **chain_kw(temperature))
        return cache[temperature]

    return get


@pytest.mark.slow
@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_stochastic_matches_plain_sampling(exact_pair, plain_samples, temperature):
    on, _ = exact_pair
    plain = plain_samples(temperature)
    spec = sample_joint(on, N_SAMPLES, 2_000_000, draft="stochastic", **chain_kw(temperature))
    p = homogeneity_p(plain, spec)
    assert p > 0.01, f"MTP stochastic changed the output distribution (chi-square p = {p:.2e})"


@pytest.mark.slow
def test_broken_verifier_is_detected(exact_pair, plain_samples):
    on, _ = exact_pair
    plain = plain_samples(1.0)
    broken = sample_joint(on, N_SAMPLES, 4_000_000, draft="test-accept-all", **chain_kw(1.0))
    p = homogeneity_p(plain, broken)
    assert p < 1e-6, f"the test did not notice a verifier that accepts every draft (p = {p:.2e})"


def test_stochastic_accepts_drafts(exact_pair):
    on, _ = exact_pair
    out = on.generate(PROMPT, max_tokens=64, temperature=1.0, top_k=8, seed=5, draft="stochastic")
    assert out.stats.draft == "stochastic" and out.stats.n_accepted > 0


def test_seeded_stochastic_is_reproducible(exact_pair):
    on, _ = exact_pair
    kw = dict(max_tokens=48, temperature=0.9, top_k=20, repeat_penalty=1.1, draft="stochastic")
    for seed in range(3):
        assert on.generate(PROMPT, seed=seed, **kw).tokens == on.generate(PROMPT, seed=seed, **kw).tokens


@pytest.mark.parametrize("draft", ["greedy", "chain", "stochastic"])
def test_all_modes_identical_at_temperature_zero(model_pair, draft):
    on, off = model_pair
    for prompt in ("The quick brown fox", "def fibonacci(n):", "1, 2, 3, 4,"):
        for rp in (1.0, 1.3):
            ref = off.generate(prompt, max_tokens=24, repeat_penalty=rp)
            assert on.generate(prompt, max_tokens=24, repeat_penalty=rp, draft=draft).tokens == ref.tokens


@pytest.mark.parametrize("draft", ["greedy", "chain"])
def test_exact_match_modes_identical_when_sampling(model_pair, draft):
    """Exact-match modes consume the sampler exactly as plain decoding: same seed, same tokens."""
    on, off = model_pair
    kw = dict(max_tokens=32, temperature=0.8, top_k=40, top_p=0.95, repeat_penalty=1.1)
    for seed in range(4):
        assert on.generate("Once upon a time", seed=seed, draft=draft, **kw).tokens == \
               off.generate("Once upon a time", seed=seed, **kw).tokens


def test_chain_draft_beats_greedy_under_penalty(tiny_model_path):
    """With a strong repetition penalty the target avoids repeats; a chain-filtered draft follows it."""
    import pymtp

    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_threads=1, mtp="on", n_draft=3) as m:
        kw = dict(max_tokens=128, repeat_penalty=3.0)
        g = m.generate("A B C D E F", draft="greedy", **kw).stats
        c = m.generate("A B C D E F", draft="chain", **kw).stats
        assert c.acceptance_rate >= g.acceptance_rate


# ---- chain/stochastic drafts from candidates the backend chose (mtp-draft.cpp, mtp-top-k): 128 ids and logits
# come back instead of the row where the MTP context decodes on a GPU; PYMTP_DRAFT_ON_BACKEND=1 takes that path
# on this CPU, =0 the host's chain over the whole row.

def _stochastic_runs(path, backend: str, monkeypatch, seeds, **kw):
    import pymtp

    monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", backend)   # read when the engine is made
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="on", n_draft=3) as m:
        outs = [m.generate(PROMPT, seed=s, draft="stochastic", **kw) for s in seeds]
    return [o.tokens for o in outs], sum(o.stats.n_accepted for o in outs)


@pytest.mark.parametrize("penalty", [1.0, 1.3])
def test_backend_candidates_give_the_hosts_q(tiny_model_path, monkeypatch, penalty):
    """Where the request's chain keeps at most its top-k (8 here) of 128 candidates, q is the same distribution as
    the host's chain over the whole row gives: the same seeds draw the same drafts, accept the same ones and emit
    the same tokens."""
    kw = dict(max_tokens=40, temperature=0.9, top_k=8, top_p=0.95, repeat_penalty=penalty)
    path = tiny_model_path("glm4moe")
    host = _stochastic_runs(path, "0", monkeypatch, range(6), **kw)
    backend = _stochastic_runs(path, "1", monkeypatch, range(6), **kw)
    assert backend[1] > 0
    assert backend == host


@pytest.mark.slow
def test_backend_candidates_stay_exact_when_q_is_cut(tiny_model_path, monkeypatch):
    """With no top-k in the chain, q over the 128 candidates is not the host's q over the whole row, and rejection
    sampling is exact for it all the same: the joint law of the first tokens equals plain sampling."""
    import pymtp

    kw = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    path = tiny_model_path("glm4moe")
    n = 10_000
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="off") as off:
        plain = sample_joint(off, n, 1_000_000, **kw)
    monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", "1")
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="on", n_draft=3) as on:
        spec = sample_joint(on, n, 2_000_000, draft="stochastic", **kw)
    p = homogeneity_p(plain, spec)
    assert p > 0.01, f"drafts from the backend's candidates changed the output distribution (chi-square p = {p:.2e})"
    # and that q was cut: the host's whole-row q accepts differently at the same seeds
    seeds = range(200)
    assert _stochastic_runs(path, "1", monkeypatch, seeds, max_tokens=4, **kw)[1] != \
        _stochastic_runs(path, "0", monkeypatch, seeds, max_tokens=4, **kw)[1]
