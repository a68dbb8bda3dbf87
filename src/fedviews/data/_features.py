"""Hand-crafted image features, one view each (Caltech7-style feature sets from raw images).

Every function takes uint8 images ``(n, H, W)`` and returns a float64
``(n, d)`` array. Widths for 28 x 28 images: pixels 784, hog 324, lbp 40,
gabor 32, moments 32, intensity 32.
"""

from __future__ import annotations

from collections.abc import Callable
from math import factorial

import numpy as np

_GABOR_FREQUENCIES = (0.1, 0.2, 0.3, 0.4)
_GABOR_ORIENTATIONS = 4
_ZERNIKE_ORDER = 8
_INTENSITY_BINS = 32


def _unit(images: np.ndarray) -> np.ndarray:
    return np.asarray(images, dtype=np.float64) / 255.0


def pixel_features(images: np.ndarray) -> np.ndarray:
    """Raw pixels scaled to ``[0, 1]``, flattened (``H * W`` features)."""
    return _unit(images).reshape(len(images), -1)


def hog_features(images: np.ndarray) -> np.ndarray:
    """Histogram of oriented gradients: 9 orientations, 7 x 7-pixel cells, 2 x 2-cell blocks."""
    from skimage.feature import hog

    return np.stack(
        [
            hog(img, orientations=9, pixels_per_cell=(7, 7), cells_per_block=(2, 2))
            for img in _unit(images)
        ]
    )


def lbp_features(images: np.ndarray) -> np.ndarray:
    """Uniform LBP (8 neighbours, radius 1) histograms of the 4 image quadrants (4 x 10 bins)."""
    from skimage.feature import local_binary_pattern

    n_codes = 10  # P + 2 codes for the "uniform" method with P = 8
    n, height, width = images.shape
    out = np.empty((n, 4 * n_codes))
    for i, img in enumerate(np.asarray(images, dtype=np.uint8)):
        codes = local_binary_pattern(img, P=8, R=1, method="uniform").astype(np.int64)
        quads = [
            codes[r : r + height // 2, c : c + width // 2]
            for r in (0, height // 2)
            for c in (0, width // 2)
        ]
        out[i] = np.concatenate([np.bincount(q.ravel(), minlength=n_codes) / q.size for q in quads])
    return out


def gabor_features(images: np.ndarray) -> np.ndarray:
    """Gabor filter-bank energy: mean and std of the response magnitude of 4 x 4 filters.

    Filters are :func:`skimage.filters.gabor_kernel` at frequencies 0.1-0.4 and 4
    orientations, applied to the whole batch with FFT convolution.
    """
    from scipy.signal import fftconvolve
    from skimage.filters import gabor_kernel

    x = _unit(images)
    feats = []
    for freq in _GABOR_FREQUENCIES:
        for k in range(_GABOR_ORIENTATIONS):
            kernel = gabor_kernel(freq, theta=np.pi * k / _GABOR_ORIENTATIONS)[None]
            real = fftconvolve(x, kernel.real, mode="same", axes=(1, 2))
            imag = fftconvolve(x, kernel.imag, mode="same", axes=(1, 2))
            mag = np.hypot(real, imag)
            feats += [mag.mean(axis=(1, 2)), mag.std(axis=(1, 2))]
    return np.stack(feats, axis=1)


def _zernike_basis(height: int, width: int, order: int) -> np.ndarray:
    """Complex Zernike polynomials ``V_nm`` (``m >= 0``, ``n - m`` even) on the inscribed disk."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float64)
    radius = min(height, width) / 2.0
    x = (xx - (width - 1) / 2.0) / radius
    y = (yy - (height - 1) / 2.0) / radius
    rho, theta = np.hypot(x, y), np.arctan2(y, x)
    inside = rho <= 1.0
    basis = []
    for n in range(order + 1):
        for m in range(n % 2, n + 1, 2):
            radial = sum(
                (-1) ** s
                * factorial(n - s)
                / (factorial(s) * factorial((n + m) // 2 - s) * factorial((n - m) // 2 - s))
                * rho ** (n - 2 * s)
                for s in range((n - m) // 2 + 1)
            )
            basis.append((n + 1) / np.pi * radial * np.exp(-1j * m * theta) * inside)
    return np.stack(basis)


def moment_features(images: np.ndarray) -> np.ndarray:
    """Shape moments: 7 log-scaled Hu invariants and 25 Zernike magnitudes (order <= 8)."""
    from skimage.measure import moments_central, moments_hu, moments_normalized

    x = _unit(images)
    hu = np.empty((len(x), 7))
    for i, img in enumerate(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            hu[i] = moments_hu(moments_normalized(moments_central(img, order=3), order=3))
    hu = np.nan_to_num(hu, nan=0.0, posinf=0.0, neginf=0.0)
    hu = -np.sign(hu) * np.log10(np.abs(hu) + 1e-30)
    basis = _zernike_basis(x.shape[1], x.shape[2], _ZERNIKE_ORDER)
    zernike = np.abs(np.einsum("nhw,khw->nk", x, basis))
    return np.hstack([hu, zernike])


def intensity_features(images: np.ndarray) -> np.ndarray:
    """Normalised 32-bin histogram of pixel intensities."""
    bins = (np.asarray(images, dtype=np.int64) * _INTENSITY_BINS) // 256
    flat = bins.reshape(len(images), -1)
    counts = np.stack([np.bincount(row, minlength=_INTENSITY_BINS) for row in flat])
    return counts / flat.shape[1]


#: view name → feature function, in view order.
IMAGE_FEATURES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "pixels": pixel_features,
    "hog": hog_features,
    "lbp": lbp_features,
    "gabor": gabor_features,
    "moments": moment_features,
    "intensity": intensity_features,
}


def image_features(images: np.ndarray) -> tuple[list[np.ndarray], list[str]]:
    """Compute all :data:`IMAGE_FEATURES` views of ``images``; return ``(views, names)``."""
    return [fn(images) for fn in IMAGE_FEATURES.values()], list(IMAGE_FEATURES)
