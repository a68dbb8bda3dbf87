"""TOML tables into frozen dataclasses, for every config fedviews reads (experiments,
deployments): type coercion with clear errors, unknown keys named with the closest
valid one, ``key=value`` overrides, and the ``modules = [...]`` list of modules to
import first."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import json
import re
import sys
import threading
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from fedviews.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

T = TypeVar("T")


def closest(key: str, valid: Sequence[str], what: str = "keys") -> str:
    """``; did you mean 'x'?`` for the closest of ``valid`` to ``key``, else ``; valid WHAT:
    [...]`` (``what``: ``keys``, ``datasets``, ...)."""
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else f"; valid {what}: {sorted(valid)}"


def coerce(value: Any, tp: Any, where: str) -> Any:
    """Coerce a TOML/CLI value to the dataclass field type (light-weight, explicit)."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is not type(None):
                with contextlib.suppress(ConfigError):
                    return coerce(value, a, where)
        raise ConfigError(f"{where}: {value!r} does not match {tp}")
    if origin in (tuple, list, Sequence) or tp in (tuple, list):
        if not isinstance(value, (list, tuple)):
            value = [value]
        inner = args[0] if args else Any
        return tuple(coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping) or tp is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a table, got {value!r}")
        return dict(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: expected true/false, got {value!r}")
    if tp is int or tp is float:
        wrong = ConfigError(
            f"{where}: expected {'an integer' if tp is int else 'a number'}, got {value!r}"
        )
        if isinstance(value, bool) or (
            tp is int and isinstance(value, float) and not value.is_integer()
        ):
            raise wrong
        try:
            return tp(value)
        except (TypeError, ValueError):
            raise wrong from None
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where}: {value!r} is not one of {list(args)}")
        return value
    return value


_HINTS: dict[type, dict[str, Any]] = {}
_HINTS_LOCK = threading.Lock()


def _type_hints(cls: type) -> dict[str, Any]:
    """``typing.get_type_hints(cls)``, computed once per class under a lock.

    The annotations are strings (``from __future__ import annotations``), so resolving
    them compiles code; CPython 3.11 can fail with "AST constructor recursion depth
    mismatch" when threads compile at once (a Flower node loads its config in each of
    its message threads).
    """
    with _HINTS_LOCK:
        if cls not in _HINTS:
            _HINTS[cls] = typing.get_type_hints(cls)
        return _HINTS[cls]


def build_dataclass(
    cls: type[T], values: Mapping[str, Any], where: str, *, validate: bool = True
) -> T:
    """Build the frozen dataclass ``cls`` from ``values``; unknown keys raise ConfigError.
    ``validate``: run its ``validate()`` (off where the caller checks it right after, e.g. an
    algorithm's params against the roster)."""
    hints = _type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for key, val in values.items():
        if key not in fields:
            raise ConfigError(f"unknown key {where}.{key}{closest(key, list(fields))}")
        kwargs[key] = coerce(val, hints[key], f"{where}.{key}")
    try:
        obj = cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    check = getattr(obj, "validate", None)
    if validate and callable(check):
        check()
    return obj


def read_toml(path: Path) -> dict[str, Any]:
    """The table of the TOML file ``path`` (a :class:`ConfigError` if it is missing or invalid)."""
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


_TOML_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dump_toml(table: Mapping[str, Any]) -> str:
    """TOML text that :func:`read_toml` reads back as ``table`` (strings, numbers, booleans,
    arrays and tables, as a config holds them); anything else is a :class:`ConfigError`."""

    def key(k: str) -> str:
        return k if _TOML_KEY.fullmatch(k) else json.dumps(k, ensure_ascii=False)

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            return repr(v)  # also nan, inf and -inf, as TOML writes them
        if isinstance(v, str):  # JSON's escapes are TOML's basic-string escapes
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(map(value, v)) + "]"
        if isinstance(v, Mapping):
            return "{" + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + "}"
        raise ConfigError(f"{v!r} ({type(v).__name__}) cannot be written to a TOML config")

    lines: list[str] = []

    def write(t: Mapping[str, Any], path: tuple[str, ...]) -> None:
        if path:
            lines.append(f"\n[{'.'.join(map(key, path))}]")
        subtables = [(k, v) for k, v in t.items() if isinstance(v, Mapping)]
        lines.extend(f"{key(k)} = {value(v)}" for k, v in t.items() if not isinstance(v, Mapping))
        for k, v in subtables:
            write(v, (*path, k))

    write(table, ())
    return "\n".join(lines).lstrip("\n") + "\n"


