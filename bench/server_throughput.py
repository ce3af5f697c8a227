#!/usr/bin/env python3
"""Aggregate llama-server throughput with and without --mtp, at 1 and N parallel slots.

For every slot count P, two servers run side by side on the same model (MTP off, MTP on),
both loaded before timing starts; rounds alternate between them (off, on, off, on, ...) so
machine drift hits both alike. In a round, P clients each send their share of the prompts
(OpenAI /v1/chat/completions, T=0 unless --temp) and the round's aggregate throughput is
generated tokens / wall time. The report gives tok/s per configuration, the on/off ratio
per slot count, and the MTP statistics the server returned (timings.mtp).

    python bench/server_throughput.py [MODEL] [--parallel 1,4] [--prompts mtbench] [-n 128]
        [--requests 16] [--rounds 2] [--threads 2] [--full-length 48] [--out result.json]

Where the two servers' texts differ (a GPU at several slots), --full-length N times only prompts that
both answer to the full -n tokens, so that neither server's rounds are short of tokens.

MODEL defaults to the built-in SmolLM2-135M-Instruct with its shipped head.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from pymtp.bench.prompts import load_prompts
from pymtp.server import free_port, plan_launch, start_server, stop_server, wait_until_ready


def add_server_options(ap: argparse.ArgumentParser) -> None:
    """The llama-server options that Server reads (bench/server_ab.py shares them)."""
    ap.add_argument("--ctx", type=int, default=2048, help="context per slot (default: 2048)")
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-cache", action="store_true", help="start llama-server with --no-cache-prompt")
    ap.add_argument("--server-args", default="", help="extra llama-server arguments, one string")


class Server:
    def __init__(self, model: Path, mtp: str, parallel: int, args, log_dir: Path, tag: str | None = None) -> None:
        launch = plan_launch(model, port=free_port(), mtp=mtp, n_draft=args.n_draft, ctx=args.ctx,
                             parallel=parallel, ngl=args.ngl, threads=args.threads,
                             extra=["--no-webui", *(["--no-cache-prompt"] if args.no_cache else []),
                                    *args.server_args.split()])
        self.url, self.mtp, self.parallel = launch.url, launch.mtp, parallel
        self.log_path = log_dir / f"{tag or mtp}-{parallel}.log"
        self.log = open(self.log_path, "wb")
        self.proc = start_server(launch.argv, stdout=self.log, stderr=subprocess.STDOUT)
        wait_until_ready(self.url, self.proc, timeout=600)

    def chat(self, prompt: str, n: int, temp: float, seed: int, extra: dict | None = None) -> dict:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "temperature": temp,
                "seed": seed, **(extra or {})}
        req = urllib.request.Request(self.url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            # what the server said and what it logged last: an HTTP 500 alone says nothing
            self.log.flush()
            tail = self.log_path.read_bytes()[-4000:].decode(errors="replace")
            raise RuntimeError(f"server {self.log_path.stem} answered HTTP {e.code}: "
                               f"{e.read().decode(errors='replace')[:2000]}\n--- its log ({self.log_path}) ends:\n"
                               f"{tail}") from None

    def stop(self) -> None:
        stop_server(self.proc, timeout=30)
        self.log.close()


def json_object(text: str) -> dict:
    """A JSON object from the command line (argparse type; bench/server_ab.py's --variant uses it too)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise argparse.ArgumentTypeError("is not a JSON object")
    return obj


def _adaptive_note(res: dict) -> str:
    """The controller's state after a round: plain share, steps asleep, and the windows' realized rates
    (one slot)."""
    m = res.get("mtp") or {}
    a = m.get("adaptive")
    if not a:
        return ""
    note = f"  plain {a['plain_share']:.0%} (last request), asleep {m['dormant_steps']} of {m['adaptive_steps']} steps"
    if a.get("realized_draft"):
        note += (f", windows: plain {1000 * a['realized_plain']:.0f} / drafting {1000 * a['realized_draft']:.0f}"
                 f" tok/s, {a['vetoed']} vetoed")
    return note


def run_round(server: Server, prompts: list[str], args) -> dict:
    """All prompts through `server.parallel` clients at once; aggregate tok/s and MTP stats (texts and
    token counts in the prompts' order)."""
    shares = [list(range(i, len(prompts), server.parallel)) for i in range(server.parallel)]

    extra = args.request if server.mtp else None

    def client(share: list[int]) -> list[tuple[int, dict]]:
        return [(j, server.chat(prompts[j], args.n, args.temp, args.seed + i, extra)) for i, j in enumerate(share)]

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(server.parallel) as ex:
        results = [r for _, r in sorted(x for f in [ex.submit(client, s) for s in shares] for x in f.result())]
    wall = time.perf_counter() - t0
    n_each = [r["usage"]["completion_tokens"] for r in results]
    n_gen = sum(n_each)
    mtp = [r["timings"].get("mtp") for r in results if r.get("timings", {}).get("mtp")]
    out = {"wall_s": wall, "tokens": n_gen, "tok_s": n_gen / wall, "n_each": n_each,
           "texts": [r["choices"][0]["message"]["content"] for r in results]}
    if mtp:
        steps = sum(m["steps"] for m in mtp)
        out["mtp"] = {"drafted": sum(m["drafted"] for m in mtp), "accepted": sum(m["accepted"] for m in mtp),
                      "steps": steps,
                      "mean_accepted_length": 1 + sum(m["accepted"] for m in mtp) / max(steps, 1),
                      "draft_ms": sum(m["draft_ms"] for m in mtp), "verify_ms": sum(m["verify_ms"] for m in mtp),
                      # the controller's state after the round's last request (learned estimates persist)
                      "adaptive": mtp[-1].get("adaptive"),
                      # steps decoded with the MTP side asleep (a server of one slot), over the round
                      "dormant_steps": sum((m.get("adaptive") or {}).get("dormant_steps", 0) for m in mtp),
                      "adaptive_steps": sum(sum((m.get("adaptive") or {}).get("steps_per_draft_length", []))
                                            for m in mtp)}
    return out


def full_length_prompts(servers, prompts: list[str], args) -> list[str]:
    """The first --requests prompts that every server answers to the full -n tokens (an untimed pass)."""
    full = [all(n == args.n for n in ns) for ns in zip(*(run_round(s, prompts, args)["n_each"] for s in servers))]
    kept = [p for p, ok in zip(prompts, full) if ok][: args.requests]
    print(f"  full-length prompts: {sum(full)} of {len(prompts)} answered to {args.n} tokens by every server, "
          f"timing {len(kept)}", file=sys.stderr)
    if len(kept) < args.requests:
        raise SystemExit(f"only {len(kept)} of the first {len(prompts)} prompts are answered to {args.n} tokens by "
                         f"every server; raise --full-length or lower -n")
    return kept


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--parallel", default="1,4", help="slot counts, comma-separated (default: 1,4)")
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--requests", type=int, default=16, help="prompts per round (default: 16)")
    ap.add_argument("--rounds", type=int, default=2, help="rounds per configuration (default: 2)")
    ap.add_argument("-n", type=int, default=128, help="max tokens per request (default: 128)")
    ap.add_argument("--n-draft", default="auto",
                    help="auto (the engine's adaptive controller, the default) or a fixed K (default: auto)")
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--full-length", type=int, default=0, metavar="N",
                    help="time only prompts that both servers answer to the full -n tokens, the first --requests "
                         "of the first N prompts (an untimed pass finds them). Where the two servers' texts "
                         "differ (a GPU, several slots: kernels that are not batch invariant), an answer that "
                         "ends early leaves its slot idle at the round's tail and one server's rounds short of "
                         "tokens; with equal lengths both decode the same batches (default: 0, off)")
    ap.add_argument("--request", type=json_object, default=None,
                    help='extra JSON fields of the --mtp server\'s requests, e.g. \'{"mtp_n_draft": 0}\' (the '
                         'engine\'s bookkeeping without drafting)')
    add_server_options(ap)
    ap.add_argument("--out", default=None, help="write the JSON result here")
    args = ap.parse_args()

    if args.model is None:
        from pymtp.default_model import default_model_path
        model = default_model_path()
    else:
        model = Path(args.model)
    prompts = load_prompts(args.prompts)[: max(args.requests, args.full_length)]
    parallels = [int(x) for x in args.parallel.split(",")]
    log_dir = Path(tempfile.mkdtemp(prefix="pymtp-server-bench-"))
    result = {"model": str(model), "machine": platform.processor() or platform.machine(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args), "configs": []}
    print(f"model {model.name}, {args.requests} prompts x {args.n} tokens, rounds {args.rounds}, logs {log_dir}",
          file=sys.stderr)
    for P in parallels:
        servers = {m: Server(model, m, P, args, log_dir) for m in ("off", "on")}
        try:
            for s in servers.values():  # warm-up, not timed
                s.chat(prompts[0], 8, 0.0, 0)
            timed = prompts[: args.requests]
            if args.full_length:
                timed = full_length_prompts(servers.values(), prompts, args)
            rounds = {m: [] for m in servers}
            for r in range(args.rounds):
                for m, s in servers.items():
                    res = run_round(s, timed, args)
                    rounds[m].append(res)
                    print(f"  slots {P} mtp {m:3s} round {r + 1}: {res['tok_s']:7.1f} tok/s"
                          + (f"  AL {res['mtp']['mean_accepted_length']:.2f}" if "mtp" in res else "")
                          + _adaptive_note(res), file=sys.stderr)
        finally:
            for s in servers.values():
                s.stop()
        tps = {m: statistics.mean(x["tok_s"] for x in rounds[m]) for m in rounds}
        ratios = [on["tok_s"] / off["tok_s"] for off, on in zip(rounds["off"], rounds["on"])]
        same = all(a == b for off, on in zip(rounds["off"], rounds["on"]) for a, b in zip(off["texts"], on["texts"]))
        cfg = {"parallel": P, "tok_s_off": tps["off"], "tok_s_on": tps["on"], "ratio": statistics.mean(ratios),
               "ratios_per_round": ratios, "texts_identical": same if args.temp == 0 else None,
               "mtp": rounds["on"][-1].get("mtp")}
        result["configs"].append(cfg)

    print(f"\n{'slots':>5} {'off tok/s':>10} {'--mtp tok/s':>12} {'ratio':>6} {'AL':>5}  identical@T0")
    for c in result["configs"]:
        al = c["mtp"]["mean_accepted_length"] if c["mtp"] else float("nan")
        print(f"{c['parallel']:>5} {c['tok_s_off']:>10.1f} {c['tok_s_on']:>12.1f} {c['ratio']:>5.2f}x {al:>5.2f}  "
              f"{c['texts_identical']}")
    if args.out:
        for c in result["configs"]:
            c.pop("texts", None)
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
