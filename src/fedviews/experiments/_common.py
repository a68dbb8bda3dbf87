"""Helpers shared by the experiments: train-statistics standardisation."""

from __future__ import annotations

import numpy as np

from fedviews.data import standardized_with


def standardize(Xs: list[np.ndarray], *others: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Scale every view of ``Xs`` and of each list in ``others`` with ``Xs``' statistics.

    Returns ``[Xs', *others']``; a constant feature (std < 1e-12) is only centred.
    """
    scaled = [standardized_with(X) for X in Xs]
    return [
        [X for X, _ in scaled],
        *[[(A - mu) / sd for A, (_, (mu, sd)) in zip(As, scaled, strict=True)] for As in others],
    ]
