"""Starting and stopping a llama-server process so that it never outlives whoever started it.

Every place that starts a server (``pymtp serve``, the benchmarks, the tests) goes through
``start_server``: on Linux the kernel kills the child (SIGKILL) when its parent dies, however it
dies (``kill -9`` included), through ``PR_SET_PDEATHSIG``. SIGKILL, not SIGTERM: nobody is left to
wait for a graceful stop, and under load llama-server's own shutdown with a stream in flight took
longer than 10 s (seen in CI). ``stop_server`` asks politely (SIGTERM:
llama-server finishes the decode in flight and exits) and kills after a few seconds.
``signals_raise_interrupt`` turns SIGTERM and SIGHUP (what systemd, docker stop and terminals
send) into the same clean path as Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence

STOP_TIMEOUT_S = 5.0  # a polite stop that takes longer ends with SIGKILL
_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived: stop like Ctrl-C, then exit successfully."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _die_with_parent(parent: int):
    """preexec_fn: SIGKILL this child when the parent dies; exit at once if it already has."""
    def setup() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and prctl
            os._exit(1)
    return setup


def start_server(argv: Sequence[str], **popen_kwargs) -> subprocess.Popen:
    """Popen(argv) for a llama-server that is stopped when this process dies.

    Call it from the thread that lives as long as the server should (the main thread):
    the kernel's parent-death signal is tied to the thread that forked.
    """
    if sys.platform.startswith("linux"):
        popen_kwargs.setdefault("preexec_fn", _die_with_parent(os.getpid()))
    return subprocess.Popen(list(argv), **popen_kwargs)


def stop_server(proc: subprocess.Popen, timeout: float = STOP_TIMEOUT_S) -> None:
    """Stop a server process: SIGTERM (it shuts down cleanly), SIGKILL if it has not exited in time."""
    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def signals_raise_interrupt(signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP)) -> Iterator[None]:
    """Inside the block, these signals raise ``Terminated`` (a KeyboardInterrupt) in the main thread.
    A signal this process was started with ignored stays ignored (``nohup pymtp serve``: SIGHUP)."""
    def handler(signum, _frame):
        raise Terminated(signum)

    previous = {s: signal.signal(s, handler) for s in signums if signal.getsignal(s) != signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
