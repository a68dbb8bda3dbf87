"""Balanced subsamples, stratified k-fold and client partitions."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.data import (
    balanced_subsample,
    deal_views,
    held_out_split,
    partition_clients,
    stratified_kfold,
)
from fedviews.errors import ConfigError, DataError

Y = np.repeat(np.arange(10), 200)  # the handwritten label layout
Y_UNEVEN = np.repeat(np.arange(4), [50, 30, 20, 12])


def test_balanced_subsample() -> None:
    idx = balanced_subsample(Y_UNEVEN, 12, random_state=3)
    assert len(idx) == 48 and np.all(np.diff(idx) > 0)
    assert np.bincount(Y_UNEVEN[idx]).tolist() == [12] * 4
    np.testing.assert_array_equal(idx, balanced_subsample(Y_UNEVEN, 12, random_state=3))
    assert not np.array_equal(idx, balanced_subsample(Y_UNEVEN, 12, random_state=4))
    with pytest.raises(DataError, match="classes {'3': 12} have fewer"):
        balanced_subsample(Y_UNEVEN, 13)


def test_stratified_kfold_equal_class_counts() -> None:
    folds = stratified_kfold(Y, n_splits=5, random_state=0)
    assert len(folds) == 5
    tests = np.concatenate([te for _, te in folds])
    np.testing.assert_array_equal(np.sort(tests), np.arange(len(Y)))
    for train, test in folds:
        assert np.bincount(Y[test]).tolist() == [40] * 10
        assert np.bincount(Y[train]).tolist() == [160] * 10
        assert np.intersect1d(train, test).size == 0
    again = stratified_kfold(Y, n_splits=5, random_state=0)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(folds, again, strict=True))


def test_stratified_kfold_impossible() -> None:
    with pytest.raises(DataError, match="class 3 has only 12"):
        stratified_kfold(Y_UNEVEN, n_splits=13)
    with pytest.raises(DataError, match="at least 2"):
        stratified_kfold(Y, n_splits=1)


def check_partition(parts: list[np.ndarray], n: int) -> None:
    assert all(len(p) > 0 for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))


def test_iid_partition_is_balanced() -> None:
    parts = partition_clients(Y, 4, "iid", random_state=0)
    check_partition(parts, len(Y))
    for p in parts:
        assert np.bincount(Y[p], minlength=10).tolist() == [50] * 10


def test_label_skew_partition() -> None:
    parts = partition_clients(Y, 5, "label_skew", classes_per_client=2, random_state=0)
    check_partition(parts, len(Y))
    assert [len(np.unique(Y[p])) for p in parts] == [2] * 5
    parts = partition_clients(Y, 4, "label_skew", classes_per_client=3, random_state=1)
    check_partition(parts, len(Y))
    assert all(len(np.unique(Y[p])) == 3 for p in parts)
    with pytest.raises(DataError, match="cannot cover 10 classes"):
        partition_clients(Y, 3, "label_skew", classes_per_client=3)
    with pytest.raises(DataError, match="exceeds"):
        partition_clients(Y, 3, "label_skew", classes_per_client=11)


def test_dirichlet_partition_skew_depends_on_alpha() -> None:
    def skew(alpha: float) -> float:
        parts = partition_clients(Y, 5, "dirichlet", alpha=alpha, random_state=0)
        check_partition(parts, len(Y))
        shares = np.stack([np.bincount(Y[p], minlength=10) for p in parts]) / 200
        return float(shares.std())

    assert skew(0.1) > 2 * skew(100.0)
    with pytest.raises(DataError, match="alpha"):
        partition_clients(Y, 5, "dirichlet", alpha=0.0)


def test_partition_errors() -> None:
    with pytest.raises(DataError, match="cannot give 2001 clients"):
        partition_clients(Y, 2001)
    with pytest.raises(ConfigError, match="did you mean 'dirichlet'"):
        partition_clients(Y, 3, "dirichlet_")
    with pytest.raises(DataError, match="positive integer"):
        partition_clients(Y, 0)


def test_held_out_split_impossible_stratification_is_config_error() -> None:
    # sklearn's ValueError escaped (e.g. `fedviews split-data --config` with data.n_test = 5)
    with pytest.raises(ConfigError, match="at least 10 test and 10 training"):
        held_out_split(Y, 5, 0)
    with pytest.raises(ConfigError, match="smallest class has 1"):
        held_out_split(np.array([0] * 10 + [1]), 3, 0)
    tr, te = held_out_split(Y, 10, 0)
    assert np.bincount(Y[te]).tolist() == [1] * 10 and len(tr) == 1990


def test_nan_or_mixed_labels_are_rejected_by_the_splits() -> None:
    y = Y.astype(float)
    y[:5] = np.nan  # used to be an eleventh class "nan"
    with pytest.raises(DataError, match="NaN"):
        balanced_subsample(y, 5, random_state=0)
    with pytest.raises(DataError, match="different types"):
        partition_clients(np.array([1, "a"] * 10, dtype=object), 2)


def test_deal_views_overlap_must_be_a_fraction() -> None:
    # overlap 0 (or < 0) used to give every party one random sample, > 1 all of them
    for overlap in (0.0, -1.0, 2.0):
        with pytest.raises(ConfigError, match=r"overlap .* must be in \(0, 1\]"):
            deal_views("handwritten", n_per_class=5, overlap=overlap)
