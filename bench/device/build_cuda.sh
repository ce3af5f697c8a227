#!/usr/bin/env bash
# Build and install pymtp with CUDA (Hopper, sm_90) on the offline GPU box. See README.md here.
set -euxo pipefail
in=.dev/call1
mkdir -p vendor && rm -rf vendor/llama.cpp && tar -xJf $in/vendor.tar.xz -C vendor
python3 -m pip install -q --no-index --no-deps $in/gguf-*.whl
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90" CMAKE_BUILD_PARALLEL_LEVEL=16 \
    python3 -m pip install -q --no-build-isolation --no-deps .
cp $in/smol.part1 /tmp/smol.gguf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import pymtp._native.lib as l; print('libllama at', l.lib_dir())"
