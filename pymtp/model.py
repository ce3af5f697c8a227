"""The Python API: ``pymtp.Model``.

    with pymtp.Model("model.gguf", mtp="auto", n_draft="auto") as m:
        out = m.generate("The capital of France is", max_tokens=32)
        print(out.text, out.stats.mean_accepted_length)
        for piece in m.generate("Once upon a time", stream=True):
            print(piece, end="")
"""

from __future__ import annotations

from pathlib import Path

from . import options
from .chat_template import render_chat, with_chat_stops
from .engine.logprobs import TokenLogprob, check_n_top
from .engine.loop import Completion, Generation
from .engine.runtime import Runtime, RuntimeConfig
from .engine.sampling import SamplingParams, resolve_draft_mode
from .engine.stats import Stats
from .errors import InvalidArgumentError, PymtpError
from .options import DraftLength

__all__ = ["Model", "Completion", "Stream", "Stats", "TokenLogprob"]

Stream = Generation


class Model:
    """A GGUF model with optional MTP speculative decoding.

    mtp: "auto" uses the model's MTP layers when it has them, "on" requires
    them (error otherwise), "off" never loads them. n_draft: "auto" (the
    default) lets the engine choose each step's draft length, 0..7, from what
    it measures pays on this machine and text (it falls back to plain decoding
    where drafting does not pay); a number 0..16 drafts that many every step (or a pymtp.DraftLength,
    what these parse into). It is also the most a generate() call may ask for.

    mtp_head: a head-only GGUF holding the MTP layer(s) for a model that has
    none (e.g. made by ``pymtp graft``), or a draft-vocabulary file (``pymtp
    trim``) for a model that has its own. None: ``<model stem>.mtp.gguf`` next
    to the model is used when it exists and is one of those (``mtp_reason`` says
    so); "": no file, not even that one.

    heads: for models (or heads) with several MTP layers, which layer drafts each
    step: "per_layer" (step i uses layer i mod n; n_draft may exceed n), "first"
    (layer 0 at every step) or "capped" (step i uses layer i, at most n drafts:
    upstream llama.cpp's choice). Ignored with one MTP layer.

    rpc: ``"host:port,host:port"`` (or a list) of ``ggml-rpc-server`` processes, on this machine or
    others: their devices join this process's (ggml's registry is process-wide) and the offloaded
    layers are split across them, as llama.cpp's ``--rpc``; n_gpu_layers=0 then offloads all layers.
    """

    def __init__(self, path: str | Path | None = None, *, n_ctx: int = 4096, n_batch: int = 512,
                 n_gpu_layers: int = 0, n_threads: int | None = None, mtp: str = options.DEFAULT_MTP,
                 n_draft: DraftLength | int | str = options.DEFAULT_N_DRAFT, mtp_head: str | Path | None = None,
                 heads: str = options.DEFAULT_HEADS, rpc: str | list[str] | None = None,
                 verbose: bool = False) -> None:
        from ._native import llama as L

        L.set_verbose(verbose)
        if path is None:
            from .default_model import default_model_path
            path = default_model_path()
        self.path = Path(path)
        if mtp_head is None:
            from .default_model import shipped_head_for
            mtp_head = shipped_head_for(self.path)  # the built-in model comes with a trained head
        self.draft_length = DraftLength.parse(n_draft)
        cfg = RuntimeConfig(n_ctx=n_ctx, n_batch=n_batch, n_gpu_layers=n_gpu_layers,
                            n_threads=n_threads, mtp=mtp, n_draft=self.draft_length,
                            mtp_head=None if mtp_head is None else str(mtp_head), heads=heads,
                            rpc=rpc if rpc is None or isinstance(rpc, str) else ",".join(rpc))
        self._rt: Runtime | None = Runtime(self.path, cfg)

    # -- properties ---------------------------------------------------------------

    @property
    def n_draft(self) -> int | str:
        """The Model's draft length as users write it: "auto" or the fixed number (``draft_length``: typed)."""
        return self.draft_length.value

    @property
    def rt(self) -> Runtime:
        if self._rt is None:
            raise PymtpError("the model is closed")
        return self._rt

    @property
    def arch(self) -> str:
        return self.rt.arch

    @property
    def n_ctx(self) -> int:
        return self.rt.n_ctx

    @property
    def n_mtp_layers(self) -> int:
        return self.rt.n_mtp_layers

    @property
    def mtp_enabled(self) -> bool:
        return self.rt.ctx_mtp is not None

    @property
    def n_heads(self) -> int:
        """MTP layers the engine drafts with (1 with heads="first" or a one-layer head; 0 without MTP)."""
        return self.rt.n_heads()

    @property
    def parallel(self) -> int:
        """K when the head drafts K tokens in one decode (pymtp graft --parallel K), else 0."""
        return self.rt.parallel()

    @property
    def mtp_reason(self) -> str:
        return self.rt.mtp_reason

    @property
    def mtp_head(self) -> Path | None:
        """The head-only GGUF the MTP layers were loaded from (None: none used)."""
        return self.rt.mtp_head

    # -- tokenizer & template ------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.rt.tokenize(text, add_special, parse_special)

    def detokenize(self, tokens) -> str:
        return b"".join(self.rt.token_piece(t) for t in tokens).decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        return self.rt.chat_template()

    def special_texts(self) -> tuple[str, str]:
        """(BOS, EOS) token texts, "" where the vocabulary has none."""
        rt = self.rt
        return tuple(rt.token_text(t) if t >= 0 else "" for t in rt.bos_eos())

    def render_chat(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        bos, eos = self.special_texts()
        return render_chat(self.chat_template(), messages, add_generation_prompt=add_generation_prompt,
                           bos_token=bos, eos_token=eos)

    def chat_tokens(self, messages: list[dict]) -> list[int]:
        """Tokens of a conversation rendered with the model's chat template.

        If the rendered text already starts with BOS (the template wrote it), it is
        tokenized without adding another; otherwise the tokenizer adds BOS as the model asks.
        """
        bos, _ = self.special_texts()
        text = self.render_chat(messages)
        return self.tokenize(text, add_special=not (bos and text.startswith(bos)), parse_special=True)

    # -- generation ------------------------------------------------------------------

    def generate(self, prompt: str | list[int], max_tokens: int = 256, temperature: float = 0.0,
                 top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 seed: int | None = None, stop: list[str] | str | None = None, stream: bool = False,
                 n_draft: DraftLength | int | str | None = None, draft: str = options.DEFAULT_DRAFT,
                 logprobs: int | None = None):
        """Generate a continuation of ``prompt`` (text, or token ids).

        stream=False returns a Completion; stream=True returns a Stream that
        yields text pieces and has ``.result`` once exhausted (``.cancel()``
        stops it early).

        draft: how MTP drafts are made and checked. "greedy" = argmax of the MTP head
        (upstream llama.cpp), "chain" = the top token of the request's own sampler chain
        applied to the MTP logits, "stochastic" = a token drawn from that chain, verified
        by rejection sampling (exact in distribution, accepts far more at T > 0).
        "auto" = stochastic when temperature > 0, else chain with penalties, else greedy.

        n_draft: "auto" (each step drafts as many tokens as the engine expects to pay, 0 included)
        or a fixed length; None takes the Model's. It cannot exceed the Model's maximum.

        logprobs: None (default) or N: the result's ``logprobs`` (and a stream's, growing as it
        goes) holds, per generated token, its log-probability under the model and the N most
        likely tokens at that position (pymtp.TokenLogprob). They are the model's raw
        distribution, before temperature and the other samplers, read from the rows the
        engine verified: the same numbers as with MTP off, at no extra decode.
        """
        gen = self._start(prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed,
                          stop, n_draft, draft, logprobs)
        return gen if stream else gen.run_to_end()

    def chat(self, messages: list[dict], **kwargs):
        """generate() on a conversation (list of {"role", "content"}) with the chat template; a model
        without a template of its own gets ChatML, and its reply stops at ChatML's turn markers."""
        kwargs["stop"] = with_chat_stops(self.chat_template(), kwargs.get("stop"))
        return self.generate(self.chat_tokens(messages), **kwargs)

    def _start(self, prompt, max_tokens, temperature, top_k, top_p, min_p, repeat_penalty, seed, stop,
               n_draft, draft, logprobs=None) -> Generation:
        rt = self.rt
        if isinstance(stop, str):
            stop = [stop]
        if max_tokens < 1:
            raise InvalidArgumentError(f"max_tokens must be >= 1, got {max_tokens}")
        k = self.draft_length if n_draft is None else DraftLength.parse(n_draft)
        rt.step_cap(k)   # more than the Model drafts: an error now, not at the first step
        sampling = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                                  repeat_penalty=repeat_penalty, seed=seed)
        sampling.validate()
        logprobs = check_n_top(logprobs)
        tokens = self.tokenize(prompt) if isinstance(prompt, str) else [int(t) for t in prompt]
        if not tokens:
            raise InvalidArgumentError("the prompt is empty")
        bad = [t for t in tokens if not 0 <= t < rt.n_vocab]
        if bad:
            raise InvalidArgumentError(f"token id {bad[0]} is outside the vocabulary (0..{rt.n_vocab - 1})")
        mode = resolve_draft_mode(draft, temperature, repeat_penalty)
        if not self.mtp_enabled:
            mode, k = "greedy", DraftLength.fixed(0)  # plain decoding: nothing is drafted
        return Generation(rt, tokens, sampling, max_tokens, stop, k, mode, logprobs)

    def reset(self) -> None:
        """Forget the context: the next generation processes its whole prompt from scratch
        (no prefix reuse). Frees nothing; use close() for that."""
        self.rt.clear()

    def set_synthetic_acceptance(self, rates: list[float] | None) -> None:
        """BENCHMARKING ONLY: accept drafts at random with these unconditional per-position
        rates instead of verifying them, so the engine's cost can be measured as if the head
        had that acceptance (random-weight models accept nothing). The generated text is
        then NOT the model's output. None or [] turns it off."""
        self.rt.set_synthetic_rates(list(rates or []))

    # -- lifetime --------------------------------------------------------------------

    def close(self) -> None:
        if self._rt is not None:
            self._rt.close()
            self._rt = None

    def __enter__(self) -> "Model":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        state = "closed" if self._rt is None else f"{self.arch}, mtp={'on' if self.mtp_enabled else 'off'}"
        return f"Model({str(self.path)!r}, {state})"

