"""Hyper-parameter constraints declared once, as metadata on the ``Params`` dataclass fields.

An algorithm's ``Params`` field carries its constraint (type, interval, choices)::

    max_iter: int = field(default=200, metadata=spec(int, low=1))
    eps: float = field(default=1e-10, metadata=spec(float, low=0, low_open=True))
    label_scale: str = field(default="onehot", metadata=spec(str, choices=LABEL_SCALES))

and :func:`check_params` checks every field against it, then calls the dataclass's
``cross_check`` hook (rules between fields that one field's metadata cannot express). It is
called once, where params enter: the algorithm's ``check_params`` (with the roster, for the
length of per-party lists) when a run is built, in process (estimator ``fit``) or deployed;
:meth:`Checked.validate` for a config's params without a roster (experiments). Inner layers
trust validated params. The docs' configuration reference shows :meth:`Constraint.describe`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from fedviews._estimator import is_int, is_real
from fedviews.errors import ConfigError

#: the metadata key of a field's :class:`Constraint`
KEY = "fedviews.constraint"


@dataclass(frozen=True)
class Constraint:
    """What a hyper-parameter may be (see :func:`spec`)."""

    kind: type
    low: float | None = None
    low_open: bool = False
    high: float | None = None
    high_open: bool = False
    finite: bool = True
    choices: tuple[Any, ...] | None = None
    per: str | None = None
    pattern: str | None = None
    text: str | None = None

    def describe(self) -> str:
        """The constraint in words, as an error message and the docs say it."""
        if self.text is not None:
            return self.text
        if self.kind is bool:
            return "True or False"
        if self.choices is not None:
            return f"one of {list(self.choices)}"
        words = (
            "an integer" if self.kind is int else "a finite number" if self.finite else "a number"
        )
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            words += f" in {left}{self.low:g}, {self.high:g}{right}"
        elif self.low is not None:
            words += f" {'>' if self.low_open else '>='} {self.low:g}"
        elif self.high is not None:
            words += f" {'<' if self.high_open else '<='} {self.high:g}"
        return words + (f", or one per {self.per}" if self.per else "")

    def _ok(self, value: Any) -> bool:
        if self.kind is Callable:  # a factory: the callable itself, or its import path
            return callable(value) or (
                isinstance(value, str)
                and (self.pattern is None or re.fullmatch(self.pattern, value) is not None)
            )
        if self.kind is bool:
            return isinstance(value, (bool, np.bool_))
        if self.kind is str:
            return isinstance(value, str) and (
                (self.choices is None or value in self.choices)
                and (self.pattern is None or re.fullmatch(self.pattern, value) is not None)
            )
        if self.kind is int:
            ok = is_int(value, -(2**63))
        else:
            ok = is_real(value, finite=self.finite)
        if not ok:
            return False
        low = self.low is None or (value > self.low if self.low_open else value >= self.low)
        high = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return bool(low and high)

    def check(self, name: str, value: Any, n_parties: int | None = None) -> None:
        """Raise ``ConfigError("<name> must be <describe()>, got <value>")`` unless ``value``
        fits; a per-party value may be a list, ``n_parties`` long when that is known."""
        if self.per and isinstance(value, (list, tuple, np.ndarray)):
            if n_parties is not None and len(value) != n_parties:
                many = self.per[:-1] + "ies" if self.per.endswith("y") else self.per + "s"
                raise ConfigError(
                    f"{name} has {len(value)} values but there are {n_parties} {many}"
                )
            if not len(value) or not all(self._ok(v) for v in value):
                raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")
            return
        if not self._ok(value):
            raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")


def spec(
    kind: type,
    *,
    low: float | None = None,
    low_open: bool = False,
    high: float | None = None,
    high_open: bool = False,
    finite: bool = True,
    choices: tuple[Any, ...] | None = None,
    per: str | None = None,
    pattern: str | None = None,
    text: str | None = None,
) -> dict[str, Constraint]:
    """A field's ``metadata`` carrying its constraint.

    Parameters
    ----------
    kind : type
        ``int`` (a bool is not one), ``float`` (any real number, ints included), ``bool``,
        ``str`` or ``collections.abc.Callable`` (a callable, or a ``str`` that matches
        ``pattern``: its import path).
    low, high : float, optional
        The bounds, inclusive unless ``low_open`` / ``high_open``.
    low_open, high_open : bool
        Exclusive bounds.
    finite : bool
        For ``float``: refuse NaN and infinities (a tolerance may be ``inf``).
    choices : tuple, optional
        The values allowed.
    per : str, optional
        One value for all, or a list of one per ``per`` (``"party"``, ``"view"``): the
        length is checked where the roster is known.
    pattern : str, optional
        A ``str`` must match this regular expression in full.
    text : str, optional
        The constraint in words, where :meth:`Constraint.describe` cannot say it.
    """
    return {
        KEY: Constraint(kind, low, low_open, high, high_open, finite, choices, per, pattern, text)
    }


def constraint(f: dataclasses.Field[Any]) -> Constraint | None:
    """The constraint declared on a dataclass field, if any."""
    found = f.metadata.get(KEY)
    return found if isinstance(found, Constraint) else None


def check_params(params: Any, n_parties: int | None = None) -> None:
    """Check every field of a ``Params`` dataclass against its declared constraint, then run
    its ``cross_check(n_parties)`` hook, if it has one (a :class:`ConfigError` naming the
    first field that does not fit). ``n_parties``: the length per-party lists must have."""
    for f in dataclasses.fields(params):
        c = constraint(f)
        if c is not None:
            c.check(f.name, getattr(params, f.name), n_parties)
    hook = getattr(params, "cross_check", None)
    if callable(hook):
        hook(n_parties)


def check_value(name: str, value: Any, metadata: Mapping[str, Any]) -> None:
    """Check one value (parameter ``name``) against a :func:`spec`'s metadata: for a
    parameter that is not a ``Params`` field (an estimator's own)."""
    metadata[KEY].check(name, value)


def constraints(cls: type) -> Mapping[str, Constraint]:
    """``{field name: constraint}`` of a ``Params`` dataclass (fields without one left out)."""
    return {f.name: c for f in dataclasses.fields(cls) if (c := constraint(f)) is not None}


class Checked:
    """Base of a ``Params`` dataclass whose fields declare their constraints: adds
    :meth:`validate` (the one validator) and a no-op ``cross_check`` hook."""

    def validate(self) -> None:
        """Raise :class:`ConfigError` for an invalid value (a per-party list of any length:
        the algorithm checks its length against the roster, :func:`check_params`)."""
        check_params(self)

    def cross_check(self, n_parties: int | None) -> None:
        """Rules between fields, run after the field checks (none by default)."""


#: an integer >= 1 (a number of rounds, iterations, units)
COUNT = spec(int, low=1)
#: a tolerance: a number >= 0 (``inf`` stops at once)
TOL = spec(float, low=0, finite=False)
#: a finite number > 0
POSITIVE = spec(float, low=0, low_open=True)
#: True or False
FLAG = spec(bool)
#: a torch device name a config may give (the deep algorithms' and every experiment's)
DEVICE = spec(
    str,
    pattern=r"auto|cpu|mps|cuda(:\d+)?",
    text="'auto', 'cpu', 'cuda', 'cuda:<index>' or 'mps'",
)
#: a finite number > 0, or a list of one per party
WEIGHTS = spec(float, low=0, low_open=True, per="party")
#: a finite number > 0, or a list of one per view
VIEW_WEIGHTS = spec(float, low=0, low_open=True, per="view")
#: a network factory: ``""`` (the algorithm's own network), the import path
#: ``"package.module:function"`` of a callable, or (in Python) the callable itself
FACTORY = spec(
    cast(type, Callable),
    pattern=r"([A-Za-z_][\w.]*:[A-Za-z_][\w.]*)?",
    text="'' (the default network), an import path 'package.module:function' or a callable",
)


def factory_fields(cls: type) -> tuple[str, ...]:
    """The fields of a ``Params`` dataclass that take a network factory (:data:`FACTORY`)."""
    return tuple(name for name, c in constraints(cls).items() if c == FACTORY[KEY])
