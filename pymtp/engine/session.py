"""One generation on the engine, the only place that drives its step API.

``EngineSession`` sets a generation up as every caller must (stats reset, draft mode and seed, the adaptive
cap or a fixed length, where the target's rows are sampled, the prompt prefilled) and then runs steps: each
drafts up to k tokens and verifies them, emitting 1..k+1 tokens. ``pymtp.Model``'s loop (engine/loop.py) and
the llama-cpp-python drop-in (pymtp/llama_cpp) both generate through it, so both get the same setup, including
sampling a verify's rows where they are computed on a GPU.
"""

from __future__ import annotations

import ctypes as C

from .._native import llama as L
from ..errors import PymtpError
from ..options import DraftLength
from .runtime import Runtime
from .stats import Stats


class EngineSession:
    def __init__(self, rt: Runtime, prompt: list[int], chain, *, draft: str, n_draft: DraftLength, seed: int,
                 rows_needed: bool) -> None:
        """``chain``: the request's native sampler chain; ``rows_needed``: the caller reads whole logit rows
        (logprobs, logits_all), so they are never sampled on the backend. Raises PymtpError if the prompt
        cannot be processed (InvalidArgumentError if ``n_draft`` drafts more than ``rt`` allows)."""
        self.rt, self.chain, self.draft, self.n_draft = rt, chain, draft, n_draft
        lib = rt.lib
        self.cap = rt.step_cap(n_draft)  # the most a step drafts
        lib.llama_mtp_reset_stats(rt.engine)
        lib.llama_mtp_set_draft_mode(rt.engine, L.DRAFT_MODES[draft], seed & 0xFFFFFFFF)
        lib.llama_mtp_set_adaptive(rt.engine, self.cap if n_draft.adaptive else 0)
        # where the target's rows are sampled: on a GPU the backend takes a greedy row's argmax or a top-k chain's
        # candidates, unless whole rows are read
        lib.llama_mtp_set_target_sampling(rt.engine, chain, rows_needed)
        arr = (L.llama_token * len(prompt))(*prompt)
        rc = lib.llama_mtp_prefill(rt.engine, arr, len(prompt))
        if rc != L.MTP_OK:
            raise PymtpError(f"prompt processing failed (engine status {rc}): {L.last_log_lines()}")
        self._out = (L.llama_token * (L.MTP_MAX_DRAFT + 1))()

    def step(self, k: int | None = None) -> tuple[int, list[int]] | None:
        """Draft up to k tokens (default: the cap) and verify them: (tokens in the context before the step,
        the emitted tokens), or None when the context is full. Raises PymtpError on an engine error."""
        rt = self.rt
        base = rt.lib.llama_mtp_n_past(rt.engine)
        n = rt.lib.llama_mtp_step(rt.engine, self.chain, self.cap if k is None else k, self._out, len(self._out))
        if n == L.MTP_ERR_CTX_FULL:
            return None
        if n < 0:
            raise PymtpError(f"generation step failed (engine status {n}): {L.last_log_lines()}")
        return base, list(self._out[:n])

    def stats(self, gen_ms: float) -> Stats:
        rt = self.rt
        raw, adaptive = L.llama_mtp_stats(), L.llama_mtp_adaptive_stats()
        rt.lib.llama_mtp_get_stats(rt.engine, C.byref(raw))
        rt.lib.llama_mtp_get_adaptive_stats(rt.engine, C.byref(adaptive))
        mtp = rt.ctx_mtp is not None
        return Stats.from_native(raw, mtp=mtp, n_draft=self.n_draft.value, generate_ms=gen_ms, draft=self.draft,
                                 adaptive=adaptive, parallel=rt.parallel() if mtp else 0)
