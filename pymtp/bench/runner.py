"""Run a prompt set under several configurations, interleaved, and aggregate.

Configurations are MTP off (a Model loaded with mtp="off": no MTP layers, no
hidden-state handoff) and MTP on with each draft length and draft mode, for each
sampling setting (temperature, repeat penalty); n_draft="auto" runs on a Model of
its own (Config.model_key). For every prompt all
configurations run back to back, in an order that changes per prompt (balanced_orders), so
machine drift hits them all alike. Each MTP configuration's ratios are taken against the
MTP-off configuration of the same sampling setting, from these side-by-side runs.
At T>0 every configuration of a prompt uses the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.sampling import resolve_draft_mode
from ..engine.stats import Stats
from ..options import DraftLength


@dataclass
class Config:
    mtp: bool
    n_draft: DraftLength = DraftLength.fixed(0)   # a fixed length, or the adaptive controller ("auto")
    draft: str = "greedy"
    temperature: float = 0.0
    repeat_penalty: float = 1.0
    heads: str = ""          # head policy when several are compared (a model loaded per policy)

    @property
    def setting(self) -> tuple[float, float]:
        """The sampling setting; configurations of one setting share an MTP-off baseline."""
        return (self.temperature, self.repeat_penalty)

    @property
    def label(self) -> str:
        """The draft mode, with the head policy when policies are compared (greedy/per_layer)."""
        return f"{self.draft}/{self.heads}" if self.heads else self.draft

    @property
    def model_key(self) -> str:
        """Which loaded model runs it: off, fixed lengths ("on"), and "auto" on a model of its own, so
        that its controller learns from its own generations only (as in use), and fixed-length runs do
        not wake a sleeping MTP side or move its cost estimates (per head policy when compared)."""
        if not self.mtp:
            return "off"
        key = "auto" if self.n_draft.adaptive else "on"
        return key + ":" + self.heads if self.heads else key

    @property
    def name(self) -> str:
        head = f"mtp {self.label} k={self.n_draft}" if self.mtp else "off"
        return f"{head} T={self.temperature:g} rp={self.repeat_penalty:g}"


def make_configs(n_drafts: list[DraftLength], modes: list[str], temps: list[float],
                 penalties: list[float], head_policies: list[str] | None = None) -> list[Config]:
    """Per sampling setting: MTP off, then every (head policy, mode, k); "auto" becomes the mode it
    picks there. head_policies: None or one policy = the model's own (no per-policy models)."""
    policies = head_policies if head_policies and len(head_policies) > 1 else [""]
    out = []
    for t in temps:
        for rp in penalties:
            out.append(Config(mtp=False, temperature=t, repeat_penalty=rp))
            resolved = dict.fromkeys(resolve_draft_mode(m, t, rp) for m in modes)
            out += [Config(mtp=True, n_draft=k, draft=m, temperature=t, repeat_penalty=rp, heads=h)
                    for h in policies for m in resolved for k in n_drafts]
    return out


def baseline_of(aggs: "list[Aggregate]", agg: "Aggregate") -> "Aggregate | None":
    for a in aggs:
        if not a.config.mtp and a.config.setting == agg.config.setting:
            return a
    return None


