"""One way to validate views, labels and sample IDs (used everywhere)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError


def refuse_sparse(X: Any, name: str) -> None:
    """A :class:`DataError` naming ``name`` if ``X`` is a scipy.sparse matrix or array: the
    algorithms take dense arrays. (scipy is not imported for the check: without
    ``scipy.sparse`` loaded, nothing can be one.)"""
    sparse = sys.modules.get("scipy.sparse")
    if sparse is not None and sparse.issparse(X):
        raise DataError(
            f"{name} is a scipy.sparse {type(X).__name__}; fedviews' algorithms take dense "
            "arrays: pass its .toarray() (mind the memory of a dense copy)"
        )


def check_numeric(X: Any, name: str) -> np.ndarray:
    """``X`` as a numpy array of real numbers (bool, int or float), its dtype kept.

    Raises
    ------
    DataError
        Naming ``name``: a scipy.sparse matrix (the algorithms need dense arrays), complex
        values, strings or objects, or ragged nested lists.
    """
    refuse_sparse(X, name)
    try:
        arr = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name} is not numeric: {exc}") from None
    if arr.dtype.kind == "c":
        raise DataError(
            f"{name} holds complex values ({arr.dtype}); the models take real features: pass "
            "its real part (.real), or the real and imaginary parts as separate features"
        )
    if arr.dtype.kind not in "biuf":  # numeric strings or objects would convert silently
        raise DataError(
            f"{name} holds {arr.dtype} values; it must be numbers (bool, int or float), not "
            "strings or objects: convert it first"
        )
    return arr


def check_view(X: Any, *, name: str = "X") -> np.ndarray:
    """One view ``(n_samples, d)`` as a 2-D float64 array, named ``name`` in the errors (a
    party's own view at prediction: ``"X (party 2's view)"``, not the ``X[0]`` of a list).

    Raises
    ------
    DataError
        If it is not 2-D, is empty, sparse, complex, or contains NaN or infinite values.
    """
    arr = check_numeric(X, name).astype(np.float64, copy=False)
    if arr.ndim != 2:
        raise DataError(f"{name} must be 2-D (n_samples, n_features), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"{name} is empty (shape {arr.shape})")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise DataError(f"{name} contains {bad} NaN or infinite values; impute or drop them first")
    return arr


def check_Xs(
    Xs: Any,
    *,
    n_views: int | None = None,
    n_samples: int | None = None,
    n_features: Sequence[int] | None = None,
    name: str = "Xs",
) -> list[np.ndarray]:
    """Validate a multi-view input and return it as a list of 2-D float64 arrays.

    Parameters
    ----------
    Xs : sequence of array-like, each ``(n_samples, d_k)``
        One array per view; all views must have the same number of rows.
    n_views, n_samples : int, optional
        Expected number of views / rows.
    n_features : sequence of int, optional
        Expected width of each view (used at prediction time).

    Raises
    ------
    DataError
        If a view is not 2-D, views disagree on the number of samples, a view is
        empty, sparse, complex, or contains NaN or infinite values.
    """
    if isinstance(Xs, np.ndarray) and Xs.ndim == 2:
        raise DataError(
            f"{name} must be a list of views (one 2-D array per view), got one 2-D array"
        )
    if not isinstance(Xs, (list, tuple)) or len(Xs) == 0:
        raise DataError(f"{name} must be a non-empty list of 2-D arrays, got {type(Xs).__name__}")
    if n_views is not None and len(Xs) != n_views:
        raise DataError(f"{name} has {len(Xs)} views, expected {n_views}")
    out = [check_view(X, name=f"{name}[{k}]") for k, X in enumerate(Xs)]
    rows = {a.shape[0] for a in out}
    if len(rows) != 1:
        raise DataError(
            f"views of {name} disagree on the number of samples: {[a.shape[0] for a in out]}; "
            "align them by sample ID first (fedviews.data.align)"
        )
    if n_samples is not None and out[0].shape[0] != n_samples:
        raise DataError(f"{name} has {out[0].shape[0]} samples, expected {n_samples}")
    if n_features is not None:
        for k, (arr, d) in enumerate(zip(out, n_features, strict=False)):
            if arr.shape[1] != d:
                raise DataError(
                    f"{name}[{k}] has {arr.shape[1]} features, the model was fit with {d}"
                )
    return out


def check_y(y: Any, n_samples: int, *, name: str = "y") -> np.ndarray:
    """Validate a label vector of length ``n_samples``: any hashable, non-missing labels, or a
    real target (an algorithm may regress; the estimators check classes with
    :func:`~fedviews.data.check_classes`)."""
    refuse_sparse(y, name)
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-D (n_samples,), got shape {arr.shape}")
    if arr.shape[0] != n_samples:
        raise DataError(f"{name} has {arr.shape[0]} labels but the views have {n_samples} samples")
    if arr.dtype.kind == "c":
        raise DataError(f"{name} holds complex values ({arr.dtype}); labels must be real")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise DataError(f"{name} contains NaN or infinite labels")
    if arr.dtype.kind == "O":
        if any(v is None or (isinstance(v, float) and not np.isfinite(v)) for v in arr):
            raise DataError(f"{name} contains missing (None or NaN) labels")
        _sortable(arr, name, "labels")
    return arr


def check_classes(y: Any, n_samples: int, *, name: str = "y") -> np.ndarray:
    """:func:`~fedviews.data.check_y` for a classifier (every fedviews estimator): float
    labels must be integral (``1.0``); a continuous target is a :class:`DataError`, not one
    class per distinct value."""
    arr = check_y(y, n_samples, name=name)
    if arr.dtype.kind == "f":
        fractional = arr[arr != np.round(arr)]
        if len(fractional):
            raise DataError(
                f"{name} holds continuous values (e.g. {fractional[0]:g}; {len(np.unique(arr))} "
                f"distinct values in {len(arr)} labels); fedviews' estimators are classifiers: "
                "pass class labels (integers, strings, or integral floats such as 1.0)"
            )
    return arr


def _sortable(arr: np.ndarray, name: str, what: str) -> None:
    """A ``DataError`` unless the values of an object array can be compared (not str vs int)."""
    try:
        np.unique(arr)
    except TypeError:
        kinds = sorted({type(v).__name__ for v in arr})
        raise DataError(f"{name} mixes {what} of types {kinds}; convert them to one type") from None


def check_ids(ids: Any, *, name: str = "ids") -> np.ndarray:
    """Validate a vector of unique sample IDs."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.dtype.kind == "O":  # e.g. a pandas column of strings: a str array, like the rest
        _sortable(arr, name, "IDs")
        if len(arr) and all(isinstance(v, str) for v in arr):
            arr = arr.astype(str)
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():  # (a NaN matches no ID, not even
        bad = int((~np.isfinite(arr)).sum())  # another NaN: its row would vanish unnamed)
        raise DataError(f"{name} contains {bad} NaN or infinite IDs; every row needs an ID")
    if arr.dtype.kind == "U" and len(arr):  # an empty cell read as the ID "" matches no row
        blank = np.flatnonzero(np.char.strip(arr) == "")
        if len(blank):
            raise DataError(
                f"{name} contains {len(blank)} empty ID(s) (row {int(blank[0])} first); every "
                "row needs an ID"
            )
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        dup = uniq[counts > 1][:5].tolist()
        raise DataError(f"{name} contains duplicated IDs, e.g. {dup}")
    return arr


