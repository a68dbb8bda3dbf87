"""Classification metrics, the classifiers that score selected features, and mean ± std tables."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError
from fedviews.experiments._paper import paper_tables
from fedviews.experiments._runner import Table

CLASSIFIERS = ("knn1", "linear_svm", "logreg")
#: the keys of :func:`classification_metrics`, in table order
METRICS = ("accuracy", "precision", "recall", "f1")
_METRIC_COLUMNS = ["method", "Accuracy (%)", "Precision (%)", "Recall (%)", "F1 (%)"]


def make_classifier(name: str, random_state: int = 0) -> Any:
    """The classifier that scores a party's selected features (same for all algorithms)."""
    if name == "knn1":
        from sklearn.neighbors import KNeighborsClassifier

        return KNeighborsClassifier(n_neighbors=1)
    if name == "linear_svm":
        from sklearn.svm import LinearSVC

        return LinearSVC(C=1.0, max_iter=5000, random_state=random_state)
    if name == "logreg":
        from sklearn.linear_model import LogisticRegression

        return LogisticRegression(max_iter=2000)
    raise ConfigError(f"unknown classifier {name!r}; choose one of {list(CLASSIFIERS)}")


def classification_metrics(
    y_true: np.ndarray, y_pred: np.ndarray, average: str = "macro"
) -> dict[str, float]:
    """Accuracy and precision, recall, F1 (``average``: ``"macro"`` or ``"binary"``), in percent."""
    from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

    kw: dict[str, Any] = {"average": average, "zero_division": 0}
    return {
        "accuracy": 100.0 * accuracy_score(y_true, y_pred),
        "precision": 100.0 * precision_score(y_true, y_pred, **kw),
        "recall": 100.0 * recall_score(y_true, y_pred, **kw),
        "f1": 100.0 * f1_score(y_true, y_pred, **kw),
    }


def class_separation(A: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """How well the true classes ``y`` separate in the space of the rows of ``A``
    (Euclidean distance).

    Returns
    -------
    dict
        ``silhouette``: the mean silhouette coefficient with ``y`` as the clusters, in
        [-1, 1] (per sample (b - a) / max(a, b), a: mean distance to its own class, b: to the
        nearest other class; 0 for a sample alone in its class); ``knn1``: the leave-one-out
        1-nearest-neighbour accuracy (%), each sample labelled by its nearest other sample
        (the first one on a tie).

    Raises
    ------
    DataError
        Unless ``y`` has between 2 and ``len(y) - 1`` distinct classes, one per row of ``A``.
    """
    from scipy.spatial.distance import pdist, squareform
    from sklearn.metrics import silhouette_score

    A, y = np.asarray(A, dtype=float), np.asarray(y)
    n_classes = len(np.unique(y))
    if A.ndim != 2 or len(y) != len(A) or not 2 <= n_classes < len(y):
        raise DataError(
            "class separation needs a 2-d array, one label per row and 2 to n - 1 classes; "
            f"got shape {A.shape} with {len(y)} labels of {n_classes} classes"
        )
    D = squareform(pdist(A))  # exact differences (no |a|² + |b|² - 2ab cancellation)
    silhouette = float(silhouette_score(D, y, metric="precomputed"))
    np.fill_diagonal(D, np.inf)  # leave one out: a sample is not its own neighbour
    hits = int(np.sum(y[np.argmin(D, axis=1)] == y))
    return {"silhouette": silhouette, "knn1": 100.0 * hits / len(y)}


def mean_std(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and population standard deviation (``ddof=0``); the deviation of one value is
    NaN (there is no spread to measure: "± 0.00" claimed one)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=0)) if arr.size > 1 else math.nan


def pm(mean: float, std: float | None) -> str:
    """``"mean ± std"`` with two decimals, as every table prints it; the mean alone where
    there is no deviation (one repeat: NaN, or ``None`` once through JSON)."""
    if std is None or math.isnan(std):
        return f"{mean:.2f}"
    return f"{mean:.2f} ± {std:.2f}"


def paired_difference(
    a: Sequence[float], b: Sequence[float], level: float = 0.95
) -> dict[str, Any]:
    """The paired difference ``a − b`` across seeds: mean, sample std, Student-t interval.

    ``a[s]`` and ``b[s]`` come from the same seed (same data split, same
    initialisation stream), so their difference removes the seed-to-seed
    variation both share. ``verdict``: ``"a > b"`` or ``"a < b"`` when the
    two-sided ``level`` interval excludes 0, else ``"inconclusive"`` (also with
    fewer than two seeds).
    """
    from scipy import stats

    d = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    n, nan = len(d), float("nan")
    mean = float(d.mean()) if n else nan
    if n < 2:
        return {
            "n": n,
            "mean": mean,
            "std": nan,
            "low": nan,
            "high": nan,
            "verdict": "inconclusive",
        }
    std = float(d.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * std / np.sqrt(n)
    low, high = mean - half, mean + half
    verdict = "a > b" if low > 0 else "a < b" if high < 0 else "inconclusive"
    return {"n": n, "mean": mean, "std": std, "low": low, "high": high, "verdict": verdict}


#: :func:`paired_difference`'s verdicts in words: ``a`` higher, lower or not distinguishable.
VERDICT_WORDS = {"a > b": "higher", "a < b": "lower", "inconclusive": "not distinguishable"}


def verdict_line(
    label: str,
    d: Mapping[str, Any],
    unit: str = "folds",
    words: Mapping[str, str] = VERDICT_WORDS,
) -> str:
    """One line from a :func:`paired_difference` result ``d``, e.g.
    ``"MMVFL − supFL: +1.23 [0.45, 2.01] over 5 folds: higher"`` (``words``: the verdicts
    in words, :data:`VERDICT_WORDS` by default; with one fold the difference alone,
    ``"... +1.23 over 1 fold, no interval: not distinguishable"``)."""
    if d["n"] < 2:
        one = unit[:-1] if unit.endswith("s") else unit
        return f"{label}: {d['mean']:+.2f} over {d['n']} {one}, no interval: {words[d['verdict']]}"
    return (
        f"{label}: {d['mean']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}] over {d['n']} {unit}: "
        f"{words[d['verdict']]}"
    )


def summarize(runs: Sequence[Mapping[str, float]]) -> dict[str, list[float]]:
    """``{metric: [mean, std]}`` over runs of :func:`classification_metrics`."""
    return {k: list(mean_std([run[k] for run in runs])) for k in METRICS}


def metric_tables(
    summary: Mapping[str, Mapping[str, Sequence[float]]],
    title: str,
    note: str,
    paper_table: str,
    paper_note: str,
) -> list[Table]:
    """The ``method x metric`` table of ``summary`` (``{method: summarize(...)}``), then,
    when ``paper_table`` names an entry of the paper's numbers, the paper's table beside it."""

    def rows(by_method: Mapping[str, Mapping[str, Sequence[float]]]) -> list[list[Any]]:
        return [
            [name, *[pm(*m[k]) for k in METRICS]]
            for name, m in by_method.items()
            if not name.startswith("_")  # the paper's notes
        ]

    tables = [Table(title, _METRIC_COLUMNS, rows(summary), note)]
    paper = paper_tables().get(paper_table) if paper_table else None
    if paper:
        title = f"Paper ({paper_table}): BiAffect, binary mood — context only, not a reproduction target"
        tables.append(Table(title, _METRIC_COLUMNS, rows(paper), paper_note))
    return tables
