#!/usr/bin/env bash
# GPU session for the adaptive draft controller (docs/adaptive.md; runs in docs/journal/).
# The built-in model (98 MB) does not fit one call's carry: split it on the dev machine with
#     split -b 33000000 -d -a 1 ~/.cache/pymtp/models/SmolLM2-135M-Instruct.Q4_1.gguf .dev/smol/smol.part
#     sha256sum ~/.cache/pymtp/models/SmolLM2-135M-Instruct.Q4_1.gguf | cut -d' ' -f1 > .dev/smol/smol.sha256
# and carry one part per call; every call stores the parts it finds in /tmp/smol-parts/. Two calls
# instead of three (one gap in which the machine can go back, not two): xz it into two parts,
#     xz -T2 -c MODEL > m.xz; head -c 40000000 m.xz > .dev/smol/smolxz.part0; tail -c +40000001 m.xz > .dev/smol/smolxz.part1
# carry smolxz.part0 with the build and smolxz.part1 + smol.sha256 with STEP=bench.
#   call 1  carry [.dev/call1, .dev/smol/smol.part0]  STEP=build  pymtp CUDA build, installed (~7 min)
#   call 2  carry [.dev/smol/smol.part1]              STEP=store
#   call 3  carry [.dev/smol/smol.part2, .dev/smol/smol.sha256]  STEP=bench
# STEP=model: only put the built-in model in place from the stored parts (ab_native.sh uses it).
# STEP=bench: the built-in model (+ shipped head), MT-Bench first turns, MTP off vs k=1,2,3 vs auto,
# T=0 and T=0.7; then the realistic qwen35 27B shape with the field's six per-position rates, fixed
# k=1..6 vs auto. Results land in $OUT (bench-*.txt/json). Knobs: LIMIT (16), NPRED (256),
# RLIMIT (8), RNPRED (128), SKIP_REALISTIC (0), RUNS ("smol-t0 smol-t07 27b": which benches, in
# order; "heads" benches every head carried in .dev/heads/ at T=0 and T=0.7; "parallel" compares
# every head stored from .dev/par/ (e.g. seq.gguf and the parallel par4.gguf; bench/parallel_heads.py); "27b-trim" benches the 27B
# shape's own MTP block untrimmed and with draft vocabularies of TRIM_N ("32768 8192") tokens), AB_ENV (unset;
# VAR=VALUE runs each bench first with it, see bench() below).
set -uo pipefail
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT" /tmp/smol-parts
t0=$(date +%s)
say() { echo "[adaptive +$(( $(date +%s) - t0 ))s] $*" | tee -a "$OUT/steps.txt"; }
for f in .dev/smol/smol.part* .dev/smol/smolxz.part* .dev/smol/smol.sha256; do [ -f "$f" ] && cp "$f" /tmp/smol-parts/; done
# heads to compare with the shipped one (RUNS=heads): every call stores the .dev/heads/*.gguf it carries
mkdir -p /tmp/heads && for f in .dev/heads/*.gguf; do [ -f "$f" ] && cp "$f" /tmp/heads/; done
# RUNS=parallel: every .dev/par/*.gguf (e.g. seq.gguf and par4.gguf), stored the same way, so heads too big for
# one call ride in several
mkdir -p /tmp/par && for f in .dev/par/*.gguf; do [ -f "$f" ] && cp "$f" /tmp/par/; done
REPO=$(pwd)
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
mkdir -p $PYMTP_CACHE_DIR/models $PYMTP_CACHE_DIR/data

case "${STEP:-bench}" in
build)
    in=.dev/call1
    cp $in/mt_bench_question.jsonl $PYMTP_CACHE_DIR/data/
    cp $in/ggml-vocab-qwen35.gguf $PYMTP_CACHE_DIR/
    mkdir -p vendor && rm -rf vendor/llama.cpp && tar -xJf $in/vendor.tar.xz -C vendor
    python3 -m pip install -q --no-index --no-deps $in/gguf-*.whl
    say "pip install (CUDA sm_90, -j$(nproc))"
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        python3 -m pip install -v --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1
    rc=$?
    say "build rc=$rc"; tail -n 5 "$OUT/build.log"
    exit $rc
    ;;
esac

# the built-in model from the parts stored in /tmp/smol-parts, checked against its sha256 (once per machine)
smol=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
assemble_smol() {
    [ -f $smol ] && return 0
    if [ -f /tmp/smol-parts/smolxz.part0 ]; then   # two xz parts: one rides with the build call
        cat /tmp/smol-parts/smolxz.part* | xz -dc > /tmp/smol.gguf || exit 1
    else
        cat /tmp/smol-parts/smol.part0 /tmp/smol-parts/smol.part1 /tmp/smol-parts/smol.part2 > /tmp/smol.gguf || exit 1
    fi
    echo "$(cat /tmp/smol-parts/smol.sha256)  /tmp/smol.gguf" | sha256sum -c - || exit 1
    mv /tmp/smol.gguf $smol
}
case "${STEP:-bench}" in
store)
    ls -la /tmp/smol-parts; exit 0
    ;;
model)   # for other scripts (ab_native.sh): the model in place, nothing else
    assemble_smol; exit 0
    ;;
esac
[[ "${RUNS:-smol}" =~ smol|heads|parallel ]] && assemble_smol
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$OUT/commit.txt"
m=/tmp/qwen35-27b.gguf
if [ "${SKIP_REALISTIC:-0}" != 1 ] && [[ "${RUNS:-27b}" == *27b* ]] && [ ! -f $m ]; then
    say "generating the qwen35 27B shape"   # from the repo root: pymtp_devtools lives there
    python3 -m pymtp_devtools.realistic qwen35-27b $m --vocab-file $PYMTP_CACHE_DIR/ggml-vocab-qwen35.gguf 2>&1 \
        | tr '\r' '\n' | grep -v ' / ' | tail -n 3
fi
# run the installed package from /tmp (the repo root would import the unbuilt source tree); numpy's
# libstdc++ must not load before libllama on this box (no --plot)
cd /tmp
# bench NAME ARGS...: one pymtp bench into $OUT/bench-NAME.{txt,json}. An A/B run first runs it with
# AB_ENV in the environment into bench-NAME-ab.*: AB_ENV=GGML_CUDA_GRAPH_KEY_BY_NODE=1 is ggml-cuda's
# old graph key (one CUDA graph per context, patch 0011 off; GRAPH_AB=1 says the same),
# AB_ENV=GGML_CUDA_GRAPH_REWARM=1 upstream's eager warm-up after every change (patch 0018 off)
[ "${GRAPH_AB:-0}" = 1 ] && AB_ENV=${AB_ENV:-GGML_CUDA_GRAPH_KEY_BY_NODE=1}
bench() {
    local name=$1; shift
    if [ -n "${AB_ENV:-}" ]; then
        say "$name, with $AB_ENV"
        env -u PYMTP_ADAPTIVE_TRACE "$AB_ENV" pymtp bench "$@" --json "$OUT/bench-$name-ab.json" > "$OUT/bench-$name-ab.txt" 2>&1
        tail -n 12 "$OUT/bench-$name-ab.txt"
    fi
    say "$name"
    pymtp bench "$@" --json "$OUT/bench-$name.json" > "$OUT/bench-$name.txt" 2>&1
    tail -n 12 "$OUT/bench-$name.txt"
}
smol_args=(--prompts mtbench --limit "${LIMIT:-16}" -n "${NPRED:-256}" --n-drafts 1,2,3,auto --ngl 99)
for run in ${RUNS:-smol-t0 smol-t07 27b}; do
    case $run in
    smol-t0) bench smollm2-h100-t0 "${smol_args[@]}" ;;
    smol-t07) bench smollm2-h100-t07 "${smol_args[@]}" --temp 0.7 ;;
    heads)   # each carried head next to MTP off, T=0 and T=0.7 (same prompts and settings as smol-*)
        for h in /tmp/heads/*.gguf; do
            n=$(basename "$h" .gguf)
            bench "smollm2-h100-$n-t0" "${smol_args[@]}" --mtp-head "$h"
            bench "smollm2-h100-$n-t07" "${smol_args[@]}" --mtp-head "$h" --temp 0.7
        done ;;
    parallel)   # issue 18: the parallel head against the sequential one (bench/parallel_heads.py): the draft
                # cost D_k for k = 1..6 (every draft accepted), then speed at T=0
        ph=(--prompts mtbench --ngl 99)   # every head stored in /tmp/par, named by its file
        for h in /tmp/par/*.gguf; do ph+=(--head "$(basename "$h" .gguf)=$h"); done
        say "parallel heads: draft cost"
        python3 $REPO/bench/parallel_heads.py $smol "${ph[@]}" --draft-cost 6 --limit 8 -n 128 \
            --json $OUT/par-dcost.json > $OUT/par-dcost.txt 2>&1; tail -n 14 $OUT/par-dcost.txt
        say "parallel heads: speed"
        python3 $REPO/bench/parallel_heads.py $smol "${ph[@]}" --n-drafts 1,2,3,4,auto --limit "${LIMIT:-16}" \
            -n "${NPRED:-256}" --json $OUT/par-speed.json > $OUT/par-speed.txt 2>&1; tail -n 12 $OUT/par-speed.txt ;;
    27b-trim)   # the 27B shape's own MTP block with draft vocabularies of TRIM_N tokens vs untrimmed,
                # k=3 and k=6 at the field's rates (D is what changes; random weights: synthetic acceptance)
        python3 -c "import numpy as np; r = np.random.default_rng(0); c = r.zipf(1.3, 248320).astype(np.int64); \
np.savez('/tmp/counts27b.npz', train=c, val=c)"
        r27=(--prompts mtbench --limit "${RLIMIT:-8}" -n "${RNPRED:-128}" --n-drafts 3,6 --ngl 99 --ctx 2048
             --synthetic-rates 0.917,0.837,0.648,0.538,0.451,0.348)
        bench qwen35-27b-h100-untrimmed $m "${r27[@]}"
        for n in ${TRIM_N:-32768 8192}; do
            say "pymtp trim -n $n"
            pymtp trim $m -n $n -o /tmp/q27-$n.mtp.gguf --counts /tmp/counts27b.npz 2>&1 | tail -n 2
            bench "qwen35-27b-h100-trim$n" $m "${r27[@]}" --mtp-head /tmp/q27-$n.mtp.gguf
        done ;;
    27b)
        [ "${SKIP_REALISTIC:-0}" = 1 ] && continue
        bench qwen35-27b-h100-six-rates $m --prompts mtbench --limit "${RLIMIT:-8}" -n "${RNPRED:-128}" \
            --n-drafts 1,2,3,4,5,6,auto --ngl 99 --synthetic-rates 0.917,0.837,0.648,0.538,0.451,0.348 --ctx 2048
        ;;
    esac
done
say "done"