#: a list element written without quotes: a word of letters, digits and ``_ - . + / :``
_BARE = re.compile(r"[\w.+\-/:]+")


def _toml_value(raw: str) -> Any:
    """The TOML value ``raw`` (a :class:`tomllib.TOMLDecodeError` if it is not one)."""
    return tomllib.loads(f"v = {raw}")["v"]


def _override_value(raw: str, item: str) -> Any:
    """The value of the override ``item`` (``key=raw``): a TOML value, else JSON, else the text
    itself; a list (``[...]``) is TOML, or a list of TOML values and bare words
    (``[pix,xyz]`` is ``["pix", "xyz"]``, as the shell strips quotes); a malformed list is a
    :class:`ConfigError`, never a string."""
    with contextlib.suppress(tomllib.TOMLDecodeError):
        return _toml_value(raw)
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(raw)
    text = raw.strip()
    if not text.startswith("["):
        return raw
    malformed = (
        f'override {item!r}: malformed list; write [a,b] or ["a","b"] (strings), [1,2] (numbers)'
    )
    inner = text[1:-1] if text.endswith("]") else None
    if inner is None or any(c in inner for c in "[]{}"):
        raise ConfigError(malformed)
    elements = [e.strip() for e in inner.split(",")] if inner.strip() else []
    if len(elements) > 1 and not elements[-1]:
        elements.pop()  # a trailing comma, as TOML allows
    values: list[Any] = []
    for element in elements:
        try:
            values.append(_toml_value(element))
        except tomllib.TOMLDecodeError:
            if not _BARE.fullmatch(element):
                raise ConfigError(f"{malformed}; {element!r} is not a value") from None
            values.append(element)
    return values


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """Parse ``["params.beta=0.1", "seed=3"]`` into a nested dict (values parsed as TOML, then
    JSON; a list may hold bare words: ``data.views=[pix,fou]``)."""
    out: dict[str, Any] = {}
    for item in overrides:
        if "=" not in item:
            raise ConfigError(
                f"override {item!r} must look like key=value (e.g. params.max_iter=50)"
            )
        key, raw = item.split("=", 1)
        key = key.strip()
        value = _override_value(raw, item)
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} conflicts with another override")
        node[parts[-1]] = value
    return out


def merge_tables(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_tables(dict(out[k]), v)
        else:
            out[k] = v
    return out


def import_modules(value: Any, where: str = "modules") -> tuple[str, ...]:
    """Import the modules a config names (``modules = ["fedridge"]``); return their names.

    A config's ``modules`` list lets ``fedviews run`` / ``fedviews launch`` find an
    algorithm or experiment that fedviews itself does not ship: importing the module
    registers it (:func:`~fedviews.federation.register_algorithm_spec`,
    :func:`~fedviews.experiments.register_experiment`). Modules are found on the
    Python path (``PYTHONPATH``), which every process of a deployment inherits from
    the launcher. Importing a module twice is a no-op.

    Raises
    ------
    ConfigError
        When ``value`` is not a list of dotted module names, or a module cannot be
        imported (naming what to put on ``PYTHONPATH``).
    """
    example = f'e.g. {where} = ["fedridge"]'
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where} must be a list of module names ({example}), got {value!r}")
    for item in value:
        if not isinstance(item, str) or not all(p.isidentifier() for p in item.split(".")):
            raise ConfigError(
                f"{where}: {item!r} is not an importable module name (dotted Python "
                f"identifiers, {example})"
            )
    for name in value:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if missing and (name == missing or name.startswith(missing + ".")):
                path = name.replace(".", "/")
                raise ConfigError(
                    f"{where}: no module named {name!r} on the Python path; put the folder "
                    f"that holds {path}.py (or the package {path}/) on PYTHONPATH, e.g. "
                    f"`PYTHONPATH=/that/folder fedviews ...`, or pip-install it (every "
                    f"process of a deployment needs it)"
                ) from None
            raise ConfigError(
                f"{where}: importing {name!r} failed: {exc} (a module it imports is missing)"
            ) from None
        except ImportError as exc:
            raise ConfigError(f"{where}: importing {name!r} failed: {exc}") from None
    return tuple(value)


#: appended to "unknown experiment/algorithm" errors
MODULES_HINT = " (one defined outside fedviews: name its module in `modules = [...]`)"
