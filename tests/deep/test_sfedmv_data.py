"""Multi-view sequence data: the container, the user-data loader and the watch dataset."""

from __future__ import annotations

import io
import pickle

import numpy as np
import pytest

from fedviews.data import (
    MultiViewSequences,
    check_sequences,
    list_sequence_datasets,
    load_sequences,
    sequences_from_arrays,
)
from fedviews.data._cache import NumpyOnlyUnpickler
from fedviews.errors import ConfigError, DataError


def _ragged(n: int, c: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((int(rng.integers(3, 12)), c)) for _ in range(n)]


def test_sequences_from_arrays_accepts_lists_and_3d_arrays() -> None:
    acc = _ragged(6, 3, 0)
    gyro = np.zeros((6, 5, 2))
    ds = sequences_from_arrays(
        [acc, gyro], ["b", "a", "b", "a", "c", "c"], [0, 0, 0, 1, 1, 1], view_names=["acc", "gyro"]
    )
    assert ds.n_samples == 6 and ds.n_channels == [3, 2]
    assert ds.class_names == ["a", "b", "c"] and ds.y.tolist() == [1, 0, 1, 0, 2, 2]
    assert ds.lengths()[:, 1].tolist() == [5] * 6
    assert ds.views[0][0].dtype == np.float32
    (v0, y0), (v1, y1) = ds.by_client()
    assert len(v0[0]) == 3 and y1.tolist() == [0, 2, 2]
    assert ds.select_views(["gyro"]).n_channels == [2]


def test_user_data_validation_errors() -> None:
    acc = _ragged(6, 3, 0)
    with pytest.raises(DataError, match="different sample counts"):
        sequences_from_arrays([acc, acc[:5]], np.zeros(6), np.zeros(6))
    with pytest.raises(DataError, match="missing"):
        sequences_from_arrays([acc, None], np.zeros(6), np.zeros(6))
    with pytest.raises(DataError, match="channel counts"):
        sequences_from_arrays([[*acc[:5], np.zeros((4, 2))]], np.zeros(6), np.zeros(6))
    with pytest.raises(DataError, match="empty sequence"):
        sequences_from_arrays([[*acc[:5], np.zeros((0, 3))]], np.zeros(6), np.zeros(6))
    with pytest.raises(DataError, match="NaN"):
        sequences_from_arrays([[*acc[:5], np.full((4, 3), np.nan)]], np.zeros(6), np.zeros(6))
    with pytest.raises(DataError, match="labels"):
        sequences_from_arrays([acc], np.zeros(5), np.zeros(6))
    with pytest.raises(DataError, match="client_ids"):
        sequences_from_arrays([acc], np.zeros(6), np.zeros(4))
    with pytest.raises(DataError, match="class_names"):
        sequences_from_arrays([acc], ["x"] * 6, np.zeros(6), class_names=["y"])
    # a client's (views, y) pair where its views go (SFedMV.predict(by_client()[0])): numpy's
    # "inhomogeneous shape" error named no mistake
    with pytest.raises(DataError, match=r"a \(views, y\) pair.*pass its views alone"):
        check_sequences(([acc, acc], np.zeros(6)))
    assert len(check_sequences([acc, acc])) == 2


def test_filter_lengths_drops_whole_samples_and_counts_them() -> None:
    seqs = [np.ones((t, 1)) for t in (2, 5, 9, 14)]
    ds = sequences_from_arrays([seqs], [0, 1, 0, 1], [0, 0, 1, 1])
    out = ds.filter_lengths(4, 10)
    assert out.lengths()[:, 0].tolist() == [5, 9]  # kept whole, never truncated
    assert out.n_dropped == 2 and out.filter_lengths(6).n_dropped == 3
    with pytest.raises(ConfigError):
        ds.filter_lengths(5, 3)
    with pytest.raises(DataError, match="no sample"):
        ds.filter_lengths(20)


def test_watch_dataset() -> None:
    assert list_sequence_datasets() == ["watch"]
    ds = load_sequences("watch", window_seconds=None)  # whole recordings
    assert isinstance(ds, MultiViewSequences)
    assert ds.n_samples == 140 and ds.n_views == 2 and ds.n_channels == [3, 3]
    assert ds.view_names == ["accelerometer", "gyroscope"]
    assert ds.class_names == ["PEN", "ABD", "FEL", "IR", "ER", "TRAP", "ROW"]
    assert np.bincount(ds.y).tolist() == [20] * 7 and ds.clients() == list(range(1, 11))
    assert ds.lengths().min() == 190 and ds.lengths().max() == 524  # 947..2618 at 50 Hz / 5
    win = load_sequences("watch")
    assert win.n_samples + win.n_dropped > 1000 and win.n_dropped > 0
    L = win.lengths()[:, 0]
    assert L.min() >= 20 and L.max() <= 60 and len(np.unique(L)) > 20
    # windows of one recording share a group and never mix labels or subjects
    for g in np.unique(win.groups)[:10]:
        idx = win.groups == g
        assert len(set(win.y[idx])) == 1 and len(set(win.client_ids[idx])) == 1
    with pytest.raises(ConfigError, match="did you mean"):
        load_sequences("wach")
    with pytest.raises(ConfigError, match="unknown options"):
        load_sequences("watch", window=3)


def test_restricted_unpickler_refuses_code() -> None:
    evil = pickle.dumps(print)  # builtins.print: any non-NumPy global is refused
    with pytest.raises(DataError, match="refusing"):
        NumpyOnlyUnpickler(io.BytesIO(evil)).load()
    ok = pickle.dumps(np.arange(3.0), protocol=2)
    np.testing.assert_array_equal(NumpyOnlyUnpickler(io.BytesIO(ok)).load(), np.arange(3.0))


@pytest.mark.parametrize(
    "options",
    [
        {"downsample": 2.5},  # was accepted: 2-step blocks (25 Hz) reported and windowed as 20 Hz
        {"downsample": "3"},  # was a TypeError from the division
        {"window_seconds": (3.0,)},  # was a ValueError from the unpacking
        {"window_seconds": (3.0, float("inf"))},  # was an OverflowError from numpy's uniform
        {"window_seconds": "36"},  # was accepted as (3.0, 6.0)
    ],
)
def test_watch_loader_refuses_bad_window_options(options: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match="downsample|window_seconds"):
        load_sequences("watch", **options)


def test_duplicate_class_names_are_refused() -> None:
    # class_names ["a", "b", "a"] used to map every "a" to index 2 and leave class 0 empty
    seqs = [np.ones((4, 1))] * 4
    with pytest.raises(DataError, match="class_names .* must be distinct"):
        sequences_from_arrays(
            [seqs], ["a", "b", "a", "b"], [0, 0, 1, 1], class_names=["a", "b", "a"]
        )
