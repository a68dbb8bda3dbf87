"""CIFAR-10 / CIFAR-100 from the standard "python version" folders, for APFed's Table 4 rows.

The datasets cannot be downloaded by fedviews; get ``cifar-10-python.tar.gz``
or ``cifar-100-python.tar.gz`` from https://www.cs.toronto.edu/~kriz/cifar.html,
extract it, and pass the folder (``cifar-10-batches-py`` / ``cifar-100-python``)
or its parent.

The batch files of these folders are Python pickles. They are read with a
restricted unpickler that resolves only NumPy arrays (plain dicts, lists, bytes
and numbers need no globals) and refuses anything else, so a tampered file
cannot run code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np

from fedviews.data._cache import NumpyOnlyUnpickler
from fedviews.errors import ConfigError, DataError

_LAYOUT = {
    "cifar10": ("cifar-10-batches-py", [f"data_batch_{k}" for k in range(1, 6)], ["test_batch"]),
    "cifar100": ("cifar-100-python", ["train"], ["test"]),
}
CIFAR_HINT = (
    "download the python version from https://www.cs.toronto.edu/~kriz/cifar.html, "
    "extract it and pass the extracted folder (or its parent) as the path (in a config: "
    "data.path=FOLDER)"
)

#: ``fedviews datasets list|info``: the CIFAR images, read from a user's copy (APFed's
#: experiments take them with ``data.path``; :func:`load_cifar` in Python)
CIFAR_INFO: dict[str, dict[str, str]] = {
    "cifar10": {
        "description": "CIFAR-10 (Krizhevsky 2009): 60,000 32x32 colour images of 10 classes, "
        "50,000 for training and 10,000 for testing. Images for APFed, read from your copy: "
        f"{CIFAR_HINT}.",
        "size": "60,000 images (3 x 32 x 32), 10 classes",
    },
    "cifar100": {
        "description": "CIFAR-100 (Krizhevsky 2009): 60,000 32x32 colour images of 100 fine (20 "
        "coarse) classes, 50,000 for training and 10,000 for testing. Images for APFed, read "
        f"from your copy: {CIFAR_HINT}.",
        "size": "60,000 images (3 x 32 x 32), 100 fine / 20 coarse classes",
    },
}


def _folder(path: str | Path, name: str) -> Path:
    root = Path(path).expanduser()
    sub = _LAYOUT[name][0]
    for cand in (root / sub, root):
        if (cand / _LAYOUT[name][1][0]).is_file():
            return cand
    raise DataError(
        f"{name}: no {sub!r} folder with {_LAYOUT[name][1][0]!r} under {str(root)!r}; {CIFAR_HINT}"
    )


def _read_batch(file: Path) -> dict[bytes, Any]:
    if not file.is_file():
        raise DataError(f"CIFAR batch file {str(file)!r} is missing; {CIFAR_HINT}")
    try:
        with file.open("rb") as fh:
            batch = NumpyOnlyUnpickler(fh, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as exc:
        raise DataError(f"{file}: not a CIFAR batch file ({exc})") from None
    if not isinstance(batch, dict) or b"data" not in batch:
        raise DataError(f"{file}: not a CIFAR batch (no b'data' entry)")
    return batch


def load_cifar(
    path: str | Path,
    name: str = "cifar10",
    subset: str = "train",
    *,
    label: str = "fine",
) -> tuple[np.ndarray, np.ndarray]:
    """Read CIFAR images and labels.

    Parameters
    ----------
    path : str or Path
        The extracted ``cifar-10-batches-py`` / ``cifar-100-python`` folder or its parent.
    name : {"cifar10", "cifar100"}
    subset : {"train", "test"}
        50,000 training or 10,000 test images.
    label : {"fine", "coarse"}
        CIFAR-100 label set (100 fine or 20 coarse classes); ignored for CIFAR-10.

    Returns
    -------
    images : ndarray of float32, shape (n, 3, 32, 32)
        Channels first, scaled to ``[0, 1]``.
    y : ndarray of int64, shape (n,)

    Raises
    ------
    DataError
        If the folder or a batch file is missing or malformed.
    """
    if name not in _LAYOUT:
        raise ConfigError(f"unknown CIFAR dataset {name!r}; use 'cifar10' or 'cifar100'")
    if subset not in ("train", "test"):
        raise ConfigError(f"subset must be 'train' or 'test', got {subset!r}")
    if label not in ("fine", "coarse"):
        raise ConfigError(f"label must be 'fine' or 'coarse', got {label!r}")
    folder = _folder(path, name)
    files = _LAYOUT[name][1] if subset == "train" else _LAYOUT[name][2]
    key = b"labels" if name == "cifar10" else f"{label}_labels".encode()  # fine or coarse
    images, labels = [], []
    for f in files:
        batch = _read_batch(folder / f)
        if key not in batch:
            raise DataError(f"{folder / f}: no {key!r} entry")
        data = np.asarray(batch[b"data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3072:
            raise DataError(f"{folder / f}: b'data' must be (n, 3072) uint8, got {data.shape}")
        y = np.asarray(batch[key], dtype=np.int64)
        if len(y) != len(data):
            raise DataError(f"{folder / f}: {len(data)} images but {len(y)} labels")
        images.append(data.reshape(-1, 3, 32, 32))
        labels.append(y)
    return np.concatenate(images).astype(np.float32) / 255.0, np.concatenate(labels)