@dataclass
class Aggregate:
    config: Config
    runs: list[Stats] = field(default_factory=list)
    outputs: list[list[int]] = field(default_factory=list)

    def _sum(self, attr: str) -> float:
        return sum(getattr(s, attr) for s in self.runs)

    def _sum_lists(self, attr: str) -> list[int]:
        out: list[int] = []
        for s in self.runs:
            for i, v in enumerate(getattr(s, attr)):
                if i >= len(out):
                    out.append(0)
                out[i] += v
        return out

    @property
    def n_generated(self) -> int:
        return int(self._sum("n_generated"))

    @property
    def tokens_per_second(self) -> float:
        ms = self._sum("generate_ms")
        return self.n_generated / (ms / 1000) if ms else 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        ms = self._sum("prefill_ms")
        return self._sum("n_prompt") / (ms / 1000) if ms else 0.0

    @property
    def accept_per_position(self) -> list[float]:
        acc, dra = self._sum_lists("accepted_per_position"), self._sum_lists("drafted_per_position")
        return [a / d if d else 0.0 for a, d in zip(acc, dra)]

    @property
    def mean_accepted_length(self) -> float:
        steps = self._sum("n_steps")
        return (self._sum("n_accepted") + steps) / steps if steps else 1.0

    def step_ms(self) -> float:
        """Mean wall time of one target step (plain decode for MTP off)."""
        steps = self._sum("n_steps")
        return self._sum("generate_ms") / steps if steps else 0.0

    def draft_ms_per_decode(self) -> float:
        n = self._sum("n_draft_decodes")
        return self._sum("draft_ms") / n if n else 0.0

    def verify_ms_per_step(self) -> float:
        steps = self._sum("n_steps")
        return (self._sum("verify_ms") + self._sum("sample_ms")) / steps if steps else 0.0

    def to_dict(self, baseline: "Aggregate | None") -> dict:
        c = self.config
        d = {
            "config": c.name, "mtp": c.mtp, "n_draft": c.n_draft.value, "draft": c.label if c.mtp else "off",
            "heads": c.heads or None,
            "temperature": c.temperature, "repeat_penalty": c.repeat_penalty,
            "n_prompts": len(self.runs), "n_generated": self.n_generated,
            "tokens_per_second": self.tokens_per_second,
            "prefill_tokens_per_second": self.prefill_tokens_per_second,
            "accept_per_position": self.accept_per_position,
            "mean_accepted_length": self.mean_accepted_length,
        }
        if baseline is not None and baseline is not self:
            plain = baseline.step_ms()
            d["speedup"] = self.tokens_per_second / baseline.tokens_per_second if baseline.tokens_per_second else 0.0
            d["prefill_ratio"] = (self.prefill_tokens_per_second / baseline.prefill_tokens_per_second
                                  if baseline.prefill_tokens_per_second else 0.0)
            adaptive = [s.adaptive for s in self.runs if s.adaptive]
            if adaptive:
                steps = [sum(col) for col in zip(*(a["steps_per_draft_length"] for a in adaptive))]
                total = sum(steps) or 1
                d["adaptive"] = {"steps_per_draft_length": steps, "plain_share": steps[0] / total,
                                 "mean_draft_length": sum(k * n for k, n in enumerate(steps)) / total,
                                 "probes": sum(a["probes"] for a in adaptive),
                                 "cut": sum(a["cut"] for a in adaptive),
                                 "vetoed": sum(a.get("vetoed", 0) for a in adaptive),
                                 "dormant": sum(a.get("dormant_steps", 0) for a in adaptive),
                                 "est_accept": adaptive[-1]["est_accept"],
                                 "best_fixed_draft": adaptive[-1]["best_fixed_draft"],
                                 "last_run": adaptive[-1]}  # every estimate, as the last prompt left them
            if plain:
                steps = self._sum("n_steps")
                # adaptive: the mean draft length of its steps
                k = (self._sum("n_drafted") / steps if steps else 0.0) if adaptive else self.config.n_draft.cap
                D = self.draft_ms_per_decode() / plain
                V = self.verify_ms_per_step() / plain
                d["draft_cost_D"] = D
                d["verify_cost_V"] = V
                # the physical bound AL / (V(k+1) + k*D) with the measured costs
                d["bound"] = self.mean_accepted_length / (V + k * D) if (V + k * D) else 0.0
        return d


def balanced_orders(n: int) -> list[list[int]]:
    """Orders of 0..n-1 in which every item runs in every place equally often and right after every
    other item equally often (a Williams design: n orders for an even n, 2n for an odd one). A machine
    may run a configuration faster or slower after a given other one (on an H200 a Model ran ~2.5% faster
    right after the adaptive one); a plain rotation puts each configuration after the same one every time,
    so such an effect would land on one configuration's ratio."""
    if n <= 1:
        return [list(range(n))]
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:
        first.append(lo)
        lo += 1
        if len(first) < n:
            first.append(hi)
            hi -= 1
    rows = [[(x + r) % n for x in first] for r in range(n)]
    return rows if n % 2 == 0 else rows + [row[::-1] for row in rows]


def run_interleaved(models: dict[str, object], configs: list[Config], prompts: list[list[int]],
                    gen_kwargs: dict, progress=None, seed: int = 0) -> list[Aggregate]:
    """models: {"on": Model, "off": Model} (or "on:<head policy>" per policy compared); prompts: token
    lists. Returns one Aggregate per config.

    gen_kwargs holds what all configurations share (max_tokens, top-k/p, ...); each
    configuration sets its own temperature, repeat penalty, draft mode and length.
    Prompt i is sampled with seed ``seed + i`` in every configuration."""
    aggs = [Aggregate(c) for c in configs]
    orders = balanced_orders(len(configs))
    for i, prompt in enumerate(prompts):
        for j in orders[i % len(orders)]:
            c = configs[j]
            model = models[c.model_key]
            kw = dict(gen_kwargs, temperature=c.temperature, repeat_penalty=c.repeat_penalty, seed=seed + i)
            if c.mtp:
                kw.update(n_draft=c.n_draft, draft=c.draft)
            model.reset()  # cold prefill: no configuration reuses another one's prompt KV
            out = model.generate(prompt, **kw)
            aggs[j].runs.append(out.stats)
            aggs[j].outputs.append(out.tokens)
            if progress:
                progress()
    return aggs
