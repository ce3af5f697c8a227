"""MTP must never change what the model generates.

Greedy output is token-identical with MTP on and off (every arch, many
prompts, several draft lengths), including prompts longer than n_batch and
generations that run into the end of the context; continuing a conversation
after an MTP generation gives what it gives without MTP.
"""

from __future__ import annotations

import pytest

import pymtp
from gpu import NGL
from helpers import MAX_TOKENS, PROMPTS

pytestmark = pytest.mark.gpu

N_DRAFTS = (1, 2, 3, 5)


def test_greedy_identical_on_off(model_pair):
    on, off = model_pair
    assert on.mtp_enabled and not off.mtp_enabled
    total_accepted = 0
    for prompt in PROMPTS:
        ref = off.generate(prompt, max_tokens=MAX_TOKENS)
        for k in N_DRAFTS:
            got = on.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k)
            assert got.tokens == ref.tokens, f"prompt {prompt!r}, n_draft={k}"
            assert got.text == ref.text
            assert got.finish_reason == ref.finish_reason
            total_accepted += got.stats.n_accepted
    # the planted heads make drafts right often: the accept path was exercised, not only rejections
    assert total_accepted > 0


def test_prompt_longer_than_batch(model_pair):
    on, off = model_pair
    prompt = " ".join(f"word{i}" for i in range(150))  # several n_batch=64 chunks
    assert len(off.tokenize(prompt)) > 2 * 64
    ref = off.generate(prompt, max_tokens=MAX_TOKENS)
    for k in (1, 3, 5):
        assert on.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k).tokens == ref.tokens


def test_generation_into_end_of_context(arch, tiny_model_path):
    path = tiny_model_path(arch)
    with pymtp.Model(path, n_ctx=64, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="off") as off, \
         pymtp.Model(path, n_ctx=64, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on", n_draft=5) as on:
        prompt = "Once upon a time there was"
        ref = off.generate(prompt, max_tokens=500)
        assert ref.finish_reason in ("context", "eos")
        for k in (1, 3, 5):
            got = on.generate(prompt, max_tokens=500, n_draft=k)
            assert got.tokens == ref.tokens
            assert got.finish_reason == ref.finish_reason
        if ref.finish_reason == "context":
            # the context is full to the last cell: prompt + generated == n_ctx (+1 sampled, not decoded)
            assert len(ref.prompt_tokens) + len(ref.tokens) == off.n_ctx + 1


def test_continuing_after_mtp_generation(model_pair):
    """The main context after an MTP generation equals the one without MTP."""
    on, off = model_pair
    for prompt in PROMPTS[:6]:
        turn1_on = on.generate(prompt, max_tokens=MAX_TOKENS, n_draft=3)
        turn1_off = off.generate(prompt, max_tokens=MAX_TOKENS)
        assert turn1_on.tokens == turn1_off.tokens
        follow = turn1_on.prompt_tokens + turn1_on.tokens + on.tokenize(" and then", add_special=False)
        turn2_on = on.generate(follow, max_tokens=MAX_TOKENS, n_draft=3)
        turn2_off = off.generate(follow, max_tokens=MAX_TOKENS)
        assert turn2_on.tokens == turn2_off.tokens
        assert turn2_on.stats.n_reused > 0  # the KV prefix was reused, not recomputed


def test_fresh_context_matches_reused_context(arch, tiny_model_path, model_pair):
    """Prefix reuse after rejected drafts leaves no trace: a fresh model agrees."""
    on, _ = model_pair
    a = on.generate(PROMPTS[0], max_tokens=MAX_TOKENS, n_draft=5)
    follow = a.prompt_tokens + a.tokens + on.tokenize(" again", add_special=False)
    reused = on.generate(follow, max_tokens=MAX_TOKENS, n_draft=5)
    with pymtp.Model(tiny_model_path(arch), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on",
                     n_draft=5) as fresh:
        assert fresh.generate(follow, max_tokens=MAX_TOKENS, n_draft=5).tokens == reused.tokens


@pytest.mark.parametrize("temperature", [0.7, 1.0])
def test_seeded_sampling_identical_on_off(model_pair, temperature):
    """Exact-match verification consumes the sampler exactly as plain decoding does."""
    on, off = model_pair
    kw = dict(max_tokens=MAX_TOKENS, temperature=temperature, top_k=40, top_p=0.95, min_p=0.0,
              repeat_penalty=1.1)
    for seed in range(5):
        ref = off.generate(PROMPTS[seed], seed=seed, **kw)
        assert off.generate(PROMPTS[seed], seed=seed, **kw).tokens == ref.tokens  # reproducible
        assert on.generate(PROMPTS[seed], seed=seed, n_draft=3, draft="chain", **kw).tokens == ref.tokens


def test_stop_strings_and_streaming(model_pair):
    on, off = model_pair
    ref = off.generate(PROMPTS[1], max_tokens=MAX_TOKENS)
    assert len(ref.text) > 4
    stop = ref.text[len(ref.text) // 2: len(ref.text) // 2 + 2]
    cut = ref.text[: ref.text.find(stop)]
    for m in (on, off):
        got = m.generate(PROMPTS[1], max_tokens=MAX_TOKENS, stop=[stop])
        assert got.finish_reason == "stop" and got.text == cut
        stream = m.generate(PROMPTS[1], max_tokens=MAX_TOKENS, stop=[stop], stream=True)
        assert "".join(stream) == cut and stream.result.text == cut
