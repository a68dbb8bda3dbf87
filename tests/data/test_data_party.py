"""PartyData: what one organisation holds, checked on construction."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.data import PartyData, check_classes, check_y, load
from fedviews.errors import DataError


@pytest.fixture(scope="module")
def small():
    ds = load("handwritten").subset(np.arange(0, 2000, 100))
    return ds.ids, ds.views[1], ds.y


def test_missing_labels_are_rejected(small) -> None:
    ids, X, y = small
    with pytest.raises(DataError, match="NaN or infinite labels"):
        PartyData(ids, X, np.where(np.arange(len(y)) == 0, np.nan, y))
    with pytest.raises(DataError, match=r"missing \(None or NaN\)"):
        PartyData(ids, X, np.array([None, *y[1:]], dtype=object))
    with pytest.raises(DataError, match=r"missing \(None or NaN\)"):
        check_y(np.array(["a", "b", np.nan], dtype=object), 3)  # pandas' missing string


def test_object_ids_and_labels_of_strings_become_str_arrays(tmp_path, small) -> None:
    # object arrays (pandas columns, Parquet string labels) were saved to .npz pickled:
    # the file could not be read back ("Object arrays cannot be loaded")
    ids, X, y = small
    d = PartyData(ids.astype(object), X, np.array([f"c{v}" for v in y], dtype=object))
    assert d.ids.dtype.kind == "U" and d.y is not None and d.y.dtype.kind == "U"
    np.savez(tmp_path / "p.npz", **d.arrays())
    with np.load(tmp_path / "p.npz", allow_pickle=False) as f:
        np.testing.assert_array_equal(f["ids"], ids)


def test_a_real_target_is_data_but_no_classes() -> None:
    """A party's labels may be a regression target (an algorithm of one's own, e.g. the FedRidge
    example); the estimators, all classifiers, refuse one instead of counting its values as
    classes (before: 60 distinct floats became 60 "classes")."""
    target = np.linspace(0.0, 1.0, 60)
    party = PartyData(np.arange(60), np.ones((60, 2)), target)
    np.testing.assert_array_equal(party.y, target)
    with pytest.raises(DataError, match=r"y holds continuous values \(e.g. 0.0169492; 60 distinct"):
        check_classes(target, 60)
    np.testing.assert_array_equal(check_classes(np.arange(60.0) % 3, 60), np.arange(60.0) % 3)


def test_an_empty_string_id_is_refused() -> None:
    """An ID "" (an empty cell of a table, a blank in an .npz) matched no other party's row
    and was dropped without a word."""
    with pytest.raises(DataError, match="ids contains 2 empty ID\\(s\\) \\(row 1 first\\)"):
        PartyData(np.array(["a", "", " "]), np.ones((3, 1)))
