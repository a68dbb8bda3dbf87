"""One data file per party: its sample IDs, its features and (label owner) its labels.

Formats
-------
``.npz``: arrays ``ids`` (n,), ``X`` (n, d) and optionally ``y`` (n,).
``.csv``: a header row; column ``id`` holds the sample IDs, an optional column
``label`` the labels, every other column is a numeric feature.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data._validation import check_ids
from fedviews.errors import DataError

__all__ = ["PartyData", "load_party_data", "save_party_data", "split_dataset"]


@dataclass(frozen=True)
class PartyData:
    ids: np.ndarray
    X: np.ndarray
    y: np.ndarray | None = None

    def __post_init__(self) -> None:
        ids = check_ids(self.ids, name="ids")
        X = np.asarray(self.X, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] != len(ids):
            raise DataError(f"X has shape {X.shape} but there are {len(ids)} IDs")
        if not np.isfinite(X).all():
            raise DataError("X contains NaN or infinite values")
        if self.y is not None and len(self.y) != len(ids):
            raise DataError(f"{len(self.y)} labels for {len(ids)} IDs")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "X", X)

    def take(self, rows: np.ndarray) -> PartyData:
        return PartyData(self.ids[rows], self.X[rows], None if self.y is None else self.y[rows])


def load_party_data(path: str | Path) -> PartyData:
    """Read a party's ``.npz`` or ``.csv`` data file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise DataError(f"data file {p} does not exist")
    if p.suffix == ".npz":
        with np.load(p, allow_pickle=False) as z:
            missing = {"ids", "X"} - set(z.files)
            if missing:
                raise DataError(f"{p} lacks the arrays {sorted(missing)} (needs ids, X[, y])")
            return PartyData(z["ids"], z["X"], z["y"] if "y" in z.files else None)
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
    raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use .npz or .csv")


def save_party_data(path: str | Path, data: PartyData) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    if p.suffix == ".npz":
        arrays: dict[str, Any] = {"ids": data.ids, "X": data.X}
        if data.y is not None:
            arrays["y"] = data.y
        np.savez(p, **arrays)
    elif p.suffix == ".csv":
        with p.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(
                [
                    "id",
                    *(["label"] if data.y is not None else []),
                    *[f"f{j}" for j in range(data.X.shape[1])],
                ]
            )
            for i in range(len(data.ids)):
                lab = [int(data.y[i])] if data.y is not None else []
                w.writerow([data.ids[i], *lab, *[repr(float(v)) for v in data.X[i]]])
    else:
        raise DataError(f"{p}: unsupported data file type {p.suffix!r}; use .npz or .csv")
    return p


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
