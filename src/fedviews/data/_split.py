"""Sample splits: balanced subsamples, stratified k-fold, and client partitions.

Every function returns integer positions (indices into ``y``), is reproducible
from ``random_state`` and raises :class:`~fedviews.errors.DataError` when the
request is impossible for the given labels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedviews._registry import Registry
from fedviews.errors import ConfigError, DataError

RandomState = int | np.random.Generator | None


def _labels(y: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(classes, codes, counts)`` of a 1-D label vector."""
    arr = np.asarray(y)
    if arr.ndim != 1 or arr.size == 0:
        raise DataError(f"y must be a non-empty 1-D label vector, got shape {arr.shape}")
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise DataError("y contains NaN or infinite labels")
    try:
        classes, codes, counts = np.unique(arr, return_inverse=True, return_counts=True)
    except TypeError:  # an object array mixing e.g. str and int labels
        raise DataError("y mixes labels of different types; convert them to one type") from None
    return classes, codes.ravel(), counts


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise DataError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def balanced_subsample(y: Any, n_per_class: int, random_state: RandomState = None) -> np.ndarray:
    """Draw ``n_per_class`` samples of every class, without replacement.

    Parameters
    ----------
    y : array-like, shape (n,)
        Labels.
    n_per_class : int
    random_state : int, Generator or None

    Returns
    -------
    ndarray of int
        Sorted positions into ``y`` (``n_classes * n_per_class`` of them).

    Raises
    ------
    DataError
        A class has fewer than ``n_per_class`` samples.
    """
    classes, codes, counts = _labels(y)
    n_per_class = _positive_int(n_per_class, "n_per_class")
    if counts.min() < n_per_class:
        short = {str(c): int(k) for c, k in zip(classes, counts, strict=True) if k < n_per_class}
        raise DataError(f"cannot draw {n_per_class} samples per class; classes {short} have fewer")
    rng = np.random.default_rng(random_state)
    picks = [
        rng.choice(np.flatnonzero(codes == c), n_per_class, replace=False)
        for c in range(len(classes))
    ]
    return np.sort(np.concatenate(picks))


