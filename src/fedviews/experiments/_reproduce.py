"""Reproductions: the manifest of published results, each made by a command and checked.

The manifest (``reproductions.toml`` at the root of a checkout, next to ``configs/``)
names, for every results table of the documentation, the experiment config and
overrides that make it, its tier (``smoke``: small, run by CI with ``--check``;
``full``: the published schedule), its expected cost, the tolerance of the check
and the committed results file it is rendered from. An entry::

    [mmvfl_smoke]
    title = "MMVFL on Handwritten, 2 folds"
    tier = "smoke"
    config = "configs/mmvfl_handwritten.toml"
    overrides = ["params.n_folds=2"]
    cost_s = 20          # expected wall time on a 2-core CPU
    tolerance = 0.01     # absolute, in the table's units
    tables = [0]         # which of the run's tables are committed (default: all)
    results = "docs/results/mmvfl_smoke.json"
    page = "docs/algorithms/mmvfl.md"

``fedviews reproduce NAME`` runs the entry with :func:`~fedviews.experiments.run_experiment`
(an ordinary run folder); ``--record`` writes the committed results file from
that run (its tables and the provenance: command, date, machine, wall time);
``--check`` compares the fresh tables with the committed ones and names every
number that moved by more than the tolerance (every integer that moved at all).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from fedviews._tables import build_dataclass, closest, read_toml
from fedviews.errors import ConfigError, FedViewsError
from fedviews.experiments._machine import machine, machine_changes
from fedviews.experiments._sessions import (
    cell_changes,
    cells_seconds,
    keep_cells,
    recorded_cells,
    run_cells,
    seed_cells,
    seed_sample,
)

__all__ = [
    "MANIFEST",
    "TIERS",
    "Drift",
    "Outcome",
    "Reproduction",
    "compare_tables",
    "find_manifest",
    "load_manifest",
    "machine",
    "reproduce",
    "select_entries",
]

#: the manifest's file name, looked up in the working directory and its parents
MANIFEST = "reproductions.toml"
TIERS = ("smoke", "full")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|nan|inf")
_INTEGER = re.compile(r"[-+]?\d+")
#: slack on top of an entry's tolerance, so that 0.01 admits one flip of a two-decimal rounding
_SLACK = 1e-9


@dataclass(frozen=True)
class Reproduction:
    """One manifest entry: a config and overrides whose run makes a published table."""

    name: str
    """The entry's name (``fedviews reproduce NAME``); the manifest table's key."""
    title: str
    """What the entry reproduces, one line (shown by ``--list`` and above the rendered tables)."""
    tier: str
    """``"smoke"`` (small, checked by CI) or ``"full"`` (the published schedule)."""
    results: str
    """The committed results file, relative to the manifest's folder."""
    page: str
    """The docs page that renders the entry (``<!-- reproduce: NAME -->``)."""
    cost_s: float
    """Expected wall time of a run, in seconds, on a 2-core CPU."""
    config: str = ""
    """The experiment config, relative to the manifest's folder (or give ``script``)."""
    script: str = ""
    """A benchmark script (relative to the manifest's folder) that makes the tables instead of
    an experiment: run as ``python SCRIPT ARGS --json FILE``, it writes ``{"tables": [...]}``
    (measured speeds and sizes: put their timing columns in ``unchecked``)."""
    args: tuple[str, ...] = ()
    """The script's command-line arguments."""
    overrides: tuple[str, ...] = ()
    """``key=value`` overrides of the config, as ``fedviews run CONFIG ...`` takes them."""
    tolerance: float = 0.01
    """Largest absolute difference between a committed and a fresh number that ``--check``
    accepts, in the table's own units (percentage points for accuracies); integers (counts,
    rounds, iterations: a number written without a point or an exponent) must be equal."""
    tables: tuple[int, ...] = ()
    """Indices of the run's tables (``metrics.json``'s ``tables``) that are committed,
    checked and rendered; empty: all."""
    unchecked: tuple[str, ...] = ()
    """Columns that ``--check`` does not compare (a run's own timings, e.g. ``"seconds"``);
    they are committed and rendered all the same."""
    pythonpath: tuple[str, ...] = ()
    """Folders, relative to the manifest's folder, on the Python path while the config is
    loaded (``PYTHONPATH=...`` before its command): where the ``modules`` of a config that
    fedviews does not ship live (``docs/examples``)."""
    figures: dict[str, str] = field(default_factory=dict)
    """The docs' figures that the run makes: ``{file in the run folder: path relative to the
    manifest's folder}``, copied there by ``--record`` (never by ``--check``), so that a
    page's figure is the committed run's."""

    def validate(self) -> None:
        if bool(self.config) == bool(self.script):
            raise ConfigError(f"reproduction {self.name!r}: give either config or script")
        if self.args and not self.script or (self.overrides or self.pythonpath) and self.script:
            raise ConfigError(
                f"reproduction {self.name!r}: args go with a script, overrides and pythonpath "
                "with a config"
            )
        if self.tier not in TIERS:
            raise ConfigError(f"reproduction {self.name!r}: tier must be one of {list(TIERS)}")
        if not (math.isfinite(self.tolerance) and self.tolerance >= 0):
            raise ConfigError(f"reproduction {self.name!r}: tolerance must be finite and >= 0")
        if not (math.isfinite(self.cost_s) and self.cost_s > 0):
            raise ConfigError(f"reproduction {self.name!r}: cost_s must be a positive number")
        if any(i < 0 for i in self.tables):
            raise ConfigError(f"reproduction {self.name!r}: tables are indices >= 0")
        for made, dest in self.figures.items():
            paths = (made, dest) if isinstance(dest, str) else ()
            inside = [not Path(p).is_absolute() and ".." not in Path(p).parts for p in paths]
            if len(inside) != 2 or not all(inside):
                raise ConfigError(
                    f"reproduction {self.name!r}: figures maps a file of the run folder to a "
                    f"docs path (both relative), not {made!r} = {dest!r}"
                )

    @property
    def cells(self) -> str:
        """The committed finished cells of an unfinished long run (``--continue``), relative
        to the manifest's folder: the results file's name with ``.cells.json``."""
        return str(Path(self.results).with_suffix(".cells.json"))

    @property
    def kept_cells(self) -> str:
        """The cells of the recorded run (``--record`` keeps them; ``--check --sample K``
        re-runs K of them), relative to the manifest's folder: ``cells/NAME.json.gz`` beside
        the results file ``NAME.json``."""
        results = Path(self.results)
        return str(results.parent / "cells" / f"{results.stem}.json.gz")

    @property
    def run_command(self) -> str:
        """The ``fedviews run`` command line that makes the same run folder (for a script
        entry, the ``python`` command line that makes the same tables)."""
        if self.script:
            return shlex.join(["python", self.script, *self.args])
        env = [f"PYTHONPATH={os.pathsep.join(self.pythonpath)}"] if self.pythonpath else []
        return shlex.join([*env, "fedviews", "run", self.config, *self.overrides])


