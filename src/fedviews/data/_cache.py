"""The on-disk data cache: where fetched files live and how they are written safely."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from fedviews.errors import DataError

__all__ = ["cache_dir", "dataset_dir", "load_npz", "run_tool", "save_npz", "write_bytes"]


def cache_dir() -> Path:
    """Return the root of the fedviews data cache.

    ``$FEDVIEWS_DATA`` when set (read at every call, so it can be changed at run
    time), otherwise ``~/.cache/fedviews``. The directory is not created here.
    """
    root = os.environ.get("FEDVIEWS_DATA")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "fedviews"


def dataset_dir(name: str) -> Path:
    """Return ``cache_dir() / name`` (not created)."""
    return cache_dir() / name


def _publish(tmp: str, path: Path) -> None:
    os.chmod(tmp, 0o644)  # mkstemp creates 0600; cache files are ordinary readable files
    os.replace(tmp, path)


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees a half-written file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Save ``arrays`` as a compressed ``.npz`` at ``path``, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
        _publish(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_npz(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray] | None:
    """Load ``keys`` from the ``.npz`` at ``path``; ``None`` if it is missing or unreadable.

    An unreadable cache file is not an error: the caller rebuilds it from the raw files.
    """
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            if not set(keys) <= set(npz.files):
                return None
            return {k: npz[k] for k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def run_tool(cmd: Sequence[str], *, cwd: Path, what: str, manual: str) -> None:
    """Run an external command (pip, npm) or raise ``DataError`` with ``manual`` instructions."""
    try:
        proc = subprocess.run(
            list(cmd), cwd=cwd, capture_output=True, text=True, timeout=600, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DataError(f"could not fetch {what}: {exc}. {manual}") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise DataError(
            f"could not fetch {what}: `{shlex.join(cmd)}` exited with {proc.returncode} "
            f"({' / '.join(tail)}). {manual}"
        )
