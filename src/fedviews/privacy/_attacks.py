"""Numerical core of leakage attacks on vertical federated learning.

Each attack is a pure function of what an attacker **received** during training
(consensus matrices, gradients, representations, activations), one row per
sample in a row order the attacker knows, plus **declared auxiliary knowledge**:
the few rows ``aux_rows`` whose true label (``aux_y``) or raw features
(``X_aux``) the attacker knows. Nothing else is used: no party object, no I/O,
no hidden ground truth. The scoring helpers (:func:`label_recovery`,
:func:`chance_level`, :func:`auc`, :func:`reconstruction_quality`) are for the
evaluator, who holds the truth; they leave the attacker's aux rows out.

Labels are integer class codes (``0..C-1`` in the usual encoding).
"""

from __future__ import annotations

from numbers import Real
from typing import Any, Literal

import numpy as np

from fedviews.errors import ConfigError, DataError


def _floats(x: Any, name: str, *, ndim: int | None = None, min_ndim: int = 1) -> np.ndarray:
    """``x`` as a finite float64 array of the required rank, else :class:`DataError`."""
    try:
        arr = np.asarray(x)
        if np.iscomplexobj(arr):
            raise TypeError
        arr = arr.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise DataError(f"{name} must be a numeric array, got {type(x).__name__}") from None
    if (ndim is not None and arr.ndim != ndim) or arr.ndim < min_ndim:
        want = f"{ndim}-D" if ndim is not None else f"at least {min_ndim}-D"
        raise DataError(f"{name} must be {want} (rows = samples), got shape {arr.shape}")
    if arr.ndim and arr.shape[0] == 0:
        raise DataError(f"{name} has no rows; pass at least one sample")
    if not np.isfinite(arr).all():
        bad = int((~np.isfinite(arr)).sum())
        raise DataError(f"{name} contains {bad} NaN or infinite values; drop or impute them first")
    return arr


