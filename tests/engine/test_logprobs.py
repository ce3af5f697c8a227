"""generate(..., logprobs=N): each token's log-probability and its top N, the same with MTP on and off.

The numbers come from the target's own rows of each verify batch, so drafted tokens get exactly
what a plain decode of the same prefix gives; at T > 0 (rejection sampling, other tokens) each
reported distribution is still the target's at that position.
"""

from __future__ import annotations

import json
import math

import pytest

import pymtp
from helpers import assert_same_logprobs

pytestmark = pytest.mark.gpu

PROMPTS = ["The quick brown fox", "1, 2, 3, 4,", "def fibonacci(n):", "Once upon a time"]


def test_logprobs_identical_with_and_without_mtp(model_pair):
    on, off = model_pair
    accepted = 0
    for prompt in PROMPTS:
        ref = off.generate(prompt, max_tokens=24, logprobs=3)
        assert len(ref.logprobs) == len(ref.tokens) and all(len(t.top) == 3 for t in ref.logprobs)
        for k in (2, 5):
            got = on.generate(prompt, max_tokens=24, n_draft=k, logprobs=3)
            assert got.tokens == ref.tokens
            assert_same_logprobs(got.logprobs, ref.logprobs, f"{prompt!r} n_draft={k}")
            accepted += got.stats.n_accepted
    assert accepted > 0  # drafted tokens were among those reported


def test_logprobs_are_a_distribution(model_pair):
    _, off = model_pair
    out = off.generate(PROMPTS[0], max_tokens=8, logprobs=5)
    for t in out.logprobs:
        lps = [lp for _, _, lp in t.top]
        assert lps == sorted(lps, reverse=True) and all(lp <= 0.0 for lp in lps)
        assert sum(math.exp(lp) for lp in lps) <= 1.0 + 1e-5
        assert t.logprob <= lps[0]
        assert t.text == off.detokenize([t.token])
    # greedy: the emitted token is the most likely one
    assert all(t.token == t.top[0][0] for t in out.logprobs)


def test_logprobs_at_temperature_are_the_targets(model_pair):
    """Stochastic drafting with rejection sampling at T > 0: every reported distribution equals
    the one a plain decode of the same prefix reports."""
    on, off = model_pair
    prompt = on.tokenize(PROMPTS[3])
    got = on.generate(prompt, max_tokens=20, temperature=0.9, seed=11, n_draft=3, draft="stochastic",
                      logprobs=4)
    assert got.stats.n_accepted > 0
    for j in (0, 1, 4, 9, len(got.tokens) - 1):
        ref = off.generate(prompt + got.tokens[:j], max_tokens=1, logprobs=4)
        assert_same_logprobs([got.logprobs[j]], [_with_token(ref.logprobs[0], got.logprobs[j])], f"position {j}")


def _with_token(ref, like):
    """ref's distribution, reported for the token `like` drew (its logprob from ref's top when listed)."""
    lp = next((p for t, _, p in ref.top if t == like.token), like.logprob)
    return pymtp.TokenLogprob(token=like.token, text=like.text, logprob=lp, top=ref.top)


def test_streaming_reports_logprobs_as_it_goes(model_pair):
    on, _ = model_pair
    stream = on.generate(PROMPTS[1], max_tokens=24, n_draft=3, logprobs=2, stream=True)
    seen = []
    for _ in stream:
        seen.append(len(stream.logprobs))
    assert seen == sorted(seen) and seen[-1] == len(stream.result.tokens)
    full = on.generate(PROMPTS[1], max_tokens=24, n_draft=3, logprobs=2)
    assert_same_logprobs(stream.result.logprobs, full.logprobs, "stream vs not")


def test_stop_string_and_no_logprobs(model_pair):
    on, off = model_pair
    ref = off.generate(PROMPTS[2], max_tokens=24)
    stop = ref.text[len(ref.text) // 2:][:2]
    a = on.generate(PROMPTS[2], max_tokens=24, n_draft=5, stop=[stop], logprobs=1)
    b = off.generate(PROMPTS[2], max_tokens=24, stop=[stop], logprobs=1)
    assert a.finish_reason == b.finish_reason == "stop"
    assert_same_logprobs(a.logprobs, b.logprobs, "with a stop string")
    assert len(a.logprobs) == len(a.tokens)
    assert off.generate(PROMPTS[2], max_tokens=4).logprobs is None  # not asked: not computed
    assert "logprobs" in json.loads(json.dumps(a.to_dict()))


@pytest.mark.parametrize("bad", [-1, 101, "3", 2.5, True])
def test_bad_logprobs_is_a_clear_error(model_pair, bad):
    _, off = model_pair
    with pytest.raises(pymtp.InvalidArgumentError, match="logprobs must be an integer"):
        off.generate(PROMPTS[0], max_tokens=4, logprobs=bad)
    assert off.generate(PROMPTS[0], max_tokens=4).tokens  # the model still works


def test_cli_generate_json_with_logprobs(tiny_model_path, capsys):
    from pymtp.cli.main import main

    path = str(tiny_model_path("glm4moe"))
    args = ["generate", path, "-p", "1, 2, 3, 4,", "-n", "12", "--ctx", "256", "--threads", "1", "--json"]
    outs = []
    # a fixed draft length: 12 tokens are too few for the adaptive controller to start drafting (its first
    # 8 target decodes are untimed), and what is tested here is the logprobs of drafted tokens
    for mtp in (["on", "--n-draft", "3"], ["off"]):
        assert main([*args, "--mtp", *mtp, "--logprobs", "2"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    on, off = outs
    assert on["stats"]["n_accepted"] > 0
    assert len(on["logprobs"]) == len(on["tokens"]) == 12
    assert [t["top"] for t in on["logprobs"]] == [t["top"] for t in off["logprobs"]]
    assert set(on["logprobs"][0]) == {"token", "text", "logprob", "top"} and len(on["logprobs"][0]["top"]) == 2
    assert main(args[:-1] + ["--logprobs", "2"]) == 1  # without --json: a clear error
    assert "--logprobs goes with --json" in capsys.readouterr().err
