"""The adaptive draft controller (n_draft="auto", the default).

Each step it drafts 0..7 tokens, what it expects to emit the most tokens per unit of time from a cost
model it learns (here pinned with a test hook, so that its choices depend on acceptance alone) and the
acceptance it measures. Whatever it chooses, the output is the model's: greedy token-identical to MTP
off while the controller switches between plain steps and drafts of several lengths mid-generation,
and at T > 0, with drafts cut by the head's confidence, the output distribution is unchanged
(chi-square against plain sampling).
"""

from __future__ import annotations

import contextlib

import pytest

import pymtp
from gpu import NGL
from helpers import MAX_TOKENS, PROMPTS, chain_kw, homogeneity_p
from pymtp._native import llama as L

pytestmark = pytest.mark.gpu


# pinned costs in ms (plain step, draft decode, each verified token beyond the first)
BREAK_EVEN = (1.0, 0.35, 0.25)  # drafting pays only while acceptance is high
CHEAP = (1.0, 0.02, 0.02)       # drafting nearly free: long drafts on the planted heads' easy text
DEAR = (1.0, 5.0, 1.0)          # a draft decode dearer than a plain step: plain decoding


def pin(model, plain_ms: float, draft_ms: float, verify_extra_ms: float) -> None:
    model.rt.lib.llama_mtp_pin_adaptive_costs(model.rt.engine, plain_ms, draft_ms, verify_extra_ms)


@pytest.fixture(scope="module")
def auto_pair(arch, tiny_model_path):
    """(MTP on with n_draft="auto", MTP off) on one tiny GGUF per engine arch."""
    path = tiny_model_path(arch)
    on = pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on")
    off = pymtp.Model(path, n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="off")
    yield on, off
    on.close()
    off.close()


def steps_per_length(outs) -> list[int]:
    return [sum(col) for col in zip(*(o.stats.adaptive["steps_per_draft_length"] for o in outs))]


def test_auto_is_the_default_and_reports_what_it_did(auto_pair):
    on, _ = auto_pair
    assert on.n_draft == "auto" and on.rt.draft_cap == 7
    pin(on, *BREAK_EVEN)
    out = on.generate(PROMPTS[0], max_tokens=MAX_TOKENS)
    a = out.stats.adaptive
    assert a is not None and a["max_draft"] == min(7, on.rt.max_draft)
    # every step after the first token is counted under the length it drafted
    assert sum(a["steps_per_draft_length"]) == out.stats.n_steps
    assert sum(k * n for k, n in enumerate(a["steps_per_draft_length"])) == out.stats.n_drafted
    assert a["est_plain_ms"] == pytest.approx(1.0) and a["est_draft_ms"] == pytest.approx(0.35)
    assert len(a["est_accept"]) == a["max_draft"] and all(0 < x < 1 for x in a["est_accept"])
    assert "adaptive:" in out.stats.summary_line()
    # a fixed length turns the controller off for that call
    fixed = on.generate(PROMPTS[0], max_tokens=MAX_TOKENS, n_draft=2)
    assert fixed.stats.adaptive is None and fixed.tokens == out.tokens


