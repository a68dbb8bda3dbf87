"""The runner: one config in, one run directory out (config, metrics, log, plots, report)."""

from __future__ import annotations

import contextlib
import functools
import json
import shutil
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table as RichTable

from fedviews.errors import ConfigError, DataError, FedViewsError, described
from fedviews.experiments._config import ExperimentConfig
from fedviews.experiments._registry import get_experiment
from fedviews.report import format_value, to_jsonable, write_report

#: finished units of work of a run (``RunContext.cell``): what ``--resume`` does not redo
CELLS_FILE = "cells.json"
#: each finished cell's compute time in seconds (a record keeps them with its cells)
SECONDS_FILE = "cell_seconds.json"


@dataclass
class Table:
    """A result table (printed in the terminal, stored in metrics.json, shown in the report)."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"title": self.title, "columns": self.columns, "rows": self.rows, "note": self.note}

    def to_rich(self) -> RichTable:
        t = RichTable(title=self.title, caption=self.note or None, caption_justify="left")
        for c in self.columns:
            t.add_column(str(c), justify="right" if c != self.columns[0] else "left")
        for r in self.rows:
            t.add_row(*[format_value(v) for v in r])
        return t


@dataclass
class ExperimentResult:
    """What an experiment returns to the runner."""

    metrics: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    figures: list[Path] = field(default_factory=list)
    message_log: dict[str, Any] | None = None
    summary: str = ""


def _noop(k: int = 1) -> None:
    """Progress callback used with ``quiet``."""


class RunContext:
    """Handed to every experiment: output folder, seed, device, progress, checkpoints.

    Long experiments split their work into *cells* (``ctx.cell(key, compute)``,
    e.g. one per setting × method × seed): each finished cell is written to
    ``cells.json`` at once, and a run continued with ``fedviews run --resume
    RUN_DIR`` takes finished cells from there instead of computing them again.
    """

    def __init__(
        self,
        cfg: ExperimentConfig,
        out_dir: Path,
        console: Console,
        quiet: bool = False,
        mirror: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.mirror = mirror
        self.out_dir = out_dir
        self.console = console
        self.quiet = quiet
        self.seed = cfg.seed
        self.device = cfg.device
        self.cells: dict[str, Any] = {}
        self.cell_seconds: dict[str, float] = {}  # compute time per cell, kept in the mirror
        self.restored = 0
        if mirror is not None and mirror.is_file():  # earlier sessions' times
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                saved = json.loads(mirror.read_text(encoding="utf-8")).get("seconds", {})
                self.cell_seconds = {str(k): float(v) for k, v in saved.items()}
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):  # a resumed run's
            saved = json.loads((out_dir / SECONDS_FILE).read_text(encoding="utf-8"))
            self.cell_seconds.update({str(k): float(v) for k, v in saved.items()})
        path = out_dir / CELLS_FILE
        if path.is_file():
            try:
                self.cells = dict(json.loads(path.read_text(encoding="utf-8")))
            except (ValueError, TypeError) as exc:
                raise FedViewsError(f"{path} is not a cells file of a run: {exc}") from None

    def path(self, name: str) -> Path:
        return self.out_dir / name

    def log(self, text: str) -> None:
        """A progress line with the time of day (not ``console.log``, which also printed
        rich's source location, ``_runner.py:120``, and wrapped the line for it)."""
        if not self.quiet:
            stamp = time.strftime("%H:%M:%S")
            self.console.print(f"[{stamp}] {text}", highlight=False, soft_wrap=True, markup=False)

    def warn(self, text: str) -> None:
        """A line about the results' quality (fits that did not converge): printed with
        ``--quiet`` too, which drops the progress, not what a reader of the tables needs."""
        self.console.print(f"warning: {text}", highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def progress(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        """``with ctx.progress(n, "folds x beta") as advance: ... advance(1)``."""
        if self.quiet:
            yield _noop
            return
        prog = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        with prog:
            yield functools.partial(prog.advance, prog.add_task(description, total=total))

    def cell(self, key: str, compute: Callable[[], Any]) -> Any:
        """The result of the unit of work ``key``: from ``cells.json`` when a resumed run
        already has it, else ``compute()``, stored at once.

        The value is returned as it reads back from JSON (lists for tuples and
        arrays, exact floats), so a resumed run and an uninterrupted one compute
        their tables from identical values.
        """
        if key in self.cells:
            self.restored += 1
            return self.cells[key]
        t0 = time.perf_counter()
        value = json.loads(json.dumps(to_jsonable(compute())))
        self.cells[key] = value
        self.cell_seconds[key] = round(time.perf_counter() - t0, 1)
        _write_json(self.path(CELLS_FILE), self.cells)
        _write_json(self.path(SECONDS_FILE), self.cell_seconds)
        if self.mirror is not None:  # a committed copy, continued by a later session
            saved = {"config": self.cfg.to_dict(), "cells": self.cells}
            _write_json(self.mirror, {**saved, "seconds": self.cell_seconds})
        return value

    def run_cells(self, description: str, jobs: Mapping[str, Callable[[], Any]]) -> list[Any]:
        """Every job's :meth:`cell` (``{key: compute}``), in order, under one progress bar."""
        out = []
        with self.progress(len(jobs), description) as advance:
            for key, compute in jobs.items():
                out.append(self.cell(key, compute))
                advance(1)
        return out

    def checkpoint(self, partial: dict[str, Any]) -> None:
        """Write partial results so that an interrupted run loses nothing already computed."""
        _write_json(self.path("partial_metrics.json"), partial)


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(to_jsonable(obj), indent=2), encoding="utf-8")
    tmp.replace(path)


def run_experiment(
    cfg: ExperimentConfig,
    *,
    console: Console | None = None,
    quiet: bool = False,
    out_dir: Path | None = None,
    resume: bool = False,
    mirror: Path | None = None,
) -> tuple[Path, ExperimentResult]:
    """Run ``cfg`` and write ``runs/<name>-<timestamp>/`` (or ``out_dir``).

    Files: ``config.json`` (resolved config), ``cells.json`` (finished units of
    work), ``metrics.json``, ``message_log.json``, PNG figures and ``report.html``.
    On failure, ``error.json`` is written next to whatever partial results exist,
    and the error is re-raised. ``resume=True`` continues the run in ``out_dir``
    (see :func:`resume_experiment`). ``mirror``: a file that gets ``{"config", "cells"}``
    each time a cell finishes (``fedviews reproduce --continue`` commits it).
    """
    console = console or Console()
    spec = get_experiment(cfg.experiment)
    if resume:
        if out_dir is None or not out_dir.is_dir():
            raise FedViewsError(f"cannot resume: {out_dir} is not a run folder")
    elif out_dir is not None and any((out_dir / f).exists() for f in (CELLS_FILE, "config.json")):
        # also a run killed before its first cell: its checkpoints must not seed a new run
        if (out_dir / "metrics.json").is_file():  # finished: nothing to continue
            raise FedViewsError(
                f"{out_dir} holds a finished run (its metrics.json is written): choose another "
                "--out"
            )
        raise FedViewsError(
            f"{out_dir} holds a run already: continue it with `fedviews run --resume {out_dir}`, "
            "or choose another --out"
        )
    elif out_dir is None:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        out_dir = Path(cfg.output_dir) / f"{cfg.name}-{stamp}"
        k = 1
        while out_dir.exists():
            out_dir = Path(cfg.output_dir) / f"{cfg.name}-{stamp}-{k}"
            k += 1
    made = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / "config.json", cfg.to_dict())
    (out_dir / "error.json").unlink(missing_ok=True)
    ctx = RunContext(cfg, out_dir, console, quiet, mirror)
    if ctx.cells:
        ctx.log(f"resuming: {len(ctx.cells)} finished cells in {out_dir / CELLS_FILE}")
    t0 = time.perf_counter()
    try:
        result: ExperimentResult = spec.run(cfg, ctx)
    except BaseException as exc:
        if made and isinstance(exc, (ConfigError, DataError)) and _untouched(out_dir):
            # a bad input found before anything ran (a misspelt dataset or view): no folder of
            # a run that never started is left to clutter runs/
            shutil.rmtree(out_dir, ignore_errors=True)
            raise
        _write_json(
            out_dir / "error.json",
            {
                "error": described(exc),
                "traceback": None if isinstance(exc, FedViewsError) else traceback.format_exc(),
                "seconds": time.perf_counter() - t0,
            },
        )
        raise
    seconds = time.perf_counter() - t0
    metrics = {
        "experiment": cfg.experiment,
        "name": cfg.name,
        "seconds": seconds,
        **result.metrics,
        "tables": [t.to_dict() for t in result.tables],
        **({"headline": result.summary} if result.summary else {}),
    }
    _write_json(out_dir / "metrics.json", metrics)
    if result.message_log is not None:
        _write_json(out_dir / "message_log.json", result.message_log)
    (out_dir / "partial_metrics.json").unlink(missing_ok=True)
    write_report(out_dir)
    return out_dir, result


def _untouched(out_dir: Path) -> bool:
    """Whether the run folder ``out_dir`` holds its config and nothing else (no cell, no
    checkpoint, no partial table)."""
    return [p.name for p in out_dir.iterdir()] == ["config.json"]


def resume_experiment(
    run_dir: Path, *, console: Console | None = None, quiet: bool = False
) -> tuple[Path, ExperimentResult]:
    """Continue the experiment run in ``run_dir`` (killed, interrupted, or failed).

    The run's own ``config.json`` is loaded again, so the resumed run is the same
    run; cells finished before (``cells.json``) are not computed again. The
    finished run writes one set of tables from all cells, old and new.
    """
    from fedviews.experiments._config import load_config

    path = Path(run_dir) / "config.json"
    if not path.is_file():
        raise FedViewsError(f"{run_dir} is not an experiment run folder (no config.json)")
    if (Path(run_dir) / "metrics.json").is_file():  # (resumed, it was computed again)
        raise FedViewsError(
            f"the run in {run_dir} finished (its metrics.json is written): nothing to resume; "
            f"`fedviews report {run_dir}` rebuilds its report"
        )
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FedViewsError(f"{path} is not a run config: {exc}") from None
    cfg = load_config(raw)
    return run_experiment(cfg, console=console, quiet=quiet, out_dir=Path(run_dir), resume=True)
