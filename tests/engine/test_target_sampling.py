"""The target's rows sampled where the target decodes (llama_mtp_set_target_sampling).

On a GPU the engine's own loop has a backend sampler on the target context take each row's argmax (a
greedy request) or its 128 highest logits (a chain that begins with a top-k of at most 128; the chain goes
on from them on the host), so a token or 128 candidates come back instead of a row of logits. The tokens,
and at T > 0 their distribution, must be the host's. PYMTP_VERIFY_ON_BACKEND=1 takes that path on this CPU;
without it the CPU keeps the host's (the reference here).
"""

from __future__ import annotations

import pytest

HOST, ARGMAX, TOP_K = 0, 1, 2
PROMPTS = ("The quick brown fox", "def fibonacci(n):", "1, 2, 3, 4,")


def _runs(path, monkeypatch, backend: bool, *, mtp: str = "on", logprobs=None, **kw):
    """(tokens per prompt and seed, logprobs, the engine's target sampling) of one Model."""
    import pymtp

    if backend:
        monkeypatch.setenv("PYMTP_VERIFY_ON_BACKEND", "1")   # read when the engine is made
    else:
        monkeypatch.delenv("PYMTP_VERIFY_ON_BACKEND", raising=False)
    extra = dict(n_draft=3) if mtp == "on" else {}
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp=mtp, **extra) as m:
        outs = [m.generate(p, max_tokens=24, seed=s, logprobs=logprobs, **kw) for p in PROMPTS for s in range(2)]
        kind = m.rt.lib.llama_mtp_target_sampling(m.rt.engine)
    lps = [[(t.token, t.logprob, t.top) for t in o.logprobs] for o in outs] if logprobs is not None else None
    return [o.tokens for o in outs], lps, kind


# (sampling, what the backend takes): greedy; the default chain at T > 0 (top-k 40 first); exact-match and
# rejection-sampling verification of it
CASES = [
    (dict(temperature=0.0), ARGMAX),
    (dict(temperature=0.8, top_k=40, top_p=0.95, draft="chain"), TOP_K),
    (dict(temperature=0.8, top_k=40, top_p=0.95, draft="stochastic"), TOP_K),
    (dict(temperature=1.0, top_k=128, top_p=1.0, min_p=0.0, draft="stochastic"), TOP_K),
]


@pytest.mark.parametrize("arch", ["glm4moe", "qwen35"])
@pytest.mark.parametrize("mtp", ["on", "off"])
@pytest.mark.parametrize("kw,kind", CASES, ids=["greedy", "top-k-chain", "top-k-stochastic", "top-k-128"])
def test_backend_rows_give_the_hosts_tokens(tiny_model_path, monkeypatch, arch, mtp, kw, kind):
    """Same seeds, same tokens: the backend's argmax / candidates leave the request's chain the same choice."""
    path = tiny_model_path(arch)
    host, _, host_kind = _runs(path, monkeypatch, False, mtp=mtp, **kw)
    backend, _, backend_kind = _runs(path, monkeypatch, True, mtp=mtp, **kw)
    assert (host_kind, backend_kind) == (HOST, kind)
    assert backend == host


@pytest.mark.parametrize("kw", [
    dict(temperature=0.8, top_k=0, top_p=0.95),               # no top-k: the chain needs the whole row
    dict(temperature=0.8, top_k=129),                          # a top-k that keeps more than 128
    dict(temperature=0.8, top_k=40, repeat_penalty=1.3),      # penalties before the top-k
    dict(temperature=0.0, repeat_penalty=1.3),                 # a greedy pick after penalties
], ids=["no-top-k", "top-k-129", "penalty-top-k", "penalty-greedy"])
def test_chains_that_need_the_row_keep_the_host(tiny_model_path, monkeypatch, kw):
    path = tiny_model_path("glm4moe")
    host, _, _ = _runs(path, monkeypatch, False, **kw)
    backend, _, kind = _runs(path, monkeypatch, True, **kw)
    assert kind == HOST
    assert backend == host


def test_logprobs_keep_the_rows(tiny_model_path, monkeypatch):
    """Token probabilities read whole rows: asked for, the rows come to the host and every value equals the
    host's; the next request without them samples on the backend again."""
    import pymtp

    path = tiny_model_path("glm4moe")
    host_tokens, host_lps, _ = _runs(path, monkeypatch, False, logprobs=3)
    tokens, lps, kind = _runs(path, monkeypatch, True, logprobs=3)
    assert kind == HOST
    assert (tokens, lps) == (host_tokens, host_lps)
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="on", n_draft=3) as m:
        m.generate(PROMPTS[0], max_tokens=8, logprobs=2)
        assert m.rt.lib.llama_mtp_target_sampling(m.rt.engine) == HOST
        ref = m.generate(PROMPTS[0], max_tokens=8)
        assert m.rt.lib.llama_mtp_target_sampling(m.rt.engine) == ARGMAX
        assert [t.token for t in m.generate(PROMPTS[0], max_tokens=8, logprobs=2).logprobs] == ref.tokens

