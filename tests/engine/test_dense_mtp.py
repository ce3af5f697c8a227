"""MTP on dense architectures (llama, qwen2, qwen3, gemma3; patches 0003/0004).

* Lossless: greedy output with MTP on is token-identical to MTP off, with the MTP block in
  the model's own GGUF and with it in a head-only sidecar GGUF, for several prompts and
  draft lengths; the planted head gets drafts accepted, but not all of them.
* The sidecar: base + ``--mtp-head`` (or ``<stem>.mtp.gguf`` found next to the model) is
  the same model as the single file; ``mtp="off"`` ignores it.
* Errors: a sidecar of another architecture, width or depth, one with trunk tensors, or a
  head for a model that already has MTP layers fails the load with a clear message.
"""

from __future__ import annotations

import json
import shutil

import pytest

import pymtp
from gpu import NGL
from pymtp.errors import ModelFileError, ModelLoadError
from pymtp_devtools import tiny_dense as td

pytestmark = pytest.mark.gpu

PROMPTS = [
    "The quick brown fox", "Once upon a time", "def fibonacci(n):", "In 1905, Albert Einstein",
    "SELECT name FROM users WHERE", "1, 2, 3, 4,", "Q: What is the speed of light?\nA:",
    "It was a dark and stormy night",
]
N_DRAFTS = (1, 2, 3, 5)
MAX_TOKENS = 24
SEED = 4321
OPTS = dict(n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL)


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-dense")


@pytest.fixture(scope="module")
def dense_models(dense_dir):
    """{arch: (full model, base model, its sidecar head)}; the same weights in both layouts.

    The base is in a directory of its own with its sidecar as <stem>.mtp.gguf (found automatically)."""
    out = {}
    for arch in td.ARCHS:
        full = td.make_tiny_dense(arch, dense_dir / f"{arch}-full.gguf", seed=SEED)
        (dense_dir / arch).mkdir()
        base, head = td.make_tiny_dense_split(arch, dense_dir / arch / f"{arch}.gguf", seed=SEED)
        out[arch] = (full, base, head)
    return out


@pytest.fixture(scope="module", params=td.ARCHS)
def dense_arch(request):
    return request.param


@pytest.fixture(scope="module")
def dense_trio(dense_arch, dense_models):
    """(MTP off, MTP on from the single file, MTP on from base + explicit sidecar), n_draft 5."""
    full, base, head = dense_models[dense_arch]
    off = pymtp.Model(full, mtp="off", **OPTS)
    on = pymtp.Model(full, mtp="on", n_draft=5, **OPTS)
    side = pymtp.Model(base, mtp="on", n_draft=5, mtp_head=head, **OPTS)
    yield off, on, side
    for m in (off, on, side):
        m.close()


# --------------------------------------------------------------------------- lossless

def test_mtp_is_on_for_both_layouts(dense_trio, dense_arch, dense_models):
    off, on, side = dense_trio
    assert not off.mtp_enabled and on.mtp_enabled and side.mtp_enabled
    assert on.arch == side.arch == dense_arch
    assert on.n_mtp_layers == side.n_mtp_layers == 1
    assert on.mtp_head is None
    assert side.mtp_head == dense_models[dense_arch][2]
    assert f"MTP head from {side.mtp_head.name}" in side.mtp_reason
    assert "found next to the model" not in side.mtp_reason


def test_greedy_identical_on_off(dense_trio, dense_arch):
    off, on, side = dense_trio
    drafted = accepted = 0
    for prompt in PROMPTS:
        ref = off.generate(prompt, max_tokens=MAX_TOKENS)
        for k in N_DRAFTS:
            got = on.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k)
            assert got.tokens == ref.tokens, f"{dense_arch}: prompt {prompt!r}, n_draft={k}"
            assert got.finish_reason == ref.finish_reason
            got_side = side.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k)
            assert got_side.tokens == ref.tokens, f"{dense_arch} (sidecar): prompt {prompt!r}, n_draft={k}"
            # the same head in the other layout drafts exactly the same tokens
            assert (got_side.stats.n_drafted, got_side.stats.n_accepted) == (got.stats.n_drafted,
                                                                            got.stats.n_accepted)
            drafted += got.stats.n_drafted
            accepted += got.stats.n_accepted
    # the planted head: both the accept and the reject paths were exercised
    assert 0 < accepted < drafted, f"{dense_arch}: {accepted}/{drafted} drafts accepted"


