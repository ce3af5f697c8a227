#!/usr/bin/env bash
# llama-server --mtp against plain llama-server on a GPU at several slots, repeated over fresh server pairs,
# each run once as built and once with a knob set for both servers (default PYMTP_VERIFY_ON_HOST=1: an --mtp
# slot's verify rows sampled on the host, as plain llama-server samples its rows). On a GPU the 4-slot ratio
# moves by +-15% from one pair of server instances to the next (docs/journal/2026-11-28-llama-server-gpu-slots.md), so one pair says little:
# this runs RUNS pairs per side, alternating, and writes each run's summary line to $OUT/summary.txt as it ends.
# After STEP=build and the built-in model's parts (bench/device/run_adaptive.sh).
#   RUNS (4) pairs per side; SLOTS (4); KNOB ("PYMTP_VERIFY_ON_HOST=1"); ROUNDS (3); FULL (32: --full-length)
#   TRACE=1: every slot's steps of each run (PYMTP_ADAPTIVE_TRACE) into $OUT/traces.tar.gz
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
export PYMTP_CACHE_DIR=${PYMTP_CACHE_DIR:-/tmp/pymtp-cache} PYTHONUNBUFFERED=1
knob=${KNOB:-PYMTP_VERIFY_ON_HOST=1}
slots=${SLOTS:-4}
# traces are appended to (PYMTP_ADAPTIVE_TRACE): a run on the same warm machine starts from an empty folder
[ "${TRACE:-0}" = 1 ] && rm -rf /tmp/pymtp-traces && mkdir -p /tmp/pymtp-traces
for i in $(seq 1 "${RUNS:-4}"); do
    for side in built knob; do
        envs=(); [ $side = knob ] && envs=("$knob")
        [ "${TRACE:-0}" = 1 ] && envs+=("PYMTP_ADAPTIVE_TRACE=/tmp/pymtp-traces/trace-$slots-$side-$i.tsv")
        log="$OUT/server-$slots-$side-$i.txt" # named by slots: a later SLOTS=1 call keeps the 4-slot logs
        env "${envs[@]}" timeout 120 python3 bench/server_throughput.py --ngl 99 --parallel "$slots" --requests 16 \
            --rounds "${ROUNDS:-3}" -n 128 --full-length "${FULL:-32}" > "$log" 2>&1
        line=$(grep -E "^ +[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+x" "$log" | tr '\n' ' ')
        echo "$side $i: $line" | tee -a "$OUT/summary.txt"
    done
done
if [ "${TRACE:-0}" = 1 ]; then tar -C /tmp -czf "$OUT/traces.tar.gz" pymtp-traces; fi
