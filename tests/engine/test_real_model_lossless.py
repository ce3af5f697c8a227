"""Greedy MTP output equals plain decoding on the real, quantized built-in model, in a chat.

SmolLM2-135M-Instruct Q4_1 + its shipped head (downloaded once from the package registry).
Its CPU kernels are not batch-size invariant, so this end-to-end check of the headline claim
runs where a difference in how the two paths feed the target would show: a multi-turn chat
(every turn reuses the previous turns' KV and appends a suffix), with real drafts accepted
and rejected. test_prefill_alignment.py checks the mechanism bit for bit.
"""

from __future__ import annotations

import pytest

import pymtp
from gpu import NGL

pytestmark = pytest.mark.gpu

QUESTIONS = [
    "Write a short poem about a lighthouse keeper who talks to the sea.",
    "Now explain how a bicycle gear system works to a ten-year-old.",
    "List three ways to reduce food waste at home, with one sentence each.",
    "What is the difference between weather and climate?",
]


def assert_greedy_chat_identical(path, k: int, questions: list[str], **head) -> None:
    """A chat over `questions`, 64 tokens a turn, gives the same tokens with MTP on (k drafts) and off,
    and drafts are accepted."""
    with pymtp.Model(path, n_threads=2, n_gpu_layers=NGL, mtp="on", n_draft=k, **head) as on, \
         pymtp.Model(path, n_threads=2, n_gpu_layers=NGL, mtp="off") as off:
        assert on.mtp_enabled, on.mtp_reason
        messages, accepted = [], 0
        for q in questions:
            messages.append({"role": "user", "content": q})
            ref = off.chat(messages, max_tokens=64)
            got = on.chat(messages, max_tokens=64)
            assert got.tokens == ref.tokens, f"k={k}: diverged at turn {len(messages) // 2 + 1}"
            accepted += got.stats.n_accepted
            messages.append({"role": "assistant", "content": ref.text})
        assert accepted > 0  # the head's drafts were really used


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_chat_identical_on_the_quantized_built_in_model(k):
    from pymtp import default_model

    assert_greedy_chat_identical(default_model.default_model_path(progress=False), k, QUESTIONS)


@pytest.fixture(scope="module")
def built_in_q4_0(tmp_path_factory):
    """The built-in model with its Q4_1 tensors as Q4_0, which ggml-cpu repacks (8x8 interleaved blocks,
    gemv for one row, gemm for several) instead of running them through tinyBLAS, and its shipped head."""
    from gguf import GGMLQuantizationType as QT

    from pymtp import default_model
    from pymtp_devtools.requant import requantize

    src = default_model.default_model_path(progress=False)
    dst = tmp_path_factory.mktemp("q4_0") / "smol-q4_0.gguf"
    assert requantize(src, dst, QT.Q4_1, QT.Q4_0) > 100
    return dst, default_model.SHIPPED_HEAD


@pytest.mark.slow
def test_the_q4_0_copy_runs_through_the_cpu_repack_path(built_in_q4_0):
    import subprocess
    import sys

    if NGL:
        pytest.skip("the repack buffer is a CPU path")
    path, _ = built_in_q4_0
    # run from outside the checkout, so that the installed package (with its library) is the one imported
    r = subprocess.run([sys.executable, "-m", "pymtp.cli.main", "generate", str(path), "-p", "Hi", "-n", "2",
                        "--mtp", "off", "--verbose", "--threads", "2"], cwd=path.parent, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    if "CPU_REPACK" not in r.stderr:
        pytest.skip("this CPU has no repack kernels for Q4_0 (no AVX2/NEON): tinyBLAS runs it")
    assert "q4_0_8x8" in r.stderr or "q4_0_4x" in r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 3])
def test_greedy_chat_identical_through_the_cpu_repack_path(built_in_q4_0, k):
    """Greedy MTP output equals plain decoding where the verify batch's rows go through the repack
    gemm and plain decoding through its gemv (the common Q4_0/Q4_K/Q8_0 files on x86 and Arm)."""
    path, head = built_in_q4_0
    assert_greedy_chat_identical(path, k, QUESTIONS[:3], mtp_head=head)


@pytest.fixture(scope="module")
def built_in_q4_k_m(tmp_path_factory):
    """The built-in model requantized by llama.cpp to Q4_K_M: its ffn_down matrices (1536 columns, a
    multiple of 256) become Q4_K, which ggml-cpu repacks (q4_K_8x8, a gemm kernel from 4 rows), or Q6_K,
    which its tiled K-quant matmul takes from 8 rows."""
    from pymtp import default_model
    from pymtp_devtools.requant import llama_quantize

    dst = tmp_path_factory.mktemp("q4_k_m") / "smol-q4_k_m.gguf"
    llama_quantize(default_model.default_model_path(progress=False), dst, "Q4_K_M")
    return dst


