"""The unmodified `openai` package against `pymtp serve` (the CLI, MTP on and off): chat, streaming chat,
completions and log probabilities on both endpoints read through the client's own types, with equal
answers with MTP on and off. /v1/completions returns OpenAI's legacy ``logprobs`` object (``tokens``,
``token_logprobs``, ``top_logprobs`` as one dict per token, ``text_offset``); upstream llama-server
returned the chat format there, which the client reads as all ``None``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from helpers import LOGPROB_TOL as TOL
from server_harness import CHAT, CTX, PROMPTS, free_port

# `python -m pymtp...` puts its working directory first on sys.path: run it outside the checkout, so that it imports
# the installed pymtp (with its llama-server), not the source tree's (CI: a fresh clone without pymtp/bin)
NEUTRAL = tempfile.gettempdir()

openai = pytest.importorskip("openai")


class Serve:
    """`pymtp serve MODEL --mtp MODE` on a free port, with an openai client; its output in a file."""

    def __init__(self, model: Path, mtp: str, log: Path) -> None:
        self.port = free_port()
        self.log = log
        cmd = [sys.executable, "-m", "pymtp.cli.main", "serve", str(model), "--port", str(self.port),
               "--ctx", str(CTX), "--threads", "1", "--n-draft", "3", "--mtp", mtp, "--", "--no-webui"]
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=NEUTRAL)
        deadline = time.monotonic() + 120
        while "serving" not in log.read_text(errors="replace"):
            assert self.proc.poll() is None, f"pymtp serve exited early:\n{log.read_text(errors='replace')}"
            assert time.monotonic() < deadline, "pymtp serve did not start"
            time.sleep(0.1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="none", max_retries=0, timeout=60)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="module")
def serve(models, tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-openai")
    on, off = Serve(models["glm4moe"], "on", d / "on.log"), Serve(models["glm4moe"], "off", d / "off.log")
    yield on, off
    on.stop()
    off.stop()


def close(a: float, b: float) -> bool:
    return abs(a - b) <= TOL


def test_chat_and_streaming_chat_equal_with_and_without_mtp(serve):
    on, off = serve
    for messages in CHAT:
        kw = dict(model="m", messages=messages, max_tokens=24, temperature=0.0)
        a = on.client.chat.completions.create(**kw)
        b = off.client.chat.completions.create(**kw)
        assert a.choices[0].message.content == b.choices[0].message.content
        assert a.choices[0].message.content and a.choices[0].finish_reason == b.choices[0].finish_reason
        assert (a.model_extra["timings"]["mtp"] or {}).get("drafted", 0) > 0, "MTP on never drafted"
        streamed = "".join(c.choices[0].delta.content or "" for c in on.client.chat.completions.create(
            stream=True, **kw) if c.choices)
        assert streamed == a.choices[0].message.content


def test_completions_and_streaming_completions_equal_with_and_without_mtp(serve):
    on, off = serve
    for prompt in PROMPTS:
        kw = dict(model="m", prompt=prompt, max_tokens=24, temperature=0.0)
        a, b = on.client.completions.create(**kw), off.client.completions.create(**kw)
        assert a.choices[0].text == b.choices[0].text and a.choices[0].text
        assert a.usage.completion_tokens == b.usage.completion_tokens == 24
        streamed = "".join(c.choices[0].text for c in on.client.completions.create(stream=True, **kw)
                           if c.choices)
        assert streamed == a.choices[0].text


def test_completions_without_max_tokens_generate_openais_16(serve):
    """OpenAI's default for /v1/completions; upstream generated until the context was full."""
    on, _ = serve
    r = on.client.completions.create(model="m", prompt=PROMPTS[3], temperature=0.0,
                                     extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def legacy(r, n: int) -> tuple[list, list, list, list]:
    lp = r.choices[0].logprobs
    assert lp is not None and lp.tokens is not None, f"no legacy logprobs: {r}"
    assert lp.token_logprobs is not None and lp.top_logprobs is not None and lp.text_offset is not None
    text = r.choices[0].text
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) > 0
    assert "".join(lp.tokens) == text
    for tok, logprob, top, off in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert text[off:off + len(tok)] == tok
        assert isinstance(top, dict) and 0 < len(top) <= n and all(v <= 0.0 for v in top.values())
        assert logprob <= 0.0 and math.isfinite(logprob)
        assert max(top.values()) >= logprob - 1e-6  # greedy: the chosen token is the most likely
    return lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset


