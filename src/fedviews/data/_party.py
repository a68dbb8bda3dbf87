"""What one organisation holds: :class:`PartyData` (IDs, features, labels) and dealing a dataset.

A party's local data in every run, in one process or deployed: the estimators
build one :class:`PartyData` per party from the arrays they are given, a
deployment reads it from the party's own file (:mod:`fedviews.deploy`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fedviews.data._registry import load
from fedviews.data._split import balanced_subsample, held_out_split
from fedviews.data._validation import check_ids, check_y
from fedviews.errors import ConfigError, DataError

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
    arr = check_y(arr, n, name=what)
    if arr.dtype.kind == "O" and len(arr) and all(isinstance(v, str) for v in arr):
        arr = arr.astype(str)  # e.g. a Parquet column of strings: saved to .npz without pickle
    return arr


def _groups(group: Any, n: int) -> np.ndarray | None:
    if group is None:
        return None
    arr = np.asarray(group)
    if arr.shape != (n,):
        raise DataError(f"group has shape {arr.shape} for {n} IDs (one group name per row)")
    if arr.dtype.kind == "O" and all(isinstance(v, str) for v in arr.tolist()):
        arr = arr.astype(str)
    if arr.dtype.kind != "U":
        raise DataError(f"group must hold group names (text), got dtype {arr.dtype}")
    if n and (np.char.str_len(arr) == 0).any():
        raise DataError("group has empty names: tag every row with its group")
    return arr


@dataclass(frozen=True)
class PartyData:
    """What one organisation holds: IDs, features (possibly none), labels (label owners).

    ``ids_test``/``X_test``/``y_test``: an optional held-out split (e.g. the test
    images whose strips the Multi-VFL data owners hold). ``view_dims``: the widths
    of several views stored side by side along the last axis of ``X`` (and
    ``X_test``); ``None`` = one view (see :meth:`views`).

    Variable-length sequences (S-FedMV) are stored padded: ``X`` of shape
    ``(n, T_max, c_1 + ... + c_K)`` and ``lengths`` of shape ``(n, K)``, the number
    of valid time steps of every sample in every view (``lengths_test`` likewise);
    the padding is never read (:meth:`sequences`). Without ``lengths`` every
    sequence has all ``T_max`` steps.

    ``group``: for a party in several alignment groups of the training split (a Multi-VFL
    data owner with several label owners), the group of every training row, by name (a
    Multi-VFL group is named after its label owner): the party offers a group only the rows
    tagged with its name (:meth:`offered`). Without it the party offers every row to every
    group. Files aligned outside the run (``alignment = "none"``, as on Flower) need it
    where a party is in several groups: sorting the IDs then aligns each group's rows.
    """

    ids: np.ndarray
    X: np.ndarray | None = None
    y: np.ndarray | None = None
    ids_test: np.ndarray | None = None
    X_test: np.ndarray | None = None
    y_test: np.ndarray | None = None
    view_dims: tuple[int, ...] | None = None
    lengths: np.ndarray | None = None
    lengths_test: np.ndarray | None = None
    group: np.ndarray | None = None

    def __post_init__(self) -> None:
        ids = check_ids(self.ids, name="ids")
        object.__setattr__(self, "ids", ids)
        object.__setattr__(self, "X", _features(self.X, len(ids), "X"))
        object.__setattr__(self, "y", _labels(self.y, len(ids), "y"))
        object.__setattr__(self, "group", _groups(self.group, len(ids)))
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
        object.__setattr__(self, "lengths", self._lengths(self.lengths, self.features, "lengths"))
        if self.ids_test is None:
            if self.X_test is not None or self.y_test is not None or self.lengths_test is not None:
                raise DataError("X_test/y_test/lengths_test given without ids_test")
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
        object.__setattr__(
            self, "lengths_test", self._lengths(self.lengths_test, X_t, "lengths_test")
        )

    def _lengths(self, lengths: Any, X: np.ndarray, what: str) -> np.ndarray | None:
        if lengths is None:
            return None
        arr = np.asarray(lengths)
        K = len(self.view_dims or (1,))
        if X.ndim != 3:
            raise DataError(f"{what} is given but X is not a batch of sequences (n, T, channels)")
        if arr.shape != (X.shape[0], K) or not np.issubdtype(arr.dtype, np.integer):
            raise DataError(
                f"{what} must be integers of shape (n, views) = {(X.shape[0], K)}, got "
                f"{arr.dtype} {arr.shape}"
            )
        if len(arr) and (arr.min() < 1 or arr.max() > X.shape[1]):
            raise DataError(f"{what} must lie in 1..{X.shape[1]} (the padded length of X)")
        return arr.astype(np.int64)

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

    def offered(self, group: str, split: str = "train") -> np.ndarray:
        """The positions in ``split`` of the rows this party offers the alignment group
        ``group``: those tagged with its name (:attr:`group`, training split only), else all."""
        n = len(self.split(split)[0])
        if split != "train" or self.group is None:
            return np.arange(n)
        return np.flatnonzero(self.group == group)

    def sequences(self, split: str, rows: np.ndarray) -> list[list[np.ndarray]]:
        """``views[k][i]``: the ``rows`` of a split of sequences, per view, without padding."""
        X = self.split(split)[1][rows]
        lengths = self.lengths if split == "train" else self.lengths_test
        if X.ndim != 3:
            raise DataError(f"X has shape {X.shape}; sequences are (n, T, channels)")
        L = np.full((len(X), len(self.views(X))), X.shape[1]) if lengths is None else lengths[rows]
        return [
            [np.ascontiguousarray(V[i, : L[i, k]], dtype=np.float32) for i in range(len(V))]
            for k, V in enumerate(self.views(X))
        ]

    @classmethod
    def from_sequences(cls, ids: Any, views: list[list[np.ndarray]], y: Any = None) -> PartyData:
        """Variable-length sequences ``views[k][i]`` (``(T_ik, c_k)``) padded into one ``X``."""
        n, T = len(views[0]), max(len(s) for v in views for s in v)
        dims = tuple(int(v[0].shape[1]) for v in views)
        X = np.zeros((n, T, sum(dims)), dtype=np.float32)
        lengths = np.zeros((n, len(views)), dtype=np.int64)
        start = 0
        for k, v in enumerate(views):
            for i, s in enumerate(v):
                X[i, : len(s), start : start + dims[k]] = s
                lengths[i, k] = len(s)
            start += dims[k]
        return cls(np.asarray(ids), X, y, view_dims=dims, lengths=lengths)

    def take(self, rows: np.ndarray) -> PartyData:
        """The training rows ``rows`` (the test split is dropped)."""
        return PartyData(
            self.ids[rows],
            self.features[rows],
            None if self.y is None else self.y[rows],
            view_dims=self.view_dims,
            lengths=None if self.lengths is None else self.lengths[rows],
        )

    def views(self, X: np.ndarray) -> list[np.ndarray]:
        """``X`` (rows of this party's ``X`` or ``X_test``) cut into its views along the last axis."""
        dims = self.view_dims or (X.shape[-1],)
        cuts = np.cumsum(dims)[:-1]
        return list(np.split(X, cuts, axis=-1))

    def arrays(self) -> dict[str, np.ndarray]:
        names = (
            "ids",
            "X",
            "y",
            "ids_test",
            "X_test",
            "y_test",
            "lengths",
            "lengths_test",
            "group",
        )
        out = {k: getattr(self, k) for k in names if getattr(self, k) is not None}
        if self.view_dims is not None:
            out["view_dims"] = np.asarray(self.view_dims, dtype=np.int64)
        if self.features.shape[1:] == (0,):  # a party without features
            out.pop("X")
            out.pop("X_test", None)
        return out


def deal_views(
    dataset: str,
    *,
    views: tuple[str, ...] = (),
    label_owner: str = "",
    n_per_class: int = 0,
    overlap: float = 1.0,
    n_test: int = 0,
    seed: int = 0,
) -> dict[str, PartyData]:
    """One :class:`PartyData` per view of a built-in dataset, as separate organisations hold it.

    ``n_per_class``: a balanced subsample first (0 = all). ``n_test``: a stratified
    held-out split that every party holds (its ``X_test``; the label owner also its
    ``y_test``). Each party keeps a random ``overlap`` fraction of the training
    samples (so the parties share only part of their IDs and must align them), in
    its own random order; only ``label_owner`` (default: the first view) gets the
    labels. Keys are the view names, in the dataset's order.
    """
    if not 0 < overlap <= 1:
        raise ConfigError(f"overlap = {overlap!r} must be in (0, 1]")
    ds = load(dataset, **({"views": list(views)} if views else {}))
    if n_per_class:
        ds = ds.subset(balanced_subsample(ds.y, n_per_class, random_state=seed))
    owner = label_owner or ds.view_names[0]
    if owner not in ds.view_names:
        raise DataError(f"label owner {owner!r} is not a view of {dataset}: {ds.view_names}")
    y = np.asarray(ds.y)
    tr, te = held_out_split(y, n_test, seed)
    rng = np.random.default_rng(seed)
    out: dict[str, PartyData] = {}
    for name, X in zip(ds.view_names, ds.views, strict=True):
        keep = tr[rng.permutation(len(tr))[: max(1, int(round(overlap * len(tr))))]]
        test: dict[str, Any] = {}
        if len(te):
            tperm = te[rng.permutation(len(te))]
            test = {"ids_test": ds.ids[tperm], "X_test": X[tperm]}
            if name == owner:
                test["y_test"] = y[tperm]
        out[name] = PartyData(ds.ids[keep], X[keep], y[keep] if name == owner else None, **test)
    return out


def standardized_with(X: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
    """``X`` with its columns scaled by their own mean and standard deviation, and the two.

    Constant columns get scale 1. A party applies it to its own view with its own
    statistics; nothing crosses.
    """
    mu, sd = X.mean(axis=0), X.std(axis=0)
    sd[sd < 1e-12] = 1.0
    return (X - mu) / sd, (mu, sd)


def standardized(X: np.ndarray) -> np.ndarray:
    """Columns scaled with their own mean and standard deviation (constant columns: scale 1).

    A party applies it to its own view with its own statistics; nothing crosses.
    """
    return standardized_with(X)[0]
