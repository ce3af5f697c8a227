"""`pymtp bench` runs end to end on a tiny model and reports side-by-side ratios."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pymtp.bench.runner import balanced_orders
from pymtp.cli.main import main


def test_bench_tiny_model(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", str(tiny_model_path("glm4moe")), "--no-chat", "--limit", "3", "-n", "24",
               "--n-drafts", "1,3", "--threads", "1", "--json", str(out)])
    assert rc == 0
    captured = capsys.readouterr()
    text = captured.out
    assert "greedy outputs identical across configurations (rp=1): yes" in text
    # not a terminal: the progress comes as whole lines, never run together with \r
    progress = [ln for ln in captured.err.splitlines() if ln.startswith("bench:")]
    assert progress and progress[-1] == "bench: 9/9 runs" and "\r" not in captured.err
    assert all(ln.count("bench:") == 1 for ln in progress)
    data = json.loads(out.read_text())
    rows = {r["config"]: r for r in data["results"]}
    assert set(rows) == {"off T=0 rp=1", "mtp greedy k=1 T=0 rp=1", "mtp greedy k=3 T=0 rp=1"}
    assert rows["off T=0 rp=1"]["mean_accepted_length"] == 1.0
    for k in (1, 3):
        r = rows[f"mtp greedy k={k} T=0 rp=1"]
        assert r["n_prompts"] == 3 and r["speedup"] > 0
        assert 1.0 <= r["mean_accepted_length"] <= k + 1
        assert len(r["accept_per_position"]) == k
        assert r["draft_cost_D"] > 0 and r["verify_cost_V"] > 0


def test_bench_sweeps_modes_and_temperatures(tiny_model_path, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    rc = main(["bench", str(tiny_model_path("glm4moe")), "--no-chat", "--limit", "2", "-n", "16",
               "--n-drafts", "2", "--modes", "greedy,stochastic", "--temps", "0,0.9",
               "--repeat-penalties", "1,1.1", "--seed", "5", "--threads", "1",
               "--json", str(out), "--plot", str(png)])
    assert rc == 0
    text = capsys.readouterr().out
    # greedy drafting and stochastic drafting both verify exactly at T=0
    assert "greedy outputs identical across configurations (rp=1): yes" in text
    assert "greedy outputs identical across configurations (rp=1.1): yes" in text
    data = json.loads(out.read_text())
    rows = data["results"]
    # per setting: one baseline and one row per mode
    assert len(rows) == 2 * 2 * (1 + 2)
    for r in rows:
        assert r["n_prompts"] == 2
        if r["mtp"]:
            assert r["speedup"] > 0 and 1.0 <= r["mean_accepted_length"] <= 3
    hot = [r for r in rows if r["temperature"] == 0.9]
    assert {r["draft"] for r in hot} == {"off", "greedy", "stochastic"}
    assert {(s["temperature"], s["repeat_penalty"], s["draft"]) for s in data["summary"]} == {
        (t, rp, m) for t in (0, 0.9) for rp in (1, 1.1) for m in ("greedy", "stochastic")}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, word", [
    (["--n-drafts", "0,99"], "--n-drafts"),
    (["--modes", "greedy,fast"], "--modes"),
    (["--temps", "0,-1"], "--temps"),
    (["--repeat-penalties", "x"], "--repeat-penalties"),
])
def test_bench_rejects_bad_lists(tiny_model_path, capsys, flags, word):
    rc = main(["bench", str(tiny_model_path("glm4moe")), *flags])
    assert rc == 1
    assert word in capsys.readouterr().err


def test_bench_synthetic_acceptance_follows_the_rates(tiny_model_path, tmp_path, capsys):
    """Random heads accept ~nothing; synthetic rates make the engine accept at the given rates."""
    out = tmp_path / "synth.json"
    rc = main(["bench", str(tiny_model_path("glm4moe", head="random")), "--no-chat", "--limit", "3", "-n", "60",
               "--n-drafts", "2", "--synthetic-rates", "1,1", "--threads", "1", "--json", str(out)])
    assert rc == 0
    assert "MTP outputs are not the model's" in capsys.readouterr().out
    data = json.loads(out.read_text())
    row = next(r for r in data["results"] if r["mtp"])
    assert data["meta"]["synthetic_rates"] == [1.0, 1.0]
    # every draft accepted (bar drafted end-of-generation tokens, never accepted)
    assert row["accept_per_position"][0] > 0.9 and row["mean_accepted_length"] > 2.7


@pytest.mark.parametrize("n", range(1, 10))
def test_configurations_run_in_every_place_and_after_every_other_equally_often(n):
    """pymtp bench and bench/auto_vs_off.py run each prompt's configurations in one of these orders: every
    configuration in every place, and right after every other one, equally often (a plain rotation put
    each one after the same one every time: on an H200 a Model ran ~2.5% faster right after `auto`)."""
    orders = balanced_orders(n)
    assert all(sorted(o) == list(range(n)) for o in orders)
    places = Counter((p, x) for o in orders for p, x in enumerate(o))
    assert len(places) == n * n and len(set(places.values())) == 1
    follows = Counter(pair for o in orders for pair in zip(o, o[1:]))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) <= 1
