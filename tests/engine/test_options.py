"""One vocabulary: pymtp/options.py mirrors what the native engine defines (llama-mtp.h), and the
"auto" draft-mode rule is the engine's (the same call llama-server makes)."""

from __future__ import annotations

import pytest

from pymtp import options
from pymtp._native import llama as L
from pymtp.engine.sampling import resolve_draft_mode
from pymtp.errors import InvalidArgumentError
from pymtp.options import DraftLength


def native_names(name_of) -> dict[str, int]:
    """Every (name, value) the engine names, looked up over the range its enums use."""
    out = {}
    for value in range(-4, 128):
        name = name_of(value)
        if name is not None:
            out[name.decode()] = value
    return out


def test_draft_modes_and_limit_mirror_the_engine():
    lib = L.lib()
    native = native_names(lib.llama_mtp_draft_mode_name)
    assert native.pop("auto") == -1
    assert native == options.DRAFT_MODES
    assert tuple(["auto", *native]) == options.DRAFT_CHOICES
    for name, value in options.DRAFT_MODES.items():
        assert lib.llama_mtp_draft_mode_from_name(name.encode()) == value
    assert lib.llama_mtp_draft_mode_from_name(b"greedyy") == L.MTP_ERR_ARG
    assert lib.llama_mtp_draft_limit() == options.MAX_DRAFT == L.MTP_MAX_DRAFT
    assert lib.llama_mtp_default_params().n_draft == options.FIXED_N_DRAFT
    assert lib.llama_mtp_adaptive_default_max() == options.ADAPTIVE_MAX_DRAFT == DraftLength.parse("auto").cap


@pytest.mark.parametrize("value,expected", [("auto", "auto"), ("AUTO", "auto"), (" auto ", "auto"), (0, 0),
                                            ("3", 3), (16, 16)])
def test_n_draft_parses_auto_or_a_length(value, expected):
    length = DraftLength.parse(value)
    assert length.value == expected and length.adaptive == isinstance(expected, str)
    assert length.cap == (options.ADAPTIVE_MAX_DRAFT if length.adaptive else expected)
    assert str(length) == str(expected)                         # what users type
    assert DraftLength.parse(str(length)) == length             # ... and parses back to the same length
    assert DraftLength.parse(length) is length                  # parsed once: a DraftLength passes through


@pytest.mark.parametrize("value", [-1, 17, "fast", "", 2.5, True, None])
def test_n_draft_rejects_anything_else_with_the_choices(value):
    with pytest.raises(InvalidArgumentError, match="'auto' or a number 0..16"):
        DraftLength.parse(value)


@pytest.mark.parametrize("adaptive,cap", [(False, 17), (False, -1), (True, 3), (False, True)])
def test_a_draft_length_is_only_what_parse_can_give(adaptive, cap):
    with pytest.raises(ValueError):
        DraftLength(adaptive=adaptive, cap=cap)


def test_head_policies_mirror_the_engine():
    lib = L.lib()
    assert native_names(lib.llama_mtp_head_policy_name) == options.HEAD_POLICIES
    assert lib.llama_mtp_head_policy_from_name(b"last") == L.MTP_ERR_ARG
    assert lib.llama_mtp_head_policy_from_name(None) == L.MTP_ERR_ARG


@pytest.mark.parametrize("temperature,repeat_penalty,expected", [
    (0.0, 1.0, "greedy"), (0.0, 1.1, "chain"), (0.7, 1.0, "stochastic"), (0.7, 1.1, "stochastic"),
])
def test_auto_is_the_engines_rule(temperature, repeat_penalty, expected):
    assert resolve_draft_mode("auto", temperature, repeat_penalty) == expected
    assert resolve_draft_mode("chain", temperature, repeat_penalty) == "chain"  # an explicit mode stays


def test_unknown_draft_mode_is_a_clear_error():
    with pytest.raises(InvalidArgumentError, match="draft must be one of auto, greedy, chain, stochastic"):
        resolve_draft_mode("fast", 0.0, 1.0)


def test_native_choices_strings_match_the_python_lists():
    """llama-server's flag and request errors list the same choices as the Python CLI."""
    lib = L.lib()
    assert lib.llama_mtp_draft_choices().decode() == ", ".join(options.DRAFT_CHOICES)
    assert lib.llama_mtp_head_policy_choices().decode() == ", ".join(options.HEAD_POLICIES)
