"""Property-based fuzzing of llama-server (hypothesis): generated bodies for /completion, /v1/completions,
/v1/chat/completions, /v1/responses (OpenAI Responses), /v1/messages (Anthropic Messages) - each streamed
too -, the token counts (/v1/chat/completions/input_tokens, /v1/responses/input_tokens,
/v1/messages/count_tokens), /tokenize, /detokenize and /slots, with and without --mtp.

The property: every request gets a 4xx with a message (fast) or a correct 200 (within a time bound),
never a 5xx (501 "not supported by this server", e.g. /infill on a model without fill-in-the-middle
tokens, is a refusal like a 4xx), and the server is healthy after it; a greedy 200 says what the
MTP-off server says.
Bounded in count and time for CI: PYMTP_FUZZ_EXAMPLES examples per test (default 25), the same ones
every run (derandomized: a failure reproduces); PYMTP_FUZZ_RANDOM=1 draws new ones for a longer hunt
(e.g. PYMTP_FUZZ_EXAMPLES=2000 PYMTP_FUZZ_RANDOM=1 pytest tests/server/test_server_fuzz.py).
Every body that ever failed is kept in tests/server/data/server_fuzz_corpus.jsonl and replayed first.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from pathlib import Path
from urllib.parse import quote

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, currently_in_test_context, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from server_harness import CHAT, PROMPTS  # noqa: E402

pytestmark = pytest.mark.gpu

EXAMPLES = int(os.environ.get("PYMTP_FUZZ_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("PYMTP_FUZZ_RANDOM"),
                    database=None, suppress_health_check=list(HealthCheck), print_blob=True)
CORPUS = Path(__file__).parent / "data" / "server_fuzz_corpus.jsonl"

# the fuzzed servers cap what one request may generate, so every 200 comes within OK_WITHIN_S
MAX_TOKENS = 32
FLAGS = ("--max-tokens-limit", str(MAX_TOKENS), "--max-body-bytes", str(1 << 20))
FAST_4XX_S = 5.0   # a 4xx comes in well under a second on an idle machine; CI runs loaded
OK_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def fuzzed(servers, tmp_path_factory):
    flags = (*FLAGS, "--slot-save-path", str(tmp_path_factory.mktemp("fuzz-slots")))  # /slots save and restore
    return {"on": servers("glm4moe", "on", extra=flags), "off": servers("glm4moe", "off", extra=flags)}


# ----------------------------------------------------------------------------- sending

def send(server, method: str, path: str, body: bytes | None) -> tuple[int, object, float]:
    """(status, the JSON answer or the list of a stream's events, seconds); an event stream is read to
    its end. The connection is the test's own (http.client): raw bytes go out as they are."""
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=OK_WITHIN_S)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        status, ctype = r.status, r.getheader("Content-Type", "")
    finally:
        conn.close()
    if "event-stream" in ctype:
        events, name = [], None
        for line in raw.split(b"\n"):
            if line.startswith(b"event: "):
                name = line[7:].decode()
            elif line.startswith(b"data: ") and line != b"data: [DONE]":
                data = json.loads(line[6:])
                events.append({"error": data} if name == "error" else data)  # Anthropic's: "event: error"
                name = None
            elif line.startswith(b"error: "):
                events.append({"error": json.loads(line[7:])})
        return status, events, time.monotonic() - t0
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:
        payload = {"raw": raw.decode(errors="replace")}
    return status, payload, time.monotonic() - t0


def error_of(payload) -> dict | None:
    if isinstance(payload, dict):
        return payload.get("error")
    for e in payload:
        if isinstance(e, dict) and e.get("error"):
            return e["error"]
    return None


