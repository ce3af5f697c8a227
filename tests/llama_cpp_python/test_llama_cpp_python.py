"""llama-cpp-python 0.3.36 (the binding whose sdist pins our llama.cpp) runs on pymtp's libllama:
its own offline tests (those that need no model download) pass with LLAMA_CPP_LIB_PATH at pymtp's
library. Before pymtp's ABI fix a vocab-only Llama() crashed here with a segmentation fault.

llama-cpp-python is installed once (the llama_cpp_python fixture, conftest.py), without its native
build: it loads pymtp's library."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from helpers import python_path
from pymtp._native.lib import lib_dir

ROOT = Path(__file__).resolve().parents[2]
VERSION = "0.3.36"
# llama-cpp-python's own tests that need no downloaded model (the rest fetch GGUFs from a model hub)
OFFLINE_TESTS = (
    "test_llama.py::test_llama_cpp_version",
    "test_llama.py::test_llama_cpp_tokenization",
    "test_llama_chat_format.py::test_mistral_instruct",
    "test_llama_chat_format.py::test_hf_tokenizer_config_str_to_chat_formatter",
    "test_llama_grammar.py::test_grammar_from_string",
    "test_llama_grammar.py::test_composed_pydantic_grammar",
    "test_llama_grammar.py::test_grammar_anyof",
    "test_llama_speculative.py::test_find_candidate_pred_tokens",
)


@pytest.fixture(scope="module")
def its_tests(tmp_path_factory, vendor_script) -> Path:
    """llama-cpp-python's tests/ from its sdist (the pinned, checksummed one the build uses)."""
    vendor = vendor_script
    out = tmp_path_factory.mktemp("llama-cpp-python")
    prefix = f"llama_cpp_python-{VERSION}/tests/"
    with tarfile.open(vendor.fetch_sdist(), "r:gz") as tar:
        for m in tar.getmembers():
            if m.name.startswith(prefix) and m.isfile():
                m.name = m.name[len(prefix):]
                tar.extract(m, out / "tests", filter="data")
    return out / "tests"


def run_with_pymtp_lib(deps: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # its tests open ./vendor/llama.cpp/models/...: the repository root has that tree after the build
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=str(lib_dir()), PYTHONPATH=python_path(deps))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_llama_cpp_python_loads_pymtps_library(llama_cpp_python):
    probe = ("import llama_cpp, os; "
             "llm = llama_cpp.Llama(model_path='vendor/llama.cpp/models/ggml-vocab-llama-spm.gguf', "
             "vocab_only=True, verbose=False); "
             "t = llm.tokenize(b'Hello world'); print(t, llm.detokenize(t)); "
             "print(llama_cpp.llama_cpp._lib._name)")
    r = run_with_pymtp_lib(llama_cpp_python, ["-c", probe], ROOT)
    assert r.returncode == 0, f"llama-cpp-python on pymtp's library failed (rc {r.returncode}):\n{r.stderr[-3000:]}"
    assert "b' Hello world'" in r.stdout or "b'Hello world'" in r.stdout
    assert str(lib_dir()) in r.stdout, f"llama_cpp loaded another library: {r.stdout}"


def test_llama_cpp_python_offline_tests_pass(llama_cpp_python, its_tests):
    r = run_with_pymtp_lib(llama_cpp_python, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                                              str(its_tests), *[str(its_tests / t) for t in OFFLINE_TESTS]], ROOT)
    out = r.stdout[-4000:] + r.stderr[-2000:]
    assert r.returncode == 0, f"llama-cpp-python's tests failed on pymtp's library:\n{out}"
    assert f"{len(OFFLINE_TESTS)} passed" in r.stdout
