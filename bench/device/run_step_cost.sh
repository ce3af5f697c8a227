#!/usr/bin/env bash
# Where a step's time goes on the GPU (issue 19, "measure first"), after STEP=build of
# run_adaptive.sh on the same warm machine (pymtp installed, CUDA sm_90):
#   1. the realistic shape(s) of MODELS ("qwen35-27b", also "qwen35moe-35b-a3b") made on the box;
#   2. bench/device/step_cost.py: host and total time of the target's n-token decodes (n = 1..8,
#      every row's logits, the engine's contexts), CUDA graphs on, then off (GGML_CUDA_DISABLE_GRAPHS);
#   3. Nsight Compute (gpu__time_duration only) on one decode of each size in PHASES ("1 4"), sorted
#      by bench/device/kernel_breakdown.py into layer kinds, op families and weights.
# Results in $OUT: step-cost-<model>.{txt,json}, breakdown-<model>.{txt,json}, steps.txt.
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[step-cost +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
source $REPO/bench/device/ncu.sh
say "ncu: ${NCU:-none}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for model in ${MODELS:-qwen35-27b}; do
    m=/tmp/$model.gguf
    if [ ! -f $m ]; then
        say "generating $model"
        python3 -m pymtp_devtools.realistic $model $m --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 \
            | tr '\r' '\n' | grep -v ' / ' | tail -n 2
    fi
    cd /tmp
    say "$model: timing, CUDA graphs on"
    python3 $REPO/bench/device/step_cost.py $m --json "$OUT/step-cost-$model.json" 2>&1 | tee "$OUT/step-cost-$model.txt"
    if [ "${NOGRAPHS:-1}" = 1 ]; then
        say "$model: timing, CUDA graphs off"
        GGML_CUDA_DISABLE_GRAPHS=1 python3 $REPO/bench/device/step_cost.py $m --sizes 1,4 \
            --json "$OUT/step-cost-$model-nographs.json" 2>&1 | tee -a "$OUT/step-cost-$model.txt"
    fi
    csvs=()
    for n in ${PHASES:-1 4}; do
        [ -n "$NCU" ] || break
        say "$model: ncu, one $n-token decode"
        ncu_kernels /tmp/k$n-$model.csv python3 $REPO/bench/device/step_cost.py $m --ncu-phase $n
        say "ncu rc=$? lines=$(wc -l < /tmp/k$n-$model.csv)"; grep -m3 -i "error\|warn" /tmp/k$n-$model.err
        csvs+=(/tmp/k$n-$model.csv)
    done
    if [ ${#csvs[@]} -gt 0 ]; then
        python3 $REPO/bench/device/kernel_breakdown.py $m "${csvs[@]}" --json "$OUT/breakdown-$model.json" \
            2>&1 | tee "$OUT/breakdown-$model.txt"
        tar -czf "$OUT/ncu-$model.tgz" -C /tmp $(cd /tmp && ls k*-$model.csv)
    fi
    cd $REPO
done
say "done"
