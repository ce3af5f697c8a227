"""bench/upstream_vs_pymtp.py, the benchmark every speed claim uses (docs/benchmarks.md, "How we measure"):
its configurations must run upstream at its best unless told otherwise, and bad ones fail before any build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import upstream_vs_pymtp as uvp  # noqa: E402

COMMON = ["-m", "M.gguf"]
SYNTH = ["--spec-synth-rates", "0.9,0.8,0.7"]


def argv(spec: str) -> list[str]:
    return uvp.server_argv(uvp.parse_config(spec, 3), Path("UP"), Path("PY"), COMMON, SYNTH)


def test_upstream_rows_run_with_backend_sampling_unless_told_not_to():
    assert argv("plain") == ["UP", *COMMON, "--backend-sampling"]
    up = argv("upstream")  # k from --n-draft
    assert up[:4] == ["UP", *COMMON, "--backend-sampling"] and up[-4:-2] == ["--spec-draft-n-max", "3"], up
    assert "--backend-sampling" not in argv("upstream:k=2:nobs")
    assert uvp.parse_config("upstream:k=2:nobs", 3).name == "upstream k=2 nobs"


def test_upstream_rows_get_one_synthetic_rate_per_draft_position():
    """upstream refuses --spec-synth-rates of another length than k; pymtp takes them all"""
    assert argv("upstream:k=1")[-2:] == ["--spec-synth-rates", "0.9"]
    assert argv("upstream:k=3")[-2:] == ["--spec-synth-rates", "0.9,0.8,0.7"]
    with pytest.raises(SystemExit, match="needs one per draft position"):
        argv("upstream:k=4")


def test_pymtp_rows():
    # the default: adaptive, nothing else; one synthetic rate per position up to its cap of 7, 0 past ours
    assert argv("pymtp") == ["PY", *COMMON, "--mtp", "--spec-synth-rates", "0.9,0.8,0.7,0,0,0,0"]
    assert argv("pymtp:k=2")[-2:] == ["--spec-synth-rates", "0.9,0.8"]
    assert argv("pymtp:k=3")[3:7] == ["--mtp", "--mtp-adaptive", "off", "--mtp-n-draft"]
    assert argv("pymtp:cap=2")[3:6] == ["--mtp", "--mtp-n-draft", "2"]
    assert argv("pymtp-off") == ["PY", *COMMON]
    c = uvp.parse_config("pymtp:env=PYMTP_ADAPTIVE_START=0:env=PYMTP_ADAPTIVE_TRACE=/t.tsv", 3)
    assert c.env == {"PYMTP_ADAPTIVE_START": "0", "PYMTP_ADAPTIVE_TRACE": "/t.tsv"}
    assert c.name == "pymtp default PYMTP_ADAPTIVE_START=0"   # a trace file does not name a row


@pytest.mark.parametrize("spec, message", [
    ("foo", "the kind must be one of"), ("pymtp:k=x", "whole number"), ("plain:k=3", "k= is for"),
    ("pymtp:k=3:cap=2", "cap= is for"), ("upstream:k=0", "1..16"), ("pymtp:zzz", "unknown option"),
    ("pymtp:env=X", "VAR=VALUE"),
])
def test_bad_configurations_say_what_is_wrong(spec, message):
    with pytest.raises(ValueError, match=message):
        uvp.parse_config(spec, 3)


def test_the_script_refuses_bad_configurations_before_building_anything(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "upstream_vs_pymtp.py"), str(tmp_path / "m.gguf"),
                        "--configs", "plain,pymtp:k=3,pymtp:k=3"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "share a name" in r.stderr, r.stderr
