"""Per-position acceptance of an MTP head through the native engine: greedy drafts of a fixed
length k, exact-match verification at T=0, on a prompt set. What `pymtp graft` measures on its
held-out prompts (and records in the head it writes), and bench/acceptance.py on any prompt set.

One greedy run at draft length k gives the unconditional acceptance a_i of every position
i <= k (a draft at position i counts as accepted only when 1..i-1 were too), hence the mean
accepted length AL(j) = 1 + a_1 + ... + a_j for every j <= k. Hardware-independent: speed is
`pymtp bench`'s job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# a quantized head that accepts this much less than its f16 original at position 1 is reported
QUANT_LOSS_WARN = 0.05
# the provenance keys (pymtp.graft.*) of a head's measured acceptance
RECORDED_ACCEPTANCE = ("acceptance", "acceptance_prompts", "acceptance_tokens")


@dataclass
class Acceptance:
    per_position: list          # a_1 .. a_k
    n_prompts: int
    n_generated: int            # tokens generated over all prompts
    measured_al: float          # (accepted + steps) / steps at draft length k
    by_group: dict = field(default_factory=dict)   # measure(groups=...): each label's own Acceptance

    @property
    def al_by_k(self) -> list:
        return [1 + sum(self.per_position[:j]) for j in range(1, len(self.per_position) + 1)]

    def to_dict(self) -> dict:
        return {"accept_per_position": self.per_position, "AL_by_k": self.al_by_k,
                "measured_AL_at_k": self.measured_al, "n_prompts": self.n_prompts,
                "n_generated": self.n_generated}

    def line(self) -> str:
        k = len(self.per_position)
        return (" / ".join(f"{a:.3f}" for a in self.per_position) + f" (AL({k}) {self.al_by_k[-1]:.2f}; "
                f"{self.n_prompts} prompts, {self.n_generated} tokens)")


class _Tally:
    """Acceptance counts of greedy generations at draft length k, summed over prompts."""

    def __init__(self, k: int):
        self.acc, self.dra = [0] * k, [0] * k
        self.prompts = self.steps = self.accepted = self.generated = 0

    def add(self, s) -> None:
        for j, (a, d) in enumerate(zip(s.accepted_per_position, s.drafted_per_position)):
            self.acc[j] += a
            self.dra[j] += d
        self.prompts += 1
        self.steps += s.n_steps
        self.accepted += s.n_accepted
        self.generated += s.n_generated

    def result(self) -> Acceptance:
        return Acceptance([a / d if d else 0.0 for a, d in zip(self.acc, self.dra)], self.prompts, self.generated,
                          (self.accepted + self.steps) / self.steps if self.steps else 1.0)


def measure(model, head, prompts, *, k: int = 3, max_tokens: int = 128, n_threads: int | None = None,
            on_prompt=None, groups=None) -> Acceptance:
    """Greedy generation of each prompt (a list of chat messages, rendered with the model's
    template, or a raw string) with MTP at draft length ``k``; ``head``: a head-only GGUF (or a
    draft-vocabulary file), None (the head pymtp finds for the model) or "" (the model's own MTP
    layers as they are). ``groups``: a label per prompt (e.g. MT-Bench categories); the result's
    ``by_group`` then holds each label's acceptance, from the same generations."""
    import pymtp

    total = _Tally(k)
    tallies = {}
    with pymtp.Model(None if model is None else str(model), mtp="on", n_draft=k,
                     mtp_head=None if head is None else str(head), n_threads=n_threads) as m:
        for i, p in enumerate(prompts):
            run = m.generate if isinstance(p, str) else m.chat
            s = run(p, max_tokens=max_tokens, draft="greedy").stats
            total.add(s)
            if groups is not None:
                tallies.setdefault(groups[i], _Tally(k)).add(s)
            if on_prompt is not None:
                on_prompt(i + 1, len(prompts))
    out = total.result()
    out.by_group = {label: t.result() for label, t in tallies.items()}
    return out


def provenance(a: Acceptance) -> dict:
    """How a head records its measured acceptance (the RECORDED_ACCEPTANCE keys)."""
    return dict(zip(RECORDED_ACCEPTANCE, (",".join(f"{x:.4f}" for x in a.per_position), a.n_prompts,
                                          int(a.n_generated))))


def recorded(info) -> list | None:
    """The per-position acceptance a head GGUF records (pymtp graft), or None."""
    raw = (info.graft_provenance or {}).get("acceptance")
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return [float(x) for x in raw.split(",")]
    except ValueError:
        return None


def describe_recorded(info) -> str | None:
    """One line for `pymtp info`: the head's recorded acceptance and where it was measured."""
    rates = recorded(info)
    if rates is None:
        return None
    prov = info.graft_provenance
    n = prov.get("acceptance_prompts")
    where = f"held-out prompts ({n})" if n else "held-out prompts"
    al = 1 + sum(rates)
    return (" / ".join(f"{r:.2f}" for r in rates) + f" by draft position, AL({len(rates)}) {al:.2f}; "
            f"greedy, {where}, measured when the file was written")