def assert_verify_rows_equal_one_by_one(path, sizes=(4, 9, 17), repack: bool = True) -> None:
    """Each row of a verify-sized batch (1 + the drafts) has exactly the logits of decoding its token
    alone, with the engine's attention and cache settings (``repack=False``: ggml-cpu's weights left in
    their GGUF layout, so no matrix takes the repack buffer's kernels)."""
    import numpy as np

    from pymtp._native import model_calls as mc

    with pymtp.Model(path, n_threads=2, mtp="off") as m:
        seq = m.tokenize("The lighthouse keeper climbed the stairs every evening, lit the lamp, and spoke to "
                         "the sea about the ships, the storms and the gulls that nested on the rocks below.")
        n_vocab = m.rt.n_vocab
    assert len(seq) >= 4 + 17
    model = mc.load_model(path, repack=repack)
    try:
        def rows(batches):
            ctx = mc.new_context(model, 64, 2, engine_attention=True)
            try:
                mc.decode(ctx, seq[:4], 0)
                pos, out = 4, []
                for b in batches:
                    mc.decode(ctx, seq[pos:pos + b], pos)
                    out.extend(mc.logits_rows(ctx, b, n_vocab))
                    pos += b
                return np.array(out)
            finally:
                mc.free_context(ctx)

        one_by_one = rows([1] * 17)
        for n in sizes:
            np.testing.assert_array_equal(rows([n] + [1] * (17 - n)), one_by_one, err_msg=f"a {n}-row batch")
    finally:
        mc.free_model(model)


K_SIZES = {True: (2, 5, 9, 16, 17), False: (2, 4, 17)}


@pytest.mark.parametrize("repack", [True, False], ids=["repacked", "gguf-layout"])
def test_verify_batch_rows_equal_one_by_one_decodes_through_the_k_quant_kernels(built_in_q4_k_m, repack):
    """2- to 17-token batches (a verify of 1 to 16 drafts; 17 rows: 16 columns + 1 in the multi-column
    products) on a Q4_K_M model (patch 0019: before it, ggml-cpu's repacked Q4_K gemm from 4 rows and its
    tiled K-quant matmul from 8 rows rounded differently from the one-row kernels, and greedy MTP output
    diverged from MTP off). Repacked: the many-row Q4_K gemv over weight slices (patch 0019); in the GGUF
    layout: the multi-column Q4_K dot product (patch 0035); the Q6_K matrices take the multi-column Q6_K
    dot product in both."""
    import gguf

    if NGL:
        pytest.skip("a CPU kernel path")
    types = {t.tensor_type for t in gguf.GGUFReader(str(built_in_q4_k_m)).tensors}
    assert {gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K} <= types
    assert_verify_rows_equal_one_by_one(built_in_q4_k_m, sizes=K_SIZES[repack], repack=repack)


def test_verify_batch_rows_equal_one_by_one_decodes_on_a_q5_k_model(tmp_path):
    """The built-in model requantized to Q5_K_M (Q5_K matrices, Q6_K for the rest): every row of 2- to
    17-token batches rounds like a one-token decode through the multi-column Q5_K dot product."""
    import gguf

    from pymtp import default_model
    from pymtp_devtools.requant import llama_quantize

    if NGL:
        pytest.skip("a CPU kernel path")
    path = tmp_path / "smol-q5_k_m.gguf"
    llama_quantize(default_model.default_model_path(progress=False), path, "Q5_K_M")
    types = {t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}
    assert gguf.GGMLQuantizationType.Q5_K in types
    assert_verify_rows_equal_one_by_one(path, sizes=(2, 7, 17))


@pytest.mark.parametrize("k", [3])
def test_greedy_chat_identical_on_the_q4_k_m_model(built_in_q4_k_m, k):
    """End to end on the K-quant kernels (repacked Q4_K over weight slices, multi-column Q6_K)."""
    from pymtp import default_model

    assert_greedy_chat_identical(built_in_q4_k_m, k, QUESTIONS[:1], mtp_head=default_model.SHIPPED_HEAD)


def test_verify_batch_rows_equal_one_by_one_decodes_on_the_built_in_q4_1_model():
    """The built-in model itself (Q4_1 matrices, the Q8_0 output): every row of a verify of 1 to 16 drafts
    rounds exactly like a one-token decode. A one-token decode runs ggml's dot products (vec_dot); a verify
    batch of up to 32 rows runs them too, not tinyBLAS (patch 0036), each weight row against all columns at
    once through the multi-column Q4_1 and Q8_0 dot products (patch 0035). (A 1-ulp change in one product of
    a 2-row batch fails it.)"""
    import gguf

    from pymtp import default_model

    if NGL:
        pytest.skip("a CPU kernel path")
    path = default_model.default_model_path(progress=False)
    types = {t.tensor_type for t in gguf.GGUFReader(str(path)).tensors}
    assert gguf.GGMLQuantizationType.Q4_1 in types
    assert_verify_rows_equal_one_by_one(path, sizes=(2, 3, 4, 5, 6, 7, 8, 9, 17))
