"""A verified step's teacher-forced MTP rows are written by the next draft decode, ahead of its own row.

After a step accepts drafts, the MTP KV still lacks the accepted positions paired with the target's
hidden states. The engine's own loop no longer writes them in a decode of their own: they wait in the
queue and go into the next step's first draft decode (one MTP decode a step instead of two; on the
H100 that decode cost ~0.2-0.35 ms of a 2-3 ms step). Checked on a single-head model: the catch-up
decodes a generation runs, and the MTP KV it leaves, which must equal what a fresh prefill of the
accepted tokens writes (through the next draft's logits, as tests/engine/test_multihead.py checks its heads).
"""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from gpu import NGL
from helpers import PROMPT_TOKENS, fresh_peek, held_tokens

pytestmark = pytest.mark.gpu

K = 3


def open_model(path, **kw):
    return pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on", **kw)


@pytest.fixture(scope="module", params=("glm4moe", "qwen35"))
def single_head_path(request, tiny_model_path):
    return tiny_model_path(request.param, n_nextn=1)


def test_accepted_rows_need_no_decode_of_their_own(single_head_path):
    """Every draft accepted: each step after the first writes the last step's rows in its first draft
    decode, so the generation runs no catch-up decode beyond the prompt's."""
    with open_model(single_head_path, n_draft=K) as m:
        m.set_synthetic_acceptance([1.0] * K)
        out = m.generate(PROMPT_TOKENS, max_tokens=61)
    s = out.stats
    assert s.n_accepted == s.n_drafted > 10 * K
    assert s.n_draft_decodes == s.n_drafted  # one decode per draft, the rows ahead included
    assert s.n_catchup_decodes == 1          # the prompt's (one chunk), none for the steps


def test_mtp_cache_equals_a_fresh_replay(single_head_path):
    """Accept/reject patterns (some steps accept none, so nothing waits; some accept all): the next draft
    after the generation equals a fresh engine's that prefilled the accepted tokens."""
    with open_model(single_head_path, n_draft=K) as m:
        m.set_synthetic_acceptance([0.8, 0.5, 0.3])
        out = m.generate(PROMPT_TOKENS, max_tokens=47, temperature=0)
        assert 0 < out.stats.n_accepted < out.stats.n_drafted
        # the prompt's, and a plain last step's (max_tokens left no room to draft: it writes what waits);
        # one per step that accepted something before (17)
        assert out.stats.n_catchup_decodes <= 2
        seq = held_tokens(out) + [PROMPT_TOKENS[0]]
        toks, logits = m.rt.peek_draft(K, id_last=seq[-1])
    ftoks, flogits = fresh_peek(open_model(single_head_path, n_draft=K), seq, K)
    assert toks == ftoks
    assert float(np.abs(np.asarray(logits) - np.asarray(flogits)).max()) < 0.02


@pytest.mark.parametrize("cut", [None, -5], ids=["extended", "cut-back"])
def test_rows_a_generation_leaves_waiting_meet_the_next_prefill(single_head_path, cut):
    """A generation ends with its last drafting step's rows still queued. The next prompt either extends
    what the engine holds (the prefill writes them with its own rows) or is cut back inside them (they
    are dropped): either way the MTP cache then equals a fresh engine's that prefilled the same prompt."""
    from pymtp._native import llama as L

    with open_model(single_head_path, n_draft=K) as m:
        m.set_synthetic_acceptance([1.0] * K)
        out = m.generate(PROMPT_TOKENS, max_tokens=41)  # 1 + 10 steps of 4: the last step accepted all
        assert out.stats.n_accepted == out.stats.n_drafted > 0
        held = held_tokens(out)
        prompt = held + [7, 8, 9] if cut is None else held[:cut]
        arr = (L.llama_token * len(prompt))(*prompt)
        assert m.rt.lib.llama_mtp_prefill(m.rt.engine, arr, len(prompt)) == 0
        toks, logits = m.rt.peek_draft(K, id_last=PROMPT_TOKENS[0])
    ftoks, flogits = fresh_peek(open_model(single_head_path, n_draft=K), prompt + [PROMPT_TOKENS[0]], K)
    assert toks == ftoks
    assert float(np.abs(np.asarray(logits) - np.asarray(flogits)).max()) < 0.02
