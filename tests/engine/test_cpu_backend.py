"""The CPU backend pymtp builds: without ggml's AMX kernels (CMakeLists.txt says why: upstream's AMX
mat-mul segfaults on Sapphire-Rapids-class CPUs, and its small-batch kernels would break the batch
invariance that greedy losslessness rests on), every other native feature kept."""

from __future__ import annotations

import ctypes
from pathlib import Path

from pymtp._native import lib as native


def system_info() -> str:
    so = native.load()
    so.llama_print_system_info.restype = ctypes.c_char_p
    so.llama_print_system_info.argtypes = []
    return so.llama_print_system_info().decode()


def cpu_flags() -> set[str]:
    info = Path("/proc/cpuinfo")
    if not info.is_file():
        return set()
    return {f for line in info.read_text().splitlines() if line.startswith("flags") for f in line.split()[2:]}


def test_cpu_backend_has_no_amx_kernels():
    info = system_info()
    assert "CPU" in info, info
    assert "AMX_INT8 = 1" not in info, f"ggml-cpu was built with AMX kernels: {info}"


def test_other_native_features_stay_on():
    flags, info = cpu_flags(), system_info()
    if "avx2" in flags:  # -mno-amx-* must not have cost the rest of -march=native
        assert "AVX2 = 1" in info, info
    if "avx512f" in flags:
        assert "AVX512 = 1" in info, info
