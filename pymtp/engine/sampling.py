"""The request's sampler chain, built from llama.cpp's own samplers.

The same chain verifies drafts inside the native engine, so MTP on and off
sample from exactly the same distribution with the same random stream.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .._native import llama as L
from ..errors import InvalidArgumentError
from ..options import DRAFT_AUTO, DRAFT_CHOICES, TEST_DRAFT_MODES


def resolve_draft_mode(draft: str, temperature: float, repeat_penalty: float) -> str:
    """The draft mode a request runs with; "auto" is resolved by the engine's one rule
    (llama_mtp_draft_mode_auto, the same call llama-server makes): stochastic drafting +
    rejection sampling when sampling (T > 0); at T = 0 the chain-filtered draft only when
    penalties change the distribution, else plain greedy."""
    if draft not in DRAFT_CHOICES and draft not in TEST_DRAFT_MODES:
        raise InvalidArgumentError(f"draft must be one of {', '.join(DRAFT_CHOICES)}, got {draft!r}")
    if draft != DRAFT_AUTO:
        return draft
    lib = L.lib()
    mode = lib.llama_mtp_draft_mode_auto(float(temperature), repeat_penalty != 1.0)
    return lib.llama_mtp_draft_mode_name(mode).decode()


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.seed is None:  # one seed per request: the chain's RNG and the engine's derive from it
            object.__setattr__(self, "seed", _random_seed())

    def validate(self) -> None:
        if not self.temperature >= 0.0:
            raise InvalidArgumentError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise InvalidArgumentError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise InvalidArgumentError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p <= 1.0:
            raise InvalidArgumentError(f"min_p must be in [0, 1], got {self.min_p}")
        if not self.repeat_penalty > 0.0:
            raise InvalidArgumentError(f"repeat_penalty must be > 0 (1.0 disables it), got {self.repeat_penalty}")
        if self.seed is not None and not 0 <= self.seed < 2**32 - 1:
            raise InvalidArgumentError(f"seed must be in [0, 2^32-2], got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _random_seed() -> int:
    return random.randrange(0, 2**32 - 1)


class SamplerChain:
    """Owns one native llama_sampler chain; free with close()."""

    def __init__(self, params: SamplingParams, n_vocab: int) -> None:
        params.validate()
        lib = L.lib()
        self._lib = lib
        self.handle = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        add = lambda s: lib.llama_sampler_chain_add(self.handle, s)  # noqa: E731 (chain takes ownership)
        if params.repeat_penalty != 1.0:
            add(lib.llama_sampler_init_penalties(n_vocab, params.repeat_last_n, params.repeat_penalty, 0.0, 0.0))
        if params.greedy:
            add(lib.llama_sampler_init_greedy())
            return
        if params.top_k > 0:
            add(lib.llama_sampler_init_top_k(params.top_k))
        if params.top_p < 1.0:
            add(lib.llama_sampler_init_top_p(params.top_p, 1))
        if params.min_p > 0.0:
            add(lib.llama_sampler_init_min_p(params.min_p, 1))
        add(lib.llama_sampler_init_temp(params.temperature))
        add(lib.llama_sampler_init_dist(params.seed))

    def close(self) -> None:
        if self.handle:
            self._lib.llama_sampler_free(self.handle)
            self.handle = None

    def __enter__(self) -> "SamplerChain":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
