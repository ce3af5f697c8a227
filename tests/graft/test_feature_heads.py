"""Feature heads (pymtp graft --features): the head is fed a learned fusion of the trunk's final hidden
state with the inputs of two trunk layers (EAGLE-3-style), which the trunk graph computes.

A tiny end-to-end graft writes such a head; llama.cpp's target publishes exactly the fusion torch
computes and its MTP context then runs like torch's head (every dense arch); generation with the head
is lossless. Models: the tiny random dense GGUFs of test_graft (CPU, seconds).
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch

from helpers import (
    ARCHS,
    GRAFT_ARGS,
    N_LAYER,
    D,
    assert_engine_draft_is_torchs_pass,
    assert_head_drafts_losslessly,
    expected_head_names,
    graft_tiny,
    write_tiny,
)
from pymtp.cli.main import main

FEAT = f"blk.{N_LAYER}.nextn.eh_proj.feat"
DEFAULT_ARGS = [a for a in GRAFT_ARGS if a != "--no-features"]   # feature heads are pymtp graft's default


@pytest.fixture(scope="module")
def feature_head(tmp_path_factory):
    return graft_tiny(tmp_path_factory.mktemp("graft-features"), "feat", args=DEFAULT_ARGS)


def test_feature_layers_rule():
    from pymtp.graft.torch_model import feature_layers

    assert feature_layers(30) == (7, 15)          # SmolLM2-135M: a quarter and half of the depth
    assert feature_layers(18) == (4, 9)
    assert feature_layers(2) == (1,)              # tiny models: the layers collapse to one
    assert feature_layers(1) == (0,)


def test_feature_head_file_and_training(feature_head):
    """The head holds its fusion matrix next to an ordinary head's tensors, and it learns."""
    from pymtp.graft.torch_model import feature_layers

    _, head, report = feature_head
    r = gguf.GGUFReader(str(head))
    names = {t.name for t in r.tensors}
    assert names == expected_head_names(N_LAYER) | {FEAT}
    t = next(t for t in r.tensors if t.name == FEAT)
    assert [int(x) for x in t.shape] == [D * (1 + len(feature_layers(N_LAYER))), D]
    val = report["history"]["val"]
    assert val[-1]["kl"] < val[0]["kl"]
    assert report["settings"]["train"]["features"] is True


def _random_feature_head(base_path, path, seed):
    """A feature head with random weights (no training): the fusion mixes in the features for real."""
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import MTPHead
    from pymtp.graft.writer import write_head_gguf

    bg = load_base(base_path, with_sha=False)
    hp = bg.hparams
    head = MTPHead.from_base(bg, seed=seed).make_features(seed=seed)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.feat.add_(torch.randn(head.feat.shape, generator=g) * 0.3)
    write_head_gguf(path, hp.arch, hp.n_layer, hp.n_embd, head.gguf_tensors())
    return path


@pytest.mark.parametrize("arch,window", [(a, 0) for a in ARCHS] + [("gemma3", 4)])
def test_llama_cpp_publishes_the_fusion_torch_computes(tmp_path, arch, window):
    """The target's MTP input rows are torch's fusion (so the trunk graph taps the same layers, norms
    them and multiplies in the same order), and the MTP context runs like torch's head."""
    from pymtp.graft.check import compare_head

    base = write_tiny(tmp_path / f"tiny-{arch}.gguf", arch, seed=3, sliding_window=window)
    head = _random_feature_head(base, tmp_path / "feat.gguf", seed=5)
    r = compare_head(base, head, seqs=[[72, 101, 108, 108, 111, 44, 32, 116, 104, 101, 114, 101, 33]], n_threads=1)
    assert r["max_abs_diff_target_hidden"] < 2e-2, r      # f16 fusion matrix
    assert r["max_abs_diff_mtp_logits"] < 5e-2, r
    assert r["mtp_argmax_agreement"] == 1.0, r


def test_the_fusion_changes_what_the_head_sees(tmp_path):
    """Not a no-op: without the fusion the target would publish h itself, and it does not."""
    import pymtp  # noqa: F401  (loads the native library)
    from pymtp._native import model_calls as mc
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import BaseModel

    base = write_tiny(tmp_path / "tiny-llama.gguf", "llama", seed=3)
    head = _random_feature_head(base, tmp_path / "feat.gguf", seed=5)
    seq = [72, 101, 108, 108, 111, 44, 32, 116]
    model = mc.load_model(base, n_gpu_layers=0, load_mtp=True, mtp_head=head)
    try:
        got = mc.target_nextn_rows(model, seq, 1)
    finally:
        mc.free_model(model)
    with torch.no_grad():
        h = BaseModel(load_base(base, with_sha=False))(torch.tensor([seq]))[0].numpy()
    assert float(np.abs(got - h).max()) > 0.1


def test_pymtp_info_says_feature_head(feature_head, capsys):
    base, head, _ = feature_head
    assert gguf.GGUFReader(str(head)).get_field("pymtp.graft.feature_layers").contents() == "1"
    assert main(["info", str(base), "--mtp-head", str(head)]) == 0
    assert "feature head" in capsys.readouterr().out


def test_the_fusion_of_output_rows_only(tmp_path):
    """A target that keeps MTP rows of its output rows only (masked): the trunk narrows the tapped layer
    inputs to those rows too, and they equal the same rows of an unmasked decode."""
    import pymtp  # noqa: F401  (loads the native library)
    from pymtp._native import model_calls as mc

    base = write_tiny(tmp_path / "tiny-llama.gguf", "llama", seed=3)
    head = _random_feature_head(base, tmp_path / "feat.gguf", seed=5)
    seq, rows = [72, 101, 108, 108, 111, 44, 32, 116, 104, 101], [3, 9]
    model = mc.load_model(base, n_gpu_layers=0, load_mtp=True, mtp_head=head)
    try:
        every_row = mc.target_nextn_rows(model, seq, 1)
        output_rows = mc.target_nextn_rows(model, seq, 1, outputs=rows)
    finally:
        mc.free_model(model)
    assert float(np.abs(output_rows - every_row[rows]).max()) < 1e-4


@pytest.mark.parametrize("n_draft", [2, "auto"])
def test_feature_head_is_lossless(feature_head, n_draft):
    base, head, _ = feature_head
    assert_head_drafts_losslessly(base, head, n_draft=n_draft)


def test_parallel_feature_head_drafts_the_pass_torch_computes(tmp_path):
    """--parallel K --features: the mask rows ride on the fused input; one engine draft of K tokens is
    torch's parallel pass fed the fusion."""
    from pymtp.graft.gguf_weights import load_base
    from pymtp.graft.torch_model import feature_layers

    K = 3
    base_path, head_path, _ = graft_tiny(tmp_path, "par-feat", "--parallel", str(K), "--features", args=DEFAULT_ARGS)
    head = assert_engine_draft_is_torchs_pass(base_path, head_path, K)
    assert head.features == len(feature_layers(load_base(base_path, with_sha=False).hparams.n_layer))
