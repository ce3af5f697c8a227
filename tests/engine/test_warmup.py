"""The engine's warm-up (native/engine/mtp-warmup.cpp): on a GPU, before its first step, an engine decodes
every verify size (1..k+1 target rows, k its n_draft up to 7) and every MTP catch-up size twice, so that
graphs are built and CUDA graphs captured before anything is timed, and removes all of it. PYMTP_WARMUP=1
runs it on this CPU: what it leaves behind must be exactly what an engine that never warmed up holds (empty
KV on both contexts, stats at zero), so the text, the drafts and what was accepted are those of a cold
engine."""

from __future__ import annotations

import ctypes as C

import pytest

import pymtp
from gpu import NGL
from pymtp._native import llama as L

pytestmark = pytest.mark.gpu

PROMPTS = ["The quick brown fox", "def fibonacci(n):", "Once upon a time"]


def run(path, warm: str, monkeypatch, **kw):
    monkeypatch.setenv("PYMTP_WARMUP", warm)
    with pymtp.Model(path, n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=NGL, **kw) as m:
        warmed = m.rt.lib.llama_mtp_warmed_sizes(m.rt.engine) if m.mtp_enabled else 0
        k_max = m.rt.lib.llama_mtp_max_draft(m.rt.engine) if m.mtp_enabled else 0
        stats0 = L.llama_mtp_stats()
        if m.mtp_enabled:
            m.rt.lib.llama_mtp_get_stats(m.rt.engine, C.byref(stats0))
        outs = [m.generate(p, max_tokens=24) for p in PROMPTS]
    return (warmed, k_max), stats0, outs


@pytest.mark.parametrize("arch", ["glm4moe", "qwen35", "step35"])
def test_a_warmed_engine_drafts_and_accepts_as_a_cold_one(arch, tiny_model_path, monkeypatch):
    path = tiny_model_path(arch)
    _, _, ref = run(path, "0", monkeypatch, mtp="off")
    cold_sizes, _, cold = run(path, "0", monkeypatch, mtp="on", n_draft=5)
    warm_sizes, stats0, warm = run(path, "1", monkeypatch, mtp="on", n_draft=5)
    # 1..k+1 rows for the engine's k (its n_draft, up to 7; a recurrent target's drafts are bounded by its
    # rollback snapshots): llama-server sizes a context's outputs per sequence for no more
    assert cold_sizes[0] == 0 and warm_sizes[0] == min(5, warm_sizes[1]) + 1 >= 4, (cold_sizes, warm_sizes)
    assert stats0.n_prompt == 0 and stats0.n_drafted == 0, stats0  # the warm-up left nothing counted
    for r, c, w in zip(ref, cold, warm):
        assert w.tokens == c.tokens == r.tokens
        # the MTP KV held nothing of the warm-up: the head drafted exactly what it drafted cold
        assert (w.stats.n_drafted, w.stats.n_accepted) == (c.stats.n_drafted, c.stats.n_accepted)
    assert sum(c.stats.n_accepted for c in cold) > 0  # the planted heads' drafts were accepted


def test_llama_server_slots_warm_up_and_answer_as_without_mtp(models, monkeypatch, tmp_path):
    """llama-server's slots are engines too. Warmed up, a slot decodes at most its n_draft + 1 rows, the
    outputs per sequence the server sized its context for (a warm-up of 8 rows with --mtp-n-draft 3 aborted
    the server in llama_context::output_reserve), and the text is that of MTP off."""
    from server_harness import PROMPTS, Server, completion_text

    off = Server(models["glm4moe"], tmp_path / "off.log", mtp="off")
    monkeypatch.setenv("PYMTP_WARMUP", "1")
    on = Server(models["glm4moe"], tmp_path / "on.log", mtp="on", parallel=2)
    try:
        for p in PROMPTS:
            assert completion_text(on, p, stream=False)[0] == completion_text(off, p, stream=False)[0]
    finally:
        on.stop()
        off.stop()


