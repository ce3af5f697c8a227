#!/usr/bin/env bash
# Train a 3-head chained MTP set for SmolLM2-135M-Instruct on the device GPU (issue #5, section 3):
#   pymtp graft --heads 3  ->  $OUT/SmolLM2-135M-Instruct.Q4_1.mtp3.gguf + $OUT/graft-heads3.json
#
# Run after build_cuda.sh (pymtp installed, CUDA) with the model at
# $PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf (PYMTP_CACHE_DIR default /tmp/pymtp-cache;
# when /tmp/smol.gguf holds part 1 and .dev/call2 part 2, it is assembled as in run_gpu.sh):
#
#     bash bench/device/graft_heads.sh        # about 5-6 minutes on one H100
#
# Recipe: the built-in prompt set, text the base writes itself (no MT-Bench data), as for the
# first shipped single head (docs/results/graft-smollm2-h100.json in git history at e0e0cbe: 10000 samples,
# 6000 steps, batch 16 x 512 tokens, lr 1e-3, init mix; 448 s on one H100). To fit ~6 minutes with three heads (each
# step runs three head passes and their loss) this uses SAMPLES=6000 generated sequences and
# STEPS=2500; everything else is the default recipe. HEADS, STEPS, SAMPLES, BATCH override.
#
# The device's CUDA libllama crashes in the vocab's std::regex when numpy/torch loaded first
# (README.md here); `pymtp graft` opens the tokenizer and tokenizes every prompt before it
# imports torch, and generates the data with the torch model, so libllama is never used after.
# CHECK=1 also runs `python -m pymtp.graft.check` (torch vs llama.cpp, each head) on the result;
# that one imports numpy before libllama loads, so on that box it needs a CPU libllama
# (PYMTP_LIB_DIR) or may crash.
set -uo pipefail
export PYMTP_CACHE_DIR=${PYMTP_CACHE_DIR:-/tmp/pymtp-cache} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/graft-out}
HEADS=${HEADS:-3} STEPS=${STEPS:-2500} SAMPLES=${SAMPLES:-6000} BATCH=${BATCH:-16}
model=$PYMTP_CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$PYMTP_CACHE_DIR/models" "$OUT"
if [ ! -f "$model" ] && [ -f /tmp/smol.gguf ] && [ -f .dev/call2/smol.part2 ]; then
    cat .dev/call2/smol.part2 >> /tmp/smol.gguf
    echo "$(cat .dev/call2/smol.sha256)  /tmp/smol.gguf" | sha256sum -c - || exit 1
    mv /tmp/smol.gguf "$model"
fi
[ -f "$model" ] || { echo "graft_heads.sh: no model at $model" >&2; exit 1; }

# Python edits made after build_cuda.sh: the tree's package sources over the installed ones
# (as run_gpu.sh). With PYTHONPATH set (a source tree + PYMTP_LIB_DIR) nothing is copied.
if [ -z "${PYTHONPATH:-}" ]; then
    site=$(cd /tmp && python3 -c 'import os, pymtp; print(os.path.dirname(pymtp.__file__))') || exit 1
    (cd pymtp && find . -name '*.py' -exec cp --parents {} "$site/" \;)
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'

work=/tmp/graft-heads            # the checkpoint (~150 MB) stays here, not in $OUT
mkdir -p $work
name=SmolLM2-135M-Instruct.Q4_1.mtp$HEADS.gguf
t0=$(date +%s)
(cd /tmp && python3 -m pymtp.cli.main graft "$model" -o $work/$name --heads "$HEADS" \
    --steps "$STEPS" --samples "$SAMPLES" --batch "$BATCH" --seed 0 \
    --data-cache "$PYMTP_CACHE_DIR/graft" --report "$OUT/graft-heads$HEADS.json" --quiet) 2>&1 \
    | tee "$OUT/graft-heads$HEADS.log"
rc=${PIPESTATUS[0]}
echo "graft: exit $rc, wall $(( $(date +%s) - t0 )) s" | tee -a "$OUT/graft-heads$HEADS.log"
[ "$rc" = 0 ] || exit "$rc"
cp $work/$name "$OUT/"
python3 -m pymtp.cli.main info "$OUT/$name" | tee -a "$OUT/graft-heads$HEADS.log"
if [ "${CHECK:-0}" = 1 ]; then
    (cd /tmp && python3 -m pymtp.graft.check "$model" --head "$OUT/$name" --json > "$OUT/graft-heads$HEADS-check.json") \
        || echo "check failed (see the note above)"
fi
