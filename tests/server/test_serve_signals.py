"""`pymtp serve` stops at once on SIGINT, SIGTERM and SIGHUP, under load, and its llama-server never
outlives it, not even when `pymtp serve` itself is killed outright (SIGKILL).

The server's output goes to a file, never to a pipe nobody reads (a full pipe blocks a process
that logs, which is how a stop can hang).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from server_harness import CTX, free_port

STOP_WITHIN_S = 10.0  # SIGTERM to llama-server, SIGKILL after pymtp.server.STOP_TIMEOUT_S (5 s)


def children(pid: int) -> list[int]:
    """Direct children of pid (from /proc: no psutil needed)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                out.append(int(d.name))
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"  # a zombie has exited


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    return False


def _signals_as_from_a_terminal(ignored: tuple) -> None:
    """In the child: SIGINT, SIGTERM and SIGHUP as a shell in a terminal hands them over (default
    action), whatever this test process inherited (a background job of a script starts with SIGINT
    ignored), except ``ignored`` (what ``nohup`` does to SIGHUP)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN if sig in ignored else signal.SIG_DFL)


class Serve:
    """`pymtp serve` on a free port, its output in a file; .server is its llama-server's pid."""

    def __init__(self, model: Path, log: Path, ignored: tuple = ()) -> None:
        self.port = free_port()
        self.log = log
        cmd = [sys.executable, "-m", "pymtp.cli.main", "serve", str(model), "--port", str(self.port),
               "--ctx", str(CTX), "--threads", "1", "--n-draft", "3", "--", "--no-webui"]
        with open(log, "wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=log.parent,
                                         preexec_fn=lambda: _signals_as_from_a_terminal(ignored))
        deadline = time.monotonic() + 120
        while "serving" not in log.read_text(errors="replace"):
            assert self.proc.poll() is None, f"pymtp serve exited early:\n{self.text()}"
            assert time.monotonic() < deadline, f"pymtp serve did not start:\n{self.text()}"
            time.sleep(0.1)
        (self.server,) = children(self.proc.pid)

    def text(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stream_forever(self) -> threading.Thread:
        """A long streaming request in flight (the load a stop must not wait for)."""
        body = json.dumps({"prompt": "Once upon a time", "n_predict": 100000, "stream": True,
                           "ignore_eos": True}).encode()

        def read():
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=60) as r:
                    for _ in r:
                        pass
            except OSError:
                pass  # the server went away mid-stream: expected

        t = threading.Thread(target=read, daemon=True)
        t.start()
        time.sleep(0.5)
        return t

    def cleanup(self) -> None:
        for pid in (self.proc.pid, getattr(self, "server", None)):
            if pid is not None and alive(pid):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def serve(models, tmp_path):
    started = []

    def start(ignored: tuple = ()) -> Serve:
        s = Serve(models["glm4moe"], tmp_path / f"serve-{len(started)}.log", ignored)
        started.append(s)
        return s

    yield start
    for s in started:
        s.cleanup()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_pymtp_serve_stops_at_once_on_a_signal_under_load(serve, sig):
    s = serve()
    r = urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{s.port}/v1/completions", data=json.dumps(
            {"prompt": "Hello", "max_tokens": 8, "temperature": 0}).encode(),
        headers={"Content-Type": "application/json"}), timeout=60)
    assert json.loads(r.read())["timings"]["mtp"]["drafted"] > 0
    s.stream_forever()
    t0 = time.monotonic()
    s.proc.send_signal(sig)
    try:
        rc = s.proc.wait(timeout=STOP_WITHIN_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"pymtp serve still running {STOP_WITHIN_S} s after {sig.name}:\n{s.text()}")
    assert rc == (130 if sig == signal.SIGINT else 0), s.text()
    assert wait_gone(s.server, 2.0), f"llama-server outlived pymtp serve after {sig.name}"
    assert time.monotonic() - t0 < STOP_WITHIN_S
    with pytest.raises(OSError):  # nobody listens any more
        socket.create_connection(("127.0.0.1", s.port), timeout=5).close()


def test_nohup_pymtp_serve_keeps_serving_on_sighup(serve):
    """Started with SIGHUP ignored (nohup), a closed terminal does not stop it; SIGTERM still does."""
    s = serve(ignored=(signal.SIGHUP,))
    s.proc.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert s.proc.poll() is None and alive(s.server), s.text()
    r = urllib.request.urlopen(f"http://127.0.0.1:{s.port}/health", timeout=30)
    assert r.status == 200
    s.proc.send_signal(signal.SIGTERM)
    assert s.proc.wait(timeout=STOP_WITHIN_S) == 0, s.text()
    assert wait_gone(s.server, 2.0)


def test_llama_server_dies_with_a_killed_pymtp_serve(serve):
    s = serve()
    s.stream_forever()
    s.proc.kill()  # SIGKILL: pymtp serve runs no cleanup at all
    s.proc.wait()
    assert wait_gone(s.server, STOP_WITHIN_S), "llama-server orphaned by a killed pymtp serve"
