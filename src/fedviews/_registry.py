"""Name → object registries (algorithms, estimators, experiments, datasets).

The lowest layer of fedviews after :mod:`fedviews.errors`: algorithms register
themselves here, and the experiment runner, the deployment and the command line
look them up, so no algorithm imports the layers above it. Registering a second
object under a name that is taken is an error (as Flower's handler decorators
refuse a second registration); providers (modules whose import registers
entries) load lazily on the first miss, so optional extras stay optional.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from fedviews.errors import ConfigError

T = TypeVar("T")


def _origin(obj: object) -> str:
    """Where ``obj`` (a function, a class, or an instance of one) was defined: ``module.name``."""
    of = obj if callable(obj) and hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(of, '__module__', '?')}.{getattr(of, '__qualname__', repr(of))}"


class Registry(Generic[T]):
    """A table of named entries of one kind (``what``: "algorithm", "dataset", ...).

    ``providers`` are module names imported, in order, the first time a name is
    missing; a provider that needs a missing optional extra (``torch``) is skipped.
    """

    def __init__(self, what: str, providers: tuple[str, ...] = ()) -> None:
        self.what = what
        self.providers = providers
        self._table: dict[str, T] = {}
        self._loaded = 0  # providers imported so far (in order)

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name``; a second registration of ``name`` is an error."""
        old = self._table.get(name)
        if old is not None and old is not obj:
            raise ConfigError(
                f"{self.what} {name!r} is registered twice (by {_origin(old)} and by "
                f"{_origin(obj)}): give one of them another name"
            )
        self._table[name] = obj
        return obj

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""
        return lambda obj: self.add(name, obj)

    def load(self, until: str | None = None) -> None:
        """Import the providers once each, in order (the skipped ones need an optional extra);
        ``until``: stop as soon as that name is registered, so that looking one entry up
        imports only the providers up to its own (a config is checked before the heavy
        modules of other entries load)."""
        for mod in self.providers[self._loaded :]:
            if until is not None and until in self._table:
                return
            self._loaded += 1
            try:
                importlib.import_module(mod)
            except ModuleNotFoundError as exc:
                if exc.name is None or not (exc.name.startswith("fedviews") or exc.name == "torch"):
                    raise

    def get(self, name: str) -> T:
        """The entry ``name``; a :class:`ConfigError` naming the closest entry otherwise."""
        if name not in self._table:
            self.load(until=name)
        if name not in self._table:
            match = difflib.get_close_matches(name, list(self._table), n=1, cutoff=0.4)
            hint = f"; did you mean {match[0]!r}?" if match else f"; known: {sorted(self._table)}"
            raise ConfigError(f"unknown {self.what} {name!r}{hint}")
        return self._table[name]

    def __contains__(self, name: object) -> bool:
        return name in self._table

    def names(self) -> list[str]:
        self.load()
        return sorted(self._table)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


#: estimators by name (``get_algorithm`` of the experiments, ``fedviews experiments``)
ESTIMATORS: Registry[object] = Registry(
    "algorithm",
    (
        "fedviews.linear.mmvfl.estimator",
        "fedviews.linear.mmvfl.baselines",
        "fedviews.linear.vfedmv.estimator",
        "fedviews.linear.hfedmv.estimator",
        "fedviews.linear.hfedmv.baselines",
        "fedviews.deep.multivfl.estimator",
        "fedviews.deep.apfed.estimator",
        "fedviews.deep.apfed.baselines",
        "fedviews.deep.sfedmv.estimator",
        "fedviews.deep.splitnn.estimator",
    ),
)


def register_estimator(name: str) -> Callable[[T], T]:
    """Class decorator: make an estimator available under ``name``."""

    def deco(cls: T) -> T:
        ESTIMATORS.add(name, cls)
        return cls

    return deco
