r"""Non-federated supervised baselines of the MMVFL paper (they assume *every* party has labels).

* :class:`SupFL` (Eq. 15): each party alone, ``min ||X_k W_k - Y||^2 + beta_k ||W_k||_{2,1}``.
* :class:`SupMVLFL` (Eq. 16): supervised multi-view feature selection.

Reading of Eq. (16). Written literally, ``sum_k ||X_k W_k - Y||^2 + beta_k ||W_k||_{2,1}``
separates into K independent problems and is *identical* to supFL, which contradicts
the paper reporting different numbers for the two. We implement the multi-view
reading in which the views are learned jointly (the "direct extension of supFL into
an MVL architecture")::

    min_{W_1..W_K} || sum_k X_k W_k - Y ||_F^2 + sum_k beta_k ||W_k||_{2,1}

i.e. ℓ2,1 regression on the concatenated views with a block-wise β. Each party's
feature importances are the row norms of its own block ``W_k``.

``label_scale``: the target ``Y``, one-hot (default) or with ``Y^T Y = I`` as MMVFL's
(Eq. 15 uses "the one-hot matrix ... as defined in Section 4.3", MMVFL's ``Y``; see
:class:`~fedviews.linear.MMVFL`).

Both are computed in one place (no parties, no messages), so unlike the federated
estimators they have no ``transport_``, ``run_stats_`` or ``history_``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedviews._classifier import Classifier
from fedviews._estimator import store_params
from fedviews._registry import register_estimator
from fedviews.data import check_classes, check_Xs, one_hot
from fedviews.errors import DataError, check_fitted
from fedviews.linear._common import (
    PartyPredictor,
    check_iter,
    check_positive,
    per_party,
    scale_labels,
)
from fedviews.linear._l21 import l21_least_squares, row_norms


class _PerPartyLinear(PartyPredictor, Classifier):
    """Shared parameters, validation and ``predict`` of the supervised baselines (they need
    labels at every party)."""

    def __init__(
        self,
        beta: float | Sequence[float] = 1.0,
        max_iter: int = 100,
        tol: float = 1e-6,
        eps: float = 1e-10,
        label_scale: str = "onehot",
    ) -> None:
        store_params(self, locals())

    def _prepare(
        self, Xs: Sequence[np.ndarray], y: np.ndarray
    ) -> tuple[list[np.ndarray], np.ndarray, list[float]]:
        Xs = check_Xs(Xs)
        y = check_classes(y, Xs[0].shape[0])
        check_iter(self.max_iter, self.tol, "max_iter", "tol")
        check_positive(self.eps, "eps")
        Y, self.classes_ = one_hot(y)
        if Y.shape[1] < 2:
            raise DataError("y must contain at least two classes")
        return Xs, scale_labels(Y, self.label_scale), per_party(self.beta, len(Xs), "beta")

    def _finish(self, Ws: list[np.ndarray]) -> None:
        self.W_ = Ws
        self.feature_importances_ = [row_norms(W) for W in Ws]
        self.n_features_in_ = [W.shape[0] for W in Ws]


@register_estimator("supfl")
class SupFL(_PerPartyLinear):
    """supFL (Eq. 15): independent supervised ℓ2,1 feature selection at every party.

    Attributes: ``W_`` (list), ``feature_importances_`` (list), ``objective_`` (list of
    per-party IRLS histories). A local computation: no ``transport_`` (see the module docstring).
    """

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> SupFL:
        Xs, Y, betas = self._prepare(Xs, y)
        results = [
            l21_least_squares(X, Y, b, max_iter=self.max_iter, tol=self.tol, eps=self.eps)
            for X, b in zip(Xs, betas, strict=True)
        ]
        self.objective_ = [r.objective for r in results]
        self._finish([r.W for r in results])
        return self


@register_estimator("supmvlfl")
class SupMVLFL(_PerPartyLinear):
    """supMVLFL (Eq. 16, joint multi-view reading; see the module docstring).

    Attributes: ``W_`` (list of per-view blocks), ``feature_importances_``, ``objective_``.
    A local computation: no ``transport_`` (see the module docstring).
    """

    def fit(self, Xs: Sequence[np.ndarray], y: np.ndarray) -> SupMVLFL:
        Xs, Y, betas = self._prepare(Xs, y)
        widths = [X.shape[1] for X in Xs]
        beta_rows = np.concatenate([np.full(d, b) for d, b in zip(widths, betas, strict=True)])
        res = l21_least_squares(
            np.hstack(Xs), Y, beta_rows, max_iter=self.max_iter, tol=self.tol, eps=self.eps
        )
        self.objective_ = res.objective
        self._finish(np.split(res.W, np.cumsum(widths)[:-1], axis=0))
        return self

    def predict_joint(self, Xs: Sequence[np.ndarray]) -> np.ndarray:
        """Prediction from all views together: ``argmax sum_k X_k W_k``."""
        check_fitted(self, "W_", "classes_")
        Xs = check_Xs(Xs, n_views=len(self.W_), n_features=self.n_features_in_)
        return self.classes_[
            np.argmax(sum(X @ W for X, W in zip(Xs, self.W_, strict=True)), axis=1)
        ]
