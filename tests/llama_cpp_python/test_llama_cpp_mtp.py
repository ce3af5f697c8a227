"""pymtp.llama_cpp: llama-cpp-python's Llama generating through pymtp's engine, and its OpenAI
server. Every request goes through plain llama_cpp.Llama and pymtp.llama_cpp.Llama on the same tiny
GGUF (tests/llama_cpp_python/llama_cpp_probe.py, in a subprocess: llama_cpp replaces libllama's log callback) and the
whole responses must be equal: completions with logprobs, chat completions (the chat template's
stopping criteria included), streams, stop strings, penalties, prompt caching, reset; seeded
sampling too where the draft mode keeps the chain's random stream (chain). The draft heads are
planted, so drafts are accepted and the equality is not the trivial one of a head that never drafts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import python_path
from pymtp._native.lib import lib_dir
from server_harness import free_port

PROBE = Path(__file__).resolve().parent / "llama_cpp_probe.py"
STATS_KEYS = set(__import__("pymtp.engine.stats", fromlist=["Stats"]).Stats().to_dict())


def run(deps: Path, args: list[str], cwd: Path, timeout: float = 600, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "LLAMA_CPP_LIB_PATH"}
    e.update(PYTHONPATH=python_path(deps), **env)
    return subprocess.run([sys.executable, *args], cwd=cwd, env=e, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("case", [("glm4moe", "chain", 3), ("qwen35", "auto", 3), ("llama+head", "auto", 4)],
                         ids=lambda c: f"{c[0]}-{c[1]}-k{c[2]}")
def test_mtp_llama_answers_like_plain_llama_cpp_python(case, models, llama_cpp_python, tmp_path):
    arch, draft, n_draft = case
    spec = {"model": str(models[arch]), "draft": draft, "n_draft": n_draft}
    r = run(llama_cpp_python, [str(PROBE), json.dumps(spec)], tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout)
    assert got["reason"].startswith("MTP on"), got["reason"]
    if arch == "llama+head":
        assert "found next to the model" in got["reason"]
    stochastic = draft == "auto"   # at T > 0 rejection sampling draws other random numbers: same law, other text
    accepted = 0
    for name, c in got["cases"].items():
        if name.startswith("sampled") and stochastic:
            assert c["mtp"]["choices"][0]["text"] and c["stats"]["draft"] == "stochastic", name
            continue
        assert c["mtp"] == c["plain"], f"{name}: pymtp.llama_cpp differs from llama_cpp.Llama"
        if name in ("grammar", "echo-logprobs"):
            assert c["stats"] is None, f"{name} must decode plainly"
        elif name != "tokenize":
            assert set(c["stats"]) == STATS_KEYS, name
            accepted += c["stats"]["n_accepted"]
    assert accepted > 20, "the planted head should have drafts accepted"
    assert any("grammar" in w for w in got["warnings"]) and any("echo with logprobs" in w for w in got["warnings"])
    # the greedy case's logprobs (logits_all): equal above, and present
    assert got["cases"]["greedy-0"]["mtp"]["choices"][0]["logprobs"]["top_logprobs"]


def test_llama_cpp_imported_first_with_another_library_is_a_clear_error(llama_cpp_python, tmp_path):
    other = tmp_path / "other-lib"
    shutil.copytree(lib_dir(), other, symlinks=True)   # the same library, another file: a second copy
    code = ("import os, llama_cpp\n"
            "try:\n    import pymtp.llama_cpp\nexcept ImportError as e:\n    print('ERR', e)\n")
    r = run(llama_cpp_python, ["-c", code], tmp_path, LLAMA_CPP_LIB_PATH=str(other))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERR llama_cpp was imported before pymtp.llama_cpp" in r.stdout
    assert "Import pymtp.llama_cpp first" in r.stdout


def test_bad_arguments_are_clear_errors(llama_cpp_python, models, tmp_path):
    code = ("from pymtp.llama_cpp import Llama\n"
            "for kw in ({'mtp': 'bogus'}, {'n_draft': 99}, {'draft': 'fast'}, {'mtp_head': 'missing.gguf'}):\n"
            "    try:\n        Llama(%r, verbose=False, **kw)\n    except Exception as e:\n"
            "        print(type(e).__name__, e)\n" % str(models["glm4moe"]))
    r = run(llama_cpp_python, ["-c", code], tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines == ["InvalidArgumentError mtp must be 'auto', 'on' or 'off', got 'bogus'",
                     "InvalidArgumentError n_draft must be 'auto' or a number 0..16, got 99",
                     "InvalidArgumentError draft must be one of auto, greedy, chain, stochastic, got 'fast'",
                     "ModelFileError MTP head file not found: missing.gguf"], lines


def test_missing_llama_cpp_python_says_how_to_install_it(tmp_path):
    code = ("import sys; sys.modules['llama_cpp'] = None\n"
            "try:\n    import pymtp.llama_cpp\nexcept ImportError as e:\n    print('ERR', e)\n")
    r = run(tmp_path, ["-c", code], tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERR pymtp.llama_cpp needs llama-cpp-python 0.3.36" in r.stdout
    assert 'CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" pip install llama-cpp-python==0.3.36' in r.stdout


def _post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _serve(deps: Path, module: str, model: Path, cwd: Path, extra: list[str]):
    port = free_port()
    log = open(cwd / f"{module}.log", "w")
    env = dict(os.environ, PYTHONPATH=python_path(deps), LLAMA_CPP_LIB_PATH=str(lib_dir()))
    proc = subprocess.Popen([sys.executable, "-m", module, "--model", str(model), "--n_ctx", "512",
                             "--n_threads", "1", "--host", "127.0.0.1", "--port", str(port), *extra],
                            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{module} exited: {(cwd / f'{module}.log').read_text()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).read()
            return proc, port
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise AssertionError(f"{module} did not start: {(cwd / f'{module}.log').read_text()[-3000:]}")


def test_openai_server_with_mtp_answers_like_llama_cpp_server(models, llama_cpp_python, tmp_path):
    model = models["glm4moe"]
    plain, p_port = _serve(llama_cpp_python, "llama_cpp.server", model, tmp_path, [])
    mtp, m_port = _serve(llama_cpp_python, "pymtp.llama_cpp.server", model, tmp_path,
                         ["--mtp", "on", "--n-draft", "3", "--draft", "greedy"])
    try:
        for path, body in [("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 32, "temperature": 0}),
                           ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                                     "max_tokens": 32, "temperature": 0})]:
            a, b = _post(p_port, path, body), _post(m_port, path, body)
            assert a["choices"] == b["choices"] and a["usage"] == b["usage"], path
    finally:
        for p in (plain, mtp):
            p.terminate()
            p.wait(timeout=30)
    log = (tmp_path / "pymtp.llama_cpp.server.log").read_text()
    lines = [ln for ln in log.splitlines() if ln.startswith("pymtp.llama_cpp: ")]
    assert len(lines) == 2, log[-3000:]
    assert all(int(ln.split(" accepted")[0].split(", ")[1].split(" of ")[0]) > 0 for ln in lines), lines