def as_int(body: dict, *keys: str):
    for k in keys:
        v = body.get(k) if isinstance(body, dict) else None
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def check_ok(path: str, body, payload) -> None:
    """What a 200 must hold: the endpoint's shape, the token cap, OpenAI's legacy logprobs."""
    if isinstance(body, dict) and body.get("response_fields"):
        return  # the client chose which fields come back
    if isinstance(payload, list):   # a stream: events, none an error
        assert payload and not error_of(payload), payload[-3:]
        check_stream(path, payload)
        return
    assert isinstance(payload, dict) and "error" not in payload, payload
    if path == "/v1/completions":
        for c in payload["choices"]:
            assert isinstance(c["text"], str) and c["finish_reason"] in ("stop", "length")
            n = as_int(body, "logprobs")
            if n and n > 0 and c["text"]:
                lp = c["logprobs"]
                assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == \
                       len(lp["text_offset"])
                assert all(len(t) <= n for t in lp["top_logprobs"])
        assert payload["usage"]["completion_tokens"] <= MAX_TOKENS * len(payload["choices"])
    elif path == "/v1/chat/completions":
        for c in payload["choices"]:
            assert c["message"]["role"] == "assistant"
        assert payload["usage"]["completion_tokens"] <= MAX_TOKENS * len(payload["choices"])
    elif path == "/completion":
        for r in payload if isinstance(payload, list) else [payload]:
            assert isinstance(r["content"], str) and r["tokens_predicted"] <= MAX_TOKENS
    elif path == "/v1/responses":
        assert payload["object"] == "response" and payload["status"] == "completed", payload
        assert all(o["type"] in ("message", "reasoning", "function_call") for o in payload["output"]), payload
        assert payload["usage"]["output_tokens"] <= min(MAX_TOKENS, max_tokens_of(body, "max_output_tokens"))
    elif path == "/v1/messages":
        assert payload["type"] == "message" and payload["role"] == "assistant", payload
        assert all(c["type"] in ("text", "thinking", "tool_use") for c in payload["content"]), payload
        assert payload["stop_reason"] in ("end_turn", "max_tokens", "tool_use", "stop_sequence"), payload
        assert payload["usage"]["output_tokens"] <= min(MAX_TOKENS, max_tokens_of(body, "max_tokens"))
    elif path in COUNT_TOKENS:
        n = payload["input_tokens"]
        assert isinstance(n, int) and n > 0, payload
    elif path == "/tokenize":
        assert isinstance(payload["tokens"], list)
    elif path == "/detokenize":
        assert isinstance(payload["content"], str)


COUNT_TOKENS = ("/v1/chat/completions/input_tokens", "/v1/responses/input_tokens", "/v1/messages/count_tokens")


def max_tokens_of(body, key: str) -> int:
    """What the body asks to generate at most (a count it gives in 0..MAX_TOKENS), else MAX_TOKENS; 0 is 1:
    llama.cpp's n_predict 0 still samples one token, on every endpoint."""
    n = as_int(body, key)
    return max(n, 1) if n is not None and 0 <= n <= MAX_TOKENS else MAX_TOKENS


def check_stream(path: str, events: list) -> None:
    """A Responses or Messages stream: its events in order, ending as the API says, its text deltas adding up
    to the text it ends with, within the token cap."""
    types = [e.get("type") for e in events]
    if path == "/v1/responses":
        assert types[0] == "response.created" and types[-1] == "response.completed", types
        final = events[-1]["response"]
        assert final["status"] == "completed" and final["usage"]["output_tokens"] <= MAX_TOKENS, final
        streamed = "".join(e["delta"] for e in events if e.get("type") == "response.output_text.delta")
        assert streamed == "".join(text_of(final)[0]), (streamed, final)
    elif path == "/v1/messages":
        assert types[0] == "message_start" and types[-1] == "message_stop", types
        delta = [e for e in events if e.get("type") == "message_delta"]
        assert len(delta) == 1 and delta[0]["usage"]["output_tokens"] <= MAX_TOKENS, delta
        assert delta[0]["delta"]["stop_reason"] in ("end_turn", "max_tokens", "tool_use", "stop_sequence"), delta
        starts = [e["index"] for e in events if e.get("type") == "content_block_start"]
        stops = [e["index"] for e in events if e.get("type") == "content_block_stop"]
        assert sorted(starts) == sorted(stops) == list(range(len(starts))), types


def check(fuzzed: dict, path: str, body, method: str = "POST", mtp: str = "on", compare: bool = True):
    """Send body (a dict/list/value as JSON, or raw bytes) and assert the property."""
    raw = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    server = fuzzed[mtp]
    status, payload, took = send(server, method, path, raw)
    shown = (raw or b"")[:300]
    if currently_in_test_context():  # pytest --hypothesis-show-statistics: what the bodies got
        err = error_of(payload) if status >= 400 else None
        event(f"{path.split('?')[0]} -> {status}" + (f" {str(err.get('message'))[:40]}" if err else ""))
    assert status < 500 or status == 501, f"{method} {path} {shown!r} -> {status} {str(payload)[:500]}"
    if status >= 400:
        err = error_of(payload)
        assert err and err.get("message"), f"{path} {shown!r}: a {status} without a message: {payload}"
        assert took < FAST_4XX_S, f"{path} {shown!r}: the {status} took {took:.1f} s"
    else:
        check_ok(path, body, payload)
        err = error_of(payload)
        assert not err or err.get("code", 400) < 500, f"{path} {shown!r}: a stream ended with {err}"
    assert server.healthy(), f"the server is down after {path} {shown!r}"
    greedy = isinstance(body, dict) and type(body.get("temperature")) in (int, float) and body["temperature"] == 0 \
        and body.get("stream") is not True and not (set(body) & NOT_DETERMINISTIC)
    if compare and mtp == "on" and greedy and path in COMPARED and status == 200:
        status_off, ref, _ = send(fuzzed["off"], method, path, raw)
        assert status_off == 200
        assert text_of(payload) == text_of(ref), f"{path} {shown!r}: MTP on and off differ"
    return status, payload


