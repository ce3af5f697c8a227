"""Native resources of one loaded model: llama_model, target and MTP contexts,
the llama_mtp engine, and the tokenizer calls. Freed by close()."""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path

from .. import options
from .._native import llama as L
from .._native import vocab as vocab_calls
from ..errors import InvalidArgumentError, ModelLoadError, MTPUnavailableError
from ..gguf_meta import check_gguf_path, read_info
from ..options import DraftLength

SIDECAR_SUFFIX = ".mtp.gguf"   # <model stem>.mtp.gguf next to a model: its MTP head, found automatically

# Which MTP layer drafts each step of a model with several (llama_mtp_head_policy; pymtp.options):
#   per_layer: step i uses layer i mod n (each layer trained for its own distance; n_draft may exceed n)
#   first:     layer 0 at every step, fed its own output (the other layers are not loaded into contexts)
#   capped:    step i uses layer i and the draft stops after n tokens (upstream llama.cpp's behaviour)
HEAD_POLICIES = options.HEAD_POLICIES


@dataclass(frozen=True)
class RuntimeConfig:
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    mtp: str = options.DEFAULT_MTP          # auto | on | off (options.MTP_MODES)
    n_draft: DraftLength = options.DEFAULT_DRAFT_LENGTH  # adaptive (0..7 a step) or a fixed length 0..16
    # head-only GGUF or draft-vocabulary file; None: <model stem>.mtp.gguf if it applies; "": none
    mtp_head: str | None = None
    heads: str = options.DEFAULT_HEADS      # several MTP layers: per_layer | first | capped (HEAD_POLICIES)
    rpc: str | None = None   # "host:port,..." of ggml-rpc-server processes: offloaded layers are split across them

    def validate(self) -> None:
        if self.heads not in HEAD_POLICIES:
            raise InvalidArgumentError(f"heads must be one of {', '.join(HEAD_POLICIES)}, got {self.heads!r}")
        if self.mtp not in options.MTP_MODES:
            raise InvalidArgumentError(f"mtp must be 'auto', 'on' or 'off', got {self.mtp!r}")
        if not isinstance(self.n_draft, DraftLength):   # parsed where the user's value came in
            raise InvalidArgumentError(f"n_draft must be a DraftLength (DraftLength.parse), got {self.n_draft!r}")
        if self.n_ctx < 16:
            raise InvalidArgumentError(f"n_ctx must be >= 16, got {self.n_ctx}")
        if self.n_batch < 1:
            raise InvalidArgumentError(f"n_batch must be >= 1, got {self.n_batch}")
        if self.n_threads is not None and self.n_threads < 1:
            raise InvalidArgumentError(f"n_threads must be >= 1, got {self.n_threads}")
        if self.rpc is not None:
            from .._native.rpc import parse_endpoints

            parse_endpoints(self.rpc)


def sidecar_path(model_path: Path) -> Path:
    """Where a model's MTP head is looked for when none is given: ``<model stem>.mtp.gguf``."""
    return model_path.with_name(model_path.stem + SIDECAR_SUFFIX)


def sidecar_head(model_path: Path) -> Path | None:
    """The ``<model stem>.mtp.gguf`` next to a model when it applies: a head for a model without MTP
    layers of its own, a draft-vocabulary file (pymtp trim) for a model with them; else None."""
    side = sidecar_path(model_path)
    if not side.is_file() or side.resolve() == model_path.resolve():
        return None
    try:
        own = read_info(model_path).n_mtp_layers > 0
        return side if not own or "draft_vocab" in read_info(side).graft_provenance else None
    except Exception:  # a corrupt model (or head) is reported by llama.cpp's loader, not here
        return None


def _load_error(log: str) -> str:
    """The loader's own message out of llama.cpp's log lines ("... error loading model: <message>")."""
    for line in log.splitlines():
        _, sep, message = line.partition("error loading model: ")
        if sep:
            return message
    return log or "unknown error"


def find_head(path: Path, cfg: RuntimeConfig) -> tuple[Path | None, bool]:
    """(head file, auto-detected) for loading ``path`` under ``cfg``; (None, False) when there is none
    to use: the given ``mtp_head`` (checked), else the ``<model stem>.mtp.gguf`` next to the model that
    applies (sidecar_head)."""
    if cfg.mtp == "off":
        return None, False
    if cfg.mtp_head == "":   # no head file, not even the one next to the model
        return None, False
    if cfg.mtp_head is not None:
        return check_gguf_path(cfg.mtp_head, what="MTP head file"), False
    head = sidecar_head(path)
    return (head, True) if head is not None else (None, False)


