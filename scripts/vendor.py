#!/usr/bin/env python3
"""Fetch the pinned llama.cpp tree and apply pymtp's patch series.

The upstream tree is never committed. It comes from the llama-cpp-python
0.3.36 sdist on the package registry (llama.cpp 0c1e57098 under its
vendor/llama.cpp), checked against a pinned sha256, extracted into
``vendor/llama.cpp`` and patched with ``patches/*.patch`` in order.

Commands (run from anywhere; paths are relative to the repository):

  ensure      make vendor/llama.cpp match sdist + patch series (the build runs this)
  dev-init    turn vendor/llama.cpp into a git repo: one commit "pristine" and one
              commit per patch, so patches can be edited as commits
  export      write the commits after "pristine" back to patches/ (git format-patch)
  status      say what state vendor/llama.cpp is in
  bundle OUT  write a trimmed tar.xz of the patched tree (CPU+CUDA backends, one test
              vocab) for a machine without network; unpack it there into vendor/

Environment: PYMTP_SDIST=path/to/llama_cpp_python-0.3.36.tar.gz uses a local copy;
PYMTP_CACHE_DIR overrides the download cache (~/.cache/pymtp).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
TREE_PREFIX = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"
UPSTREAM_COMMIT = "0c1e57098"

# Parts of the upstream tree pymtp never builds or reads (keeps the tree small).
# models/ is kept only for the vocab-only GGUFs the tests use as tokenizers.
SKIP_DIRS = ("docs/", "media/", "benches/", "app/", "pocs/", "examples/", ".github/")

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "vendor" / "llama.cpp"
PATCHES = ROOT / "patches"
STAMP = ROOT / "vendor" / "llama.cpp.stamp"

MANUAL_FETCH = (f"python -m pip download --no-deps --no-binary :all: {SDIST_NAME}=={SDIST_VERSION} -d DIR "
                f"&& PYMTP_SDIST=DIR/{SDIST_FILE} python scripts/vendor.py ensure")


class VendorError(RuntimeError):
    pass


def log(msg: str) -> None:
    print(f"[pymtp vendor] {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    base = os.environ.get("PYMTP_CACHE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "pymtp"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def patch_files() -> list[Path]:
    return sorted(PATCHES.glob("*.patch"))


def series_digest() -> str:
    """Identifies sdist + patch series; the tree is rebuilt when it changes."""
    h = hashlib.sha256(SDIST_SHA256.encode())
    for p in patch_files():
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()


def fetch_sdist() -> Path:
    local = os.environ.get("PYMTP_SDIST")
    if local:
        path = Path(local)
        if not path.is_file():
            raise VendorError(f"PYMTP_SDIST={local} does not exist")
    else:
        dest = cache_dir() / "sdist"
        path = dest / SDIST_FILE
        if not path.is_file():
            dest.mkdir(parents=True, exist_ok=True)
            log(f"downloading {SDIST_NAME}=={SDIST_VERSION} sdist (~77 MB) from the package registry ...")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                   "--disable-pip-version-check", f"{SDIST_NAME}=={SDIST_VERSION}", "-d", str(dest)]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if proc.returncode != 0 or not path.is_file():
                tail = "\n".join(proc.stdout.strip().splitlines()[-5:])
                raise VendorError(f"could not download the llama.cpp sdist (network?):\n{tail}\n"
                                  f"Fetch it by hand: {MANUAL_FETCH}")
    digest = sha256_of(path)
    if digest != SDIST_SHA256:
        raise VendorError(f"checksum mismatch for {path}: got {digest}, expected {SDIST_SHA256}. "
                          f"Delete the file and retry, or fetch it by hand: {MANUAL_FETCH}")
    return path


def extract_tree(sdist: Path, dest: Path) -> None:
    with tarfile.open(sdist, "r:gz") as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(TREE_PREFIX):
                continue
            rel = m.name[len(TREE_PREFIX):]
            if not rel or rel.startswith(SKIP_DIRS) or rel == ".git":
                continue
            if rel.startswith("models/") and not (rel.startswith("models/ggml-vocab-") and rel.endswith(".gguf")):
                continue
            if not (m.isfile() or m.isdir() or m.issym()):
                continue
            m.name = rel
            members.append(m)
        tar.extractall(dest, members=members, filter="data")


def apply_patches(tree: Path) -> None:
    for p in patch_files():
        for tool in (["git", "apply", "--whitespace=nowarn", "-p1"], ["patch", "-p1", "--forward", "--quiet", "-i"]):
            if shutil.which(tool[0]) is None:
                continue
            proc = subprocess.run(tool + [str(p)], cwd=tree, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            if proc.returncode == 0:
                break
            raise VendorError(f"patch {p.name} does not apply to llama.cpp {UPSTREAM_COMMIT}:\n"
                              f"{proc.stdout.strip()}\n"
                              f"Fix it in a dev tree: python scripts/vendor.py dev-init; edit; "
                              f"python scripts/vendor.py export")
        else:
            raise VendorError("neither git nor patch is installed: install one of them")


def sync_tree(src: Path, dst: Path) -> None:
    """Copy src over dst, touching only files whose content changed (keeps incremental builds)."""
    seen = set()
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        seen.add(rel)
        target = dst / rel
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        if target.is_file() and target.stat().st_size == path.stat().st_size \
                and target.read_bytes() == path.read_bytes():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    for path in sorted(dst.rglob("*"), reverse=True):
        if path.relative_to(dst) not in seen:
            path.unlink() if not path.is_dir() else shutil.rmtree(path)


def is_dev_tree() -> bool:
    return (VENDOR / ".git").exists()


def ensure(force: bool = False) -> None:
    if is_dev_tree() and not force:
        log("vendor/llama.cpp is a dev tree (git repo): building it as it is "
            "(run 'python scripts/vendor.py export' to save your patches)")
        return
    digest = series_digest()
    if VENDOR.is_dir() and STAMP.is_file() and STAMP.read_text().strip() == digest and not force:
        return
    sdist = fetch_sdist()
    log(f"preparing vendor/llama.cpp ({UPSTREAM_COMMIT}) + {len(patch_files())} patches")
    with tempfile.TemporaryDirectory(prefix="pymtp-vendor-") as tmp:
        tree = Path(tmp) / "llama.cpp"
        tree.mkdir()
        extract_tree(sdist, tree)
        apply_patches(tree)
        VENDOR.mkdir(parents=True, exist_ok=True)
        if is_dev_tree():
            shutil.rmtree(VENDOR)
            VENDOR.mkdir(parents=True)
        sync_tree(tree, VENDOR)
    STAMP.write_text(digest + "\n")
    log("vendor/llama.cpp is ready")


def git(*args: str, cwd: Path = VENDOR) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="pymtp", GIT_AUTHOR_EMAIL="dev@pymtp.local",
               GIT_COMMITTER_NAME="pymtp", GIT_COMMITTER_EMAIL="dev@pymtp.local")
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise VendorError(f"git {' '.join(args)} failed:\n{proc.stdout.strip()}")
    return proc.stdout


def dev_init() -> None:
    if is_dev_tree():
        raise VendorError("vendor/llama.cpp is already a dev tree; remove it first to start over")
    sdist = fetch_sdist()
    if VENDOR.exists():
        shutil.rmtree(VENDOR)
    VENDOR.mkdir(parents=True)
    extract_tree(sdist, VENDOR)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", f"pristine llama.cpp {UPSTREAM_COMMIT} ({SDIST_NAME} {SDIST_VERSION} sdist)")
    git("tag", "pristine")
    for p in patch_files():
        git("am", "-q", "--whitespace=nowarn", str(p))
    STAMP.unlink(missing_ok=True)
    log(f"dev tree ready: {len(patch_files())} patches as commits on top of tag 'pristine' in vendor/llama.cpp")


def export() -> None:
    if not is_dev_tree():
        raise VendorError("vendor/llama.cpp is not a dev tree: run 'python scripts/vendor.py dev-init' first")
    for p in patch_files():
        p.unlink()
    PATCHES.mkdir(exist_ok=True)
    out = git("format-patch", "-q", "-N", "--zero-commit", "--no-signature", "--no-stat",
              "-o", str(PATCHES), "pristine..HEAD")
    names = [Path(line).name for line in out.split()] or [p.name for p in patch_files()]
    log(f"exported {len(patch_files())} patches to patches/: {', '.join(names)}")


def status() -> None:
    if is_dev_tree():
        print("dev tree: " + git("log", "--oneline", "pristine..HEAD").strip().replace("\n", "; "))
    elif VENDOR.is_dir() and STAMP.is_file():
        state = "up to date" if STAMP.read_text().strip() == series_digest() else "stale (patches changed)"
        print(f"vendored tree: {state}")
    else:
        print("no vendored tree yet (the build fetches it)")


BUNDLE_DROP = tuple(f"llama.cpp/ggml/src/ggml-{b}" for b in (
    "vulkan", "sycl", "opencl", "metal", "cann", "hexagon", "webgpu", "openvino", "et", "virtgpu",
    "musa", "hip", "zdnn", "zendnn"))
BUNDLE_KEEP_VOCAB = "ggml-vocab-deepseek-coder.gguf"


def bundle(out: str) -> None:
    """A trimmed, patched tree + stamp, for building where the registry is out of reach."""
    if not VENDOR.is_dir():
        raise VendorError("no vendor/llama.cpp yet: run 'python scripts/vendor.py ensure' first")
    if is_dev_tree() and git("status", "--porcelain").strip():
        raise VendorError("the dev tree has uncommitted changes: commit and export them first")

    def keep(info: tarfile.TarInfo):
        name = info.name
        if "/.git" in name or name.startswith(BUNDLE_DROP):
            return None
        if name.startswith("llama.cpp/models/") and not name.endswith(BUNDLE_KEEP_VOCAB):
            return None
        return info

    import io
    with tarfile.open(out, "w:xz") as tar:
        tar.add(VENDOR, arcname="llama.cpp", filter=keep)
        stamp = (series_digest() + "\n").encode()
        info = tarfile.TarInfo("llama.cpp.stamp")
        info.size = len(stamp)
        tar.addfile(info, io.BytesIO(stamp))
    log(f"wrote {out} ({Path(out).stat().st_size / 1e6:.1f} MB); unpack with: tar xJf {out} -C vendor")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["ensure", "dev-init", "export", "status", "bundle"])
    ap.add_argument("out", nargs="?", help="bundle: the .tar.xz to write")
    ap.add_argument("--force", action="store_true", help="ensure: rebuild the tree even if it looks current")
    args = ap.parse_args(argv)
    try:
        if args.command == "bundle" and not args.out:
            raise VendorError("bundle needs an output file, e.g. .dev/vendor.tar.xz")
        {"ensure": lambda: ensure(args.force), "dev-init": dev_init, "export": export, "status": status,
         "bundle": lambda: bundle(args.out)}[args.command]()
    except VendorError as e:
        print(f"[pymtp vendor] error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
