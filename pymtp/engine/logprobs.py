"""Per-token log-probabilities of a generation, read from the target's own verify rows.

Each emitted token's logits row is the target model's distribution at that position,
whether the token came from a plain step or a verified draft, so what is reported here
is exactly what a run without MTP reports, at no extra decode (the engine keeps the last
step's rows: ``llama_mtp_step_logprobs``). Log-probabilities are of the raw model
distribution, before temperature, top-k/p or penalties (as llama-cpp-python's
``logprobs`` and llama-server's default ``n_probs``).
"""

from __future__ import annotations

import ctypes as C
from dataclasses import dataclass, field

from .._native import llama as L
from ..errors import InvalidArgumentError, PymtpError

MAX_TOP = 100  # the most alternatives a token reports (OpenAI allows 20, llama-server any)


@dataclass
class TokenLogprob:
    """One generated token: its id, text piece, log-probability and the top alternatives."""

    token: int
    text: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (token, text, logprob), best first

    def to_dict(self) -> dict:
        return {"token": self.token, "text": self.text, "logprob": self.logprob,
                "top": [{"token": t, "text": s, "logprob": lp} for t, s, lp in self.top]}


def check_n_top(n_top: int | None) -> int | None:
    """None (no logprobs) or an int 0..MAX_TOP; anything else is a clear error."""
    if n_top is None:
        return None
    if isinstance(n_top, bool) or not isinstance(n_top, int) or not 0 <= n_top <= MAX_TOP:
        raise InvalidArgumentError(f"logprobs must be an integer 0..{MAX_TOP} (alternatives per token), "
                                   f"or None for none; got {n_top!r}")
    return n_top


class StepLogprobs:
    """Reads the logprobs of the last step's i-th emitted token from the engine."""

    def __init__(self, rt, n_top: int) -> None:
        self.rt = rt
        self.n_top = n_top
        self._ids = (L.llama_token * max(n_top, 1))()
        self._lps = (C.c_float * max(n_top, 1))()
        self._lp = C.c_float()

    def read(self, i: int, token: int) -> TokenLogprob:
        rt = self.rt
        n = rt.lib.llama_mtp_step_logprobs(rt.engine, i, self.n_top, C.byref(self._lp), self._ids, self._lps)
        if n < 0:
            raise PymtpError(f"reading the logprobs of token {i} of the step failed (engine status {n})")
        top = [(int(self._ids[j]), piece_text(rt, self._ids[j]), float(self._lps[j])) for j in range(n)]
        return TokenLogprob(token=token, text=piece_text(rt, token), logprob=float(self._lp.value), top=top)


def piece_text(rt, token: int) -> str:
    return rt.token_piece(token, special=True).decode("utf-8", "replace")
