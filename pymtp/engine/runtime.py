"""Native resources of one loaded model: llama_model, target and MTP contexts,
the llama_mtp engine, and the tokenizer calls. Freed by close()."""

from __future__ import annotations

import ctypes as C
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import InvalidArgumentError, ModelFileError, ModelLoadError, MTPUnavailableError
from .._native import llama as L

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class RuntimeConfig:
    n_ctx: int = 4096
    n_batch: int = 512
    n_gpu_layers: int = 0
    n_threads: int | None = None
    mtp: str = "auto"          # auto | on | off
    n_draft: int = 3           # default and maximum draft length of this model instance

    def validate(self) -> None:
        if self.mtp not in ("auto", "on", "off"):
            raise InvalidArgumentError(f"mtp must be 'auto', 'on' or 'off', got {self.mtp!r}")
        if not 0 <= self.n_draft <= L.MTP_MAX_DRAFT:
            raise InvalidArgumentError(f"n_draft must be in 0..{L.MTP_MAX_DRAFT}, got {self.n_draft}")
        if self.n_ctx < 16:
            raise InvalidArgumentError(f"n_ctx must be >= 16, got {self.n_ctx}")
        if self.n_batch < 1:
            raise InvalidArgumentError(f"n_batch must be >= 1, got {self.n_batch}")
        if self.n_threads is not None and self.n_threads < 1:
            raise InvalidArgumentError(f"n_threads must be >= 1, got {self.n_threads}")


def check_gguf_file(path: Path) -> None:
    if not path.exists():
        raise ModelFileError(f"model file not found: {path}")
    if not path.is_file():
        raise ModelFileError(f"not a file: {path}")
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ModelFileError(f"cannot read {path}: {e.strerror}") from e
    if magic != GGUF_MAGIC:
        raise ModelFileError(f"not a GGUF file: {path}")


class Runtime:
    def __init__(self, path: Path, cfg: RuntimeConfig) -> None:
        cfg.validate()
        check_gguf_file(path)
        self.lib = L.lib()
        self.cfg = cfg
        self.model = self.ctx = self.ctx_mtp = self.engine = None
        try:
            self._load(path, cfg)
        except BaseException:
            self.close()
            raise

    # -- loading -------------------------------------------------------------

    def _load(self, path: Path, cfg: RuntimeConfig) -> None:
        lib = self.lib
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = cfg.n_gpu_layers
        mparams.load_mtp = cfg.mtp != "off"  # MTP layers are loaded only when they may be used
        self.model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {path}: {L.last_log_lines() or 'unknown error'}")
        self.vocab = lib.llama_model_get_vocab(self.model)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_mtp_layers = lib.llama_model_n_layer_nextn(self.model)
        self.arch = self.meta("general.architecture") or "?"
        self.recurrent = bool(lib.llama_model_is_recurrent(self.model) or lib.llama_model_is_hybrid(self.model))

        threads = cfg.n_threads or max(1, os.cpu_count() or 1)
        self.ctx = self._new_context(L.LLAMA_CONTEXT_TYPE_DEFAULT, threads,
                                     n_rs_seq=cfg.n_draft if cfg.mtp != "off" else 0)
        if not self.ctx:
            raise ModelLoadError(f"could not create a context for {path} (n_ctx={cfg.n_ctx}): "
                                 f"{L.last_log_lines() or 'out of memory?'}")
        self.n_ctx = lib.llama_n_ctx(self.ctx)

        self.mtp_reason = self._open_mtp(threads)
        params = lib.llama_mtp_default_params()
        params.n_draft = cfg.n_draft if self.ctx_mtp else 0
        params.n_batch = cfg.n_batch
        self.engine = lib.llama_mtp_init(self.ctx, self.ctx_mtp, params)
        if not self.engine:
            raise ModelLoadError("could not initialise the MTP engine")
        self.max_draft = lib.llama_mtp_max_draft(self.engine)
        if self.ctx_mtp and self.max_draft < cfg.n_draft:
            self.mtp_reason += (f"; drafts capped at {self.max_draft} by the recurrent state's "
                                f"rollback snapshots")

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
        if self.cfg.n_draft == 0:
            return "n_draft is 0"
        self.ctx_mtp = self._new_context(L.LLAMA_CONTEXT_TYPE_MTP, threads)
        if not self.ctx_mtp:
            why = f"llama.cpp has no MTP graph for architecture '{self.arch}' or could not create the MTP context"
            if mode == "on":
                raise MTPUnavailableError(f"--mtp on: {why}")
            return why
        return f"MTP on: {self.n_mtp_layers} MTP layer(s), head 0 drafts up to {self.cfg.n_draft} tokens"

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
        raw = text.encode("utf-8")
        cap = len(raw) + 16
        buf = (L.llama_token * cap)()
        n = self.lib.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (L.llama_token * cap)()
            n = self.lib.llama_tokenize(self.vocab, raw, len(raw), buf, cap, add_special, parse_special)
        return list(buf[:n])

    def token_piece(self, token: int, special: bool = False) -> bytes:
        buf = C.create_string_buffer(64)
        n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = C.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def token_text(self, token: int) -> str:
        return self.token_piece(token, special=True).decode("utf-8", "replace")

    # -- lifetime ---------------------------------------------------------------

    def close(self) -> None:
        lib = self.lib if hasattr(self, "lib") else None
        if lib is None:
            return
        if self.engine:
            lib.llama_mtp_free(self.engine)
            self.engine = None
        if self.ctx_mtp:
            lib.llama_free(self.ctx_mtp)
            self.ctx_mtp = None
        if self.ctx:
            lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            lib.llama_model_free(self.model)
            self.model = None
