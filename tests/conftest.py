"""Shared fixtures: tiny random-weight GGUFs with MTP layers, made once per session.

These need the native library (built by 'pip install .'); a missing library
is an error, not a skip: CI must exercise the real engine.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The installed package does not carry llama.cpp's vocab files: point the tiny-model
# generator at this checkout's vendored tree (filled by the build).
os.environ.setdefault("PYMTP_LLAMA_CPP_DIR", str(Path(__file__).resolve().parent.parent / "vendor" / "llama.cpp"))

# The test-model generators (pymtp_devtools/) live in the checkout, not in the installed package.
# Appended, not prepended: `pymtp` itself still comes from the installed package (with its native
# library), never from the checkout's pymtp/ (which has no lib/).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from gpu import NGL  # noqa: E402
from pymtp_devtools.tiny_models import make_tiny_model  # noqa: E402

# one single-head MoE arch, one hybrid recurrent arch, one multi-head arch
ENGINE_ARCHS = ("glm4moe", "qwen35", "step35")


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_model_path(tiny_dir):
    """tiny_model_path(arch, head="planted", n_nextn=None) -> path, cached per session."""
    cache = {}

    def get(arch: str, head: str = "planted", n_nextn: int | None = None):
        key = (arch, head, n_nextn)
        if key not in cache:
            name = f"{arch}-{head}-{'d' if n_nextn is None else n_nextn}.gguf"
            cache[key] = make_tiny_model(arch, tiny_dir / name, seed=1234, head=head, n_nextn=n_nextn)
        return cache[key]

    return get


@pytest.fixture(scope="session", params=ENGINE_ARCHS)
def arch(request):
    return request.param


@pytest.fixture(scope="session")
def model_pair(arch, tiny_model_path):
    """(MTP-on model with n_draft 5, MTP-off model) on the same tiny GGUF."""
    import pymtp

    path = tiny_model_path(arch)
    on = pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on", n_draft=5)
    off = pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="off")
    yield on, off
    on.close()
    off.close()


@pytest.fixture(scope="session")
def vendor_script():
    """scripts/vendor.py as a module: the pinned sdist (fetch_sdist, TREE_PREFIX) and pymtp's cache dir."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pymtp_vendor_script", Path(_ROOT) / "scripts" / "vendor.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- llama-cpp-python 0.3.36 on pymtp's library (tests/llama_cpp_python/test_llama_cpp_*.py)

LLAMA_CPP_PYTHON = "0.3.36"


@pytest.fixture(scope="session")
def llama_cpp_python(vendor_script) -> Path:
    """A directory holding llama_cpp with its server extra and the packages its tests import, installed
    once into pymtp's cache as the README says (no native build: it loads pymtp's library); ~30 s."""
    import subprocess

    target = vendor_script.cache_dir() / f"llama-cpp-python-{LLAMA_CPP_PYTHON}-server"
    if not (target / "llama_cpp" / "__init__.py").is_file() or not (target / "fastapi").is_dir():
        env = dict(os.environ, CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                            "--target", str(target), f"llama-cpp-python[server]=={LLAMA_CPP_PYTHON}",
                            "huggingface_hub", "pydantic", "diskcache", "typing-extensions"],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (f"installing llama-cpp-python {LLAMA_CPP_PYTHON} failed:\n"
                                   f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return target


# ---- llama-server (tests/server_harness.py): tiny models and servers started on first use


@pytest.fixture(scope="module")
def models(tiny_model_path, tmp_path_factory):
    """arch -> model path: two archs with the MTP layer in the file, one dense base + sidecar head."""
    from server_harness import tiny_server_models

    return tiny_server_models(tiny_model_path, tmp_path_factory)


@pytest.fixture(scope="module")
def servers(models, tmp_path_factory):
    """(arch, mtp) -> running Server, started on first use and stopped at the end of the module."""
    from server_harness import Server

    logs = tmp_path_factory.mktemp("server-logs")
    running: dict = {}

    def get(arch: str, mtp: str, parallel: int = 1, adaptive: bool = False, extra: tuple = (),
            ctx: int | None = None) -> Server:
        key = (arch, mtp, parallel, adaptive, extra, ctx)
        if key not in running:
            kw = {} if ctx is None else {"ctx": ctx}
            running[key] = Server(models[arch], logs / f"{arch}-{mtp}-{parallel}-{adaptive}-{len(running)}.log",
                                  mtp=mtp, parallel=parallel, adaptive=adaptive, extra=extra, **kw)
        return running[key]

    get.running = running  # tests that must stop a server early (e.g. to measure its memory)

    yield get
    for s in running.values():
        s.stop()
