"""llama-server with --mtp answers exactly what it answers without: every field of every endpoint.

Only what cannot be equal is left out of the comparison: ids, timestamps, timings (speed and the
MTP stats) and the echo of the server's own speculative setting. Token probabilities
(``logprobs``/``top_logprobs``, ``n_probs``, ``post_sampling_probs``) come from the target's rows of
the verify batch; upstream left placeholders there (prob 1, no alternatives) for every drafted token.
"""

from __future__ import annotations

import concurrent.futures as cf
import json

import pytest

from helpers import LOGPROB_TOL as TOL
from server_harness import PROMPTS

pytestmark = pytest.mark.gpu

VOLATILE = {"id", "created", "timings", "system_fingerprint"}


# which slot serves a concurrent request, and so what it has cached, is up to the scheduler
SLOT_DEPENDENT = {"id_slot", "tokens_cached", "cached_tokens"}


def strip(x, also: frozenset = frozenset()):
    """x without the fields that legitimately differ between two runs of one request."""
    if isinstance(x, dict):
        return {k: strip(v, also) for k, v in x.items()
                if k not in VOLATILE and k not in also and k != "speculative.types"}
    if isinstance(x, list):
        return [strip(v, also) for v in x]
    return x


def ranked(entries: list) -> bool:
    """A list of alternatives with probabilities (top_logprobs, probs): on CUDA two of them within
    rounding of each other may swap places."""
    return bool(entries) and all(isinstance(e, dict) and ("logprob" in e or "prob" in e) for e in entries)


def assert_same_ranking(a: list, b: list, where: str, path: str) -> None:
    key = "logprob" if "logprob" in a[0] else "prob"
    assert len(a) == len(b), f"{where}: length differs at {path}"
    by_id = {e.get("id", e.get("token")): e[key] for e in a}
    for i, (x, y) in enumerate(zip(a, b)):
        assert abs(x[key] - y[key]) <= TOL, f"{where}: {path}[{i}]: {x[key]} vs {y[key]}"
        yid = y.get("id", y.get("token"))
        assert x == y or (yid in by_id and abs(by_id[yid] - x[key]) <= 2 * TOL) or i == len(a) - 1, \
            f"{where}: {path}[{i}]: {x} vs {y}"


def assert_same(a, b, where: str, path: str = "") -> None:
    """Equal structure and values; floats within TOL (0 on the CPU)."""
    if TOL > 0 and isinstance(a, list) and isinstance(b, list) and ranked(a) and ranked(b):
        return assert_same_ranking(a, b, where, path)
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys(), f"{where}: keys differ at {path or '/'}: {sorted(a.keys() ^ b.keys())}"
        for k in a:
            assert_same(a[k], b[k], where, f"{path}.{k}")
    elif isinstance(a, list) and isinstance(b, list):
        assert len(a) == len(b), f"{where}: length differs at {path}: {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, where, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float) and TOL > 0:
        assert abs(a - b) <= TOL, f"{where}: {path}: {a} vs {b}"
    else:
        assert a == b, f"{where}: {path}: {a!r} (MTP on) vs {b!r} (MTP off)"


def request(server, path: str, body: dict) -> object:
    """The JSON answer, or for stream=True the list of its server-sent events."""
    if body.get("stream"):
        return server.events(path, body)
    code, r = server.post(path, body)
    assert code == 200, r
    return r


def cases(prompt: str) -> list[tuple[str, dict]]:
    """(endpoint, body) pairs covering probabilities, stops, finish reasons and usage."""
    chat = [{"role": "user", "content": prompt}]
    out = [
        ("/v1/completions", dict(prompt=prompt, max_tokens=20, temperature=0, logprobs=3)),
        ("/v1/completions", dict(prompt=prompt, max_tokens=20, temperature=0, logprobs=2, echo=False,
                                 stop=["e", "\n"])),
        ("/v1/chat/completions", dict(messages=chat, max_tokens=20, temperature=0, logprobs=True, top_logprobs=3)),
        ("/completion", dict(prompt=prompt, n_predict=20, temperature=0, n_probs=4, return_tokens=True)),
        ("/completion", dict(prompt=prompt, n_predict=20, temperature=0, n_probs=4, post_sampling_probs=True)),
        ("/completion", dict(prompt=prompt, n_predict=20, top_k=1, n_probs=2, post_sampling_probs=True,
                             repeat_penalty=1.3, stop=["a"])),
        # no probabilities asked: on a GPU the verify rows are sampled there (patch 0025)
        ("/completion", dict(prompt=prompt, n_predict=20, temperature=0)),
        ("/v1/chat/completions", dict(messages=chat, max_tokens=20, temperature=0)),
    ]
    streamed = []
    for path, body in out:
        s = dict(body, stream=True)
        if path.startswith("/v1/"):
            s["stream_options"] = {"include_usage": True}
        streamed.append((path, s))
    return out + streamed


def mtp_accepted(server, prompt: str) -> int:
    r = request(server, "/completion", dict(prompt=prompt, n_predict=20, temperature=0))
    return r["timings"]["mtp"]["accepted"]


