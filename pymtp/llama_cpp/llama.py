"""``pymtp.llama_cpp.Llama``: llama-cpp-python's ``Llama``, generating through pymtp's MTP engine.

Everything ``llama_cpp.Llama`` does keeps working (completions, chat formats, streaming, stop, seed,
sampling settings, logprobs, tokenize, reset, prompt caching); only ``generate()``, the token loop
under all of them, runs on pymtp's native draft/verify engine over Llama's own model and context,
with the request's own sampler chain. What the engine cannot take (a Python logits_processor, a
grammar, a draft_model, echo with logprobs) decodes plainly, with a one-line
warning: never a different answer.
"""

from __future__ import annotations

import contextlib
import ctypes as C
import inspect
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np

from .. import options
from ..engine.runtime import Runtime, RuntimeConfig, find_head, target_rs_snapshots
from ..engine.sampling import resolve_draft_mode
from ..engine.session import EngineSession
from ..errors import InvalidArgumentError, PymtpError
from ..options import DraftLength
from ._binding import bind

llama_cpp = bind()
_raw = llama_cpp.llama_cpp   # llama-cpp-python's ctypes module: the functions Llama.__init__ calls
_loading_lock = threading.Lock()


def _load_with_head(path: bytes, head: bytes, params):
    fn = _raw._lib.llama_model_load_from_file_with_mtp_head
    fn.argtypes = [C.c_char_p, C.c_char_p, _raw.llama_model_params]
    fn.restype = _raw.llama_model_p_ctypes
    return fn(path, head, params)


@contextlib.contextmanager
def _mtp_loading(load_mtp: bool, head: Path | None, n_rs_seq: int):
    """While llama_cpp.Llama.__init__ runs: the model params it builds load the MTP layers (and the head
    file, through pymtp's loader), and its context keeps the recurrent-state snapshots a draft rolls
    back to. Llama takes neither as an argument; it builds both from these default-params functions
    right before loading, so they are what changes, for the length of the constructor only."""
    saved = (_raw.llama_model_default_params, _raw.llama_context_default_params, _raw.llama_model_load_from_file)
    default_model, default_context, load = saved

    def model_params():
        p = default_model()
        p.load_mtp = load_mtp
        return p

    def context_params():
        p = default_context()
        p.n_rs_seq = n_rs_seq
        return p

    def load_model(path: bytes, params):
        return load(path, params) if head is None else _load_with_head(path, str(head).encode(), params)

    with _loading_lock:
        _raw.llama_model_default_params = model_params
        _raw.llama_context_default_params = context_params
        _raw.llama_model_load_from_file = load_model
        try:
            yield
        finally:
            _raw.llama_model_default_params, _raw.llama_context_default_params, _raw.llama_model_load_from_file = saved


_COMPLETION_ARGS = inspect.signature(llama_cpp.Llama._create_completion)


