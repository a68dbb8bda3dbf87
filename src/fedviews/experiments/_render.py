"""The docs' view of the reproduction manifest: an entry's committed tables as Markdown
(``<!-- reproduce: NAME -->``) and one digest table over several leakage audits
(``<!-- reproduce-digest: NAME ... -->``), both used by ``docs/hooks/reproductions.py``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from fedviews.experiments._reproduce import Reproduction
from fedviews.report import format_value

__all__ = ["render_digest", "render_markdown", "render_tables"]


def _md_cell(value: Any) -> str:
    return format_value(value).replace("|", "\\|")


def _md_text(text: str) -> str:
    """``text`` inside emphasis: its own asterisks (``w*``) escaped, so that they neither
    end the emphasis nor start another."""
    return text.replace("*", "\\*")


def render_tables(tables: Sequence[dict[str, Any]]) -> list[str]:
    """The Markdown lines of ``tables`` (each ``title``, ``columns``, ``rows``, optional
    ``note``), each followed by an empty line."""
    out: list[str] = []
    for t in tables:
        out += [f"**{_md_text(t['title'])}**", ""]
        out.append("| " + " | ".join(_md_cell(c) for c in t["columns"]) + " |")
        out.append("|" + "|".join("---" for _ in t["columns"]) + "|")
        out += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in t["rows"]]
        out.append("")
        if t.get("note"):
            out += [f"*{_md_text(t['note'])}*", ""]
    return out


def render_markdown(
    entry: Reproduction, rec: dict[str, Any] | None, cells: int = 0, kept: bool = False
) -> str:
    """The entry's committed tables as Markdown, with the command, date, machine and wall
    time of the run that made them (an admonition when none is committed yet, saying how
    many ``cells`` of an unfinished run are committed); ``kept``: the record kept its cells
    (then the line names the sampled check too)."""
    if rec is None:
        if cells:
            return (
                f'!!! note "In progress: {entry.title}"\n'
                f"    {cells} finished cells of this run are committed in `{entry.cells}`; "
                f"`fedviews reproduce {entry.name} --record --continue` goes on from them "
                f"(about {entry.cost_s:g} s for the whole run) and records this table from "
                f"`{entry.run_command}`.\n"
            )
        return (
            f'!!! note "Not reproduced yet: {entry.title}"\n'
            f"    `fedviews reproduce {entry.name} --record` (tier {entry.tier}, about "
            f"{entry.cost_s:g} s) makes this table from `{entry.run_command}`; no run of it "
            "is committed yet.\n"
        )
    out = render_tables(rec["tables"])
    m = rec["machine"]
    gpu = "" if m.get("gpu", "none") == "none" else f", GPU {m['gpu']}"
    over = (
        f" (recorded with `--continue`, over one or more sessions: the wall time is the last "
        f"session's; its cells took "
        f"{rec['cells_seconds']:g} s in all)"
        if "cells_seconds" in rec
        else ""
    )
    out.append(
        f"<small>Made by `{rec['command']}` (`{rec['run_command']}`) on {rec['date']}, "
        f"{m['cpu']} ({m['cores']} cores{gpu}), wall time {rec['wall_seconds']:g} s{over}. "
        f"Checked by `fedviews reproduce {entry.name} --check` (tolerance "
        f"{entry.tolerance:g})"
        + (
            f", or in part by `fedviews reproduce {entry.name} --check --sample K` (K of the "
            "run's recorded cells computed again)"
            if kept
            else ""
        )
        + ".</small>"
    )
    return "\n".join(out) + "\n"


#: audit metrics where a lower value means the attacker learned more: shown relative to chance
_LOWER_LEAKS = ("mse",)
_AUDIT_KEYS = ("attacker", "role", "observes", "attack", "secret", "aux", "metric", "value")


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _span(values: Sequence[float], fmt: str = "{:.1f}") -> str:
    """``"lo–hi"`` of the finite ``values`` (one number when they agree)."""
    finite = sorted(v for v in values if math.isfinite(v))
    if not finite:
        return "n/a"
    lo, hi = fmt.format(finite[0]), fmt.format(finite[-1])
    return lo if lo == hi else f"{lo}–{hi}"


def _joined(values: Sequence[Any], most: int = 3) -> str:
    """The distinct ``values`` in order, at most ``most`` of them and a count of the rest."""
    seen = list(dict.fromkeys(str(v) for v in values))
    more = f" and {len(seen) - most} more" if len(seen) > most else ""
    return ", ".join(seen[:most]) + more


def render_digest(items: Sequence[tuple[Reproduction, dict[str, Any] | None]]) -> str:
    """One Markdown table over several leakage audits: a row per audit, attacker role, attack
    and metric, with the attackers, what they observed, the secrets and the span of the result
    over them (a score: its range and chance's; an error such as MSE: its ratio to chance,
    below 1 = the attacker learned something).

    Entries without committed results are listed as not reproduced yet.
    """
    cols = ["audit", "attacker (role)", "observes", "attack", "aux", "secret", "result", "chance"]
    out = ["| " + " | ".join(cols) + " |", "|---" * len(cols) + "|"]
    for entry, rec in items:
        if rec is None:
            cmd = f"fedviews reproduce {entry.name} --record"
            out.append(f"| `{entry.name}` | *not reproduced yet: `{cmd}`* |" + " |" * 6)
            continue
        table = rec["tables"][0]
        idx = {c: table["columns"].index(c) for c in (*_AUDIT_KEYS, "chance")}
        groups: dict[tuple[str, str, str], list[list[Any]]] = {}
        for row in table["rows"]:
            key = (row[idx["role"]], row[idx["attack"]], row[idx["metric"]])
            groups.setdefault(key, []).append(row)
        for (role, attack, metric), rows in groups.items():
            value = [_number(r[idx["value"]]) for r in rows]
            chance = [_number(r[idx["chance"]]) for r in rows]
            if metric.lower() in _LOWER_LEAKS:
                ratio = [v / c if c else math.nan for v, c in zip(value, chance, strict=True)]
                result, base = f"**{_span(ratio, '{:.2f}')}** × chance ({metric})", "1"
            else:  # scores below 10 (SSIM, a fraction) with two decimals, percentages with one
                fmt = "{:.2f}" if max(map(abs, value + chance), default=0) < 10 else "{:.1f}"
                result, base = f"**{_span(value, fmt)}** ({metric})", _span(chance, fmt)
            cells = [
                f"`{entry.name}`",
                f"{_joined([r[idx['attacker']] for r in rows])} ({role})",
                _joined([r[idx["observes"]] for r in rows], 2),
                attack,
                _joined([r[idx["aux"]] for r in rows]),
                _joined([r[idx["secret"]] for r in rows], 2),
                result,
                base,
            ]
            out.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(out) + "\n"
