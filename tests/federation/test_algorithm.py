"""The algorithm spec, its registry and the privacy policy of kinds."""

from __future__ import annotations

import numpy as np
import pytest

from fedviews.errors import ConfigError, PrivacyError, ProtocolError
from fedviews.federation import (
    Coordinator,
    Party,
    PrivacyPolicy,
    build_in_process,
    federate,
    get_algorithm_spec,
    handles,
    register_algorithm_spec,
    spawn_streams,
)
from fedviews.linear import MMVFL
from fedviews.linear.mmvfl import MMVFL_SPEC, MMVFLParams


def test_policy_checks_kinds_and_their_replies():
    p = PrivacyPolicy.of(
        "t", {("coordinator", "party"): ["Z"]}, kinds={("coordinator", "party"): ["update"]}
    )
    p.check("c", "coordinator", "a", "party", ["Z"], "update")
    p.check("a", "party", "c", "coordinator", [], "update:reply")
    with pytest.raises(PrivacyError, match="'a' \\(party\\) from sending a 'update'"):
        p.check("a", "party", "b", "party", [], "update")
    with pytest.raises(PrivacyError, match="'stop'"):
        p.check("c", "coordinator", "a", "party", [], "stop")
    with pytest.raises(PrivacyError, match="forbids"):
        p.check("c", "coordinator", "a", "party", [], "update:reply")  # a reply the other way


@pytest.mark.parametrize(
    ("rules", "kinds", "says"),
    [
        ({("a", "b"): "Xw"}, None, r"got 'Xw' \(write \['Xw'\]\)"),  # not the names X and w
        ({("a", "b"): ["x"]}, {("a", "b"): "upd"}, r"got 'upd'"),
        ({("a",): ["x"]}, None, r"pair, got \('a',\)"),
        ({"ab": ["x"]}, None, "pair, got 'ab'"),
        ({("a", "b"): ["x", 3]}, None, r"list of strings, got \['x', 3\]"),
    ],
)
def test_a_malformed_policy_is_a_config_error(rules, kinds, says):
    """A bare string of names was taken letter by letter (allowing ``X`` and ``w``)."""
    with pytest.raises(ConfigError, match=says):
        PrivacyPolicy.of("t", rules, kinds)


def test_open_policies_still_reserve_session_kinds_for_the_coordinator():
    algo = PrivacyPolicy.of("algo", {("party", "party"): ["h"]})  # kinds unchecked
    session = PrivacyPolicy.of("session", {}, kinds={("coordinator", "party"): ["deploy:finish"]})
    merged = algo.merged(session)
    assert not merged.strict_kinds
    merged.check("a", "party", "b", "party", ["h"], "anything")
    merged.check("c", "coordinator", "a", "party", [], "deploy:finish")
    for kind in ("deploy:finish", "psi:blind", "deploy:build"):
        with pytest.raises(PrivacyError, match=kind):
            merged.check("a", "party", "b", "party", [], kind)


def test_a_party_class_may_not_register_a_kind_twice():
    with pytest.raises(ProtocolError, match="two handlers of 'x'"):

        class _Twice(Party):
            @handles("x")
            def one(self, msg):
                return None

            @handles("x")
            def two(self, msg):
                return None

    class _Base(Party):
        @handles("x")
        def one(self, msg):
            return None

    class _Override(_Base):  # overriding in a subclass is fine
        @handles("x")
        def other(self, msg):
            return None

    assert _Override._handlers["x"] == "other"


def test_registering_an_algorithm_twice_is_an_error():
    assert get_algorithm_spec("mmvfl") is MMVFL_SPEC
    register_algorithm_spec(MMVFL_SPEC)  # the same object again: a no-op
    clone = type(MMVFL_SPEC)()
    # where each comes from, not two object reprs
    with pytest.raises(
        ConfigError,
        match=r"registered twice \(by fedviews\.linear\.mmvfl\.spec\.MMVFLAlgorithm and",
    ):
        register_algorithm_spec(clone)
    with pytest.raises(ConfigError, match="did you mean 'mmvfl'"):
        get_algorithm_spec("mmvf")


def test_an_incomplete_spec_is_refused_when_it_registers():
    """A spec without build_coordinator registered and failed at its first run with a bare
    ``NotImplementedError``; one without ``name`` with an AttributeError; a mutable
    ``Params`` was taken."""
    import dataclasses

    from fedviews.federation import Algorithm

    @dataclasses.dataclass(frozen=True)
    class P:
        rounds: int = 1

    class NoCoordinator(Algorithm):
        name, Params = "x_incomplete", P

        def policy(self, run, setup):
            return PrivacyPolicy.of("x", {})

        def build_party(self, run, party, local, setup):
            return Party(party)

    with pytest.raises(
        ConfigError, match=r"NoCoordinator \('x_incomplete'\) does not define build_coordinator:"
    ):
        register_algorithm_spec(NoCoordinator())

    class Complete(NoCoordinator):
        def build_coordinator(self, run, setup, local=None):
            return Coordinator()

    class Unnamed(Complete):
        name = ""

    with pytest.raises(ConfigError, match="Unnamed: set the class attribute name"):
        register_algorithm_spec(Unnamed())

    @dataclasses.dataclass
    class Mutable:
        rounds: int = 1

    class MutableParams(Complete):
        Params = Mutable

    with pytest.raises(ConfigError, match=r"Params \(Mutable\) must be a frozen dataclass"):
        register_algorithm_spec(MutableParams())
    with pytest.raises(ConfigError, match="takes an Algorithm instance, got type"):
        register_algorithm_spec(Complete)  # the class, not an instance


