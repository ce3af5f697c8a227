#!/usr/bin/env bash
# On the dev machine (network): fill .dev/call1, the one carry directory of the GPU session
# (bench/device/README.md). Everything except the patched tree, which the native side writes with
#     python scripts/vendor.py bundle .dev/call1/vendor.tar.xz
# after its last patch change (this script does it too when the bundle is missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
d=.dev/call1
mkdir -p $d

# pristine llama.cpp (tag `pristine` of the dev tree = the pinned sdist without patches), trimmed like
# scripts/vendor.py's bundle: no vocab files, no backends other than CPU and CUDA
python3 - "$d/pristine.tar.xz" <<'EOF'
import io, subprocess, sys, tarfile
sys.path.insert(0, "scripts")
import vendor
raw = subprocess.run(["git", "-C", str(vendor.VENDOR), "archive", "--format=tar", "--prefix=llama.cpp/", "pristine"],
                     check=True, stdout=subprocess.PIPE).stdout
drop = vendor.BUNDLE_DROP + ("llama.cpp/models/",)
with tarfile.open(fileobj=io.BytesIO(raw)) as src, tarfile.open(sys.argv[1], "w:xz") as dst:
    for m in src.getmembers():
        if m.name.startswith(drop):
            continue
        dst.addfile(m, src.extractfile(m) if m.isfile() else None)
print(f"{sys.argv[1]}: pristine tree", file=sys.stderr)
EOF

[ -f $d/vendor.tar.xz ] || python3 scripts/vendor.py bundle $d/vendor.tar.xz
ls $d/gguf-*.whl >/dev/null 2>&1 || python3 -m pip download -q --no-deps -d $d gguf==0.19.0
# the Qwen tokenizer for the realistic models (the patched bundle keeps only deepseek-coder's)
cp vendor/llama.cpp/models/ggml-vocab-qwen35.gguf $d/
cp "${PYMTP_CACHE_DIR:-$HOME/.cache/pymtp}/data/mt_bench_question.jsonl" $d/
du -ch $d/* | sort -h
