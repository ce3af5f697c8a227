"""A bounded soak of llama-server --mtp (bench/server_soak.py): 1,000 mixed requests from 4 clients,
every checkable answer right, the server healthy and its resident memory flat afterwards."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RSS_GROWTH_MB = 16.0  # after the warm-up; the measured growth is ~1-2 MB (docs/results/server-soak-cpu.json)


def load_soak():
    spec = importlib.util.spec_from_file_location("server_soak", ROOT / "bench" / "server_soak.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_thousand_mixed_requests_all_right_and_memory_flat(tiny_model_path, tmp_path):
    report = load_soak().run_soak(tiny_model_path("glm4moe"), n_requests=1000, parallel=4, log_dir=tmp_path)
    print(json.dumps(report))
    assert report["errors"] == 0, report["error_samples"]
    assert report["healthy_after"]
    assert report["checked_vs_off"] > 300 and report["checked_vs_first"] > 200 and report["hung_up"] > 100
    assert report["rss_mb_after"] - report["rss_mb_before"] < RSS_GROWTH_MB, report
