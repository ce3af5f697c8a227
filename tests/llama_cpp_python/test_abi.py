"""pymtp's libllama is ABI-compatible with the pinned llama.cpp: every struct, enum and function
declaration of the pristine include/llama.h is unchanged in the patched tree (pymtp only adds
functions and headers), so every binding of this llama.cpp version works on pymtp's library."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PATCHED = ROOT / "vendor" / "llama.cpp" / "include" / "llama.h"


@pytest.fixture(scope="module")
def headers(vendor_script) -> tuple[str, str]:
    vendor = vendor_script
    with tarfile.open(vendor.fetch_sdist(), "r:gz") as tar:  # the sha256-checked pinned sdist (cached)
        pristine = tar.extractfile(vendor.TREE_PREFIX + "include/llama.h").read().decode()
    assert PATCHED.is_file(), f"{PATCHED} is missing: the build (pip install .) prepares vendor/llama.cpp"
    return pristine, PATCHED.read_text()


def without_comments(src: str) -> str:
    src = re.sub(r"/\*.*?\*/", " ", src, flags=re.S)
    return re.sub(r"//[^\n]*", " ", src)


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def type_bodies(src: str) -> dict[str, str]:
    """'struct NAME' / 'enum NAME' -> its body, whitespace-normalised, comments dropped."""
    code = without_comments(src)
    out = {}
    for m in re.finditer(r"\b(struct|enum|union)\s+(\w+)\s*\{", code):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        out[f"{m.group(1)} {m.group(2)}"] = normalise(code[m.end():i - 1])
    return out


def declarations(src: str) -> set[str]:
    """Every LLAMA_API declaration, whitespace-normalised, comments dropped."""
    code = without_comments(src)
    return {normalise(m.group(0)) for m in re.finditer(r"LLAMA_API[^;{]*;", code)}


def test_parsers_see_the_header(headers):
    pristine, _ = headers
    bodies, decls = type_bodies(pristine), declarations(pristine)
    assert "struct llama_model_params" in bodies and "enum llama_vocab_type" in bodies
    assert any("llama_model_load_from_file" in d for d in decls) and len(decls) > 150


def test_upstream_structs_and_enums_are_unchanged(headers):
    pristine, patched = headers
    before, after = type_bodies(pristine), type_bodies(patched)
    changed = [name for name, body in before.items() if after.get(name) != body]
    assert not changed, f"pymtp's patches change upstream types of llama.h (an ABI break for bindings): {changed}"


def test_upstream_functions_keep_their_signatures(headers):
    pristine, patched = headers
    missing = declarations(pristine) - declarations(patched)
    assert not missing, f"upstream declarations changed or removed by pymtp's patches: {sorted(missing)[:5]}"


def test_the_check_would_catch_a_new_struct_field(headers):
    """The struct comparison fails on exactly what broke llama-cpp-python before: a trailing field."""
    pristine, _ = headers
    broken = pristine.replace("bool load_mtp;", "bool load_mtp;\n        const char * mtp_head_path;", 1)
    assert broken != pristine
    assert type_bodies(broken)["struct llama_model_params"] != type_bodies(pristine)["struct llama_model_params"]


def test_library_struct_sizes_match_the_bindings():
    """The loaded library was compiled with the upstream layouts the ctypes bindings mirror."""
    import ctypes as C

    from pymtp._native import llama as L

    lib = L.lib()
    assert lib.llama_mtp_abi_sizeof(2) == C.sizeof(L.llama_model_params)
    assert lib.llama_mtp_abi_sizeof(3) == C.sizeof(L.llama_context_params)
    assert [f[0] for f in L.llama_model_params._fields_][-1] == "load_mtp"  # upstream's last field