def _positive(value: Any, name: str) -> float:
    """A finite real number > 0, else :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < float(value) < np.inf:
        raise ConfigError(f"{name} must be a finite number > 0, got {value!r}")
    return float(value)


def _rows(rows: Any, n: int, name: str, *, required: bool = True) -> np.ndarray:
    """Validated row indices: 1-D, integer, unique, in ``[0, n)``; non-empty if ``required``."""
    idx = np.asarray(rows)
    if idx.ndim != 1:
        raise DataError(f"{name} must be a 1-D sequence of row indices, got shape {idx.shape}")
    if idx.size == 0:
        if required:
            raise ConfigError(f"{name} is empty; the attack needs at least one known row")
        return idx.astype(np.intp)
    if idx.dtype.kind not in "iu":
        raise DataError(f"{name} must hold integer row indices, got dtype {idx.dtype}")
    if idx.min() < 0 or idx.max() >= n:
        raise DataError(f"{name} has indices outside [0, {n}); use row positions of the n={n} rows")
    if np.unique(idx).size != idx.size:
        raise DataError(f"{name} contains duplicated rows; list each known row once")
    return idx.astype(np.intp)


def _labels(y: Any, name: str, n: int | None = None) -> np.ndarray:
    """Integer class codes, 1-D, of length ``n`` if given, else :class:`DataError`."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise DataError(f"{name} must be 1-D (one label per row), got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise DataError(f"{name} has {arr.size} labels but {n} rows were given; match the lengths")
    if arr.dtype.kind == "f" and np.isfinite(arr).all() and np.array_equal(arr, np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iub":
        raise DataError(
            f"{name} must hold integer class codes (dtype {arr.dtype} given); "
            "encode labels first, e.g. with sklearn.preprocessing.LabelEncoder"
        )
    return arr.astype(np.int64)


def _aux(rows: Any, y: Any, n: int, *, min_classes: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Validated ``(aux_rows, aux_y)`` with at least ``min_classes`` distinct labels."""
    idx = _rows(rows, n, "aux_rows")
    labels = _labels(y, "aux_y", idx.size)
    if np.unique(labels).size < min_classes:
        raise ConfigError(
            f"aux_y holds {np.unique(labels).size} class(es); this attack needs known rows "
            f"of at least {min_classes} classes: add aux rows of another class"
        )
    return idx, labels


def _majority(labels: np.ndarray) -> int:
    """The most common label (ties: the smallest)."""
    values, counts = np.unique(labels, return_counts=True)
    return int(values[np.argmax(counts)])


def labels_from_consensus(Z: Any, *, aux_rows: Any = None, aux_y: Any = None) -> np.ndarray:
    """Labels read off a shared consensus matrix (MMVFL / V-FedMV).

    In MMVFL (Feng & Yu, "Multi-participant Multi-class Vertical Federated
    Learning", 2020) and V-FedMV the parties agree on a consensus matrix ``Z``
    that approximates the one-hot label matrix, and every party receives it. The
    attacker uses only ``Z`` and, optionally, the known labels of ``aux_rows``.

    Parameters
    ----------
    Z : array of shape (n, C)
        The consensus matrix the attacker received.
    aux_rows, aux_y : sequences of int, optional
        Rows whose true labels the attacker knows (both or neither). Each column
        ``c`` then maps to the majority label of the aux rows whose argmax is
        ``c`` (ties: smallest label); columns with no aux row keep label ``c``.

    Returns
    -------
    ndarray of int, shape (n,)
        ``argmax_c Z[i, c]``, mapped through the column-to-label map.
    """
    Z = _floats(Z, "Z", ndim=2)
    cols = np.argmax(Z, axis=1)
    if aux_rows is None and aux_y is None:
        return cols.astype(np.int64)
    if aux_rows is None or aux_y is None:
        raise ConfigError("pass both aux_rows and aux_y, or neither (identity column mapping)")
    idx, labels = _aux(aux_rows, aux_y, Z.shape[0])
    mapping = np.arange(Z.shape[1], dtype=np.int64)
    for c in np.unique(cols[idx]):
        mapping[c] = _majority(labels[cols[idx] == c])
    return mapping[cols]


def _unit_rows(G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flattened rows scaled to unit L2 norm (zero rows stay zero), and the norms."""
    flat = G.reshape(G.shape[0], -1)
    norms = np.linalg.norm(flat, axis=1)
    return flat / np.where(norms > 0, norms, 1.0)[:, None], norms


def labels_by_direction(G: Any, *, aux_rows: Any, aux_y: Any) -> np.ndarray:
    """Labels from gradient directions, generalised to C classes.

    Li et al., "Label Leakage and Protection in Two-party Split Learning"
    (ICLR 2022), observe that gradients of samples of one class point in similar
    directions. The attacker uses the gradients ``G`` it received for its own
    outputs and the known labels of ``aux_rows`` (at least two classes): one
    centroid per class (mean of the aux rows' unit gradients, normalised); each
    row gets the class of highest cosine similarity. Rows whose gradient is zero
    carry no direction and get the class with the most aux rows (ties: smallest).

    Parameters
    ----------
    G : array of shape (n, ...)
        Per-row gradients the attacker received (flattened per row).
    aux_rows, aux_y : sequences of int
        Rows whose true labels the attacker knows.

    Returns
    -------
    ndarray of int, shape (n,)
    """
    G = _floats(G, "G", min_ndim=2)
    idx, labels = _aux(aux_rows, aux_y, G.shape[0], min_classes=2)
    unit, norms = _unit_rows(G)
    classes = np.unique(labels)
    centroids = np.stack([unit[idx[labels == c]].mean(axis=0) for c in classes])
    centroids, _ = _unit_rows(centroids)
    pred = classes[np.argmax(unit @ centroids.T, axis=1)]
    pred[norms == 0] = _majority(labels)
    return pred


def binary_scores(
    G: Any, *, kind: Literal["norm", "direction"], positive_row: int | None = None
) -> np.ndarray:
    """Li et al.'s (ICLR 2022) binary leakage scores; higher means "more likely positive".

    ``"norm"``: ``||g_i||`` (with a rare positive class, positive gradients are
    larger). ``"direction"``: ``cos(g_i, g_p)`` for one row ``p = positive_row``
    the attacker knows to be positive (rows with zero gradient score 0). The
    attacker uses only the gradients ``G`` it received (and ``positive_row``).

    Parameters
    ----------
    G : array of shape (n, ...)
    kind : {"norm", "direction"}
    positive_row : int, optional
        Required for ``"direction"``.

    Returns
    -------
    ndarray of float, shape (n,)
    """
    G = _floats(G, "G", min_ndim=2)
    unit, norms = _unit_rows(G)
    if kind == "norm":
        return norms
    if kind != "direction":
        raise ConfigError(f"kind must be 'norm' or 'direction', got {kind!r}")
    if positive_row is None:
        raise ConfigError("kind='direction' needs positive_row: one row known to be positive")
    (p,) = _rows([positive_row], G.shape[0], "positive_row")
    if norms[p] == 0:
        raise DataError(f"row {p} has a zero gradient and no direction; pick another positive row")
    return unit @ unit[p]


def auc(scores: Any, y_binary: Any) -> float:
    """ROC AUC of ``scores`` against binary labels (the larger label value is positive)."""
    from sklearn.metrics import roc_auc_score

    s = _floats(scores, "scores", ndim=1)
    y = _labels(y_binary, "y_binary", s.size)
    values = np.unique(y)
    if values.size != 2:
        raise DataError(
            f"y_binary must hold exactly two classes, got {values.tolist()}; "
            "AUC is undefined without both positives and negatives"
        )
    return float(roc_auc_score(y == values[1], s))


def labels_from_softmax_gradient(G: Any) -> np.ndarray:
    """Labels from the gradient of softmax cross-entropy w.r.t. the logits.

    Batch-level label inference (Zou et al., "Defending Batch-Level Label
    Inference and Replacement Attacks in Vertical Federated Learning", IEEE
    Trans. Big Data 2022; VFLAIR reports 0.997 recovery on MNIST). When the
    attacker's output is added directly into the logits ``z``, the gradient it
    receives is ``(softmax(z) - onehot(y)) / batch_size``, whose only negative
    entry is at the true label. The attacker uses only that gradient ``G``.

    Parameters
    ----------
    G : array of shape (n, C)

    Returns
    -------
    ndarray of int, shape (n,)
        ``argmin_c G[i, c]``.
    """
    G = _floats(G, "G", ndim=2)
    if G.shape[1] < 2:
        raise DataError(f"G must have one column per class (C >= 2), got shape {G.shape}")
    return np.argmin(G, axis=1).astype(np.int64)


def labels_by_completion(F: Any, *, aux_rows: Any, aux_y: Any, seed: int = 0) -> np.ndarray:
    """Labels by passive model completion, simplified.

    Fu et al., "Label Inference Attacks Against Vertical Federated Learning"
    (USENIX Security 2022).

    The attacker fits a classifier on top of its own per-row features ``F`` (its
    bottom-model outputs, or representations it received) using the known labels
    of ``aux_rows`` only (at least two classes), then predicts every row. The
    classifier is a standardised multinomial logistic regression (``C=1.0``,
    ``max_iter=1000``, ``random_state=seed``). Fu et al. additionally fine-tune
    with MixMatch semi-supervised learning on the unlabelled rows; this plain
    supervised completion is a lower bound on their attack.

    Parameters
    ----------
    F : array of shape (n, ...)
    aux_rows, aux_y : sequences of int
    seed : int

    Returns
    -------
    ndarray of int, shape (n,)
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    F = _floats(F, "F", min_ndim=2)
    idx, labels = _aux(aux_rows, aux_y, F.shape[0], min_classes=2)
    flat = F.reshape(F.shape[0], -1)
    model = make_pipeline(
        StandardScaler(), LogisticRegression(C=1.0, max_iter=1000, random_state=seed)
    )
    model.fit(flat[idx], labels)
    return np.asarray(model.predict(flat), dtype=np.int64)


def reconstruct_features(A: Any, *, aux_rows: Any, X_aux: Any, alpha: float = 1.0) -> np.ndarray:
    """Private features reconstructed by a ridge inverse model.

    An inverse-network attack (He et al., "Model Inversion Attacks against
    Collaborative Inference", ACSAC 2019) with a linear inverse model. The
    attacker uses the activations ``A`` it received (e.g. a victim's bottom-model
    outputs) and the raw features ``X_aux`` of the rows ``aux_rows`` it knows. It
    fits a ridge regression with intercept (both sides centred) from flattened
    ``A`` to flattened ``X`` on the aux rows and applies it to every row. With
    fewer aux rows ``m`` than activation dims ``d`` the dual (Woodbury) form
    ``W = A_aᵀ (A_a A_aᵀ + αI)⁻¹ X_a`` is solved (m x m), otherwise the primal
    ``W = (A_aᵀ A_a + αI)⁻¹ A_aᵀ X_a`` (d x d); both by Cholesky, both give the
    same ``W``.

    Parameters
    ----------
    A : array of shape (n, ...)
    aux_rows : sequence of int, length m
    X_aux : array of shape (m, ...)
        Raw features of ``aux_rows``, in the same order.
    alpha : float > 0
        Ridge penalty.

    Returns
    -------
    ndarray of shape (n, *X_aux.shape[1:])
    """
    alpha = _positive(alpha, "alpha")
    A = _floats(A, "A", min_ndim=2)
    idx = _rows(aux_rows, A.shape[0], "aux_rows")
    X_aux = _floats(X_aux, "X_aux", min_ndim=2)
    if X_aux.shape[0] != idx.size:
        raise DataError(
            f"X_aux has {X_aux.shape[0]} rows but aux_rows lists {idx.size}; "
            "give one feature row per aux row, in the same order"
        )
    flat = A.reshape(A.shape[0], -1)
    a_mean = flat[idx].mean(axis=0)
    Xa = X_aux.reshape(idx.size, -1)
    x_mean = Xa.mean(axis=0)
    Ac, Xc = flat[idx] - a_mean, Xa - x_mean
    m, d = Ac.shape
    from scipy.linalg import LinAlgError, cho_factor, cho_solve  # here: a config check needs none

    try:
        if m < d:
            W = Ac.T @ cho_solve(cho_factor(Ac @ Ac.T + alpha * np.eye(m)), Xc)
        else:
            W = cho_solve(cho_factor(Ac.T @ Ac + alpha * np.eye(d)), Ac.T @ Xc)
    except LinAlgError as exc:  # pragma: no cover - needs extreme scales
        raise DataError(f"ridge system is numerically singular ({exc}); increase alpha") from None
    return ((flat - a_mean) @ W + x_mean).reshape(A.shape[0], *X_aux.shape[1:])


def _ssim(a: np.ndarray, b: np.ndarray, data_range: float) -> float:
    """SSIM of one sample pair as an image (NaN if not an image or a side < 3)."""
    from skimage.metrics import structural_similarity

    if a.ndim == 3 and a.shape[0] == 1:
        a, b = a[0], b[0]
    if a.ndim not in (2, 3) or min(a.shape[-2:]) < 3:
        return float("nan")
    side = min(a.shape[-2:])
    win = 7 if side >= 7 else side - (1 - side % 2)
    channel_axis = 0 if a.ndim == 3 else None
    return float(
        structural_similarity(a, b, data_range=data_range, win_size=win, channel_axis=channel_axis)
    )


def reconstruction_quality(
    X_hat: Any, X: Any, *, data_range: float | None = None
) -> dict[str, float]:
    """Mean squared error and mean SSIM of reconstructed samples.

    Each sample of shape ``(h, w)``, ``(1, h, w)`` or ``(c, h, w)`` (channels
    first) is compared as an image with ``skimage.metrics.structural_similarity``;
    images with a side below 7 use the largest odd window that fits. SSIM is NaN
    when a side is below 3 or samples are not images (1-D features).

    Parameters
    ----------
    X_hat, X : arrays of the same shape (n, ...)
    data_range : float > 0, optional
        Defaults to ``X.max() - X.min()`` (1.0 if ``X`` is constant).

    Returns
    -------
    dict with keys ``"mse"`` and ``"ssim"``
    """
    X_hat = _floats(X_hat, "X_hat", min_ndim=2)
    X = _floats(X, "X", min_ndim=2)
    if X_hat.shape != X.shape:
        raise DataError(f"X_hat has shape {X_hat.shape} but X has {X.shape}; they must match")
    if X.ndim > 4:
        raise DataError(f"samples must be 1-D, (h, w) or (c, h, w), got X of shape {X.shape}")
    if data_range is None:
        data_range = float(X.max() - X.min()) or 1.0
    else:
        data_range = _positive(data_range, "data_range")
    ssim = [_ssim(a, b, data_range) for a, b in zip(X_hat, X, strict=True)]
    return {"mse": float(np.mean((X_hat - X) ** 2)), "ssim": float(np.mean(ssim))}


def _scored(y: Any, exclude_rows: Any) -> tuple[np.ndarray, np.ndarray]:
    """``y`` as an array and the boolean mask of rows to score (not excluded)."""
    arr = np.asarray(y)
    if arr.ndim != 1:
        raise DataError(f"y must be 1-D (one label per row), got shape {arr.shape}")
    keep = np.ones(arr.size, dtype=bool)
    if exclude_rows is not None:
        keep[_rows(exclude_rows, arr.size, "exclude_rows", required=False)] = False
    if not keep.any():
        raise DataError("no rows left to score: exclude_rows covers every row")
    return arr, keep


def label_recovery(pred: Any, y: Any, *, exclude_rows: Any = None) -> float:
    """Percentage (0-100) of scored rows with ``pred == y`` (pass aux rows as ``exclude_rows``)."""
    y_arr, keep = _scored(y, exclude_rows)
    p = np.asarray(pred)
    if p.shape != y_arr.shape:
        raise DataError(f"pred has shape {p.shape} but y has {y_arr.shape}; one label per row")
    return float(100.0 * np.mean(p[keep] == y_arr[keep]))


def chance_level(y: Any, *, exclude_rows: Any = None) -> float:
    """Accuracy (percent) of always guessing the most common label of the scored rows."""
    y_arr, keep = _scored(y, exclude_rows)
    _, counts = np.unique(y_arr[keep], return_counts=True)
    return float(100.0 * counts.max() / keep.sum())