@pytest.mark.parametrize("arch", ["glm4moe", "qwen35", "llama+head"])
def test_every_response_field_equals_mtp_off(servers, arch):
    on, off = servers(arch, "on"), servers(arch, "off")
    assert on.mtp and not off.mtp
    n_probs_seen = 0
    for prompt in PROMPTS[:3]:
        for path, body in cases(prompt):
            a, b = request(on, path, body), request(off, path, body)
            assert_same(strip(a), strip(b), f"{arch} {path} {body}")
            n_probs_seen += json.dumps(a).count("logprob")
    assert n_probs_seen > 100
    # the drafted tokens were really there (their rows are what this test is about)
    assert sum(mtp_accepted(on, p) for p in PROMPTS[:3]) > 0


def test_greedy_verify_rows_sampled_by_the_backend(servers, monkeypatch):
    """Patches 0025 and 0027: a greedy request without probabilities has its verify rows sampled by
    the target context's backend sampler (the default on a GPU; forced on any backend by
    PYMTP_VERIFY_ON_BACKEND=1): a greedy argmax where the request's chain picks the top logit, the
    chain itself where it does not (a logit bias). Every field equals MTP off's; a request with
    probabilities still has its rows sampled on the CPU."""
    monkeypatch.setenv("PYMTP_VERIFY_ON_BACKEND", "1")
    on = servers("qwen35", "on", ctx=1024)  # a server of its own, started with the variable set
    off = servers("qwen35", "off", ctx=1024)
    for prompt in PROMPTS[:3]:
        chat = [{"role": "user", "content": prompt}]
        for path, body in [("/completion", dict(prompt=prompt, n_predict=24, temperature=0)),
                           ("/completion", dict(prompt=prompt, n_predict=24, temperature=0, stream=True)),
                           ("/v1/chat/completions", dict(messages=chat, max_tokens=24, temperature=0))]:
            a, b = request(on, path, body), request(off, path, body)
            assert_same(strip(a), strip(b), f"backend verify {path} {body}")
    # the default chain at T=0 picks the top logit: a greedy argmax samples the rows
    r = request(on, "/completion", dict(prompt=PROMPTS[0], n_predict=24, temperature=0))
    assert r["timings"]["mtp"]["verify_sampling"] == "backend argmax" and r["timings"]["mtp"]["accepted"] > 0
    # a logit bias that bans the top token moves the top: the request's whole chain samples them there
    first = request(off, "/completion", dict(prompt=PROMPTS[1], n_predict=2, temperature=0, return_tokens=True))
    body = dict(prompt=PROMPTS[1], n_predict=24, temperature=0, logit_bias=[[first["tokens"][0], -100.0]])
    a, b = request(on, "/completion", body), request(off, "/completion", body)
    assert_same(strip(a), strip(b), "backend verify with a logit bias")
    assert a["timings"]["mtp"]["verify_sampling"] == "backend" and a["timings"]["mtp"]["accepted"] > 0
    r = request(on, "/completion", dict(prompt=PROMPTS[0], n_predict=24, temperature=0, n_probs=2))
    assert r["timings"]["mtp"]["verify_sampling"] == "cpu"


def test_drafted_tokens_have_real_logprobs(servers):
    """The upstream fault itself: with MTP, tokens after a step's first had logprob 0 and no alternatives."""
    on = servers("glm4moe", "on")
    r = request(on, "/v1/completions", dict(prompt=PROMPTS[0], max_tokens=24, temperature=0, logprobs=3))
    content = r["choices"][0]["logprobs"]["content"]
    assert r["timings"]["mtp"]["accepted"] > 0 and len(content) == 24
    assert all(len(t["top_logprobs"]) == 3 for t in content), "a token without alternatives"
    assert all(t["top_logprobs"][0]["logprob"] >= t["logprob"] for t in content)
    # a planted head drafts what the target would say anyway, but not with certainty everywhere
    assert sum(t["logprob"] < 0.0 for t in content[1:]) > 5


def test_parity_with_four_busy_slots(servers):
    """Concurrent requests in 4 slots: each answer (probabilities included) equals its MTP-off answer
    (but for which slot served it and what that slot had cached)."""
    on, off = servers("glm4moe", "on", parallel=4), servers("glm4moe", "off", parallel=4)
    bodies = [dict(prompt=p, max_tokens=20 + 4 * i, temperature=0, logprobs=3)
              for i, p in enumerate(PROMPTS * 3)]
    with cf.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: request(on, "/v1/completions", b), bodies))
    for body, a in zip(bodies, got):
        b = request(off, "/v1/completions", body)
        assert_same(strip(a, SLOT_DEPENDENT), strip(b, SLOT_DEPENDENT), f"4 slots {body}")


def test_probabilities_at_temperature_are_the_targets(servers):
    """At T > 0 (rejection sampling) each reported distribution is the target's at that position:
    the same as a plain server reports for the same prefix."""
    on, off = servers("glm4moe", "on"), servers("glm4moe", "off")
    prompt = request(off, "/tokenize", dict(content=PROMPTS[3], add_special=True))["tokens"]
    r = request(on, "/completion", dict(prompt=prompt, n_predict=24, temperature=0.9, seed=7, n_probs=5,
                                        return_tokens=True, mtp_draft="stochastic"))
    assert r["timings"]["mtp"]["accepted"] > 0
    toks, probs = r["tokens"], r["completion_probabilities"]
    assert len(toks) == len(probs) == 24
    for j in (0, 1, 5, 11, 17, 23):
        ref = request(off, "/completion", dict(prompt=prompt + toks[:j], n_predict=1, temperature=0, n_probs=5))
        assert_same(probs[j]["top_logprobs"], ref["completion_probabilities"][0]["top_logprobs"],
                    f"position {j}")
