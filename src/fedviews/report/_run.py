"""A finished run read back from its folder: what the report and ``fedviews compare`` show.

Three kinds of folder are runs:

* an **experiment** run (``fedviews run CONFIG``): ``config.json`` and ``metrics.json``;
* a **deployment**'s coordinator folder: ``results.json`` and ``message_log.json``
  (and the ``config.json`` the coordinator writes); a launched deployment's folder
  (``fedviews run deploy_*.toml``) stands for its coordinator's;
* a deployment **party**'s folder: ``message_log.json`` (what it sent and received).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedviews.errors import ConfigError
from fedviews.report._names import method_name

#: the headline entry of the bytes a run sent over the wire
BYTES = "bytes on the wire"

#: key paths of a run's metrics that hold per-round / per-iteration curves
_CURVE_KEY = re.compile(r"objective|loss|history|per_round")
#: what of a deployment's per-round history is a curve (its time and bytes are costs)
_QUALITY = re.compile(r"objective|loss|acc|auc|f1|precision|recall|error")
#: results.json keys that are bookkeeping, not results
_BOOKKEEPING = {"resumed_from_round", "last_checkpoint_round"}


@dataclass
class RunRecord:
    """One finished run, as its files describe it.

    Attributes
    ----------
    folder : Path
        The folder the files were read from (a launch folder's coordinator folder).
    kind : {"experiment", "deployment", "party"}
    name : str
        The run's ``name`` (from its config), or the folder's name.
    what : str
        The experiment (``mmvfl_feature_selection``) or the algorithm (``multivfl``).
    config : dict
        The resolved config (``{}`` when the folder has none).
    results : dict
        ``metrics.json`` (experiment) or ``results.json`` (deployment).
    message_log : dict or None
        ``message_log.json``: one summary, or ``{label: summary}`` of several runs.
    coordinator : str or None
        The coordinator's name in the message log.
    """

    folder: Path
    kind: str
    name: str
    what: str
    config: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    message_log: dict[str, Any] | None = None
    coordinator: str | None = "coordinator"

    @property
    def title(self) -> str:
        """``"experiment mmvfl_feature_selection"`` / ``"Multi-VFL deployment"``."""
        if self.kind == "experiment":
            return f"experiment {self.what}"
        return f"{method_name(self.what)} {self.kind}"  # a deployment or a party

    @property
    def seconds(self) -> float | None:
        s = self.results.get("seconds")
        return float(s) if isinstance(s, (int, float)) else None

    @property
    def tables(self) -> list[dict[str, Any]]:
        """The run's result tables (``{"title", "columns", "rows", "note"}``)."""
        return [t for t in self.results.get("tables", []) if isinstance(t, dict)]

    @property
    def figures(self) -> list[Path]:
        """The PNG figures the run wrote, by name."""
        return sorted(self.folder.glob("*.png"))

    def summaries(self) -> dict[str, dict[str, Any]]:
        """The message-log summaries: ``{"": summary}`` for one run, ``{label: summary}``
        for an experiment that logged several (one per setting)."""
        log = self.message_log
        if not log:
            return {}
        if "per_party" in log:
            return {"": log}
        return {str(k): v for k, v in log.items() if isinstance(v, dict) and "per_party" in v}

    def log_scope(self) -> str:
        """Whose traffic the message log holds where it is not the whole run's (an
        experiment of many fits keeps one's: ``"the first of this run's 35 MMVFL fits"``);
        empty otherwise."""
        scope = (self.message_log or {}).get("scope")
        return scope if isinstance(scope, str) else ""

    def curves(self) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
        """Per-round (or per-iteration) curves: ``{quantity: {series: (x, y)}}``.

        A deployment's ``history`` (against its ``round``); an experiment's numeric
        lists under keys naming an objective, a loss, a history or a per-round value, and,
        where it lists its ``rounds``, a quality's (accuracy, loss, ...) lists of as many
        values, against them.
        """
        out: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
        hist = self.results.get("history")
        if self.kind != "experiment" and isinstance(hist, dict):
            n = max((len(v) for v in hist.values() if _numbers(v)), default=0)
            x = [float(v) for v in hist.get("round", range(1, n + 1))]
            for key, ys in hist.items():
                if _QUALITY.search(key) and _numbers(ys) and len(ys) == len(x):
                    out[key] = {"": (x, [float(y) for y in ys])}
            return out
        # an experiment that lists its rounds (Multi-VFL's `rounds` beside `accuracy` per
        # curve): a quality's lists of as many values are curves against them
        listed: Any = self.results.get("rounds")
        rounds = [float(r) for r in listed] if _numbers(listed) and len(listed) > 1 else None
        for path, ys in _lists(self.results):
            hit = next((k for k in path if _CURVE_KEY.search(k)), None)
            x = [float(i) for i in range(1, len(ys) + 1)]
            if hit is None and rounds and len(ys) == len(rounds) and _QUALITY.search(path[0]):
                hit, x = path[0], rounds
            if hit is None or len(ys) < 2:
                continue
            rest = " / ".join(method_name(k) for k in path if k != hit)
            out.setdefault(hit, {})[rest] = (x, ys)
        return out

    def headline(self) -> dict[str, Any]:
        """The run's headline numbers: ``{label: value}``.

        A deployment: its status, scalar results and traffic; an experiment: the cells
        of its first table (its headline table), its duration and its traffic. A row is
        named by its first cell, or, where that names several rows (a leakage table's
        attacker), by its cells before the table's first numeric column.
        """
        out: dict[str, Any] = {}
        if self.kind == "experiment":
            for t in self.tables[:1]:  # its headline table
                cols = [str(c) for c in t.get("columns", [])]
                rows = t.get("rows", [])
                numeric = [i for r in rows for i, v in enumerate(r) if i and _result(v)]
                lead = min(numeric, default=1)
                firsts = [str(r[0]) for r in rows if r]
                for row in rows:
                    name = str(row[0]) if row else ""
                    if firsts.count(name) > 1:
                        name = " · ".join(str(c) for c in row[:lead])
                    for col, v in zip(cols[1:], row[1:], strict=False):
                        if _result(v):
                            out[f"{name} · {col}"] = v
        else:
            out = {
                k: v
                for k, v in self.results.items()
                if k not in _BOOKKEEPING and not isinstance(v, (dict, list))
            }
        if self.seconds is not None:
            out["seconds"] = self.seconds
        sums = self.summaries()
        if sums:
            out["messages"] = sum(int(s.get("messages", 0)) for s in sums.values())
            out[BYTES] = sum(int(s.get("total_bytes", 0)) for s in sums.values())
        return out

    def headline_title(self) -> str:
        """What the headline table's numbers are (its title: ``"APFed Table 2 — MNIST
        accuracy (%)"``); empty for a deployment or a run without tables."""
        if self.kind != "experiment" or not self.tables:
            return ""
        return str(self.tables[0].get("title", ""))

    def json_files(self) -> list[Path]:
        """The run's JSON files, to link from the report."""
        return sorted(self.folder.glob("*.json"))

    def flat_config(self) -> dict[str, Any]:
        """The config as ``{"params.lr": 0.001, ...}`` (lists kept as values)."""
        return dict(_flatten(self.config))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: a table cell that holds a number as text: ``"4.028"``, ``"97.00 ± 0.50"``, ``"+1.2 [+0.3, +2.1]"``
_NUMERIC_TEXT = re.compile(r"[-+]?(\d[\d,]*\.?\d*|\.\d+)([eE][-+]?\d+)?( ± \S+| \[[^\]]*\])?")


def _result(v: Any) -> bool:
    """Whether a table cell is a result: a number, or a number as text (a mean ± std, an
    interval; such cells, strings in ``metrics.json``, were left out of ``compare``)."""
    return _number(v) or (isinstance(v, str) and _NUMERIC_TEXT.fullmatch(v.strip()) is not None)


def _numbers(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_number(x) for x in v)


def _lists(obj: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], list[float]]]:
    """Every numeric list in ``obj`` with its key path (tables left out)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k != "tables":
                yield from _lists(v, (*path, str(k)))
    elif _numbers(obj):
        ys = [float(y) for y in obj]
        if all(math.isfinite(y) for y in ys):
            yield path, ys


def _flatten(obj: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}{k}.")
    else:
        yield prefix.rstrip("."), obj


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; :class:`ConfigError` naming the file if it is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not readable JSON: {exc}") from None


def _coordinator_folder(folder: Path) -> Path | None:
    """The coordinator folder of a launched deployment's folder (the subfolder with a
    ``results.json``), or ``None``."""
    found = sorted(p.parent for p in folder.glob("*/results.json"))
    return found[0] if len(found) == 1 else None


def load_run(folder: Path | str) -> RunRecord:
    """Read the run in ``folder``.

    Parameters
    ----------
    folder : Path or str
        An experiment run folder, a deployment's (launch or coordinator) folder, or a
        deployment party's folder.

    Returns
    -------
    RunRecord

    Raises
    ------
    ConfigError
        ``folder`` does not exist or holds no finished run.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(
            f"{folder} is not a folder (give the folder of a run, e.g. runs/<name>-<time>)"
        )
    log_path = folder / "message_log.json"
    log = read_json(log_path) if log_path.is_file() else None
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    if (folder / "metrics.json").is_file():
        metrics = read_json(folder / "metrics.json")
        name = str(metrics.get("name") or config.get("name") or folder.name)
        what = str(metrics.get("experiment") or config.get("experiment", "?"))
        return RunRecord(folder, "experiment", name, what, config, metrics, log)
    coordinator = str((config.get("federation") or {}).get("coordinator", "coordinator"))
    if (folder / "results.json").is_file():
        results = read_json(folder / "results.json")
        name, what = str(config.get("name") or folder.name), str(config.get("algorithm", "?"))
        return RunRecord(folder, "deployment", name, what, config, results, log, coordinator)
    launched = _coordinator_folder(folder)
    if launched is not None:
        return load_run(launched)
    if log is not None and config.get("algorithm"):
        name = f"{config.get('name', folder.parent.name)} · {folder.name}"
        what = str(config["algorithm"])
        return RunRecord(folder, "party", name, what, config, {}, log, coordinator)
    hint = " (it failed: see error.json)" if (folder / "error.json").is_file() else ""
    raise ConfigError(
        f"{folder} is not a finished run{hint}: an experiment run has metrics.json, a "
        "deployment has results.json in its coordinator's folder"
    )
