#!/usr/bin/env python3
"""Where an adaptive run loses against a fixed draft length, from one trace (PYMTP_ADAPTIVE_TRACE, gzipped or not).

bench/auto_vs_off.py runs every Model of a run in one process, so with PYMTP_ADAPTIVE_TRACE set one file holds
every engine's steps (columns `engine` and `adaptive`; a header per engine). This takes one engine (the adaptive
one: --engine N, default the first with adaptive = 1) and a reference engine (--ref N, e.g. fixed k=2), and
charges each of the first engine's steps with the time it took beyond what the reference engine's tokens per ms
(its whole run, the caller's time between steps included) would have taken for the same tokens:

    lost(step) = step_ms + gap_ms - n_out / ref_rate

summed per draft length the step ran (0 = a plain step). The steps that emitted a run's first --opening tokens
(default 192: a bench's first answer, where a new engine learns its costs and the text's acceptance) are
summed apart, against the reference's rate over its own first --opening tokens; the other steps against the
reference's rate over the rest. The shares are of the charged engine's whole time, so they add up to how far
behind the reference it ran.

    python bench/trace_loss.py TRACE.tsv[.gz] --ref 5 [--engine 3] [--opening 192]
"""

from __future__ import annotations

import argparse
import csv
import gzip
from collections import defaultdict


def read(path: str) -> list[dict]:
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r["step"] != "step"]


def step_time(r: dict) -> float:
    return float(r["step_ms"]) + max(0.0, float(r["gap_ms"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--ref", required=True, help="the reference engine's number (the trace's `engine` column)")
    ap.add_argument("--engine", default=None, help="the engine charged (default: the first adaptive one)")
    ap.add_argument("--opening", type=int, default=192,
                    help="the steps of the run's first this many tokens, reported apart (default 192)")
    args = ap.parse_args(argv)

    rows = read(args.trace)
    if not rows or "engine" not in rows[0]:
        ap.error(f"{args.trace}: no `engine` column (a trace written before it holds one engine)")
    engines = sorted({r["engine"] for r in rows}, key=int)
    name = args.engine or next((e for e in engines if any(r["engine"] == e and r["adaptive"] == "1" for r in rows)),
                               None)
    for e, what in ((name, "--engine"), (args.ref, "--ref")):
        if e not in engines:
            ap.error(f"{what} {e}: not in the trace (engines {', '.join(engines)})")
    mine = opening_split([r for r in rows if r["engine"] == name], args.opening)
    ref = opening_split([r for r in rows if r["engine"] == args.ref], args.opening)
    ref_rate = {part: sum(int(r["n_out"]) for r, p in ref if p == part) /
                max(1e-9, sum(step_time(r) for r, p in ref if p == part)) for part in (True, False)}
    total = sum(step_time(r) for r, _ in mine)
    tokens = sum(int(r["n_out"]) for r, _ in mine)
    ref_all = sum(int(r["n_out"]) for r, _ in ref) / sum(step_time(r) for r, _ in ref)

    parts: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0.0])
    for r, opening in mine:
        p = parts["opening" if opening else f"k={int(r['k'])}"]
        p[0] += 1
        p[1] += int(r["n_out"])
        p[2] += step_time(r)
        p[3] += step_time(r) - int(r["n_out"]) / ref_rate[opening]
    lost_all = sum(p[3] for p in parts.values())
    print(f"engine {name}: {len(mine)} steps, {tokens} tokens, {tokens / total:.3f} tokens/ms; engine {args.ref} "
          f"(reference): {ref_all:.3f} tokens/ms ({ref_rate[True]:.3f} over its first {args.opening} tokens, "
          f"{ref_rate[False]:.3f} after); behind it by {100 * lost_all / total:.1f}% of engine {name}'s time")
    order = ["opening"] + sorted((k for k in parts if k != "opening"), key=lambda k: int(k[2:]))
    for key in order:
        if key not in parts:
            continue
        n, tok, ms, lost = parts[key]
        label = f"first {args.opening} tokens" if key == "opening" else key
        print(f"  {label:18} {n:6d} steps {tok:6d} tokens {tok / ms:6.3f} tokens/ms  lost {100 * lost / total:+5.1f}%")
    return 0


def opening_split(rows: list[dict], n_tokens: int) -> list[tuple[dict, bool]]:
    """Each step with whether it emitted any of the run's first n_tokens tokens."""
    out, seen = [], 0
    for r in rows:
        out.append((r, seen < n_tokens))
        seen += int(r["n_out"])
    return out


if __name__ == "__main__":
    raise SystemExit(main())