@dataclass(frozen=True)
class Drift:
    """A committed number that a fresh run did not reproduce within the tolerance."""

    entry: str
    table: str
    row: str
    column: str
    committed: Any
    fresh: Any
    tolerance: float

    def __str__(self) -> str:
        return (
            f"{self.entry}: table {self.table!r}, row {self.row!r}, column {self.column!r}: "
            f"committed {_show(self.committed)}, fresh {_show(self.fresh)} "
            f"(tolerance {self.tolerance:g})"
        )


def _show(value: Any) -> str:
    """A number with 6 significant digits, anything else as its repr."""
    return f"{value:.6g}" if isinstance(value, float) else repr(value)


def find_manifest(start: Path | None = None) -> Path:
    """``reproductions.toml`` in ``start`` (default: the working directory) or a parent.

    Raises
    ------
    ConfigError
        When there is none (the manifest lives in a checkout, next to ``configs/``).
    """
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / MANIFEST).is_file():
            return folder / MANIFEST
    raise ConfigError(
        f"no {MANIFEST} in {here} or its parents: run `fedviews reproduce` in a fedviews "
        "checkout, or give --manifest PATH"
    )


def load_manifest(path: Path) -> dict[str, Reproduction]:
    """The entries of the manifest at ``path``, by name, checked.

    Raises
    ------
    ConfigError
        For a missing or malformed file, an unknown key (naming the closest), a wrong
        type, a bad tier, tolerance or cost, or an entry whose config file is missing.
    """
    raw = read_toml(path)
    out: dict[str, Reproduction] = {}
    for name, table in raw.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {name!r} must be a table ([{name}])")
        entry: Reproduction = build_dataclass(Reproduction, {**table, "name": name}, name)
        entry.validate()
        made_by = entry.config or entry.script
        if not (path.parent / made_by).is_file():
            what = "config" if entry.config else "script"
            raise ConfigError(f"{path}: {name}: {what} {made_by} does not exist")
        for folder in entry.pythonpath:
            if not (path.parent / folder).is_dir():
                raise ConfigError(f"{path}: {name}: pythonpath folder {folder} does not exist")
        out[name] = entry
    return out


