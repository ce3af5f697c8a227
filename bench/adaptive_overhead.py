"""What n_draft="auto" costs where drafting does not pay: MTP off vs auto vs auto pinned to plain
decoding (the controller's cost model fixed so that every step is plain: no probes to speak of, no
windows, catch-up deferred), interleaved prompt by prompt, with each one's time per token split
into the engine's timed parts (target decode + sampling, draft, catch-up) and the rest.

    python bench/adaptive_overhead.py [MODEL] [--limit 16] [-n 256] [--temp 0.7] [--ngl 99] [--json out.json]

If auto pinned is as fast as off, what auto loses is exploration (probes, check windows, size
switches); if it is slower, plain steps themselves cost more with MTP loaded."""

from __future__ import annotations

import argparse
import json
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--limit", type=int, default=16)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--temp", type=float, default=0.7)
    ap.add_argument("--ngl", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="passes over the prompts")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    import pymtp
    from pymtp.bench.prompts import mtbench_questions

    kw = dict(n_ctx=2048, n_gpu_layers=args.ngl, n_threads=args.threads)
    models = {"off": pymtp.Model(args.model, mtp="off", **kw),
              "auto": pymtp.Model(args.model, mtp="on", n_draft="auto", **kw),
              "auto pinned plain": pymtp.Model(args.model, mtp="on", n_draft="auto", **kw)}
    pinned = models["auto pinned plain"].rt
    pinned.lib.llama_mtp_pin_adaptive_costs(pinned.engine, 1.0, 100.0, 100.0)
    prompts = [models["off"].chat_tokens([{"role": "user", "content": q}]) for q in mtbench_questions()[: args.limit]]
    keys = ("generate_ms", "verify_ms", "sample_ms", "draft_ms", "catchup_ms")
    acc = {name: {"tokens": 0, "steps": 0, "plain_steps": 0, "dormant_steps": 0, **{k: 0.0 for k in keys}}
           for name in models}
    for m in models.values():   # warm-up: graphs built, costs first timed
        m.generate(prompts[0], max_tokens=32, temperature=args.temp, seed=0)
    t0 = time.time()
    for r in range(args.repeat):
        for i, p in enumerate(prompts):
            order = list(models.items())
            order = order[i % 3:] + order[: i % 3]
            for name, m in order:
                st = m.generate(p, max_tokens=args.n, temperature=args.temp, seed=1000 * r + i).stats
                a = acc[name]
                a["tokens"] += st.n_generated
                a["steps"] += st.n_steps
                if st.adaptive:
                    a["plain_steps"] += st.adaptive["steps_per_draft_length"][0]
                    a["dormant_steps"] += st.adaptive.get("dormant_steps", 0)
                for k in keys:
                    a[k] += getattr(st, k)
    base = acc["off"]["tokens"] / acc["off"]["generate_ms"]
    print(f"{'config':<20} {'tok/s':>8} {'vs off':>7} {'plain':>6}  per token, us: {'all':>6} {'verify':>7} "
          f"{'sample':>7} {'draft':>6} {'catchup':>7} {'rest':>6}")
    out = {"model": str(models["off"].path), "args": vars(args), "configs": {}, "wall_s": time.time() - t0}
    for name, a in acc.items():
        n = max(1, a["tokens"])
        us = {k: 1000.0 * a[k] / n for k in keys}
        rest = us["generate_ms"] - us["verify_ms"] - us["sample_ms"] - us["draft_ms"] - us["catchup_ms"]
        rate = a["tokens"] / a["generate_ms"]
        plain = a["plain_steps"] / max(1, a["steps"]) if name != "off" else 1.0
        print(f"{name:<20} {1000 * rate:>8.1f} {rate / base:>6.3f}x {plain:>6.2f}  {'':14}{us['generate_ms']:>6.0f} "
              f"{us['verify_ms']:>7.0f} {us['sample_ms']:>7.0f} {us['draft_ms']:>6.0f} {us['catchup_ms']:>7.0f} "
              f"{rest:>6.0f}")
        out["configs"][name] = {**a, "tok_s": 1000 * rate, "vs_off": rate / base, "us_per_token": us,
                                "rest_us_per_token": rest}
    print("verify: the target decodes; rest: the step's time outside the timed parts (the controller, the "
          "Python loop, text)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    for m in models.values():
        m.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
