"""The tiny-model generator writes well-formed, deterministic GGUFs with MTP blocks."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from pymtp_devtools import tiny_models as tm  # noqa: E402

N_TRUNK = tm.DIMS.n_layer
EXPECTED_N_NEXTN = {"glm4moe": 1, "qwen35": 1, "step35": 3}


@pytest.fixture(scope="module")
def vocab_file():
    return tm.vocab_path(tm.DEFAULT_VOCAB)  # the vendored tree is there once the build ran


@pytest.fixture(scope="module")
def models(tmp_path_factory, vocab_file):
    """One planted model per arch, read back with gguf.GGUFReader (slow: read each once)."""
    out = tmp_path_factory.mktemp("tiny")
    return {arch: gguf.GGUFReader(tm.make_tiny_model(arch, out / f"{arch}.gguf"))
            for arch in tm.ARCHS}


def _field(reader, key):
    return reader.fields[key].contents()


def _tensor(reader, name):
    return next(t for t in reader.tensors if t.name == name)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("arch", tm.ARCHS)
def test_metadata(models, arch):
    r = models[arch]
    n_nextn = EXPECTED_N_NEXTN[arch]
    assert _field(r, "general.architecture") == arch
    assert _field(r, f"{arch}.block_count") == N_TRUNK + n_nextn
    assert _field(r, f"{arch}.nextn_predict_layers") == n_nextn

    assert "<|im_start|>" in _field(r, "tokenizer.chat_template")

    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    assert list(_tensor(r, "token_embd.weight").shape) == [tm.DIMS.n_embd, n_vocab]
    for il in range(N_TRUNK, N_TRUNK + n_nextn):
        eh = _tensor(r, f"blk.{il}.nextn.eh_proj.weight")
        assert list(eh.shape) == [2 * tm.DIMS.n_embd, tm.DIMS.n_embd]
    assert not any(t.name.startswith(f"blk.{N_TRUNK + n_nextn}.") for t in r.tensors)
    assert {t.tensor_type for t in r.tensors} <= {gguf.GGMLQuantizationType.F32,
                                                 gguf.GGMLQuantizationType.F16}


def test_tokenizer_is_copied(models, vocab_file):
    r = models["qwen35"]
    # the vocab file side is parsed with the generator's fast reader (gguf's takes seconds)
    vocab = {k: v[1] for k, v in tm._KVParser(vocab_file.read_bytes()).read().items()}
    for key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        assert _field(r, key) == vocab[key].decode(), key
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        assert _field(r, key) == [v.decode() for v in vocab[key]], key
    for key in ("tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id",
                "tokenizer.ggml.eos_token_id", "tokenizer.ggml.add_bos_token"):
        assert _field(r, key) == vocab[key], key


def test_planted_eh_proj_keeps_the_embedding(models):
    eh = np.asarray(_tensor(models["glm4moe"], f"blk.{N_TRUNK}.nextn.eh_proj.weight").data,
                    dtype=np.float32)
    n = tm.DIMS.n_embd
    np.testing.assert_allclose(eh[:, :n], np.eye(n), atol=1e-3)
    assert 0 < np.abs(eh[:, n:]).max() < 0.5


def test_deterministic_by_seed(tmp_path, vocab_file):
    a = tm.make_tiny_model("qwen35", tmp_path / "a.gguf", seed=7)
    b = tm.make_tiny_model("qwen35", tmp_path / "b.gguf", seed=7)
    c = tm.make_tiny_model("qwen35", tmp_path / "c.gguf", seed=8)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


def test_head_mode_changes_only_the_mtp_blocks(vocab_file):
    def weights(head):
        w = tm._Weights(seed=3, head=head)
        tm._ARCHS["step35"].tensors(w, tm.DIMS, 3)
        return w.tensors

    planted, random = weights("planted"), weights("random")
    assert planted.keys() == random.keys()
    for name in planted:
        mtp = name.startswith("blk.") and int(name.split(".")[1]) >= N_TRUNK
        same = np.array_equal(planted[name], random[name])
        assert same != (mtp and planted[name].ndim >= 2), name


def test_n_nextn_override_and_validation(tmp_path, vocab_file):
    path = tm.make_tiny_model("step35", tmp_path / "s.gguf", n_nextn=1)
    # block_count/nextn_predict_layers are tiny scalars: the fast KV parser is enough here
    kv = tm._KVParser(path.read_bytes()).read()
    assert kv["step35.block_count"][1] == N_TRUNK + 1
    assert kv["step35.nextn_predict_layers"][1] == 1
    with pytest.raises(ValueError):
        tm.make_tiny_model("glm4moe", tmp_path / "g.gguf", n_nextn=4)  # at most 3 MTP blocks
    with pytest.raises(ValueError):
        tm.make_tiny_model("nope", tmp_path / "n.gguf")
    with pytest.raises(ValueError):
        tm.make_tiny_model("qwen35", tmp_path / "q.gguf", head="oracle")
