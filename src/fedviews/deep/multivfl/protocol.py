"""Multi-VFL's pure helpers that the spec, the parties and the estimator share (torch-free).

The shuffling seeds both sides of a split batch derive (:func:`round_seed`,
:func:`epoch_order`: no sample index crosses), and how the training labels are dealt
to the K label owners (:func:`label_owner_classes`, :func:`partition_label_owners`,
paper Table 3), and the shapes of the split network (:func:`input_shape`,
:func:`combined_shape`).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from fedviews._estimator import is_int
from fedviews.errors import ConfigError, DataError

_NIID = re.compile(r"^(\d+)niid$")


# --------------------------------------------------------------------------- rounds


def round_seed(random_state: int, round_: int) -> int:
    """The shuffling seed the server hands to every label owner in round ``round_``."""
    return int(np.random.default_rng([random_state, round_]).integers(2**31))


def epoch_order(seed: int, round_: int, epoch: int, n: int) -> np.ndarray:
    """The shuffled sample order of one local epoch, derived from a seed both sides know."""
    return np.random.default_rng([seed, round_, epoch]).permutation(n)


# --------------------------------------------------------------------------- shapes


def input_shape(features_shape: Sequence[int]) -> tuple[int, ...]:
    """The per-sample shape a data owner's bottom model gets from its features of shape
    ``(n, ...)``: image strips ``(n, rows, width)`` as one grey channel ``(1, rows, width)``,
    anything else as it is (table columns ``(n, k)``: ``(k,)``)."""
    rest = tuple(int(s) for s in features_shape[1:])
    return (1, *rest) if len(rest) == 2 else rest


def model_input(X: np.ndarray) -> np.ndarray:
    """A data owner's features ``(n, ...)`` as its bottom model takes them (:func:`input_shape`)."""
    return X.reshape(len(X), *input_shape(X.shape))


def cut_axis(sample_ndim: int) -> int:
    """The per-sample axis along which the data owners' activations are joined: the height of
    ``(C, h_d, W)`` maps (the strips' rows, top to bottom), else the first (``(e_d, ...)``)."""
    return 1 if sample_ndim == 3 else 0


def combined_shape(shapes: Sequence[Sequence[int]], owners: Sequence[str]) -> tuple[int, ...]:
    """The per-sample shape of the data owners' activations joined along :func:`cut_axis`
    (the top model's input); a :class:`DataError` naming the owner whose shape does not fit."""
    first = tuple(int(s) for s in shapes[0])
    if not first:
        raise DataError(
            f"the bottom model of {owners[0]!r} returns one number per sample, not a vector"
        )
    axis = cut_axis(len(first))
    for d, shape in zip(owners, shapes, strict=True):
        s = tuple(int(v) for v in shape)
        if len(s) != len(first) or s[:axis] + s[axis + 1 :] != first[:axis] + first[axis + 1 :]:
            raise DataError(
                f"the bottom model of {d!r} returns activations of per-sample shape {s}, which "
                f"cannot be joined along axis {axis + 1} with those of {owners[0]!r}, {first}"
            )
    return (*first[:axis], sum(int(s[axis]) for s in shapes), *first[axis + 1 :])


# --------------------------------------------------------------------------- labels


def label_owner_classes(scenario: str, n_label_owners: int, n_classes: int) -> list[list[int]]:
    """Classes each label owner holds under ``scenario``.

    ``"iid"``: every owner holds every class. ``"<m>niid"`` (paper Table 3):
    the last ``m`` owners hold two classes each, ``{0,1}, {2,3}, ...``; the
    others hold every class. With 5 owners, ``"4niid"`` gives
    ``[0-9, {0,1}, {2,3}, {4,5}, {6,7}]``.

    Raises
    ------
    ConfigError
        Unknown scenario, or ``m`` larger than the number of owners or ``n_classes // 2``.
    """
    every = list(range(n_classes))
    if scenario == "iid":
        return [every for _ in range(n_label_owners)]
    match = _NIID.match(scenario) if isinstance(scenario, str) else None
    if match is None:
        raise ConfigError(
            f"unknown scenario {scenario!r}; use 'iid' or '<m>niid' such as '4niid' (paper Table 3)"
        )
    m = int(match.group(1))
    if not 1 <= m <= n_label_owners or 2 * m > n_classes:
        raise ConfigError(
            f"scenario {scenario!r} needs 1 <= {m} <= n_label_owners={n_label_owners} "
            f"and 2*{m} <= n_classes={n_classes}"
        )
    n_iid = n_label_owners - m
    return [every] * n_iid + [[2 * j, 2 * j + 1] for j in range(m)]


