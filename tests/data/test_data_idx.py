"""The IDX reader, on tiny files written here and on the real Fashion-MNIST header."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest

from fedviews.data import read_idx
from fedviews.errors import DataError


def idx_bytes(arr: np.ndarray, code: int) -> bytes:
    header = struct.pack(">HBB", 0, code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(arr.dtype.newbyteorder(">")).tobytes()


def test_reads_uint8_images_plain_and_gzip(tmp_path: Path) -> None:
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    (tmp_path / "a.idx").write_bytes(idx_bytes(arr, 0x08))
    (tmp_path / "a.idx.gz").write_bytes(gzip.compress(idx_bytes(arr, 0x08)))
    for name in ("a.idx", "a.idx.gz"):
        out = read_idx(tmp_path / name)
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize(
    ("code", "dtype"),
    [(0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32), (0x0D, np.float32), (0x0E, np.float64)],
)
def test_reads_big_endian_types(tmp_path: Path, code: int, dtype: type) -> None:
    arr: np.ndarray = np.array([-3, 1, 2, 100], dtype=dtype)
    path = tmp_path / "v.idx"
    path.write_bytes(idx_bytes(arr, code))
    out = read_idx(path)
    assert out.dtype == np.dtype(dtype) and out.dtype.isnative
    np.testing.assert_array_equal(out, arr)


def test_truncated_data_is_data_error(tmp_path: Path) -> None:
    raw = idx_bytes(np.zeros((5, 28, 28), dtype=np.uint8), 0x08)
    path = tmp_path / "t.idx"
    path.write_bytes(raw[:-10])
    with pytest.raises(DataError, match="truncated"):
        read_idx(path)
    path.write_bytes(raw + b"\x00")
    with pytest.raises(DataError, match="trailing"):
        read_idx(path)
    path.write_bytes(raw[:9])
    with pytest.raises(DataError, match="truncated IDX header"):
        read_idx(path)


def test_truncated_gzip_is_data_error(tmp_path: Path) -> None:
    path = tmp_path / "t.idx.gz"
    path.write_bytes(gzip.compress(idx_bytes(np.ones((50, 50), dtype=np.uint8), 0x08))[:-12])
    with pytest.raises(DataError, match="gzip"):
        read_idx(path)


def test_bad_header_is_data_error(tmp_path: Path) -> None:
    path = tmp_path / "b.idx"
    path.write_bytes(b"\x01\x00\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(DataError, match="magic"):
        read_idx(path)
    path.write_bytes(b"\x00\x00\x07\x01\x00\x00\x00\x01\x00")
    with pytest.raises(DataError, match="element type 0x07"):
        read_idx(path)
    with pytest.raises(DataError, match="cannot read"):
        read_idx(tmp_path / "missing.idx")


def test_real_fashion_mnist_labels() -> None:
    path = Path("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")
    if not path.is_file():
        pytest.skip("dataset-fashion-mnist is not installed")
    labels = read_idx(path)
    assert labels.shape == (10_000,) and labels.dtype == np.uint8
    assert np.bincount(labels).tolist() == [1000] * 10
