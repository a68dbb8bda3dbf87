"""Helpers shared by the experiments: train-statistics standardisation and figure files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data import standardized_with
from fedviews.report import pyplot


def standardize(Xs: list[np.ndarray], *others: list[np.ndarray]) -> list[list[np.ndarray]]:
    """Scale every view of ``Xs`` and of each list in ``others`` with ``Xs``' statistics.

    Returns ``[Xs', *others']``; a constant feature (std < 1e-12) is only centred.
    """
    scaled = [standardized_with(X) for X in Xs]
    return [
        [X for X, _ in scaled],
        *[[(A - mu) / sd for A, (_, (mu, sd)) in zip(As, scaled, strict=True)] for As in others],
    ]


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close ``fig``; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
    return path
