"""Helpers shared by the experiments: train-statistics standardisation and figure files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedviews.report import pyplot

__all__ = ["pyplot", "save_figure", "standardize"]


def standardize(Xs: list[np.ndarray], *others: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Scale every view of ``Xs`` and of each list in ``others`` with ``Xs``' statistics.

    Returns ``[Xs', *others']``; a constant feature (std < 1e-12) is only centred.
    """
    out: list[list[np.ndarray]] = [[] for _ in range(1 + len(others))]
    for k, X in enumerate(Xs):
        mu, sd = X.mean(axis=0), X.std(axis=0)
        sd[sd < 1e-12] = 1.0
        for j, arrs in enumerate((Xs, *others)):
            out[j].append((arrs[k] - mu) / sd)
    return out


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close ``fig``; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
