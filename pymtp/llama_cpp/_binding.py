"""Make ``llama_cpp`` (llama-cpp-python) run on pymtp's libllama, the one copy in the process.

llama-cpp-python loads ``$LLAMA_CPP_LIB_PATH/libllama.so`` when it is first imported. pymtp's
library keeps every upstream struct and signature of the pinned llama.cpp (0c1e57098, the tree
inside llama-cpp-python 0.3.36), so that binding works on it unchanged; pymtp's engine then
drives the same model and context through its own entry points.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path

from .._native import lib as native_lib
from .._native import llama as L

VERSION = "0.3.36"   # the llama-cpp-python whose sdist holds the pinned llama.cpp
INSTALL = f'CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" pip install llama-cpp-python=={VERSION}'


def _loaded_library(llama_cpp_module) -> Path | None:
    lib = getattr(getattr(llama_cpp_module, "llama_cpp", None), "_lib", None)
    name = getattr(lib, "_name", None)
    return Path(name) if name else None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def bind():
    """Import llama_cpp on pymtp's library and return the module; ImportError says what to do when
    that cannot be (not installed, another version, or already imported with another library)."""
    ours = native_lib.lib_dir() / native_lib._lib_name()
    already = sys.modules.get("llama_cpp")
    if already is None:
        given = os.environ.get("LLAMA_CPP_LIB_PATH")
        if given and not _same_file(Path(given), native_lib.lib_dir()):
            warnings.warn(f"pymtp.llama_cpp: LLAMA_CPP_LIB_PATH={given} is replaced by pymtp's library "
                          f"directory {native_lib.lib_dir()} (one libllama per process)", stacklevel=3)
        os.environ["LLAMA_CPP_LIB_PATH"] = str(native_lib.lib_dir())
        L.lib()  # pymtp's bindings first: the same file, so llama_cpp's dlopen returns this copy
        try:
            import llama_cpp
        except ModuleNotFoundError as e:
            if e.name != "llama_cpp":
                raise
            raise ImportError(f"pymtp.llama_cpp needs llama-cpp-python {VERSION}, which is not installed; "
                              f"install it without its own native build (it runs on pymtp's library):\n"
                              f"    {INSTALL}") from None
    else:
        llama_cpp = already
        loaded = _loaded_library(llama_cpp)
        if loaded is None or not _same_file(loaded, ours):
            raise ImportError(f"llama_cpp was imported before pymtp.llama_cpp and loaded "
                              f"{loaded or 'its own library'}; "
                              f"a process holds one libllama. Import pymtp.llama_cpp first, or set "
                              f"LLAMA_CPP_LIB_PATH={native_lib.lib_dir()} before importing llama_cpp.")
    version = getattr(llama_cpp, "__version__", "?")
    if version != VERSION:
        raise ImportError(f"pymtp.llama_cpp supports llama-cpp-python {VERSION} (the binding of pymtp's "
                          f"llama.cpp), found {version}; install it with:\n    {INSTALL}")
    return llama_cpp
