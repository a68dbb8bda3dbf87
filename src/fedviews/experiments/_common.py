"""Helpers shared by the experiments: a split of the views, standardised with train statistics."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.data import standardized_with
from fedviews.errors import ConvergenceWarning

if TYPE_CHECKING:
    from fedviews.experiments._runner import RunContext


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


@contextlib.contextmanager
def unconverged_fits(ctx: RunContext, method: str, max_iter: int) -> Iterator[dict[str, Any]]:
    """Count the :class:`~fedviews.errors.ConvergenceWarning` of the fits run inside (each
    fit would warn once) and say once in the run's output when any stopped unconverged.

    Yields the ``metrics`` entry, filled at exit: ``unconverged_fits`` and ``converged``
    (``false`` when a fit stopped at ``max_iter`` before its ``tol`` held). Other warnings
    raised inside are passed on.
    """
    record: dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield record
    n = 0
    for w in caught:
        if issubclass(w.category, ConvergenceWarning):
            n += 1
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    record.update(unconverged_fits=n, converged=n == 0)
    if n:
        ctx.warn(
            f"converged: false — {n} {method} fits stopped at max_iter={max_iter} before "
            "their tol held (raise params.max_iter to converge)"
        )
