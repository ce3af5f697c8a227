#!/usr/bin/env bash
# Issue 18 on a 27B-class shape: what a parallel pass costs against sequential drafting where the
# model is large. After STEP=build of run_adaptive.sh on the same warm machine (pymtp installed):
#   1. the dense twin of the 27B shape (pymtp_devtools/realistic.py dense-27b: Qwen3.5-27B's widths,
#      depth and 248320-token vocabulary, every layer qwen3 attention), made here with its random MTP
#      block split into a head-only sidecar, as a grafted head is laid out;
#   2. bench/parallel_heads.py --draft-cost 6: D_k for k = 1..6 with every draft accepted, the block
#      drafting sequentially (k MTP decodes) and the same block with 5 random mask rows (one decode of
#      k rows; --random-mask);
#   3. the same at the field's six per-position rates (RATES): tok/s of both at equal acceptance.
# Results in $OUT: par27b-dcost.{txt,json}, par27b-rates.{txt,json}, steps.txt. Run with the libstdc++
# LD_PRELOAD of bench/device/README.md. Knobs: LIMIT (8), NPRED (128), K (6), RATES.
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[par27b +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
m=/tmp/dense-27b.gguf
h=/tmp/dense-27b.mtp.gguf
if [ ! -f $h ]; then
    say "generating dense-27b (trunk + head sidecar)"
    python3 -m pymtp_devtools.realistic dense-27b $m --split-head $h \
        --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 | tr '\r' '\n' | grep -v ' / ' | tail -n 3
fi
ls -la $m $h | tee -a "$OUT/steps.txt"
cd /tmp
common=(--head seq=$h --head par=$h --random-mask par --draft-cost "${K:-6}" --prompts mtbench --ngl 99
        --limit "${LIMIT:-8}" -n "${NPRED:-128}")
say "D_k, every draft accepted"
python3 $REPO/bench/parallel_heads.py $m "${common[@]}" --json "$OUT/par27b-dcost.json" \
    > "$OUT/par27b-dcost.txt" 2>&1
tail -n 14 "$OUT/par27b-dcost.txt"
say "at the field's rates"
python3 $REPO/bench/parallel_heads.py $m "${common[@]}" --rates "${RATES:-0.917,0.837,0.648,0.538,0.451,0.348}" \
    --json "$OUT/par27b-rates.json" > "$OUT/par27b-rates.txt" 2>&1
tail -n 14 "$OUT/par27b-rates.txt"
say "done"