class Llama(llama_cpp.Llama):
    """``llama_cpp.Llama`` with MTP speculative decoding.

    Takes llama_cpp.Llama's arguments, plus:
      mtp       "auto" (use the model's MTP layers or a head when there is one), "on" (fail without),
                "off" (plain llama-cpp-python)
      mtp_head  a head-only GGUF with the MTP layer(s) (``pymtp graft``); None: ``<stem>.mtp.gguf``
                next to a model that has none of its own
      n_draft   "auto" (the engine drafts 0..7 a step, as many as pay) or a fixed 0..16
      draft     "auto", "greedy", "chain" or "stochastic" (pymtp.options.DRAFT_MODE_HELP)
      heads     several MTP layers: "per_layer", "first" or "capped"

    ``mtp_stats``: the last generation's stats (the keys of ``pymtp generate --json``), None when it
    decoded plainly; ``mtp_reason``: whether MTP runs and why (not).
    """

    def __init__(self, model_path: str, *args, mtp: str = options.DEFAULT_MTP, mtp_head: str | Path | None = None,
                 n_draft: DraftLength | int | str = options.DEFAULT_N_DRAFT, draft: str = options.DEFAULT_DRAFT,
                 heads: str = options.DEFAULT_HEADS, **kwargs) -> None:
        self._mtp_rt: Runtime | None = None
        self.mtp_stats: dict | None = None
        self._engine_current = False   # the engine's record matches what the context holds
        self._plain_reason: str | None = None
        self._warned: set[str] = set()
        if draft not in options.DRAFT_CHOICES:
            raise InvalidArgumentError(f"draft must be one of {', '.join(options.DRAFT_CHOICES)}, got {draft!r}")
        self.draft_length = DraftLength.parse(n_draft)
        probe = RuntimeConfig(mtp=mtp, n_draft=self.draft_length,
                              mtp_head=None if mtp_head is None else str(mtp_head), heads=heads)
        probe.validate()
        head, auto = find_head(Path(model_path), probe) if Path(model_path).is_file() else (None, False)
        note = ""
        try:
            with _mtp_loading(mtp != "off", head, target_rs_snapshots(probe)):
                super().__init__(model_path, *args, **kwargs)
        except ValueError:
            if head is None or not (auto and mtp == options.MTP_AUTO):
                raise
            # a stale or foreign <stem>.mtp.gguf must not keep the model from loading
            note = f"; MTP head {head.name} (found next to the model) ignored: llama.cpp could not load it"
            head = None
            with _mtp_loading(True, None, target_rs_snapshots(probe)):
                super().__init__(model_path, *args, **kwargs)
        if head is not None:
            note = f"; MTP head from {head.name}" + (" (found next to the model)" if auto else "") + note
        self.mtp_draft = draft
        self.n_draft = self.draft_length.value   # as pymtp.Model.n_draft: "auto" or the number
        if self.model_params.vocab_only:
            self.mtp_reason = "vocab_only model: no generation"
            return
        cfg = RuntimeConfig(n_ctx=self.n_ctx(), n_batch=self.n_batch, n_gpu_layers=self.model_params.n_gpu_layers,
                            n_threads=self.n_threads, mtp=mtp, n_draft=self.draft_length,
                            mtp_head=probe.mtp_head, heads=heads)
        self._mtp_rt = Runtime.over(self._model.model, self._ctx.ctx, cfg, head=head, head_note=note)
        self._stack.callback(self._close_mtp)  # runs before Llama frees its context and model (LIFO)
        self.mtp_reason = self._mtp_rt.mtp_reason

    @property
    def mtp_enabled(self) -> bool:
        return self._mtp_rt is not None and self._mtp_rt.ctx_mtp is not None

    def close(self) -> None:
        if hasattr(self, "_stack"):   # an argument refused before llama_cpp.Llama.__init__ ran: nothing to free
            super().close()

    def _close_mtp(self) -> None:
        if self._mtp_rt is not None:
            self._mtp_rt.close()
            self._mtp_rt = None

    # -- who holds the context: Llama's own loop, or the engine ---------------------------------

    def _engine_gives_back(self) -> None:
        """Before Llama's own paths decode: the engine forgets the sequence (both contexts emptied)."""
        if self._mtp_rt is not None and self._engine_current:
            self._mtp_rt.clear()
            self._engine_current = False
            self.n_tokens = 0
            self._requires_eval = True

    def _engine_takes(self) -> None:
        if not self._engine_current:
            self._mtp_rt.clear()
            self.n_tokens = 0
            self._engine_current = True

    def reset(self):
        self._engine_gives_back()
        super().reset()

    def eval(self, tokens):
        self._engine_gives_back()
        super().eval(tokens)

    def load_state(self, state) -> None:
        self._engine_gives_back()
        super().load_state(state)

    def embed(self, *args, **kwargs):
        self._engine_gives_back()
        return super().embed(*args, **kwargs)

    # -- generation ------------------------------------------------------------------------------

    def _create_completion(self, *args, **kwargs):
        bound = _COMPLETION_ARGS.bind(self, *args, **kwargs)
        echo, logprobs = bound.arguments.get("echo", False), bound.arguments.get("logprobs")
        # echo with logprobs reads every prompt row's logits: the engine's prefill keeps only the last
        self._plain_reason = "echo with logprobs" if echo and logprobs is not None else None
        try:
            yield from super()._create_completion(*args, **kwargs)
        finally:
            self._plain_reason = None

    def _why_plain(self, logits_processor, stopping_criteria, grammar) -> str | None:
        if not self.mtp_enabled:
            return ""
        if self.draft_model is not None:
            return "a draft_model is set"
        if logits_processor is not None:
            return "a Python logits_processor"
        if grammar is not None:
            return "a grammar"
        return self._plain_reason

    def generate(self, tokens, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                 temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True, frequency_penalty: float = 0.0,
                 presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                 mirostat_eta: float = 0.1, penalize_nl: bool = True, logits_processor=None, stopping_criteria=None,
                 grammar=None):
        sampling = dict(top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                        repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                        presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                        mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl)
        why = self._why_plain(logits_processor, stopping_criteria, grammar)
        if why is not None:
            if why and why not in self._warned:
                self._warned.add(why)
                warnings.warn(f"pymtp.llama_cpp: plain decoding (no MTP) for requests with {why}", stacklevel=3)
            self.mtp_stats = None
            self._engine_gives_back()
            yield from super().generate(tokens, reset=reset, logits_processor=logits_processor,
                                        stopping_criteria=stopping_criteria, grammar=grammar, **sampling)
            return
        yield from self._generate_mtp(list(tokens), sampling, stopping_criteria)

    def _generate_mtp(self, tokens: list[int], sampling: dict, stopping_criteria):
        rt = self._mtp_rt
        penalties = sampling["repeat_penalty"] != 1.0 or sampling["frequency_penalty"] != 0.0 or \
            sampling["presence_penalty"] != 0.0
        if self.mtp_draft == options.DRAFT_AUTO and (sampling["mirostat_mode"] or sampling["temp"] < 0.0):
            draft = "chain"   # exact whatever the chain (the target samples each token; drafts are compared)
        else:
            draft = resolve_draft_mode(self.mtp_draft, max(0.0, sampling["temp"]), 2.0 if penalties else 1.0)
        # the request's own chain, built as llama-cpp-python builds it (same samplers, same seed)
        self._mirostat_mu = C.c_float(2.0 * sampling["mirostat_tau"])
        self._sampler = self._init_sampler(**sampling)
        chain = self._sampler.sampler

        self._engine_takes()
        try:
            # whole rows stay on the host where Llama keeps every row's logits (logits_all)
            session = EngineSession(rt, tokens, chain, draft=draft, n_draft=self.draft_length, seed=self._seed,
                                    rows_needed=self._logits_all)
        except PymtpError as e:
            self._engine_current = False
            raise RuntimeError(f"pymtp: {e}") from e
        self.input_ids[: len(tokens)] = tokens
        n_prompt, n_vocab, count, pending, first = len(tokens), self._n_vocab, 0, None, True
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    step = session.step()
                except PymtpError as e:
                    self._engine_current = False
                    raise RuntimeError(f"pymtp: {e}") from e
                if step is None:
                    return
                base, emitted = step   # base: tokens in the context; `pending` is not yet
                n = len(emitted)
                # Llama's record as its own loop writes it: input_ids[p] the token at p, and with
                # logits_all scores[p] the logits after it. The first step samples from the prompt's
                # last row; a verify step's row i follows the token at base + i.
                if not first:
                    self.input_ids[base] = pending
                    self.input_ids[base + 1: base + n] = emitted[:-1]
                if self._logits_all:
                    for i in range(n):
                        row = rt.lib.llama_get_logits_ith(rt.ctx, -1 if first else i)
                        self.scores[(base - 1) if first else base + i, :] = np.ctypeslib.as_array(row, shape=(n_vocab,))
                first, pending = False, emitted[-1]
                for tok in emitted:
                    # as after Llama's own loop: the prompt and the tokens before this one decoded
                    self.n_tokens = n_prompt + count
                    count += 1
                    # asked with the arguments Llama's own loop passes (the tokens decoded so far, not
                    # the new one; its row 0 of scores), so that it stops exactly where that loop would
                    if stopping_criteria is not None and stopping_criteria(self._input_ids, self._scores[0, :]):
                        return
                    yield tok
        finally:
            self._mtp_stats(session, (time.perf_counter() - t0) * 1000.0, draft)

    def _mtp_stats(self, session: EngineSession, gen_ms: float, draft: str) -> None:
        self.mtp_stats = session.stats(gen_ms).to_dict()
        if self.verbose:
            st = self.mtp_stats
            print(f"pymtp.llama_cpp: {st['n_generated']} tokens in {st['n_steps']} steps, {st['n_accepted']} of "
                  f"{st['n_drafted']} drafts accepted ({draft})", file=sys.stderr)
