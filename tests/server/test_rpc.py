"""Scale-out through ggml RPC: two local `pymtp rpc-server`s on 127.0.0.1 hold a tiny model's layers
(split between them), and MTP runs as usual: the same greedy tokens as a local run, drafts accepted,
through the Python API and through llama-server (`pymtp serve --rpc`).

The subprocesses run outside the checkout (whose pymtp/ has no native library): they import the
installed package, as a user would. Each test starts its own two servers: a client keeps its
connection for its whole life (ggml caches one per endpoint), and a server serves one client at a
time. The Python API runs in a subprocess,
so that the RPC devices (ggml's registry is process-wide) do not outlive the test."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from server_harness import Server, free_port

pytestmark = pytest.mark.gpu

CLI = [sys.executable, "-c", "import sys; from pymtp.cli.main import main; sys.exit(main())"]


@pytest.fixture
def rpc_servers(tmp_path):
    """'127.0.0.1:p1,127.0.0.1:p2': two `pymtp rpc-server` processes, one thread each."""
    procs, eps = [], []
    for i in range(2):
        port = free_port()
        log = open(tmp_path / f"rpc-{i}.log", "w")
        procs.append(subprocess.Popen([*CLI, "rpc-server", "-p", str(port), "-t", "1"], stdout=log,
                                      stderr=subprocess.STDOUT, cwd=tmp_path))
        eps.append(f"127.0.0.1:{port}")
    deadline = time.time() + 30
    for ep, p in zip(eps, procs):
        while True:
            assert p.poll() is None, f"rpc-server exited: {(tmp_path / 'rpc-0.log').read_text()[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", int(ep.rsplit(':', 1)[1])), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline, "rpc-server did not start listening"
                time.sleep(0.1)
    yield ",".join(eps)
    for p in procs:
        p.kill()
        p.wait()


PROBE = """
import json, sys, pymtp
path, rpc = sys.argv[1], sys.argv[2]
out = {}
for where, kw in (("local", {}), ("rpc", {"rpc": rpc})):
    with pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, mtp="on", n_draft=3, verbose=True, **kw) as m:
        c = m.generate("The quick brown fox", max_tokens=48)
        out[where] = {"tokens": c.tokens, "accepted": c.stats.n_accepted, "drafted": c.stats.n_drafted}
print(json.dumps(out))
"""


@pytest.mark.parametrize("arch", ["glm4moe", "qwen35"])
def test_python_api_splits_the_model_across_two_rpc_servers(arch, tiny_model_path, rpc_servers, tmp_path):
    r = subprocess.run([sys.executable, "-c", PROBE, str(tiny_model_path(arch)), rpc_servers],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["rpc"]["tokens"] == got["local"]["tokens"]
    assert got["rpc"]["accepted"] > 10
    # both servers were used (each logs its client; which layers went where is a debug-level log line)
    for i in range(2):
        assert "Accepted client connection" in (tmp_path / f"rpc-{i}.log").read_text(), f"rpc-server {i} unused"


def test_llama_server_with_rpc_answers_like_a_local_one(models, servers, rpc_servers, tmp_path):
    local = servers("glm4moe", "on")
    # -lv 4: the log names each device's buffers (the default level shows RPC0 only in an incidental warning)
    remote = Server(models["glm4moe"], tmp_path / "server-rpc.log", mtp="on", rpc=rpc_servers, extra=("-lv", "4"))
    try:
        body = {"prompt": "The quick brown fox", "n_predict": 48, "temperature": 0, "mtp_n_draft": 3}
        (sa, a), (sb, b) = local.post("/completion", body), remote.post("/completion", body)
        assert sa == sb == 200, (a, b)
        assert a["content"] == b["content"] and a["tokens_predicted"] == b["tokens_predicted"]
        assert b["timings"]["draft_n_accepted"] > 10, b["timings"]
    finally:
        remote.stop()
    log = (tmp_path / "server-rpc.log").read_text()
    for endpoint in rpc_servers.split(","):  # weights on both rpc-servers
        assert f"[{endpoint}] model buffer size" in log, log[-3000:]
    for i in range(2):   # llama-server connected to both (its layers are split between them)
        assert "Accepted client connection" in (tmp_path / f"rpc-{i}.log").read_text()


def test_unreachable_or_malformed_rpc_servers_are_clear_errors(tiny_model_path, tmp_path):
    port = free_port()   # nothing listens there
    for rpc, message in ((f"127.0.0.1:{port}", f"RPC server 127.0.0.1:{port}: cannot connect"),
                         ("localhost", "RPC server 'localhost': expected host:port")):
        r = subprocess.run([*CLI, "generate", str(tiny_model_path("glm4moe")), "-p", "Hi", "-n", "4", "--rpc", rpc],
                           capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert r.returncode == 1 and message in r.stderr, r.stderr[-2000:]
