"""MTP on and off feed the target the same batches, so the target computes the same bits.

llama.cpp's CPU kernels are not batch-size invariant: e.g. flash attention runs a tiled kernel
for 64 or more query rows and another one below that, and the two round differently. A token
decoded in a chunk of another size gets different logits (and KV), and greedy near-ties then
flip. The engine must therefore decode exactly the same prompt chunks with and without MTP,
also when it reuses a cached prefix. These tests compare the target's logits bit for bit
after each prefill of a sequence of prompts that exercises every kind of reuse.
"""

from __future__ import annotations

import numpy as np
import pytest

import pymtp
from gpu import NGL
from pymtp._native import llama as L

pytestmark = pytest.mark.gpu

TEXT_A = ("The old lighthouse keeper climbed the stairs every evening, counting the steps and listening "
          "to the waves below. He kept a notebook of ships, storms and the colours of the sky, and on "
          "quiet nights he wrote letters to his sister in the city, telling her about the seals that "
          "slept on the rocks and the fishermen who waved as they passed the point at dawn.")
TEXT_B = ("A train station at rush hour is a machine made of people: doors open, crowds pour out, "
          "announcements echo under the glass roof, coffee cups steam in cold hands, and every few "
          "minutes the whole hall breathes in and out as another train arrives and leaves again for "
          "the suburbs, the airport, the coast and the mountains beyond the river, while pigeons "
          "wait under the benches for crumbs.")
FA_TILE_Q = 64  # ggml-cpu's GGML_FA_TILE_Q: chunks of >= 64 rows take the tiled attention kernel


def prefill_logits(model: pymtp.Model, tokens: list[int]) -> np.ndarray:
    rt = model.rt
    arr = (L.llama_token * len(tokens))(*tokens)
    assert rt.lib.llama_mtp_prefill(rt.engine, arr, len(tokens)) == L.MTP_OK
    return np.ctypeslib.as_array(rt.lib.llama_get_logits_ith(rt.ctx, -1), shape=(rt.n_vocab,)).copy()


def prompt_sequence(model: pymtp.Model) -> list[list[int]]:
    a, b = model.tokenize(TEXT_A), model.tokenize(TEXT_B, add_special=False)
    assert len(a) > 40 and len(b) >= FA_TILE_Q and a[20] != b[0]
    return [
        a,                              # cold
        a,                              # the same prompt again: only its last token is decoded again
        a + b[:1],                      # one more token
        a[:20] + b[:FA_TILE_Q - 1],     # a new suffix after a shared prefix, one row short of a tile
        a[:20] + b[:FA_TILE_Q],         # ... and exactly a tile
        a[:-7],                         # a shorter prompt (rewind)
    ]


@pytest.mark.parametrize("arch", ["glm4moe", "qwen35", "step35", "built-in"])
def test_prefill_with_reuse_gives_bitwise_equal_logits(arch, tiny_model_path):
    """Tiny random models of three archs (qwen35: recurrent hybrid), and the real Q4_1 SmolLM2 + head."""
    if arch == "built-in":
        from pymtp import default_model

        path = default_model.default_model_path(progress=False)
    else:
        path = tiny_model_path(arch)
    opts = dict(n_ctx=512, n_batch=128, n_threads=1, n_gpu_layers=NGL)
    with pymtp.Model(path, mtp="on", n_draft=3, **opts) as on, pymtp.Model(path, mtp="off", **opts) as off:
        for i, prompt in enumerate(prompt_sequence(off)):
            a, b = prefill_logits(off, prompt), prefill_logits(on, prompt)
            if NGL:
                # CUDA: the target graph that also outputs the nextn states (MTP on) may fuse kernels
                # differently and round differently in the last bits (glm4moe on an H100: 0.013); the
                # same chunks still give the same decisions. Bitwise equality is the CPU guarantee.
                assert np.abs(a - b).max() < 0.05 and a.argmax() == b.argmax(), (
                    f"{arch}: target logits differ after prefill #{i}: max |diff| {np.abs(a - b).max():.3g}")
                continue
            assert np.array_equal(a, b), (
                f"{arch}: target logits differ after prefill #{i} ({len(prompt)} tokens), "
                f"max |diff| {np.abs(a - b).max():.3g}")


@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen2", "qwen3"])
def test_a_prompts_output_row_takes_the_plain_last_layer_and_every_hidden_state_is_kept(arch, tmp_path):
    """Patch 0031: a dense target that keeps every row's hidden state (MTP on's) and wants one row's logits (a
    prompt) runs its last layer's tail twice, on every row for the hidden states and on the output row alone for
    the logits. The output row's logits equal a plain context's, and every row's hidden state equals what a decode
    with every row an output (one tail) keeps. (On a GPU the first is what the patch is for: the FFN of a prompt-
    sized batch runs other kernels than a one-row one. The CPU's kernels agree either way; the second fails if the
    two tails are mixed up.)"""
    from pymtp._native import model_calls as M
    from pymtp_devtools.tiny_dense import make_tiny_dense

    model = M.load_model(make_tiny_dense(arch, tmp_path / f"{arch}.gguf", seed=11), n_gpu_layers=NGL)
    lib, n_embd = L.lib(), M.model_n_embd(model)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    prompt = [(5 + 29 * i) % n_vocab for i in range(24)]
    plain, split, every = (M.new_context(model, 64, engine_attention=True) for _ in range(3))
    try:
        M.set_nextn_outputs(split, True)
        M.set_nextn_outputs(every, True)
        M.decode(plain, prompt, 0, outputs=[len(prompt) - 1])
        M.decode(split, prompt, 0, outputs=[len(prompt) - 1])
        M.decode(every, prompt, 0)

        def last_row(ctx):
            return np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()

        assert np.array_equal(last_row(split), last_row(plain))
        if not NGL:   # on a GPU `every` runs the output row's FFN in a 24-row batch: other kernels
            assert np.array_equal(last_row(split), last_row(every))
        h_split = np.array(M.nextn_rows(split, len(prompt), n_embd))
        h_every = np.array(M.nextn_rows(every, len(prompt), n_embd))
        assert h_split.shape == (len(prompt), n_embd) and np.isfinite(h_split).all()
        if NGL:   # the all-rows tail runs the same rows in both; on a GPU only the kernels' own rounding may differ
            assert np.abs(h_split - h_every).max() < 1e-3
        else:
            assert np.array_equal(h_split, h_every)
    finally:
        for ctx in (plain, split, every):
            M.free_context(ctx)
        M.free_model(model)
