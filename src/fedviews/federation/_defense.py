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
* ``"label_rr"``: label differential privacy by randomized response (Warner 1965;
  Ghazi et al., NeurIPS 2021). Before anything is built, every member that holds
  training labels replaces each label, once, by itself with probability
  ``e^eps / (e^eps + C - 1)`` and otherwise by one of the other ``C - 1`` classes it
  holds, uniformly. Changing one sample's label changes the distribution of its
  randomized label by a factor of at most ``e^eps`` and leaves every other one
  unchanged; everything the run computes and sends afterwards is post-processing
  of the randomized labels, so **the whole run is eps-label-DP** for every label
  owner (``delta = 0``, whatever the number of rounds), against every other party
  and the coordinator. Test labels are not randomized (only a label owner scores
  with them). ``epsilon``: the budget. ``seed``: the randomness, for reproducible
  simulations only (a seed others know voids the guarantee); without it a
  deployed label owner draws from the operating system and keeps the draw in its
  own run folder, so a resumed run uses the same randomized labels (a second
  draw would spend the budget twice), and an in-process run derives it from the
  run's seed (a simulation).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedviews.errors import ConfigError, DataError

if TYPE_CHECKING:
    from fedviews.federation._algorithm import Local, RunSpec

__all__ = ["DEFENSES", "Defense", "defend_local", "privacy_ledger", "randomized_response"]

#: the defense kinds fedviews implements
DEFENSES = ("none", "secagg", "label_rr")


@dataclass(frozen=True)
class Defense:
    """A run's defense: ``kind`` (one of :data:`DEFENSES`) and its settings."""

    kind: str = "none"
    frac_bits: int = 32
    epsilon: float = 0.0
    seed: int | None = None

    def validate(self) -> None:
        if self.kind not in DEFENSES:
            raise ConfigError(f"unknown defense.kind {self.kind!r}; fedviews has {list(DEFENSES)}")
        if isinstance(self.frac_bits, bool) or not 8 <= int(self.frac_bits) <= 48:
            raise ConfigError(
                f"defense.frac_bits must be an integer in 8..48, got {self.frac_bits!r}"
            )
        eps = self.epsilon
        if self.kind == "label_rr" and (
            isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 < eps < 50
        ):
            raise ConfigError(f"defense.epsilon of label_rr must be in (0, 50), got {eps!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ConfigError(f"defense.seed must be an integer, got {self.seed!r}")

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


def randomized_response(y: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """``y`` with every label kept with probability ``e^eps / (e^eps + C - 1)`` and otherwise
    replaced by one of the other ``C - 1`` classes of ``y``, uniformly (eps-label-DP)."""
    classes, idx = np.unique(y, return_inverse=True)
    C = len(classes)
    if C < 2:
        return np.array(y, copy=True)
    keep = rng.random(len(idx)) < math.exp(epsilon) / (math.exp(epsilon) + C - 1)
    other = (idx + rng.integers(1, C, size=len(idx))) % C  # uniform over the other classes
    return classes[np.where(keep, idx, other)]


def defend_local(run: RunSpec, member: str, local: Local, entropy: int | None = None) -> Local:
    """What ``member`` builds its part from under the run's defense: with ``label_rr``, its
    own data with its training labels randomized once (``entropy``: its private draw;
    ``None``: ``defense.seed``, else derived from the run's seed, for simulations)."""
    d = run.defense
    data = local.data
    if d.kind != "label_rr" or data.y is None:
        return local
    if d.seed is not None:
        entropy = d.seed
    if entropy is None:
        entropy = int(run.seed or 0)
    tag = [int.from_bytes(member.encode()[:16].ljust(16, b"\0"), "little")]
    rng = np.random.default_rng(np.random.SeedSequence([entropy, 0x4C52, *tag]))
    y = randomized_response(data.y, float(d.epsilon), rng)
    return dataclasses.replace(local, data=dataclasses.replace(data, y=y))


def privacy_ledger(run: RunSpec, label_holders: list[str], n_classes: int) -> dict[str, Any]:
    """The privacy spent by the run's defense, per party: ``{"mechanism", "parties":
    {party: {"epsilon", "delta", "accountant"}}}``; empty without a DP defense.

    Randomized response is composed with dp-accounting's PLD accountant (replace-one
    neighbours: one label changed) where it is installed, and otherwise given in closed
    form (the two agree: a test checks it)."""
    d = run.defense
    if d.kind != "label_rr":
        return {}
    eps, how = float(d.epsilon), "closed form (randomized response, one draw)"
    if n_classes >= 2:
        try:
            import dp_accounting
            from dp_accounting.pld import pld_privacy_accountant as pld

            p = n_classes / (math.exp(eps) + n_classes - 1)  # dp-accounting's parameter
            acc = pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
            acc.compose(dp_accounting.RandomizedResponseDpEvent(p, n_classes))
            eps, how = float(acc.get_epsilon(0.0)), "dp-accounting PLD"
        except ImportError:
            pass
        except Exception as exc:  # pragma: no cover - an accountant that refuses: say so
            raise DataError(f"the privacy accountant failed: {exc}") from None
    return {
        "mechanism": "label_rr: randomized response on the training labels (label DP)",
        "parties": {p: {"epsilon": eps, "delta": 0.0, "accountant": how} for p in label_holders},
    }
