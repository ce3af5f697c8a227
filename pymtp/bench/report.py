"""Benchmark results for people: the terminal table, a per-mode summary, a PNG plot."""

from __future__ import annotations


def format_table(rows: list[dict], summary: list[dict] | None = None) -> str:
    head = (f"{'config':<34} {'tok/s':>8} {'speedup':>8} {'AL':>5} {'prefill':>8} {'D':>5} {'V':>5} "
            f"{'bound':>6}  accept/pos")
    lines = [head, "-" * len(head)]
    for r in rows:
        per_pos = " ".join(f"{x:.2f}" for x in r.get("accept_per_position", []))
        lines.append(
            f"{r['config']:<34} {r['tokens_per_second']:>8.1f} {r.get('speedup', 1.0):>7.2f}x "
            f"{r['mean_accepted_length']:>5.2f} {r.get('prefill_ratio', 1.0):>7.2f}x "
            f"{r.get('draft_cost_D', 0.0):>5.2f} {r.get('verify_cost_V', 1.0):>5.2f} "
            f"{r.get('bound', 1.0):>5.2f}x  {per_pos}")
    lines.append("speedup and prefill are ratios to MTP off at the same T and rp, measured in the same run; "
                 "AL = tokens per target step; D, V = draft/verify cost per step relative to one plain decode step")
    for r in rows:
        a = r.get("adaptive")
        if a:
            lines.append(f"{r['config']}: {a['plain_share']:.0%} plain steps, mean draft length "
                         f"{a['mean_draft_length']:.2f}, steps per length {a['steps_per_draft_length']}, "
                         f"{a['probes']} probes, {a['cut']} drafts cut, {a.get('vetoed', 0)} vetoed, "
                         f"{a.get('dormant', 0)} asleep")
    if summary and len({(s["temperature"], s["repeat_penalty"], s["draft"]) for s in summary}) > 1:
        lines += ["", "best draft length per mode and setting (AL ratio: to greedy at the same setting and k):"]
        for s in summary:
            ratio = f"{s['al_vs_greedy']:.2f}x" if s.get("al_vs_greedy") is not None else "-"
            lines.append(f"  T={s['temperature']:<4g} rp={s['repeat_penalty']:<4g} {s['draft']:<10} "
                         f"k={s['n_draft']}  speedup {s['speedup']:.2f}x  AL {s['mean_accepted_length']:.2f}  "
                         f"AL vs greedy {ratio}")
    return "\n".join(lines)


def mode_summary(rows: list[dict]) -> list[dict]:
    """For each (T, rp, mode): the row with the best speedup, with its AL relative to greedy
    drafting at the same setting and draft length (when greedy ran)."""
    mtp = [r for r in rows if r["mtp"]]
    index = {(r["temperature"], r["repeat_penalty"], r["draft"], r["n_draft"]): r for r in mtp}
    best: dict[tuple, dict] = {}
    for r in mtp:
        key = (r["temperature"], r["repeat_penalty"], r["draft"])
        if key not in best or r.get("speedup", 0) > best[key].get("speedup", 0):
            best[key] = r
    out = []
    for (t, rp, mode), r in best.items():
        g = index.get((t, rp, "greedy", r["n_draft"]))
        out.append({"temperature": t, "repeat_penalty": rp, "draft": mode, "n_draft": r["n_draft"],
                    "speedup": r.get("speedup", 0.0), "mean_accepted_length": r["mean_accepted_length"],
                    "al_vs_greedy": (r["mean_accepted_length"] / g["mean_accepted_length"]) if g else None})
    return out


def plot_speedups(rows: list[dict], path: str, title: str = "", check_only: bool = False) -> None:
    """Speedup over MTP off vs draft length: one line per (mode, T, rp). check_only: only make
    sure matplotlib is installed, without importing it (numpy's C++ runtime then loads after the
    model's, as it does without --plot)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        from pymtp.errors import InvalidArgumentError

        raise InvalidArgumentError("--plot needs matplotlib: pip install matplotlib (or pip install 'pymtp[bench]')")
    if check_only:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines: dict[tuple, list[tuple[int, float]]] = {}
    for r in rows:
        if r["mtp"] and isinstance(r["n_draft"], int):  # "auto" has no single draft length to plot at
            lines.setdefault((r["draft"], r["temperature"], r["repeat_penalty"]), []).append(
                (r["n_draft"], r.get("speedup", 0.0)))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (mode, t, rp), pts in sorted(lines.items()):
        pts.sort()
        ax.plot([k for k, _ in pts], [s for _, s in pts], marker="o", label=f"{mode} T={t:g} rp={rp:g}")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("draft length k")
    ax.set_ylabel("speedup over MTP off (same run)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
