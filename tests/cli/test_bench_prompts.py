"""MT-Bench prompts as the benchmarks read them: first turns and categories from the cached file, in
order; bench/acceptance.py's --by-category takes MT-Bench only; bench/auto_vs_off.py's --head refuses a bad spec."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pymtp.bench import prompts

REPO = Path(__file__).resolve().parents[2]


def test_mtbench_turns_and_categories_come_from_the_cached_rows_in_order(tmp_path, monkeypatch):
    rows = [{"question_id": 81, "category": "writing", "turns": ["Compose a blog post.", "Rewrite it."]},
            {"question_id": 111, "category": "math", "turns": ["What is 2 + 2?", "And 3 + 3?"]},
            {"question_id": 121, "category": "coding", "turns": ["Write a sort.", "Make it stable."]}]
    data = tmp_path / "data"
    data.mkdir()
    (data / "mt_bench_question.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    monkeypatch.setenv("PYMTP_CACHE_DIR", str(tmp_path))
    assert prompts.mtbench_questions() == ["Compose a blog post.", "What is 2 + 2?", "Write a sort."]
    assert prompts.mtbench_categories() == ["writing", "math", "coding"]
    assert prompts.load_prompts("mtbench") == prompts.mtbench_questions()


def test_acceptance_by_category_needs_mtbench():
    r = subprocess.run([sys.executable, str(REPO / "bench" / "acceptance.py"), "--prompts", "default",
                        "--by-category"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2
    assert "--by-category needs --prompts mtbench" in r.stderr


def test_auto_vs_off_head_needs_a_name_and_a_file():
    """bench/auto_vs_off.py --head NAME=HEAD.gguf: a spec without both (or with '@', which separates a run's
    configuration from its head), or naming no file, is refused before any model loads."""
    for spec in ("head.gguf", "=head.gguf", "a@b=head.gguf", "name="):
        r = subprocess.run([sys.executable, str(REPO / "bench" / "auto_vs_off.py"), "--head", spec],
                           capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 2, spec
        assert "--head: expected NAME=HEAD.gguf (NAME without '@')" in r.stderr
    r = subprocess.run([sys.executable, str(REPO / "bench" / "auto_vs_off.py"), "--head", "h=missing.gguf"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "--head h: no such file: missing.gguf" in r.stderr
