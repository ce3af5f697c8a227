"""One-slot llama-server with and without --mtp, request by request, and where each request's time goes.

bench/server_throughput.py measures rounds; this alternates single requests between two servers on the
same model (off, on, on, off, off, on, ...), so drift hits both alike at the grain of one request, and
splits each request's wall time (seen by the client) into the server's own timings:

    prompt      timings.prompt_ms      (prompt evaluation; cached prompts evaluate 1 token)
    generation  timings.predicted_ms   (every decode step, drafting and verifying included)
    rest        wall - prompt - generation  (HTTP, tokenizing, slot launch, cache, response)

A ratio below 1 whose generation ms/token is equal points at the request's edges, not at the steps.
--n-drafts starts one --mtp server per draft length (auto: the adaptive controller, the default; or a
fixed K), so the default can be set beside fixed lengths in one run. Variants (--variant NAME:JSON,
repeatable) send the same prompts to the first --mtp server with JSON merged into the body (e.g.
'nodraft:{"mtp_n_draft": 0}': the engine's bookkeeping without drafting); a variant shares that
server's slot, so its prompts often find themselves cached there (compare its generation ms/token).

    python bench/server_ab.py [MODEL] [--requests 64] [-n 128] [--n-drafts auto,2] [--ngl 99] [--out result.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from server_throughput import Server, add_server_options, json_object

from pymtp.bench.prompts import load_prompts


def request(server: Server, prompt: str, n: int, body: dict) -> dict:
    t0 = time.perf_counter()
    res = server.chat(prompt, n, 0.0, 1, extra=body)
    wall_ms = 1000 * (time.perf_counter() - t0)
    t = res["timings"]
    mtp = t.get("mtp") or {}
    ad = mtp.get("adaptive") or {}
    return {"wall_ms": wall_ms, "prompt_ms": t["prompt_ms"], "prompt_n": t["prompt_n"],
            "gen_ms": t["predicted_ms"], "tokens": res["usage"]["completion_tokens"],
            "rest_ms": wall_ms - t["prompt_ms"] - t["predicted_ms"],
            "steps": sum(ad.get("steps_per_draft_length", [])) or None, "asleep": ad.get("dormant_steps"),
            "drafted": mtp.get("drafted"), "accepted": mtp.get("accepted"),
            "text": res["choices"][0]["message"]["content"]}


def summary(rows: list[dict]) -> dict:
    tok = sum(r["tokens"] for r in rows)
    out = {"requests": len(rows), "tokens": tok, "tok_s": 1000 * tok / sum(r["wall_ms"] for r in rows),
           "gen_ms_per_token": sum(r["gen_ms"] for r in rows) / tok}
    for k in ("wall_ms", "prompt_ms", "gen_ms", "rest_ms"):
        out[k] = statistics.mean(r[k] for r in rows)
    if rows[0]["drafted"] is not None:
        out["drafted"] = sum(r["drafted"] for r in rows)
        out["accepted"] = sum(r["accepted"] for r in rows)
        out["asleep_steps"] = sum(r["asleep"] or 0 for r in rows)
        out["steps"] = sum(r["steps"] or 0 for r in rows)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None, help="GGUF (default: the built-in model and head)")
    ap.add_argument("--prompts", default="mtbench")
    ap.add_argument("--requests", type=int, default=64, help="requests per configuration (default: 64)")
    ap.add_argument("--warmup", type=int, default=8, help="untimed requests per server first (default: 8)")
    ap.add_argument("-n", type=int, default=128, help="max tokens per request (default: 128)")
    ap.add_argument("--n-drafts", default="auto",
                    help="one --mtp server per draft length, comma-separated: auto or K (default: auto)")
    add_server_options(ap)
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME:JSON, a request body merged in for an extra configuration on the --mtp server")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    args = ap.parse_args()
    args.n_draft = "auto"  # Server reads it; each --mtp server below sets its own
    n_drafts = [x.strip() for x in args.n_drafts.split(",") if x.strip()]
    if not n_drafts:
        ap.error("--n-drafts: give at least one draft length (auto or K)")
    for nd in n_drafts:
        if nd != "auto" and not (nd.isdigit() and int(nd) > 0):
            ap.error(f"--n-drafts: {nd!r} is neither auto nor a positive draft length")
    server_of = {nd: "on" if nd == "auto" else f"k={nd}" for nd in n_drafts}  # config name = its server's
    # config name -> (server name, request body merged in)
    configs = {"off": ("off", {}), **{server_of[nd]: (server_of[nd], {}) for nd in n_drafts}}
    for v in args.variant:
        name, _, body = v.partition(":")
        try:
            extra = json_object(body)
        except argparse.ArgumentTypeError as e:
            ap.error(f"--variant {v!r}: the part after ':' {e}")
        if not name or name in configs:
            ap.error(f"--variant {v!r}: NAME:JSON with a new NAME and a JSON object")
        configs[name] = (server_of[n_drafts[0]], extra)

    if args.model is None:
        from pymtp.default_model import default_model_path
        model = default_model_path()
    else:
        model = Path(args.model)
    prompts = load_prompts(args.prompts)
    log_dir = Path(tempfile.mkdtemp(prefix="pymtp-server-ab-"))
    print(f"model {model.name}, {args.requests} requests x {args.n} tokens per configuration, logs {log_dir}",
          file=sys.stderr)
    servers: dict[str, Server] = {}
    rows: dict[str, list[dict]] = {name: [] for name in configs}
    try:
        servers["off"] = Server(model, "off", 1, args, log_dir)
        for nd in n_drafts:
            args.n_draft = nd
            servers[server_of[nd]] = Server(model, "on", 1, args, log_dir, tag=server_of[nd])
        for p in prompts[: args.warmup]:
            for srv, body in configs.values():
                request(servers[srv], p, args.n, body)
        names = list(configs)
        for i in range(args.requests):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                srv, body = configs[name]
                rows[name].append(request(servers[srv], prompts[i % len(prompts)], args.n, body))
            if (i + 1) % 16 == 0:
                print(f"  {i + 1} of {args.requests} requests", file=sys.stderr)
    finally:
        for s in servers.values():
            s.stop()

    res = {name: summary(r) for name, r in rows.items()}
    base = res["off"]
    print(f"\n{'config':>10} {'tok/s':>8} {'ratio':>6} {'gen ms/tok':>10} {'prompt ms':>9} {'gen ms':>8} "
          f"{'rest ms':>8}  steps asleep / all (auto), drafts")
    for name, s in res.items():
        s["ratio"] = s["tok_s"] / base["tok_s"]
        s["gen_ratio"] = base["gen_ms_per_token"] / s["gen_ms_per_token"]
        note = ""
        if "drafted" in s:
            note = f"  {s['asleep_steps']} / {s['steps']}, drafted {s['drafted']}, accepted {s['accepted']}"
        print(f"{name:>10} {s['tok_s']:>8.1f} {s['ratio']:>5.3f}x {s['gen_ms_per_token']:>10.4f} "
              f"{s['prompt_ms']:>9.2f} {s['gen_ms']:>8.2f} {s['rest_ms']:>8.2f}{note}")
    same = {name: all(a["text"] == b["text"] for a, b in zip(rows["off"], rs)) for name, rs in rows.items()
            if name != "off"}
    print("greedy texts identical to off: " + ", ".join(f"{k} {v}" for k, v in same.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"model": str(model), "args": vars(args), "summary": res,
                                              "texts_identical": same,
                                              "requests": {k: [{f: v for f, v in r.items() if f != "text"}
                                                               for r in rs] for k, rs in rows.items()}},
                                             indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
