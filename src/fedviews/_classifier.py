"""The base class of every fedviews estimator (scikit-learn's, with accuracy as ``score`` and
without metadata-routing boilerplate) and the progress of a fit run in one process.

A module of its own, below the algorithm packages: it imports scikit-learn and rich,
which :mod:`fedviews._estimator` (imported by :mod:`fedviews.data`) must not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.metadata_routing import UNUSED

from fedviews._console import OnRound, round_progress
from fedviews.errors import DataError

#: the methods whose extra parameters scikit-learn would make routable metadata
_ROUTED = (
    "fit",
    "partial_fit",
    "predict",
    "predict_proba",
    "predict_log_proba",
    "decision_function",
    "score",
    "split",
    "transform",
    "inverse_transform",
)
_NOT_METADATA = {"self", "X", "y", "Y", "Xt", "yt"}


def _unrouted(cls: type) -> None:
    """Declare every extra parameter of ``cls``'s ``fit``, ``predict``, ``score``... not
    metadata (scikit-learn's ``__metadata_request__<method>`` with ``UNUSED``), so that no
    ``set_<method>_request`` method is generated: it would pad ``help()`` with routing
    boilerplate for parameters (``Xs``, ``party``, ``clients``) that are no metadata."""
    for method in _ROUTED:
        fn = getattr(cls, method, None)
        if not inspect.isfunction(fn):
            continue
        params = inspect.signature(fn).parameters.values()
        extra = [
            p.name
            for p in params
            if p.name not in _NOT_METADATA and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        setattr(cls, f"__metadata_request__{method}", dict.fromkeys(extra, UNUSED))


class Classifier(ClassifierMixin, BaseEstimator):
    """The base of every fedviews estimator: scikit-learn's ``BaseEstimator`` (``get_params``,
    ``clone``) and ``ClassifierMixin`` (``is_classifier``), :meth:`score` as accuracy, and no
    metadata-routing ``set_<method>_request`` methods (:func:`_unrouted`)."""

    # its own score, read by scikit-learn's hook as this class is created (name-mangled,
    # which the hook allows for)
    __metadata_request__score = {"sample_weight": UNUSED}  # noqa: RUF012

    def __init_subclass__(cls, **kwargs: Any) -> None:
        _unrouted(cls)  # before scikit-learn's hook reads the requests
        super().__init_subclass__(**kwargs)

    predict: Callable[..., np.ndarray]  # every estimator defines it

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy of :meth:`predict` on ``X`` against ``y`` (scikit-learn's
        ``ClassifierMixin.score``); ``X`` as :meth:`predict` takes it."""
        return accuracy(self.predict(X), y, sample_weight)


def accuracy(predicted: np.ndarray, y: Any, sample_weight: Any = None) -> float:
    """The (``sample_weight``-weighted) fraction of ``predicted`` equal to ``y``; a
    :class:`DataError` unless ``y`` (and the weights) hold one entry per prediction."""
    yy = np.asarray(y)
    if yy.ndim == 2 and yy.shape[1] == 1:
        yy = yy.ravel()
    if yy.shape != predicted.shape:
        raise DataError(
            f"y has shape {yy.shape}, expected ({len(predicted)},): one label per sample"
        )
    if sample_weight is None:
        return float(np.mean(predicted == yy))
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != yy.shape or not np.isfinite(w).all() or (w < 0).any() or not w.sum() > 0:
        raise DataError(
            f"sample_weight must be {len(yy)} finite weights >= 0, not all zero (one per "
            f"sample), got shape {w.shape}"
        )
    return float(np.average(predicted == yy, weights=w))


def run_in_process(
    fed: Any, title: str, total: int, verbose: bool, then: OnRound | None = None
) -> Any:
    """Run an in-process federation ``fed`` (:class:`~fedviews.federation.InProcessRun`) to
    its end, its coordinator's line per round shown when ``verbose``
    (:func:`~fedviews._console.round_progress`); returns what the run returns."""
    progress = fed.algorithm.progress
    with round_progress(title, total, lambda: progress(fed.coordinator), verbose, then) as hook:
        return fed(hook)
