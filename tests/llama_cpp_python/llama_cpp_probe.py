"""Run in a subprocess by tests/llama_cpp_python/test_llama_cpp_mtp.py (llama_cpp replaces libllama's log callback, so
it stays out of the pytest process): plain llama_cpp.Llama and pymtp.llama_cpp.Llama on one GGUF, the
same requests through both; prints one JSON object.

    python tests/llama_cpp_python/llama_cpp_probe.py '{"model": "m.gguf", "head": null, "n_draft": 3, "draft": "auto"}'
"""

from __future__ import annotations

import json
import sys
import warnings


def strip(resp):
    """A response without what differs between any two calls (ids, timestamps)."""
    if isinstance(resp, dict):
        return {k: strip(v) for k, v in resp.items() if k not in ("id", "created")}
    if isinstance(resp, list):
        return [strip(v) for v in resp]
    if hasattr(resp, "item"):   # numpy scalars in logprobs
        return resp.item()
    return resp


def main(spec: dict) -> dict:
    from pymtp.llama_cpp import Llama, llama_cpp

    common = dict(n_ctx=512, n_batch=64, n_threads=1, verbose=False, logits_all=True, seed=7)
    plain = llama_cpp.Llama(spec["model"], **common)
    mtp = Llama(spec["model"], mtp="on", mtp_head=spec.get("head"), n_draft=spec.get("n_draft", 3),
                draft=spec.get("draft", "auto"), **common)
    out: dict = {"reason": mtp.mtp_reason, "cases": {}, "warnings": []}
    prompts = ["The quick brown fox", "Once upon a time there was", "1, 2, 3, 4,"]

    def both(name, call):
        a, b = call(plain), call(mtp)
        out["cases"][name] = {"plain": strip(a), "mtp": strip(b), "stats": mtp.mtp_stats}

    for i, p in enumerate(prompts):
        both(f"greedy-{i}", lambda m: m(p, max_tokens=40, temperature=0.0, logprobs=3))
        both(f"sampled-{i}", lambda m: m(p, max_tokens=40, temperature=0.8, top_k=20, seed=11 + i))
    both("penalties", lambda m: m(prompts[0], max_tokens=40, temperature=0.0, repeat_penalty=1.3,
                                   frequency_penalty=0.2))
    both("stop", lambda m: m(prompts[2], max_tokens=40, temperature=0.0, stop=["7"]))
    msgs = [{"role": "user", "content": "Say something."}]
    both("chat", lambda m: m.create_chat_completion(messages=msgs, max_tokens=32, temperature=0.0))
    both("stream", lambda m: list(m(prompts[1], max_tokens=32, temperature=0.0, stream=True)))
    both("chat-stream", lambda m: list(m.create_chat_completion(messages=msgs, max_tokens=24, temperature=0.0,
                                                                 stream=True)))
    # prompt caching: the same prompt again, then one that extends it
    both("again", lambda m: m(prompts[0], max_tokens=24, temperature=0.0))
    both("extended", lambda m: m(prompts[0] + " jumps", max_tokens=24, temperature=0.0))
    both("tokenize", lambda m: m.tokenize(b"Hello world"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grammar = llama_cpp.LlamaGrammar.from_string('root ::= [a-z ]+ "."')
        both("grammar", lambda m: m(prompts[0], max_tokens=24, temperature=0.0, grammar=grammar))
        both("echo-logprobs", lambda m: m(prompts[0], max_tokens=8, temperature=0.0, echo=True, logprobs=2))
        out["warnings"] = [str(w.message) for w in caught]
    # Llama's own loop after the engine's (eval, then reset), and the engine again
    mtp.reset()
    both("after-reset", lambda m: m(prompts[1], max_tokens=24, temperature=0.0))
    mtp.close()
    plain.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
