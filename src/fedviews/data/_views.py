"""Turning images into views: horizontal strips (one party per strip) and back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedviews.errors import ConfigError, DataError


def _check_images(images: Any) -> np.ndarray:
    arr = np.asarray(images)
    if arr.ndim != 3 or 0 in arr.shape:
        raise DataError(f"images must be a non-empty (n, H, W) array, got shape {arr.shape}")
    return arr


def split_strips(images: Any, m: int) -> list[np.ndarray]:
    """Cut each image into ``m`` horizontal strips and flatten each strip into a view.

    Rows are divided as evenly as :func:`numpy.array_split` does (the first
    ``H % m`` strips get one extra row), so a 28-row image gives 4 strips of
    7 rows (196 features each) or 3 strips of 10, 9 and 9 rows.

    Parameters
    ----------
    images : array-like, shape (n, H, W)
    m : int
        Number of strips, ``1 <= m <= H``.

    Returns
    -------
    list of ndarray
        ``m`` arrays of shape ``(n, rows_k * W)``, same dtype as ``images``.

    Raises
    ------
    DataError
        ``images`` is not 3-D or ``m`` is out of range.
    """
    arr = _check_images(images)
    n, height, _ = arr.shape
    if not isinstance(m, (int, np.integer)) or not 1 <= m <= height:
        raise DataError(
            f"cannot cut {height}-row images into m={m!r} strips; need 1 <= m <= {height}"
        )
    return [strip.reshape(n, -1) for strip in np.array_split(arr, int(m), axis=1)]


def join_strips(views: Sequence[Any], width: int) -> np.ndarray:
    """Inverse of :func:`split_strips`: stack flattened strips back into ``(n, H, W)`` images.

    Parameters
    ----------
    views : sequence of array-like, each ``(n, rows_k * width)``
    width : int
        Image width ``W``.

    Raises
    ------
    DataError
        A view's length or width is inconsistent with the others / with ``width``.
    """
    if len(views) == 0:
        raise DataError("join_strips needs at least one view")
    if not isinstance(width, (int, np.integer)) or width < 1:
        raise DataError(f"width must be a positive integer, got {width!r}")
    arrs = [np.asarray(v) for v in views]
    n = arrs[0].shape[0] if arrs[0].ndim == 2 else -1
    strips = []
    for k, v in enumerate(arrs):
        if v.ndim != 2 or v.shape[0] != n:
            raise DataError(
                f"views[{k}] has shape {v.shape}; every view must be ({n}, rows*{width})"
            )
        if v.shape[1] % width:
            raise DataError(
                f"views[{k}] has {v.shape[1]} features, not a multiple of width {width}"
            )
        strips.append(v.reshape(n, v.shape[1] // width, width))
    return np.concatenate(strips, axis=1)


def image_views(
    images: np.ndarray, views: str, n_views: int | None, *, dataset: str
) -> tuple[list[np.ndarray], list[str]]:
    """Build the views of an image dataset (shared by the MNIST-style loaders).

    ``views="strips"``: ``n_views`` (default 4) horizontal strips, named
    ``rows00-06`` etc.; ``views="pixels"``: one view of all pixels. Pixel values
    are scaled from uint8 to float in ``[0, 1]``.
    """
    if views == "pixels":
        if n_views not in (None, 1):
            raise ConfigError(f"{dataset}: views='pixels' is one view; got n_views={n_views}")
        m = 1
    elif views == "strips":
        m = 4 if n_views is None else n_views
        if not isinstance(m, int) or not 1 <= m <= images.shape[1]:
            raise ConfigError(f"{dataset}: n_views={m!r} must be an int in 1..{images.shape[1]}")
    else:
        raise ConfigError(f"{dataset}: views={views!r} must be 'strips' or 'pixels'")
    parts = split_strips(images, m)
    starts = np.cumsum([0, *(p.shape[1] // images.shape[2] for p in parts)])
    names = [f"rows{a:02d}-{b - 1:02d}" for a, b in zip(starts[:-1], starts[1:], strict=True)]
    return [np.divide(p, 255.0, dtype=np.float64) for p in parts], names
