#!/usr/bin/env bash
# The verify batch's mat-vec fusions (patch 0029) on the built-in model, one build, the sides set apart by
# GGML_CUDA_MMVQ_FUSE_MAX_COLS (A: 1, upstream's one column; B: as built, up to 8):
#   1. the logits of decodes of 1..8 tokens under each side, compared (bench/device/compare_logits.py);
#   2. the target's decode times per size under each side (step_cost.py), and Nsight Compute's kernel
#      count of one 3-token decode under B;
#   3. bench/auto_vs_off.py at T=0 (--fixed 1,2,3) and T=0.7 (--fixed 1,2), sides alternating (ab_native.sh).
# After STEP=build (and the store calls) of run_adaptive.sh on the same warm machine. Results in $OUT:
# fuse-checks.txt, t0/ and t07/ (ab-summary.txt, ab-results.tgz each). Knobs: ORDER_T0 ("B A A B"),
# ORDER_T07 ("B A A B"), LIMIT (16), NPRED (192), SKIP_CHECKS (0).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
OUT=/tmp/fuse-model STEP=model bash bench/device/run_adaptive.sh > /dev/null || exit 1
smol=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
head=$REPO/pymtp/data/SmolLM2-135M-Instruct.Q4_1.mtp.gguf
A="GGML_CUDA_MMVQ_FUSE_MAX_COLS=1"
if [ "${SKIP_CHECKS:-0}" != 1 ]; then
    (
        cd /tmp
        echo "== logits, A ($A) against B (as built)"
        env $A python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --dump-logits /tmp/logits-A.bin > /dev/null 2>&1
        python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --dump-logits /tmp/logits-B.bin > /dev/null 2>&1
        python3 $REPO/bench/device/compare_logits.py /tmp/logits-A.bin /tmp/logits-B.bin 49152
        for side in A B; do
            echo "== target decodes, side $side"
            if [ $side = A ]; then e=$A; else e=; fi
            env $e python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --sizes 1,2,3,4,8 2>&1 | tail -n 6
        done
        source $REPO/bench/device/ncu.sh
        if [ -n "$NCU" ]; then
            for side in A B; do
                (
                    [ $side = A ] && export "$A"
                    NCU_TIMEOUT=120 ncu_kernels /tmp/t3-$side.csv python3 $REPO/bench/device/step_cost.py $smol \
                        --mtp-head $head --ncu-phase 3
                )
                echo "== one 3-token decode, side $side: $(grep -c '^"[0-9]' /tmp/t3-$side.csv) kernels"
            done
        fi
    ) 2>&1 | tee "$OUT/fuse-checks.txt"
fi
for t in t0 t07; do
    if [ $t = t0 ]; then extra="--fixed 1,2,3"; order=${ORDER_T0:-B A A B}; else extra="--fixed 1,2 --temp 0.7"; order=${ORDER_T07:-B A A B}; fi
    mkdir -p "$OUT/$t"
    OUT=$OUT/$t AB_ENV_A="$A" AB_ENV_B="" AB_ORDER="$order" AB_TRACE="${TRACE:-}" \
        AB_AVO="--ngl 99 --limit ${LIMIT:-16} --passes 1 -n ${NPRED:-192} $extra" bash bench/device/ab_native.sh
done
