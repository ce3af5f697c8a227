"""The package ships a trained MTP head for its built-in model, and uses it by default."""

from __future__ import annotations

import gguf

from pymtp import default_model


def test_shipped_head_is_a_small_llama_head():
    head = default_model.SHIPPED_HEAD
    assert head.is_file(), f"{head} is missing from the package"
    assert head.stat().st_size <= 16 * 1024 * 1024
    r = gguf.GGUFReader(head)
    kv = {f.name: f.contents() for f in r.fields.values() if f.name in (
        "general.architecture", "llama.nextn_predict_layers", "llama.block_count", "llama.embedding_length")}
    assert kv == {"general.architecture": "llama", "llama.nextn_predict_layers": 1,
                  "llama.block_count": 31, "llama.embedding_length": 576}
    names = {t.name for t in r.tensors}
    assert "blk.30.nextn.eh_proj.weight" in names and all(n.startswith("blk.30.") for n in names)
    # a feature head (pymtp graft --features): it accepts more than the ordinary head trained on the same data
    assert "blk.30.nextn.eh_proj.feat" in names
    # with a draft vocabulary of 8192 tokens (pymtp trim): a draft step scores those instead of all 49152, and the
    # file records the acceptance measured with it (pymtp info shows it)
    d2t = next(t for t in r.tensors if t.name == "blk.30.nextn.embed_tokens.d2t")
    assert int(d2t.n_elements) == 8192
    keys = {f.name for f in r.fields.values()}
    assert {"pymtp.graft.draft_vocab", "pymtp.graft.acceptance"} <= keys
    # its own matrices in 8 bits as well (pymtp trim --type q8_0): a cheaper draft step on a CPU, same acceptance
    matrices = {t.name: t.tensor_type for t in r.tensors if len(t.shape) == 2}
    assert len(matrices) == 10 and set(matrices.values()) == {gguf.GGMLQuantizationType.Q8_0}, matrices
    assert head.stat().st_size <= 11 * 1024 * 1024


def test_built_in_model_gets_the_shipped_head(tmp_path):
    fake = tmp_path / default_model.GGUF_FILENAME
    with open(fake, "wb") as f:
        f.truncate(default_model.GGUF_SIZE)
    assert default_model.shipped_head_for(fake) == default_model.SHIPPED_HEAD
    other = tmp_path / "other.gguf"
    other.write_bytes(b"GGUF")
    assert default_model.shipped_head_for(other) is None
