#!/usr/bin/env bash
# Issue 19: the verify batch's quantized products on the 27B shape, A/B in one build and one call, on a
# warm machine after `STEP=build bash bench/device/run_adaptive.sh` (carry .dev/call1).
#   0. bench/device/mmvq_mma_check.cu (the tensor-core mat-vec against a host reference, and its GB/s);
#   1. step_cost.py (decodes of 1..8 tokens, the engine's target context) once per SIDE, where a side
#      is a set of ggml-cuda knobs in the environment ("default" = none);
#   2. step_cost.py with --mtp off (the plain context, no rollback snapshots) for the default side:
#      what the engine's snapshots cost a 1-token decode (patch 0020);
#   3. pymtp bench with the 27B shape's own MTP block trimmed to 8192 tokens (pymtp trim), MTP off vs
#      k=3 and k=6 at the field's six synthetic rates, once per BENCH_SIDES side: D, V(k+1), bound.
# Knobs: SIDES ("default GGML_CUDA_MMVQ_MMA=0"; GGML_CUDA_MMVQ_MMA_Q6_K=0 = the Q6_K kernel off), BENCH_SIDES ("none" or the first
# two of SIDES), BENCH_DRAFTS (3,6: the --n-drafts of pymtp bench), SIZES (1,2,3,4,5,6,8), LIMIT (8), NPRED (128),
# MODEL (qwen35-27b, or qwen35moe-35b-a3b: the realistic shape).
# Results: $OUT/vk-*.txt, vk-*.json (vk-<model>-* for a MODEL other than the 27B shape).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
REPO=$(pwd)
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
t0=$(date +%s)
say() { echo "[verify-kernels +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/vk-steps.txt"; }
SIDES=${SIDES:-default GGML_CUDA_MMVQ_MMA=0}
read -r -a sides <<< "$SIDES"
BENCH_SIDES=${BENCH_SIDES:-${sides[0]} ${sides[1]:-}}
[ "$BENCH_SIDES" = none ] && BENCH_SIDES=   # no pymtp bench
if [ "${CHECK:-1}" = 1 ]; then
    say "mmvq-mma check"
    nvcc -O3 -std=c++17 -arch=sm_90 -Ivendor/llama.cpp/ggml/include -Ivendor/llama.cpp/ggml/src -Inative/ggml-cuda \
        bench/device/mmvq_mma_check.cu -o /tmp/mmvq_mma_check && /tmp/mmvq_mma_check | tee "$OUT/vk-mma-check.txt"
    [ "${PIPESTATUS[0]}" = 0 ] || { say "check failed"; exit 1; }
fi
MODEL=${MODEL:-qwen35-27b}
m=/tmp/$MODEL.gguf
tag=$([ "$MODEL" = qwen35-27b ] && echo 27b || echo "$MODEL")
pre=vk$([ "$MODEL" = qwen35-27b ] || echo "-$MODEL")   # result files
if [ ! -f $m ]; then
    say "generating $MODEL"
    python3 -m pymtp_devtools.realistic $MODEL $m --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 \
        | tr '\r' '\n' | grep -v ' / ' | tail -n 1
fi
[ -f /tmp/counts27b.npz ] || python3 -c "import numpy as np; c = np.random.default_rng(0).zipf(1.3, 248320); \
np.savez('/tmp/counts27b.npz', train=c.astype(np.int64), val=c.astype(np.int64))"
head=/tmp/$tag-8192.mtp.gguf
[ -f $head ] || (cd /tmp && pymtp trim $m -n 8192 -o $head --counts /tmp/counts27b.npz 2>&1 | tail -n 1)
cd /tmp   # the installed package, not the source tree
run_side() {  # run_side SIDE CMD...: CMD with the side's knobs in the environment
    local side=$1; shift
    if [ "$side" = default ]; then "$@"; else env "$side" "$@"; fi
}
for side in "${sides[@]}"; do
    f=${side//=/-}   # file names without '='
    say "step cost, $side"
    run_side "$side" python3 "$REPO/bench/device/step_cost.py" $m --sizes "${SIZES:-1,2,3,4,5,6,8}" \
        --json "$OUT/$pre-step-$f.json" > "$OUT/$pre-step-$f.txt" 2>&1
    sed -n 2,12p "$OUT/$pre-step-$f.txt"
done
say "step cost, MTP off context (no snapshots), default"
python3 "$REPO/bench/device/step_cost.py" $m --mtp off --sizes 1,4 --json "$OUT/$pre-step-off.json" \
    > "$OUT/$pre-step-off.txt" 2>&1
sed -n 2,5p "$OUT/$pre-step-off.txt"
for side in $BENCH_SIDES; do
    f=${side//=/-}
    say "pymtp bench, $side"
    run_side "$side" pymtp bench $m --mtp-head $head --prompts mtbench --limit "${LIMIT:-8}" -n "${NPRED:-128}" \
        --n-drafts "${BENCH_DRAFTS:-3,6}" --ngl 99 --ctx 2048 --synthetic-rates 0.917,0.837,0.648,0.538,0.451,0.348 \
        --json "$OUT/$pre-bench-$f.json" > "$OUT/$pre-bench-$f.txt" 2>&1
    grep -E "^(off|mtp|config)" "$OUT/$pre-bench-$f.txt" | head -n 8
done
say done
