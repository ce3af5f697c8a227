"""Terminal table of benchmark results."""

from __future__ import annotations


def format_table(rows: list[dict]) -> str:
    head = f"{'config':<10} {'tok/s':>8} {'speedup':>8} {'AL':>5} {'prefill':>8} {'D':>5} {'V':>5} {'bound':>6}  accept/pos"
    lines = [head, "-" * len(head)]
    for r in rows:
        per_pos = " ".join(f"{x:.2f}" for x in r.get("accept_per_position", []))
        lines.append(
            f"{r['config']:<10} {r['tokens_per_second']:>8.1f} {r.get('speedup', 1.0):>7.2f}x "
            f"{r['mean_accepted_length']:>5.2f} {r.get('prefill_ratio', 1.0):>7.2f}x "
            f"{r.get('draft_cost_D', 0.0):>5.2f} {r.get('verify_cost_V', 1.0):>5.2f} "
            f"{r.get('bound', 1.0):>5.2f}x  {per_pos}")
    lines.append("speedup and prefill are ratios to MTP off measured in the same run; AL = tokens per target "
                 "step; D, V = draft/verify cost per step relative to one plain decode step")
    return "\n".join(lines)
