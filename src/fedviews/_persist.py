"""Fitted estimators that pickle, and that save and load without pickle.

Every fedviews estimator mixes in :class:`Persistent`:

* **pickle / joblib** keep the whole fitted estimator (its parties, its run) except the
  transport's live objects (locks, threads, sockets, channels): a transport is kept as
  its plain record (privacy policy, roles, message log and statistics) and unpickles as
  an in-process transport of the same parties, so an unpickled V-FedMV still runs its
  federated testing phase;
* :meth:`Persistent.save` writes the fitted state to a folder: every array in
  ``arrays.npz`` (torch tensors as arrays), parameters and metadata (algorithm, fedviews
  version, format, fitted scalars, classes, the message log) in ``model.json``; the
  estimator's live parts (party objects, networks) are written as the plain state that
  :meth:`Persistent._restore_live` rebuilds them from. :meth:`Persistent.load` reads it
  without ever executing code from the file (``np.load(allow_pickle=False)``, JSON).
"""

from __future__ import annotations

import dataclasses
import io
import json
import pickle
import threading
import zipfile
from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np

import fedviews
from fedviews.data import read_npz, save_npz
from fedviews.errors import (
    ConfigError,
    DataError,
    FedViewsError,
    MissingDependency,
    check_fitted,
)
from fedviews.federation import InProcessTransport, LogEntry, MessageLog, PrivacyPolicy, Transport

#: what ``model.json`` says it is; a file of another format is refused
FORMAT = "fedviews.estimator/1"
META_FILE = "model.json"
ARRAYS_FILE = "arrays.npz"

E = TypeVar("E", bound="Persistent")


# --------------------------------------------------------------------------- pickle


def _log_state(log: MessageLog) -> dict[str, Any]:
    """A message log's fields as plain data (its lock is a live object, and the entries it
    knows by id a cache of this process, not state)."""
    return {k: v for k, v in vars(log).items() if k not in ("_lock", "_known")}


def _revive_log(state: dict[str, Any]) -> MessageLog:
    log = MessageLog.__new__(MessageLog)
    log.__dict__.update(state)
    log._lock, log._known = threading.Lock(), {}
    return log


def _revive_transport(policy: PrivacyPolicy) -> Transport:
    return InProcessTransport(policy)


def _set_transport_state(t: Transport, state: dict[str, Any]) -> None:
    """The parties hosted in the pickled transport (each keeps it as its ``transport``),
    its roles and its log. (A party's own state may not be set yet when this runs: the
    parties and the transport refer to each other.)"""
    t.local.update(state["local"])
    t.roles.update(state["roles"])
    t.log = state["log"]