def test_completions_logprobs_in_openais_legacy_format(serve):
    on, off = serve
    for prompt in PROMPTS:
        kw = dict(model="m", prompt=prompt, max_tokens=20, temperature=0.0, logprobs=2)
        ta, la, topa, oa = legacy(on.client.completions.create(**kw), 2)
        tb, lb, topb, ob = legacy(off.client.completions.create(**kw), 2)
        assert (ta, oa) == (tb, ob)
        assert all(close(x, y) for x, y in zip(la, lb)), (la, lb)
        for x, y in zip(topa, topb):
            assert x.keys() == y.keys() and all(close(x[k], y[k]) for k in x)


def test_chat_logprobs_equal_with_and_without_mtp(serve):
    on, off = serve
    kw = dict(model="m", messages=CHAT[1], max_tokens=20, temperature=0.0, logprobs=True, top_logprobs=3)
    a, b = on.client.chat.completions.create(**kw), off.client.chat.completions.create(**kw)
    ca, cb = a.choices[0].logprobs.content, b.choices[0].logprobs.content
    assert ca and len(ca) == len(cb)
    for x, y in zip(ca, cb):
        assert x.token == y.token and close(x.logprob, y.logprob) and len(x.top_logprobs) == 3
        assert [t.token for t in x.top_logprobs] == [t.token for t in y.top_logprobs]


def test_streamed_completion_logprobs_continue_their_offsets(serve):
    on, _ = serve
    kw = dict(model="m", prompt=PROMPTS[1], max_tokens=20, temperature=0.0, logprobs=1)
    whole = on.client.completions.create(**kw)
    tokens, offsets = [], []
    for chunk in on.client.completions.create(stream=True, **kw):
        if chunk.choices and chunk.choices[0].logprobs and chunk.choices[0].logprobs.tokens:
            tokens += chunk.choices[0].logprobs.tokens
            offsets += chunk.choices[0].logprobs.text_offset
    assert tokens == whole.choices[0].logprobs.tokens
    assert offsets == whole.choices[0].logprobs.text_offset


def test_over_a_limit_the_client_gets_a_bad_request_naming_it(serve):
    on, _ = serve
    with pytest.raises(openai.BadRequestError, match="--max-top-logprobs"):
        on.client.completions.create(model="m", prompt="hi", max_tokens=4, logprobs=21)
    with pytest.raises(openai.BadRequestError, match="--max-top-logprobs"):
        on.client.chat.completions.create(model="m", messages=CHAT[0], max_tokens=4, logprobs=True, top_logprobs=50)
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.role"):
        on.client.chat.completions.create(model="m", messages=[{"role": 5, "content": "x"}], max_tokens=4)
    with urllib.request.urlopen(on.url + "/health", timeout=5) as r:
        assert r.status == 200


def test_pymtp_serve_passes_its_limits_and_teaches_them(models):
    run = [sys.executable, "-m", "pymtp.cli.main", "serve", str(models["glm4moe"])]
    out = subprocess.run([*run, "--n-predict", "64", "--max-tokens-limit", "256", "--dry-run"], cwd=NEUTRAL,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    argv = out.stdout.split()
    assert argv[argv.index("--n-predict") + 1] == "64" and argv[argv.index("--max-tokens-limit") + 1] == "256"
    bad = subprocess.run([*run, "--max-tokens-limit", "-1", "--dry-run"], capture_output=True, text=True, timeout=60,
                         cwd=NEUTRAL)
    assert bad.returncode != 0 and "--max-tokens-limit must be >= 0" in bad.stderr
    helptext = subprocess.run([*run[:-1], "--help"], capture_output=True, text=True, timeout=60, cwd=NEUTRAL).stdout
    for flag in ("--n-predict", "--max-tokens-limit", "--max-top-logprobs", "--max-body-bytes", "OpenAI's default"):
        assert flag in helptext, flag
