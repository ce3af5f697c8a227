#!/usr/bin/env bash
# GPU session: pymtp against upstream at its best (docs/benchmarks.md, "How we measure"), the realistic
# 27B and MoE shapes, through llama-server, side by side, round-robin (bench/upstream_vs_pymtp.py).
# Carry .dev/call1 (bench/device/prepare.sh fills it) in the build call.
#   call 1  STEP=build bash bench/device/run_fair.sh     pymtp (CUDA sm_90, all cores) in the foreground,
#           ~6 min; the pristine tree with its OWN ggml-cuda (static) in the background (setsid: it goes on
#           after the call returns; PRISTINE=0 skips it)
#   call 2  bash bench/device/run_fair.sh                waits for the pristine build, makes the models, runs
#           every RUN in order, each result written to $OUT as it finishes
# RUNS: space-separated NAME=MODEL@CONFIGS (MODEL: 27b or moe; CONFIGS: bench/upstream_vs_pymtp.py --configs).
# Default: the 27B with plain / upstream k=3 (--backend-sampling) / pymtp default / pymtp k=3, then the MoE.
# Knobs: REQUESTS (16 on the 27B, 24 on the MoE), NPRED (128), RATES (0.917,0.837,0.648), PREFILL (600),
# E2E (512), CTX (4096), TRACE (1: PYMTP_ADAPTIVE_TRACE for every pymtp server; with the servers' logs in
# $OUT/traces.tgz). Results: $OUT/fair-NAME.json per run, $OUT/steps.txt.
set -uo pipefail
in=.dev/call1
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[fair +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
P=/tmp/upstream-own
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
mkdir -p $PYMTP_CACHE_DIR/data

if [ "${STEP:-bench}" = build ]; then
    cp $in/mt_bench_question.jsonl $PYMTP_CACHE_DIR/data/
    cp $in/ggml-vocab-qwen35.gguf $PYMTP_CACHE_DIR/
    mkdir -p vendor && rm -rf vendor/llama.cpp && tar -xJf $in/vendor.tar.xz -C vendor
    python3 -m pip install -q --no-index --no-deps $in/gguf-*.whl
    if [ "${PRISTINE:-1}" = 1 ]; then
        rm -rf $P && mkdir -p $P/src && tar -xJf $in/pristine.tar.xz -C $P/src --strip-components=1
        gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
        # upstream as users build it for a GPU: its own ggml-cuda, static, sm_90
        setsid nohup bash -c "cmake -S $P/src -B $P ${gen[*]} -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
            -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
            -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER=0 -DBUILD_SHARED_LIBS=OFF -DGGML_CUDA=on \
            -DCMAKE_CUDA_ARCHITECTURES=90 && nice -n 5 cmake --build $P --target llama-server -j 8; \
            echo \$? > $P.rc" > /tmp/pristine-build.log 2>&1 < /dev/null &
        say "pristine build (own ggml-cuda) started in the background"
    fi
    say "pymtp CUDA build, -j$(nproc)"
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        python3 -m pip install -v --no-build-isolation --no-deps . > "$OUT/build-pymtp.log" 2>&1
    rc=$?
    say "pymtp build rc=$rc"; [ $rc = 0 ] || tail -n 30 "$OUT/build-pymtp.log"
    exit $rc
fi

if [ "${PRISTINE:-1}" = 1 ]; then
    for _ in $(seq 1 120); do [ -f $P.rc ] && break; sleep 5; done
    [ "$(cat $P.rc 2>/dev/null)" = 0 ] || { say "pristine build failed or unfinished"; tail -n 20 /tmp/pristine-build.log; exit 1; }
    say "pristine llama-server: $($P/bin/llama-server --version 2>&1 | tail -n 1)"
fi
vocab=$PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
mkdir -p /tmp/traces
declare -A shape=([27b]=qwen35-27b [moe]=qwen35moe-35b-a3b)
declare -A reqs=([27b]=16 [moe]=24)
default_runs="27b=27b@plain,upstream:k=3,pymtp,pymtp:k=3 moe=moe@plain,upstream:k=3,pymtp"
for run in ${RUNS:-$default_runs}; do
    name=${run%%=*}; rest=${run#*=}; m=${rest%%@*}; configs=${rest#*@}
    f=/tmp/${shape[$m]}.gguf
    if [ ! -f $f ]; then
        say "making $f"
        python3 -m pymtp_devtools.realistic ${shape[$m]} $f --vocab-file $vocab 2>&1 | tr '\r' '\n' | tail -n 1
    fi
    if [ "${TRACE:-1}" = 1 ]; then   # every pymtp row traced, one file per run and row
        configs=$(echo "$configs" | tr ',' '\n' | awk -v r="$name" \
            '/^pymtp($|:)/ {printf "%s:env=PYMTP_ADAPTIVE_TRACE=%s/trace-%s-%d.tsv\n", $0, "/tmp/traces", r, NR; next} {print}' | paste -sd,)
    fi
    say "run $name: $m, $configs"
    up=(); [ -x $P/bin/llama-server ] && up=(--upstream-bin $P/bin/llama-server)
    python3 bench/upstream_vs_pymtp.py $f "${up[@]}" --ngl 99 --configs "$configs" \
        --synthetic-rates "${RATES:-0.917,0.837,0.648}" --requests "${REQUESTS:-${reqs[$m]}}" -n "${NPRED:-128}" \
        --ctx "${CTX:-4096}" --prefill-tokens "${PREFILL:-600}" --e2e-tokens "${E2E:-512}" \
        --log-dir /tmp/logs-$name --out "$OUT/fair-$name.json" 2>&1 | grep -v "^  prompt"
    # the traces (and the servers' logs) in one file: $OUT brings back at most 8 files
    tar -czf "$OUT/traces.tgz" -C /tmp traces $(cd /tmp && ls -d logs-* 2>/dev/null)
done
say done
