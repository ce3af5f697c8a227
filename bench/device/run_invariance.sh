#!/usr/bin/env bash
# Batch-invariant small decodes on CUDA (patch 0030): does each row of a 2..8-token decode round exactly like a
# one-token decode (MTP on's verify against MTP off's step), and what does it cost? One build; side A is
# GGML_CUDA_ROWS_INVARIANT=1 (upstream's attention and F16/F32 mat-vec choices), side B as built. Run after STEP=build of
# run_adaptive.sh on the same warm machine (PART=smol also after the calls that store the built-in model's parts).
#   PART=tiny  bench/device/batch_invariance.py on the tests' tiny F16 gemma3 and llama, each side, and
#              first_diverging_op.py on each (as built) -> $OUT/invariance-tiny.txt
#   PART=smol  the same on the built-in model (first_diverging_op.py with 3 rows); its target's decode times per size, each side (step_cost.py);
#              pymtp bench at T=0 (MTP off, k=1,2,3, auto; "greedy outputs identical"), side B, and side A too
#              with BENCH_A=1; the built-in model's greedy chat identity test and tests/engine/test_prefill_alignment.py on
#              the GPU (gpu_tests.sh); auto_vs_off with the sides alternating (ab_native.sh, AB=1)
#              -> $OUT/invariance-smol.txt, bench-t0-B.txt (bench-t0-A.txt), gpu-tests*.txt, t0/ab-summary.txt
#   PART=prefill  where a prefill's last row differs with every row's hidden state kept (patch 0031 on tiny qwen3 and
#              gemma3): batch_invariance.py's prefill check on the four tiny archs as built, side A (upstream's
#              choices: patches 0030 and 0032 left out), with ggml-cuda's fusions off and with CUDA graphs off; first_diverging_op.py --prefill on tiny qwen3 and gemma3; the prefill
#              tests on the GPU -> $OUT/invariance-prefill.txt, gpu-tests*.txt
# Knobs: LIMIT (16), NPRED (192), ORDER ("B A A B").
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
REPO=$PWD
mkdir -p "$OUT"
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
A="GGML_CUDA_ROWS_INVARIANT=1"
cxx=/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33   # numpy's libstdc++ must not load first (README.md here)
side_env() { [ "$1" = A ] && echo "$A"; }   # side_env SIDE: the environment assignment of that side, if any
both_sides() {   # both_sides ARGS...: batch_invariance.py under each side
    for side in A B; do
        e=$(side_env $side)
        echo "== side $side (${e:-as built})"
        (cd /tmp && env $e LD_PRELOAD=$cxx REPO=$REPO python3 $REPO/bench/device/batch_invariance.py "$@" 2>&1 \
            | grep -v '^llama\|^load\|^print_info\|^\.')
    done
}
case "${PART:-tiny}" in
tiny)
    {
        both_sides
        for a in gemma3 llama; do   # the models batch_invariance.py made
            (cd /tmp && LD_PRELOAD=$cxx python3 $REPO/bench/device/first_diverging_op.py /tmp/bi-$a.gguf 2 2>&1 | tail -n 13)
        done
    } 2>&1 | tee "$OUT/invariance-tiny.txt"
    ;;
prefill)
    {
        for e in "" "$A" GGML_CUDA_DISABLE_FUSION=1 GGML_CUDA_DISABLE_GRAPHS=1; do
            echo "== ${e:-as built}"
            (cd /tmp && env $e ARCHS="llama qwen2 qwen3 gemma3" PREFILL_ONLY=1 LD_PRELOAD=$cxx REPO=$REPO \
                python3 $REPO/bench/device/batch_invariance.py 2>&1 | grep 'prefill\|Error\|error')
        done
        for a in qwen3 gemma3; do
            (cd /tmp && LD_PRELOAD=$cxx python3 $REPO/bench/device/first_diverging_op.py /tmp/bi-$a.gguf --prefill 2>&1 \
                | tail -n 13)
        done
    } 2>&1 | tee "$OUT/invariance-prefill.txt"
    TESTS="tests/engine/test_prefill_alignment.py" SKIP_SYNC=1 bash bench/device/gpu_tests.sh > /dev/null 2>&1
    echo "== GPU prefill tests"; tail -n 6 "$OUT/gpu-tests.txt"
    ;;
smol)
    OUT=/tmp/inv-model STEP=model bash bench/device/run_adaptive.sh > /dev/null || exit 1
    smol=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
    head=$REPO/pymtp/data/SmolLM2-135M-Instruct.Q4_1.mtp.gguf
    {
        both_sides $smol
        (cd /tmp && LD_PRELOAD=$cxx python3 $REPO/bench/device/first_diverging_op.py $smol 3 2>&1 | tail -n 13)
        for side in A B; do
            e=$(side_env $side)
            echo "== target decodes, side $side"
            (cd /tmp && env $e python3 $REPO/bench/device/step_cost.py $smol --mtp-head $head --sizes 1,2,3,4,5,8 \
                2>&1 | tail -n 7)
        done
    } 2>&1 | tee "$OUT/invariance-smol.txt"
    args=(--prompts mtbench --limit "${LIMIT:-16}" -n "${NPRED:-192}" --n-drafts 1,2,3,auto --ngl 99)
    for side in B ${BENCH_A:+A}; do
        e=$(side_env $side)
        (cd /tmp && env $e pymtp bench "${args[@]}" > "$OUT/bench-t0-$side.txt" 2>&1)
        echo "== pymtp bench T=0, side $side"; tail -n 14 "$OUT/bench-t0-$side.txt"
    done
    # greedy chats MTP on == off on the built-in model, on the GPU (tests/engine/test_real_model_lossless.py), and patch 0031's
    # prefill check (tests/engine/test_prefill_alignment.py); gpu_tests.sh writes $OUT/gpu-tests*.txt
    TESTS="tests/engine/test_real_model_lossless.py::test_greedy_chat_identical_on_the_quantized_built_in_model
        tests/engine/test_prefill_alignment.py" TEST_TIMEOUT=240 SKIP_SYNC=1 bash bench/device/gpu_tests.sh > /dev/null 2>&1
    echo "== GPU identity tests"; tail -n 4 "$OUT/gpu-tests.txt"
    if [ "${AB:-1}" = 1 ]; then
        mkdir -p "$OUT/t0"
        OUT=$OUT/t0 AB_ENV_A="$A" AB_ENV_B="" AB_ORDER="${ORDER:-B A A B}" \
            AB_AVO="--ngl 99 --limit ${LIMIT:-16} --passes 1 -n ${NPRED:-192} --fixed 1,2,3" bash bench/device/ab_native.sh
    fi
    ;;
esac
