#!/usr/bin/env bash
# GPU session, call 1 (bench/device/README.md): carry .dev/call1. Builds, side by side,
#  - pymtp with CUDA (patched llama.cpp, sm_90), installed into the box's Python (pip, all cores);
#  - a pristine upstream llama-server (the pinned llama.cpp without patches) in build/upstream-cuda/.
# PRISTINE_GGML=pymtp (default, cheap): pristine llama.cpp (libllama, common, server) is built without
#   a GPU backend and run on the pymtp build's ggml libraries (symlinked into its bin/), which saves a
#   second ~5-minute ggml-cuda compile. Those carry pymtp's ggml-cuda patches: give the upstream
#   servers the knobs that switch them back (bench/device/run_upstream_trim.sh, UPSTREAM_ENV).
# PRISTINE_GGML=own: a fully separate pristine build with its own ggml-cuda (static, like
#   bench/upstream_vs_pymtp.py builds it), started after pymtp's build; ccache, when the box has it,
#   is used by ggml's CMake automatically.
# CUDA_HOST_FIX=1 configures both builds with CMAKE_CUDA_HOST_COMPILER = the C++ compiler (a guess at
#   the libstdc++ problem in README.md; the runtime workarounds in gpu_tests.sh come first).
# Results/logs: $OUT/build-*.log, $OUT/toolchain.txt.
set -euo pipefail
in=.dev/call1
OUT=${OUT:-/tmp/pymtp-out}
mkdir -p "$OUT"
t0=$(date +%s)
say() { echo "[build +$(( $(date +%s) - t0 ))s] $*"; }
jobs=$(nproc)
mode=${PRISTINE_GGML:-pymtp}
P=$PWD/build/upstream-cuda

cuda_args="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90"
if [ "${CUDA_HOST_FIX:-0}" = 1 ]; then
    cuda_args="$cuda_args -DCMAKE_CUDA_HOST_COMPILER=$(command -v c++ || command -v g++)"
fi
command -v ccache >/dev/null && { say "ccache: $(command -v ccache)"; export CCACHE_DIR=${CCACHE_DIR:-/tmp/ccache}; } || say "no ccache"

# for the later calls: prompts and the Qwen tokenizer outside the working tree
mkdir -p /tmp/pymtp-cache/data
cp $in/mt_bench_question.jsonl /tmp/pymtp-cache/data/
cp $in/ggml-vocab-qwen35.gguf /tmp/pymtp-cache/

mkdir -p vendor && rm -rf vendor/llama.cpp && tar -xJf $in/vendor.tar.xz -C vendor
python3 -m pip install -q --no-index --no-deps $in/gguf-*.whl
rm -rf "$P" && mkdir -p "$P/src" && tar -xJf $in/pristine.tar.xz -C "$P/src" --strip-components=1

pristine_configure() {  # $1: extra cmake args
    local gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S "$P/src" -B "$P" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
        -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_NUMBER=0 $1
}

if [ "$mode" = pymtp ]; then
    say "pristine llama-server (no GPU backend, shared libs), -j4 in the background"
    ( pristine_configure "-DBUILD_SHARED_LIBS=ON -DGGML_CUDA=OFF -DGGML_NATIVE=ON" \
      && nice -n 5 cmake --build "$P" --target llama-server -j 4 ) > "$OUT/build-pristine.log" 2>&1 &
    pristine_pid=$!
fi

say "pymtp CUDA build, -j$jobs"
if ! CMAKE_ARGS="$cuda_args" CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
        python3 -m pip install -v --no-build-isolation --no-deps . > "$OUT/build-pymtp.log" 2>&1; then
    tail -n 40 "$OUT/build-pymtp.log"; exit 1
fi
site=$(cd /tmp && python3 -c 'import os, pymtp; print(os.path.dirname(pymtp.__file__))')
say "pymtp installed in $site"

if [ "$mode" = pymtp ]; then
    wait $pristine_pid || { tail -n 40 "$OUT/build-pristine.log"; exit 1; }
    # the pristine binaries keep their own libllama*/libmtmd; ggml comes from pymtp (same SONAMEs)
    rm -f "$P"/bin/libggml*.so*
    for f in "$site"/lib/libggml*.so*; do ln -sf "$f" "$P/bin/"; done
else
    say "pristine llama-server with its own ggml-cuda, -j$jobs"
    pristine_configure "-DBUILD_SHARED_LIBS=OFF $cuda_args" > "$OUT/build-pristine.log" 2>&1
    cmake --build "$P" --target llama-server -j "$jobs" >> "$OUT/build-pristine.log" 2>&1 \
        || { tail -n 40 "$OUT/build-pristine.log"; exit 1; }
fi
say "pristine llama-server: $P/bin/llama-server"
"$P/bin/llama-server" --version 2>&1 | tail -n 2
"$P/bin/llama-server" --list-devices 2>&1 | tail -n 3 | tee /tmp/pristine-devices.txt
"$site/bin/llama-server" --list-devices 2>&1 | tail -n 3
grep -q CUDA /tmp/pristine-devices.txt || say "WARNING: the pristine llama-server sees no CUDA device (PRISTINE_GGML=own builds its own)"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# what gpu_tests.sh needs to reason about the libstdc++ problem (cheap)
{
    for c in cc c++ gcc g++ nvcc ccache ninja; do echo "$c: $(command -v $c || echo -)"; done
    c++ --version | head -n 1; nvcc --version | tail -n 2
    s=$(c++ -print-file-name=libstdc++.so); echo "libstdc++.so of c++: $s -> $(readlink -f "$s")"
    file -L "$s"; grep -a -m3 -E 'INPUT|GROUP' "$s" 2>/dev/null || true
    echo "libstdc++.so.6 of c++: $(readlink -f "$(c++ -print-file-name=libstdc++.so.6)")"
    grep -h -E '^CMAKE_(CXX_COMPILER|CUDA_COMPILER|CUDA_HOST_COMPILER|CUDA_FLAGS)[:=]' build/*/CMakeCache.txt 2>/dev/null | sort -u
    for f in "$site"/lib/lib*.so "$P/bin/llama-server"; do
        echo "== $f"; ldd "$f" | grep -E 'stdc\+\+|gcc_s|cudart' || true
        echo "defined std::locale/regex symbols: $(nm -DC --defined-only "$f" 2>/dev/null | grep -c -E 'std::locale|std::__cxx11::regex|std::ctype<' || true)"
    done
} > "$OUT/toolchain.txt" 2>&1 || true
say "done"
