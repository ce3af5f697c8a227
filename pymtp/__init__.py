"""pymtp: multi-token-prediction speculative decoding for GGUF models.

Layers: native (native/ + patches/ over llama.cpp) -> bindings (pymtp._native)
-> engine (pymtp.engine: runtime, sampling, loop, stats) -> surfaces
(pymtp.Model, the ``pymtp`` CLI, the bundled llama-server).
"""

from .errors import (
    ContextOverflowError,
    InvalidArgumentError,
    ModelFileError,
    ModelLoadError,
    MTPUnavailableError,
    NativeLibraryError,
    PymtpError,
)
from .model import Completion, Model, Stats, Stream, TokenLogprob
from .options import DraftLength

__version__ = "0.1.0"
__all__ = ["Model", "Completion", "Stream", "Stats", "TokenLogprob", "DraftLength", "PymtpError", "ModelFileError",
           "ModelLoadError", "MTPUnavailableError", "ContextOverflowError", "InvalidArgumentError",
           "NativeLibraryError"]
