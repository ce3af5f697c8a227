#!/usr/bin/env bash
# Two-GPU session (nvidia-h200-x2) for issue 16: a realistic 27B shape split across both GPUs by layer
# (llama.cpp's --split-mode layer), plain vs pristine upstream draft-mtp vs pymtp --mtp, decode and
# prefill (a ~2k-token prompt), side by side; then the same on one GPU, for what the split costs.
#   call 1  carry [.dev/call1, .dev/smol/smol.part0]   STEP=build   pymtp + pristine server (build_cuda.sh)
#   call 2  carry [.dev/smol/smol.part1]               STEP=split   (~6 min)
#   call 3  carry [.dev/smol/smol.part2, .dev/smol/smol.sha256]
#           STEP=bench CUDA_VISIBLE_DEVICES=0 bash bench/device/run_adaptive.sh   (the adaptive controller)
# Every call stores the built-in model's parts it carries in /tmp/smol-parts/ (run_adaptive.sh joins them).
# Knobs: REQUESTS (8), NPRED (128), PREFILL (2048), SINGLE (1: also the one-GPU run).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT" /tmp/smol-parts /tmp/split-logs
t0=$(date +%s)
say() { echo "[split +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/split-steps.txt"; }
for f in .dev/smol/smol.part* .dev/smol/smol.sha256; do [ -f "$f" ] && cp "$f" /tmp/smol-parts/; done
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1

case "${STEP:-split}" in
build)
    bash bench/device/build_cuda.sh; exit $?
    ;;
esac

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"
m=/tmp/qwen35-27b.gguf
if [ ! -f $m ]; then
    say "generating the qwen35 27B shape"
    python3 -m pymtp_devtools.realistic qwen35-27b $m --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 \
        | tr '\r' '\n' | grep -v ' / ' | tail -n 2
fi
uvp=(python3 bench/upstream_vs_pymtp.py $m --upstream-bin build/upstream-cuda/bin/llama-server --ngl 99
     --synthetic-rates 0.917,0.837,0.648 --n-draft 3 --requests "${REQUESTS:-8}" -n "${NPRED:-128}" --ctx 4096
     --prefill-tokens "${PREFILL:-2048}")
say "two GPUs, --split-mode layer"
"${uvp[@]}" --server-extra "--split-mode layer" --log-dir /tmp/split-logs/two --out "$OUT/split-layer-2gpu.json" \
    2>&1 | tee "$OUT/split-layer-2gpu.txt" | tail -n 8
grep -h "llama_model_load\|assigned to device\|model buffer size" /tmp/split-logs/two/pymtp.log 2>/dev/null \
    | grep -i "CUDA" | head -n 6 > "$OUT/split-devices.txt"
if [ "${SINGLE:-1}" = 1 ]; then
    say "one GPU"
    CUDA_VISIBLE_DEVICES=0 "${uvp[@]}" --log-dir /tmp/split-logs/one --out "$OUT/split-1gpu.json" \
        2>&1 | tee "$OUT/split-1gpu.txt" | tail -n 8
fi
say "done"