# what makes a greedy answer depend on time or on how often a random stream is drawn
NOT_DETERMINISTIC = {"samplers", "t_max_predict_ms", "xtc_probability", "xtc_threshold", "mirostat", "dynatemp_range"}
COMPARED = ("/completion", "/v1/completions", "/v1/responses", "/v1/messages")


def text_of(payload):
    """The generated text (and, for Responses and Messages, the tool calls, without their random ids)."""
    if isinstance(payload, dict) and payload.get("object") == "response":
        return ([c["text"] for o in payload["output"] if o["type"] == "message" for c in o["content"]],
                [(o["name"], o["arguments"]) for o in payload["output"] if o["type"] == "function_call"],
                [o["content"] for o in payload["output"] if o["type"] == "reasoning"])
    if isinstance(payload, dict) and payload.get("type") == "message":
        return ([c.get("text", c.get("thinking")) for c in payload["content"] if c["type"] != "tool_use"],
                [(c["name"], c["input"]) for c in payload["content"] if c["type"] == "tool_use"],
                payload["stop_reason"])
    if isinstance(payload, dict) and "choices" in payload:
        return [c.get("text") for c in payload["choices"]]
    if isinstance(payload, list):
        return [r.get("content") for r in payload]
    return payload.get("content")


# ----------------------------------------------------------------------------- strategies

junk = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8)
text = st.text(max_size=40)
token_ids = st.lists(st.integers(-3, 300), min_size=1, max_size=12)
n_tokens = st.integers(-3, 40)
prob = st.floats(-0.5, 1.5, allow_nan=False)

SAMPLING = {
    "temperature": st.sampled_from([0, 0.0, 0.7, 1.5]) | st.floats(-1, 5, allow_nan=False),
    "top_k": st.integers(-5, 100), "top_p": prob, "min_p": prob, "typical_p": prob,
    "seed": st.integers(-2**40, 2**40),
    "stop": text | st.lists(text, max_size=24),
    "stream": st.booleans(),
    "grammar": st.sampled_from(['root ::= "a"+', "root ::= [a-z]{1,5}", "root ::=", 'root ::= x\nx ::= "b" x?',
                                "garbage"]) | text,
    "json_schema": st.sampled_from([{}, {"type": "object"}, {"type": "string", "maxLength": 5}, {"$ref": "#/x"},
                                    {"type": "array", "items": {"type": "integer"}, "minItems": 2}]),
    "logit_bias": st.dictionaries(st.integers(-5, 300).map(str) | text, st.floats(-100, 100) | st.just(False),
                                  max_size=4) | st.lists(st.tuples(st.integers(-5, 300) | text,
                                                                   st.floats(-100, 100)).map(list), max_size=4),
    "samplers": st.lists(st.sampled_from(["top_k", "top_p", "min_p", "temperature", "dry", "xtc", "typ_p",
                                          "penalties", "top_n_sigma", "bogus"]), max_size=6) | text,
    "repeat_penalty": st.floats(-2, 3), "presence_penalty": st.floats(-3, 3), "frequency_penalty": st.floats(-3, 3),
    "dry_multiplier": st.floats(0, 2), "dry_base": st.floats(-1, 3), "dry_allowed_length": st.integers(-2, 5),
    "xtc_probability": prob, "xtc_threshold": prob, "mirostat": st.integers(-1, 3),
    "mirostat_tau": st.floats(-1, 10), "top_n_sigma": st.floats(-2, 5), "dynatemp_range": st.floats(-1, 2),
    "repeat_last_n": st.integers(-2, 100), "min_keep": st.integers(-2, 5),
    "n_keep": st.integers(-2, 20), "cache_prompt": st.booleans(), "id_slot": st.integers(-2, 3),
    "ignore_eos": st.booleans(), "post_sampling_probs": st.booleans(), "return_tokens": st.booleans(),
    "timings_per_token": st.booleans(), "t_max_predict_ms": st.integers(-2, 10_000),
    "n_indent": st.integers(-2, 8), "response_fields": st.lists(text, max_size=3),
    "lora": st.lists(st.fixed_dictionaries({"id": st.integers(-2, 3), "scale": st.floats(-2, 2)}), max_size=2),
    "dry_sequence_breakers": st.lists(text, max_size=3),
    "n": st.integers(-1, 4), "n_cmpl": st.integers(-1, 4),
    "mtp_draft": st.sampled_from(["auto", "greedy", "chain", "stochastic", "bogus"]),
    "mtp_n_draft": st.integers(-2, 20), "mtp_heads": st.sampled_from(["per_layer", "first", "capped", "x"]),
    "mtp_bogus": st.integers(0, 3),
}
COMPLETION = {**SAMPLING, "n_predict": n_tokens, "max_tokens": n_tokens, "n_probs": st.integers(-3, 30),
              "logprobs": st.integers(-3, 30), "echo": st.booleans(),
              "prompt": text | token_ids | st.lists(text | token_ids, max_size=3)}