def run_sampling(path, warm: str, monkeypatch, mtp: str, **gen):
    """One Model whose target rows and drafts are sampled on the backend (as on a GPU): the outputs, what
    each counted, and the sizes warmed for the requests' way of sampling."""
    monkeypatch.setenv("PYMTP_WARMUP", warm)
    monkeypatch.setenv("PYMTP_VERIFY_ON_BACKEND", "1")   # both read when the engine is made
    monkeypatch.setenv("PYMTP_DRAFT_ON_BACKEND", "1")
    extra = dict(n_draft=3) if mtp == "on" else {}
    with pymtp.Model(path, n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp=mtp, **extra) as m:
        outs, warmed = [], []
        for s, p in enumerate(PROMPTS):
            outs.append(m.generate(p, max_tokens=24, seed=s, **gen))
            warmed.append(m.rt.lib.llama_mtp_warmed_sampling(m.rt.engine))
        # a second turn sampled another way: its prefix stays in the context (n_prompt counts only what was
        # decoded), so nothing is warmed over it
        other = dict(temperature=0.8, draft="stochastic") if gen["temperature"] == 0 else dict(temperature=0.0)
        chat = [{"role": "user", "content": PROMPTS[0]}, {"role": "assistant", "content": outs[-1].text},
                {"role": "user", "content": PROMPTS[1]}]
        m.chat(chat[:2], max_tokens=1, **gen)
        outs.append(m.chat(chat, max_tokens=16, seed=7, **other))
    return outs, warmed


@pytest.mark.parametrize("gen", [dict(temperature=0.0), dict(temperature=0.8, draft="stochastic")],
                         ids=["greedy", "stochastic"])
@pytest.mark.parametrize("arch,mtp", [("glm4moe", "on"), ("qwen35", "on"), ("step35", "on"), ("glm4moe", "off")])
def test_a_request_s_way_of_sampling_is_warmed_and_changes_nothing(gen, arch, mtp, tiny_model_path, monkeypatch):
    """The backend samplers a request attaches (the target's argmax or top candidates, the drafts' top
    candidates) change every decode size's graphs, so on a GPU the engine warms those once per way of sampling
    (warm_sampling), before the prompt. Same seeds, warmed or not: the same tokens, drafts and acceptances
    (the drafts' random stream, the stats and the contexts are put back)."""
    path = tiny_model_path(arch)   # qwen35: a recurrent target; step35: several MTP heads
    cold, cold_warmed = run_sampling(path, "0", monkeypatch, mtp, **gen)
    warm, warmed = run_sampling(path, "1", monkeypatch, mtp, **gen)
    assert cold_warmed == [0] * len(PROMPTS)
    # every size a step can verify (k=3: 1..4 rows, fewer where a recurrent target keeps fewer rollback
    # snapshots; MTP off: 1), warmed once, at the first request
    assert len(set(warmed)) == 1 and (warmed[0] == 1 if mtp == "off" else 2 <= warmed[0] <= 4), warmed
    for c, w in zip(cold, warm):
        assert w.tokens == c.tokens
        counted = ("n_prompt", "n_reused", "n_steps", "n_drafted", "n_accepted", "n_draft_decodes",
                   "n_catchup_decodes")
        assert [getattr(w.stats, f) for f in counted] == [getattr(c.stats, f) for f in counted]
    if mtp == "on":
        assert sum(c.stats.n_accepted for c in cold) > 0


def adaptive_estimates(path, monkeypatch, start: str) -> dict:
    """A fresh adaptive engine's cost estimates before its first step (PYMTP_WARMUP=1: the GPU's warm-up)."""
    from pymtp.engine.stats import adaptive_dict

    monkeypatch.setenv("PYMTP_WARMUP", "1")
    monkeypatch.setenv("PYMTP_ADAPTIVE_START", start)
    with pymtp.Model(path, n_ctx=256, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on", n_draft="auto") as m:
        a = L.llama_mtp_adaptive_stats()
        m.rt.lib.llama_mtp_get_adaptive_stats(m.rt.engine, C.byref(a))
        est = adaptive_dict(a)
        est["est_verify_ms"] = [float(a.t_target_ms[n]) for n in range(1, 4)]  # k_max is set per generation
        # the engine still starts empty and generates as before
        est["tokens"] = m.generate(PROMPTS[0], max_tokens=16).tokens
    return est


def test_the_warm_up_primes_the_adaptive_controller(tiny_model_path, monkeypatch):
    """The warm-up times each verify size, a lone draft row and a change of size once its graphs are warm,
    and a fresh engine's controller plans its first step with those costs (controller::prime) instead of
    plain steps that time them; PYMTP_ADAPTIVE_START=0 leaves it unprimed, as before."""
    path = tiny_model_path("glm4moe")
    primed = adaptive_estimates(path, monkeypatch, "1")
    unprimed = adaptive_estimates(path, monkeypatch, "0")
    assert primed["est_plain_ms"] > 0 and all(v > 0 for v in primed["est_verify_ms"]), primed
    assert primed["est_draft_ms"] > 0, primed
    assert unprimed["est_plain_ms"] == 0.0, unprimed   # nothing timed before the first step
    assert primed["tokens"] == unprimed["tokens"]       # only speed depends on it
