#!/usr/bin/env python3
"""Slow target decodes in an adaptive trace (PYMTP_ADAPTIVE_TRACE, gzipped or not), sorted by what came before.

A decode is slow when it took more than twice its size's median. Each is put in one class:

  first         the first decode of its size in the run
  consecutive   a decode of the same size ran just before it (< 5 ms earlier): a run of slow steps
  after-gap     its size last ran more than --gap-ms of the run's own time before (traced steps and the
                caller's time between them; other work in between, such as a benchmark's other models,
                is not counted): where an evicted or re-captured graph would show
  other         the rest

and a line per class gives the count and the time over the median.

    python bench/trace_slow_decodes.py TRACE.tsv[.gz] [--gap-ms 1500]

A trace holds every engine of the process (auto, fixed lengths, MTP off: columns `engine` and `adaptive`, a
header per engine); each engine is reported apart. Traces written before those columns count as one engine.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import statistics
from collections import defaultdict


def classify(rows: list[dict], gap_ms: float) -> dict[str, list[float]]:
    by_size = defaultdict(list)
    for r in rows:
        by_size[int(r["k"])].append(float(r["target_ms"]))
    median = {k: statistics.median(v) for k, v in by_size.items()}
    last, t, out = {}, 0.0, defaultdict(list)
    for r in rows:
        k, ms = int(r["k"]), float(r["target_ms"])
        if ms > 2 * median[k]:
            since = None if k not in last else t - last[k]
            cls = ("first" if since is None else "consecutive" if since < 5 else
                   "after-gap" if since > gap_ms else "other")
            out[cls].append(ms - median[k])
        t += float(r["step_ms"]) + float(r["gap_ms"])
        last[k] = t
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--gap-ms", type=float, default=1500.0, help="'after-gap': the size unused this long (1500)")
    args = ap.parse_args()
    opener = gzip.open if args.trace.endswith(".gz") else open
    with opener(args.trace, "rt") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["step"] != "step"]   # one header per engine
    engines = defaultdict(list)
    for r in rows:
        engines[(int(r.get("engine") or 1), r.get("adaptive") or "1")].append(r)
    for (engine, adaptive), rs in sorted(engines.items()):
        total = sum(float(r["step_ms"]) + float(r["gap_ms"]) for r in rs)
        print(f"engine {engine} ({'adaptive' if adaptive == '1' else 'a fixed length or MTP off'}): "
              f"{len(rs)} steps, {total:.0f} ms")
        for cls, extra in sorted(classify(rs, args.gap_ms).items()):
            print(f"  {cls:12s} {len(extra):4d} slow decodes, {sum(extra):6.0f} ms over their size's median "
                  f"({sum(extra) / total:.1%} of the run)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
