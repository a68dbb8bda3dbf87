"""Helpers shared by the experiments: a split of the views, standardised with train statistics."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedviews.data import standardized_with


def split_views(
    views: Sequence[np.ndarray], rows: Sequence[np.ndarray], scale: bool
) -> list[list[np.ndarray]]:
    """The rows ``rows[j]`` of every view, one list of views per ``j``; ``scale``: every view
    scaled with the statistics of its first part (the training rows).

    A constant feature (std < 1e-12) is only centred.
    """
    parts = [[v[r] for v in views] for r in rows]
    if not scale:
        return parts
    scaled = [standardized_with(X) for X in parts[0]]
    return [
        [X for X, _ in scaled],
        *[[(A - mu) / sd for A, (_, (mu, sd)) in zip(As, scaled, strict=True)] for As in parts[1:]],
    ]