def test_prompt_longer_than_batch(dense_trio):
    off, on, side = dense_trio
    prompt = " ".join(f"word{i}" for i in range(150))  # several n_batch=64 chunks
    ref = off.generate(prompt, max_tokens=MAX_TOKENS)
    for k in (1, 3, 5):
        assert on.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k).tokens == ref.tokens
        assert side.generate(prompt, max_tokens=MAX_TOKENS, n_draft=k).tokens == ref.tokens


def test_continuing_a_conversation(dense_trio):
    off, on, side = dense_trio
    for prompt in PROMPTS[:3]:
        first = off.generate(prompt, max_tokens=MAX_TOKENS)
        follow = first.prompt_tokens + first.tokens + off.tokenize(" and then", add_special=False)
        ref = off.generate(follow, max_tokens=MAX_TOKENS)
        for m in (on, side):
            assert m.generate(prompt, max_tokens=MAX_TOKENS, n_draft=3).tokens == first.tokens
            got = m.generate(follow, max_tokens=MAX_TOKENS, n_draft=3)
            assert got.tokens == ref.tokens
            assert got.stats.n_reused > 0


def test_seeded_sampling_identical_on_off(dense_trio):
    """Exact-match verification (chain drafts) consumes the sampler as plain decoding does."""
    off, on, side = dense_trio
    kw = dict(max_tokens=MAX_TOKENS, temperature=0.8, top_k=40, top_p=0.95, min_p=0.0, draft="chain")
    for seed in range(3):
        ref = off.generate(PROMPTS[seed], seed=seed, **{k: v for k, v in kw.items() if k != "draft"})
        assert on.generate(PROMPTS[seed], seed=seed, n_draft=3, **kw).tokens == ref.tokens
        assert side.generate(PROMPTS[seed], seed=seed, n_draft=3, **kw).tokens == ref.tokens


def test_generation_into_end_of_context(dense_arch, dense_models):
    full, base, _ = dense_models[dense_arch]
    opts = dict(n_ctx=64, n_batch=64, n_threads=1)
    with pymtp.Model(full, mtp="off", **opts) as off, pymtp.Model(base, mtp="on", n_draft=5, **opts) as on:
        ref = off.generate("Once upon a time there was", max_tokens=500)
        assert ref.finish_reason in ("context", "eos")
        for k in (1, 3, 5):
            got = on.generate("Once upon a time there was", max_tokens=500, n_draft=k)
            assert got.tokens == ref.tokens and got.finish_reason == ref.finish_reason


# --------------------------------------------------------------------------- sidecar handling

EXPECTED_HEAD_TENSORS = {
    "llama": set(),
    "qwen2": {"attn_q.bias", "attn_k.bias", "attn_v.bias"},
    "qwen3": {"attn_q_norm.weight", "attn_k_norm.weight"},
    "gemma3": {"attn_q_norm.weight", "attn_k_norm.weight", "post_attention_norm.weight",
               "post_ffw_norm.weight"},
}


