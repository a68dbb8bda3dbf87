"""Secure aggregation: masks cancel in the sum, each masked array is uniform, keys are checked."""

from __future__ import annotations

import secrets

import numpy as np
import pytest

pytest.importorskip("cryptography")

from fedviews.errors import ConfigError, DataError, PrivacyError, ProtocolError  # noqa: E402
from fedviews.federation import Defense, Message, SecureSum, unmask_sum  # noqa: E402
from fedviews.federation._certs import TLSFiles, init_ca, issue_certificate  # noqa: E402
from fedviews.federation._secagg import decode, encode  # noqa: E402

NAMES = ("a", "b", "c")


def _group(names=NAMES, tls=None, frac_bits=32) -> dict[str, SecureSum]:
    ss = {n: SecureSum(n, frac_bits, tls=None if tls is None else tls[n]) for n in names}
    bundles = {n: s.bundle() for n, s in ss.items()}
    session = secrets.token_bytes(32)
    for s in ss.values():
        s.set_peers(list(names), bundles, session)
    return ss


def _reply(sender: str, arrays) -> Message:
    return Message("update:reply", sender, "coordinator", 1, arrays)


def _top_bits_uniform(words: np.ndarray) -> None:
    """The top 4 bits of 64-bit words fall in each of the 16 bins with frequency 1/16
    (a binomial proportion over >= 40,000 words: the bound is over 8 standard deviations)."""
    bins = np.bincount((words >> np.uint64(60)).astype(np.int64), minlength=16) / words.size
    assert np.all(np.abs(bins - 1 / 16) < 0.01), bins


def test_fixed_point_round_trip_and_range_refusals():
    x = np.array([[-1.5, 0.0, 2.0**-20], [3.25, -7e3, 1e6]])
    np.testing.assert_allclose(decode(encode(x, 32, 3, "x"), 32), x, atol=2.0**-33)
    with pytest.raises(DataError, match="NaN"):
        encode(np.array([np.nan]), 32, 3, "Z_k")
    with pytest.raises(DataError, match="frac_bits"):  # 2^30 / 3 is the limit at 32 bits
        encode(np.array([2.0**29]), 32, 3, "Z_k")


def test_masks_cancel_in_the_sum_and_each_masked_array_is_uniform():
    rng = np.random.default_rng(0)
    xs = {n: rng.normal(size=(200, 200)) for n in NAMES}
    ss = _group()
    masked = {n: ss[n].mask({"v": xs[n]}, round=1) for n in NAMES}
    sums = unmask_sum({n: _reply(n, m) for n, m in masked.items()}, {"v": (200, 200)}, 32)
    np.testing.assert_allclose(sums["v"], sum(xs.values()), atol=3 * 2.0**-33)
    for n in NAMES:  # one masked array: uniform over the ring, whatever the value
        words = masked[n]["v"].reshape(-1)
        _top_bits_uniform(words)
        # and uncorrelated with the value it hides
        corr = np.corrcoef(decode(words, 32), xs[n].reshape(-1))[0, 1]
        assert abs(corr) < 0.05
    # any two of the three (what a coordinator missing one party's share holds): uniform too
    pair = unmask_sum({n: _reply(n, masked[n]) for n in ("a", "b")}, {"v": (200, 200)}, 32)
    assert np.abs(pair["v"] - xs["a"] - xs["b"]).min() > 1.0  # far from the partial sum
    _top_bits_uniform(
        (masked["a"]["v"] + masked["b"]["v"]).reshape(-1)  # uint64: modulo 2^64
    )


def test_a_mask_is_never_reused_for_a_different_value():
    ss = _group()
    x = np.ones((4, 2))
    first = ss["a"].mask({"v": x}, round=3)["v"]
    np.testing.assert_array_equal(ss["a"].mask({"v": x}, round=3)["v"], first)  # a retry
    with pytest.raises(ProtocolError, match="twice"):
        ss["a"].mask({"v": 2 * x}, round=3)
    assert not np.array_equal(ss["a"].mask({"v": x}, round=4)["v"], first)  # fresh masks


def test_a_party_rebuilt_from_its_private_state_masks_as_before():
    """:meth:`SecureSum.private_state` (what a Flower node keeps between two processes)
    gives back the same keys and the record of what was masked: the rebuilt party's masks
    still cancel with its peers', a retry gives the same masked array, and another value
    for a masked round is still refused; a damaged state is a ProtocolError."""
    ss = _group()
    x = {n: np.full((3, 2), i + 0.5) for i, n in enumerate(NAMES)}
    first = ss["b"].mask({"v": x["b"]}, round=1)["v"]
    ss["b"] = SecureSum.from_private_state("b", ss["b"].private_state())
    np.testing.assert_array_equal(ss["b"].mask({"v": x["b"]}, round=1)["v"], first)
    with pytest.raises(ProtocolError, match="twice"):
        ss["b"].mask({"v": 2 * x["b"]}, round=1)
    masked = {n: _reply(n, ss[n].mask({"v": x[n]}, round=2)) for n in NAMES}
    sums = unmask_sum(masked, {"v": (3, 2)}, 32)
    np.testing.assert_allclose(sums["v"], sum(x.values()), atol=3 * 2.0**-33)
    assert ss["b"].bundle() == SecureSum.from_private_state("b", ss["b"].private_state()).bundle()
    for damaged in ("", "{}", ss["b"].private_state().replace('"secret": "', '"secret": "zz')):
        with pytest.raises(ProtocolError, match="'b': its saved secure-aggregation state"):
            SecureSum.from_private_state("b", damaged)


