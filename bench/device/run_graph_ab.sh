#!/usr/bin/env bash
# A/B of a ggml-cuda CUDA-graph rule in one call, on one build (issue 19; patch 0018 first):
# pymtp bench with AB_ENV in the environment (the rule off) and without it (the rule on), alternated
# ROUNDS times, on realistic qwen35 shapes made here (no carry needed), each with the field's six
# synthetic acceptance rates: MTP off, fixed K, auto. Then a table of tok/s per side and the ratio.
# Run after `STEP=build bash bench/device/run_adaptive.sh` in the same call or a call right after:
#     STEP=build bash bench/device/run_adaptive.sh && bash bench/device/run_graph_ab.sh
# Knobs: AB_ENV (GGML_CUDA_GRAPH_REWARM=1), SHAPES ("small 27b16": "small" = the 27B preset at
# scale 0.25 with 24 layers and the tokenizer's 151936-token vocabulary, a few-ms step like the built-in model on an H100;
# "27b16" = the 27B preset's widths with 16 layers), ROUNDS (2), LIMIT (8), NPRED (128), K (3).
# Traces (PYMTP_ADAPTIVE_TRACE, one per side and shape) count the decodes that took over 2x their
# size's median, the cost a CUDA-graph rule is about. Results: $OUT/graph-ab.txt (+ JSON, traces).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
REPO=$(pwd)
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
AB_ENV=${AB_ENV:-GGML_CUDA_GRAPH_REWARM=1}
rates=0.917,0.837,0.648,0.538,0.451,0.348
vocab=$PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf
t0=$(date +%s)
say() { echo "[graph-ab +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/graph-ab-steps.txt"; }
for s in ${SHAPES:-small 27b16}; do
    case $s in
    small) extra=(--scale 0.25 --n-layer 24 --n-vocab 0) ;;
    27b16) extra=(--n-layer 16) ;;
    *) echo "unknown shape $s"; exit 2 ;;
    esac
    [ -f /tmp/ab-$s.gguf ] || python3 -m pymtp_devtools.realistic qwen35-27b /tmp/ab-$s.gguf "${extra[@]}" \
        --vocab-file "$vocab" 2>&1 | tr '\r' '\n' | grep -v ' / ' | tail -n 1
    [ -f /tmp/ab-$s.gguf ] || { echo "no /tmp/ab-$s.gguf"; exit 1; }
done
cd /tmp   # the installed package, not the source tree
for r in $(seq 1 "${ROUNDS:-2}"); do
    for s in ${SHAPES:-small 27b16}; do
        for side in off on; do
            args=(/tmp/ab-$s.gguf --prompts mtbench --limit "${LIMIT:-8}" -n "${NPRED:-128}" --ngl 99 --ctx 2048
                  --n-drafts "${K:-3},auto" --synthetic-rates $rates --json "$OUT/ab-$s-$side-$r.json")
            say "$s round $r, rule $side"
            if [ $side = off ]; then
                env "$AB_ENV" PYMTP_ADAPTIVE_TRACE="$OUT/trace-$s-$side.tsv" pymtp bench "${args[@]}" > /tmp/ab.log 2>&1
            else
                PYMTP_ADAPTIVE_TRACE="$OUT/trace-$s-$side.tsv" pymtp bench "${args[@]}" > /tmp/ab.log 2>&1
            fi
            rc=$?; [ $rc = 0 ] || { tail -n 20 /tmp/ab.log; exit $rc; }
        done
    done
done
python3 "$REPO/bench/device/graph_ab_table.py" "$OUT" "$AB_ENV" | tee "$OUT/graph-ab.txt"
say done
