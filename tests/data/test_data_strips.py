"""Horizontal strips: split and join."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.data import join_strips, split_strips
from fedviews.errors import DataError

rng = np.random.default_rng(0)
IMAGES = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize(("m", "widths"), [(2, [392, 392]), (3, [280, 252, 252]), (4, [196] * 4)])
def test_split_widths_and_exact_reconstruction(m: int, widths: list[int]) -> None:
    views = split_strips(IMAGES, m)
    assert [v.shape for v in views] == [(6, w) for w in widths]
    assert all(v.dtype == np.uint8 for v in views)
    np.testing.assert_array_equal(views[0][:, :28], IMAGES[:, 0, :])
    np.testing.assert_array_equal(join_strips(views, 28), IMAGES)


def test_every_row_count_round_trips() -> None:
    imgs = rng.random((3, 5, 4))
    for m in range(1, 6):
        np.testing.assert_array_equal(join_strips(split_strips(imgs, m), 4), imgs)


def test_bad_requests_raise_data_error() -> None:
    with pytest.raises(DataError, match="1 <= m <= 28"):
        split_strips(IMAGES, 29)
    with pytest.raises(DataError):
        split_strips(IMAGES, 0)
    with pytest.raises(DataError, match=r"\(n, H, W\)"):
        split_strips(IMAGES[0], 2)
    with pytest.raises(DataError, match="multiple of width"):
        join_strips([np.zeros((2, 30))], 28)
    with pytest.raises(DataError):
        join_strips([np.zeros((2, 56)), np.zeros((3, 56))], 28)