def generate_switching(model, prompt, every: int = 3, **kw):
    """Stream a generation, re-pinning the controller's costs every few steps between drafting nearly
    free (it drafts long) and drafting dearer than a plain step (it decodes plainly and defers the MTP
    catch-up): the controller switches between plain steps and drafts mid-generation."""
    gen = model.generate(prompt, stream=True, **kw)
    for i, _ in enumerate(gen):
        pin(model, *(CHEAP if (i // every) % 2 == 0 else DEAR))
    return gen.result


def test_greedy_identical_while_the_controller_switches(auto_pair):
    """Plain steps and drafts of several lengths within generations; every output equals MTP off's,
    token for token (and the MTP rows deferred while plain are written before drafting resumes)."""
    on, off = auto_pair
    outs = []
    for prompt in PROMPTS:
        ref = off.generate(prompt, max_tokens=MAX_TOKENS)
        pin(on, *CHEAP)
        got = generate_switching(on, prompt, max_tokens=MAX_TOKENS)
        assert got.tokens == ref.tokens, f"prompt {prompt!r}"
        assert got.finish_reason == ref.finish_reason
        outs.append(got)
    steps = steps_per_length(outs)
    assert steps[0] > 0, steps                                # plain steps
    assert sum(1 for n in steps[1:] if n) >= 2, steps         # drafts of at least two lengths
    switching = [o for o in outs if o.stats.adaptive["steps_per_draft_length"][0]
                 and sum(o.stats.adaptive["steps_per_draft_length"][1:])]
    assert len(switching) >= len(PROMPTS) // 2, "generations did not switch between plain steps and drafts"
    assert sum(o.stats.adaptive["deferred_rows"] for o in outs) > 0
    assert sum(o.stats.n_accepted for o in outs) > 0
    on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)  # learn real costs again


def test_drafting_is_vetoed_while_drafting_steps_are_measured_slower(auto_pair):
    """The cost model says drafting pays (pinned nearly free), but windows where the controller
    drafted have been measured slower end to end than plain windows: it decodes plainly, and drafts
    again once free windows measure faster. The output is the same throughout."""
    on, off = auto_pair
    prompt = PROMPTS[2]
    ref = off.generate(prompt, max_tokens=120)
    pin(on, *CHEAP)
    lib, eng = on.rt.lib, on.rt.engine
    lib.llama_mtp_set_realized_rates(eng, 1.0, 0.8)  # free windows: 20% slower per token
    vetoed = on.generate(prompt, max_tokens=120)
    a = vetoed.stats.adaptive
    assert vetoed.tokens == ref.tokens
    assert a["vetoed"] > 50 and a["plain_share"] > 0.8, a
    assert a["realized_plain_tok_per_ms"] == pytest.approx(1.0) and a["realized_draft_tok_per_ms"] == pytest.approx(0.8)
    lib.llama_mtp_set_realized_rates(eng, 1.0, 1.5)  # now free windows measure faster
    free = on.generate(prompt, max_tokens=120)
    assert free.tokens == ref.tokens
    assert free.stats.adaptive["vetoed"] == 0 and free.stats.adaptive["plain_share"] < 0.2
    on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)  # learn real costs again


def test_free_windows_that_hardly_drafted_veto_nothing(auto_pair):
    """Free windows measured slower than plain ones veto drafting only where they drafted: windows whose
    steps the controller mostly decoded plainly (a probe or two) measured plain decoding, not drafting.
    (The simulator's Gemma 3 270M CPU preset at T=0.7: such a window vetoed drafting until the MTP side slept,
    0.99x of MTP off where k=2 ran 1.4x.)"""
    on, off = auto_pair
    prompt = PROMPTS[2]
    ref = off.generate(prompt, max_tokens=96)
    pin(on, *CHEAP)
    lib, eng = on.rt.lib, on.rt.engine
    lib.llama_mtp_set_realized_rates(eng, 1.0, 0.95)  # free windows a little slower than plain ones
    lib.llama_mtp_set_realized_share(eng, 0.1)  # ... but they drafted in a tenth of their steps
    free = on.generate(prompt, max_tokens=96)
    lib.llama_mtp_set_realized_rates(eng, 1.0, 0.95)  # the same rates from windows that drafted throughout
    vetoed = on.generate(prompt, max_tokens=96)
    on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)
    assert free.tokens == vetoed.tokens == ref.tokens
    assert free.stats.adaptive["vetoed"] == 0 and free.stats.adaptive["plain_share"] < 0.2, free.stats.adaptive
    assert vetoed.stats.adaptive["vetoed"] > 40 and vetoed.stats.adaptive["plain_share"] > 0.8, vetoed.stats.adaptive


