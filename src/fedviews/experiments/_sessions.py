"""A long reproduction run over several sessions (``fedviews reproduce --continue``): its
finished cells committed beside its results, and the run folder they seed or continue."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Protocol

from fedviews.errors import FedViewsError
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
        if made_by != with_new_defaults(config, made_by, cfg.params):
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


def run_cells(out_dir: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The finished cells of ``out_dir`` when it is a run folder (``config.json`` and
    ``cells.json``) made by ``config``, else ``None``."""
    from fedviews.experiments._runner import CELLS_FILE

    try:
        made_by = json.loads((out_dir / "config.json").read_text(encoding="utf-8"))
        ran = json.loads((out_dir / CELLS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return ran if isinstance(ran, dict) and made_by == config else None
