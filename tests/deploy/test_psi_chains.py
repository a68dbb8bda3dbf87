"""Sealed PSI chains that a dishonest coordinator cannot cut and a dishonest party cannot forge.

Real parties (:class:`PSIParty` behind :class:`GrpcPartyTransport`, TLS and end-to-end
sealing) on a coordinator's hub on 127.0.0.1. The attackers are the coordinator itself
(it sends the ``psi:*`` requests it likes) and a party with a valid certificate that
seals whatever it likes for its peers with its own end-to-end keys. Each party takes the
chain order from its own member list (what its deployment config says), never from the
coordinator, and the origin of a sealed set from the authenticated sealer.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")
pytest.importorskip("rbcl")

from fedviews.errors import RemoteError  # noqa: E402
from fedviews.federation import (  # noqa: E402
    Coordinator,
    GrpcHub,
    GrpcOptions,
    GrpcPartyTransport,
    Message,
    PrivacyPolicy,
    TLSFiles,
    init_ca,
    issue_certificate,
)
from fedviews.privacy import PSI_POLICY, PSIParty, hash_ids, run_psi  # noqa: E402

FAST = GrpcOptions(timeout=5.0, heartbeat=0.5, connect_timeout=5.0, connect_retries=2, backoff=0.1)
#: every party holds 190 IDs (as in the review that reported the attacks); 100 are common
IDS = {"a": np.arange(0, 190), "b": np.arange(90, 280), "c": np.arange(90, 280)}
#: the attacker's dictionary of candidate IDs: every ID of every party is in it
DICTIONARY = np.arange(2000)


def _serve(t: GrpcPartyTransport, errors: list[BaseException]) -> None:
    try:
        t.serve()
    except Exception as exc:  # noqa: BLE001 - recorded for the assertions
        errors.append(exc)


@contextlib.contextmanager
def _federation(
    certs: Path, policy: PrivacyPolicy, parties: list[PSIParty]
) -> Iterator[tuple[GrpcHub, Coordinator]]:
    """A TLS hub with a bare coordinator (the attacker: it sends what it likes) and
    ``parties``, each behind its own :class:`GrpcPartyTransport` (sealing on)."""
    init_ca(certs)
    for name in ("coordinator", *(p.name for p in parties)):
        issue_certificate(certs, name)
    roles = {p.name: p.role for p in parties}
    hub = GrpcHub(policy, roles, tls=TLSFiles.from_dir(certs, "coordinator"), options=FAST)
    coord = Coordinator()
    hub.register(coord)
    errors: list[BaseException] = []
    try:
        for party in parties:
            t = GrpcPartyTransport(
                policy,
                f"127.0.0.1:{hub.port}",
                tls=TLSFiles.from_dir(certs, party.name),
                options=FAST,
            )
            t.register(party)
            t.connect()
            threading.Thread(target=_serve, args=(t, errors), daemon=True).start()
        hub.wait_for_parties(30)  # a hang cap
        yield hub, coord
    finally:
        hub.close()
    assert errors == []


@pytest.fixture(params=[("a", "b"), ("a", "b", "c")], ids=["two", "three"])
def chain(request, tmp_path) -> Iterator[dict[str, Any]]:
    """The attacker's hub and honest parties whose member list of every group is
    ``request.param`` (in that chain order)."""
    members = list(request.param)
    chains = {g: members for g in ("g", "g2")}
    parties = {name: PSIParty(name, IDS[name], chains=chains) for name in members}
    with _federation(tmp_path, PSI_POLICY, list(parties.values())) as (hub, coord):
        yield {"coord": coord, "parties": parties, "members": members, "hub": hub}


def _recovered(blinded_ids: np.ndarray, blinded_dictionary: np.ndarray) -> int:
    """How many IDs the attacker recovers: the dictionary entries whose blinding under the
    victim's key equals an element of the victim's blinded set."""
    return len(set(map(bytes, blinded_ids)) & set(map(bytes, blinded_dictionary)))


def _seal(party: PSIParty, receiver: str, points: np.ndarray, meta: dict[str, Any]) -> np.ndarray:
    """What a dishonest ``party`` can seal for ``receiver`` with its own end-to-end keys."""
    chain = Message("psi:chain", party.name, receiver, arrays={"psi_set": points}, meta=meta)
    return np.frombuffer(party.transport.e2e.seal(chain), dtype=np.uint8)  # type: ignore[union-attr]


def test_honest_sealed_chains_find_the_intersection(chain) -> None:
    """The order each party takes from its own member list is the coordinator's: the PSI
    runs, every party holds the common rows, nothing but fully blinded sets in the clear."""
    assert run_psi(chain["coord"], chain["members"], "g") == 100
    for name, party in chain["parties"].items():
        np.testing.assert_array_equal(IDS[name][party.psi_rows["g"]], np.arange(90, 190))
    clear = [e for e in chain["hub"].log.entries if "psi_set" in e.arrays]
    assert [e.kind for e in clear] == ["psi:reblind:reply"] * len(chain["members"])


def test_a_coordinator_cannot_cut_a_chain(chain) -> None:
    """A dishonest coordinator asks for a party's blinded set with an empty ``next`` (the
    set would come back in the clear), or with a member skipped or out of order: the party
    refuses, naming the coordinator; its singly blinded set never leaves it unsealed."""
    coord, members = chain["coord"], chain["members"]
    wrong = ["", "coordinator", "a", "x"] + (["c"] if len(members) == 3 else [])
    for nxt in wrong:
        with pytest.raises(
            RemoteError,
            match=rf"'a' reported PrivacyError: 'a' refused 'coordinator''s 'psi:blind'.*{nxt!r}",
        ):
            coord.send("a", "psi:blind", meta={"group": "g", "next": nxt})
    if len(members) == 3:  # the chain order of the config, not the coordinator's
        with pytest.raises(
            RemoteError, match="'a' reported PrivacyError: .*refused 'coordinator''s"
        ):
            run_psi(coord, ["a", "c", "b"], "g2")
    sealed = coord.send("a", "psi:blind", meta={"group": "g", "next": "b"})  # the right one
    assert set(sealed.arrays) == {"psi_sealed"}
    if len(members) == 3:  # cut after b: a's partly blinded set would come back in the clear
        coord.send("b", "psi:blind", meta={"group": "g", "next": "c"})
        with pytest.raises(
            RemoteError,
            match=r"'b' reported PrivacyError: 'b' refused 'coordinator''s 'psi:reblind'.*''",
        ):
            coord.send("b", "psi:reblind", arrays=dict(sealed.arrays), meta={"group": "g"})
    assert not [e for e in chain["hub"].log.entries if "psi_set" in e.arrays]


def test_a_party_cannot_have_dictionaries_reblinded_under_invented_origins(chain) -> None:
    """Dishonest parties seal dictionaries of candidate IDs for ``a`` under six invented
    origins each, and the coordinator has ``a`` re-blind them (to compare with ``a``'s
    blinded set). ``a`` takes the origin from the chain order and the authenticated
    sealer: it re-blinds what the protocol needs and no more (one set per other member,
    all sealed by the member before it), nothing sealed by another party."""
    coord, parties, members = chain["coord"], chain["parties"], chain["members"]
    before = members[-1]  # the member before "a" in the chain order
    coord.send("a", "psi:blind", meta={"group": "g", "next": "b"})
    dictionary = hash_ids(DICTIONARY)
    reblinded, refused = [], []
    for attacker in sorted(set(members) - {"a"}):
        for k in range(6):
            blob = _seal(parties[attacker], "a", dictionary, {"group": "g", "origin": f"x{k}"})
            last = len(reblinded) == len(members) - 2  # the attacker plays the chain's steps
            meta = {"group": "g", "next": "" if last else "b"}
            try:
                coord.send("a", "psi:reblind", arrays={"psi_sealed": blob}, meta=meta)
            except RemoteError as exc:  # a's report of its refusal
                assert (exc.reported_by, exc.kind) == ("a", "PrivacyError"), exc
                refused.append(exc.text)
                continue
            reblinded.append(attacker)
    # one dictionary per other member, handed in by the predecessor as a set of the chain:
    # what a coordinator colluding with a party can always do (docs/threat-model.md)
    assert reblinded == [before] * (len(members) - 1)
    assert len(refused) == 6 * (len(members) - 1) - len(reblinded)
    for text in refused:
        assert "already re-blinded" in text or f"only sets sealed by {before!r}" in text, text


def test_deployed_parties_take_the_chain_order_from_their_config(tmp_path) -> None:
    """A deployed party (:class:`DeployParty`) checks a sealed chain against the parties
    of its own deployment config: a coordinator that asks for a blinded set in another
    order, or with an empty ``next``, is refused; the honest session's PSI runs."""
    from fedviews.data import PartyData
    from fedviews.deploy import load_deploy_config
    from fedviews.deploy._session import DeployParty, session_policy

    members = ["a", "b", "c"]
    fed = {"parties": members, "label_owner": "a"}
    cfg = load_deploy_config({"algorithm": "mmvfl", "federation": fed})
    parties = []
    for name in members:
        n = len(IDS[name])
        y = np.arange(n) % 2 if name == "a" else None
        data = PartyData(IDS[name], np.ones((n, 2)), y)
        parties.append(DeployParty(cfg, name, data, tmp_path / name, lambda _: None))
    with _federation(tmp_path, session_policy(cfg), parties) as (_, coord):
        for nxt in ("", "c"):
            with pytest.raises(
                RemoteError,
                match=rf"'a' reported PrivacyError: 'a' refused 'coordinator''s.*{nxt!r} as",
            ):
                coord.send("a", "psi:blind", meta={"group": "train", "next": nxt})
        assert run_psi(coord, members, "train") == 100
        for party in parties:
            np.testing.assert_array_equal(party.ids[party.psi_rows["train"]], np.arange(90, 190))