role = st.sampled_from(["system", "user", "assistant", "tool", "developer"])
part = st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "input_audio", "bogus"])},
                             optional={"text": text, "image_url": st.fixed_dictionaries({"url": text})})
tool_call = st.fixed_dictionaries({"type": st.just("function"), "id": text, "function": st.fixed_dictionaries(
    {"name": text, "arguments": text | st.dictionaries(text, text, max_size=2)})})
message = st.fixed_dictionaries(
    {"role": role | junk, "content": text | st.none() | st.lists(part | junk, max_size=3) | junk},
    optional={"name": text | junk, "tool_calls": st.lists(tool_call | junk, max_size=2) | junk,
              "tool_call_id": text | junk, "reasoning_content": text | junk})
tool = st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": text, "parameters": st.sampled_from([{"type": "object"}, {"type": "object", "properties": {
        "x": {"type": "string"}}}, {}])}, optional={"description": text})})
CHAT_FIELDS = {**SAMPLING, "max_tokens": n_tokens, "max_completion_tokens": n_tokens,
               "logprobs": st.booleans(), "top_logprobs": st.integers(-3, 30),
               "messages": st.lists(message | junk, max_size=4) | junk,
               "tools": st.lists(tool | junk, max_size=2), "tool_choice": st.sampled_from(["auto", "none", "required"]),
               "response_format": st.sampled_from([{"type": "json_object"}, {"type": "text"}, {"type": "bogus"}, {
                   "type": "json_schema", "json_schema": {"schema": {"type": "object"}}}]),
               "parallel_tool_calls": st.booleans(), "chat_template_kwargs": st.dictionaries(text, junk, max_size=2),
               "reasoning_format": st.sampled_from(["none", "auto", "deepseek", "bogus"]),
               "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
               "add_generation_prompt": st.booleans(), "continue_final_message": st.booleans()}


@st.composite
def bodies(draw, fields: dict, core: dict):
    """A plausible body (core) plus a few of the endpoint's fields, a quarter of them junk."""
    body = dict(draw(st.fixed_dictionaries(core)))
    for key in draw(st.lists(st.sampled_from(sorted(fields)), max_size=6, unique=True)):
        body[key] = draw(junk) if draw(st.integers(0, 3)) == 0 else draw(fields[key])
    return body


small = {"max_tokens": st.integers(0, 12)}
completion_bodies = bodies(COMPLETION, {"prompt": st.sampled_from(PROMPTS) | text, **small})
chat_bodies = bodies(CHAT_FIELDS, {"messages": st.sampled_from(CHAT) | st.lists(message, min_size=1, max_size=3),
                                   **small})
tokenize_bodies = st.fixed_dictionaries({}, optional={
    "content": text | token_ids | st.lists(text | st.integers(-3, 300), max_size=4) | junk,
    "add_special": st.booleans() | junk, "parse_special": st.booleans() | junk, "with_pieces": st.booleans() | junk})
detokenize_bodies = st.fixed_dictionaries({}, optional={"tokens": token_ids | st.lists(junk, max_size=3) | junk})

# OpenAI Responses (/v1/responses): input as a string or a list of items, each item and part of every kind the
# server converts, a quarter of them junk at their own depth
def maybe_junk(strategy):
    return st.one_of(strategy, strategy, strategy, junk)


huge = st.integers(1, 3).map(lambda k: "word " * (20_000 * k))   # near the context and over it
input_part = st.fixed_dictionaries(
    {"type": maybe_junk(st.sampled_from(["input_text", "input_image", "input_file", "output_text", "bogus"]))},
    optional={"text": maybe_junk(text), "image_url": maybe_junk(text), "file_id": text})
