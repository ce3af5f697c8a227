#!/usr/bin/env bash
# A/B of native source files on one GPU machine, in one build: side A is the files as committed at
# AB_REV (default HEAD), side B is the working tree's. The runs alternate between the sides in AB_ORDER,
# and the package is reinstalled between them (an incremental rebuild, ~30 s). Used for the adaptive
# controller on 2026-11-26 (docs/results/adaptive-2026-11-26-h100/): a ratio to MTP off moves by
# ~5% between identical runs on the H100, so one run per side says little.
#
# Two calls on one machine (as run on 2026-11-26, night: docs/results/adaptive-2026-11-26-night/). The
# model travels xz'd in two parts, the first with the build: the tracked tree (~17 MB) counts against a
# call's 64 MiB, so head -c 42000000 for part0, the rest (~48.5 MB) for part1. Side A's files are carried
# in .dev/ab/A (git show HEAD:FILE > .dev/ab/A/BASENAME): the device's copy may have no git history.
#   Call 1 (the build installs side B), carry [".dev/callb", ".dev/smol/smolxz.part0"]:
#     mkdir -p .dev && rm -rf .dev/call1 && mv .dev/callb .dev/call1 && STEP=build bash bench/device/run_adaptive.sh
#   Call 2, carry [".dev/smol/smolxz.part1", ".dev/smol/smol.sha256", ".dev/ab/A"]:
#     AB_FILES="$(ls native/engine/mtp-adaptive*.{h,cpp})" AB_ORDER="B A B A" \
#       AB_AVO="--ngl 99 --limit 80 --passes 1 -n 192" AB_TRACE=1 bash bench/device/ab_native.sh
# Later calls on the same warm machine start from the side installed last (/tmp/ab-installed).
#
# Knobs: AB_FILES (the files that differ; empty: one build, the sides differ by AB_ENV_A/AB_ENV_B only),
# AB_ENV_A, AB_ENV_B (environment assignments for each side's runs, e.g. "LLAMA_KV_WINDOW=256"),
# AB_REV (HEAD), AB_ORDER ("B B A A B B A A"),
# AB_BENCH (the pymtp bench arguments; default: 16 MT-Bench first turns x 192, k=2 and auto, --ngl 99),
# AB_AVO (instead of pymtp bench: bench/auto_vs_off.py with these arguments, e.g. "--ngl 99 --limit 80
# --passes 1"), AB_TRACE (run numbers, e.g. "1 2": those runs write PYMTP_ADAPTIVE_TRACE to $OUT/ab-trace-<run>.tsv.gz).
# Results: $OUT/ab-summary.txt, and $OUT/ab-results.tgz with ab-<side>-<run>.{txt,json} and any trace (a call
# brings back at most 8 files).
set -uo pipefail
OUT_CALL=${OUT:-/tmp/pymtp-out}
OUT=/tmp/ab-results   # every file of the runs; packed into $OUT_CALL at the end
rm -rf "$OUT" && mkdir -p "$OUT_CALL"
: "${AB_FILES:=}"
[ -n "$AB_FILES${AB_ENV_A:-}${AB_ENV_B:-}" ] || { echo "ab_native.sh: AB_FILES or AB_ENV_A/AB_ENV_B must set the sides apart" >&2; exit 1; }
mkdir -p "$OUT" .dev/ab/A .dev/ab/B /tmp/smol-parts
[ -n "${AB_ENV_A:-}${AB_ENV_B:-}" ] && echo "side A's environment: ${AB_ENV_A:-(as is)}; side B's: ${AB_ENV_B:-(as is)}" > "$OUT/ab-summary.txt"
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
for f in $AB_FILES; do
    # side A carried in .dev/ab/A (the device's copy of the tree may have no git history), else from git
    if [ -s ".dev/ab/A/$(basename "$f")" ]; then
        echo "side A's $(basename "$f"): carried in .dev/ab/A (AB_REV not used)" | tee -a "$OUT/ab-summary.txt"
    else
        git show "${AB_REV:-HEAD}:$f" > ".dev/ab/A/$(basename "$f")" || exit 1
    fi
    cp "$f" ".dev/ab/B/$(basename "$f")" || exit 1
done
OUT=/tmp/ab-model STEP=model bash bench/device/run_adaptive.sh || exit 1   # stores the carried parts, assembles
install() {   # put side $1's files in place and reinstall (the build call's flags: no reconfigure)
    local f t
    for f in $AB_FILES; do cp ".dev/ab/$1/$(basename "$f")" "$f"; done
    t=$(date +%s)
    CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        python3 -m pip install -q --no-build-isolation --no-deps . > "/tmp/ab-install-$1.log" 2>&1 \
        || { tail -20 "/tmp/ab-install-$1.log"; exit 1; }
    echo "$1" > /tmp/ab-installed   # a later call on the same machine starts from this side
    echo "installed side $1 in $(( $(date +%s) - t )) s" | tee -a "$OUT/ab-summary.txt"
}
read -ra bench_args <<< "${AB_BENCH:---prompts mtbench --limit 16 -n 192 --n-drafts 2,auto --ngl 99}"
read -ra avo_args <<< "${AB_AVO:-}"
repo=$(pwd)
run() {       # one pymtp bench (or auto_vs_off.py) of side $1, run number $2, from /tmp (not the source tree)
    local trace=/tmp/ab-trace-$2.tsv
    rm -f "$trace"
    (
        cd /tmp
        [[ " ${AB_TRACE:-} " == *" $2 "* ]] && export PYMTP_ADAPTIVE_TRACE=$trace
        local env_side="AB_ENV_$1" kv
        for kv in ${!env_side:-}; do export "$kv"; done
        if [ -n "${AB_AVO:-}" ]; then
            python3 "$repo/bench/auto_vs_off.py" "${avo_args[@]}" --json "$OUT/ab-$1-$2.json" > "$OUT/ab-$1-$2.txt" 2>&1
        else
            pymtp bench "${bench_args[@]}" --json "$OUT/ab-$1-$2.json" > "$OUT/ab-$1-$2.txt" 2>&1
        fi
    )
    [ -f "$trace" ] && gzip -c "$trace" > "$OUT/ab-trace-$2.tsv.gz"
    grep -E "^(off|mtp|auto|k=|noise)" "$OUT/ab-$1-$2.txt" | sed "s/^/$1 $2  /" | cut -c1-140 | tee -a "$OUT/ab-summary.txt"
}
i=0
cur=$(cat /tmp/ab-installed 2>/dev/null || echo B)   # the build call installed the working tree
for side in ${AB_ORDER:-B B A A B B A A}; do
    i=$((i + 1))
    [ -n "$AB_FILES" ] && [ "$cur" != "$side" ] && { install "$side"; cur=$side; }
    run "$side" "$i"
done
for f in $AB_FILES; do cp ".dev/ab/B/$(basename "$f")" "$f"; done   # the working tree as carried
cp "$OUT/ab-summary.txt" "$OUT_CALL/"
tar -czf "$OUT_CALL/ab-results.tgz" -C "$OUT" .
