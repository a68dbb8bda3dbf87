"""Defenses: what a run does to reveal less than its algorithm's plain protocol.

A run's defense is one ``[defense]`` table (``kind`` plus that kind's settings),
the same in an estimator (``defense=``), an experiment config and a deployment
config. Each algorithm spec lists the kinds that apply to it
(:attr:`~fedviews.federation.Algorithm.defenses`); any other kind is a
:class:`~fedviews.errors.ConfigError` before anything runs.

Kinds:

* ``"none"`` (the default): the protocol of the paper.
* ``"secagg"``: secure aggregation (:mod:`fedviews.federation._secagg`) of what
  the coordinator only needs summed. ``frac_bits``: the fixed-point resolution
  ``2^-frac_bits`` of the masked values (default 32).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fedviews.errors import ConfigError

__all__ = ["DEFENSES", "Defense"]

#: the defense kinds fedviews implements
DEFENSES = ("none", "secagg")


@dataclass(frozen=True)
class Defense:
    """A run's defense: ``kind`` (one of :data:`DEFENSES`) and its settings."""

    kind: str = "none"
    frac_bits: int = 32

    def validate(self) -> None:
        if self.kind not in DEFENSES:
            raise ConfigError(f"unknown defense.kind {self.kind!r}; fedviews has {list(DEFENSES)}")
        if isinstance(self.frac_bits, bool) or not 8 <= int(self.frac_bits) <= 48:
            raise ConfigError(
                f"defense.frac_bits must be an integer in 8..48, got {self.frac_bits!r}"
            )

    @property
    def active(self) -> bool:
        return self.kind != "none"

    @classmethod
    def of(cls, value: Any) -> Defense:
        """A defense from ``None`` (none), a kind (``"secagg"``), a table or a :class:`Defense`."""
        from fedviews._tables import build_dataclass

        if value is None:
            value = cls()
        elif isinstance(value, str):
            value = cls(kind=value)
        elif isinstance(value, Mapping):
            value = build_dataclass(cls, value, "defense")
        if not isinstance(value, cls):
            raise ConfigError(
                f"defense must be a kind (e.g. 'secagg'), a table or a Defense, got {value!r}"
            )
        value.validate()
        return value
