"""The chat web page, driven in headless Chromium, answering one prompt with --mtp on.

The page is opt-in (`PYMTP_BUILD_UI=1 pip install .` builds it with npm), so this test
runs only where it was built and where Chromium and Playwright are installed; without
the page, the server must say how to build it (checked here in every build).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import urllib.request

import pytest

from server_harness import Server

pytestmark = pytest.mark.gpu

NO_UI_MARK = "The chat page is not built into this llama-server"


def page_html(server: Server) -> str:
    req = urllib.request.Request(server.url + "/", headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(req, timeout=10) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        return body.decode(errors="replace")


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory):
    from pymtp.default_model import default_model_path

    log = tmp_path_factory.mktemp("ui") / "server.log"
    s = Server(default_model_path(progress=False), log, mtp="on", extra=["--ui"])
    yield s
    s.stop()


def test_without_the_page_the_server_says_how_to_build_it(ui_server):
    html = page_html(ui_server)
    if NO_UI_MARK not in html:
        pytest.skip("this build has the chat page")
    assert "PYMTP_BUILD_UI=1 pip install ." in html
    assert NO_UI_MARK in ui_server.log.read_text(errors="replace")


def test_chat_page_answers_a_prompt_with_mtp(ui_server):
    if NO_UI_MARK in page_html(ui_server):
        pytest.skip("the chat page is not built (PYMTP_BUILD_UI=1 pip install . builds it)")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            page.goto(ui_server.url + "/", wait_until="networkidle", timeout=60_000)
            box = page.get_by_placeholder(re.compile("Type a message", re.I))
            box.wait_for(timeout=30_000)
            with page.expect_response(lambda r: "/chat/completions" in r.url, timeout=120_000) as info:
                box.fill("Name three colours.")
                box.press("Enter")
            body = info.value.text()  # the SSE stream, whole once the answer is complete
            chunks = [json.loads(line[6:]) for line in body.splitlines()
                      if line.startswith("data: ") and line[6:].strip() not in ("", "[DONE]")]
            answer = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c.get("choices"))
            timings = [c["timings"] for c in chunks if "timings" in c]
            assert answer.strip(), "the server streamed no answer"
            assert timings and timings[-1]["mtp"]["drafted"] > 0, "the answer was not drafted with MTP"
            words = re.findall(r"[A-Za-z]{3,}", answer)[:3]
            page.wait_for_function(
                "words => words.every(w => document.body.innerText.includes(w))", arg=words, timeout=30_000)
        finally:
            browser.close()
