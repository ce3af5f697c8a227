"""pymtp.gguf_meta: header-only GGUF reading and the MTP support decision."""

import os
import re
import time
from pathlib import Path

import gguf
import numpy as np
import pytest

from pymtp.errors import ModelFileError
from pymtp.gguf_meta import MTP_ARCHS, check_gguf_path, mtp_support, read_info


def write_gguf(path, arch="llama", *, nextn=None, tensors=None, tokens=None, file_type=1,
               template=None, name="Tiny Test", bos_id=1, eos_id=2, merges=None):
    """Write a small GGUF: metadata plus tiny tensors (default: two f32 tensors, 10 elements)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_block_count(2)
    w.add_context_length(2048)
    if file_type is not None:
        w.add_file_type(file_type)
    if nextn is not None:
        w.add_nextn_predict_layers(nextn)
    if template is not None:
        w.add_chat_template(template)
    if tokens is not None:
        w.add_tokenizer_model("gpt2")
        w.add_token_list(tokens)
        w.add_bos_token_id(bos_id)
        w.add_eos_token_id(eos_id)
    if merges is not None:
        w.add_token_merges(merges)
    if tensors is None:
        tensors = {"token_embd.weight": np.zeros((2, 3), np.float32),
                   "output_norm.weight": np.ones(4, np.float32)}
    for tname, data in tensors.items():
        w.add_tensor(tname, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


def test_reads_basic_metadata(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", template="{{ messages }}",
                      tokens=["<unk>", "<s>", "</s>", "a"])
    info = read_info(path)
    assert info.architecture == "llama"
    assert info.name == "Tiny Test"
    assert info.file_size == path.stat().st_size
    assert info.n_params == 10
    assert info.quantization == "F16"
    assert info.n_layer == 2
    assert info.context_length == 2048
    assert info.chat_template == "{{ messages }}"
    assert info.n_mtp_layers == 0 and not info.mtp_key_present
    assert not info.has_mtp_tensors
    assert info.n_tensors == 2
    assert (info.bos_token, info.eos_token) == ("<s>", "</s>")
    assert info.to_dict()["path"] == str(path)


def test_large_arrays_are_skipped_fast_and_fields_after_them_still_read(tmp_path):
    tokens = [f"tok{i}" for i in range(60_000)]
    path = write_gguf(tmp_path / "big.gguf", tokens=tokens, bos_id=59_998, eos_id=7,
                      merges=[f"t{i} x" for i in range(40_000)], template="after the arrays")
    start = time.perf_counter()
    info = read_info(path)
    elapsed = time.perf_counter() - start
    assert info.chat_template == "after the arrays"
    assert (info.bos_token, info.eos_token) == ("tok59998", "tok7")
    assert elapsed < 1.0  # the stock GGUFReader needs seconds for this


def test_tensor_type_unknown_to_the_gguf_package_is_tolerated(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", file_type=None,
                      tensors={"odd.weight": np.zeros((2, 3), np.float32)})
    data = bytearray(path.read_bytes())
    # tensor info: name (u64 len + bytes), n_dims u32, dims u64 x n_dims, type u32, offset u64
    pos = data.index(b"odd.weight") + len(b"odd.weight") + 4 + 2 * 8
    assert data[pos:pos + 4] == (0).to_bytes(4, "little")  # F32
    data[pos:pos + 4] = (250).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    info = read_info(path)
    assert info.n_params == 6
    assert info.quantization == "type 250"


def test_quantization_falls_back_to_dominant_tensor_type(tmp_path):
    tensors = {"a.weight": np.zeros(64, np.float16), "b.weight": np.zeros(4, np.float32)}
    info = read_info(write_gguf(tmp_path / "m.gguf", file_type=None, tensors=tensors))
    assert info.quantization == "F16"


def test_no_mtp_layers_reason_points_to_graft(tmp_path):
    will_run, reason = mtp_support(read_info(write_gguf(tmp_path / "m.gguf")))
    assert not will_run
    assert "llama.nextn_predict_layers absent" in reason
    assert "pymtp graft" in reason


def test_nextn_key_zero(tmp_path):
    info = read_info(write_gguf(tmp_path / "m.gguf", nextn=0))
    assert info.mtp_key_present and info.n_mtp_layers == 0
    will_run, reason = mtp_support(info)
    assert not will_run and "= 0" in reason


def mtp_tensors():
    return {"token_embd.weight": np.zeros((2, 3), np.float32),
            "blk.1.nextn.eh_proj.weight": np.zeros((2, 2), np.float32)}


def test_mtp_runs_for_supported_arch_with_nextn_tensors(tmp_path):
    info = read_info(write_gguf(tmp_path / "m.gguf", arch="glm4moe", nextn=1, tensors=mtp_tensors()))
    assert info.n_mtp_layers == 1 and info.has_mtp_tensors
    will_run, reason = mtp_support(info)
    assert will_run
    assert "1 MTP layer" in reason


def test_mtp_layers_on_arch_without_mtp_graph(tmp_path):
    # glm4 (dense GLM-4) loads nextn tensors but has no MTP graph
    info = read_info(write_gguf(tmp_path / "m.gguf", arch="glm4", nextn=1, tensors=mtp_tensors()))
    will_run, reason = mtp_support(info)
    assert not will_run
    assert "architecture glm4 has no MTP graph" in reason


def test_mtp_key_without_tensors_is_reported(tmp_path):
    info = read_info(write_gguf(tmp_path / "m.gguf", arch="glm4moe", nextn=1))
    will_run, reason = mtp_support(info)
    assert not will_run
    assert "no MTP (.nextn.) tensors" in reason


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(ModelFileError, match=re.escape(f"model file not found: {missing}")):
        read_info(missing)


@pytest.mark.parametrize("content", [b"", b"GG", b"not a gguf at all"])
def test_not_a_gguf(tmp_path, content):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(content)
    with pytest.raises(ModelFileError, match=re.escape(f"not a GGUF file: {bad}")):
        read_info(bad)


def test_directory_is_rejected(tmp_path):
    with pytest.raises(ModelFileError, match="directory"):
        check_gguf_path(tmp_path)


def test_truncated_gguf_is_a_model_file_error(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", tokens=[f"t{i}" for i in range(1000)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFileError, match="corrupt"):
        read_info(path)


def test_mtp_archs_are_real_llama_cpp_arch_names():
    # the vendored tree exists in every checkout that was built (conftest points at it)
    src = Path(os.environ["PYMTP_LLAMA_CPP_DIR"]) / "src" / "llama-arch.cpp"
    source = src.read_text(encoding="utf-8", errors="replace")
    names = set(re.findall(r'\{\s*LLM_ARCH_\w+,\s*"([^"]+)"\s*\}', source))
    assert MTP_ARCHS <= names, sorted(MTP_ARCHS - names)