output_part = st.fixed_dictionaries({"type": maybe_junk(st.sampled_from(["output_text", "input_text", "refusal"]))},
                                    optional={"text": maybe_junk(text), "refusal": maybe_junk(text)})
resp_item = st.one_of(
    st.fixed_dictionaries({"role": maybe_junk(st.sampled_from(["user", "system", "developer"])),
                           "content": maybe_junk(text | st.lists(maybe_junk(input_part), max_size=3))},
                          optional={"type": st.just("message"), "status": text}),
    st.fixed_dictionaries({"role": st.just("assistant"), "type": st.just("message"),
                           "content": maybe_junk(text | st.lists(maybe_junk(output_part), max_size=3))},
                          optional={"status": text, "id": text}),
    st.fixed_dictionaries({"type": st.just("function_call"), "call_id": maybe_junk(text),
                           "name": maybe_junk(text), "arguments": maybe_junk(text)}),
    st.fixed_dictionaries({"type": st.just("function_call_output"), "call_id": maybe_junk(text),
                           "output": maybe_junk(text | st.lists(maybe_junk(input_part), max_size=2))}),
    st.fixed_dictionaries({"type": st.just("reasoning"), "summary": maybe_junk(st.just([])),
                           "content": maybe_junk(st.lists(st.fixed_dictionaries(
                               {"type": st.just("reasoning_text"), "text": maybe_junk(text)}), max_size=2))}),
    junk)
resp_tool = st.fixed_dictionaries(
    {"type": maybe_junk(st.sampled_from(["function", "web_search", "file_search"])), "name": maybe_junk(text)},
    optional={"description": text, "strict": st.booleans(), "parameters": maybe_junk(st.sampled_from(
        [{"type": "object"}, {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}, {}]))})
RESPONSES_FIELDS = {
    **{k: SAMPLING[k] for k in ("temperature", "top_p", "top_k", "seed", "stop", "mtp_draft", "mtp_n_draft")},
    "stream": st.booleans(),
    "input": text | huge | st.lists(resp_item, max_size=4),
    "instructions": text | huge, "max_output_tokens": n_tokens | st.integers(-2**40, 2**40),
    "tools": st.lists(maybe_junk(resp_tool), max_size=2),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "name": "f"}]),
    "parallel_tool_calls": st.booleans(), "metadata": st.dictionaries(text, text, max_size=3),
    "reasoning": st.fixed_dictionaries({}, optional={"effort": st.sampled_from(["none", "low", "high", "bogus"])}),
    "previous_response_id": text, "store": st.booleans(), "user": text, "top_logprobs": st.integers(-3, 30),
    "text": st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}}]),
    "truncation": st.sampled_from(["auto", "disabled"]),
}
responses_bodies = bodies(RESPONSES_FIELDS, {"input": st.sampled_from(PROMPTS) | st.lists(resp_item, min_size=1,
                                                                                          max_size=3),
                                             "max_output_tokens": st.integers(0, 12), "stream": st.booleans()})

# Anthropic Messages (/v1/messages): system, messages of content blocks (text, image, tool_use, tool_result,
# thinking), tools with input_schema, tool_choice, stop_sequences, metadata, thinking
source = st.fixed_dictionaries({"type": maybe_junk(st.sampled_from(["base64", "url", "file"]))},
                               optional={"media_type": maybe_junk(st.just("image/png")), "data": maybe_junk(text),
                                         "url": maybe_junk(text)})
block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": maybe_junk(text)}),
    st.fixed_dictionaries({"type": st.just("image"), "source": maybe_junk(source)}),
    st.fixed_dictionaries({"type": st.just("tool_use"), "id": maybe_junk(text), "name": maybe_junk(text),
                           "input": maybe_junk(st.dictionaries(text, text, max_size=2))}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": maybe_junk(text)},
                          optional={"content": maybe_junk(text | st.lists(st.one_of(
                              st.fixed_dictionaries({"type": st.just("text"), "text": maybe_junk(text)}),
                              st.fixed_dictionaries({"type": st.just("image"), "source": source}), junk),
                              max_size=2)), "is_error": st.booleans()}),
    st.fixed_dictionaries({"type": st.just("thinking"), "thinking": maybe_junk(text)},
                          optional={"signature": text}),
    st.fixed_dictionaries({"type": maybe_junk(st.sampled_from(["redacted_thinking", "document", "bogus"]))}),
    junk)
