"""Bad input gets a clear error, and loses nothing: the model stays usable."""

from __future__ import annotations

import gc
import os

import pytest

import pymtp
from pymtp.errors import ContextOverflowError, InvalidArgumentError, ModelFileError, MTPUnavailableError

pytestmark = pytest.mark.gpu


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        pymtp.Model(tmp_path / "nope.gguf")


def test_not_a_gguf(tmp_path):
    p = tmp_path / "fake.gguf"
    p.write_bytes(b"this is not a model at all")
    with pytest.raises(ModelFileError, match="not a GGUF"):
        pymtp.Model(p)


def test_truncated_gguf_is_a_load_error(tmp_path, tiny_model_path):
    src = tiny_model_path("glm4moe").read_bytes()
    p = tmp_path / "truncated.gguf"
    p.write_bytes(src[: len(src) // 3])
    with pytest.raises(pymtp.ModelLoadError):
        pymtp.Model(p, n_threads=1)


def test_mtp_on_without_mtp_layers(tiny_model_path):
    path = tiny_model_path("glm4moe", n_nextn=0)
    with pytest.raises(MTPUnavailableError, match="no MTP layers"):
        pymtp.Model(path, mtp="on")
    with pymtp.Model(path, mtp="auto", n_threads=1) as m:  # auto falls back and says why
        assert not m.mtp_enabled and "no MTP layers" in m.mtp_reason
        assert m.generate("hello", max_tokens=4).tokens


@pytest.mark.parametrize("n_draft", [-1, 17])
def test_n_draft_out_of_range(tiny_model_path, n_draft):
    with pytest.raises(InvalidArgumentError, match="n_draft"):
        pymtp.Model(tiny_model_path("glm4moe"), n_draft=n_draft)


def test_bad_generate_arguments_keep_model_usable(model_pair):
    on, off = model_pair
    ref = off.generate("hello", max_tokens=8)
    with pytest.raises(InvalidArgumentError, match="n_draft"):
        on.generate("hello", n_draft=6)  # above the Model's maximum of 5
    with pytest.raises(InvalidArgumentError, match="temperature"):
        on.generate("hello", temperature=-1)
    with pytest.raises(InvalidArgumentError, match="max_tokens"):
        on.generate("hello", max_tokens=0)
    with pytest.raises(InvalidArgumentError, match="vocabulary"):
        on.generate([1, 10**9])
    assert on.generate("hello", max_tokens=8).tokens == ref.tokens


def test_prompt_longer_than_context(tiny_model_path):
    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=64, n_threads=1, mtp="on") as m:
        long_prompt = " ".join(["token"] * (m.n_ctx + 10))  # llama.cpp may round n_ctx up
        with pytest.raises(ContextOverflowError, match="context"):
            m.generate(long_prompt, max_tokens=4)
        assert m.generate("short prompt", max_tokens=4).tokens  # still usable


def _rss_kib() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_open_close_does_not_leak(tiny_model_path):
    path = tiny_model_path("glm4moe")

    def cycle():
        with pymtp.Model(path, n_ctx=256, n_threads=1, mtp="on", n_draft=3) as m:
            m.generate("hi", max_tokens=3)

    for _ in range(5):  # warm up allocator pools and lazily loaded code
        cycle()
    gc.collect()
    before = _rss_kib()
    for _ in range(50):
        cycle()
    gc.collect()
    growth = _rss_kib() - before
    size_kib = path.stat().st_size // 1024
    # 50 leaked models would be >= 50x the file; allow allocator noise of a fraction of one model
    assert growth < max(size_kib, 8 * 1024), f"RSS grew by {growth} KiB over 50 open/close cycles"


def test_closed_model_is_an_error(tiny_model_path):
    m = pymtp.Model(tiny_model_path("glm4moe"), n_threads=1)
    m.close()
    m.close()  # idempotent
    with pytest.raises(pymtp.PymtpError, match="closed"):
        m.generate("x")
