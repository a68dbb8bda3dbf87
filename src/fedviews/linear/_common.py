"""Helpers shared by the linear multi-view algorithms."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
from threadpoolctl import threadpool_limits

from fedviews._estimator import accuracy
from fedviews._params import COUNT, POSITIVE, TOL, check_value
from fedviews._persist import Persistent
from fedviews.data import PartyData, check_view
from fedviews.errors import ConfigError, DataError, check_fitted
from fedviews.federation import Algorithm, Coordinator, RunSpec


@contextlib.contextmanager
def small_blas() -> Iterator[None]:
    """Run BLAS single-threaded inside the IRLS loops.

    The loops factorise many small (d <= a few thousand) matrices; multi-threaded
    OpenBLAS spends more time synchronising than computing on them, and on a busy
    2-core machine it was measured 100x slower (0.7 ms vs 96 ms per Woodbury step
    on a 200 x 300 view).
    """
    with threadpool_limits(limits=1, user_api="blas"):
        yield


#: a party's own training column means and standard deviations (``params.standardize``)
Scaler = tuple[np.ndarray, np.ndarray]


def scaled(X: np.ndarray, scaler: Scaler | None) -> np.ndarray:
    """``X`` scaled with a party's training ``(mean, scale)`` (unchanged without one)."""
    return X if scaler is None else (X - scaler[0]) / scaler[1]


def scaled_views(views: Sequence[np.ndarray], scaler: Scaler | None) -> list[np.ndarray]:
    """A holder's views scaled with its ``(mean, scale)`` of all their columns side by side."""
    if scaler is None:
        return list(views)
    X = scaled(np.hstack(views), scaler)
    cuts = np.cumsum([v.shape[1] for v in views])[:-1]
    return [np.ascontiguousarray(v) for v in np.split(X, cuts, axis=1)]


class LinearAlgorithm(Algorithm):
    """The base of the linear specs (MMVFL, V-FedMV, H-FedMV): the coordinator runs with
    single-threaded BLAS (:func:`small_blas`) in process too, as a deployed process does
    (:meth:`~fedviews.federation.Algorithm.compute_limits`)."""

    def run_coordinator(
        self, coord: Coordinator, on_round_end: Callable[[int], None] | None = None
    ) -> Any:
        with small_blas():
            return super().run_coordinator(coord, on_round_end)

    def check_data(self, run: RunSpec, party: str, data: PartyData) -> None:
        """Also: every party holds feature columns (a file without ``X`` loaded, and round 1
        failed with numpy's "unexpected array size")."""
        super().check_data(run, party, data)
        if party in run.federation.parties and not int(np.prod(data.features.shape[1:])):
            raise DataError(
                f"{party!r} holds no features (X): every {self.name} party learns from "
                "feature columns of its own"
            )


class PartyPredictor(Persistent):
    """``predict(X, party)`` of the estimators whose every party can predict alone from
    its own view with its own ``W_k`` (MMVFL, supFL, supMVLFL); ``scalers_[k]``, where
    set, is party k's own training scaling, applied to ``X`` first.

    ``party`` has no default when there are several parties: in MMVFL every party
    predicts from its own view with its own ``W_k`` (Sec. 6.3 reports one accuracy per
    participant and view), so which party's model applies to ``X`` is the caller's to
    say (views of one width could be any party's).
    """

    W_: list[np.ndarray]
    classes_: np.ndarray

    def predict(self, X: np.ndarray, party: int | None = None) -> np.ndarray:
        """Party ``party``'s own prediction ``argmax X W_k`` from its (raw) view ``X``.

        Raises
        ------
        ConfigError
            Without ``party`` when the model has several parties, or for an index that
            is none of them.
        """
        check_fitted(self, "W_", "classes_")
        k = self._party(party)
        W = self.W_[k]
        X = check_view(X, name=f"X (party {k}'s view)")
        if X.shape[1] != W.shape[0]:
            raise DataError(f"X has {X.shape[1]} features, party {party} was fit with {W.shape[0]}")
        scalers = getattr(self, "scalers_", None)
        return self.classes_[np.argmax(scaled(X, scalers[k] if scalers else None) @ W, axis=1)]

    def score(
        self, X: np.ndarray, y: Any, sample_weight: Any = None, party: int | None = None
    ) -> float:
        """Accuracy of party ``party``'s :meth:`predict` on its view ``X`` against ``y``."""
        return accuracy(self.predict(X, party), y, sample_weight)

    def _party(self, party: Any) -> int:
        n = len(self.W_)
        if party is None and n > 1:
            widths = ", ".join(f"party {k}: {W.shape[0]}" for k, W in enumerate(self.W_))
            raise ConfigError(
                f"{type(self).__name__} has {n} parties and each predicts from its own view "
                f"with its own W_k: pass party=k, the party whose view X is (features: {widths})"
            )
        return 0 if party is None else party_index(party, n, "party")


