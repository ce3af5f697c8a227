"""Run a prompt set under several configurations, interleaved, and aggregate.

Configurations are MTP off (a Model loaded with mtp="off": no MTP layers, no
hidden-state handoff) and MTP on with each draft length. For every prompt all
configurations run back to back, in an order rotated per prompt, so machine
drift hits them all alike. Ratios are computed from these side-by-side runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine.stats import Stats


@dataclass
class Config:
    name: str
    mtp: bool
    n_draft: int = 0


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
        d = {
            "config": self.config.name, "mtp": self.config.mtp, "n_draft": self.config.n_draft,
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
            if plain:
                k = self.config.n_draft
                D = self.draft_ms_per_decode() / plain
                V = self.verify_ms_per_step() / plain
                d["draft_cost_D"] = D
                d["verify_cost_V"] = V
                # the physical bound AL / (V(k+1) + k*D) with the measured costs
                d["bound"] = self.mean_accepted_length / (V + k * D) if (V + k * D) else 0.0
        return d


def run_interleaved(models: dict[str, object], configs: list[Config], prompts: list[list[int]],
                    gen_kwargs: dict, progress=None) -> list[Aggregate]:
    """models: {"on": Model, "off": Model}; prompts: token lists. Returns one Aggregate per config."""
    aggs = [Aggregate(c) for c in configs]
    for i, prompt in enumerate(prompts):
        order = list(range(len(configs)))
        rot = i % len(order)
        order = order[rot:] + order[:rot]
        for j in order:
            c = configs[j]
            model = models["on" if c.mtp else "off"]
            kw = dict(gen_kwargs)
            if c.mtp:
                kw["n_draft"] = c.n_draft
            out = model.generate(prompt, **kw)
            aggs[j].runs.append(out.stats)
            aggs[j].outputs.append(out.tokens)
            if progress:
                progress()
    return aggs
