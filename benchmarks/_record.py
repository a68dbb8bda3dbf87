"""A benchmark's result as JSON (``--json PATH``), for the docs.

The docs render such a file where a page says ``<!-- bench: NAME -->`` (NAME: the file's
name in ``docs/results/`` without ``.json``; ``docs/hooks/bench_results.py``), so that no
benchmark number in the docs is typed by hand. A record holds what is needed to judge
and repeat the run, the same on any machine::

    {"title": ..., "command": "OMP_NUM_THREADS=1 python benchmarks/bench_x.py ...",
     "date": "2026-11-28 18:30 UTC",
     "machine": {"cpu", "cores", "gpu", "os", "python", "torch"}, "device": "cpu",
     "wall_seconds": ..., "load_average": [1, 5, 15 min at its end],
     "tables": [{"title", "columns": [...], "rows": [[...], ...], "note"?}]}

``wall_seconds`` runs from the import of this module (the benchmark's start).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from fedviews.experiments._reproduce import machine

__all__ = ["NA", "json_option", "median_ratio", "pair_ratios", "ratio_table", "write_record"]

#: a table cell that does not apply (JSON has no NaN)
NA = "—"

_START = time.perf_counter()
#: environment variables that change a benchmark's numbers: part of its command when set
_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "MALLOC_PERTURB_")


def json_option(ap: argparse.ArgumentParser) -> None:
    """The ``--json PATH`` option of a benchmark."""
    ap.add_argument(
        "--json",
        type=Path,
        metavar="PATH",
        help="also write the result here (docs/results/bench_*.json, rendered in the docs "
        "by <!-- bench: NAME -->)",
    )


def command() -> str:
    """The command line that ran this benchmark, with the environment that shapes it."""
    env = [f"{k}={shlex.quote(os.environ[k])}" for k in _ENV if k in os.environ]
    return " ".join([*env, "python", shlex.join(sys.argv)])


def pair_ratios(times: list[float], base: list[float]) -> list[float]:
    """The ratio of every interleaved pair of runs: ``times[i] / base[i]``."""
    return [t / b for t, b in zip(times, base, strict=True)]


def median_ratio(times: list[float], base: list[float]) -> float:
    """The median of :func:`pair_ratios`: what every benchmark reports against its baseline."""
    return statistics.median(pair_ratios(times, base))


def ratio_table(
    title: str,
    plain: list[float],
    runs: dict[str, list[float]],
    unit: str = "s / epoch",
    baseline: str = "plain loop",
    ratio_column: str | None = None,
) -> dict[str, Any]:
    """A federated-against-plain-loop table: a row for the plain loop (named ``baseline``:
    whatever the others are timed against) and one per entry of ``runs`` (its times,
    interleaved with ``plain``'s), each with its best time, every time, and (the rows of
    ``runs``) the median of the ratios of the interleaved pairs, in the column
    ``ratio_column`` (default ``× BASELINE (median of pairs)``)."""
    rows: list[list[Any]] = [[baseline, round(min(plain), 4), _joined(plain), NA, NA]]
    for name, times in runs.items():
        ratios = pair_ratios(times, plain)
        rows.append(
            [
                name,
                round(min(times), 4),
                _joined(times),
                round(statistics.median(ratios), 3),
                _joined(ratios),
            ]
        )
    ratio_column = ratio_column or f"× {baseline} (median of pairs)"
    columns = ["run", f"{unit} (best)", "runs", ratio_column, "pairs"]
    return {"title": title, "columns": columns, "rows": rows}


def _joined(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)


def write_record(
    path: Path | None,
    title: str,
    tables: list[dict[str, Any]],
    device: str = "cpu",
    **extra: Any,
) -> None:
    """Write the record of this run to ``path`` (nothing when ``None``): ``tables`` with the
    command, date, machine, wall time and load average; ``extra`` (e.g. ``flwr="1.42.0"``)
    is kept beside them."""
    if path is None:
        return
    import torch

    mach = machine(device) | {"torch": torch.__version__}
    record = {
        "title": title,
        "command": command(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": mach,
        "device": device,
        "wall_seconds": round(time.perf_counter() - _START, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        **extra,
        "tables": tables,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path}")
