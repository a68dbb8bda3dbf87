"""The base class of every fedviews estimator (scikit-learn's, with accuracy as ``score`` and
without metadata-routing boilerplate) and the progress of a fit (:func:`round_progress`).

A module of its own, below the algorithm packages: it imports scikit-learn, which
:mod:`fedviews._estimator` (imported by :mod:`fedviews.data`) must not. rich is imported
only when a fit shows its progress (``import fedviews.linear`` loads no rich).
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.metadata_routing import UNUSED

from fedviews._estimator import accuracy

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


#: called after round (or epoch) ``r`` of a fit
OnRound = Callable[[int], None]


@contextmanager
def round_progress(
    title: str,
    total: int,
    lines: Callable[[], Sequence[str]],
    verbose: bool,
    then: OnRound | None = None,
) -> Iterator[OnRound | None]:
    """The progress of a fit's rounds on stderr (never stdout), as an ``on_round_end(r)``.

    With ``verbose``, every call shows the newest of ``lines()`` (the coordinator's one
    line per finished round, with its loss or objective): on a terminal in a rich progress
    bar of ``total`` rounds, elsewhere (a log, a pipe) as one printed line per round,
    since a bar there would show only once, at the end. Without it nothing is written
    (rich is not even imported) and the hook is ``then`` alone. ``then(r)``, where given,
    runs after the display (e.g. a checkpoint).
    """
    if not verbose:
        yield then
        return
    state = random.getstate()  # importing rich draws from `random`; a fit must not
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from fedviews import _console
    finally:
        random.setstate(state)
    console = _console.err_console
    if not console.is_terminal:

        def line(r: int) -> None:
            shown = lines()
            text = f"[{r}/{total}] {shown[-1] if shown else ''}".rstrip()
            console.print(f"{title} {text}", highlight=False, soft_wrap=True, markup=False)
            if then is not None:
                then(r)

        yield line
        return
    bar = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}", markup=False),
        console=console,
    )
    with bar:
        task = bar.add_task(title, total=total, status="")

        def advance(r: int) -> None:
            shown = lines()
            bar.update(task, completed=r, status=shown[-1] if shown else "")
            if then is not None:
                then(r)

        yield advance


def run_in_process(
    fed: Any, title: str, total: int, verbose: bool, then: OnRound | None = None
) -> Any:
    """Run an in-process federation ``fed`` (:class:`~fedviews.federation.InProcessRun`) to
    its end, its coordinator's line per round shown when ``verbose``
    (:func:`round_progress`); returns what the run returns."""
    progress = fed.algorithm.progress
    with round_progress(title, total, lambda: progress(fed.coordinator), verbose, then) as hook:
        return fed(hook)
