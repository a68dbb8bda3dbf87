"""One data file per party: its sample IDs, its features and (label owners) its labels.

Formats
-------
``.npz``: arrays ``ids`` (n,), ``X`` (n, ...) and optionally ``y`` (n,); a party
that holds no features (a pure label owner of Multi-VFL) may omit ``X``. An
optional held-out split has the same names with the suffix ``_test``
(``ids_test``, ``X_test``, ``y_test``). ``X`` may have any number of trailing
dimensions (image strips ``(n, rows, width)``, sequences ``(n, T, d)``);
``uint8`` and ``float32`` arrays keep their type, other numbers become ``float64``.
A party that holds several views (a horizontal FedMV client: all views of its own
samples) stores them side by side along the last axis of ``X`` and lists their
widths in the optional integer array ``view_dims`` (e.g. ``[240, 76, 216]`` for
``X`` of shape ``(n, 532)``, or ``[3, 3]`` for sequences ``(n, T, 6)``); without it
``X`` is one view.
``.csv`` (a header row) or ``.parquet`` (needs ``pip install 'fedviews[parquet]'``):
column ``id`` holds the sample IDs, an optional column ``label`` the labels, every
other column is a numeric feature (2-D only, no test split).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data._validation import check_ids
from fedviews.errors import DataError, require

__all__ = ["PartyData", "load_party_data", "save_party_data", "split_dataset"]

#: the data file types a party can hold (``.parquet`` needs the ``parquet`` extra)
SUFFIXES = ("npz", "csv", "parquet")
_TYPES = ", ".join("." + s for s in SUFFIXES)

_KEEP = (np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.float64))


def _features(X: Any, n: int, what: str) -> np.ndarray:
    if X is None:
        return np.empty((n, 0))
    arr = np.asarray(X)
    if arr.dtype not in _KEEP:
        if not (np.issubdtype(arr.dtype, np.number) or arr.dtype == bool):
            raise DataError(f"{what} must be numeric, got dtype {arr.dtype}")
        arr = arr.astype(np.float64)
    if arr.ndim < 2 or arr.shape[0] != n:
        raise DataError(f"{what} has shape {arr.shape} but there are {n} IDs")
    if arr.dtype != np.uint8 and not np.isfinite(arr).all():
        raise DataError(f"{what} contains NaN or infinite values")
    return arr


def _labels(y: Any, n: int, what: str) -> np.ndarray | None:
    if y is None:
        return None
    arr = np.asarray(y)
    if arr.shape != (n,):
        raise DataError(f"{what} has shape {arr.shape} for {n} IDs")
    return arr


@dataclass(frozen=True)
class PartyData:
    """What one organisation holds: IDs, features (possibly none), labels (label owners).

    ``ids_test``/``X_test``/``y_test``: an optional held-out split (e.g. the test
    images whose strips the Multi-VFL data owners hold). ``view_dims``: the widths
    of several views stored side by side along the last axis of ``X`` (and
    ``X_test``); ``None`` = one view (see :meth:`views`).
    """

    ids: np.ndarray
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    ids_test: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    view_dims: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        ids = check_ids(self.ids, name="ids")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "X", _features(self.X, len(ids), "X"))
        object.__setattr__(self, "y", _labels(self.y, len(ids), "y"))
        if self.view_dims is not None:
            dims = np.asarray(self.view_dims)
            if dims.ndim != 1 or not len(dims) or not np.issubdtype(dims.dtype, np.integer):
                raise DataError(f"view_dims must be a 1-D list of integers, got {self.view_dims!r}")
            width = self.features.shape[-1] if self.features.ndim > 1 else 0
            if (dims < 1).any() or int(dims.sum()) != width:
                raise DataError(
                    f"view_dims {dims.tolist()} must be positive and add up to the "
                    f"{width} columns of X's last axis"
                )
            object.__setattr__(self, "view_dims", tuple(int(d) for d in dims))
        if self.ids_test is None:
            if self.X_test is not None or self.y_test is not None:
                raise DataError("X_test/y_test given without ids_test")
            return
        ids_t = check_ids(self.ids_test, name="ids_test")
        object.__setattr__(self, "ids_test", ids_t)
        X_t = _features(self.X_test, len(ids_t), "X_test")
        if X_t.shape[1:] != self.features.shape[1:]:
            raise DataError(
                f"X_test rows have shape {X_t.shape[1:]} but X rows {self.features.shape[1:]}"
            )
        object.__setattr__(self, "X_test", X_t)
        object.__setattr__(self, "y_test", _labels(self.y_test, len(ids_t), "y_test"))

    @property
    def features(self) -> np.ndarray:
        """``X`` (never None after construction; ``(n, 0)`` for a party without features)."""
        assert self.X is not None
        return self.X

    def split(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(ids, X, y)`` of the ``"train"`` (the main arrays) or ``"test"`` split."""
        if name == "train":
            return self.ids, self.features, self.y
        if name == "test":
            if self.ids_test is None or self.X_test is None:
                raise DataError("this party's data file has no test split (ids_test, X_test)")
            return self.ids_test, self.X_test, self.y_test
        raise DataError(f"unknown split {name!r}; use 'train' or 'test'")

    def take(self, rows: np.ndarray) -> PartyData:
        """The training rows ``rows`` (the test split is dropped)."""
        return PartyData(
            self.ids[rows],
            self.features[rows],
            None if self.y is None else self.y[rows],
            view_dims=self.view_dims,
        )

    def views(self, X: np.ndarray) -> list[np.ndarray]:
        """``X`` (rows of this party's ``X`` or ``X_test``) cut into its views along the last axis."""
        dims = self.view_dims or (X.shape[-1],)
        cuts = np.cumsum(dims)[:-1]
        return list(np.split(X, cuts, axis=-1))

    def arrays(self) -> dict[str, np.ndarray]:
        names = ("ids", "X", "y", "ids_test", "X_test", "y_test")
        out = {k: getattr(self, k) for k in names if getattr(self, k) is not None}
        if self.view_dims is not None:
            out["view_dims"] = np.asarray(self.view_dims, dtype=np.int64)
        if self.features.shape[1:] == (0,):  # a party without features
            out.pop("X")
            out.pop("X_test", None)
        return out


