"""Upstream llama.cpp's open MTP server bugs, each proven absent from pymtp's llama-server by one test.

Every test names what it checks; its docstring names the upstream issue. "Acceptance" is compared
exactly where it is a deterministic function of the request (greedy drafts, fixed draft length, the
batch-invariant CPU kernels): a request accepts the same drafts alone, among busy slots, after
another conversation, or after a prompt-cache restore.
"""

from __future__ import annotations

import concurrent.futures as cf

import pytest

from server_harness import PROMPTS

pytestmark = pytest.mark.gpu

LONG = " ".join(f"item {i}," for i in range(40))  # ~120 tokens: several 16-token ubatches


def ask(server, body: dict) -> dict:
    code, r = server.post("/completion", body)
    assert code == 200, r
    return r


def run(server, body: dict) -> tuple[str, int, int]:
    """(text, drafted, accepted) of one /completion request."""
    r = ask(server, dict(body, cache_prompt=body.get("cache_prompt", True)))
    m = r["timings"]["mtp"]
    return r["content"], m["drafted"], m["accepted"]


def concurrently(server, bodies: list[dict]) -> list[tuple[str, int, int]]:
    with cf.ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: run(server, b), bodies))


def test_busy_slots_do_not_contaminate_each_other(servers):
    """#28286: cross-slot contamination under --parallel. Four requests with different prompts,
    samplers and draft modes at once: each gives what it gives alone (text and accepted drafts)."""
    on = servers("glm4moe", "on", parallel=4)
    bodies = [dict(prompt=PROMPTS[0], n_predict=40, temperature=0),
              dict(prompt=PROMPTS[1], n_predict=40, temperature=0.8, seed=5, mtp_draft="stochastic"),
              dict(prompt=PROMPTS[2], n_predict=40, temperature=0, mtp_draft="chain", repeat_penalty=1.2),
              dict(prompt=PROMPTS[3], n_predict=40, temperature=0.6, seed=9, mtp_n_draft=2)]
    alone = [run(on, b) for b in bodies]
    for _ in range(2):
        assert concurrently(on, bodies) == alone
    assert all(acc > 0 for _, _, acc in alone)


def test_prompts_longer_than_the_ubatch_keep_acceptance_under_four_slots(servers):
    """#27572: acceptance collapsing to 0 with multi-ubatch batches under -np N. Prompts of several
    ubatches, four slots at once: each request drafts and accepts exactly what it does alone, and
    says what MTP off says."""
    flags = ("-ub", "16", "-b", "64")
    on, off = servers("glm4moe", "on", parallel=4, extra=flags), servers("glm4moe", "off", parallel=4, extra=flags)
    bodies = [dict(prompt=f"{LONG} {p}", n_predict=32, temperature=0) for p in PROMPTS]
    alone = [run(on, b) for b in bodies]
    together = concurrently(on, bodies)
    assert together == alone
    assert [t for t, _, _ in together] == [ask(off, b)["content"] for b in bodies]
    for text, drafted, accepted in together:
        assert accepted > 0.3 * drafted, "acceptance collapsed"


def test_a_new_sequence_never_drafts_from_the_previous_ones_state(servers):
    """#28333: a stale MTP carrier at sequence start. A request drafts the same after another
    conversation in the same slot as it does as the server's very first request."""
    fresh = servers("glm4moe", "on", extra=("--alias", "fresh"))
    first = run(fresh, dict(prompt=PROMPTS[2], n_predict=32, temperature=0, cache_prompt=False))
    used = servers("glm4moe", "on", extra=("--alias", "used"))
    for before in (PROMPTS[0], LONG, PROMPTS[3]):
        run(used, dict(prompt=before, n_predict=24, temperature=0))
        assert run(used, dict(prompt=PROMPTS[2], n_predict=32, temperature=0)) == first


def test_hybrid_model_restores_its_mtp_state_with_context_checkpoints(servers):
    """#30141: the MTP hidden state not restored with context checkpoints. A hybrid (recurrent)
    model, a multi-turn conversation whose second request restores a checkpoint / reuses the cached
    prompt: the text equals MTP off and the drafts accepted equal those of a cold start."""
    on, off = servers("qwen35", "on"), servers("qwen35", "off")
    cold = servers("qwen35", "on", extra=("--alias", "cold"))
    turn1 = f"User: {LONG}\nAssistant:"
    a1 = ask(off, dict(prompt=turn1, n_predict=24, temperature=0))["content"]
    assert run(on, dict(prompt=turn1, n_predict=24, temperature=0))[0] == a1
    turn2 = f"{turn1}{a1}\nUser: and then?\nAssistant:"
    r = ask(on, dict(prompt=turn2, n_predict=32, temperature=0, cache_prompt=True))
    assert r["tokens_cached"] > 0 and r["timings"]["prompt_n"] < len(turn2) // 4, "the cached prompt was not reused"
    assert r["content"] == ask(off, dict(prompt=turn2, n_predict=32, temperature=0))["content"]
    reused = (r["content"], r["timings"]["mtp"]["drafted"], r["timings"]["mtp"]["accepted"])
    assert reused == run(cold, dict(prompt=turn2, n_predict=32, temperature=0, cache_prompt=False))
    assert reused[2] > 0


def test_every_slot_drafts_to_the_end_of_its_own_context(servers):
    """The MTP context sized from the whole --ctx-size instead of per slot (upstream draft-mtp):
    four slots of 256 tokens each run into their context end at once, drafting all the way, and
    stop where MTP off stops with the same text."""
    on, off = servers("glm4moe", "on", parallel=4, ctx=256), servers("glm4moe", "off", parallel=4, ctx=256)
    bodies = [dict(prompt=p, n_predict=400, temperature=0, ignore_eos=True) for p in PROMPTS]
    with cf.ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda b: ask(on, b), bodies))
    for body, r in zip(bodies, got):
        ref = ask(off, body)
        assert r["content"] == ref["content"] and r["tokens_predicted"] == ref["tokens_predicted"]
        assert r["timings"]["mtp"]["accepted"] > 0
    assert on.healthy()


def test_a_large_context_with_several_slots_starts_and_serves(servers):
    """#28433: crash-looping at large --ctx-size. 4 slots x 32768 tokens (-c 131072, past the
    model's 4096 training context): the server starts, and answers as MTP off does."""
    on, off = servers("glm4moe", "on", parallel=4, ctx=32768), servers("glm4moe", "off")
    bodies = [dict(prompt=p, n_predict=24, temperature=0) for p in PROMPTS]
    got = concurrently(on, bodies)
    assert [t for t, _, _ in got] == [ask(off, b)["content"] for b in bodies]
    assert all(acc > 0 for _, _, acc in got)