anthropic_message = st.fixed_dictionaries(
    {"role": maybe_junk(st.sampled_from(["user", "assistant"])),
     "content": maybe_junk(text | huge | st.lists(maybe_junk(block), max_size=3))})
anthropic_tool = st.fixed_dictionaries({"name": maybe_junk(text)}, optional={
    "description": maybe_junk(text), "input_schema": maybe_junk(st.sampled_from(
        [{"type": "object"}, {"type": "object", "properties": {"x": {"type": "integer"}}}, {}]))})
system_block = st.fixed_dictionaries({"type": maybe_junk(st.just("text")), "text": maybe_junk(text)},
                                     optional={"cache_control": st.just({"type": "ephemeral"})})
MESSAGES_FIELDS = {
    **{k: SAMPLING[k] for k in ("temperature", "top_p", "top_k", "seed", "mtp_draft", "mtp_n_draft")},
    "stream": st.booleans(), "model": text,
    "messages": st.lists(maybe_junk(anthropic_message), max_size=4),
    "system": text | huge | st.just("x-anthropic-billing-header: cc_version=1; cch=abcde;Be brief.")
    | st.lists(maybe_junk(system_block), max_size=3),
    "max_tokens": n_tokens | st.integers(-2**40, 2**40), "stop_sequences": st.lists(text, max_size=20),
    "tools": st.lists(maybe_junk(anthropic_tool), max_size=2),
    "tool_choice": st.fixed_dictionaries({"type": maybe_junk(st.sampled_from(["auto", "any", "tool", "none"]))},
                                         optional={"name": text, "disable_parallel_tool_use": st.booleans()}),
    "metadata": st.fixed_dictionaries({}, optional={"user_id": maybe_junk(text)}),
    "thinking": st.fixed_dictionaries({"type": maybe_junk(st.sampled_from(["enabled", "disabled"]))},
                                      optional={"budget_tokens": maybe_junk(st.integers(-2**40, 2**40))}),
    "chat_template_kwargs": st.dictionaries(text, junk, max_size=2),
}
anthropic_chat = [[{"role": m["role"], "content": m["content"]} for m in c if m["role"] != "system"] for c in CHAT]
messages_bodies = bodies(MESSAGES_FIELDS, {
    "messages": st.sampled_from(anthropic_chat) | st.lists(anthropic_message, min_size=1, max_size=3),
    "max_tokens": st.integers(0, 12), "stream": st.booleans()})


# ----------------------------------------------------------------------------- the corpus, first

