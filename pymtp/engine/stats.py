"""Per-generation statistics, derived from the native engine's counters.

The keys of ``Stats.to_dict()`` are a stable interface (scripts and
benchmarks read them): n_prompt, n_generated, n_drafted, n_accepted,
accept_per_position, mean_accepted_length, tokens_per_second, ...; with
n_draft="auto", ``adaptive`` says what the draft controller did and estimates.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Stats:
    mtp: bool = False
    n_draft: int | str = 0       # "auto" or the fixed length (the generation's DraftLength.value)
    draft: str = "greedy"
    n_prompt: int = 0
    n_reused: int = 0
    n_generated: int = 0
    n_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    drafted_per_position: list[int] = field(default_factory=list)
    accepted_per_position: list[int] = field(default_factory=list)
    n_draft_decodes: int = 0
    n_catchup_decodes: int = 0   # MTP decodes writing teacher-forced KV (one per head per target decode)
    parallel: int = 0            # a parallel head drafts up to this many tokens in one decode (0: one per decode)
    prefill_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    sample_ms: float = 0.0
    catchup_ms: float = 0.0
    generate_ms: float = 0.0  # wall time from the first step to the last token
    # n_draft="auto": what the adaptive controller did and its current estimates (None: fixed n_draft)
    adaptive: dict | None = None

    @classmethod
    def from_native(cls, s, *, mtp: bool, n_draft: int | str, generate_ms: float, draft: str = "greedy",
                    adaptive=None, parallel: int = 0) -> "Stats":
        n_pos = max((i + 1 for i in range(len(s.drafted_per_pos)) if s.drafted_per_pos[i]), default=0)
        return cls(
            mtp=mtp, n_draft=n_draft, draft=draft,
            n_prompt=s.n_prompt, n_reused=s.n_reused, n_generated=s.n_generated, n_steps=s.n_steps,
            n_drafted=s.n_drafted, n_accepted=s.n_accepted,
            drafted_per_position=[int(s.drafted_per_pos[i]) for i in range(n_pos)],
            accepted_per_position=[int(s.accepted_per_pos[i]) for i in range(n_pos)],
            n_draft_decodes=s.n_draft_decodes, n_catchup_decodes=s.n_catchup_decodes, parallel=parallel,
            prefill_ms=s.t_prefill_ms, draft_ms=s.t_draft_ms, verify_ms=s.t_verify_ms,
            sample_ms=s.t_sample_ms, catchup_ms=s.t_catchup_ms, generate_ms=generate_ms,
            adaptive=adaptive_dict(adaptive) if mtp and adaptive is not None and adaptive.k_max > 0 else None,
        )

    @property
    def accept_per_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_per_position, self.drafted_per_position)]

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens emitted per target decode step (1 + accepted drafts per step)."""
        return (self.n_accepted + self.n_steps) / self.n_steps if self.n_steps else 1.0

    @property
    def tokens_per_second(self) -> float:
        return self.n_generated / (self.generate_ms / 1000.0) if self.generate_ms > 0 else 0.0

    @property
    def draft_ms_per_step(self) -> float:
        """Cost of one MTP draft decode (incl. applying the sampler chain to its logits)."""
        return self.draft_ms / self.n_draft_decodes if self.n_draft_decodes else 0.0

    @property
    def prefill_tokens_per_second(self) -> float:
        return self.n_prompt / (self.prefill_ms / 1000.0) if self.prefill_ms > 0 else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(
            accept_per_position=self.accept_per_position,
            acceptance_rate=self.acceptance_rate,
            mean_accepted_length=self.mean_accepted_length,
            tokens_per_second=self.tokens_per_second,
            draft_ms_per_step=self.draft_ms_per_step,
            prefill_tokens_per_second=self.prefill_tokens_per_second,
        )
        return d

    def summary_line(self) -> str:
        head = f"{self.n_generated} tokens, {self.tokens_per_second:.1f} tok/s, prefill {self.n_prompt} tok"
        if not self.mtp:
            return head + " | mtp off"
        per_pos = " ".join(f"{r:.2f}" for r in self.accept_per_position) or "-"
        par = f" parallel={self.parallel}" if self.parallel else ""
        line = (f"{head} | mtp {self.draft} n_draft={self.n_draft}{par}: accepted {self.n_accepted}/{self.n_drafted} "
                f"({self.acceptance_rate:.0%}), per position [{per_pos}], "
                f"mean accepted length {self.mean_accepted_length:.2f}")
        if self.adaptive:
            a = self.adaptive
            line += (f" | adaptive: {a['plain_share']:.0%} plain steps, mean draft {a['mean_draft_length']:.2f}, "
                     f"{a['probes']} probes, best fixed k={a['best_fixed_draft']} "
                     f"(est. {a['est_speedup']:.2f}x of plain)")
        return line


def adaptive_dict(a) -> dict:
    """The adaptive controller's native stats as plain data (keys are a stable interface)."""
    steps = [int(a.steps_per_k[k]) for k in range(a.k_max + 1)]
    total = sum(steps)
    return {
        "max_draft": int(a.k_max),
        "steps_per_draft_length": steps,              # steps that drafted k = 0.. tokens (0: plain decodes)
        "plain_share": steps[0] / total if total else 0.0,
        "mean_draft_length": sum(k * n for k, n in enumerate(steps)) / total if total else 0.0,
        "probes": int(a.n_probes),                    # drafting steps taken to re-measure while plain led
        "cut": int(a.n_cut),                          # drafts dropped as unlikely to pay
        "extended": int(a.n_extended),                # drafts taken one past the rule, to keep it measured
        "deferred_rows": int(a.n_deferred),           # MTP rows written late, in batches
        "est_plain_ms": float(a.t_target_ms[0]),
        "est_draft_ms": float(a.t_draft_ms),
        "est_step_overhead_ms": float(a.t_overhead_ms),   # outside decodes, the caller's loop included
        "est_size_switch_ms": float(a.t_switch_ms),       # extra cost of a decode whose size just changed
        "est_verify_ms": [float(a.t_target_ms[n]) for n in range(1, a.k_max + 1)],  # n = 2.. tokens
        "est_accept": [round(float(a.accept[i]), 4) for i in range(a.k_max)],
        "best_fixed_draft": int(a.k_best),
        "est_speedup": float(a.speedup),
        # measured end to end over windows of 32 steps (tokens per ms of recent plain-only windows and of
        # windows where the controller drafted as it chose; 0: none yet), and the steps kept plain
        # because free windows ran slower
        "realized_plain_tok_per_ms": float(a.realized_plain),
        "realized_draft_tok_per_ms": float(a.realized_draft),
        "vetoed": int(a.n_vetoed),
        # steps decoded while the MTP side slept (drafting had not paid for a while): exactly plain decoding
        "dormant_steps": int(a.n_dormant),
        # block mode where blocks are not timed end to end (several sequences in a batch): drafting blocks
        # ended before their length as the model put them behind plain decoding
        "blocks_ended": int(a.n_blocks_ended),
    }
