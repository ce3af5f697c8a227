#!/usr/bin/env bash
# GPU session, call 2 (bench/device/README.md): carry .dev/call1; after build_cuda.sh.
# For each realistic random-weight model (pymtp_devtools/realistic.py), made here on the box:
#   1. plain vs pristine upstream --spec-type draft-mtp vs pymtp --mtp, side by side through
#      llama-server (bench/upstream_vs_pymtp.py), synthetic acceptance 0.917/0.837/0.648, k=3;
#      UPSTREAM_HOST=1 adds a run with upstream's draft sampling on the host (--no-spec-draft-backend-sampling);
#   2. (ENGINE_BENCH=1) `pymtp bench` with the same rates, k=1..3: D, V(k+1) and the bound.
# Every result is written to $OUT as soon as it exists, so a call cut off by its limit still returns
# what finished. BUDGET_S (default 560) skips a step that would start after that many seconds.
# Knobs: MODELS, REQUESTS (8), NPRED (128), CTX (2048), ENGINE_BENCH (0), KEEP_MODELS (0),
# UPSTREAM_BIN (build/upstream-cuda/bin/llama-server), SCALE (1; e.g. 0.05 for a dry run).
set -uo pipefail
in=.dev/call1
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
say() { echo "[realistic +$(el)s] $*" | tee -a "$OUT/realistic-steps.txt"; }
budget=${BUDGET_S:-560}
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
mkdir -p $PYMTP_CACHE_DIR/data
[ -f $in/mt_bench_question.jsonl ] && cp $in/mt_bench_question.jsonl $PYMTP_CACHE_DIR/data/
vocab=$in/ggml-vocab-qwen35.gguf; [ -f $vocab ] || vocab=$PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf
site=$(cd /tmp && python3 -c 'import importlib.util as u; print(u.find_spec("pymtp").submodule_search_locations[0])')
[ "${SKIP_SYNC:-0}" = 1 ] || (cd pymtp && find . -name '*.py' -exec cp --parents {} "$site/" \;)
up=${UPSTREAM_BIN:-build/upstream-cuda/bin/llama-server}
rates=0.917,0.837,0.648
dir=${MODEL_DIR:-/tmp/realistic}
mkdir -p "$dir"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"

for m in ${MODELS:-qwen35-27b qwen35moe-35b-a3b}; do
    [ "$(el)" -lt "$budget" ] || { say "budget spent: skipping $m"; continue; }
    f=$dir/$m.gguf
    if [ ! -f "$f" ]; then
        say "generating $m (disk free: $(df -h --output=avail "$dir" | tail -n 1))"
        python3 -m pymtp_devtools.realistic "$m" "$f" --vocab-file "$vocab" --scale "${SCALE:-1}" 2>&1 \
            | tr '\r' '\n' | grep -v ' / ' | tee -a "$OUT/realistic-gen.txt" || { say "generation failed"; continue; }
    fi
    say "upstream vs pymtp on $m"
    uvp=(python3 bench/upstream_vs_pymtp.py "$f" --upstream-bin "$up" --ngl 99 --synthetic-rates $rates
         --n-draft 3 --requests "${REQUESTS:-8}" -n "${NPRED:-128}" --ctx "${CTX:-2048}")
    if ! "${uvp[@]}" --log-dir "$OUT/logs-$m" --out "$OUT/upstream-vs-pymtp-h100-$m.json" \
            2>&1 | tee "$OUT/upstream-vs-pymtp-h100-$m.txt" || [ ! -f "$OUT/upstream-vs-pymtp-h100-$m.json" ]; then
        # three servers side by side did not work (e.g. out of GPU memory): one at a time
        [ "$(el)" -lt "$budget" ] && { say "retrying $m with --serial"
            "${uvp[@]}" --serial --log-dir "$OUT/logs-$m-serial" --out "$OUT/upstream-vs-pymtp-h100-$m-serial.json" \
                2>&1 | tee "$OUT/upstream-vs-pymtp-h100-$m-serial.txt"; }
    fi
    if [ "${UPSTREAM_HOST:-0}" = 1 ] && [ "$(el)" -lt "$budget" ]; then
        # the same comparison with upstream's drafts sampled on the host, like pymtp before patch 0018
        say "upstream vs pymtp on $m, upstream --no-spec-draft-backend-sampling"
        "${uvp[@]}" --upstream-extra=--no-spec-draft-backend-sampling --log-dir "$OUT/logs-$m-host" \
            --out "$OUT/upstream-vs-pymtp-h100-$m-upstream-host-sampling.json" \
            2>&1 | tee "$OUT/upstream-vs-pymtp-h100-$m-upstream-host-sampling.txt"
    fi
    if [ "${ENGINE_BENCH:-0}" = 1 ] && [ "$(el)" -lt "$budget" ]; then
        say "pymtp bench on $m"
        (cd /tmp && pymtp bench "$f" --prompts mtbench --limit "${REQUESTS:-8}" -n "${NPRED:-128}" --n-drafts 1,2,3 \
            --ngl 99 --ctx "${CTX:-2048}" --synthetic-rates $rates --json "$OUT/bench-h100-$m-synth.json") 2>&1 \
            | tr '\r' '\n' | grep -v '^bench: ' | tee "$OUT/bench-h100-$m-synth.txt"
    fi
    [ "${KEEP_MODELS:-0}" = 1 ] || rm -f "$f"
done
say "done"
