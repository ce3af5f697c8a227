"""Deciding how to start the bundled llama-server for a model, and waiting for it to be ready.

The server binary is the one ``pip install .`` built from the same patched llama.cpp as
the Python engine (it links the same libllama), so `pymtp serve` and ``pymtp.Model``
draft and verify with one implementation.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from .. import options
from ..errors import InvalidArgumentError, PymtpError


def server_binary() -> Path:
    """The bundled llama-server (``PYMTP_BIN_DIR`` / ``PYMTP_LIB_DIR`` point at a development build)."""
    from .._native.lib import bundled_binary

    return bundled_binary("llama-server")


@dataclass
class ServerLaunch:
    """A server command line and what it means, for the user and for tests."""

    argv: list[str]
    url: str
    mtp: bool
    mtp_head: Path | None = None
    notes: list[str] = field(default_factory=list)


def _mtp_layers(path: Path) -> int:
    from ..gguf_meta import read_info

    return read_info(path).n_mtp_layers


def _find_head(model: Path, mtp_head: str | Path | None) -> Path | None:
    """The head-only GGUF (or draft-vocabulary file) to use: the one given, else the ``<stem>.mtp.gguf``
    next to the model that applies, else the head shipped for the built-in model; None when there is none."""
    from ..default_model import shipped_head_for
    from ..engine.runtime import sidecar_head
    from ..gguf_meta import check_gguf_path

    if mtp_head is not None:
        try:
            return check_gguf_path(mtp_head, what="MTP head file")
        except PymtpError as e:
            raise InvalidArgumentError(str(e)) from e
    side = sidecar_head(model)
    return side if side is not None else shipped_head_for(model)


def plan_launch(model: Path, *, host: str = "127.0.0.1", port: int = 8080, mtp: str = options.DEFAULT_MTP,
                mtp_head: str | Path | None = None,
                n_draft: options.DraftLength | int | str = options.DEFAULT_N_DRAFT,
                draft: str = options.DEFAULT_DRAFT, ctx: int = 4096, parallel: int = 1, ngl: int = 0,
                threads: int | None = None, heads: str = options.DEFAULT_HEADS, rpc: str | None = None,
                n_predict: int | None = None, max_tokens_limit: int | None = None,
                extra: list[str] | None = None) -> ServerLaunch:
    """Build the llama-server command line for ``model``; raise InvalidArgumentError on bad input.
    draft and heads become llama-server's --mtp-draft and --mtp-heads (the same names); n_draft "auto"
    becomes --mtp-adaptive on with the adaptive cap, a number K --mtp-n-draft K with it off.
    n_predict (tokens a request without max_tokens generates) becomes --n-predict, max_tokens_limit
    --max-tokens-limit; None leaves llama-server's defaults (docs/usage.md, "Request limits")."""
    if mtp not in options.MTP_MODES:
        raise InvalidArgumentError(f"--mtp must be one of {', '.join(options.MTP_MODES)}, got {mtp!r}")
    if draft not in options.DRAFT_CHOICES:
        raise InvalidArgumentError(f"--draft must be one of {', '.join(options.DRAFT_CHOICES)}, got {draft!r}")
    if heads not in options.HEAD_POLICIES:
        raise InvalidArgumentError(f"--heads must be one of {', '.join(options.HEAD_POLICIES)}, got {heads!r}")
    try:
        n_draft = options.DraftLength.parse(n_draft)
    except InvalidArgumentError as e:
        raise InvalidArgumentError(f"--n-draft: {e}") from None
    if not 0 < port < 65536:
        raise InvalidArgumentError(f"--port must be in 1..65535 (got {port})")
    if ctx < 16:
        raise InvalidArgumentError(f"--ctx must be >= 16 (got {ctx})")
    if parallel < 1:
        raise InvalidArgumentError(f"--parallel must be >= 1 (got {parallel})")
    if threads is not None and threads < 1:
        raise InvalidArgumentError(f"--threads must be >= 1 (got {threads})")
    if n_predict is not None and n_predict < -1:
        raise InvalidArgumentError(f"--n-predict must be >= -1 (got {n_predict})")
    if max_tokens_limit is not None and max_tokens_limit < 0:
        raise InvalidArgumentError(f"--max-tokens-limit must be >= 0 (got {max_tokens_limit})")

    argv = [str(server_binary()), "-m", str(model), "--host", host, "--port", str(port),
            "-c", str(ctx * parallel), "-np", str(parallel)]
    if rpc is not None:
        from .._native.rpc import offloaded_layers, parse_endpoints  # pure Python: no library loaded

        argv += ["--rpc", ",".join(parse_endpoints(rpc))]
        ngl = offloaded_layers(ngl)
    if ngl != 0:
        argv += ["-ngl", str(ngl)]
    if threads is not None:
        argv += ["-t", str(threads), "-tb", str(threads)]
    if n_predict is not None:
        argv += ["--n-predict", str(n_predict)]
    if max_tokens_limit is not None:
        argv += ["--max-tokens-limit", str(max_tokens_limit)]

    notes: list[str] = []
    use_mtp, head = False, None
    if mtp != "off":
        layers = _mtp_layers(model)
        head = _find_head(model, mtp_head)   # a model with MTP layers: a draft-vocabulary file (pymtp trim)
        use_mtp = layers > 0 or head is not None
        if not use_mtp:
            if mtp == "on":
                raise InvalidArgumentError(
                    f"{model.name} has no MTP layers and no head was found (looked for "
                    f"{model.stem}.mtp.gguf next to it); train one with `pymtp graft {model}` "
                    "or pass --mtp-head FILE")
            notes.append(f"MTP off: {model.name} has no MTP layers and no head "
                         f"({model.stem}.mtp.gguf) next to it")
    if use_mtp:
        argv += ["--mtp", "--mtp-n-draft", str(n_draft.cap), "--mtp-draft", draft,
                 "--mtp-adaptive", "on" if n_draft.adaptive else "off", "--mtp-heads", heads]
        if head is not None:
            argv += ["--mtp-head", str(head)]
    argv += list(extra or [])
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    return ServerLaunch(argv=argv, url=f"http://{shown_host}:{port}", mtp=use_mtp, mtp_head=head, notes=notes)


def wait_until_ready(url: str, proc, timeout: float = 300.0, poll: float = 0.2) -> None:
    """Poll ``url``/health until the server answers 200; raise PymtpError if the process exits
    or the timeout passes first."""
    deadline = time.monotonic() + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise PymtpError(f"llama-server exited with code {code} before it was ready "
                             "(its log above says why)")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200 and json.loads(r.read() or b"{}").get("status", "ok") == "ok":
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
            pass
        if time.monotonic() > deadline:
            raise PymtpError(f"llama-server did not become ready within {timeout:.0f} s")
        time.sleep(poll)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for tests and benchmarks)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
