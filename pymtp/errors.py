"""Errors raised by pymtp.

Every error a user can cause derives from :class:`PymtpError`; the CLI prints
its message as one line (no traceback unless ``--debug``) and exits non-zero.
"""


class PymtpError(Exception):
    """Base class for errors caused by input or environment, not by a bug."""


class ModelFileError(PymtpError):
    """The model path is missing, unreadable or not a GGUF file."""


class ModelLoadError(PymtpError):
    """llama.cpp refused to load the model or create a context for it."""


class MTPUnavailableError(PymtpError):
    """MTP was requested (``mtp="on"``) but the model has no MTP layers."""


class ContextOverflowError(PymtpError):
    """The prompt does not fit into the context window."""


class InvalidArgumentError(PymtpError, ValueError):
    """An argument is out of range (n_draft, temperature, ...)."""


class NativeLibraryError(PymtpError):
    """The bundled native library is missing or could not be loaded."""
