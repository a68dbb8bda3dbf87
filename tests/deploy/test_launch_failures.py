"""What a failed ``fedviews launch`` says: who broke the run, and whether it can resume.

A walkthrough that added an algorithm found two misleading endings: a bug in its own
coordinator code (adding up replies of another length) ended as "party 'coordinator' is
unavailable", and a run whose parties wrote no checkpoint (its round message carried no
round number) was said to have a "checkpoint of round 3 kept" that no resume could use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fedviews.deploy._launch import _failure, _resume_hint
from fedviews.errors import DataError, PartyUnavailable, ProtocolError, RemoteError

HINT = "see results.json"


def test_the_coordinator_s_own_failure_is_no_unavailable_party():
    status = "ValueError: operands could not be broadcast together with shapes (90,) (92,)"
    err = _failure({"status": status}, 2, HINT, "coordinator")
    assert type(err) is ProtocolError and err.party == "coordinator"
    assert str(err) == f"the coordinator failed: {status}; {HINT}"


@pytest.mark.parametrize(
    ("info", "kind", "party", "text"),
    [
        ({"status": "DataError: the files share no ID"}, DataError, None, "the files share no ID"),
        (
            {
                "status": "PartyUnavailable: party 'zer' is unavailable: gone",
                "unavailable_party": "zer",
            },
            PartyUnavailable,
            "zer",
            "party 'zer' is unavailable: gone",
        ),
        (
            {"status": "ProtocolError: 'fou' sent 'z' of shape (3,)", "culprit": "fou"},
            ProtocolError,
            "fou",
            "'fou' sent 'z' of shape (3,)",  # (it read "ProtocolError: ProtocolError: ...")
        ),
        (
            {"status": "RemoteError: 'fou' reported ConfigError: its file", "reported_by": "fou"},
            RemoteError,
            "fou",
            "'fou' reported ConfigError: its file",  # (it read "ProtocolError: RemoteError: ")
        ),
        (
            {
                "status": "DataError: sizes differ; 'zer' differs from all the others",
                "culprit": "zer",
            },
            DataError,
            "zer",
            "sizes differ; 'zer' differs",  # (it read "ProtocolError: DataError: ...")
        ),
        ({"status": "KeyboardInterrupt: "}, PartyUnavailable, "coordinator", "party 'coordinator'"),
        (
            {"status": "Terminated: stopped by SIGTERM"},
            PartyUnavailable,
            "coordinator",
            "party 'coordinator' is unavailable: Terminated: stopped by SIGTERM",
        ),
    ],
)
def test_other_endings_keep_their_kind_and_name(info, kind, party, text):
    err = _failure(info, 2, HINT, "coordinator")
    assert type(err) is kind and getattr(err, "party", None) == party
    assert str(err).startswith(text) and str(err).endswith(HINT)


def _checkpoints(run: Path, **rounds: list[int]) -> None:
    for who, have in rounds.items():
        (run / who / "checkpoints").mkdir(parents=True)
        for r in have:
            (run / who / "checkpoints" / f"round-{r:05d}.npz").write_bytes(b"")


def test_the_resume_hint_is_the_last_round_every_process_has(tmp_path):
    _checkpoints(tmp_path, coordinator=[2, 3], fou=[3, 4], zer=[3, 4])
    hint = _resume_hint(tmp_path, "coordinator", ["fou", "zer"])
    assert hint == f"; checkpoint of round 3 kept: `fedviews run --resume {tmp_path}`"


def test_no_resume_is_offered_where_a_party_has_no_checkpoint(tmp_path):
    _checkpoints(tmp_path, coordinator=[2, 3], fou=[3])
    assert _resume_hint(tmp_path, "coordinator", ["fou", "zer"]) == (
        "; no round is checkpointed by every process (coordinator: [2, 3]; fou: [3], "
        "zer: none): a resumed run cannot continue it"
    )
    assert _resume_hint(tmp_path / "nothing", "coordinator", ["fou"]) == ""