class _StatePickler(pickle.Pickler):
    """Pickles a fitted estimator's state with the transports' live objects left out."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, Persistent):  # the estimator, or one inside it (S-FedMV's fusion)
            return _new_instance, (type(obj),), vars(obj), None, None, _set_vars
        if isinstance(obj, Transport):
            state = {"local": obj.local, "roles": obj.roles, "log": obj.log}
            return _revive_transport, (obj.policy,), state, None, None, _set_transport_state
        if isinstance(obj, MessageLog):
            return _revive_log, (_log_state(obj),)
        return NotImplemented


def _new_instance(cls: type[Persistent]) -> Persistent:
    return object.__new__(cls)


def _set_vars(obj: Any, state: dict[str, Any]) -> None:
    obj.__dict__.update(state)


def _unpickle(blob: bytes) -> Any:
    return pickle.loads(blob)  # the payload of the caller's own pickle


# --------------------------------------------------------------------------- JSON + arrays

#: the dataclasses a saved state may hold (anything else is refused on save and load)
_DATACLASSES: dict[str, type] = {"LogEntry": LogEntry, "PrivacyPolicy": PrivacyPolicy}
_DEFAULTS: dict[str, Callable[[], Any]] = {"int": int, "float": float, "set": set}


class _Encoder:
    """Plain values to JSON, arrays (and torch tensors) to named entries of ``arrays``."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, a: np.ndarray, tag: str) -> dict[str, Any]:
        if a.dtype.hasobject:
            raise ConfigError(f"cannot save an array of Python objects (dtype {a.dtype})")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = a
        return {tag: key}

    def __call__(self, v: Any, where: str) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if isinstance(v, (int, float)):
            return v
        if isinstance(v, np.generic):
            return self.array(np.asarray(v), "__scalar__")
        if isinstance(v, np.ndarray):
            return self.array(v, "__array__")
        if any(c.__module__ == "torch" and c.__name__ == "Tensor" for c in type(v).__mro__):
            return self.array(v.detach().cpu().numpy(), "__tensor__")
        if isinstance(v, list):
            return [self(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if isinstance(v, tuple):
            return {"__tuple__": [self(x, f"{where}[{i}]") for i, x in enumerate(v)]}
        if isinstance(v, (set, frozenset)):
            items = sorted(v, key=repr)
            return {"__set__": [self(x, where) for x in items], "frozen": isinstance(v, frozenset)}
        if isinstance(v, dict):
            out: dict[str, Any] = {
                "__dict__": [[self(k, where), self(x, f"{where}[{k!r}]")] for k, x in v.items()]
            }
            if isinstance(v, defaultdict) and v.default_factory is not None:
                name = getattr(v.default_factory, "__name__", "")
                if _DEFAULTS.get(name) is not v.default_factory:
                    raise ConfigError(
                        f"cannot save {where}: a defaultdict of {v.default_factory!r}"
                    )
                out["default"] = name
            return out
        if isinstance(v, Persistent):  # a fitted estimator inside one (S-FedMV's fusion)
            return {"__estimator__": type(v).__name__, "state": v._state(self)}
        if isinstance(v, MessageLog):
            return {"__log__": self(_log_state(v), where)}
        if isinstance(v, Transport):
            state = {"policy": v.policy, "roles": v.roles, "log": v.log}
            return {"__transport__": self(state, where)}
        name = type(v).__name__
        if dataclasses.is_dataclass(v) and _DATACLASSES.get(name) is type(v):
            fields = {
                f.name: self(getattr(v, f.name), where) for f in dataclasses.fields(v) if f.init
            }
            return {"__dataclass__": name, "fields": fields}
        raise ConfigError(
            f"cannot save {where} (a {type(v).__module__}.{name}) to JSON and arrays; pickle "
            "the estimator instead, or (a parameter) set_params it to None or a plain value first"
        )


class _Decoder:
    """The inverse of :class:`_Encoder`; refuses anything it did not write."""

    def __init__(self, arrays: Mapping[str, np.ndarray], path: Path) -> None:
        self.arrays, self.path = arrays, path

    def _array(self, key: Any) -> np.ndarray:
        if not isinstance(key, str) or key not in self.arrays:
            raise DataError(f"{self.path}: model.json names an array {key!r} it does not hold")
        return self.arrays[key]

    def __call__(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str, int, float)):
            return v
        if isinstance(v, list):
            return [self(x) for x in v]
        if not isinstance(v, dict) or len(v) == 0:
            raise DataError(f"{self.path}: model.json holds an unknown value {v!r}")
        tag = next(iter(v))
        if tag == "__array__":
            return self._array(v[tag])
        if tag == "__scalar__":
            return self._array(v[tag])[()]
        if tag == "__tensor__":
            try:
                import torch
            except ImportError as exc:
                raise MissingDependency("torch", "torch") from exc
            return torch.from_numpy(np.array(self._array(v[tag])))
        if tag == "__tuple__":
            return tuple(self(x) for x in v[tag])
        if tag == "__set__":
            items = [self(x) for x in v[tag]]
            return frozenset(items) if v.get("frozen") else set(items)
        if tag == "__dict__":
            pairs = [(self(k), self(x)) for k, x in v[tag]]
            default = v.get("default")
            if default is None:
                return dict(pairs)
            if default not in _DEFAULTS:
                raise DataError(f"{self.path}: unknown default {default!r} in model.json")
            return defaultdict(_DEFAULTS[default], pairs)
        if tag == "__log__":
            return _revive_log(self(v[tag]))
        if tag == "__transport__":
            state = self(v[tag])
            t = _revive_transport(state["policy"])
            t.roles.update(state["roles"])
            t.log = state["log"]
            return t
        if tag == "__estimator__" and v[tag] in Persistent._kinds:
            return Persistent._kinds[v[tag]]._from_state(self, v["state"])
        if tag == "__dataclass__" and v[tag] in _DATACLASSES:
            return _DATACLASSES[v[tag]](**{k: self(x) for k, x in v["fields"].items()})
        raise DataError(f"{self.path}: model.json holds an unknown value tagged {tag!r}")


def _factory_hint(name: str, factory: Callable[..., Any]) -> str:
    """Why a network factory given as a callable is not saved, and how to save the estimator."""
    module = getattr(factory, "__module__", None)
    qualname = getattr(factory, "__qualname__", "")
    shown = f"{module}.{qualname}" if module and qualname else repr(factory)
    local = "<" in qualname  # a lambda or a local function: pickle cannot name it either
    if module and module != "__main__" and qualname and not local:
        path = f"give it by its import path: set_params({name}={module + ':' + qualname!r})"
    else:  # a lambda, a local function or one of a script: no path another process imports
        path = (
            "define it at the top level of an importable module and give its import path "
            f"'package.module:function' as {name}"
        )
    return (
        f"cannot save parameter {name}, the callable {shown}: save writes no code. To save, "
        f"{path} (the same networks: fit and predict take the path as well), then save"
        + (
            " (pickle and joblib cannot keep a lambda or a local function either)"
            if local
            else "; or pickle the estimator (pickle and joblib keep the callable)"
        )
    )


# --------------------------------------------------------------------------- the mixin


class Persistent:
    """Pickling, :meth:`save` and :meth:`load` of a fitted estimator (mixed into every one).

    An estimator whose fitted state holds live objects (party objects, a run, networks)
    names them in ``_live`` and gives their plain state in :meth:`_live_state` (arrays,
    tensors and JSON values), from which :meth:`_restore_live` rebuilds what its
    ``predict`` needs.
    """

    #: fitted attributes that :meth:`save` leaves out (:meth:`_live_state` stands for them)
    _live: ClassVar[tuple[str, ...]] = ()
    #: every estimator class by name: the only classes a saved file can name
    _kinds: ClassVar[dict[str, type[Persistent]]] = {}
    #: parameters that take a network factory: a callable, or its import path (saved as text)
    _factories: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Persistent._kinds[cls.__name__] = cls

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        buf = io.BytesIO()
        try:
            _StatePickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(self)
        except (AttributeError, pickle.PicklingError) as exc:  # a lambda, a local function
            local = [
                f"{k}={v!r}"
                for k in self._factories
                if callable(v := getattr(self, k, None)) and "<" in getattr(v, "__qualname__", "")
            ]
            if not local:
                raise
            raise ConfigError(
                f"cannot pickle this {type(self).__name__}: its {', '.join(local)} is a lambda "
                "or a local function, which pickle cannot name; define it at the top level of "
                "a module (or give its import path 'package.module:function')"
            ) from exc
        return _unpickle, (buf.getvalue(),)

    def _live_state(self) -> dict[str, Any]:
        """The plain state of the ``_live`` attributes (what :meth:`_restore_live` reads)."""
        return {}

    def _restore_live(self, state: dict[str, Any]) -> None:
        """Rebuild the ``_live`` attributes from :meth:`_live_state` (after every other
        fitted attribute is set)."""

    def save(self, path: str | Path) -> Path:
        """Write this fitted estimator to the folder ``path`` (``model.json`` and
        ``arrays.npz``); :meth:`load` of the same class reads it back.

        No pickle: parameters and metadata are JSON, arrays (and torch tensors) are
        arrays. A parameter that is a live object (``transport``) cannot be saved: set it
        to ``None`` first (:class:`ConfigError` otherwise). Returns the folder.
        """
        check_fitted(self, "classes_")  # NotFittedError
        enc = _Encoder()
        meta = {
            "format": FORMAT,
            "algorithm": type(self).__name__,
            "fedviews_version": fedviews.__version__,
            **self._state(enc),
        }
        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        save_npz(out / ARRAYS_FILE, **enc.arrays)
        (out / META_FILE).write_text(json.dumps(meta, indent=1), encoding="utf-8")
        return out

    @classmethod
    def load(cls: type[E], path: str | Path) -> E:
        """The fitted estimator that :meth:`save` wrote to ``path``.

        Raises
        ------
        DataError
            ``path`` is missing, or not a readable saved estimator.
        ConfigError
            It holds another estimator (``MMVFL.load`` of a saved ``VFedMV``), or was
            written in another format or by another fedviews version.
        """
        path = Path(path)
        try:
            meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
            arrays = read_npz(path / ARRAYS_FILE)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
            raise DataError(f"cannot read a saved estimator from {path}: {exc}") from None
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            got = meta.get("format") if isinstance(meta, dict) else None
            raise ConfigError(f"{path} is in format {got!r}, this fedviews reads {FORMAT!r}")
        if meta.get("algorithm") != cls.__name__:
            raise ConfigError(
                f"{path} holds a saved {meta.get('algorithm')}, not a {cls.__name__}; load it "
                f"with {meta.get('algorithm')}.load"
            )
        if meta.get("fedviews_version") != fedviews.__version__:
            raise ConfigError(
                f"{path} was saved by fedviews {meta.get('fedviews_version')}, this is "
                f"{fedviews.__version__}; load it with that version (and refit or re-save)"
            )
        try:
            return cls._from_state(_Decoder(arrays, path), meta)
        except (KeyError, IndexError, TypeError, AttributeError, ValueError, RuntimeError) as exc:
            if isinstance(exc, FedViewsError):
                raise
            # RuntimeError: torch refused a network's weights of another shape
            raise DataError(
                f"{path}: the saved estimator is incomplete or damaged ({exc!r})"
            ) from None

    def _state(self, enc: _Encoder) -> dict[str, Any]:
        """Parameters, fitted attributes and live state, encoded (``enc`` keeps the arrays)."""
        params = self.get_params(deep=False)  # type: ignore[attr-defined]
        for name in self._factories:
            if callable(params.get(name)):
                raise ConfigError(_factory_hint(name, params[name]))
        fitted = {k: v for k, v in vars(self).items() if k.endswith("_") and k not in self._live}
        return {
            "params": {k: enc(v, f"parameter {k}") for k, v in params.items()},
            "fitted": {k: enc(v, k) for k, v in fitted.items()},
            "live": enc(self._live_state(), f"the live state of {type(self).__name__}"),
        }

    @classmethod
    def _from_state(cls: type[E], dec: _Decoder, state: Mapping[str, Any]) -> E:
        """The estimator that :meth:`_state` encoded."""
        est = cls(**{k: dec(v) for k, v in state["params"].items()})
        for k, v in state["fitted"].items():
            setattr(est, k, dec(v))
        est._restore_live(dec(state["live"]))
        return est