def test_the_coordinator_checks_every_masked_array_and_names_its_sender():
    ss = _group()
    good = {n: _reply(n, ss[n].mask({"v": np.ones(3)}, round=1)) for n in NAMES}
    bad = dict(good, b=_reply("b", {"v": np.ones(3)}))  # float, not masked
    with pytest.raises(ProtocolError, match="'b' sent 'v' as float64"):
        unmask_sum(bad, {"v": (3,)}, 32)
    short = dict(good, c=_reply("c", {"v": np.ones(2, dtype=np.uint64)}))
    with pytest.raises(ProtocolError, match="'c' sent 'v' of shape"):
        unmask_sum(short, {"v": (3,)}, 32)
    with pytest.raises(ProtocolError, match="no secure-aggregation keys"):
        SecureSum("z").mask({"v": np.ones(3)}, round=1)


def test_keys_are_bound_to_certificates_when_there_are_certificates(tmp_path):
    ca, evil = tmp_path / "ca", tmp_path / "evil"
    for d in (ca, evil):
        init_ca(d)
        for n in (*NAMES, "coordinator"):
            issue_certificate(d, n)
    tls = {n: TLSFiles.from_dir(ca, n) for n in (*NAMES, "coordinator")}
    ss = _group(tls=tls)  # signed and verified: works
    m = {n: _reply(n, ss[n].mask({"v": np.full(2, 1.5)}, 1)) for n in NAMES}
    np.testing.assert_allclose(unmask_sum(m, {"v": (2,)}, 32)["v"], 4.5)

    a, b = SecureSum("a", tls=tls["a"]), SecureSum("b", tls=tls["b"])
    session = secrets.token_bytes(32)
    # a coordinator substitutes its own key for b's, signed with its own certificate
    mitm = SecureSum("coordinator", tls=tls["coordinator"]).bundle()
    with pytest.raises(PrivacyError, match="certificate of \\['coordinator'\\] was offered as 'b'"):
        a.set_peers(["a", "b"], {"b": mitm}, session)
    # ... or strips the signature
    with pytest.raises(PrivacyError, match="not signed"):
        a.set_peers(["a", "b"], {"b": {"x25519": b.bundle()["x25519"]}}, session)
    # ... or signs with a certificate of another CA
    forged = SecureSum("b", tls=TLSFiles.from_dir(evil, "b")).bundle()
    with pytest.raises(PrivacyError, match="not from this CA|not signed by the CA"):
        a.set_peers(["a", "b"], {"b": forged}, session)


def test_a_replayed_key_exchange_cannot_reuse_a_mask_for_another_value():
    """A coordinator that sent the peers again (same session) would reset the party's record
    of what it masked and get the same masks on a second value: their difference is the
    difference of the values. The party keys once per key pair."""
    ss = _group()
    first = ss["a"].mask({"v": np.ones(3)}, round=1)["v"]
    bundles = {n: SecureSum(n).bundle() for n in NAMES}
    with pytest.raises(ProtocolError, match="peers twice"):
        ss["a"].set_peers(list(NAMES), bundles, secrets.token_bytes(32))
    with pytest.raises(ProtocolError, match="twice"):
        ss["a"].mask({"v": np.full(3, 5.0)}, round=1)
    np.testing.assert_array_equal(ss["a"].mask({"v": np.ones(3)}, round=1)["v"], first)


def test_a_party_refuses_a_secure_sum_without_another_member():
    """A coordinator that lists a party alone would get its array unmasked (no pair, no mask):
    the party refuses, even with certificates (there is no peer key to check)."""
    a = SecureSum("a")
    with pytest.raises(PrivacyError, match="only \\['a'\\] for a secure sum"):
        a.set_peers(["a"], {}, secrets.token_bytes(32))
    with pytest.raises(ProtocolError, match="no secure-aggregation keys"):
        a.mask({"v": np.ones(3)}, round=1)


def test_defense_config_is_checked():
    assert Defense.of(None).kind == "none" and Defense.of("secagg").active
    assert Defense.of({"kind": "secagg", "frac_bits": 24}).frac_bits == 24
    with pytest.raises(ConfigError, match="unknown defense.kind 'dp-magic'"):
        Defense.of("dp-magic")
    with pytest.raises(ConfigError, match="unknown key defense.strenght"):
        Defense.of({"kind": "secagg", "strenght": 1})
    with pytest.raises(ConfigError, match="frac_bits"):
        Defense.of({"kind": "secagg", "frac_bits": 60})
    # a setting the kind does not read was ignored: a secagg run "with epsilon 2" spent none
    with pytest.raises(ConfigError, match="defense.epsilon does not apply to .* 'secagg'"):
        Defense.of({"kind": "secagg", "epsilon": 2.0})
    with pytest.raises(ConfigError, match="defense.clip does not apply to .* 'label_rr'"):
        Defense.of({"kind": "label_rr", "epsilon": 2.0, "clip": 5.0})
    # a negative seed reached numpy's SeedSequence (a traceback, in a deployment a party's)
    with pytest.raises(ConfigError, match=r"defense.seed must be an integer in \[0, 2\*\*31\)"):
        Defense.of({"kind": "label_rr", "epsilon": 1.0, "seed": -1})


def test_a_defense_the_algorithm_does_not_take_is_said_before_its_settings():
    """MMVFL with ``grad_dp`` and no budget said "grad_dp takes either ... epsilon", and only
    once that was given that grad_dp does not apply to MMVFL."""
    from fedviews.data import load
    from fedviews.linear import MMVFL

    ds = load("handwritten", views=["fou", "kar"])
    with pytest.raises(ConfigError, match="defense 'grad_dp' does not apply to mmvfl"):
        MMVFL(defense="grad_dp", max_iter=1).fit(ds.views, ds.y)