@pytest.mark.parametrize("arch", td.ARCHS)
def test_sidecar_layout(dense_models, arch):
    """The head-only file: the MTP block at blk.{n_layer} and just the keys the loader checks."""
    _, base, head = dense_models[arch]
    r = td.gguf.GGUFReader(str(head))
    keys = {k: r.fields[k].contents() for k in r.fields if not k.startswith("GGUF.")}
    assert keys == {"general.architecture": arch, "general.name": keys["general.name"],
                    f"{arch}.block_count": 3, f"{arch}.nextn_predict_layers": 1, f"{arch}.embedding_length": 64}
    common = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
              "ffn_norm.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
              "nextn.eh_proj.weight", "nextn.enorm.weight", "nextn.hnorm.weight", "nextn.shared_head_norm.weight"}
    assert {t.name for t in r.tensors} == {f"blk.2.{n}" for n in common | EXPECTED_HEAD_TENSORS[arch]}
    eh = next(t for t in r.tensors if t.name == "blk.2.nextn.eh_proj.weight")
    assert [int(x) for x in eh.shape] == [128, 64]                       # ggml {2*n_embd, n_embd}
    b = td.gguf.GGUFReader(str(base))
    assert b.fields[f"{arch}.block_count"].contents() == 2
    assert f"{arch}.nextn_predict_layers" not in b.fields
    assert not any(t.name.startswith("blk.2.") for t in b.tensors)


def test_sidecar_found_next_to_the_model(dense_models):
    _, base, head = dense_models["qwen3"]
    assert head == td.sidecar_path(base) and head.name == "qwen3.mtp.gguf"
    with pymtp.Model(base, mtp="auto", n_draft=3, **OPTS) as m:
        assert m.mtp_enabled and m.mtp_head == head
        assert "MTP head from qwen3.mtp.gguf (found next to the model)" in m.mtp_reason
        assert m.generate(PROMPTS[0], max_tokens=8).stats.n_drafted > 0


def test_mtp_off_ignores_the_head(dense_models):
    _, base, head = dense_models["llama"]
    for kw in ({}, {"mtp_head": head}):
        with pymtp.Model(base, mtp="off", **OPTS, **kw) as m:
            assert not m.mtp_enabled and m.mtp_head is None
            assert m.n_mtp_layers == 0


def test_base_without_sidecar_has_no_mtp(dense_models, tmp_path):
    _, base, _ = dense_models["gemma3"]
    alone = shutil.copy(base, tmp_path / "gemma3-alone.gguf")
    with pymtp.Model(alone, mtp="auto", **OPTS) as m:
        assert not m.mtp_enabled and "no MTP layers" in m.mtp_reason
    with pytest.raises(pymtp.MTPUnavailableError, match="no MTP layers"):
        pymtp.Model(alone, mtp="on", **OPTS)


def test_model_with_its_own_head_ignores_a_sidecar_next_to_it(dense_models, tmp_path):
    full, _, _ = dense_models["qwen2"]
    model = shutil.copy(full, tmp_path / "q2.gguf")
    shutil.copy(dense_models["llama"][2], tmp_path / "q2.mtp.gguf")   # would not even fit
    with pymtp.Model(model, mtp="on", **OPTS) as m:
        assert m.mtp_enabled and m.mtp_head is None


def test_split_tools_roundtrip(dense_models, tmp_path):
    """write_head_only / write_base_only on the single file give a pair that loads like it."""
    full, _, _ = dense_models["gemma3"]
    base = td.write_base_only(full, tmp_path / "g3.gguf")
    head = td.write_head_only(full, tmp_path / "g3-head.gguf")
    with pymtp.Model(full, mtp="on", n_draft=3, **OPTS) as a, \
         pymtp.Model(base, mtp="on", n_draft=3, mtp_head=head, **OPTS) as b:
        for prompt in PROMPTS[:3]:
            ga, gb = a.generate(prompt, max_tokens=16), b.generate(prompt, max_tokens=16)
            assert ga.tokens == gb.tokens and ga.stats.n_accepted == gb.stats.n_accepted


def test_cli_mtp_head_flag(dense_models, tmp_path, capsys):
    from pymtp.cli.main import main

    _, base, head = dense_models["llama"]
    alone = shutil.copy(base, tmp_path / "llama-alone.gguf")
    args = ["generate", str(alone), "-p", "Once upon a time", "-n", "12", "--json", "--threads", "1",
            "--ctx", "256", "--n-draft", "3"]
    assert main(args + ["--mtp-head", str(head)]) == 0
    with_head = json.loads(capsys.readouterr().out)
    assert with_head["stats"]["n_drafted"] > 0
    assert main(args + ["--mtp", "off"]) == 0
    without = json.loads(capsys.readouterr().out)
    assert with_head["tokens"] == without["tokens"]
    assert main(args + ["--mtp-head", str(tmp_path / "nope.gguf")]) != 0
    assert "not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- errors

