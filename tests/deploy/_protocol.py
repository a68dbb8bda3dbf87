"""Helpers of the deployment tests: launching a config as a user does, and the protocol
footprint of a run (which roles exchanged which kinds and array names)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

SESSION = ("deploy:", "psi:")


def mmvfl_inputs(run: Path, parties: Sequence[str], owner: int) -> tuple[list, object]:
    """``(Xs, y)`` of a launched MMVFL run's party files as one process holds them: plain
    alignment by ID, every view standardised by its own party, ``parties[owner]``'s labels."""
    import numpy as np

    from fedviews.data import align_views
    from fedviews.deploy import load_party_data

    datas = [load_party_data(run / "data" / f"{p}.npz") for p in parties]
    Xs, ids = align_views([d.X for d in datas], [d.ids for d in datas])
    Xs = [(X - X.mean(0)) / np.where(X.std(0) < 1e-12, 1.0, X.std(0)) for X in Xs]
    held = datas[owner]
    return Xs, held.y[np.argsort(held.ids)][np.searchsorted(np.sort(held.ids), ids)]


def tls_hub(policy: object, certs: Path, parties: Iterable[str], options: object) -> object:
    """A coordinator hub with mutual TLS (``certs``: the federation's folder) that expects
    ``parties`` (role ``"party"``), with a bare :class:`Coordinator` registered."""
    from fedviews.federation import Coordinator, GrpcHub, TLSFiles

    hub = GrpcHub(
        policy,  # type: ignore[arg-type]
        {p: "party" for p in parties},
        tls=TLSFiles.from_dir(certs, "coordinator"),
        options=options,  # type: ignore[arg-type]
    )
    hub.register(Coordinator())
    return hub


def fedviews_process(*args: str, **kw: Any) -> subprocess.Popen[str]:
    """``fedviews ARGS`` started as a user starts it (its output, stdout and stderr, in one
    pipe; unbuffered)."""
    return subprocess.Popen(
        [sys.executable, "-m", "fedviews", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )


def launch_config(config: Path, out: Path, timeout: float = 240) -> str:
    """`fedviews launch CONFIG --out OUT` as a user runs it; its output (the exit code checked)."""
    proc = subprocess.run(
        [sys.executable, "-m", "fedviews", "launch", str(config), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    return output


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


def forged(msg: Any, specs: Mapping[str, Any]) -> Any:
    """``msg`` as a dishonest party sends it: its encoding (sealed or not) lies about every
    array's spec (``specs``: field -> value, e.g. ``{"shape": [3.0]}``; a ``size`` of 0
    drops the arrays' bytes)."""
    from fedviews.federation import Message

    class Forged(Message):
        def layout(self) -> tuple[dict[str, Any], list[Any]]:
            head, payloads = super().layout()
            for spec in head["arrays"]:
                spec.update(specs)
            return head, [] if specs.get("size") == 0 else payloads

    return Forged(msg.kind, msg.sender, msg.receiver, msg.round, msg.arrays, msg.meta)
