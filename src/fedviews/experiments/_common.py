"""Helpers shared by the experiments: a split of the views, standardised with train statistics."""

from __future__ import annotations

import numpy as np

from fedviews.data import standardized_with


def split_views(
    views: list[np.ndarray], rows: tuple[np.ndarray, ...], scale: bool
) -> list[list[np.ndarray]]:
    """``[v[r] for v in views]`` for every ``r`` of ``rows``; ``scale``: every part scaled with
    the first part's statistics (the training rows; a constant feature, std < 1e-12, is only
    centred)."""
    parts = [[v[r] for v in views] for r in rows]
    if not scale:
        return parts
    scaled = [standardized_with(X) for X in parts[0]]
    return [
        [X for X, _ in scaled],
        *[[(A - mu) / sd for A, (_, (mu, sd)) in zip(As, scaled, strict=True)] for As in parts[1:]],
    ]
