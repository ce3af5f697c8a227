#!/usr/bin/env bash
# The default against itself with one of the engine's A/B switches set (docs/environment.md), MTP off, its noise floor
# and fixed lengths, in one process per run (bench/auto_vs_off.py --env: every answer on every Model, balanced
# orders), RUNS runs per temperature. Each run's table goes to $OUT/avo-T-i.txt and its summary line to
# $OUT/summary.txt as it ends. After STEP=build and the built-in model's parts (bench/device/run_adaptive.sh).
#   ENV (required: NAME=VAR=VALUE, the run's auto@NAME, e.g. old=PYMTP_ADAPTIVE_NO_CUTOFF=1); RUNS (3); TEMPS ("0 0.7");
#   FIXED ("1,2"); LIMIT (16); NPRED (192)
#   TRACE=1: every engine's steps of each run (PYMTP_ADAPTIVE_TRACE) into $OUT/traces.tar.gz
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
export PYMTP_CACHE_DIR=${PYMTP_CACHE_DIR:-/tmp/pymtp-cache} PYTHONUNBUFFERED=1
repo=$(pwd)
: "${ENV:?set ENV=NAME=VAR=VALUE (the engine switch that auto@NAME runs with)}"
# traces are appended to (PYMTP_ADAPTIVE_TRACE): a run on the same warm machine starts from an empty folder
[ "${TRACE:-0}" = 1 ] && rm -rf /tmp/pymtp-traces && mkdir -p /tmp/pymtp-traces
for i in $(seq 1 "${RUNS:-3}"); do
    for t in ${TEMPS:-0 0.7}; do
        envs=()
        [ "${TRACE:-0}" = 1 ] && envs+=("PYMTP_ADAPTIVE_TRACE=/tmp/pymtp-traces/trace-$t-$i.tsv")
        log="$OUT/avo-$t-$i.txt"
        # from /tmp: the repo root would import the unbuilt source tree
        (cd /tmp && env "${envs[@]}" timeout 300 python3 "$repo/bench/auto_vs_off.py" --ngl 99 --limit "${LIMIT:-16}" \
            --passes 1 -n "${NPRED:-192}" --temp "$t" --fixed "${FIXED:-1,2}" \
            --env "$ENV" --json "$OUT/avo-$t-$i.json") > "$log" 2>&1
        line=$(grep -E "x of off|noise floor" "$log" | awk '{printf "%s ", $0}' | tr -s ' ')
        echo "T=$t run $i: $line" | tee -a "$OUT/summary.txt"
    done
done
if [ "${TRACE:-0}" = 1 ]; then tar -C /tmp -czf "$OUT/traces.tar.gz" pymtp-traces; fi