def target_rs_snapshots(cfg: RuntimeConfig) -> int:
    """Recurrent-state snapshots per sequence the target context needs (n_rs_seq): one per draft
    token a step may roll back."""
    return cfg.n_draft.cap if cfg.mtp != "off" else 0


def mtp_outputs_per_seq(lib, model) -> int:
    """Output rows of one sequence an MTP context makes room for: a parallel head's pass has K, sampled
    on the backend when greedy (llama.cpp's default of 1 leaves the engine the host argmax)."""
    return max(1, lib.llama_model_mtp_parallel(model, 0, None))


class Runtime:
    """Owns the model and its contexts (``Runtime(path, cfg)``), or drives the engine over a model and
    target context someone else loaded and frees (``Runtime.over(...)``: pymtp.llama_cpp)."""

    def __init__(self, path: Path, cfg: RuntimeConfig, *, adopt: tuple | None = None) -> None:
        cfg.validate()
        self.lib = L.lib()
        self.cfg = cfg
        self.draft_cap = cfg.n_draft.cap   # the most a step of this runtime drafts (step_cap)
        self.model = self.ctx = self.ctx_mtp = self.engine = None
        self.ctx_heads: list = []               # MTP contexts of heads 1.. (multi-head drafting)
        self.mtp_head: Path | None = None      # the head file in use
        self.owns_target = adopt is None        # model and target context: freed by close() when owned
        try:
            if adopt is None:
                self._load(check_gguf_path(path), cfg)
            else:
                self._adopt(*adopt)
        except BaseException:
            self.close()
            raise

    @classmethod
    def over(cls, model, ctx, cfg: RuntimeConfig, head: Path | None = None, head_note: str = "") -> "Runtime":
        """The engine (MTP context(s), llama_mtp) over a loaded model and its target context, which stay
        the caller's: close() frees only what this Runtime created."""
        return cls(Path("."), cfg, adopt=(model, ctx, head, head_note))

    # -- loading -------------------------------------------------------------

    def _load_model(self, path: Path, cfg: RuntimeConfig, head: Path | None):
        mparams = self.lib.llama_model_default_params()
        mparams.n_gpu_layers = cfg.n_gpu_layers
        if cfg.rpc is not None:
            from .._native import rpc

            rpc.add_servers(cfg.rpc)
            mparams.n_gpu_layers = rpc.offloaded_layers(cfg.n_gpu_layers)
        mparams.load_mtp = cfg.mtp != "off"  # MTP layers are loaded only when they may be used
        L.clear_log_tail()  # a failure is explained by this load's log lines only
        if head is None:
            return self.lib.llama_model_load_from_file(str(path).encode(), mparams)
        return self.lib.llama_model_load_from_file_with_mtp_head(str(path).encode(), str(head).encode(), mparams)

    def _load(self, path: Path, cfg: RuntimeConfig) -> None:
        head, auto = find_head(path, cfg)
        head_note = ""
        self.model = self._load_model(path, cfg, head)
        if not self.model and head is not None:
            why = _load_error(L.last_log_lines())
            if auto and cfg.mtp == options.MTP_AUTO:
                # a stale or foreign <stem>.mtp.gguf must not keep the model from loading
                head_note = f"; MTP head {head.name} (found next to the model) ignored: {why}"
                head = None
                self.model = self._load_model(path, cfg, None)
            else:
                found = " (found next to the model; pass mtp='off' or remove it)" if auto else ""
                raise ModelLoadError(f"llama.cpp could not load {path} with the MTP head {head}{found}: {why}")
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {path}: {L.last_log_lines() or 'unknown error'}")
        self.mtp_head = head
        if head is not None:
            what = "draft vocabulary" if read_info(path).n_mtp_layers > 0 else "MTP head"   # pymtp trim's file
            head_note = f"; {what} from {head.name}" + (" (found next to the model)" if auto else "")
        self._describe_model()

        threads = self._threads()
        self.ctx = self._new_context(L.LLAMA_CONTEXT_TYPE_DEFAULT, threads, n_rs_seq=target_rs_snapshots(cfg))
        if not self.ctx:
            raise ModelLoadError(f"could not create a context for {path} (n_ctx={cfg.n_ctx}): "
                                 f"{L.last_log_lines() or 'out of memory?'}")
        self._start_engine(head_note)

    def _adopt(self, model, ctx, head: Path | None, head_note: str) -> None:
        self.model, self.ctx, self.mtp_head = model, ctx, head
        self._describe_model()
        self._start_engine(head_note)

    def _threads(self) -> int:
        return self.cfg.n_threads or max(1, os.cpu_count() or 1)

    def _describe_model(self) -> None:
        lib = self.lib
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_mtp_layers = lib.llama_model_n_layer_nextn(self.model)
        self.arch = self.meta("general.architecture") or "?"
        self.recurrent = bool(lib.llama_model_is_recurrent(self.model) or lib.llama_model_is_hybrid(self.model))

    def _start_engine(self, head_note: str) -> None:
        """The MTP context(s) and the llama_mtp engine over self.model / self.ctx."""
        lib, cfg = self.lib, self.cfg
        threads = self._threads()
        self.n_ctx = lib.llama_n_ctx(self.ctx)
        self.mtp_reason = self._open_mtp(threads) + head_note
        params = lib.llama_mtp_default_params()
        params.n_draft = self.draft_cap if self.ctx_mtp else 0
        params.n_batch = cfg.n_batch
        self.engine = lib.llama_mtp_init(self.ctx, self.ctx_mtp, params)
        if not self.engine:
            raise ModelLoadError("could not initialise the MTP engine")
        if self.ctx_mtp and self.n_mtp_layers > 1 and cfg.heads != "first":
            self._open_heads(threads)
        self.max_draft = lib.llama_mtp_max_draft(self.engine)
        if self.ctx_mtp and self.max_draft < self.draft_cap:
            self.mtp_reason += (f"; drafts capped at {self.max_draft} by the recurrent state's "
                                f"rollback snapshots")

    def _open_heads(self, threads: int) -> None:
        """One MTP context per further head (each keeps its own graph and KV), handed to the engine."""
        lib = self.lib
        n = self.n_mtp_layers
        for _ in range(1, n):
            ctx = self._new_context(L.LLAMA_CONTEXT_TYPE_MTP, threads)
            if not ctx:
                raise ModelLoadError(f"could not create the MTP context of head {len(self.ctx_heads) + 1} "
                                     f"of {n}: {L.last_log_lines() or 'out of memory?'} (heads='first' "
                                     "drafts with head 0 only)")
            self.ctx_heads.append(ctx)
        arr = (L.p_ctx * n)(self.ctx_mtp, *self.ctx_heads)
        if lib.llama_mtp_set_heads(self.engine, arr, n) != L.MTP_OK:
            raise ModelLoadError(f"the MTP engine refused the {n} head contexts")
        lib.llama_mtp_set_head_policy(self.engine, HEAD_POLICIES[self.cfg.heads])

    def peek_draft(self, k: int, id_last: int | None = None) -> tuple[list[int], "list[list[float]]"]:
        """Inspection: the greedy draft of k tokens the engine would make now and each step's MTP
        logits, leaving the engine's state unchanged (id_last None: its pending token)."""
        out = (L.llama_token * max(1, k))()
        logits = (C.c_float * (max(1, k) * self.n_vocab))()
        n = self.lib.llama_mtp_peek_draft(self.engine, -1 if id_last is None else int(id_last), k, out, logits)
        if n < 0:
            raise InvalidArgumentError(f"peek_draft failed ({n})")
        nv = self.n_vocab
        return list(out[:n]), [list(logits[i * nv:(i + 1) * nv]) for i in range(n)]

    def _new_context(self, ctx_type: int, threads: int, n_rs_seq: int = 0):
        lib, cfg = self.lib, self.cfg
        cp = lib.llama_context_default_params()
        cp.n_ctx = cfg.n_ctx
        cp.n_batch = cfg.n_batch
        cp.n_ubatch = cfg.n_batch
        cp.n_seq_max = 1
        cp.n_rs_seq = n_rs_seq
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.ctx_type = ctx_type
        if ctx_type == L.LLAMA_CONTEXT_TYPE_MTP:
            cp.n_outputs_max_per_seq = mtp_outputs_per_seq(lib, self.model)
        else:  # a verify's rows of one sequence, sampled on the backend (llama_mtp_set_target_sampling)
            cp.n_outputs_max_per_seq = options.MAX_DRAFT + 1
        cp.no_perf = True
        return lib.llama_init_from_model(self.model, cp)

    def _open_mtp(self, threads: int) -> str:
        """Create the MTP context when wanted and possible; return why MTP is (not) used."""
        mode = self.cfg.mtp
        if mode == "off":
            return "MTP disabled (mtp='off')"
        if self.n_mtp_layers <= 0:
            if mode == "on":
                raise MTPUnavailableError(
                    f"--mtp on: the model has no MTP layers ({self.arch}.nextn_predict_layers is absent or 0); "
                    "run it with --mtp off, or give it a head with 'pymtp graft'")
            return "the model has no MTP layers"
        if self.draft_cap == 0:
            return "n_draft is 0"
        self.ctx_mtp = self._new_context(L.LLAMA_CONTEXT_TYPE_MTP, threads)
        if not self.ctx_mtp:
            why = f"llama.cpp has no MTP graph for architecture '{self.arch}' or could not create the MTP context"
            if mode == "on":
                raise MTPUnavailableError(f"--mtp on: {why}")
            return why
        n, policy = self.n_mtp_layers, self.cfg.heads
        who = ("head 0 drafts" if n == 1 or policy == "first" else
               f"heads {policy}: step i drafts with head i mod {n}" if policy == "per_layer" else
               f"heads {policy}: step i drafts with head i, at most {n} tokens,")
        how = (f"up to {self.draft_cap} tokens a step, as many as pay (adaptive)"
               if self.cfg.n_draft.adaptive else f"{self.cfg.n_draft} tokens a step")
        return f"MTP on: {n} MTP layer(s), {who} {how}"


    # -- metadata & tokenizer -------------------------------------------------

    def meta(self, key: str) -> str | None:
        buf = C.create_string_buffer(1 << 16)
        n = self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = C.create_string_buffer(n + 1)
            self.lib.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        tpl = self.lib.llama_model_chat_template(self.model, None)
        return tpl.decode("utf-8", "replace") if tpl else None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return vocab_calls.tokenize(self.vocab, text, add_special, parse_special)

    def token_piece(self, token: int, special: bool = False) -> bytes:
        return vocab_calls.token_piece(self.vocab, token, special)

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def bos_eos(self) -> tuple[int, int]:
        """(BOS, EOS) token ids, -1 where the vocabulary has none."""
        return vocab_calls.bos(self.vocab), vocab_calls.eos(self.vocab)

    def token_text(self, token: int) -> str:
        return self.token_piece(token, special=True).decode("utf-8", "replace")

    # -- engine state -----------------------------------------------------------

    def n_heads(self) -> int:
        """MTP layers the engine drafts with (1 with heads="first" or a one-layer head; 0 without MTP)."""
        return int(self.lib.llama_mtp_n_heads(self.engine))

    def parallel(self) -> int:
        """Tokens one draft decode gives: K with a parallel head (pymtp graft --parallel K), else 0."""
        return int(self.lib.llama_mtp_parallel(self.engine))

    def step_cap(self, length: DraftLength) -> int:
        """The most one step drafts in a generation asking for ``length`` (the one clamp of a request's draft
        length: engine/session.py steps with it, pymtp.Model checks a request with it before it starts): a
        fixed length as asked; the adaptive controller up to what this runtime was loaded for.
        InvalidArgumentError where ``length`` may draft more than that."""
        if length.cap > self.draft_cap:
            raise InvalidArgumentError(
                f"n_draft={length.value!r} drafts more than this Model's n_draft={self.cfg.n_draft.value!r} allows "
                f"(at most {self.draft_cap} a step); load the Model with a larger n_draft")
        return self.draft_cap if length.adaptive else length.cap

    def clear(self) -> None:
        """Empty the sequence in both contexts: the next prefill starts cold."""
        self.lib.llama_mtp_clear(self.engine)

    def set_synthetic_rates(self, rates: list[float]) -> None:
        """Benchmarking only: random accept decisions at these unconditional per-position rates."""
        if len(rates) > options.MAX_DRAFT or not all(0.0 <= r <= 1.0 for r in rates):
            raise InvalidArgumentError(
                f"synthetic acceptance rates must be at most {options.MAX_DRAFT} values in 0..1, got {rates}")
        arr = (C.c_float * max(1, len(rates)))(*rates)
        if self.lib.llama_mtp_set_synthetic_rates(self.engine, arr, len(rates)) != L.MTP_OK:
            raise InvalidArgumentError(f"the engine rejected the synthetic acceptance rates {rates}")

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        lib = self.lib if hasattr(self, "lib") else None
        if lib is None:
            return
        if self.engine:
            lib.llama_mtp_free(self.engine)
            self.engine = None
        for ctx in self.ctx_heads:
            lib.llama_free(ctx)
        self.ctx_heads = []
        if self.ctx_mtp:
            lib.llama_free(self.ctx_mtp)
            self.ctx_mtp = None
        if self.ctx and self.owns_target:
            lib.llama_free(self.ctx)
        self.ctx = None
        if self.model and self.owns_target:
            lib.llama_model_free(self.model)
        self.model = None
