#!/usr/bin/env bash
# GPU session: the 27B shape's own MTP block with a draft vocabulary (pymtp trim) against pristine
# upstream draft-mtp, side by side through llama-server (bench/upstream_vs_pymtp.py), synthetic
# acceptance so both accept exactly the same drafts (docs/journal/2026-11-24-draft-vocabulary.md, "Draft
# vocabularies of models with their own MTP layers").
#   call 1  carry [.dev/call1]   STEP=build bash bench/device/run_adaptive.sh   (pymtp CUDA build, ~6 min)
#   call 2  carry [.dev/call1]   bash bench/device/run_upstream_trim.sh
# .dev/call1 as bench/device/prepare.sh makes it (vendor.tar.xz, pristine.tar.xz, gguf wheel,
# ggml-vocab-qwen35.gguf, MT-Bench questions). The pristine llama-server is built here without a GPU
# backend and runs on pymtp's ggml libraries (~1 min at -j16; UPSTREAM_ENV below switches their
# ggml-cuda patches back for it). The model, the token
# counts (random: any subset costs the same) and each trimmed file are made on the box.
# Knobs: TRIMS ("8192"; "none" = pymtp without a draft vocabulary), K (3), RATES (0.917,0.837,0.648),
# UPSTREAM_ENV (the upstream servers' environment: by default the knobs that switch pymtp's ggml-cuda
# patches 0011, 0018, 0022, 0023 and 0024 back to upstream's behaviour, since they share pymtp's ggml libraries;
# patch 0016 has no knob and stays, which helps upstream; "none" = no knobs), PYMTP_ENV (the pymtp
# server's environment, e.g. a ggml-cuda knob under test), TAG (a suffix for the result files),
# PARALLEL (1: slots per server and concurrent clients; the aggregate tok/s), REQUESTS (8),
# MODEL (qwen35-27b, or qwen35moe-35b-a3b: the realistic shape).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
P=/tmp/upstream-cuda; t0=$(date +%s); say() { echo "[trim-vs-upstream +$(( $(date +%s) - t0 ))s] $*"; }
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
site=$(cd /tmp && python3 -c 'import os, pymtp; print(os.path.dirname(pymtp.__file__))') || exit 1
if [ ! -x $P/bin/llama-server ]; then
    rm -rf $P && mkdir -p $P/src && tar -xJf .dev/call1/pristine.tar.xz -C $P/src --strip-components=1
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S $P/src -B $P "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_NUMBER=0 -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=OFF -DGGML_NATIVE=ON > "$OUT/build-pristine.log" 2>&1 \
        && cmake --build $P --target llama-server -j "$(nproc)" >> "$OUT/build-pristine.log" 2>&1 \
        || { tail -n 20 "$OUT/build-pristine.log"; exit 1; }
    say "pristine llama-server built"
fi
# the pristine binaries keep their own libllama; ggml comes from pymtp (same SONAMEs)
rm -f $P/bin/libggml*.so*; for f in "$site"/lib/libggml*.so*; do ln -sf "$f" "$P/bin/"; done
$P/bin/llama-server --list-devices 2>&1 | tail -n 2
MODEL=${MODEL:-qwen35-27b}
m=/tmp/$MODEL.gguf
tag=$([ "$MODEL" = qwen35-27b ] && echo 27b || echo "$MODEL")
if [ ! -f $m ]; then
    python3 -m pymtp_devtools.realistic $MODEL $m --vocab-file .dev/call1/ggml-vocab-qwen35.gguf 2>&1 | tail -n 1
fi
[ -f /tmp/counts27b.npz ] || python3 -c "import numpy as np; c = np.random.default_rng(0).zipf(1.3, 248320); \
np.savez('/tmp/counts27b.npz', train=c.astype(np.int64), val=c.astype(np.int64))"
upstream_env=${UPSTREAM_ENV:-GGML_CUDA_GRAPH_KEY_BY_NODE=1 GGML_CUDA_GRAPH_REWARM=1 GGML_CUDA_MMVQ_MMA=0 GGML_CUDA_NO_CPY_BATCH=1 GGML_CUDA_MMVF_F32_SMALL=0}
[ "$upstream_env" = none ] && upstream_env=
say "upstream servers' environment: ${upstream_env:-(none)}; pymtp server's: ${PYMTP_ENV:-(none)}"
for n in ${TRIMS:-8192}; do
    if [ "$n" != none ] && [ ! -f /tmp/$tag-$n.mtp.gguf ]; then
        (cd /tmp && pymtp trim $m -n $n -o /tmp/$tag-$n.mtp.gguf --counts /tmp/counts27b.npz 2>&1 | tail -n 1)
    fi
    say "upstream vs pymtp, $MODEL, draft vocabulary $n, k=${K:-3}, ${PARALLEL:-1} slot(s)"
    python3 bench/upstream_vs_pymtp.py $m --upstream-bin $P/bin/llama-server --ngl 99 \
        --synthetic-rates "${RATES:-0.917,0.837,0.648}" --n-draft "${K:-3}" --requests "${REQUESTS:-8}" -n 128 \
        --ctx 2048 --parallel "${PARALLEL:-1}" \
        --pymtp-extra="$([ "$n" = none ] || echo --mtp-head /tmp/$tag-$n.mtp.gguf)" \
        --upstream-env "$upstream_env" --pymtp-env "${PYMTP_ENV:-}" \
        --log-dir "$OUT/logs-$n" --out "$OUT/uvp-$tag-trim$n-k${K:-3}-np${PARALLEL:-1}${TAG:-}.json" 2>&1 | grep -A 7 '^config'
done
say done
