#!/usr/bin/env bash
# SmolLM2 + shipped head benchmarks on the device (after build_cuda.sh; optional, not in the run plan of
# README.md: those H100 numbers are in docs/journal/2026-11-22-first-tables.md). Results land in $OUT.
# BENCH_LIMIT_MODES: prompts for the draft-mode x temperature sweep (default 24).
set -uxo pipefail
# The built-in model (98 MB) exceeds one call's carry: carry .dev/smol/smol.part1 in one call and
# .dev/smol/smol.part2 + .dev/smol/smol.sha256 in the next; each call appends what it finds.
in=.dev/smol
export PYMTP_CACHE_DIR=/tmp/pymtp-cache PYTHONUNBUFFERED=1
mkdir -p $PYMTP_CACHE_DIR/models $PYMTP_CACHE_DIR/data
smol=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -f $smol ]; then
    [ -f $in/smol.part1 ] && cp $in/smol.part1 /tmp/smol.gguf
    if [ -f $in/smol.part2 ] && [ -f /tmp/smol.gguf ]; then
        cat $in/smol.part2 >> /tmp/smol.gguf
        echo "$(cat $in/smol.sha256)  /tmp/smol.gguf" | sha256sum -c - || exit 1
        mv /tmp/smol.gguf $smol
    fi
    [ -f $smol ] || { echo "SmolLM2 not complete yet (part 1 stored in /tmp/smol.gguf?)"; exit 0; }
fi
cp .dev/call1/mt_bench_question.jsonl $PYMTP_CACHE_DIR/data/ 2>/dev/null || true
# Python edits made after build_cuda.sh: copy the tree's package sources over the installed ones
# (run the installed package: python3 -m ... in the repo root would import the unbuilt source tree)
site=$(cd /tmp && python3 -c 'import os, pymtp; print(os.path.dirname(pymtp.__file__))')
(cd pymtp && find . -name '*.py' -exec cp --parents {} "$site/" \;)
git rev-parse --short HEAD 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# On this box numpy's libstdc++ must not load before libllama (docs/journal/2026-11-23-offline-gpu-box-libstdcxx.md):
# the GPU tests (pytest imports numpy first) crash there; benchmarks run from /tmp without --plot.
if [ "${SKIP_TESTS:-1}" != 1 ]; then
    PYMTP_TEST_NGL=99 pytest -q -p no:cacheprovider tests/engine/test_engine_lossless.py \
        tests/engine/test_dense_mtp.py tests/cli/test_bench.py 2>&1 | tail -n 15 | tee $OUT/gpu-tests.log
fi
if [ "${SKIP_K:-0}" != 1 ]; then
    (cd /tmp && pymtp bench --prompts mtbench -n 256 --n-drafts 1,2,3,4 --ngl 99 \
        --json $OUT/smollm2-gpu-k.json) 2>&1 | tr '\r' '\n' | grep -v '^bench: ' | tee $OUT/smollm2-gpu-k.txt
fi
if [ "${SKIP_MODES:-0}" != 1 ]; then
    (cd /tmp && pymtp bench --prompts mtbench --limit "${BENCH_LIMIT_MODES:-32}" -n 256 --n-drafts 3 --ngl 99 \
        --modes greedy,chain,stochastic --temps 0,0.7,1.0 --repeat-penalties 1,1.1 \
        --json $OUT/smollm2-gpu-modes.json)
fi
if [ "${SKIP_SYNTH:-0}" != 1 ]; then
    (cd /tmp && pymtp bench --prompts mtbench --limit 16 -n 256 --n-drafts 1,2,3 --ngl 99 \
        --synthetic-rates 0.917,0.837,0.648 --json $OUT/smollm2-gpu-synth.json) 2>&1 | tr '\r' '\n' | grep -v '^bench: ' | tee $OUT/smollm2-gpu-modes.txt
fi
