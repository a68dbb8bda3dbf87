"""The protocol footprint of a run: which roles exchanged which kinds and array names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

SESSION = ("deploy:", "psi:")


def footprint(
    exchanges: Iterable[Sequence[object]], roles: Mapping[str, str]
) -> set[tuple[str, str, str, tuple[str, ...]]]:
    """``{(sender role, receiver role, kind, names)}`` of a message log, session kinds left out.

    ``exchanges``: ``MessageLog.exchanges()`` or the ``"exchanges"`` of a ``message_log.json``;
    ``roles``: party name -> role (the coordinator included).
    """
    out = set()
    for sender, receiver, kind, names in exchanges:
        base = str(kind).removesuffix(":reply")
        if base.startswith(SESSION):
            continue
        out.add((roles[str(sender)], roles[str(receiver)], str(kind), tuple(names)))  # type: ignore[arg-type]
    return out


def assert_tight(policy: object, seen: set[tuple[str, str, str, tuple[str, ...]]]) -> None:
    """The policy allows exactly what crossed: every allowed array name and request kind
    of every role pair was used (nothing wider), and nothing else crossed."""
    names: dict[tuple[str, str], set[str]] = {}
    kinds: dict[tuple[str, str], set[str]] = {}
    for s, r, kind, arrays in seen:
        names.setdefault((s, r), set()).update(arrays)
        if not kind.endswith(":reply"):
            kinds.setdefault((s, r), set()).add(kind)
    allowed = {k: set(v) for k, v in policy.allowed.items() if v}  # type: ignore[attr-defined]
    assert {k: v for k, v in names.items() if v} == allowed
    assert kinds == {k: set(v) for k, v in policy.kinds.items() if v}  # type: ignore[attr-defined]