def test_no_plain_windows_where_drafting_clearly_wins(auto_pair):
    """Free windows measured 1.3x above the model's plain rate need no plain window to confirm them
    (on the 27B shape those windows cost ~100 plain steps of a short run); below that margin, plain
    windows run to measure the plain rate."""
    on, off = auto_pair
    prompt = PROMPTS[3]
    ref = off.generate(prompt, max_tokens=96)
    pin(on, *CHEAP)  # the model's plain rate: ~1 token per ms
    lib, eng = on.rt.lib, on.rt.engine
    lib.llama_mtp_set_realized_rates(eng, 0.0, 1.4)  # no plain window measured, free ones 1.4x
    clear = on.generate(prompt, max_tokens=96)
    lib.llama_mtp_set_realized_rates(eng, 0.0, 1.1)  # only 1.1x: a plain window measures plain decoding
    unsure = on.generate(prompt, max_tokens=96)
    lib.llama_mtp_set_realized_rates(eng, 2.0, 1.4)  # plain windows measured faster: that rate counts
    behind = on.generate(prompt, max_tokens=96)
    on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)
    assert clear.tokens == unsure.tokens == behind.tokens == ref.tokens
    assert clear.stats.adaptive["plain_share"] < 0.2, clear.stats.adaptive
    assert unsure.stats.adaptive["plain_share"] > 0.8, unsure.stats.adaptive
    assert behind.stats.adaptive["plain_share"] > 0.8 and behind.stats.adaptive["vetoed"] > 20, behind.stats.adaptive


def test_the_mtp_side_sleeps_while_drafting_keeps_losing(tiny_model_path):
    """128 steps in a row without drafting chosen, its measured costs far behind plain decoding (512
    where it is close): the MTP side sleeps (no hidden-state output, no catch-up, every step plain) for
    1024 steps, then wakes, rebuilds its KV and probes; pinned again with cheap drafts it drafts at
    once. Output equal to MTP off throughout."""
    path = tiny_model_path("glm4moe")
    kw = dict(n_ctx=2048, n_batch=64, n_threads=1, n_gpu_layers=NGL)
    with pymtp.Model(path, mtp="on", **kw) as on, pymtp.Model(path, mtp="off", **kw) as off:
        prompt = PROMPTS[0]
        n = 1250
        ref = off.generate(prompt, max_tokens=n, temperature=0.0)
        pin(on, *DEAR)
        got = on.generate(prompt, max_tokens=n, temperature=0.0)
        a = got.stats.adaptive
        assert got.tokens == ref.tokens
        # asleep from the step after the 128th quiet one for exactly 1024 steps (the next sleep would
        # start 128 steps after waking, past the end); awake, the rows wait in the queue
        assert a["dormant_steps"] == 1024, a
        assert a["plain_share"] > 0.95 and 100 < a["deferred_rows"] < n - 1024, a
        pin(on, *CHEAP)  # wakes the engine: cheap drafts are chosen at once
        again = on.generate(prompt, max_tokens=120, temperature=0.0)
        assert again.tokens == ref.tokens[:120]
        assert again.stats.n_accepted > 20 and again.stats.adaptive["dormant_steps"] == 0
        on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)


def test_no_probe_after_waking_where_no_acceptance_could_pay(tiny_model_path):
    """A draft decode dearer than a plain step: even with every draft accepted no length beats plain
    decoding, so waking from a sleep probes nothing (before, each wake drafted a probe: four llama-server
    slots on an H200, where a draft cost as much as a slot's share of a plain batch, lost 5-10% of a round
    to them). The engine sleeps, wakes after 1024 steps and decodes plainly; output equal to MTP off."""
    path = tiny_model_path("glm4moe")
    kw = dict(n_ctx=2048, n_batch=64, n_threads=1, n_gpu_layers=NGL)
    with pymtp.Model(path, mtp="on", **kw) as on, pymtp.Model(path, mtp="off", **kw) as off:
        n = 1320  # past the probe after waking: asleep at 128 for 1024 steps, the probe was due 128 later
        ref = off.generate(PROMPTS[2], max_tokens=n, temperature=0.0)
        pin(on, *DEAR)
        got = on.generate(PROMPTS[2], max_tokens=n, temperature=0.0)
        on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)
        a = got.stats.adaptive
        assert got.tokens == ref.tokens
        assert a["dormant_steps"] >= 1024 and a["probes"] == 0, a
        assert sum(a["steps_per_draft_length"][1:]) == 0, a


