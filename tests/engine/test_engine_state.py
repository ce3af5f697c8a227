"""Engine state controls: reset() forgets the context; synthetic acceptance is for benchmarks only."""

from __future__ import annotations

import pytest

import pymtp
from gpu import NGL
from pymtp.errors import InvalidArgumentError

pytestmark = pytest.mark.gpu

PROMPT = "The quick brown fox jumps over the lazy dog and then"


@pytest.fixture(scope="module")
def model(tiny_model_path):
    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL,
                     mtp="on", n_draft=3) as m:
        yield m


def test_reset_gives_a_cold_prefill_with_the_same_output(model):
    first = model.generate(PROMPT, max_tokens=20)
    again = model.generate(PROMPT, max_tokens=20)
    assert again.stats.n_reused > 0  # the prompt's KV was reused
    model.reset()
    cold = model.generate(PROMPT, max_tokens=20)
    assert cold.stats.n_reused == 0
    assert cold.stats.n_prompt == len(model.tokenize(PROMPT))
    assert cold.tokens == first.tokens == again.tokens


def test_synthetic_rates_drive_acceptance_and_can_be_turned_off(model):
    model.set_synthetic_acceptance([0.0])
    none = model.generate(PROMPT, max_tokens=40)
    assert none.stats.n_drafted > 0 and none.stats.n_accepted == 0
    model.set_synthetic_acceptance([1.0])
    all_ = model.generate(PROMPT, max_tokens=40)
    assert all_.stats.n_accepted >= 0.9 * all_.stats.n_drafted
    model.set_synthetic_acceptance(None)
    model.reset()
    real = model.generate(PROMPT, max_tokens=40)
    with pymtp.Model(model.path, n_ctx=512, n_threads=1, n_gpu_layers=NGL, mtp="off") as off:
        assert real.tokens == off.generate(PROMPT, max_tokens=40).tokens  # verification is back


@pytest.mark.parametrize("rates", [[1.5], [-0.1], [0.5] * 17])
def test_synthetic_rates_out_of_range_are_rejected(model, rates):
    with pytest.raises(InvalidArgumentError, match="synthetic acceptance"):
        model.set_synthetic_acceptance(rates)
