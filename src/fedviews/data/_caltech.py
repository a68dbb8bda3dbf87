"""Caltech101-7 from a user-supplied ``.mat`` file, and a documented substitute built from
real Fashion-MNIST images.

Caltech7 (1474 images of 7 Caltech101 classes, 6 feature views: Gabor 48,
wavelet moments 40, CENTRIST 254, HOG 1984, GIST 512, LBP 928) is not shipped by
any package registry, so it must be supplied as a ``.mat`` file in the usual
multi-view format: a cell array ``X`` (1 x V or V x 1, each cell ``n x d_v``) and
labels ``Y`` (``n x 1``).

``caltech7_substitute`` reproduces the *structure* of Caltech7 — 7 visually
distinct classes, 6 heterogeneous hand-crafted feature views, few samples per
class — from real Fashion-MNIST images. It is not Caltech7; results on it must
be reported as such.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedviews.data._cache import user_path
from fedviews.data._dataset import MultiViewDataset
from fedviews.data._features import image_features
from fedviews.data._mnist import (
    FASHION_MNIST_CLASSES,
    fashion_mnist_available,
    fashion_mnist_dir,
    fetch_fashion_mnist,
    read_fashion_mnist,
)
from fedviews.data._registry import register_dataset
from fedviews.data._split import balanced_subsample
from fedviews.errors import DataError

#: view widths of the standard Caltech101-7 file → their names.
CALTECH7_VIEW_NAMES: dict[tuple[int, ...], list[str]] = {
    (48, 40, 254, 1984, 512, 928): ["gabor", "wavelet_moments", "centrist", "hog", "gist", "lbp"],
}
_CALTECH_ENV = "FEDVIEWS_CALTECH7"
_CALTECH_DESCRIPTION = (
    "Caltech101-7: 1474 images of 7 Caltech101 classes (Faces, Motorbikes, Dollar-Bill, "
    "Garfield, Snoopy, Stop-Sign, Windsor-Chair) with 6 feature views (Gabor 48, wavelet "
    "moments 40, CENTRIST 254, HOG 1984, GIST 512, LBP 928), read from a user-supplied .mat "
    "file (cell array X of n x d_v views, labels Y)."
)
_HOW_TO_GET = (
    "Caltech101-7 is not redistributed by fedviews: download the multi-view 'Caltech101-7.mat' "
    "(cell array X, labels Y) from a multi-view clustering benchmark collection, then pass "
    f"load('caltech7', path='.../Caltech101-7.mat') or set {_CALTECH_ENV}. "
    "For a runnable stand-in use load('caltech7_substitute')."
)


def _caltech_path(path: str | Path | None = None) -> Path | None:
    return user_path(path, _CALTECH_ENV)


def _caltech_available() -> bool:
    path = _caltech_path()
    return path is not None and path.is_file()


def _existing_caltech_file(path: str | Path | None = None) -> Path:
    file = _caltech_path(path)
    if file is None:
        raise DataError(f"no Caltech7 file given (path= option or ${_CALTECH_ENV}). {_HOW_TO_GET}")
    if not file.is_file():
        raise DataError(f"Caltech7 file not found: {file}. {_HOW_TO_GET}")
    return file


def _read_mat(path: Path, x_key: str, y_key: str) -> tuple[list[np.ndarray], np.ndarray]:
    from scipy.io import loadmat

    try:
        mat = loadmat(path)
    except NotImplementedError:
        raise DataError(
            f"{path} is a MATLAB v7.3 (HDF5) file, which scipy cannot read; "
            "re-save it in MATLAB with save(..., '-v7')"
        ) from None
    except (OSError, ValueError, TypeError) as exc:
        raise DataError(f"cannot read {path} as a .mat file: {exc}") from None
    missing = [k for k in (x_key, y_key) if k not in mat]
    if missing:
        found = sorted(k for k in mat if not k.startswith("__"))
        raise DataError(f"{path} has no variable(s) {missing}; it holds {found}")
    cells, labels = mat[x_key], np.asarray(mat[y_key])
    if cells.dtype != object or cells.ndim != 2 or 1 not in cells.shape:
        raise DataError(
            f"{path}: {x_key} must be a 1 x V or V x 1 cell array of views, "
            f"got {cells.dtype} array of shape {cells.shape}"
        )
    if labels.ndim > 2 or (labels.ndim == 2 and 1 not in labels.shape):
        raise DataError(f"{path}: {y_key} must be an n x 1 label vector, got shape {labels.shape}")
    y = labels.ravel()
    if y.dtype.kind == "f" and np.isfinite(y).all() and np.array_equal(y, np.round(y)):
        y = y.astype(np.int64)  # MATLAB stores class numbers as doubles
    views = []
    for k, cell in enumerate(cells.ravel()):
        X = np.asarray(cell)
        if X.ndim != 2:
            raise DataError(f"{path}: {x_key}{{{k + 1}}} is not a matrix (shape {X.shape})")
        if X.shape[0] != len(y) and X.shape[1] == len(y):
            X = X.T  # some copies store views as d x n
        if X.shape[0] != len(y):
            raise DataError(f"{path}: {x_key}{{{k + 1}}} has shape {X.shape} for {len(y)} labels")
        views.append(np.asarray(X, dtype=np.float64))
    return views, y


@register_dataset(
    "caltech7",
    description=_CALTECH_DESCRIPTION,
    size="1474 samples x 6 views (48+40+254+1984+512+928 features), 7 classes",
    source=f"user-supplied .mat file (path= option or ${_CALTECH_ENV})",
    fetch=_existing_caltech_file,
    location=_caltech_path,
    available=_caltech_available,
)
def load_caltech7(
    *, path: str | None = None, x_key: str = "X", y_key: str = "Y"
) -> MultiViewDataset:
    """Load Caltech101-7 (or any dataset in the same ``.mat`` layout).

    Parameters
    ----------
    path : str, optional
        The ``.mat`` file; default ``$FEDVIEWS_CALTECH7``.
    x_key, y_key : str
        Names of the view cell array and of the label vector in the file.

    Returns
    -------
    MultiViewDataset
        Views in file order with the widths found in the file (named after the
        Caltech7 features when the widths match, else ``view0`` …); ``y`` indexes
        the sorted distinct labels; IDs ``"caltech7-0000"`` … (row order).

    Raises
    ------
    DataError
        The file is missing, unreadable or not in the expected layout.
    """
    file = _existing_caltech_file(path)
    views, labels = _read_mat(file, x_key, y_key)
    classes, y = np.unique(labels, return_inverse=True)
    widths = tuple(int(v.shape[1]) for v in views)
    names = CALTECH7_VIEW_NAMES.get(widths, [f"view{k}" for k in range(len(views))])
    return MultiViewDataset(
        views=views,
        y=y.ravel(),
        ids=np.array([f"caltech7-{i:04d}" for i in range(len(labels))]),
        view_names=names,
        class_names=[str(c) for c in classes],
        name="caltech7",
        description=f"{_CALTECH_DESCRIPTION} File: {file}",
    )


# --------------------------------------------------------------------------- the substitute

#: Fashion-MNIST classes used by ``caltech7_substitute``: all but Pullover (2), Coat (4)
#: and Shirt (6), the upper-body garments most confused with each other and with
#: T-shirt/top, so that, as in Caltech7, the 7 categories are visually distinct.
SUBSTITUTE_CLASSES = (0, 1, 3, 5, 7, 8, 9)
_SUBSTITUTE_DESCRIPTION = (
    "Substitute for Caltech7 built from real images (NOT Caltech7): n_per_class Fashion-MNIST "
    "images of each of 7 classes ("
    + ", ".join(FASHION_MNIST_CLASSES[c] for c in SUBSTITUTE_CLASSES)
    + "), drawn from all 70,000 with random_state, described by 6 hand-crafted views: raw "
    "pixels 784, HOG 324, uniform-LBP quadrant histograms 40, Gabor filter-bank energy 32, "
    "Hu + Zernike moments 32, intensity histogram 32. Default 25 per class mirrors "
    "Caltech7's 20 train + 5 test per class protocol."
)


@register_dataset(
    "caltech7_substitute",
    description=_SUBSTITUTE_DESCRIPTION,
    size="7 x n_per_class samples (default 175) x 6 views (784+324+40+32+32+32), 7 classes",
    source="Fashion-MNIST (Debian dataset-fashion-mnist), features computed with scikit-image",
    fetch=fetch_fashion_mnist,
    location=fashion_mnist_dir,
    available=fashion_mnist_available,
)
def load_caltech7_substitute(
    *, n_per_class: int = 25, random_state: int = 0, data_dir: str | None = None
) -> MultiViewDataset:
    """Load the Caltech7 substitute: 7 Fashion-MNIST classes, 6 hand-crafted views.

    Parameters
    ----------
    n_per_class : int
        Images per class (default 25), sampled without replacement from all
        70,000 Fashion-MNIST images.
    random_state : int
        Seed of the class-balanced sample.
    data_dir : str, optional
        Fashion-MNIST directory (see ``fashion_mnist``).

    Returns
    -------
    MultiViewDataset
        ``7 * n_per_class`` samples; views ``pixels, hog, lbp, gabor, moments,
        intensity``; IDs are the Fashion-MNIST IDs (``"train-01234"``);
        ``images`` the uint8 images.
    """
    images, labels, ids = read_fashion_mnist("all", data_dir)
    pool = np.flatnonzero(np.isin(labels, SUBSTITUTE_CLASSES))
    pick = pool[balanced_subsample(labels[pool], n_per_class, random_state)]
    chosen = images[pick]
    views, names = image_features(chosen)
    remap = {c: i for i, c in enumerate(SUBSTITUTE_CLASSES)}
    return MultiViewDataset(
        views=views,
        y=np.array([remap[int(c)] for c in labels[pick]], dtype=np.int64),
        ids=ids[pick],
        view_names=names,
        class_names=[FASHION_MNIST_CLASSES[c] for c in SUBSTITUTE_CLASSES],
        name="caltech7_substitute",
        description=_SUBSTITUTE_DESCRIPTION,
        images=chosen,
    )
