# The table of bench/device/run_graph_ab.sh: tok/s per shape, configuration and side (the CUDA-graph
# rule off = with AB_ENV, on = without), mean over rounds, the on/off ratio; and from the adaptive
# traces, the target decodes that took over twice their draft length's median ("slow") and the time
# they cost above it.
#     python3 bench/device/graph_ab_table.py OUT_DIR AB_ENV
import csv
import glob
import gzip
import json
import os
import statistics
import sys
from collections import defaultdict


def main() -> int:
    out, ab_env = sys.argv[1], sys.argv[2]
    tps = defaultdict(list)  # (shape, config, side) -> tok/s per round
    for path in sorted(glob.glob(os.path.join(out, "ab-*-*-*.json"))):
        shape, side, _round = os.path.basename(path)[3:-5].rsplit("-", 2)  # ab-SHAPE-SIDE-ROUND.json
        for r in json.load(open(path))["results"]:
            tps[shape, r["config"], side].append(r["tokens_per_second"])
    print(f"rule off = {ab_env}; on = patch in force. tok/s, mean of rounds (each round: off then on)")
    print(f"{'shape':8} {'config':34} {'rule off':>9} {'rule on':>9} {'on/off':>7}")
    for shape, config in sorted({(s, c) for s, c, _ in tps}):
        a, b = tps[shape, config, "off"], tps[shape, config, "on"]
        if a and b:
            ma, mb = statistics.mean(a), statistics.mean(b)
            print(f"{shape:8} {config:34} {ma:9.1f} {mb:9.1f} {mb / ma:6.3f}x")
    print("\nadaptive traces: target decodes over 2x their draft length's median")
    for path in sorted(glob.glob(os.path.join(out, "trace-*.tsv*"))):
        opener = gzip.open if path.endswith(".gz") else open
        # engines append to one file, each with its header line: keep the data lines
        rows = [r for r in csv.DictReader(opener(path, "rt"), delimiter="\t") if r["step"] != "step"]
        by_k = defaultdict(list)
        for row in rows:
            by_k[row["k"]].append(float(row["target_ms"]))
        med = {k: statistics.median(v) for k, v in by_k.items()}
        slow = [(float(r["target_ms"]), med[r["k"]]) for r in rows if float(r["target_ms"]) > 2 * med[r["k"]]]
        total = sum(float(r["step_ms"]) for r in rows)
        excess = sum(t - m for t, m in slow)
        print(f"{os.path.basename(path):28} steps {len(rows):6}  slow {len(slow):5}  "
              f"excess {excess:8.1f} ms of {total:9.1f} ms ({100 * excess / max(total, 1e-9):4.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
