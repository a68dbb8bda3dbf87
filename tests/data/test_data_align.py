"""Sample-ID alignment."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.data import align, align_views
from fedviews.errors import ConfigError, DataError


def test_shuffled_ids_align() -> None:
    rng = np.random.default_rng(0)
    ids = np.array([f"id-{i:03d}" for i in range(100)])
    a = rng.permutation(ids)[:80]
    b = rng.permutation(ids)[10:]
    c = rng.permutation(ids)
    pa, pb, pc = align(a, b, c)
    common = np.intersect1d(a, b)
    assert len(pa) == len(common) > 0
    for ids_p, pos in ((a, pa), (b, pb), (c, pc)):
        np.testing.assert_array_equal(ids_p[pos], common)


def test_integer_ids_and_docstring_example() -> None:
    pa, pb = align([5, 3, 9, 1], [9, 1, 7])
    assert pa.tolist() == [3, 2] and pb.tolist() == [1, 0]
    pa, pb = align(["c", "a", "b"], ["b", "d", "c"])
    assert pa.tolist() == [2, 0] and pb.tolist() == [0, 2]


def test_align_views_reorders_rows() -> None:
    ids_a = np.array(["x", "y", "z", "w"])
    ids_b = np.array(["z", "x", "q"])
    Xa = np.arange(8.0).reshape(4, 2)
    Xb = np.array([[20.0], [0.0], [99.0]])
    (Aa, Ab), common = align_views([Xa, Xb], [ids_a, ids_b])
    assert common.tolist() == ["x", "z"]
    np.testing.assert_array_equal(Aa, [[0, 1], [4, 5]])
    np.testing.assert_array_equal(Ab, [[0.0], [20.0]])


def test_alignment_errors() -> None:
    with pytest.raises(DataError, match="duplicated IDs"):
        align(["a", "b", "a"], ["a"])
    with pytest.raises(DataError, match="share no sample ID"):
        align(["a", "b"], ["c", "d"])
    with pytest.raises(DataError, match="ids of party 0 contains 1 NaN or infinite IDs"):
        align(np.array([1.0, 2.0, np.nan]), np.array([1.0, 2.0]))  # (its row dropped unnamed)
    with pytest.raises(DataError, match="mix types"):
        align(["1", "2"], [1, 2])
    with pytest.raises(DataError, match="at least one"):
        align()
    with pytest.raises(ConfigError, match="did you mean 'plain'"):
        align(["a"], ["a"], method="plane")
    with pytest.raises(DataError, match="3 rows but its ID list has shape"):
        align_views([np.zeros((3, 2)), np.zeros((2, 2))], [["a", "b"], ["a", "b"]])
    with pytest.raises(DataError, match="2 views but 1 ID lists"):
        align_views([np.zeros((2, 2)), np.zeros((2, 2))], [["a", "b"]])


def test_int64_and_uint64_ids_above_2_53_are_not_merged() -> None:
    # numpy compares int64 with uint64 as float64: 2**62 + 1 and 2**62 + 2 became one ID,
    # and the second party got a phantom common sample it does not hold
    a = np.array([2**62 + 1, 2**62 + 2], dtype=np.int64)
    b = np.array([2**62 + 3, 2**62 + 1], dtype=np.uint64)
    pa, pb = align(a, b)
    assert pa.tolist() == [0] and pb.tolist() == [1]


def test_object_ids_of_strings_align_with_str_ids() -> None:
    # a pandas column of strings arrives as an object array: it is a list of strings
    a = np.array(["c", "a", "b"], dtype=object)
    pa, pb = align(a, np.array(["b", "d", "c"]))
    assert pa.tolist() == [2, 0] and pb.tolist() == [0, 2]
    with pytest.raises(DataError, match=r"mixes IDs of types \['int', 'str'\]"):
        align(np.array([1, "a"], dtype=object), ["a"])
