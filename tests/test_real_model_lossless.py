"""Greedy MTP output equals plain decoding on the real, quantized built-in model, in a chat.

SmolLM2-135M-Instruct Q4_1 + its shipped head (downloaded once from the package registry).
Its CPU kernels are not batch-size invariant, so this end-to-end check of the headline claim
runs where a difference in how the two paths feed the target would show: a multi-turn chat
(every turn reuses the previous turns' KV and appends a suffix), with real drafts accepted
and rejected. test_prefill_alignment.py checks the mechanism bit for bit.
"""

from __future__ import annotations

import pytest

import pymtp
from gpu import NGL

QUESTIONS = [
    "Write a short poem about a lighthouse keeper who talks to the sea.",
    "Now explain how a bicycle gear system works to a ten-year-old.",
    "List three ways to reduce food waste at home, with one sentence each.",
    "What is the difference between weather and climate?",
]


@pytest.mark.parametrize("k", [1, 3])
def test_greedy_chat_identical_on_the_quantized_built_in_model(k):
    from pymtp import default_model

    path = default_model.default_model_path(progress=False)
    with pymtp.Model(path, n_threads=2, n_gpu_layers=NGL, mtp="on", n_draft=k) as on, \
         pymtp.Model(path, n_threads=2, n_gpu_layers=NGL, mtp="off") as off:
        assert on.mtp_enabled, on.mtp_reason
        messages, accepted = [], 0
        for q in QUESTIONS:
            messages.append({"role": "user", "content": q})
            ref = off.chat(messages, max_tokens=64)
            got = on.chat(messages, max_tokens=64)
            assert got.tokens == ref.tokens, f"k={k}: diverged at turn {len(messages) // 2 + 1}"
            accepted += got.stats.n_accepted
            messages.append({"role": "assistant", "content": ref.text})
        assert accepted > 0  # the head's drafts were really used
