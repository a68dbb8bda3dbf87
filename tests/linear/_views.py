"""Small labelled multi-view data for the linear tests: Gaussian views, two features of each
shifted by the one-hot label (the informative features every selector should find)."""

from __future__ import annotations

import numpy as np


def planted_views(
    seed: int = 0, n: int = 90, dims: tuple[int, ...] = (6, 9, 14), c: int = 3
) -> tuple[list[np.ndarray], np.ndarray]:
    """``(Xs, y)``: ``n`` samples of ``c`` classes, one view per entry of ``dims``."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    Xs = []
    for d in dims:
        X = rng.normal(size=(n, d))
        X[:, :2] += 1.5 * np.eye(c)[y][:, :2]  # two informative features per view
        Xs.append(X)
    return Xs, y
