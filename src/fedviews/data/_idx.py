"""A validating reader for the IDX format of (Fashion-)MNIST.

IDX layout (all integers big-endian)::

    byte 0-1   0x00 0x00
    byte 2     element type: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
               0x0D float32, 0x0E float64
    byte 3     number of dimensions ``k``
    then       ``k`` uint32 dimension sizes
    then       the elements, row-major

Files may be gzip-compressed (detected from the content, not the file name).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path

import numpy as np

from fedviews.errors import DataError

#: IDX element type code → big-endian numpy dtype.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read IDX file {path}: {exc}") from None
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as exc:
        raise DataError(f"{path} is a corrupt or truncated gzip file: {exc}") from None


def read_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file (optionally gzip-compressed) into a native-endian array.

    Parameters
    ----------
    path : str or Path

    Returns
    -------
    ndarray
        Shape given by the header, dtype given by the element-type byte (in
        native byte order).

    Raises
    ------
    DataError
        The file is missing, not gzip-decodable, has a bad magic number or
        element type, or holds fewer/more bytes than its header announces.
    """
    path = Path(path)
    data = _read_bytes(path)
    if len(data) < 4:
        raise DataError(f"{path}: {len(data)} bytes is too short for an IDX header")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise DataError(f"{path}: bad IDX magic number 0x{data[:4].hex()} (must start 0x0000)")
    if code not in IDX_DTYPES:
        raise DataError(f"{path}: unknown IDX element type 0x{code:02x}")
    if ndim == 0:
        raise DataError(f"{path}: IDX header declares 0 dimensions")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{path}: truncated IDX header ({len(data)} of {header} bytes)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = IDX_DTYPES[code]
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    got = len(data) - header
    if got != expected:
        state = "truncated" if got < expected else "has trailing bytes"
        raise DataError(
            f"{path}: IDX file {state}: header {dims} of {dtype.name} needs {expected} "
            f"data bytes, found {got}"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="))