def draft_ms(lib, engine) -> float:
    """The draft decode's cost an engine's controller reports (its prior until one is timed)."""
    s = L.llama_mtp_adaptive_stats()
    lib.llama_mtp_get_adaptive_stats(engine, s)
    return s.t_draft_ms


@contextlib.contextmanager
def second_engine(model):
    """A second adaptive engine on the model's target and MTP contexts, sharing costs with its engine (as
    llama-server's slots do); it never drafts here."""
    lib, rt = model.rt.lib, model.rt
    second = lib.llama_mtp_init(rt.ctx, rt.ctx_mtp, lib.llama_mtp_default_params())
    assert second
    try:
        lib.llama_mtp_set_adaptive(second, 7)
        lib.llama_mtp_share_costs(second, rt.engine)
        yield second
    finally:
        lib.llama_mtp_free(second)


def test_engines_on_one_mtp_context_learn_the_draft_cost_together(tiny_model_path):
    """llama_mtp_share_costs (llama-server's slots): a second engine on the same MTP context, which never
    drafts, reports the draft cost the first one times as it generates, not its prior; one on another MTP
    context is left alone."""
    kw = dict(n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL, mtp="on")
    with pymtp.Model(tiny_model_path("glm4moe"), **kw) as on, pymtp.Model(tiny_model_path("glm4moe"), **kw) as other:
        lib, first = on.rt.lib, on.rt.engine
        with second_engine(on) as second:
            lib.llama_mtp_share_costs(other.rt.engine, first)  # another MTP context: nothing
            got = on.generate(PROMPTS[0], max_tokens=120, temperature=0.0)
            assert got.stats.n_draft_decodes > 4, got.stats  # past the cold first drafts: D timed
            assert draft_ms(lib, second) == draft_ms(lib, first) > 0
            assert draft_ms(lib, other.rt.engine) != draft_ms(lib, first)


def test_the_context_s_first_drafts_go_untimed_once_for_the_group(tiny_model_path):
    """The first draft decodes of a new MTP context build its graphs and go untimed (4 of them). Engines sharing
    the context (llama_mtp_share_costs) leave them untimed once for the group, not 4 per engine: two engines
    that each drafted 2 or 3 times (a four-slot server's first requests on an H200) have timed D, where before
    neither had, and every slot probed after waking to time it."""
    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL,
                     mtp="on") as on:
        lib, first = on.rt.lib, on.rt.engine
        with second_engine(on) as second:
            prior = draft_ms(lib, first)
            for engine in (first, first, second, second):
                lib.llama_mtp_time_draft(engine, 9.0)  # the context's first 4: cold
            assert draft_ms(lib, first) == draft_ms(lib, second) == prior
            lib.llama_mtp_time_draft(second, 0.5)
            assert draft_ms(lib, first) == draft_ms(lib, second) == 0.5


def test_plain_decoding_when_drafting_cannot_pay(auto_pair):
    """A draft step dearer than a plain step: the controller decodes plainly, defers the MTP
    catch-up (rows written in batches) and re-probes rarely; the output is unchanged."""
    on, off = auto_pair
    pin(on, *DEAR)
    prompt = PROMPTS[1]
    got = on.generate(prompt, max_tokens=200)
    assert got.tokens == off.generate(prompt, max_tokens=200).tokens
    a = got.stats.adaptive
    assert a["plain_share"] >= 0.9 and a["best_fixed_draft"] == 0 and a["est_speedup"] == pytest.approx(1.0)
    assert a["deferred_rows"] > 100
    assert got.stats.n_catchup_decodes < 20 + a["probes"] * 2  # batched, not one MTP decode per token
    on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)