def load_party_data(path: str | Path) -> PartyData:
    """Read a party's ``.npz`` or ``.csv`` data file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {p} does not exist")
    if p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            if "ids" not in z.files:
                raise DataError(f"{p} lacks the array 'ids' (needs ids[, X, y, ids_test, ...])")
            known = {"ids", "X", "y", "ids_test", "X_test", "y_test", "view_dims"}
            extra = set(z.files) - known
            if extra:
                raise DataError(f"{p}: unknown arrays {sorted(extra)}; expected {sorted(known)}")
            got = {k: z[k] for k in z.files}
        try:
            return PartyData(**got)
        except DataError as exc:
            raise DataError(f"{p}: {exc}") from None
    if p.suffix == ".csv":
        with p.open(newline="") as fh:
            rows = list(csv.reader(fh))
        if not rows or "id" not in rows[0]:
            raise DataError(f"{p}: the header must contain an `id` column")
        head = rows[0]
        body = rows[1:]
        i_id = head.index("id")
        i_y = head.index("label") if "label" in head else None
        feats = [j for j in range(len(head)) if j not in (i_id, i_y)]
        raw_ids = [r[i_id] for r in body]
        ids = (
            np.array([int(v) for v in raw_ids])
            if all(v.lstrip("-").isdigit() for v in raw_ids)
            else np.array(raw_ids)
        )
        try:
            X = np.array([[float(r[j]) for j in feats] for r in body])
            y = None if i_y is None else np.array([int(r[i_y]) for r in body])
        except ValueError as exc:
            raise DataError(f"{p}: non-numeric value ({exc})") from None
        return PartyData(ids, X.reshape(len(body), len(feats)), y)
    if p.suffix == ".parquet":
        return _load_parquet(p)
    raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use {_TYPES}")


def _load_parquet(p: Path) -> PartyData:
    """Columns ``id``, optional ``label``, every other column a numeric feature."""
    pq: Any = require("pyarrow.parquet", "parquet")
    try:
        table = pq.read_table(p)
    except Exception as exc:  # pyarrow raises its own types for unreadable files
        raise DataError(f"{p}: not a readable Parquet file ({exc})") from None
    names = list(table.column_names)
    if "id" not in names:
        raise DataError(f"{p}: the table needs an `id` column (has {names[:8]})")
    for name in names:
        if table.column(name).null_count:
            raise DataError(f"{p}: column {name!r} has missing values")
    ids = np.asarray(table.column("id").to_numpy(zero_copy_only=False))
    if ids.dtype == object:
        ids = ids.astype(str)
    y = (
        np.asarray(table.column("label").to_numpy(zero_copy_only=False))
        if "label" in names
        else None
    )
    feats = [n for n in names if n not in ("id", "label")]
    cols = [np.asarray(table.column(n).to_numpy(zero_copy_only=False)) for n in feats]
    bad = [n for n, c in zip(feats, cols, strict=True) if not np.issubdtype(c.dtype, np.number)]
    if bad:
        raise DataError(f"{p}: non-numeric feature columns {bad[:5]}")
    X = np.column_stack(cols).astype(np.float64) if cols else np.empty((len(ids), 0))
    return PartyData(ids, X, y)


def save_party_data(path: str | Path, data: PartyData) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".npz":
        arrays: dict[str, Any] = data.arrays()
        np.savez(p, **arrays)
    elif p.suffix == ".csv":
        _check_tabular(p, data)
        with p.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(
                [
                    "id",
                    *(["label"] if data.y is not None else []),
                    *[f"f{j}" for j in range(data.features.shape[1])],
                ]
            )
            for i in range(len(data.ids)):
                lab = [int(data.y[i])] if data.y is not None else []
                w.writerow([data.ids[i], *lab, *[repr(float(v)) for v in data.features[i]]])
    elif p.suffix == ".parquet":
        _check_tabular(p, data)
        pa: Any = require("pyarrow", "parquet")
        pq: Any = require("pyarrow.parquet", "parquet")
        cols: dict[str, Any] = {"id": data.ids}
        if data.y is not None:
            cols["label"] = data.y
        cols.update({f"f{j}": data.features[:, j] for j in range(data.features.shape[1])})
        pq.write_table(pa.table(cols), p)
    else:
        raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use {_TYPES}")
    return p


def _check_tabular(p: Path, data: PartyData) -> None:
    if data.features.ndim != 2 or data.ids_test is not None or data.view_dims is not None:
        raise DataError(
            f"{p}: a table holds one 2-D view without a test split (no view_dims); use .npz"
        )


def split_dataset(
    dataset: str,
    out_dir: str | Path,
    *,
    views: tuple[str, ...] = (),
    label_owner: str = "",
    n_per_class: int = 0,
    overlap: float = 1.0,
    fmt: str = "npz",
    seed: int = 0,
) -> dict[str, Path]:
    """Write one file per view of a built-in dataset, as separate organisations would hold it.

    Each party keeps a random ``overlap`` fraction of the samples (so the parties
    share only part of their IDs and must align them), in its own random order;
    only ``label_owner`` (default: the first view) gets the labels.
    """
    from fedviews.data import balanced_subsample, load

    ds = load(dataset, **({"views": list(views)} if views else {}))
    if n_per_class:
        ds = ds.subset(balanced_subsample(ds.y, n_per_class, random_state=seed))
    owner = label_owner or ds.view_names[0]
    if owner not in ds.view_names:
        raise DataError(f"label owner {owner!r} is not a view of {dataset}: {ds.view_names}")
    rng = np.random.default_rng(seed)
    out: dict[str, Path] = {}
    for name, X in zip(ds.view_names, ds.views, strict=True):
        keep = rng.permutation(ds.n_samples)[: max(1, int(round(overlap * ds.n_samples)))]
        y = ds.y[keep] if name == owner else None
        out[name] = save_party_data(
            Path(out_dir) / f"{name}.{fmt}", PartyData(ds.ids[keep], X[keep], y)
        )
    return out
