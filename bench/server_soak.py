#!/usr/bin/env python3
"""Soak llama-server --mtp with mixed requests and check every answer and the server's memory.

A server with --mtp and N slots (default 4) and one without take the same mix of requests from N
clients at once: /completion (plain and streaming), /v1/completions, /v1/chat/completions, streams
the client hangs up on, greedy and seeded sampling, penalties, n_probs, and every per-request
mtp_* key. Every answer that is a function of the request is checked:
  - at T=0, and at T>0 with greedy or chain drafts (verified by exact match, so the request's
    own sampler draws exactly as without MTP): equal to the MTP-off server's answer;
  - at T>0 with stochastic drafts (rejection sampling draws differently): equal to the first
    answer the MTP server gave to the same request (seeded, so deterministic);
  - a hung-up stream: only that the server is still healthy afterwards.
Resident memory of the MTP server is read after a warm-up (every distinct request once) and at
the end. The report is one JSON object; the exit code is 1 if any answer was wrong or failed.

    python bench/server_soak.py [MODEL] [--requests 1000] [--parallel 4] [--out soak.json]

MODEL defaults to a tiny random-weight glm4moe with a planted MTP head (made on the fly).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import random
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from pymtp.server import free_port, plan_launch, start_server, stop_server, wait_until_ready

PROMPTS = ["Hello world", "The capital of France is", "1, 2, 3, 4,", "Once upon a time there",
           "def fibonacci(n):", "SELECT name FROM users WHERE", "Roses are red,", "The weather today"]
ENDPOINTS = ("completion", "completion-stream", "oai", "chat", "hang-up")
SAMPLING = ({"temperature": 0}, {"temperature": 0, "repeat_penalty": 1.2}, {"top_k": 1, "temperature": 0.7},
            {"temperature": 0.8, "seed": 1}, {"temperature": 0.8, "seed": 2}, {"temperature": 0.6, "seed": 3,
                                                                                   "top_p": 0.9})
MTP_KEYS = ({}, {"mtp_draft": "greedy"}, {"mtp_draft": "chain"}, {"mtp_draft": "stochastic"},
            {"mtp_draft": "auto"}, {"mtp_n_draft": 0}, {"mtp_n_draft": 1}, {"mtp_n_draft": 2})


class Server:
    def __init__(self, model: Path, mtp: str, parallel: int, ctx: int, log: Path) -> None:
        launch = plan_launch(model, port=free_port(), mtp=mtp, n_draft=3, ctx=ctx, parallel=parallel,
                             threads=1, extra=["--no-webui"])
        self.url, self.log = launch.url, open(log, "wb")
        self.proc = start_server(launch.argv, stdout=self.log, stderr=-2)
        wait_until_ready(self.url, self.proc, timeout=300)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
        return float("nan")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=10) as r:
                return r.status == 200
        except OSError:
            return False

    def stop(self) -> None:
        stop_server(self.proc)
        self.log.close()


def make_request(rng: random.Random) -> dict:
    return {"endpoint": rng.choice(ENDPOINTS), "prompt": rng.choice(PROMPTS), "n": rng.choice((8, 16, 32)),
            "sampling": rng.choice(SAMPLING), "mtp": rng.choice(MTP_KEYS), "n_probs": rng.choice((0, 0, 2))}


def key(req: dict) -> str:
    return json.dumps(req, sort_keys=True)


def send(server: Server, req: dict, with_mtp_keys: bool) -> str | None:
    """The answer's text (and probabilities, when asked), or None for a stream the client hung up on."""
    ep, extra = req["endpoint"], dict(req["sampling"], **(req["mtp"] if with_mtp_keys else {}))
    if ep == "chat":
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": req["prompt"]}],
                                             "max_tokens": req["n"], **extra}
        if req["n_probs"]:
            body.update(logprobs=True, top_logprobs=req["n_probs"])
    elif ep == "oai":
        path, body = "/v1/completions", {"prompt": req["prompt"], "max_tokens": req["n"], **extra}
        if req["n_probs"]:
            body["logprobs"] = req["n_probs"]
    else:
        path, body = "/completion", {"prompt": req["prompt"], "n_predict": req["n"], "n_probs": req["n_probs"],
                                     "stream": ep != "completion", **extra}
    r = urllib.request.urlopen(urllib.request.Request(server.url + path, data=json.dumps(body).encode(),
                                                      headers={"Content-Type": "application/json"}), timeout=300)
    with r:
        if ep == "hang-up":
            r.readline()
            return None
        if not body.get("stream"):
            out = json.loads(r.read())
            choice = out.get("choices", [{}])[0]
            text = out.get("content", choice.get("text", (choice.get("message") or {}).get("content")))
            probs = out.get("completion_probabilities", choice.get("logprobs"))
            return json.dumps([text, probs])
        text, probs = "", []
        for line in r:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                ev = json.loads(line[6:])
                text += ev.get("content", "")
                probs += ev.get("completion_probabilities", [])
        return json.dumps([text, probs])