def test_rows_queued_before_a_gap_are_not_written_next_to_the_rows_after_it(tiny_model_path):
    """llama-server's prompt cache restores a saved prompt into the target and MTP contexts and decodes
    only its last token, behind the engine's back, while the engine may still queue rows that plain
    steps deferred (docs/adaptive.md, "Several slots (llama-server)"). Through the caller
    API here: rows deferred by plain steps, then a row observed 40 positions further on, then a draft,
    which writes the queue first. Rows from both sides of the gap in one MTP decode made it fail
    ("positions are not continuous"; an HTTP 500 on the H100 at four slots)."""
    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL,
                     mtp="on") as on:
        pin(on, *DEAR)
        got = on.generate(PROMPTS[0], max_tokens=24)
        assert got.stats.adaptive["deferred_rows"] > 0  # plain steps: the rows wait in the queue
        lib, eng = on.rt.lib, on.rt.engine
        n = lib.llama_mtp_n_past(eng)
        tok = (L.llama_token * 1)(got.tokens[-1])
        assert lib.llama_mtp_observe(eng, tok, 1, n + 40, 0) == 0
        lib.llama_mtp_pin_adaptive_costs(eng, 0.0, 0.0, 0.0)
        lib.llama_mtp_set_adaptive(eng, 0)  # a fixed length: the draft writes the queue, then drafts
        out = (L.llama_token * 8)()
        assert lib.llama_mtp_draft(eng, None, got.tokens[-1], n + 41, 1, out) == 1


def test_long_drafts_when_drafting_is_cheap(tiny_model_path):
    """Drafting almost free: the controller goes past the old fixed 3 on the planted head's easy text."""
    with pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL,
                     mtp="on") as on, \
         pymtp.Model(tiny_model_path("glm4moe"), n_ctx=512, n_batch=64, n_threads=1, n_gpu_layers=NGL,
                     mtp="off") as off:
        pin(on, *CHEAP)
        outs = [on.generate(p, max_tokens=48) for p in PROMPTS[:8]]
        for p, o in zip(PROMPTS[:8], outs):
            assert o.tokens == off.generate(p, max_tokens=48).tokens
        steps = steps_per_length(outs)
        assert sum(steps[4:]) > 0, steps
        assert sum(o.stats.n_accepted for o in outs) > 0


def test_long_drafts_where_the_first_verify_row_is_the_dear_one(auto_pair):
    """A GPU verify: the first extra row costs 0.6 of a plain step (a matmul instead of a mat-vec, a
    change of decode size), each later one 0.02. Eight drafts at the acceptance measured here pay well,
    so the controller drafts long: a rule weighing only the next draft against its own row cut every
    first draft (the H100 27B regression: 198 drafts cut at the first position, 99% plain steps)."""
    import ctypes

    on, _ = auto_pair
    sizes = (ctypes.c_double * 9)(*([1.0] + [1.6 + 0.02 * i for i in range(8)]))
    on.set_synthetic_acceptance([0.95 ** (i + 1) for i in range(8)])
    try:
        on.rt.lib.llama_mtp_pin_adaptive_target_costs(on.rt.engine, sizes, 9, 0.02)
        got = on.generate(PROMPTS[4], max_tokens=96)
    finally:
        on.set_synthetic_acceptance(None)
        on.rt.lib.llama_mtp_pin_adaptive_costs(on.rt.engine, 0.0, 0.0, 0.0)
    a = got.stats.adaptive
    assert a["est_verify_ms"][0] == pytest.approx(1.6) and a["est_plain_ms"] == pytest.approx(1.0)
    assert a["plain_share"] < 0.2 and a["mean_draft_length"] > 4, a


# drafting cheap and each verified row dear: the controller keeps a draft only while the head is confident
# (the top of q), so drafts are cut at every length and some steps end up plain
CONFIDENCE_CUTS = (1.0, 0.02, 0.3)
N_CHI = 4_000