def stratified_kfold(
    y: Any, n_splits: int = 5, random_state: RandomState = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Shuffled stratified k-fold: every test fold has (nearly) the same class counts.

    Wraps :class:`sklearn.model_selection.StratifiedKFold` (``shuffle=True``);
    when every class count is divisible by ``n_splits`` the per-class counts of
    all test folds are equal.

    Parameters
    ----------
    y : array-like, shape (n,)
    n_splits : int, at least 2
    random_state : int, Generator or None

    Returns
    -------
    list of (train_idx, test_idx)
        ``n_splits`` pairs of sorted positions; the test folds partition ``range(n)``.

    Raises
    ------
    DataError
        ``n_splits < 2`` or some class has fewer than ``n_splits`` samples.
    """
    from sklearn.model_selection import StratifiedKFold

    classes, codes, counts = _labels(y)
    n_splits = _positive_int(n_splits, "n_splits")
    if n_splits < 2:
        raise DataError(f"n_splits must be at least 2, got {n_splits}")
    if counts.min() < n_splits:
        smallest = str(classes[int(np.argmin(counts))])
        raise DataError(
            f"cannot make {n_splits} stratified folds: class {smallest} has only "
            f"{int(counts.min())} samples"
        )
    seed = int(np.random.default_rng(random_state).integers(2**31 - 1))
    skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=seed)
    return [
        (np.sort(train), np.sort(test)) for train, test in skf.split(np.zeros(len(codes)), codes)
    ]


# --------------------------------------------------------------------------- client partitions

_Partitioner = Callable[[np.ndarray, int, np.random.Generator, dict[str, Any]], list[np.ndarray]]
_SCHEMES: Registry[_Partitioner] = Registry("partition scheme")


@_SCHEMES.register("iid")
def _iid(
    codes: np.ndarray, n_clients: int, rng: np.random.Generator, _: dict[str, Any]
) -> list[np.ndarray]:
    # shuffle, group by class, deal round-robin: sizes and per-class counts differ by <= 1
    order = rng.permutation(len(codes))
    order = order[np.argsort(codes[order], kind="stable")]
    return [order[c::n_clients] for c in range(n_clients)]


@_SCHEMES.register("label_skew")
def _label_skew(
    codes: np.ndarray, n_clients: int, rng: np.random.Generator, opts: dict[str, Any]
) -> list[np.ndarray]:
    n_classes = int(codes.max()) + 1
    k = _positive_int(opts["classes_per_client"], "classes_per_client")
    if k > n_classes:
        raise DataError(f"classes_per_client={k} exceeds the {n_classes} classes in y")
    if n_clients * k < n_classes:
        raise DataError(
            f"{n_clients} clients x {k} classes each cannot cover {n_classes} classes; "
            f"use classes_per_client >= {-(-n_classes // n_clients)}"
        )
    # client c holds k consecutive classes of a random class order (wrapping around)
    perm = rng.permutation(n_classes)
    holders: dict[int, list[int]] = {int(c): [] for c in range(n_classes)}
    for client in range(n_clients):
        for j in range(k):
            holders[int(perm[(client * k + j) % n_classes])].append(client)
    parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
    for cls, owners in holders.items():
        members = rng.permutation(np.flatnonzero(codes == cls))
        if len(members) < len(owners):
            raise DataError(
                f"class index {cls} has {len(members)} samples for {len(owners)} clients; "
                "use fewer clients or fewer classes_per_client"
            )
        for owner, chunk in zip(owners, np.array_split(members, len(owners)), strict=True):
            parts[owner].append(chunk)
    return [np.concatenate(p) for p in parts]


@_SCHEMES.register("dirichlet")
def _dirichlet(
    codes: np.ndarray, n_clients: int, rng: np.random.Generator, opts: dict[str, Any]
) -> list[np.ndarray]:
    alpha = opts["alpha"]
    if not isinstance(alpha, (int, float, np.floating, np.integer)) or not alpha > 0:
        raise DataError(f"alpha must be a positive number, got {alpha!r}")
    n_classes = int(codes.max()) + 1
    for _attempt in range(100):
        parts: list[list[np.ndarray]] = [[] for _ in range(n_clients)]
        for cls in range(n_classes):
            members = rng.permutation(np.flatnonzero(codes == cls))
            shares = rng.dirichlet(np.full(n_clients, float(alpha)))
            cuts = (np.cumsum(shares)[:-1] * len(members)).astype(np.int64)
            for client, chunk in enumerate(np.split(members, cuts)):
                parts[client].append(chunk)
        out = [np.concatenate(p) for p in parts]
        if min(len(p) for p in out) > 0:
            return out
    raise DataError(
        f"Dirichlet(alpha={alpha}) left a client empty in 100 draws; "
        "use a larger alpha or fewer clients"
    )


def partition_clients(
    y: Any,
    n_clients: int,
    scheme: str = "iid",
    *,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    random_state: RandomState = None,
) -> list[np.ndarray]:
    """Partition the samples among ``n_clients`` (horizontal federated split).

    Parameters
    ----------
    y : array-like, shape (n,)
        Labels.
    n_clients : int
    scheme : {"iid", "label_skew", "dirichlet"}
        ``"iid"``: shuffled, every client gets the same share of every class
        (sizes differ by at most one per class). ``"label_skew"``: each client
        holds ``classes_per_client`` classes (every class goes to at least one
        client; a class held by several clients is split evenly among them).
        ``"dirichlet"``: each class is split with proportions drawn from
        ``Dirichlet(alpha)`` (small ``alpha`` = more skew); redrawn until no
        client is empty.
    alpha : float
        Concentration for ``"dirichlet"``.
    classes_per_client : int
        For ``"label_skew"``.
    random_state : int, Generator or None

    Returns
    -------
    list of ndarray of int
        ``n_clients`` sorted, disjoint, non-empty index arrays covering ``range(n)``.

    Raises
    ------
    ConfigError
        Unknown ``scheme``.
    DataError
        The partition is impossible (more clients than samples, classes cannot
        be covered, ...).
    """
    _, codes, _ = _labels(y)
    n_clients = _positive_int(n_clients, "n_clients")
    partition = _SCHEMES.get(str(scheme))
    if n_clients > len(codes):
        raise DataError(f"cannot give {n_clients} clients at least one of {len(codes)} samples")
    rng = np.random.default_rng(random_state)
    opts = {"alpha": alpha, "classes_per_client": classes_per_client}
    return [np.sort(p) for p in partition(codes, n_clients, rng, opts)]


def held_out_split(y: np.ndarray, n_test: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified ``(train, test)`` positions of ``y``, each sorted; ``n_test = 0``: no test samples."""
    idx = np.arange(len(y))
    if not n_test:
        return idx, idx[:0]
    from sklearn.model_selection import train_test_split

    if not 0 < n_test < len(y):
        raise ConfigError(f"data.n_test = {n_test} must lie in (0, {len(y)})")
    _, _, counts = _labels(y)
    if n_test < len(counts) or len(y) - n_test < len(counts) or counts.min() < 2:
        raise ConfigError(
            f"data.n_test = {n_test}: a stratified split of {len(y)} samples needs at least "
            f"{len(counts)} test and {len(counts)} training samples (one per class) and two "
            f"samples of every class (the smallest class has {int(counts.min())})"
        )
    tr, te = train_test_split(idx, test_size=n_test, stratify=y, random_state=seed)
    return np.sort(tr), np.sort(te)
