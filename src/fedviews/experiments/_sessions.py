"""The cells of a reproduction committed beside its results: those of a long run made over
several sessions (``fedviews reproduce --continue``), the run folder they seed or continue,
and those of a recorded run (``--record`` keeps them), which ``--check --sample K`` re-runs
K of."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import random
from pathlib import Path
from typing import Any, Protocol

from fedviews.errors import ConfigError, FedViewsError
from fedviews.report import to_jsonable


class Entry(Protocol):
    """What this module reads of a manifest entry (``_reproduce.Reproduction``)."""

    @property
    def name(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def overrides(self) -> tuple[str, ...]: ...
    @property
    def cells(self) -> str: ...
    @property
    def kept_cells(self) -> str: ...


def committed_cells(entry: Entry, root: Path) -> int:
    """How many finished cells of ``entry``'s unfinished run are committed (``--continue``).

    Raises
    ------
    FedViewsError
        For a file that is not a committed cells file.
    """
    path = root / entry.cells
    if not path.is_file():
        return 0
    try:
        return len(json.loads(path.read_text(encoding="utf-8"))["cells"])
    except (ValueError, TypeError, KeyError) as exc:
        raise FedViewsError(f"{path} is not a committed cells file: {exc!r}") from None


def cells_seconds(path: Path) -> float | None:
    """The summed compute time of the cells in the committed cells file at ``path`` (a run
    made over several ``--continue`` sessions), or ``None`` when a cell's time is unknown
    (a cell made before the file kept times)."""
    if not path.is_file():
        return None
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        return float(sum(float(saved["seconds"][k]) for k in saved["cells"]))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def with_new_defaults(config: dict[str, Any], made_by: Any, params: Any) -> dict[str, Any]:
    """``config`` without the ``params`` that the committed cells' config (``made_by``) lacks
    and that hold their default: a parameter added to the experiment since the cells were
    made (e.g. an optional network factory) leaves the run unchanged while it is unset."""
    if not (dataclasses.is_dataclass(params) and isinstance(made_by, dict)):
        return config
    old = made_by.get("params")
    if not isinstance(old, dict):
        return config
    defaults = {
        f.name: f.default
        for f in dataclasses.fields(params)
        if f.default is not dataclasses.MISSING
    }
    new = dict(config["params"])
    for key in set(new) - set(old):
        if key in defaults and new[key] == to_jsonable(defaults[key]):
            del new[key]
    return {**config, "params": new}


def seed_cells(entry: Entry, cfg: Any, mirror: Path, out_dir: Path) -> None:
    """Start ``out_dir`` as a run folder holding the committed cells of ``entry`` (if any).

    Raises
    ------
    FedViewsError
        When the committed cells are not a cells file, or were made by another config
        (the entry's config or overrides changed since: delete the file to start over).
    """
    from fedviews.experiments._runner import CELLS_FILE, _write_json

    config = json.loads(json.dumps(to_jsonable(cfg.to_dict())))
    cells: dict[str, Any] = {}
    if mirror.is_file():
        try:
            saved = json.loads(mirror.read_text(encoding="utf-8"))
            cells, made_by = dict(saved["cells"]), saved["config"]
        except (ValueError, TypeError, KeyError) as exc:
            raise FedViewsError(f"{mirror} is not a committed cells file: {exc!r}") from None
        if not _made_by(made_by, cfg):
            raise FedViewsError(
                f"{mirror} was made by another config than {entry.config} "
                f"{' '.join(entry.overrides)}: delete it to start {entry.name} over"
            )
    if out_dir.exists() and any(out_dir.iterdir()):
        ran = run_cells(out_dir, config)
        if ran is not None:
            # the run folder of an earlier session of this entry (say, carried to and back
            # from a GPU machine): its checkpoints continue the cell that was in progress
            _write_json(out_dir / CELLS_FILE, {**ran, **cells})
            return
        raise FedViewsError(
            f"{out_dir} is not empty and not a run folder of {entry.name} with this config: "
            "give another --out"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / CELLS_FILE, cells)  # run_experiment(resume=True) writes config.json


def run_cells(out_dir: Path, config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The finished cells of ``out_dir`` when it is a run folder (``config.json`` and
    ``cells.json``) made by ``config`` (``None``: any), else ``None``."""
    from fedviews.experiments._runner import CELLS_FILE

    try:
        made_by = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
        ran = json.loads((out_dir / CELLS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return ran if isinstance(ran, dict) and config in (None, made_by) else None


def keep_cells(run_dir: Path, dest: Path) -> int:
    """Write the finished cells of the run folder ``run_dir``, its config and the cells'
    compute times where known to ``dest`` (gzipped JSON, no time stamp); the number of cells.
    A run without cells (a script's, an experiment that has none) removes ``dest``."""
    from fedviews.experiments._runner import SECONDS_FILE

    cells = run_cells(run_dir, None)
    if not cells:
        dest.unlink(missing_ok=True)
        return 0
    config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    try:
        took = json.loads((run_dir / SECONDS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        took = {}
    seconds = {k: took[k] for k in cells if k in took}
    lines = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in cells.items())
    text = f'{{"config": {json.dumps(config)},\n"seconds": {json.dumps(seconds)},\n'
    text += f'"cells": {{\n{lines}\n}}}}\n'
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as out:
        out.write(text.encode("utf-8"))
    return len(cells)


def kept_cells(entry: Entry, root: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The config, the cells and the cells' known compute times (seconds) of ``entry``'s
    recorded run (:func:`keep_cells`).

    Raises
    ------
    FedViewsError
        When the record kept no cells (made before records kept them, or a script entry's)
        or the file is not a kept-cells file.
    """
    path = root / entry.kept_cells
    if not path.is_file():
        raise FedViewsError(
            f"{entry.name}: its record kept no cells (no {entry.kept_cells}: its experiment "
            "computes no cells, e.g. a closed-form one, or a script's, or it was recorded before "
            "records kept them, 2026-11-29): check it whole; if its run folder has a cells.json, "
            f"record it again (fedviews reproduce {entry.name} --record) to sample it from then on"
        )
    try:
        saved = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        return dict(saved["config"]), dict(saved["cells"]), dict(saved.get("seconds", {}))
    except (OSError, EOFError, ValueError, TypeError, KeyError) as exc:
        raise FedViewsError(f"{path} is not a kept-cells file: {exc!r}") from None


def seed_sample(
    entry: Entry, cfg: Any, root: Path, out_dir: Path, k: int, seed: int
) -> tuple[list[str], dict[str, Any], float | None]:
    """Start ``out_dir`` as a run folder holding every kept cell of ``entry``'s record but
    ``k`` drawn at random (``random.Random(seed)``): the run computes those again and
    takes the others as recorded. The drawn keys, the recorded cells, and how long the
    drawn cells took when recorded (``None`` where unknown).

    Raises
    ------
    ConfigError
        ``k`` outside 1 .. the number of kept cells.
    FedViewsError
        No kept cells, cells made by another config than the entry's (the record is older
        than its config: record it again), or an ``out_dir`` that is not empty.
    """
    from fedviews.experiments._runner import CELLS_FILE, _write_json

    made_by, cells, took = kept_cells(entry, root)
    if not _made_by(made_by, cfg):
        raise FedViewsError(
            f"{entry.kept_cells} was made by another config than {entry.config} "
            f"{' '.join(entry.overrides)}: record {entry.name} again"
        )
    if not 1 <= k <= len(cells):
        raise ConfigError(f"--sample takes 1 to {len(cells)} cells of {entry.name}, not {k}")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise FedViewsError(f"{out_dir} is not empty: give another --out")
    drawn = random.Random(seed).sample(sorted(cells), k)
    out_dir.mkdir(parents=True, exist_ok=True)
    _write_json(out_dir / CELLS_FILE, {key: v for key, v in cells.items() if key not in drawn})
    known = all(key in took for key in drawn)
    return drawn, cells, float(sum(took[key] for key in drawn)) if known else None


def recorded_cells(entry: Entry, cfg: Any, root: Path) -> dict[str, Any]:
    """The cells that ``entry``'s record kept, when it kept cells made by ``cfg`` (a whole
    ``--check`` compares every fresh cell with them); else ``{}``.

    Raises
    ------
    FedViewsError
        When the kept-cells file is not one.
    """
    if not (root / entry.kept_cells).is_file():
        return {}
    made_by, cells, _ = kept_cells(entry, root)
    return cells if _made_by(made_by, cfg) else {}


def _made_by(made_by: dict[str, Any], cfg: Any) -> bool:
    config = json.loads(json.dumps(to_jsonable(cfg.to_dict())))
    return made_by == with_new_defaults(config, made_by, cfg.params)


def cell_changes(key: str, recorded: Any, fresh: Any, shown: int = 3) -> list[str]:
    """Where the cell ``key`` of a fresh run differs from the recorded one, leaf by leaf (a
    path such as ``accuracy/3``), but for a run's own timings (any key that ends in
    ``seconds``): at most ``shown`` lines, then how many more."""
    found: list[str] = []

    def walk(path: str, a: Any, b: Any) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            for name in sorted(set(a) | set(b)):
                if not name.endswith("seconds"):
                    walk(f"{path}/{name}", a.get(name), b.get(name))
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(f"{path}/{i}", x, y)
        elif not _same(a, b):
            found.append(f"{key}: {path.lstrip('/') or 'value'}: recorded {a!r}, fresh {b!r}")

    walk("", recorded, fresh)
    more = [f"{key}: and {len(found) - shown} more"] if len(found) > shown else []
    return found[:shown] + more


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b
