"""Statistics returned with every generation are consistent with what happened."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_stats_consistent(model_pair):
    on, off = model_pair
    for k in (1, 3, 5):
        out = on.generate("It was a dark and stormy night", max_tokens=40, n_draft=k)
        s = out.stats
        assert s.mtp and s.n_draft == k
        assert 0 <= s.n_accepted <= s.n_drafted
        assert sum(s.accepted_per_position) == s.n_accepted
        assert sum(s.drafted_per_position) == s.n_drafted
        assert len(s.drafted_per_position) <= k
        assert all(a <= d for a, d in zip(s.accepted_per_position, s.drafted_per_position))
        # acceptance can only fall with depth: a draft at i+1 is reached only after i was accepted
        assert all(a2 <= a1 for a1, a2 in zip(s.accepted_per_position, s.accepted_per_position[1:]))
        # every step emits 1 + accepted tokens; the first token comes from the prompt's logits
        assert s.n_generated == 1 + s.n_steps + s.n_accepted
        assert s.n_generated >= len(out.tokens)
        assert s.mean_accepted_length == (s.n_accepted + s.n_steps) / s.n_steps
        assert s.n_prompt == len(on.tokenize("It was a dark and stormy night")) - s.n_reused
        d = s.to_dict()
        for key in ("n_generated", "n_drafted", "n_accepted", "accept_per_position",
                    "mean_accepted_length", "tokens_per_second"):
            assert key in d
        assert d["tokens_per_second"] > 0

    plain = off.generate("It was a dark and stormy night", max_tokens=40).stats
    assert not plain.mtp and plain.n_drafted == 0 and plain.n_accepted == 0
    assert plain.mean_accepted_length == 1.0


def test_planted_head_is_accepted(model_pair):
    on, _ = model_pair
    s = on.generate("Once upon a time", max_tokens=64, n_draft=3).stats
    assert s.accept_per_position and s.accept_per_position[0] > 0.2
