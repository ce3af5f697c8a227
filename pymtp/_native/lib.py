"""Locate and load the one bundled libllama (with its ggml libraries).

The native libraries are built by ``pip install .`` from the patched
llama.cpp and installed into ``pymtp/lib``. ``PYMTP_LIB_DIR`` points at
another directory holding a build of the same patched tree (development).
Exactly one copy is loaded per process.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from ..errors import NativeLibraryError

_PKG = Path(__file__).resolve().parent.parent


def _lib_name() -> str:
    if sys.platform == "darwin":
        return "libllama.dylib"
    if sys.platform == "win32":
        return "llama.dll"
    return "libllama.so"


def lib_dir() -> Path:
    env = os.environ.get("PYMTP_LIB_DIR")
    return Path(env) if env else _PKG / "lib"


def bundled_binary(name: str, missing: str = "pymtp must be installed with 'pip install .' (which builds it)") -> Path:
    """A tool built with pymtp (llama-server, ggml-rpc-server) in bin_dir(); NativeLibraryError if absent."""
    path = bin_dir() / name
    if not path.is_file():
        raise NativeLibraryError(f"{name} not found at {path}: {missing}, or PYMTP_BIN_DIR must point at a "
                                 "build of it")
    return path


def bin_dir() -> Path:
    env = os.environ.get("PYMTP_BIN_DIR")
    if env:
        return Path(env)
    env = os.environ.get("PYMTP_LIB_DIR")
    return Path(env) if env else _PKG / "bin"


_handle: ctypes.CDLL | None = None


def load() -> ctypes.CDLL:
    global _handle
    if _handle is None:
        path = lib_dir() / _lib_name()
        if not path.is_file():
            raise NativeLibraryError(
                f"native library not found at {path}: pymtp must be installed with 'pip install .' "
                "(which builds llama.cpp), or PYMTP_LIB_DIR must point at a build of it")
        try:
            _handle = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            raise NativeLibraryError(f"cannot load {path}: {e}") from e
    return _handle
