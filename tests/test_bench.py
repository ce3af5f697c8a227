"""`pymtp bench` runs end to end on a tiny model and reports side-by-side ratios."""

from __future__ import annotations

import json

from pymtp.cli.main import main


def test_bench_tiny_model(tiny_model_path, tmp_path, capsys):
    out = tmp_path / "bench.json"
    rc = main(["bench", str(tiny_model_path("glm4moe")), "--no-chat", "--limit", "3", "-n", "24",
               "--n-drafts", "1,3", "--threads", "1", "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "greedy outputs identical across configurations: yes" in text
    data = json.loads(out.read_text())
    rows = {r["config"]: r for r in data["results"]}
    assert set(rows) == {"off", "mtp k=1", "mtp k=3"}
    assert rows["off"]["mean_accepted_length"] == 1.0
    for k in (1, 3):
        r = rows[f"mtp k={k}"]
        assert r["n_prompts"] == 3 and r["speedup"] > 0
        assert 1.0 <= r["mean_accepted_length"] <= k + 1
        assert len(r["accept_per_position"]) == k
        assert r["draft_cost_D"] > 0 and r["verify_cost_V"] > 0


def test_bench_rejects_bad_draft_list(tiny_model_path, capsys):
    rc = main(["bench", str(tiny_model_path("glm4moe")), "--n-drafts", "0,99"])
    assert rc == 1
    assert "--n-drafts" in capsys.readouterr().err