def per_party(
    value: float | Sequence[float], n: int, name: str, *, positive: bool = True
) -> list[float]:
    """Broadcast a scalar hyper-parameter to ``n`` parties, or check a per-party list."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a number or a list of numbers, got {value!r}")
    if isinstance(value, (list, tuple, np.ndarray)):
        vals = [float(v) for v in value]
        if len(vals) != n:
            raise ConfigError(f"{name} has {len(vals)} values but there are {n} parties")
    else:
        try:
            vals = [float(cast(float, value))] * n  # anything float() takes; else ConfigError
        except (TypeError, ValueError):
            raise ConfigError(
                f"{name} must be a number or a list of numbers, got {value!r}"
            ) from None
    for v in vals:
        if not np.isfinite(v) or (v <= 0 if positive else v < 0):
            raise ConfigError(f"{name} must be {'> 0' if positive else '>= 0'}, got {v}")
    return vals


def party_index(value: Any, n: int, name: str) -> int:
    """``value`` (parameter ``name``) as the index of one of ``n`` parties."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ConfigError(f"{name} must be an integer party index, got {value!r}")
    if not 0 <= int(value) < n:
        raise ConfigError(f"{name}={value} is out of range for {n} parties (0..{n - 1})")
    return int(value)


def check_positive(value: Any, name: str) -> None:
    """ConfigError unless ``value`` (parameter ``name``) is a finite number ``> 0``."""
    check_value(name, value, POSITIVE)


#: How the label owner scales its one-hot ``Y`` (:func:`scale_labels`).
LABEL_SCALES = ("onehot", "orthonormal")


def check_label_scale(value: Any) -> None:
    """ConfigError unless ``value`` is one of :data:`LABEL_SCALES`."""
    if value not in LABEL_SCALES:
        raise ConfigError(f"label_scale must be one of {list(LABEL_SCALES)}, got {value!r}")


def scale_labels(Y: np.ndarray, label_scale: str) -> np.ndarray:
    """The label owner's target from its one-hot ``Y``: unchanged (``"onehot"``), or every
    column divided by the square root of its class count (``"orthonormal"``), so that
    ``Y^T Y = I`` (MMVFL Sec. 4.4; a class with no sample keeps its zero column)."""
    check_label_scale(label_scale)
    if label_scale == "onehot":
        return Y
    counts = Y.sum(axis=0)
    return Y / np.sqrt(np.where(counts > 0, counts, 1.0))


def check_count(value: Any, name: str) -> None:
    """ConfigError unless ``value`` (parameter ``name``, e.g. a number of rounds) is an
    integer ``>= 1``."""
    check_value(name, value, COUNT)


def check_iter(value: Any, tol: Any, name: str, tol_name: str) -> None:
    """Check an iteration count ``name`` (an integer ``>= 1``) and its tolerance ``tol_name``
    (a number ``>= 0``)."""
    check_count(value, name)
    check_value(tol_name, tol, TOL)


def restore(
    state: Mapping[str, np.ndarray],
    shapes: Mapping[str, tuple[int, ...]],
    who: str,
    optional: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """The arrays that ``shapes`` names, from a saved ``state`` (``load_state``), as float64
    copies, each checked to have this run's shape (an ``optional`` one may be missing)."""
    saved = {k: state[k].shape if k in state else None for k in shapes}
    if any(s != shapes[k] and not (s is None and k in optional) for k, s in saved.items()):
        raise DataError(
            f"{who}: the saved state does not fit this run (shapes {saved}, needed "
            f"{dict(shapes)}); resume with the same data and config"
        )
    return {k: np.array(state[k], dtype=np.float64) for k in shapes if k in state}


def orthonormal_nonnegative(n: int, c: int, rng: np.random.Generator) -> np.ndarray:
    """A random ``(n, c)`` matrix with ``Z^T Z = I`` and ``Z >= 0`` (Algorithm 1, line 1).

    A random cluster-indicator matrix with columns scaled to unit norm: every row
    has one non-zero entry, every column at least one (when ``n >= c``).
    """
    if n < c:
        raise DataError(f"need at least as many samples ({n}) as classes ({c})")
    labels = np.concatenate([np.arange(c), rng.integers(0, c, size=n - c)])
    rng.shuffle(labels)
    Z = np.zeros((n, c))
    Z[np.arange(n), labels] = 1.0
    return Z / np.sqrt(Z.sum(axis=0, keepdims=True))


def select_top_features(importances: np.ndarray, percent: float) -> np.ndarray:
    """Indices of the top ``percent`` % features by importance (at least one), best first.

    Ties are broken by feature index (stable), so the selection is deterministic.
    """
    if not 0 < percent <= 100:
        raise ConfigError(f"percent must be in (0, 100], got {percent}")
    d = len(importances)
    k = max(1, int(round(d * percent / 100.0)))
    order = np.argsort(-np.asarray(importances), kind="stable")
    return order[:k]