def corpus() -> list[dict]:
    return [json.loads(line) for line in CORPUS.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("case", corpus(), ids=lambda c: c["why"][:60])
def test_every_body_that_ever_failed(fuzzed, case):
    body = case["body"].encode("utf-8", "surrogateescape") if case.get("raw") else case["body"]
    status, payload = check(fuzzed, case["path"], body, method=case.get("method", "POST"))
    if "status" in case:
        assert status == case["status"], payload
    if "message" in case:
        assert case["message"] in error_of(payload)["message"], payload


# ----------------------------------------------------------------------------- generated bodies

@SETTINGS
@given(body=completion_bodies, path=st.sampled_from(["/completion", "/v1/completions"]))
def test_completion_bodies(fuzzed, body, path):
    check(fuzzed, path, body)


@SETTINGS
@given(body=chat_bodies)
def test_chat_bodies(fuzzed, body):
    check(fuzzed, "/v1/chat/completions", body)


@settings(SETTINGS, max_examples=max(5, EXAMPLES // 2))
@given(body=completion_bodies | chat_bodies, mtp=st.just("off"))
def test_bodies_without_mtp(fuzzed, body, mtp):
    check(fuzzed, "/v1/chat/completions" if "messages" in body else "/v1/completions", body, mtp=mtp)


@SETTINGS
@given(body=tokenize_bodies | detokenize_bodies)
def test_tokenize_and_detokenize_bodies(fuzzed, body):
    check(fuzzed, "/detokenize" if "tokens" in body else "/tokenize", body)


@SETTINGS
@given(body=responses_bodies)
def test_responses_bodies(fuzzed, body):
    check(fuzzed, "/v1/responses", body)


@SETTINGS
@given(body=messages_bodies)
def test_messages_bodies(fuzzed, body):
    check(fuzzed, "/v1/messages", body)


@settings(SETTINGS, max_examples=max(5, EXAMPLES // 2))
@given(body=responses_bodies | messages_bodies, mtp=st.just("off"))
def test_responses_and_messages_without_mtp(fuzzed, body, mtp):
    check(fuzzed, "/v1/responses" if "input" in body else "/v1/messages", body, mtp=mtp)


@SETTINGS
@given(path_body=st.one_of(st.tuples(st.just("/v1/chat/completions/input_tokens"), chat_bodies),
                           st.tuples(st.just("/v1/responses/input_tokens"), responses_bodies),
                           st.tuples(st.just("/v1/messages/count_tokens"), messages_bodies)))
def test_token_count_bodies(fuzzed, path_body):
    """Counting a prompt's tokens is the generating endpoint's conversion without the generation."""
    check(fuzzed, *path_body)


filenames = st.sampled_from(["a.bin", "../a.bin", "/etc/passwd", "", ".", "a/b", "a" * 300, "nul\x00.bin"]) | text


@settings(SETTINGS, max_examples=max(5, EXAMPLES // 2))
@given(slot=st.integers(-2, 3) | st.text(max_size=4), action=st.sampled_from(["erase", "save", "restore", "bogus", ""]),
       body=st.fixed_dictionaries({}, optional={"filename": filenames | junk}) | junk)
def test_slots(fuzzed, slot, action, body):
    check(fuzzed, "/slots", None, method="GET")
    check(fuzzed, f"/slots/{quote(str(slot))}?action={action}", body)


def nest(depth: int, leaf: bytes = b"1") -> bytes:
    return b"[" * depth + leaf + b"]" * depth


raw_bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=1, max_size=12).map(lambda b: b'{"prompt": "' + b + b'", "max_tokens": 2}'),   # any bytes
    st.integers(1, 100_000).map(lambda d: b'{"prompt": ' + nest(d) + b"}"),                            # nesting
    st.integers(1, 100_000).map(lambda d: b'{"messages": ' + nest(d, b"{}") + b"}"),
    st.sampled_from([b'{"prompt": "a", "prompt": 5}', b'{"max_tokens": 2, "max_tokens": "x", "prompt": "a"}',
                     b'{"messages": [{"role": "user", "content": "x", "role": 5}]}']),                  # duplicates
    st.integers(1, 150_000).map(lambda n: json.dumps({"prompt": "x", "stop": ["s"] * n}).encode()),     # arrays
    st.integers(1, 400_000).map(lambda n: json.dumps({"prompt": "x " * n, "max_tokens": 1}).encode()),  # strings
)


@settings(SETTINGS, max_examples=max(10, EXAMPLES))
@given(body=raw_bodies, path=st.sampled_from(["/completion", "/v1/completions", "/v1/chat/completions", "/tokenize",
                                              "/detokenize", "/infill", "/apply-template"]))
def test_raw_bodies(fuzzed, body, path):
    check(fuzzed, path, body)


raw_api_bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=1, max_size=12).map(lambda b: b'{"input": "' + b + b'", "max_output_tokens": 2}'),
    st.integers(1, 100_000).map(lambda d: b'{"input": ' + nest(d, b'{"role": "user", "content": "x"}') + b"}"),
    st.integers(1, 100_000).map(lambda d: b'{"messages": [{"role": "user", "content": ' + nest(d, b'{}') + b"}]}"),
    st.integers(1, 100_000).map(lambda d: b'{"system": ' + nest(d) + b', "messages": []}'),
    st.sampled_from([b'{"input": "a", "input": 5}', b'{"input": [], "input": "a", "max_output_tokens": 2}',
                     b'{"messages": [{"role": "user", "content": "x"}], "messages": 5}', b"[]", b'""', b"null"]),
    st.integers(1, 150_000).map(lambda n: json.dumps({"input": "x", "stop": ["s"] * n}).encode()),
    st.integers(1, 150_000).map(lambda n: json.dumps({"messages": [{"role": "user", "content": "x"}],
                                                      "stop_sequences": ["s"] * n}).encode()),
    st.integers(1, 400_000).map(lambda n: json.dumps({"input": "x " * n, "max_output_tokens": 1}).encode()),
)


@settings(SETTINGS, max_examples=max(5, EXAMPLES // 2))
@given(body=raw_api_bodies, path=st.sampled_from(["/v1/responses", "/v1/messages", *COUNT_TOKENS]))
def test_raw_responses_and_messages_bodies(fuzzed, body, path):
    check(fuzzed, path, body)


def test_a_body_over_the_size_limit_is_refused_before_it_is_read(fuzzed):
    """--max-body-bytes (1 MiB here): a 413 with a message, and the server stays right."""
    body = json.dumps({"prompt": "x" * (2 << 20)}).encode()
    try:
        status, payload, took = send(fuzzed["on"], "POST", "/completion", body)
    except (BrokenPipeError, ConnectionResetError):  # refused before the client finished sending
        status, payload = 413, {"error": {"message": "(connection closed early)"}}
    assert status == 413, payload
    assert "--max-body-bytes" in json.dumps(payload) or "closed early" in json.dumps(payload), payload
    assert fuzzed["on"].healthy()
    r = check(fuzzed, "/completion", {"prompt": PROMPTS[1], "n_predict": 8, "temperature": 0})[1]
    assert r["content"]


@pytest.mark.parametrize("path, body, flag", [
    ("/completion", {"prompt": "hi", "n_predict": MAX_TOKENS + 1}, "--max-tokens-limit"),
    ("/v1/chat/completions", {"messages": CHAT[0], "max_tokens": 10**6}, "--max-tokens-limit"),
    ("/completion", {"prompt": "hi", "n_predict": 4, "n_probs": 21}, "--max-top-logprobs"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "stop": [str(i) for i in range(17)]}, "--max-stop"),
    ("/v1/completions", {"prompt": ["hi"] * 65, "max_tokens": 1}, "--max-prompts"),
    ("/completion", {"prompt": "hi", "n_predict": 4, "grammar": "root ::= " + '"a" ' * 70_000}, "--max-grammar-bytes"),
    ("/v1/chat/completions", {"messages": CHAT[0], "tools": [{"type": "function", "function": {
        "name": "f", "description": "x" * 300_000, "parameters": {"type": "object"}}}]}, "--max-grammar-bytes"),
    ("/v1/completions", b'{"prompt": ' + nest(65) + b"}", "--max-json-depth"),
])
def test_over_each_limit_a_400_names_its_flag(fuzzed, path, body, flag):
    status, payload = check(fuzzed, path, body)
    assert status == 400 and flag in payload["error"]["message"], payload


def wide_schema(n: int, required: int = 0) -> dict:
    """An object schema of n properties, the first `required` of them required."""
    return {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(n)},
            "required": [f"p{i}" for i in range(required)]}


@pytest.mark.parametrize("path, body, statuses", [
    ("/v1/chat/completions/input_tokens", {"messages": CHAT[0], "json_schema": wide_schema(5000)}, (200,)),
    ("/completion", {"prompt": "x", "n_predict": 4, "json_schema": wide_schema(5000)}, (200,)),
    ("/completion", {"prompt": "x", "n_predict": 4, "json_schema": wide_schema(5000, required=2)}, (200,)),
    ("/v1/messages", {"messages": anthropic_chat[0], "max_tokens": 4, "tools": [
        {"name": "f", "input_schema": wide_schema(5000)}], "tool_choice": {"type": "any"}}, (200,)),
    # the chat template's wrapping repeats the schema's rule: llama.cpp's grammar parser refuses it (a 400)
    ("/v1/chat/completions", {"messages": CHAT[0], "max_tokens": 4, "response_format": {
        "type": "json_schema", "json_schema": {"schema": wide_schema(5000, required=2)}}}, (200, 400)),
])
def test_a_schema_of_many_optional_properties_is_quick(fuzzed, path, body, statuses):
    """A 135 KB schema (within --max-grammar-bytes) of 5,000 optional properties: its grammar was cubic to
    build and held the server's HTTP thread for minutes."""
    t0 = time.monotonic()
    status, payload = check(fuzzed, path, body)
    took = time.monotonic() - t0
    assert status in statuses and took < 15, (status, took, str(payload)[:300])


def test_a_body_without_max_tokens_generates_at_most_the_limit(fuzzed):
    body = {"prompt": PROMPTS[3], "temperature": 0, "ignore_eos": True}
    assert check(fuzzed, "/completion", body)[1]["tokens_predicted"] == MAX_TOKENS
    assert check(fuzzed, "/completion", {**body, "n_predict": -1})[1]["tokens_predicted"] == MAX_TOKENS
    r = check(fuzzed, "/v1/chat/completions", {"messages": CHAT[0], "temperature": 0, "ignore_eos": True})[1]
    assert r["usage"]["completion_tokens"] == MAX_TOKENS
    r = check(fuzzed, "/v1/messages", {"messages": anthropic_chat[0], "temperature": 0, "ignore_eos": True})[1]
    assert r["usage"]["output_tokens"] == MAX_TOKENS and r["stop_reason"] == "max_tokens", r
    r = check(fuzzed, "/v1/responses", {"input": PROMPTS[3], "temperature": 0, "ignore_eos": True})[1]
    assert r["usage"]["output_tokens"] == MAX_TOKENS, r
