"""ggml-cpu's multi-column dot products (issue 67): one weight row against 1..16 activation columns, each
weight block unpacked once, must give every column bitwise the result of the one-column kernel that a
one-token decode runs (ggml_vec_dot_*), on random blocks of every covered type. Called through ctypes on
the built libggml-cpu; tests/engine/test_real_model_lossless.py checks whole verify batches on real models."""

from __future__ import annotations

import ctypes as C

import numpy as np
import pytest

from pymtp._native import lib as native

QK_K = 256
# (weight type, activation type, block elements, weight block bytes, activation block bytes)
TYPES = {
    "q8_0": ("q8_0", 32, 34, 34),
    "q4_1": ("q8_1", 32, 20, 36),
    "q4_K": ("q8_K", QK_K, 144, 292),
    "q5_K": ("q8_K", QK_K, 176, 292),
    "q6_K": ("q8_K", QK_K, 210, 292),
}


def cpu_lib():
    native.load()  # loads libggml-cpu with libllama
    path = next(native.lib_dir().glob("libggml-cpu.so*"), None)
    if path is None:
        pytest.skip(f"no libggml-cpu.so in {native.lib_dir()}")
    so = C.CDLL(str(path))
    so.ggml_cpu_init()  # the FP16 tables and CPU feature flags the kernels use
    if not hasattr(so, "ggml_vec_dot_q6_K_q8_K_mc"):
        pytest.skip("no multi-column kernels in this build (x86 AVX2+FMA only)")
    return so


def f16(rng, shape, lo, hi):
    return rng.uniform(lo, hi, shape).astype(np.float16).view(np.uint8).reshape(*shape, 2)


def weight_blocks(name: str, rng, nb: int) -> np.ndarray:
    """nb random blocks: random quants and scale bytes, finite small fp16 super-block scales."""
    _, _, wb, _ = TYPES[name]
    b = rng.integers(0, 256, (nb, wb), dtype=np.uint8)
    if name == "q8_0":  # d (fp16), int8 qs[32]
        b[:, 0:2] = f16(rng, (nb,), 0.001, 0.02)
    elif name == "q4_1":
        b[:, 0:2] = f16(rng, (nb,), 0.001, 0.02)      # d
        b[:, 2:4] = f16(rng, (nb,), -0.1, 0.1)        # m
    elif name in ("q4_K", "q5_K"):
        b[:, 0:2] = f16(rng, (nb,), 0.001, 0.02)      # d
        b[:, 2:4] = f16(rng, (nb,), 0.001, 0.02)      # dmin
    else:  # q6_K: ql[128] qh[64] scales[16] (int8) d (fp16)
        b[:, 208:210] = f16(rng, (nb,), 0.001, 0.02)
    return b


def act_blocks(name: str, rng, nb: int) -> np.ndarray:
    at, _, _, ab = TYPES[name]
    b = rng.integers(-127, 128, (nb, ab), dtype=np.int8).view(np.uint8)
    if at == "q8_0":
        b[:, 0:2] = f16(rng, (nb,), 0.001, 0.05)      # d
    elif at == "q8_1":
        b[:, 0:2] = f16(rng, (nb,), 0.001, 0.05)      # d
        b[:, 2:4] = f16(rng, (nb,), -4.0, 4.0)        # s
    else:  # q8_K: float d, int8 qs[256], int16 bsums[16]
        b[:, 0:4] = rng.uniform(0.001, 0.05, nb).astype(np.float32).view(np.uint8).reshape(nb, 4)
        qs = b[:, 4:260].view(np.int8).astype(np.int16)
        b[:, 260:292] = qs.reshape(nb, 16, 16).sum(-1).astype(np.int16).view(np.uint8).reshape(nb, 32)
    return b


@pytest.mark.parametrize("name", sorted(TYPES))
def test_every_column_equals_the_one_column_kernel(name):
    so = cpu_lib()
    at, qk, _, ab = TYPES[name]
    one = getattr(so, f"ggml_vec_dot_{name}_{at}")
    multi = getattr(so, f"ggml_vec_dot_{name}_{at}_mc")
    one.argtypes = [C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_void_p, C.c_size_t, C.c_int]
    multi.argtypes = [C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_void_p, C.c_size_t, C.c_int]
    rng = np.random.default_rng(67)
    for n_blocks in (1, 3, 8, 24):
        n = n_blocks * qk
        for _ in range(3):
            w = weight_blocks(name, rng, n_blocks)
            ys = np.stack([act_blocks(name, rng, n_blocks) for _ in range(16)])  # 16 columns
            ref = np.zeros(16, np.float32)
            for c in range(16):
                one(n, ref[c:].ctypes.data, 0, w.ctypes.data, 0, ys[c].ctypes.data, 0, 1)
            assert np.isfinite(ref).all() and (ref != 0).any()
            for nc in range(1, 17):
                out = np.full(2 * 16, np.nan, np.float32)   # columns 2 floats apart: the stride is honoured
                multi(n, out.ctypes.data, 2, w.ctypes.data, ys.ctypes.data, n_blocks * ab, nc)
                np.testing.assert_array_equal(out[0:2 * nc:2], ref[:nc], err_msg=f"{name} n={n} nc={nc}")
                assert np.isnan(out[1::2]).all() and np.isnan(out[2 * nc::2]).all()


def test_repacked_q4_k_rows_equal_the_one_row_gemv():
    """The repack buffer's Q4_K layout (eight rows' blocks interleaved, q4_K_8x8): the many-row gemv gives
    every row of 1..16 rows bitwise the one-row gemv's outputs (patch 0019)."""
    so = cpu_lib()
    if not hasattr(so, "ggml_gemv_q4_K_8x8_q8_K_mc"):
        pytest.skip("no many-row Q4_K gemv in this build (x86 AVX2 only)")
    one, multi = so.ggml_gemv_q4_K_8x8_q8_K, so.ggml_gemv_q4_K_8x8_q8_K_mc
    for f in (one, multi):
        f.argtypes = [C.c_int, C.c_void_p, C.c_size_t, C.c_void_p, C.c_void_p, C.c_int, C.c_int]
    rng = np.random.default_rng(670)
    xb = 16 + 16 + 96 + 1024   # block_q4_Kx8: d[8], dmin[8] (fp16), scales[96], qs[1024]
    for nb, nc in ((1, 8), (3, 24), (8, 16)):
        n = nb * QK_K
        w = rng.integers(0, 256, (nc // 8, nb, xb), dtype=np.uint8)
        w[..., 0:16] = f16(rng, (nc // 8, nb, 8), 0.001, 0.02).reshape(nc // 8, nb, 16)
        w[..., 16:32] = f16(rng, (nc // 8, nb, 8), 0.001, 0.02).reshape(nc // 8, nb, 16)
        ys = np.stack([act_blocks("q4_K", rng, nb) for _ in range(16)])
        ref = np.zeros((16, nc), np.float32)
        for r in range(16):
            one(n, ref[r].ctypes.data, nc, w.ctypes.data, ys[r].ctypes.data, 1, nc)
        assert np.isfinite(ref).all() and (ref != 0).any()
        for nr in range(1, 17):
            out = np.full((16, nc + 8), np.nan, np.float32)   # rows nc + 8 floats apart: the stride is honoured
            multi(n, out.ctypes.data, nc + 8, w.ctypes.data, ys.ctypes.data, nr, nc)
            np.testing.assert_array_equal(out[:nr, :nc], ref[:nr], err_msg=f"nb={nb} nc={nc} nr={nr}")
            assert np.isnan(out[:, nc:]).all() and np.isnan(out[nr:]).all()
