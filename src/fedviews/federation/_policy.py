"""Privacy policies: which message kinds and named arrays may go from which role to which role."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fedviews.errors import ConfigError, PrivacyError

#: kinds of the session (setup, PSI, secure-aggregation keys): only the coordinator may send them, and only
#: when a policy lists them, whatever else the policy allows
SESSION_PREFIXES = ("deploy:", "psi:", "secagg:")

Pair = tuple[str, str]
#: the passed checks a policy remembers (:meth:`PrivacyPolicy.check`)
MAX_PASSED = 4096


@dataclass(frozen=True)
class PrivacyPolicy:
    """Declared barrier of a run.

    ``allowed[(sender_role, receiver_role)]`` is the set of array names that a
    party with role ``sender_role`` may send to a party with ``receiver_role``;
    ``kinds[(sender_role, receiver_role)]`` the set of request kinds it may send
    (the reply ``"<kind>:reply"`` may then go back the other way). With
    ``strict_kinds`` only listed kinds may go; without it (a policy built with
    ``kinds=None``) algorithm kinds are unchecked, but session kinds
    (``deploy:*``, ``psi:*``) are accepted only where ``kinds`` lists them.
    Anything else raises :class:`~fedviews.errors.PrivacyError` — at the sender
    *before* it is sent, and again at the hub and the receiver (a dishonest
    sender skips its own check).

    Examples
    --------
    >>> policy = PrivacyPolicy.of("mmvfl", {("party", "coordinator"): ["Z_k"],
    ...                                     ("coordinator", "party"): ["Z"]},
    ...                           kinds={("coordinator", "party"): ["update"]})
    """

    name: str
    allowed: Mapping[Pair, frozenset[str]] = field(default_factory=dict)
    kinds: Mapping[Pair, frozenset[str]] = field(default_factory=dict)
    strict_kinds: bool = False
    #: the checks passed so far (sender role, receiver role, kind, array names): a policy
    #: never changes, and a run sends the same few kinds of messages over and over
    _passed: set[tuple[str, str, str | None, tuple[str, ...]]] = field(
        default_factory=set, init=False, repr=False, compare=False
    )

    @classmethod
    def of(
        cls,
        name: str,
        rules: Mapping[Pair, Iterable[str]],
        kinds: Mapping[Pair, Iterable[str]] | None = None,
    ) -> PrivacyPolicy:
        return cls(name, _frozen(rules), _frozen(kinds or {}), strict_kinds=kinds is not None)

    def merged(self, other: PrivacyPolicy, name: str | None = None) -> PrivacyPolicy:
        """The union of two policies (e.g. the session's and the algorithm's)."""
        return PrivacyPolicy(
            name or f"{self.name}+{other.name}",
            _union(self.allowed, other.allowed),
            _union(self.kinds, other.kinds),
            strict_kinds=self.strict_kinds and other.strict_kinds,
        )

    def kind_allowed(self, sender_role: str, receiver_role: str, kind: str) -> bool:
        """May a party of ``sender_role`` send a message of ``kind`` to one of ``receiver_role``?"""
        reply = kind.endswith(":reply")
        base = kind[: -len(":reply")] if reply else kind
        pair = (receiver_role, sender_role) if reply else (sender_role, receiver_role)
        if base in self.kinds.get(pair, frozenset()):
            return True
        return not self.strict_kinds and not base.startswith(SESSION_PREFIXES)

    def check(
        self,
        sender: str,
        sender_role: str,
        receiver: str,
        receiver_role: str,
        names: Iterable[str],
        kind: str | None = None,
    ) -> None:
        """Raise PrivacyError if ``kind`` or any of ``names`` may not go from sender to receiver."""
        key = (sender_role, receiver_role, kind, tuple(names))
        if key in self._passed:
            return
        forbids = f"privacy policy {self.name!r} forbids {sender!r} ({sender_role}) from sending"
        what = None
        if kind is not None and not self.kind_allowed(sender_role, receiver_role, kind):
            what = f"a {kind!r} message to {receiver!r} ({receiver_role})"
        ok = self.allowed.get((sender_role, receiver_role), frozenset())
        bad = [n for n in key[3] if n not in ok]
        if what is None and bad:
            what = f"{bad} to {receiver!r} ({receiver_role}); allowed: {sorted(ok) or 'nothing'}"
        if what is not None:  # the sender's (its party: in one process as deployed)
            err = PrivacyError(f"{forbids} {what}")
            err.party = sender
            raise err
        if len(self._passed) < MAX_PASSED:  # (a peer's made-up kinds cannot grow it)
            self._passed.add(key)

    def unused(
        self, crossings: Mapping[str, Iterable[str]], roles: Mapping[str, str]
    ) -> dict[Pair, list[str]]:
        """The array names this policy allows from role to role that no message of a run
        sent: ``crossings`` is the run's :meth:`MessageLog.crossings` (``"sender ->
        receiver"``: names), ``roles`` each party's role (an in-process transport's
        ``roles``). A policy that declares only what the protocol sends has none, which a
        test of an algorithm asserts (the runtime already refuses anything undeclared)."""
        sent: dict[Pair, set[str]] = {}
        for link, names in crossings.items():
            sender, _, receiver = link.partition(" -> ")
            sent.setdefault((roles[sender], roles[receiver]), set()).update(names)
        return {
            pair: sorted(names - sent.get(pair, set()))
            for pair, names in self.allowed.items()
            if names - sent.get(pair, set())
        }


def _frozen(table: Mapping[Pair, Iterable[str]]) -> dict[Pair, frozenset[str]]:
    """``table`` with each value a frozen set, checked: every key a ``(sender role, receiver
    role)`` pair of strings, every value a collection of names (a bare string would allow each
    of its letters: a :class:`ConfigError` says so)."""
    out = {}
    for key, names in table.items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(r, str) for r in key)):
            raise ConfigError(
                f"a privacy policy's key is a (sender role, receiver role) pair, got {key!r}"
            )
        listed = [] if isinstance(names, (str, bytes)) else list(names)
        if isinstance(names, (str, bytes)) or not all(isinstance(n, str) for n in listed):
            raise ConfigError(
                f"a privacy policy lists names for {key!r} as a list of strings, got "
                f"{names!r}" + (f" (write [{names!r}])" if isinstance(names, str) else "")
            )
        out[key] = frozenset(listed)
    return out


def _union(*tables: Mapping[Pair, Iterable[str]]) -> dict[Pair, frozenset[str]]:
    out: dict[Pair, set[str]] = {}
    for table in tables:
        for key, names in table.items():
            out.setdefault(key, set()).update(names)
    return _frozen(out)