@pytest.mark.slow
def test_distribution_unchanged_while_cutting_by_confidence(tiny_model_path):
    """T > 0, stochastic drafts, the controller cutting drafts by the head's confidence (steps of
    0, 1, 2.. drafts mixed within generations): the joint distribution of the first tokens equals plain
    sampling's (chi-square). Power: keeping a draft by q(drawn token) instead of by the top of q makes
    the kept drafts no longer draws from q; this test measured p = 1e-7 against that bug."""
    from collections import Counter

    path = tiny_model_path("glm4moe")
    with pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="on") as on, \
         pymtp.Model(path, n_ctx=256, n_batch=32, n_threads=1, mtp="off") as off:
        kw = dict(chain_kw(0.8), max_tokens=6)
        prompt = on.tokenize("Once upon a time")
        plain = Counter(tuple(off.generate(prompt, seed=7_000_000 + i, **kw).tokens) for i in range(N_CHI))
        pin(on, *CONFIDENCE_CUTS)
        counts, steps, cut = Counter(), [0] * 9, 0
        for i in range(N_CHI):
            out = on.generate(prompt, seed=8_000_000 + i, draft="stochastic", **kw)
            counts[tuple(out.tokens)] += 1
            cut += out.stats.adaptive["cut"]
            for k, n in enumerate(out.stats.adaptive["steps_per_draft_length"]):
                steps[k] += n
        assert cut > 100 and steps[0] > 100 and steps[1] > 100 and steps[2] > 100, (cut, steps)
        p = homogeneity_p(plain, counts)
        assert p > 0.01, f"adaptive drafting changed the output distribution (chi-square p = {p:.2e})"


def test_bad_n_draft_is_a_clear_error(auto_pair):
    on, _ = auto_pair
    for bad in ("fast", -1, 17):
        with pytest.raises(pymtp.InvalidArgumentError, match="'auto' or a number"):
            on.generate("hi", max_tokens=2, n_draft=bad)
    with pymtp.Model(on.path, n_ctx=128, n_threads=1, mtp="on", n_draft=2) as small:
        with pytest.raises(pymtp.InvalidArgumentError, match="drafts more than this Model's"):
            small.generate("hi", max_tokens=2, n_draft="auto")
    assert L.lib().llama_mtp_adaptive_default_max() == 7


def test_every_engine_traces_its_steps(tiny_model_path, monkeypatch, tmp_path):
    """PYMTP_ADAPTIVE_TRACE=FILE: auto, a fixed length and MTP off each append their steps to the one file, told apart
    by `engine` and `adaptive`, so a fixed length's step costs can be read next to auto's from one run."""
    trace = tmp_path / "trace.tsv"
    monkeypatch.setenv("PYMTP_ADAPTIVE_TRACE", str(trace))
    path = tiny_model_path("glm4moe")
    kw = dict(n_ctx=256, n_batch=32, n_threads=1, n_gpu_layers=NGL)
    emitted = {}
    with pymtp.Model(path, n_draft="auto", **kw) as auto, pymtp.Model(path, n_draft=2, **kw) as fixed, \
            pymtp.Model(path, mtp="off", **kw) as off:
        for name, m in (("auto", auto), ("fixed", fixed), ("off", off)):
            emitted[name] = m.generate(PROMPTS[0], max_tokens=24).stats.n_generated
    lines = trace.read_text().splitlines()
    head = lines[0].split("\t")
    assert head[-2:] == ["adaptive", "engine"]
    rows = [dict(zip(head, line.split("\t"))) for line in lines if not line.startswith("step\t")]
    by_engine = {}
    for r in rows:
        by_engine.setdefault(int(r["engine"]), []).append(r)
    assert len(by_engine) == 3
    auto_rows, fixed_rows, off_rows = (by_engine[e] for e in sorted(by_engine))  # engines numbered as made
    assert {r["adaptive"] for r in auto_rows} == {"1"} and {r["adaptive"] for r in fixed_rows + off_rows} == {"0"}
    assert all(int(r["k"]) <= 2 for r in fixed_rows) and any(int(r["k"]) == 2 for r in fixed_rows)
    assert all(int(r["k"]) == 0 and r["n_out"] == "1" for r in off_rows)
    # a line per step after the first (the step that samples the prompt's row is not timed)
    for name, rs in (("auto", auto_rows), ("fixed", fixed_rows), ("off", off_rows)):
        assert sum(int(r["n_out"]) for r in rs) == emitted[name] - 1, name
        assert all(float(r["step_ms"]) > 0 for r in rs)
