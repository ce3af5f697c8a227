"""The generation loop at step granularity.

Each native step emits 1..k+1 tokens (k: the fixed draft length, or with an adaptive one
what the engine's controller chooses, 0..its cap); this loop turns them
into text, stops on end-of-generation, stop strings, max_tokens or a full
context, and clamps the draft so that no token past max_tokens is ever sampled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..errors import ContextOverflowError
from ..options import DraftLength
from .logprobs import StepLogprobs, TokenLogprob
from .runtime import Runtime
from .sampling import SamplerChain, SamplingParams
from .session import EngineSession
from .stats import Stats
from .text import TextAssembler


@dataclass
class Completion:
    text: str
    tokens: list[int]
    finish_reason: str  # eos | stop | length | context | cancelled
    stats: Stats
    prompt_tokens: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None  # one per token of ``tokens`` when asked for

    def to_dict(self) -> dict:
        d = {"text": self.text, "tokens": self.tokens, "finish_reason": self.finish_reason,
             "stats": self.stats.to_dict()}
        if self.logprobs is not None:
            d["logprobs"] = [lp.to_dict() for lp in self.logprobs]
        return d


class Generation:
    """Iterating yields text deltas; afterwards ``result`` holds the Completion.

    With logprobs=N, ``logprobs`` grows with ``tokens`` while streaming: one TokenLogprob
    (the token's log-probability and its N most likely alternatives) per token so far.
    """

    def __init__(self, rt: Runtime, prompt: list[int], sampling: SamplingParams, max_tokens: int,
                 stop: list[str] | None, n_draft: DraftLength, draft: str = "greedy",
                 logprobs: int | None = None) -> None:
        self.rt = rt
        self.prompt = prompt
        self.sampling = sampling
        self.max_tokens = max_tokens
        self.stop = stop
        self.n_draft = n_draft
        self.draft = draft
        self.result: Completion | None = None
        self.n_logprobs = logprobs
        self.logprobs: list[TokenLogprob] | None = None if logprobs is None else []
        self._step_logprobs = None if logprobs is None else StepLogprobs(rt, logprobs)
        self._cancelled = False
        self._iter = self._run()

    def cancel(self) -> None:
        self._cancelled = True

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._iter)

    def run_to_end(self) -> Completion:
        for _ in self._iter:
            pass
        assert self.result is not None
        return self.result

    def _run(self) -> Iterator[str]:
        rt = self.rt
        if len(self.prompt) >= rt.n_ctx:
            raise ContextOverflowError(
                f"prompt is {len(self.prompt)} tokens but the context holds {rt.n_ctx}; "
                "shorten the prompt or raise n_ctx (--ctx)")
        with SamplerChain(self.sampling, rt.n_vocab) as chain:
            session = EngineSession(rt, self.prompt, chain.handle, draft=self.draft, n_draft=self.n_draft,
                                    seed=self.sampling.seed, rows_needed=self.logprobs is not None)
            yield from self._generate(session)

    def _generate(self, session: EngineSession) -> Iterator[str]:
        text = TextAssembler(self.stop)
        tokens: list[int] = []
        finish = "length"
        t0 = time.perf_counter()
        try:
            while len(tokens) < self.max_tokens:
                if self._cancelled:
                    finish = "cancelled"
                    break
                # never sample past max_tokens: the sampler state must match a run without MTP
                step = session.step(min(session.cap, self.max_tokens - len(tokens) - 1))
                if step is None:
                    finish = "context"
                    break
                delta, finish = self._consume(step[1], tokens, text)
                if delta:
                    yield delta
                if finish:
                    break
            else:
                finish = "length"
        except KeyboardInterrupt:
            # Ctrl-C between or inside steps: every step is atomic in the engine, so the
            # partial result is consistent; keep it for the caller, then let the interrupt through
            self._finish(session, text, tokens, "cancelled", t0)
            raise
        tail = self._finish(session, text, tokens, finish or "length", t0)
        if tail:
            yield tail

    def _finish(self, session: EngineSession, text: TextAssembler, tokens: list[int], finish: str,
                t0: float) -> str:
        gen_ms = (time.perf_counter() - t0) * 1000.0
        tail = text.finish()
        self.result = Completion(text=text.text, tokens=tokens, finish_reason=finish,
                                 stats=session.stats(gen_ms), prompt_tokens=list(self.prompt),
                                 logprobs=None if self.logprobs is None else list(self.logprobs))
        return tail

    def _consume(self, emitted: list[int], tokens: list[int], text: TextAssembler) -> tuple[str, str | None]:
        delta = []
        for i, tok in enumerate(emitted):
            if self.rt.is_eog(tok):
                return "".join(delta), "eos"
            tokens.append(tok)
            if self._step_logprobs is not None:
                self.logprobs.append(self._step_logprobs.read(i, tok))
            delta.append(text.feed(self.rt.token_piece(tok)))
            if text.stopped:
                return "".join(delta), "stop"
            if len(tokens) >= self.max_tokens:
                return "".join(delta), "length"
        return "".join(delta), None
