"""What a server must survive with --mtp: slot save/restore, context shift with several busy slots,
cancelled streams under load, and request bodies full of junk. Every answer is checked against the
MTP-off server; drafting must keep working afterwards.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import random
import urllib.error
import urllib.request
import zlib

import pytest

from server_harness import PROMPTS

pytestmark = pytest.mark.gpu

LONG = " ".join(f"item {i}," for i in range(40))


def call(server, path: str, body, timeout: float = 120) -> tuple[int, dict]:
    return server.post(path, body, timeout=timeout)


def complete(server, body: dict) -> dict:
    code, r = server.post("/completion", body)
    assert code == 200, r
    return r


def test_slot_save_and_restore_keep_text_and_drafting(servers, tmp_path):
    """Save a slot, serve another conversation in it, restore it, continue the first one: the text
    equals MTP off and the drafts accepted equal a cold start's (the MTP state came back too;
    upstream saves and restores the target's state only)."""
    flags = ("--slot-save-path", str(tmp_path))
    on, off = servers("glm4moe", "on", extra=flags), servers("glm4moe", "off", extra=flags)
    cold = servers("glm4moe", "on", extra=("--alias", "cold-save"))
    first = f"{LONG} {PROMPTS[0]}"
    a = complete(on, dict(prompt=first, n_predict=16, temperature=0))
    assert call(on, "/slots/0?action=save", {"filename": "a.bin"})[0] == 200
    complete(on, dict(prompt=PROMPTS[3] * 40, n_predict=16, temperature=0))  # overwrite the slot, longer
    code, r = call(on, "/slots/0?action=restore", {"filename": "a.bin"})
    assert code == 200 and r["n_restored"] > 0, r
    more = first + a["content"] + " and so"
    b = complete(on, dict(prompt=more, n_predict=24, temperature=0))
    assert b["timings"]["prompt_n"] < 16, "the restored slot was not reused"
    assert b["content"] == complete(off, dict(prompt=more, n_predict=24, temperature=0))["content"]
    c = complete(cold, dict(prompt=more, n_predict=24, temperature=0, cache_prompt=False))
    assert (b["timings"]["mtp"]["drafted"], b["timings"]["mtp"]["accepted"]) == \
           (c["timings"]["mtp"]["drafted"], c["timings"]["mtp"]["accepted"])
    # the MTP rows were saved beside the target's; a save without them (e.g. from a server without
    # --mtp) restores with an empty MTP context: same text, drafting warms up again
    assert (tmp_path / "a.bin.mtp").stat().st_size > 0
    (tmp_path / "a.bin.mtp").unlink()
    complete(on, dict(prompt=PROMPTS[3] * 40, n_predict=16, temperature=0))
    assert call(on, "/slots/0?action=restore", {"filename": "a.bin"})[0] == 200
    d = complete(on, dict(prompt=more, n_predict=24, temperature=0))
    assert d["content"] == b["content"] and d["timings"]["prompt_n"] < 16
    assert "restored without MTP state" in on.log.read_text(errors="replace")


def test_context_shift_with_four_busy_slots(servers):
    """--context-shift, 4 slots of 128 tokens, generations of 300 tokens each at once: every
    slot shifts its context several times and says what MTP off says."""
    flags = ("--context-shift",)
    on = servers("glm4moe", "on", parallel=4, ctx=128, extra=flags)
    off = servers("glm4moe", "off", parallel=4, ctx=128, extra=flags)
    bodies = [dict(prompt=p, n_predict=300, temperature=0, ignore_eos=True) for p in PROMPTS]
    with cf.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: complete(on, b), bodies))
    for body, r in zip(bodies, got):
        ref = complete(off, body)
        assert r["tokens_predicted"] == ref["tokens_predicted"] == 300
        assert r["content"] == ref["content"]
        assert r["timings"]["mtp"]["accepted"] > 0
    assert on.healthy()


def test_cancelled_streams_under_load_leave_the_others_right(servers):
    """Four slots streaming; two clients hang up mid-stream: the two others finish with the right
    text, and the next requests are right and drafting."""
    on, off = servers("glm4moe", "on", parallel=4), servers("glm4moe", "off")

    def stream(prompt: str, n: int, hang_up_after: int | None) -> str:
        body = json.dumps({"prompt": prompt, "n_predict": n, "stream": True, "temperature": 0}).encode()
        req = urllib.request.Request(on.url + "/completion", data=body, headers={"Content-Type": "application/json"})
        text, events = "", 0
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: "):
                    text += json.loads(line[6:]).get("content", "")
                    events += 1
                    if hang_up_after is not None and events >= hang_up_after:
                        return text
        return text

    jobs = [(PROMPTS[0], 200, 3), (PROMPTS[1], 48, None), (PROMPTS[2], 200, 5), (PROMPTS[3], 48, None)]
    for _ in range(2):
        with cf.ThreadPoolExecutor(4) as pool:
            texts = list(pool.map(lambda j: stream(*j), jobs))
        for (prompt, n, hang), text in zip(jobs, texts):
            if hang is None:
                assert text == complete(off, dict(prompt=prompt, n_predict=n, temperature=0))["content"]
    r = complete(on, dict(prompt=PROMPTS[2], n_predict=24, temperature=0))
    assert r["content"] == complete(off, dict(prompt=PROMPTS[2], n_predict=24, temperature=0))["content"]
    assert r["timings"]["mtp"]["accepted"] > 0


JUNK = [None, True, -1, 0, 2**31, -2**63, 10**30, 1e308, float("nan"), -0.5, "", "x" * 5000, "\u0000\ud7ff\U0001F600",
        [], [1, [2, [3]]], {}, {"a": {"b": {"c": []}}}, ["text", 5, None]]
KEYS = ["prompt", "n_predict", "max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "n_probs", "logprobs",
        "stop", "stream", "grammar", "logit_bias", "repeat_penalty", "messages", "mtp_draft", "mtp_n_draft",
        "mtp_heads", "n_keep", "cache_prompt", "samplers", "id_slot", "post_sampling_probs"]


def junk_bodies(rng: random.Random, n: int) -> list[bytes]:
    out = [b"", b"{", b"[]", b"null", b'"prompt"', b"\xff\xfe", b'{"prompt": "a"' + b"]" * 1000]
    for _ in range(n):
        body = {"prompt": "Hi", "n_predict": 4}
        for k in rng.sample(KEYS, rng.randint(1, 4)):
            body[k] = rng.choice(JUNK)
        out.append(json.dumps(body, allow_nan=True).encode())
    return out


@pytest.mark.parametrize("path", ["/completion", "/v1/completions", "/v1/chat/completions"])
def test_junk_request_bodies_get_a_4xx_and_the_server_stays_right(servers, path):
    on, off = servers("glm4moe", "on"), servers("glm4moe", "off")
    expected = complete(off, dict(prompt=PROMPTS[1], n_predict=16, temperature=0))["content"]
    rng = random.Random(zlib.crc32(path.encode()))  # the same bodies every run (hash() is salted per process)
    for body in junk_bodies(rng, 60):
        code, r = call(on, path, body, timeout=60)
        assert code < 500, f"{path} {body[:200]!r} -> {code} {r}"
        if code >= 400:
            assert r.get("error", {}).get("message"), f"{path} {body[:200]!r}: a 4xx without a message: {r}"
        assert on.healthy()
    r = complete(on, dict(prompt=PROMPTS[1], n_predict=16, temperature=0))
    assert r["content"] == expected and r["timings"]["mtp"]["drafted"] > 0