def _quota(total: int, counts: np.ndarray) -> np.ndarray:
    """Split ``total`` over classes in proportion to ``counts`` (largest remainder)."""
    share = total * counts / counts.sum()
    quota = np.floor(share).astype(np.int64)
    quota[np.argsort(quota - share, kind="stable")[: total - int(quota.sum())]] += 1
    return quota


def _demand(
    per_owner: int, counts: np.ndarray, owner_classes: Sequence[Sequence[int]]
) -> np.ndarray:
    """Samples of each class that the owners' quotas take at ``per_owner`` samples each."""
    need = np.zeros(len(counts), dtype=np.int64)
    for classes in owner_classes:
        need[list(classes)] += _quota(per_owner, counts[list(classes)])
    return need


def fitting_samples_per_owner(counts: np.ndarray, owner_classes: Sequence[Sequence[int]]) -> int:
    """The default ``samples_per_owner``: the largest count up to ``sum(counts) // K`` whose
    class quotas (:func:`_quota`) every class has samples for, found by bisection.

    ``len(y) // K`` itself can overdraw a class (each owner's quota of it is rounded up), and
    two-class owners draw a larger share of their classes. Returns 0 when not even one
    sample per owner fits (a class an owner needs is absent); the caller reports it.
    """
    lo, hi = 0, int(counts.sum()) // len(owner_classes) + 1  # lo fits (or is 0), hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if (_demand(mid, counts, owner_classes) <= counts).all():
            lo = mid
        else:
            hi = mid
    return lo


def partition_label_owners(
    y: np.ndarray,
    scenario: str,
    n_label_owners: int,
    samples_per_owner: int | None,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Disjoint sample indices for each label owner, class-balanced within each owner.

    Each owner gets ``samples_per_owner`` samples of its classes
    (:func:`label_owner_classes`), split over them in proportion to the class
    frequencies of ``y`` (a stratified draw: balanced classes stay balanced), drawn
    without replacement; the two-class owners draw first. ``None`` (default): the
    largest count up to ``len(y) // K`` that the scenario's class quotas leave room for
    (:func:`fitting_samples_per_owner`), so any data with every class present fits.

    Raises
    ------
    DataError
        A class has too few samples left for the requested counts.
    ConfigError
        ``samples_per_owner`` < 1.
    """
    n_classes = int(y.max()) + 1
    if samples_per_owner is not None and not is_int(samples_per_owner, 1):
        raise ConfigError(
            f"samples_per_owner must be a positive integer or None, got {samples_per_owner!r}"
        )
    owner_classes = label_owner_classes(scenario, n_label_owners, n_classes)
    counts = np.bincount(y, minlength=n_classes)
    per_owner = (
        # 0 fits: ask for 1, so that the draw below names the class that is missing
        fitting_samples_per_owner(counts, owner_classes) or min(1, len(y) // n_label_owners)
        if samples_per_owner is None
        else int(samples_per_owner)
    )
    if per_owner < 1:
        raise ConfigError(
            f"each label owner would get {per_owner} samples (samples_per_owner={samples_per_owner}, "
            f"{len(y)} samples, {n_label_owners} label owners); every label owner needs samples"
        )
    pools = [list(rng.permutation(np.flatnonzero(y == c))) for c in range(n_classes)]
    parts: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * n_label_owners
    for k in sorted(range(n_label_owners), key=lambda j: len(owner_classes[j])):
        classes = owner_classes[k]
        quota = _quota(per_owner, counts[classes])
        taken = []
        for c, q in zip(classes, quota, strict=True):
            if len(pools[c]) < q:
                raise DataError(
                    f"scenario {scenario!r}: label owner {k} needs {q} samples of class {c} but only "
                    f"{len(pools[c])} are left; lower samples_per_owner (now {per_owner})"
                )
            taken.extend(pools[c][:q])
            pools[c] = pools[c][q:]
        parts[k] = np.sort(np.asarray(taken, dtype=np.int64))
    return parts


def warn_shared_samples(rows: Mapping[str, np.ndarray]) -> None:
    """A :class:`~fedviews.errors.DataWarning` where two label owners hold some of the same
    training samples (the first data owner sees it from the alignment: its rows of each
    label owner's group). The paper's label owners hold distinct samples; a shared one trains
    at each of them every round, and whether their labels agree cannot be checked without
    one of them seeing the other's labels."""
    from fedviews.errors import DataWarning

    owners = list(rows)
    shared = [
        f"{a!r} and {b!r} both hold {n}"
        for i, a in enumerate(owners)
        for b in owners[i + 1 :]
        if (n := len(np.intersect1d(rows[a], rows[b])))
    ]
    if shared:
        warnings.warn(
            f"label owners share training samples ({'; '.join(shared)}): each trains on them "
            "every round, and conflicting labels would go unnoticed (Multi-VFL's label owners "
            "hold distinct samples)",
            DataWarning,
            stacklevel=2,
        )
