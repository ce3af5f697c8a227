"""The bundled llama-server on 127.0.0.1 for tests: one process per (model, flags), its log in a file.

Shared by tests/server/test_server.py (behaviour with --mtp) and tests/server/test_server_parity.py (every
response field equal with MTP on and off). The ``models`` and ``servers`` fixtures
(tests/conftest.py) start servers on first use; each module stops its own at its end.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from gpu import NGL
from pymtp.server import free_port, plan_launch, start_server, stop_server, wait_until_ready
from pymtp_devtools.tiny_dense import make_tiny_dense_split

try:
    import openai
except ImportError:  # e.g. the GPU box: the HTTP-level tests (urllib) run without the client
    openai = None

__all__ = ["CHAT", "CTX", "N_PREDICT", "PROMPTS", "Server", "chat_text", "completion_text", "free_port",
           "mtp_timings", "openai", "plan_launch", "tiny_server_models"]

PROMPTS = ["Hello world", "The capital of France is", "1, 2, 3, 4,", "Once upon a time there"]
CHAT = [[{"role": "user", "content": "Say something."}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to five."}]]
N_PREDICT = 24
CTX = 512


class Server:
    """One llama-server process; its log goes to a file that failing tests print."""

    def __init__(self, model: Path, log: Path, *, mtp: str, parallel: int = 1, mtp_head=None, adaptive=False,
                 extra=(), ctx: int = CTX, rpc: str | None = None):
        self.port = free_port()
        # a fixed draft length unless asked (adaptive: n_draft "auto"): these tests check what every
        # drafted step does
        launch = plan_launch(model, port=self.port, mtp=mtp, mtp_head=mtp_head,
                             n_draft="auto" if adaptive else 3, ctx=ctx, parallel=parallel, ngl=NGL, threads=1,
                             rpc=rpc, extra=["--no-webui", *extra])
        self.mtp = launch.mtp
        self.url = launch.url
        self.log = log
        self._log_f = open(log, "wb")
        self.proc = start_server(launch.argv, stdout=self._log_f, stderr=subprocess.STDOUT)
        try:
            wait_until_ready(self.url, self.proc, timeout=120)
        except BaseException:
            self.stop()
            raise AssertionError(f"server did not start:\n{log.read_text(errors='replace')[-3000:]}")
        self.client = None if openai is None else openai.OpenAI(base_url=self.url + "/v1", api_key="none",
                                                                max_retries=0, timeout=60)

    def post(self, path: str, body: bytes | dict, timeout: float = 120) -> tuple[int, dict]:
        """(status, JSON answer); a body that is not JSON (an error page, a stream) comes back as {"raw": text}."""
        try:
            with urllib.request.urlopen(self._request(path, body), timeout=timeout) as r:
                code, raw = r.status, r.read()
        except urllib.error.HTTPError as e:
            code, raw = e.code, e.read()
        try:
            return code, json.loads(raw or b"{}")
        except ValueError:
            return code, {"raw": raw.decode(errors="replace")}

    def events(self, path: str, body: dict, timeout: float = 120) -> list[dict]:
        """The server-sent events of a streamed answer."""
        with urllib.request.urlopen(self._request(path, body), timeout=timeout) as r:
            return [json.loads(line[6:]) for line in r
                    if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]")]

    def _request(self, path: str, body: bytes | dict) -> urllib.request.Request:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return urllib.request.Request(self.url + path, data=data, headers={"Content-Type": "application/json"})

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        stop_server(self.proc)
        self._log_f.close()


def tiny_server_models(tiny_model_path, tmp_path_factory) -> dict:
    """arch -> model path: two archs with the MTP layer in the file, one dense base + sidecar head."""
    d = tmp_path_factory.mktemp("server-models")
    base, head = make_tiny_dense_split("llama", d / "llama-base.gguf", seed=7)
    return {"glm4moe": tiny_model_path("glm4moe"), "qwen35": tiny_model_path("qwen35"), "llama+head": base,
            "glm4moe-random": tiny_model_path("glm4moe", head="random"),
            "step35-3": tiny_model_path("step35", n_nextn=3)}


def completion_text(server: Server, prompt: str, *, stream: bool, **extra) -> tuple[str, object]:
    kw = dict(model="m", prompt=prompt, max_tokens=N_PREDICT, temperature=0.0, extra_body=extra or None)
    if not stream:
        r = server.client.completions.create(**kw)
        return r.choices[0].text, r
    text, last = "", None
    for chunk in server.client.completions.create(stream=True, **kw):
        if chunk.choices:
            text += chunk.choices[0].text or ""
        last = chunk
    return text, last


def chat_text(server: Server, messages: list, *, stream: bool, **extra) -> tuple[str, object]:
    kw = dict(model="m", messages=messages, max_tokens=N_PREDICT, temperature=0.0, extra_body=extra or None)
    if not stream:
        r = server.client.chat.completions.create(**kw)
        return r.choices[0].message.content, r
    text, last = "", None
    for chunk in server.client.chat.completions.create(stream=True, **kw):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        last = chunk
    return text, last


def mtp_timings(resp) -> dict:
    extra = getattr(resp, "model_extra", None) or {}
    return (extra.get("timings") or {}).get("mtp")