def select_entries(
    entries: dict[str, Reproduction], names: Sequence[str], tier: str | None
) -> list[Reproduction]:
    """The entries named (all of ``tier`` when no name is given), in manifest order.

    Raises
    ------
    ConfigError
        For an unknown name (naming the closest), an unknown tier, or nothing selected.
    """
    if tier is not None and tier not in TIERS:
        raise ConfigError(f"--tier must be one of {list(TIERS)}, got {tier!r}")
    for n in names:
        if n not in entries:
            raise ConfigError(f"no reproduction {n!r}{closest(n, list(entries))}")
    chosen = [entries[n] for n in names] if names else list(entries.values())
    if tier is not None:
        chosen = [e for e in chosen if e.tier == tier]
    if not chosen:
        raise ConfigError("nothing to reproduce: give entry NAMEs or --tier smoke|full")
    return chosen


def _cells(value: Any) -> list[float | int] | None:
    """The numbers of a table cell (a number, or the numbers in a string such as
    ``"87.16 ± 0.86"``), an integer (a JSON integer, or digits without a point or an
    exponent) as an ``int``; ``None`` for a cell without numbers."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, str):
        nums = _NUMBER.findall(value)
        return [int(n) if _INTEGER.fullmatch(n) else float(n) for n in nums] if nums else None
    return None


def _skeleton(value: Any) -> str:
    """A cell with its numbers blanked (two cells compare number by number when equal)."""
    return _NUMBER.sub("#", value) if isinstance(value, str) else "#"


def _exact(a: float | int, b: float | int) -> bool:
    """Whether ``a`` and ``b`` compare exactly: either is an integer (a count, round or
    iteration: a drift of one is a drift, whatever the tolerance)."""
    return isinstance(a, int) or isinstance(b, int)


def _close(a: float | int, b: float | int, tol: float) -> bool:
    """``a`` and ``b`` within ``tol``, or equal where they compare exactly."""
    if _exact(a, b):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol + _SLACK


def compare_tables(
    entry: str,
    committed: Sequence[dict[str, Any]],
    fresh: Sequence[dict[str, Any]],
    tol: float,
    unchecked: Sequence[str] = (),
) -> list[Drift]:
    """Every number of the ``committed`` tables that ``fresh`` does not reproduce within
    ``tol`` (rows matched by position and label, columns by position and name), except in
    the ``unchecked`` columns; a table, row or column that disappeared or appeared is a
    drift as well."""
    drifts: list[Drift] = []
    if len(committed) != len(fresh):
        drifts.append(Drift(entry, "(tables)", "", "", len(committed), len(fresh), 0))
    for old, new in zip(committed, fresh, strict=False):
        title = str(old["title"])
        if old["columns"] != new["columns"] or old["title"] != new["title"]:
            drifts.append(Drift(entry, title, "(header)", "", old["columns"], new["columns"], 0))
            continue
        if len(old["rows"]) != len(new["rows"]):
            drifts.append(Drift(entry, title, "(rows)", "", len(old["rows"]), len(new["rows"]), 0))
        for r_old, r_new in zip(old["rows"], new["rows"], strict=False):
            label = str(r_old[0]) if r_old else ""
            if len(r_old) != len(r_new):
                drifts.append(Drift(entry, title, label, "(cells)", len(r_old), len(r_new), 0))
            for col, a, b in zip(old["columns"], r_old, r_new, strict=False):
                if col in unchecked:
                    continue
                na, nb = _cells(a), _cells(b)
                if na is None or nb is None:
                    same = a == b
                    moved: list[tuple[float | int, float | int]] = []
                else:
                    moved = [(x, y) for x, y in zip(na, nb, strict=False) if not _close(x, y, tol)]
                    same = _skeleton(a) == _skeleton(b) and len(na) == len(nb) and not moved
                if not same:
                    # an integer's drift is measured against no tolerance: say so
                    exact = moved and all(_exact(x, y) for x, y in moved)
                    drifts.append(Drift(entry, title, label, str(col), a, b, 0 if exact else tol))
    return drifts


def read_results(path: Path) -> dict[str, Any] | None:
    """A committed results file, or ``None`` when there is none yet.

    Raises
    ------
    FedViewsError
        For a file that is not a results file.
    """
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FedViewsError(f"{path} is not a results file: {exc}") from None
    if not isinstance(rec, dict) or not isinstance(rec.get("tables"), list):
        raise FedViewsError(f"{path} is not a results file (no 'tables' list)")
    return rec


def _chosen_tables(entry: Reproduction, metrics: dict[str, Any]) -> list[dict[str, Any]]:
    tables = list(metrics.get("tables", []))
    if not entry.tables:
        return tables
    if max(entry.tables) >= len(tables):
        raise ConfigError(
            f"reproduction {entry.name!r}: tables {list(entry.tables)}, but the run made "
            f"{len(tables)} tables"
        )
    return [tables[i] for i in entry.tables]


@dataclass
class Outcome:
    """What :func:`reproduce` did for one entry."""

    entry: Reproduction
    run_dir: Path
    seconds: float
    drifts: list[Drift]
    checked: bool
    recorded: Path | None = None
    #: where this machine differs from the drifted record's (:func:`machine_changes`)
    machine_changes: list[str] = field(default_factory=list)
    #: ``--sample``: the cells run again (the others were the record's), and where they differ
    sampled: list[str] = field(default_factory=list)
    cell_changes: list[str] = field(default_factory=list)
    #: how long the sampled cells took when recorded (``None``: not known)
    sampled_seconds: float | None = None
    #: ``--check`` of a record that kept its cells: how many fresh cells were compared with
    #: the recorded ones (the sample's, or all), and how many of them differ
    cells_compared: int = 0
    cells_changed: int = 0
    #: ``--record``: how many of the run's cells the record kept
    kept: int = 0


def reproduce(
    entry: Reproduction,
    root: Path,
    *,
    out_dir: Path,
    check: bool = False,
    record: bool = False,
    resume: bool = False,
    sample: int = 0,
    sample_seed: int = 0,
    console: Console | None = None,
    quiet: bool = True,
) -> Outcome:
    """Run ``entry`` into ``out_dir``; with ``check``, compare its tables with the committed
    results; with ``record``, write them (and the run's provenance) as the committed results.

    ``resume`` (with ``record``; ``fedviews reproduce --continue``) makes a long entry a
    series of sessions: the run starts from the cells committed in ``entry.cells`` and
    writes each cell it finishes there, so a run killed at any point (or a session that
    ends) loses at most the cell in progress, and the next ``--continue`` goes on from the
    committed file. The file is removed once the results are recorded. ``record`` keeps the
    run's cells in ``entry.kept_cells``.

    ``sample`` (with ``check``; ``--check --sample K``) checks a long entry in minutes: the
    run takes the cells that the record kept but ``sample`` drawn with
    ``random.Random(sample_seed)``, computes those again, and compares the tables as
    ``check`` does; :attr:`Outcome.cell_changes` says where a fresh cell differs from the
    recorded one at all (on the recording machine none does). A whole ``check`` of a record
    that kept its cells compares every fresh cell with them the same way.

    Raises
    ------
    FedViewsError
        ``check`` on an entry that has no committed results yet, a failed run, or ``resume``
        with committed cells made by another config than the entry's.
    """
    from fedviews.experiments._config import load_config
    from fedviews.experiments._runner import run_experiment

    results_path = root / entry.results
    committed = read_results(results_path) if check else None
    if check and committed is None:
        raise FedViewsError(
            f"{entry.name}: no committed results ({entry.results}) to check against: "
            f"record them with `fedviews reproduce {entry.name} --record`"
        )
    if resume and (check or entry.script):
        raise ConfigError(
            "--continue records an experiment entry from committed cells; --check recomputes all"
        )
    if sample and (not check or entry.script):
        raise ConfigError(
            f"{entry.name}: --sample goes with --check, and with an experiment entry (a "
            "script's record keeps no cells)"
        )
    t0 = time.perf_counter()
    mirror = root / entry.cells if resume else None
    drawn: list[str] = []  # --sample: the cells run again; the record's kept cells, if any
    recorded: dict[str, Any] = {}
    took: float | None = None
    if entry.script:
        run_dir, device = _run_script(entry, root, out_dir, quiet), "auto"
    else:
        with _on_path([str(root / folder) for folder in entry.pythonpath]):
            cfg = load_config(root / entry.config, entry.overrides)
        if mirror is not None:
            seed_cells(entry, cfg, mirror, out_dir)
        if sample:
            drawn, recorded, took = seed_sample(entry, cfg, root, out_dir, sample, sample_seed)
        elif check:
            recorded = recorded_cells(entry, cfg, root)
        run_dir, _ = run_experiment(
            cfg,
            console=console,
            quiet=quiet,
            out_dir=out_dir,
            resume=mirror is not None or bool(sample),
            mirror=mirror,
        )
        device = cfg.device
    seconds = time.perf_counter() - t0
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    tables = _chosen_tables(entry, metrics)
    drifts = (
        compare_tables(entry.name, committed["tables"], tables, entry.tolerance, entry.unchecked)
        if committed is not None
        else []
    )
    outcome = Outcome(entry, run_dir, seconds, drifts, checked=check)
    if recorded:  # the cells that the record kept: every one, or the sample
        fresh = run_cells(run_dir, None) or {}
        outcome.sampled, outcome.sampled_seconds = drawn, took
        outcome.cells_compared = len(drawn or recorded)
        for key in drawn or recorded:
            changes = cell_changes(key, recorded[key], fresh.get(key))
            outcome.cells_changed += bool(changes)
            outcome.cell_changes += changes
    if drifts and committed is not None:
        outcome.machine_changes = machine_changes(committed.get("machine"), machine(device))
    if record:
        rec: dict[str, Any] = {
            "entry": entry.name,
            "title": entry.title,
            "command": f"fedviews reproduce {entry.name} --record",
            "run_command": entry.run_command,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine(device),
            "wall_seconds": round(seconds, 1),
        }
        if mirror is not None:  # a run made over sessions: this one's wall time is a part
            total = cells_seconds(mirror)
            if total is not None:
                rec["cells_seconds"] = round(total, 1)
        rec["tables"] = tables
        figures = {run_dir / made: root / dest for made, dest in entry.figures.items()}
        missing = [str(made) for made in figures if not made.is_file()]
        if missing:
            raise FedViewsError(f"{entry.name}: the run made no {', '.join(missing)} (figures)")
        results_path.parent.mkdir(parents=True, exist_ok=True)
        results_path.write_text(json.dumps(rec, indent=1, ensure_ascii=False) + "\n", "utf-8")
        for made, dest in figures.items():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(made, dest)
        # the run's cells, so that a later --check --sample K re-runs K of them
        outcome.kept = keep_cells(run_dir, root / entry.kept_cells) if not entry.script else 0
        outcome.recorded = results_path
        if mirror is not None:
            mirror.unlink(missing_ok=True)  # recorded: the partial cells are done with
    return outcome


@contextmanager
def _on_path(folders: Sequence[str]) -> Iterator[None]:
    """``folders`` first on ``sys.path`` inside the block (an entry's ``pythonpath``: the
    config's ``modules`` are imported there, once)."""
    before = list(sys.path)
    sys.path[:0] = folders
    try:
        yield
    finally:
        sys.path[:] = before


def _run_script(entry: Reproduction, root: Path, out_dir: Path, quiet: bool) -> Path:
    """Run a script entry (``python SCRIPT ARGS --json out_dir/metrics.json``, in ``root``).

    Raises
    ------
    FedViewsError
        When the script fails (with the end of its output) or writes no tables.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    metrics = out_dir.resolve() / "metrics.json"
    cmd = [sys.executable, entry.script, *entry.args, "--json", str(metrics)]
    with open(out_dir / "output.txt", "w", encoding="utf-8") as log:
        proc = subprocess.run(cmd, cwd=root, stdout=log, stderr=subprocess.STDOUT, check=False)
    text = (out_dir / "output.txt").read_text(encoding="utf-8")
    if not quiet:
        print(text, end="", flush=True)
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        raise FedViewsError(f"{entry.name}: {entry.run_command} failed:\n{tail}")
    if not metrics.is_file():
        raise FedViewsError(f"{entry.name}: {entry.script} wrote no {metrics}")
    return out_dir
