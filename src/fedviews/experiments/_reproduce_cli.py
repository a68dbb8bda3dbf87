"""What ``fedviews reproduce`` prints: the manifest's entries (``--list``) and each entry's
run, check or record, one line each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from fedviews.experiments._reproduce import Reproduction, read_results, reproduce, select_entries
from fedviews.experiments._sessions import committed_cells

__all__ = ["reproduce_entries", "reproduction_table"]


def reproduction_table(
    path: Path, entries: dict[str, Reproduction], names: list[str], tier: str | None
) -> Table:
    """``--list``: each entry's tier, cost, record (date, CPU: a deep record can depend on
    the CPU, docs/known-gaps.md; the seconds its cells took, for a run made over sessions,
    or the run's wall time), its cells (committed of an unfinished run, kept by its record)
    and title."""
    t = Table("name", "tier", "cost", "results", "reproduces", title=str(path))
    for e in select_entries(entries, names, tier):
        made = read_results(path.parent / e.results)
        done = "none yet" if made is None else "committed"
        if made is not None and isinstance(made.get("machine"), dict):
            done += f" {str(made.get('date', ''))[:10]} on {made['machine'].get('cpu')}"
        n = committed_cells(e, path.parent)
        done += f" ({n} cells)" if n else ""
        done += ", cells kept" if (path.parent / e.kept_cells).is_file() else ""
        t.add_row(e.name, e.tier, cost(e, made), done, e.title)
    return t


def cost(e: Reproduction, made: dict[str, Any] | None) -> str:
    """How long the entry takes: what its committed run took (the seconds of its cells, for
    a run made over sessions; its wall time), else the manifest's estimate (``cost_s``,
    marked as one: estimates typed by hand were off by up to 18 times)."""
    took = None if made is None else made.get("cells_seconds", made.get("wall_seconds"))
    if isinstance(took, (int, float)) and not isinstance(took, bool):
        return f"{took:.0f} s recorded"
    return f"~{e.cost_s:g} s (estimate)"


def reproduce_entries(
    chosen: list[Reproduction],
    root: Path,
    base: Path,
    console: Console,
    check: bool,
    record: bool,
    resume: bool,
    quiet: bool,
    sampling: tuple[int, int] = (0, 0),
) -> list[str]:
    """Run each entry into ``base/<name>``; print one line each; the drifts (and, for an
    entry that drifted, where this machine differs from its record's), as lines of text.
    ``sampling``: ``--sample K`` and its seed."""
    drifted: list[str] = []
    unsampled: list[str] = []
    for e in chosen:
        if sampling[0] and len(chosen) > 1 and not (root / e.kept_cells).is_file():
            unsampled.append(e.name)  # alone, reproduce() says why it cannot sample it
            continue
        console.print(
            f"[bold]fedviews reproduce[/] {e.name} ({e.tier}, "
            f"{cost(e, read_results(root / e.results))}): {e.run_command}",
            highlight=False,
        )
        res = reproduce(
            e,
            root,
            out_dir=base / e.name,
            check=check,
            record=record,
            resume=resume,
            sample=sampling[0],
            sample_seed=sampling[1],
            console=console,
            quiet=quiet,
        )
        if res.sampled:
            took = res.sampled_seconds
            console.print(
                f"  re-ran {_cells(len(res.sampled))}: {'; '.join(res.sampled)} (--sample "
                f"{sampling[0]} --sample-seed {sampling[1]}"
                f"{'' if took is None else f'; recorded in {took:.0f} s'}); the others are "
                "as recorded",
                highlight=False,
            )
        if res.cells_changed and not res.sampled:
            console.print(
                f"  {res.cells_changed} of the {_cells(res.cells_compared)} that the record "
                "kept differ from the fresh ones:",
                highlight=False,
            )
        shown = res.cell_changes[:12]
        for line in shown:
            console.print(f"  cell changed: {line}", highlight=False, markup=False)
        if len(res.cell_changes) > len(shown):
            console.print(f"  ... and {len(res.cell_changes) - len(shown)} more lines")
        verdict = ""
        if res.checked:
            verdict = (
                f", {len(res.drifts)} drifted" if res.drifts else ", matches the committed results"
            )
        if res.recorded is not None:
            verdict += f", recorded {res.recorded}" + (
                f" ({_cells(res.kept)} kept)" if res.kept else ""
            )
        console.print(f"  {res.run_dir} in {res.seconds:.1f} s{verdict}", highlight=False)
        drifted += [f"drift: {d}" for d in res.drifts]
        if res.machine_changes:
            drifted.append(
                f"note: {e.name} was recorded on another machine ("
                + "; ".join(res.machine_changes)
                + "): deep runs can depend on the CPU beyond the kernel pins "
                "(docs/known-gaps.md): run the recorded commit here to tell the two apart"
            )
    if unsampled:
        console.print(
            f"not checked: {', '.join(unsampled)}: their records kept no cells to sample "
            "(check them whole, or record them again)",
            highlight=False,
        )
    return drifted


def _cells(n: int) -> str:
    return f"{n} cell" if n == 1 else f"{n} cells"