def check_rows(index: Any, n: int) -> np.ndarray:
    """Positions ``0 <= i < n`` from integer positions or a boolean mask of length ``n``; a
    :class:`DataError` for anything else, or for a selection of no row."""
    arr = np.asarray(index)
    if arr.dtype == bool:
        if arr.shape != (n,):
            raise DataError(f"a boolean mask of shape {arr.shape} for {n} samples")
        arr = np.flatnonzero(arr)
    elif arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise DataError(
            f"rows must be integer positions or a boolean mask, got {arr.dtype} {arr.shape}"
        )
    if arr.size == 0:
        raise DataError("the selection holds no row")
    if arr.min() < 0 or arr.max() >= n:
        raise DataError(f"row positions must lie in 0..{n - 1}, got {arr.min()}..{arr.max()}")
    return arr


def check_view_names(views: Any, valid: Sequence[str], *, dataset: str) -> list[str]:
    """Return the view names a loader's ``views`` option asks for, in that order.

    ``None`` means all of ``valid``; a single string is one name. Raises
    ``ConfigError`` unless the names are distinct, non-empty and all in ``valid``.
    """
    names = list(valid) if views is None else ([views] if isinstance(views, str) else list(views))
    unknown = [repr(v) for v in names if v not in valid]
    repeated = sorted({repr(v) for v in names if names.count(v) > 1})
    problem = ""
    if unknown:
        problem = f"unknown view{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}"
    elif repeated:
        problem = f"{', '.join(repeated)} named twice"
    elif not names:
        problem = "no view named"
    if problem:
        raise ConfigError(
            f"{dataset}: views={names!r}: {problem}; the views are {list(valid)} "
            "(a list of distinct names)"
        )
    return names


def one_hot(y: np.ndarray, classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(Y, classes)`` with ``Y`` the ``(n, n_classes)`` one-hot float matrix of ``y``."""
    if classes is None:
        classes = np.unique(y)
    index = {c: i for i, c in enumerate(classes.tolist())}
    try:
        cols = np.fromiter((index[c] for c in y.tolist()), dtype=np.int64, count=len(y))
    except KeyError as exc:
        raise DataError(f"label {exc.args[0]!r} was not seen during fit") from None
    Y = np.zeros((len(y), len(classes)), dtype=np.float64)
    Y[np.arange(len(y)), cols] = 1.0
    return Y, classes
