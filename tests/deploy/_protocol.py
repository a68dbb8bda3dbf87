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
