"""Privacy policies: which named arrays may leave which role, towards which role."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fedviews.errors import PrivacyError

__all__ = ["PrivacyPolicy"]


@dataclass(frozen=True)
class PrivacyPolicy:
    """Declared barrier of an algorithm.

    ``allowed[(sender_role, receiver_role)]`` is the set of array names that a
    party with role ``sender_role`` may send to a party with ``receiver_role``.
    Anything else raises :class:`~fedviews.errors.PrivacyError` *before* it is
    sent. Messages without arrays (control messages, acknowledgements) are
    always allowed.

    Examples
    --------
    >>> policy = PrivacyPolicy.of("mmvfl", {("party", "coordinator"): ["Z_k"],
    ...                                     ("coordinator", "party"): ["Z"]})
    """

    name: str
    allowed: Mapping[tuple[str, str], frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, rules: Mapping[tuple[str, str], Iterable[str]]) -> PrivacyPolicy:
        return cls(name=name, allowed={k: frozenset(v) for k, v in rules.items()})

    def check(
        self, sender: str, sender_role: str, receiver: str, receiver_role: str, names: Iterable[str]
    ) -> None:
        """Raise PrivacyError if any of ``names`` may not go from sender to receiver."""
        names = list(names)
        if not names:
            return
        ok = self.allowed.get((sender_role, receiver_role), frozenset())
        bad = [n for n in names if n not in ok]
        if bad:
            raise PrivacyError(
                f"privacy policy {self.name!r} forbids {sender!r} ({sender_role}) from sending "
                f"{bad} to {receiver!r} ({receiver_role}); allowed: {sorted(ok) or 'nothing'}"
            )