def test_an_unknown_algorithm_says_that_one_of_your_own_is_imported_first():
    """'fedrige' (its module not imported) read "did you mean 'apfed'?" and nothing else."""
    with pytest.raises(ConfigError, match=r"unknown algorithm 'fedrige'.* import the module"):
        get_algorithm_spec("fedrige")


def test_a_coordinator_run_without_on_round_end_is_named():
    """``def run(self)``, as the base class reads, failed with Python's TypeError (``takes 1
    positional argument but 2 were given``) when the runner passed ``on_round_end``."""
    from fedviews.federation import Algorithm

    class NoHook(Coordinator):
        def run(self):
            return None

    with pytest.raises(
        ConfigError,
        match=r"NoHook.run takes no on_round_end: define run\(self, on_round_end=None\)",
    ):
        Algorithm.run_coordinator(MMVFL_SPEC, NoHook(), None)


def test_a_label_owner_outside_the_roster_is_named():
    from fedviews.federation import Roster

    with pytest.raises(
        ConfigError, match=r"label owner 'zz' is not one of the parties \['a', 'b'\]"
    ):
        Roster(("a", "b"), "zz")
    assert Roster(("a", "b"), "coordinator").owners() == ("coordinator",)  # V-FedMV's server


def test_receiver_checks_the_policy_too():
    """A sender that skips its own check is stopped when its message is admitted."""

    class Sink(Party):
        @handles("update")
        def on(self, msg):
            return None

    class Hub(Coordinator):
        pass

    policy = PrivacyPolicy.of("t", {}, kinds={("coordinator", "party"): ["update"]})
    a, b, c = Sink("a"), Sink("b"), Hub()
    t = federate([c, a, b], policy)
    t.check_send = lambda msg: None  # type: ignore[method-assign]  # a dishonest sender
    with pytest.raises(PrivacyError, match="'a' \\(party\\) from sending a 'update'"):
        a.send("b", "update")
    assert t.log.n_messages == 0


def test_the_estimator_runs_the_registered_spec_and_its_params():
    rng = np.random.default_rng(0)
    Xs = [rng.normal(size=(30, d)) for d in (4, 5)]
    y = np.arange(30) % 3
    m = MMVFL(beta=[0.5, 1.0], max_iter=3, tol=0.0, random_state=2).fit(Xs, y)
    # (its parameters are the Params fields plus its own: tests/test_params.py)
    # the same run through the spec, with PartyData built by hand
    from fedviews.data import PartyData
    from fedviews.federation import Roster, RunSpec

    params = MMVFLParams(beta=(0.5, 1.0), max_iter=3, tol=0.0)
    run = RunSpec("mmvfl", params, Roster(("u", "v"), label_owner="u"), seed=2)
    ids = np.arange(30)
    fed = build_in_process(run, {"u": PartyData(ids, Xs[0], y), "v": PartyData(ids, Xs[1])})
    fed()
    np.testing.assert_allclose(fed.coordinator.objective, m.objective_, rtol=1e-12)
    with pytest.raises(ConfigError, match="beta has 3 values"):
        build_in_process(
            RunSpec("mmvfl", MMVFLParams(beta=(1.0, 1.0, 1.0)), run.federation),
            {"u": PartyData(ids, Xs[0], y), "v": PartyData(ids, Xs[1])},
        )


def test_spawn_streams_is_seed_sequence_spawn():
    a = [s.generate_state(2) for s in spawn_streams(5, 3)]
    b = [s.generate_state(2) for s in np.random.SeedSequence(5).spawn(3)]
    np.testing.assert_array_equal(a, b)


def test_receivers_check_shapes_and_name_the_sender():
    from fedviews.data import PartyData
    from fedviews.federation import Message, Roster, RunSpec

    msg = Message("update", sender="p", receiver="c", arrays={"Z": np.zeros((3, 2))})
    assert msg.array("Z", (3, None)).shape == (3, 2)
    with pytest.raises(
        ProtocolError, match="'p' sent 'Z' of shape \\(3, 2\\) in 'update', expected \\(4, \\*\\)"
    ):
        msg.array("Z", (4, None))
    with pytest.raises(ProtocolError, match="without the array 'W'"):
        msg.array("W", (3, 2))

    rng = np.random.default_rng(1)
    Xs = [rng.normal(size=(20, d)) for d in (3, 4)]
    y = np.arange(20) % 2
    run = RunSpec("mmvfl", MMVFLParams(max_iter=2), Roster(("u", "v"), label_owner="u"))
    ids = np.arange(20)
    fed = build_in_process(run, {"u": PartyData(ids, Xs[0], y), "v": PartyData(ids, Xs[1])})
    bad = fed.parties["v"]

    def short_reply(msg):  # a dishonest party answers with a Z_k of the wrong size
        return bad.reply(msg, arrays={"Z_k": np.zeros((5, 2))}, meta={"local_objective": 0.0})

    bad.on_update = short_reply  # type: ignore[method-assign]
    with pytest.raises(ProtocolError, match="'v' sent 'Z_k' of shape \\(5, 2\\)"):
        fed()
