#!/usr/bin/env bash
# Where the built-in model's speculative step goes on the GPU: its target decodes (n = 1..4, 8) and its
# draft decodes (k = 1..4), timed from the host (bench/device/step_cost.py, draft_cost.py), the same
# with llama.cpp's graph reuse off (LLAMA_GRAPH_REUSE_DISABLE=1: every decode builds and allocates its
# graph on the host), and under Nsight Compute one target decode of 1 and 3 rows and one draft of 1 and 2
# tokens, sorted into op families (kernel_breakdown.py).
# EXTRA_FILES: more files of /tmp to put in ncu-csv.tgz (a trace).
# After STEP=build and STEP=model of run_adaptive.sh on the same warm machine. Results in $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[smol-cost +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
smol=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
head=$REPO/pymtp/data/SmolLM2-135M-Instruct.Q4_1.mtp.gguf
source $REPO/bench/device/ncu.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cd /tmp
{
    say "target decodes, graphs on"
    python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --sizes 1,2,3,4,8 --json "$OUT/target.json" 2>&1 | tail -n 7
    say "draft decodes"
    python3 $REPO/bench/device/draft_cost.py --json "$OUT/draft.json" 2>&1 | tail -n 6
    say "graph reuse off: target, drafts"
    LLAMA_GRAPH_REUSE_DISABLE=1 python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --sizes 1,3 2>&1 | tail -n 3
    LLAMA_GRAPH_REUSE_DISABLE=1 python3 $REPO/bench/device/draft_cost.py --ks 1,2 2>&1 | tail -n 3
} 2>&1 | tee "$OUT/smol-cost.txt"
[ -n "$NCU" ] || { say "no ncu"; exit 0; }
ncu_run() {   # ncu_run NAME SCRIPT ARGS...: one phase's kernels into /tmp/NAME.csv
    local name=$1; shift
    say "ncu: $name"
    NCU_TIMEOUT=${NCU_TIMEOUT:-180} ncu_kernels /tmp/$name.csv python3 "$@"
    echo "rc=$? kernels=$(grep -c '^"[0-9]' /tmp/$name.csv)"
}
ncu_run t1 $REPO/bench/device/step_cost.py $smol --mtp-head $head --ncu-phase 1
ncu_run t3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --ncu-phase 3
ncu_run d1 $REPO/bench/device/draft_cost.py --ncu-phase 1
ncu_run d2 $REPO/bench/device/draft_cost.py --ncu-phase 2
python3 $REPO/bench/device/kernel_breakdown.py $smol /tmp/t1.csv /tmp/t3.csv /tmp/d1.csv /tmp/d2.csv \
    --labels target-n1,target-n3,draft-k1,draft-k2 --json "$OUT/breakdown.json" > "$OUT/breakdown.txt" 2>&1
cat "$OUT/breakdown.txt" | head -n 60
tar czf "$OUT/ncu-csv.tgz" -C /tmp t1.csv t3.csv d1.csv d2.csv t1.err d1.err $(cd /tmp && ls ${EXTRA_FILES:-} 2>/dev/null)
say "done"
