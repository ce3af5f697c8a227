#!/usr/bin/env bash
# A/B of one ggml-cuda patch in one run (issue 19), on a warm machine after STEP=build of
# run_adaptive.sh (pymtp installed, the patch in): the same ggml-cuda built without the patch, swapped
# in through PYMTP_LIB_DIR (a copy of the installed library folder with libggml-cuda replaced), so both
# run back to back with the rest of the build identical.
#   STEP=base  copy vendor/llama.cpp, reverse PATCH (default: the newest in patches/), build ggml-cuda
#              only (shared, sm_90) in /tmp/ab-build, and make /tmp/ab-lib (~5 min)
#   STEP=run   bench/device/step_cost.py (SIZES, default 1,2,3,4,5,8) and pymtp bench on the 27B shape
#              (k=3,4 and auto at the field's six rates, RLIMIT x RNPRED) with each library, alternating
#              ROUNDS (2) times. Results in $OUT: step-cost-{patched,base}-<round>.txt, bench-*.txt.
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[mmvq-ab +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
patch_file=${PATCH:-$(ls patches/*.patch | tail -n 1)}
libdir=$(cd /tmp && python3 -c "import pymtp._native.lib as l; print(l.lib_dir())")
case "${STEP:-run}" in
base)
    say "base: $patch_file reversed, ggml-cuda only"
    rm -rf /tmp/ab-src /tmp/ab-build /tmp/ab-lib && cp -r vendor/llama.cpp /tmp/ab-src
    (cd /tmp/ab-src && patch -R -p1 --quiet < "$REPO/$patch_file") || exit 1
    cmake -S /tmp/ab-src -B /tmp/ab-build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_RPC=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_TOOLS=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF > "$OUT/base-configure.log" 2>&1 || exit 1
    cmake --build /tmp/ab-build --target ggml-cuda -j"$(nproc)" > "$OUT/base-build.log" 2>&1
    rc=$?
    say "build rc=$rc"
    cp -r "$libdir" /tmp/ab-lib && rm -f /tmp/ab-lib/libggml-cuda.so*
    cp -a /tmp/ab-build/bin/libggml-cuda.so* /tmp/ab-lib/
    ls -la /tmp/ab-lib | grep cuda
    exit $rc
    ;;
esac
m=/tmp/qwen35-27b.gguf
if [ ! -f $m ]; then
    say "generating the qwen35 27B shape"
    python3 -m pymtp_devtools.realistic qwen35-27b $m --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 | tail -n 1
fi
cd /tmp
for r in $(seq 1 "${ROUNDS:-2}"); do
    for v in patched base; do
        if [ $v = base ]; then
            export PYMTP_LIB_DIR=/tmp/ab-lib LD_LIBRARY_PATH=/tmp/ab-lib
        else
            unset PYMTP_LIB_DIR LD_LIBRARY_PATH
        fi
        # which libggml-cuda the process maps (the A/B is void if both runs load the same one)
        python3 -c "import pymtp._native.lib as L; L.load(); print(''.join(sorted({l.split()[-1] + chr(10) for l in open('/proc/self/maps') if 'ggml-cuda' in l})))" 2>&1 | tail -n 2
        say "round $r, $v: step cost"
        python3 "$REPO/bench/device/step_cost.py" $m --sizes "${SIZES:-1,2,3,4,5,8}" > "$OUT/step-cost-$v-$r.txt" 2>&1
        sed -n 2,20p "$OUT/step-cost-$v-$r.txt"
        if [ "${BENCH:-1}" = 1 ]; then
            say "round $r, $v: pymtp bench"
            pymtp bench $m --prompts mtbench --limit "${RLIMIT:-8}" -n "${RNPRED:-128}" --n-drafts 3,4,auto --ngl 99 \
                --synthetic-rates 0.917,0.837,0.648,0.538,0.451,0.348 --ctx 2048 > "$OUT/bench-$v-$r.txt" 2>&1
            grep -E "^(off|mtp)" "$OUT/bench-$v-$r.txt"
        fi
    done
done
unset PYMTP_LIB_DIR LD_LIBRARY_PATH
say "done"
