"""Classification metrics and the classifiers that score selected features."""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, precision_score, recall_score

from fedviews.errors import ConfigError

__all__ = ["CLASSIFIERS", "classification_metrics", "make_classifier", "mean_std"]

CLASSIFIERS = ("knn1", "linear_svm", "logreg")


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


def classification_metrics(y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Accuracy, macro precision, macro recall, macro F1, in percent."""
    return {
        "accuracy": 100.0 * accuracy_score(y_true, y_pred),
        "precision": 100.0 * precision_score(y_true, y_pred, average="macro", zero_division=0),
        "recall": 100.0 * recall_score(y_true, y_pred, average="macro", zero_division=0),
        "f1": 100.0 * f1_score(y_true, y_pred, average="macro", zero_division=0),
    }


def mean_std(values: list[float] | np.ndarray) -> tuple[float, float]:
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=0))