@pytest.fixture(scope="module")
def bad_heads(dense_dir):
    """Sidecars that do not fit the llama base model."""
    d = dense_dir / "bad"
    d.mkdir()
    heads = {}
    _, heads["arch"] = td.make_tiny_dense_split("qwen3", d / "q3.gguf", seed=1)
    _, heads["width"] = td.make_tiny_dense_split("llama", d / "narrow.gguf", seed=1,
                                                  dims=td.dims_for("llama", n_embd=32, head_dim=8))
    _, heads["depth"] = td.make_tiny_dense_split("llama", d / "deep.gguf", seed=1,
                                                  dims=td.dims_for("llama", n_layer=3))
    # a "head" that also carries a trunk tensor
    full = td.make_tiny_dense("llama", d / "full.gguf", seed=1)
    heads["trunk"] = td._write_raw(
        d / "with-trunk.mtp.gguf", "llama",
        [t for t in td.gguf.GGUFReader(str(full)).tensors if t.name.startswith(("blk.2.", "blk.0.attn_norm"))],
        lambda gw: (gw.add_block_count(3), gw.add_nextn_predict_layers(1), gw.add_embedding_length(64)))
    heads["not-gguf"] = d / "junk.mtp.gguf"
    heads["not-gguf"].write_bytes(b"GGUF but not really a gguf file at all")
    return heads


@pytest.mark.parametrize("kind, message", [
    ("arch", "architecture 'qwen3' does not match the model's 'llama'"),
    ("width", "llama.embedding_length = 32 does not match the model's 64"),
    ("depth", "llama.block_count = 4, expected the model's 2 layers \\+ 1 MTP layer\\(s\\) = 3"),
    ("trunk", "unexpected tensor 'blk.0.attn_norm.weight'"),
    ("not-gguf", "not a readable GGUF file"),
])
def test_bad_sidecar_is_a_load_error(dense_models, bad_heads, kind, message):
    _, base, _ = dense_models["llama"]
    for mtp in ("auto", "on"):
        with pytest.raises(ModelLoadError, match=message) as err:
            pymtp.Model(base, mtp=mtp, mtp_head=bad_heads[kind], **OPTS)
        assert f"with the MTP head {bad_heads[kind]}" in str(err.value)


def test_head_for_a_model_that_has_mtp_layers(dense_models):
    full, _, head = dense_models["llama"]
    with pytest.raises(ModelLoadError, match="the model already has 1 MTP layer"):
        pymtp.Model(full, mtp="on", mtp_head=head, **OPTS)


def test_missing_head_file(dense_models, tmp_path):
    _, base, _ = dense_models["llama"]
    with pytest.raises(ModelFileError, match="MTP head file not found"):
        pymtp.Model(base, mtp_head=tmp_path / "missing.mtp.gguf", **OPTS)


def test_bad_sidecar_next_to_the_model(dense_models, bad_heads, tmp_path):
    """mtp='auto' loads the model without a broken <stem>.mtp.gguf and says why; 'on' fails."""
    _, base, _ = dense_models["llama"]
    model = shutil.copy(base, tmp_path / "m.gguf")
    shutil.copy(bad_heads["arch"], tmp_path / "m.mtp.gguf")
    with pymtp.Model(model, mtp="auto", **OPTS) as m:
        assert not m.mtp_enabled and m.mtp_head is None
        assert "MTP head m.mtp.gguf (found next to the model) ignored" in m.mtp_reason
        assert "architecture 'qwen3' does not match" in m.mtp_reason
        assert m.generate("hello", max_tokens=4).tokens
    with pytest.raises(ModelLoadError, match="found next to the model.*architecture 'qwen3'"):
        pymtp.Model(model, mtp="on", **OPTS)
