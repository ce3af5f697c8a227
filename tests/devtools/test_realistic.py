"""The realistic-shape random GGUF generator (pymtp_devtools/realistic.py), at a tiny --scale.

The full-size files (16.8 / 21.7 GB) are made on the GPU box for the synthetic-acceptance
benchmarks; here the same code writes scaled-down ones that our build must load and decode with
finite logits and a working MTP head, and the full presets' plans are checked for size.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

import pymtp  # noqa: E402
from gpu import NGL  # noqa: E402
from pymtp._native import llama as L  # noqa: E402
from pymtp_devtools import realistic as rl  # noqa: E402
from pymtp_devtools import tiny_models as tm  # noqa: E402

pytestmark = pytest.mark.gpu

SCALE = 0.05
N_VOCAB = 40000      # deepseek-coder's 32k tokens padded: exercises the padding and its zero LM-head rows
Q = gguf.GGMLQuantizationType


@pytest.fixture(scope="module", params=sorted(rl.PRESETS))
def small(request, tmp_path_factory):
    preset = request.param
    path = tmp_path_factory.mktemp("realistic") / f"{preset}.gguf"
    rl.make_realistic_model(preset, path, scale=SCALE, n_vocab=N_VOCAB,
                            vocab_file=tm.vocab_path(tm.DEFAULT_VOCAB), workers=2)
    return preset, path


def _dequant(t) -> np.ndarray:
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1, int(t.shape[0]))


def test_file_layout_and_weight_statistics(small):
    preset, path = small
    shape = rl.scaled(rl.PRESETS[preset], SCALE)
    r = gguf.GGUFReader(path)
    tensors = {t.name: t for t in r.tensors}
    arch = shape.arch
    assert r.fields["general.architecture"].contents() == arch
    assert r.fields[f"{arch}.block_count"].contents() == shape.n_layer + 1
    assert r.fields[f"{arch}.nextn_predict_layers"].contents() == 1
    assert len(r.fields["tokenizer.ggml.tokens"].data) == N_VOCAB

    # Q4_K_M's choices: Q6_K LM head, Q5_K DeltaNet qkv, Q4_K elsewhere, F32 norms and router
    assert tensors["output.weight"].tensor_type == Q.Q6_K
    assert tensors["token_embd.weight"].tensor_type == Q.Q4_K
    recurrent = shape.is_recurrent(0)
    assert recurrent == (arch != "qwen3")                          # dense-27b: every layer full attention
    if recurrent:
        assert tensors["blk.0.attn_qkv.weight"].tensor_type == Q.Q5_K
    else:                                                          # qwen3 attention: no output gate in Q
        assert list(tensors["blk.0.attn_q.weight"].shape) == [shape.n_embd, shape.head_dim * shape.n_head]
        assert "blk.0.ffn_norm.weight" in tensors and "blk.0.attn_post_norm.weight" not in tensors
    assert tensors["blk.0.attn_norm.weight"].tensor_type == Q.F32
    mtp = shape.n_layer
    assert f"blk.{mtp}.nextn.eh_proj.weight" in tensors
    assert f"blk.{mtp}.attn_q.weight" in tensors                 # the MTP block is full attention
    assert not any(n.startswith(f"blk.{mtp + 1}.") for n in tensors)
    if shape.n_expert:
        assert tensors["blk.0.ffn_gate_inp.weight"].tensor_type == Q.F32
        assert list(tensors["blk.0.ffn_up_exps.weight"].shape) == [shape.n_embd, shape.n_ff_exp, shape.n_expert]

    # every random block dequantizes to zero-mean values of the planned std
    for name, std in (("blk.0.ffn_up.weight" if not shape.n_expert else "blk.0.ffn_up_shexp.weight",
                       1 / math.sqrt(shape.n_embd)),
                      ("blk.0.attn_qkv.weight" if recurrent else "blk.0.attn_k.weight", 1 / math.sqrt(shape.n_embd)),
                      (f"blk.{shape.full_attn_interval - 1}.attn_output.weight",
                       tm.TRUNK_OUT_SCALE / math.sqrt(shape.head_dim * shape.n_head))):
        a = _dequant(tensors[name])
        assert np.isfinite(a).all()
        assert abs(a.mean()) < 0.05 * std, name
        assert a.std() == pytest.approx(std, rel=0.1), name

    # LM-head rows of non-normal tokens (specials, padding) are zero: never generated
    types = np.asarray(r.fields["tokenizer.ggml.token_type"].contents())
    out = _dequant(tensors["output.weight"])
    zero = ~out.any(axis=1)
    assert np.array_equal(zero, types != 1)
    assert zero[-(N_VOCAB - 32000):].all()


def test_our_build_decodes_it_with_finite_logits_and_mtp(small):
    _, path = small
    opts = dict(n_ctx=256, n_batch=64, n_threads=2, n_gpu_layers=NGL)
    with pymtp.Model(path, mtp="on", n_draft=3, **opts) as on, pymtp.Model(path, mtp="off", **opts) as off:
        assert on.mtp_enabled and on.n_mtp_layers == 1
        rt = on.rt
        assert rt.n_vocab == N_VOCAB
        toks = on.tokenize("The quick brown fox jumps over the lazy dog.")
        arr = (L.llama_token * len(toks))(*toks)
        assert rt.lib.llama_mtp_prefill(rt.engine, arr, len(toks)) == L.MTP_OK
        logits = np.ctypeslib.as_array(rt.lib.llama_get_logits_ith(rt.ctx, -1), shape=(rt.n_vocab,))
        assert np.isfinite(logits).all() and logits.std() > 0.1
        on.reset()

        a = on.generate("Once upon a time", max_tokens=24)
        b = off.generate("Once upon a time", max_tokens=24)
        assert len(a.tokens) == 24                # no end-of-generation token: runs to max_tokens
        assert a.stats.n_drafted > 0              # the MTP head drafts (random head: ~nothing accepted)
        if NGL == 0:
            assert a.tokens == b.tokens           # lossless on the CPU (CUDA: near-ties, docs/lossless.md)

        on.set_synthetic_acceptance([0.917, 0.837, 0.648])
        on.reset()
        c = on.generate("Once upon a time", max_tokens=48)
        assert c.stats.n_accepted > 0 and c.stats.mean_accepted_length > 1.5


def test_full_presets_have_the_published_size():
    """Plans only (nothing written): parameter counts and Q4_K_M-like file sizes of the presets."""
    expect = {"qwen35-27b": (27.3e9, 16.8e9), "qwen35moe-35b-a3b": (35.5e9, 21.7e9), "dense-27b": (24.7e9, 15.1e9)}
    for preset, (params, size) in expect.items():
        shape = rl.PRESETS[preset]
        plan = rl._Planner(shape).plan(np.ones(shape.n_vocab, dtype=np.int32))
        assert sum(t.n_elements for t in plan) == pytest.approx(params, rel=0.01), preset
        assert sum(t.nbytes for t in plan) == pytest.approx(size, rel=0.01), preset
        bits = 8 * sum(t.nbytes for t in plan) / sum(t.n_elements for t in plan)
        assert 4.7 < bits < 5.1, preset                          # Q4_K_M files are ~4.9 bits/weight


def test_scaled_keeps_the_architecture():
    for preset, full in rl.PRESETS.items():
        s = rl.scaled(full, 0.05)
        assert s.n_embd % 256 == 0 and s.n_layer % s.full_attn_interval == 0
        assert s.n_head % s.n_head_kv == 0 and s.ssm_dt_rank % s.ssm_n_group == 0
        assert s.n_expert >= s.n_expert_used
        assert rl.scaled(full, 1.0) == full


def test_dense_twin_split_into_trunk_and_head_drafts_in_parallel(tmp_path):
    """dense-27b --split-head: a trunk without MTP layers and a head-only sidecar that pymtp's dense
    MTP graph loads; with mask rows added (bench/parallel_heads.py's widen, as issue 18's 27B run
    does) the same block drafts k tokens in one MTP decode, where the sequential head runs k."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from parallel_heads import widen

    base, head = tmp_path / "dense.gguf", tmp_path / "dense.mtp.gguf"
    rl.make_realistic_model("dense-27b", base, scale=SCALE, n_vocab=N_VOCAB,
                            vocab_file=tm.vocab_path(tm.DEFAULT_VOCAB), workers=2)
    rl.split_head(base, head)
    r = gguf.GGUFReader(base)
    n_layer = rl.scaled(rl.PRESETS["dense-27b"], SCALE).n_layer
    assert r.fields["qwen3.block_count"].contents() == n_layer and "qwen3.nextn_predict_layers" not in r.fields
    assert all(t.name.startswith(f"blk.{n_layer}.") for t in gguf.GGUFReader(head).tensors)
    par = widen(head, 4, tmp_path / "par.mtp.gguf")
    opts = dict(n_ctx=256, n_batch=64, n_threads=2, n_gpu_layers=NGL)
    with pymtp.Model(base, mtp="off", **opts) as off:
        assert not off.mtp_enabled                                # the trunk alone has no MTP layers
    for path, decodes_per_step in ((head, 4), (par, 1)):
        with pymtp.Model(base, mtp="on", mtp_head=path, n_draft=4, **opts) as m:
            m.set_synthetic_acceptance([1.0] * 4)
            s = m.generate("Once upon a time", max_tokens=41).stats
            steps = s.drafted_per_position[0]
            assert steps > 0 and s.accepted_per_position == s.drafted_per_position   # every draft accepted
            assert s.n_draft_decodes == decodes_per_step * steps, path.name
