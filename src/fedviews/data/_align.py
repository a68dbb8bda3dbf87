"""Sample-ID alignment: find the samples every party holds and where each party keeps them.

:func:`align` separates *what* is computed (the common IDs, then each party's
positions of them) from *how* the common IDs are found. The "how" is an
intersection method looked up by name; ``"plain"`` compares the IDs in the
clear. A private-set-intersection protocol registers itself with
:func:`register_intersection` (e.g. ``fedviews.privacy`` registering ``"psi"``)
and is then used with ``align(..., method="psi")`` without changing callers.
Methods live in a :class:`~fedviews._registry.Registry` whose providers are
imported on the first unknown name, so this layer never imports the layers
above it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fedviews._registry import Registry
from fedviews.data._validation import check_ids
from fedviews.errors import DataError

#: ``intersect(id_arrays) -> sorted unique common IDs``
Intersection = Callable[[Sequence[np.ndarray]], np.ndarray]

#: intersection methods by name; ``fedviews.privacy`` (imported on the first
#: unknown name, as a module name only) registers ``"psi"``
_METHODS: Registry[Intersection] = Registry("alignment method", ("fedviews.privacy",))


def register_intersection(name: str) -> Callable[[Intersection], Intersection]:
    """Function decorator: make an ID-intersection method available to :func:`align`.

    The function receives one validated, duplicate-free ID array per party and
    returns the common IDs sorted ascending.

    Raises
    ------
    ConfigError
        Another function is already registered under ``name``.
    """
    return _METHODS.register(name)


@register_intersection("plain")
def _plain(id_arrays: Sequence[np.ndarray]) -> np.ndarray:
    common = id_arrays[0]
    for ids in id_arrays[1:]:
        common = np.intersect1d(common, ids, assume_unique=True)
    return np.sort(common)


def _id_kind(ids: np.ndarray) -> str:
    return {"U": "str", "S": "bytes", "i": "int", "u": "int"}.get(ids.dtype.kind, ids.dtype.kind)


def _common_int_type(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """Integer ID lists as one integer dtype (numpy would compare int64 with uint64 as
    float64, which merges distinct IDs above 2**53)."""
    if np.result_type(*arrays).kind != "f":
        return arrays
    if all(a.dtype.kind == "i" or not len(a) or a.max() <= np.iinfo(np.int64).max for a in arrays):
        return [a.astype(np.int64) for a in arrays]
    if all(a.dtype.kind == "u" or not len(a) or a.min() >= 0 for a in arrays):
        return [a.astype(np.uint64) for a in arrays]
    raise DataError("ID lists mix negative int64 and uint64 IDs beyond 2**63; convert them first")


def align(*id_lists: Any, method: str = "plain") -> list[np.ndarray]:
    """Return, for each party, the positions of the IDs that all parties share.

    Parameters
    ----------
    *id_lists : array-like, each 1-D
        One ID list per party (strings or integers, unique within a party).
    method : str
        Intersection method: ``"plain"`` (IDs compared in the clear), ``"psi"``
        (private set intersection of :mod:`fedviews.privacy`; needs the ``grpc``
        extra) or one registered with :func:`register_intersection`.

    Returns
    -------
    list of ndarray of int
        ``positions[p][i]`` is where party ``p`` holds the ``i``-th common ID;
        common IDs are in ascending order, so ``ids_p[positions[p]]`` is the same
        array for every party.

    Raises
    ------
    ConfigError
        Unknown ``method``.
    MissingDependency
        ``method="psi"`` without the ``grpc`` extra.
    DataError
        No ID lists, an ID list with duplicates, ID lists of different types
        (strings vs integers), or no ID common to all parties.

    Examples
    --------
    >>> pa, pb = align(["c", "a", "b"], ["b", "d", "c"])
    >>> pa.tolist(), pb.tolist()
    ([2, 0], [0, 2])
    """
    if not id_lists:
        raise DataError("align needs at least one ID list")
    intersect = _METHODS.get(method)
    arrays = [check_ids(ids, name=f"ids of party {p}") for p, ids in enumerate(id_lists)]
    kinds = {_id_kind(a) for a in arrays}
    if len(kinds) > 1:
        raise DataError(f"ID lists mix types {sorted(kinds)}; convert them to one type first")
    if kinds == {"int"}:
        arrays = _common_int_type(arrays)
    common = intersect(arrays)
    if len(common) == 0:
        raise DataError(f"the {len(arrays)} parties share no sample ID; nothing to align")
    positions = []
    for ids in arrays:
        order = np.argsort(ids, kind="stable")
        pos = order[np.searchsorted(ids[order], common)]
        if not np.array_equal(ids[pos], common):
            raise DataError(f"alignment method {method!r} returned IDs that a party does not hold")
        positions.append(pos.astype(np.int64))
    return positions


def align_views(
    Xs: Sequence[Any], ids_list: Sequence[Any], *, method: str = "plain"
) -> tuple[list[np.ndarray], np.ndarray]:
    """Restrict each party's view to the common samples, in the same order.

    Parameters
    ----------
    Xs : sequence of array-like
        One array per party, rows are samples (any number of trailing dimensions).
    ids_list : sequence of array-like
        ``ids_list[p]`` gives the sample ID of every row of ``Xs[p]``.
    method : str
        Passed to :func:`align`.

    Returns
    -------
    (aligned_Xs, common_ids)
        ``aligned_Xs[p] = Xs[p][positions[p]]`` and the sorted common IDs.

    Raises
    ------
    DataError
        ``Xs`` and ``ids_list`` differ in length, a view's row count differs
        from its ID list, or :func:`align` fails.
    """
    if len(Xs) != len(ids_list):
        raise DataError(f"{len(Xs)} views but {len(ids_list)} ID lists")
    arrays = [np.asarray(X) for X in Xs]
    id_arrays = [np.asarray(ids) for ids in ids_list]
    for p, (X, ids) in enumerate(zip(arrays, id_arrays, strict=True)):
        rows = X.shape[0] if X.ndim else 0
        if ids.ndim != 1 or rows != len(ids):
            raise DataError(f"view {p} has {rows} rows but its ID list has shape {ids.shape}")
    positions = align(*id_arrays, method=method)
    return [X[pos] for X, pos in zip(arrays, positions, strict=True)], id_arrays[0][positions[0]]
