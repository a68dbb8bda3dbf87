"""Lazy re-exports: a package names its public objects without importing them up front.

The deep packages' specs and parameters load without torch, the linear ones' without
scikit-learn (deployment configs, experiment configs and the algorithm registry read
them); their parties, networks and estimators need those. A package's ``__init__`` lists
where each public name lives and imports it on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_names(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package``: ``where[name]`` (a module relative to
    ``package``) is imported on the first use of ``name``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{where[name]}"), name)

    return __getattr__


def exports(modules: dict[str, str]) -> dict[str, str]:
    """``{name: module}`` from ``{module: "name name ..."}``."""
    return {name: module for module, names in modules.items() for name in names.split()}