def expected_same_as_off(req: dict) -> bool:
    """Answers a run without MTP must reproduce: greedy, or sampled with exact-match verification."""
    stochastic = req["mtp"].get("mtp_draft") in ("stochastic", "auto") or not req["mtp"].get("mtp_draft")
    return req["sampling"].get("temperature", 0) == 0 or req["sampling"].get("top_k") == 1 or not stochastic


def run_soak(model: Path, n_requests: int, parallel: int, log_dir: Path, seed: int = 0, ctx: int = 512,
             warmup: bool = True) -> dict:
    rng = random.Random(seed)
    on = Server(model, "on", parallel, ctx, log_dir / "soak-on.log")
    off = Server(model, "off", parallel, ctx, log_dir / "soak-off.log")
    refs_off: dict[str, str] = {}
    refs_on: dict[str, str] = {}
    lock = threading.Lock()
    errors: list[str] = []
    counts = {"checked_vs_off": 0, "checked_vs_first": 0, "hung_up": 0}

    def reference_off(req: dict) -> str:
        k = key(dict(req, mtp={}))
        with lock:
            if k in refs_off:
                return refs_off[k]
        ans = send(off, req, with_mtp_keys=False)
        with lock:
            refs_off.setdefault(k, ans)
            return refs_off[k]

    def one(req: dict) -> None:
        try:
            got = send(on, req, with_mtp_keys=True)
            if got is None:
                with lock:
                    counts["hung_up"] += 1
                return
            if expected_same_as_off(req):
                ok, what = got == reference_off(req), "vs off"
                with lock:
                    counts["checked_vs_off"] += 1
            else:
                with lock:
                    first = refs_on.setdefault(key(req), got)
                    counts["checked_vs_first"] += 1
                ok, what = got == first, "vs the first answer"
            if not ok:
                with lock:
                    errors.append(f"wrong answer ({what}): {key(req)}")
        except (OSError, ValueError) as e:
            with lock:
                errors.append(f"{type(e).__name__} {e}: {key(req)}")

    try:
        t0 = time.monotonic()
        if warmup:  # every kind of request once, so caches reach their size before memory is read
            distinct = [make_request(rng) for _ in range(100)]
            with cf.ThreadPoolExecutor(parallel) as pool:
                list(pool.map(one, distinct))
        rss_before = on.rss_mb()
        reqs = [make_request(rng) for _ in range(n_requests)]
        with cf.ThreadPoolExecutor(parallel) as pool:
            list(pool.map(one, reqs))
        healthy = on.healthy() and off.healthy()
        rss_after = on.rss_mb()
        return {"requests": n_requests, "parallel": parallel, "errors": len(errors), "error_samples": errors[:5],
                **counts, "rss_mb_before": round(rss_before, 1), "rss_mb_after": round(rss_after, 1),
                "healthy_after": healthy, "wall_s": round(time.monotonic() - t0, 1)}
    finally:
        on.stop()
        off.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", help="GGUF with MTP layers (default: a tiny planted glm4moe)")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="also write the report here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="pymtp-soak-") as d:
        model = Path(args.model) if args.model else None
        if model is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
            from pymtp_devtools.tiny_models import make_tiny_model

            model = make_tiny_model("glm4moe", Path(d) / "tiny-glm4moe.gguf", seed=1234, head="planted")
        report = run_soak(model, args.requests, args.parallel, Path(d), seed=args.seed)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 1 if report["errors"] or not report["healthy_after"] else 0


if __name__ == "__main__":
    sys.exit(main())
