"""S-FedMV (FedMV paper, Algorithm 4) on a small subset of the real smartwatch sequences."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fedviews.data import MultiViewSequences, load_sequences  # noqa: E402
from fedviews.deep.sfedmv import (  # noqa: E402
    SequenceClient,
    SequenceServer,
    SFedMV,
    sequence_policy,
    train_local_extractors,
)
from fedviews.deep.sfedmv.nets import (  # noqa: E402
    get_params,
    make_extractor,
    sequence_embed,
    sequence_logits,
)
from fedviews.deep.sfedmv.protocol import GRUConfig  # noqa: E402
from fedviews.errors import (  # noqa: E402
    ConfigError,
    DataError,
    NotFittedError,
    PrivacyError,
    ProtocolError,
)

TINY = {"hidden_size": 8, "n_rounds": 2, "local_epochs": 1, "batch_size": 16, "fusion_rounds": 3}


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    n = torch.get_num_threads()
    torch.set_num_threads(1)  # small GRUs: threads only add contention on a busy CI box
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def watch() -> MultiViewSequences:
    return load_sequences("watch")


def _clients(ds: MultiViewSequences, n_clients: int, per_client: int) -> MultiViewSequences:
    """``per_client`` windows of each of the first ``n_clients`` subjects, one subject per client."""
    subjects = ds.clients()[:n_clients]
    idx = np.concatenate([np.flatnonzero(ds.client_ids == s)[::2][:per_client] for s in subjects])
    return ds.subset(idx)


def test_fedavg_with_one_client_equals_local_training(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 1, 40)
    ((views, y),) = ds.by_client()
    fed = SFedMV(**TINY, random_state=3).fit_extractors([(views, y)])
    cfg = GRUConfig(hidden_size=8, n_rounds=2, local_epochs=1, batch_size=16)
    classes = np.unique(y)  # SFedMV encodes labels as indices into the sorted classes
    local = train_local_extractors(
        views, np.searchsorted(classes, y), len(classes), cfg, random_state=3
    )
    for k in range(2):
        a, b = get_params(fed.extractors_[k]), get_params(local[k])
        assert a.keys() == b.keys()
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    # and the training actually moved the weights away from the server's initialisation
    init = get_params(make_extractor(3, len(fed.classes_), cfg, 0))
    assert not np.array_equal(init["head.weight"], get_params(local[0])["head.weight"])


def test_aggregate_is_the_sample_weighted_mean(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 3, 30)
    clients = ds.by_client()
    clients = [
        clients[0],
        (  # unequal sizes: 30, 12, 30
            [v[:12] for v in clients[1][0]],
            clients[1][1][:12],
        ),
        clients[2],
    ]
    est = SFedMV(**TINY, random_state=0).fit_extractors(clients)
    sizes = np.array(est.client_sizes_, dtype=float)
    assert sizes.tolist() == [30, 12, 30]
    for k in range(2):
        glob = get_params(est.extractors_[k])
        local = est.local_params_[k]
        for name, value in glob.items():
            expected = sum(w * p[name] for w, p in zip(sizes / sizes.sum(), local, strict=True))
            np.testing.assert_allclose(value, expected, rtol=1e-6, atol=1e-7)
            assert not np.allclose(local[0][name], local[1][name])  # clients did differ
    # the static rule itself, on numbers
    out = SequenceServer.aggregate(
        [{"w": np.array([1.0, 2.0])}, {"w": np.array([4.0, 8.0])}], [1, 3]
    )
    np.testing.assert_allclose(out["w"], [3.25, 6.5])


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ),
    ],
)
def test_view_parameters_are_handed_over_as_tensors_and_equal_the_wire_run(
    watch: MultiViewSequences, monkeypatch: pytest.MonkeyPatch, device: str
) -> None:
    """In one process every view's parameters cross as tensors on their device, both ways
    (issue #33: device-resident messages); through their encoding (as gRPC carries them,
    numpy arrays) the run is the same: equal extractors, losses, messages and bytes (on a
    GPU, whose GRU kernels need not be bit-reproducible, the extractors to float rounding)."""
    from _wire import WireTransport

    import fedviews.deep.sfedmv.protocol as protocol

    seen: dict[str, set[str]] = {}
    real = protocol._received

    def spy(msg, name, like):  # type: ignore[no-untyped-def]
        got = msg.arrays[name]
        where = f"torch:{got.device.type}" if isinstance(got, torch.Tensor) else "numpy"
        seen.setdefault(msg.kind, set()).add(where)
        out = real(msg, name, like)
        assert out.device.type == device
        return out

    monkeypatch.setattr(protocol, "_received", spy)
    clients = _clients(watch, 2, 20).by_client()
    fast = SFedMV(**TINY, random_state=1, device=device).fit_extractors(clients)
    kinds = ("train_view", "train_view:reply", "final_view")
    assert seen == dict.fromkeys(kinds, {f"torch:{device}"})
    seen.clear()
    wire = SFedMV(**TINY, random_state=1, device=device, transport=WireTransport)
    wire.fit_extractors(clients)
    assert seen == dict.fromkeys(kinds, {"numpy"})
    for k in range(2):
        a, b = get_params(fast.extractors_[k]), get_params(wire.extractors_[k])
        for name in a:
            if device == "cpu":
                np.testing.assert_array_equal(a[name], b[name], err_msg=name)
            else:
                np.testing.assert_allclose(a[name], b[name], rtol=1e-4, atol=1e-5, err_msg=name)
    if device == "cpu":
        assert fast.round_loss_ == wire.round_loss_
    la, lb = fast.transport_.log, wire.transport_.log
    assert la.to_records() == lb.to_records()
    assert la.summary()["crossing_bytes"] == lb.summary()["crossing_bytes"]


def test_packed_batches_equal_one_by_one(watch: MultiViewSequences) -> None:
    seqs = watch.views[1][::40][:20]
    lengths = {len(s) for s in seqs}
    assert len(lengths) > 5  # really variable lengths
    model = make_extractor(3, 7, GRUConfig(hidden_size=8), seed=1)
    batch = sequence_embed(model, seqs, batch_size=64)
    single = np.vstack([sequence_embed(model, [s], batch_size=1) for s in seqs])
    np.testing.assert_allclose(batch, single, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        sequence_logits(model, seqs),
        np.vstack([sequence_logits(model, [s]) for s in seqs]),
        rtol=1e-5,
        atol=1e-6,
    )
    # padding is never read: appending steps to the *other* sequences changes nothing for s[0]
    longer = [seqs[0], *[np.vstack([s, s]) for s in seqs[1:]]]
    np.testing.assert_allclose(sequence_embed(model, longer)[0], batch[0], rtol=1e-5, atol=1e-6)


def test_only_gru_parameters_cross_in_the_sequence_stage(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 2, 30)
    est = SFedMV(**TINY, random_state=0).fit(ds.by_client())
    names = set(get_params(est.extractors_[0]))
    expected = {f"view{k}/{n}" for k in range(2) for n in names}
    log = est.transport_.log  # one run, both stages
    stage1 = {"train_view", "final_view"}

    def sent(sender: str | None = None, kinds: set[str] = stage1) -> set[str]:
        return {
            a
            for s, _, kind, arrays in log.exchanges()
            if kind.removesuffix(":reply") in kinds and sender in (None, s)
            for a in arrays
        }

    assert sent() == expected
    assert sent("client0") == expected
    assert all(n.split("/")[1].startswith(("gru.", "head.")) for n in sent())
    assert sent(kinds={"local_train", "final"}) == {"W_0", "W_1", "W_local_0", "W_local_1"}
    assert log.arrays_sent() == expected | {"W_0", "W_1", "W_local_0", "W_local_1"}
    assert [len(losses) for losses in est.round_loss_] == [TINY["n_rounds"]] * 2
    # stage 2 is H-FedMV on the same run
    assert est.fusion_.transport_ is est.transport_
    assert len(est.fusion_.objective_) == TINY["fusion_rounds"]
    policy = sequence_policy([sorted(names)] * 2)
    with pytest.raises(PrivacyError):
        policy.check("client0", "client", "coordinator", "coordinator", ["y"])
    with pytest.raises(PrivacyError):
        policy.check("client0", "client", "coordinator", "coordinator", ["embedding"])


def test_baselines_fit_and_predict(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 2, 30)
    clients = ds.by_client()
    for extractors, fusion in [("centralized", "hfedmv"), ("local", "hfedmv"), ("local", "local")]:
        est = SFedMV(extractors=extractors, fusion=fusion, **TINY).fit(clients)
        pred = est.predict(clients[1][0], client=1)
        assert pred.shape == (30,) and set(pred) <= set(est.classes_)
        assert est.transport_ is None  # no federated stage-1 messages
    with pytest.raises(ConfigError, match="client"):
        est.predict(clients[1][0])
    with pytest.raises(ConfigError, match="extractors"):
        SFedMV(extractors="pooled").fit(clients)


def test_round_callback_sees_every_round(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 2, 20)
    seen: list[tuple[int, int, object]] = []
    SFedMV(**TINY).fit_extractors(
        ds.by_client(), on_round=lambda k, t, c, m: seen.append((k, t, c))
    )
    assert seen == [(0, 1, None), (0, 2, None), (1, 1, None), (1, 2, None)]


def test_errors_for_bad_client_data(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 2, 20)
    (v0, y0), (v1, y1) = ds.by_client()
    est = SFedMV(**TINY)
    with pytest.raises(DataError, match="different sample counts"):
        est.fit([([v0[0], v0[1][:-1]], y0), (v1, y1)])
    with pytest.raises(DataError, match="every client must hold every view"):
        est.fit([(v0, y0), ([v1[0]], y1)])
    with pytest.raises(DataError, match="missing"):
        est.fit([(v0, y0), ([v1[0], None], y1)])
    with pytest.raises(DataError, match="channels"):
        est.fit([(v0, y0), ([v1[0], [s[:, :2] for s in v1[1]]], y1)])
    with pytest.raises(DataError, match="labels"):
        est.fit([(v0, y0), (v1, y1[:-1])])


def test_one_client_subset_keeps_whole_sequences(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 1, 10)
    sub = replace(ds, name="x").subset([3, 1])
    assert [len(s) for s in sub.views[0]] == [len(ds.views[0][3]), len(ds.views[0][1])]


def test_fit_runs_both_stages_as_one_run_equal_to_the_two_steps(watch: MultiViewSequences) -> None:
    ds = _clients(watch, 2, 24)
    clients = ds.by_client()
    one = SFedMV(**TINY, random_state=2).fit(clients)
    two = SFedMV(**TINY, random_state=2).fit_extractors(clients).fit_fusion(clients)
    assert one.round_loss_ == two.round_loss_
    np.testing.assert_allclose(one.fusion_.objective_, two.fusion_.objective_, rtol=1e-10)
    for a, b in zip(one.fusion_.W_, two.fusion_.W_, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-8, atol=1e-12)
    views, _ = clients[1]
    np.testing.assert_array_equal(one.predict(views), two.predict(views))
    # the one run's policy names this run's GRU parameters and views, nothing wider
    policy = one.transport_.policy
    names = {f"view{k}/{n}" for k in range(2) for n in get_params(one.extractors_[0])}
    assert policy.allowed[("coordinator", "client")] == names | {"W_0", "W_1"}
    assert policy.allowed[("client", "coordinator")] == names | {"W_local_0", "W_local_1"}
    assert set(policy.kinds[("coordinator", "client")]) == {
        "train_view", "final_view", "local_train", "final"
    }  # fmt: skip


def test_variable_length_sequences_round_trip_through_party_data(watch: MultiViewSequences) -> None:
    from fedviews.data import PartyData

    seqs = [watch.views[0][::40][:6], watch.views[1][::40][:6]]
    seqs[1] = [s[: max(1, len(s) // 2)] for s in seqs[1]]  # views of one sample differ in length
    data = PartyData.from_sequences(np.arange(6), seqs, np.arange(6) % 2)
    assert data.features.shape == (6, max(len(s) for s in seqs[0]), 6)
    back = data.sequences("train", np.array([4, 0]))
    for k in range(2):
        for got, i in zip(back[k], (4, 0), strict=True):
            np.testing.assert_array_equal(got, seqs[k][i])
    with pytest.raises(DataError, match="lengths"):
        PartyData(data.ids, data.X, data.y, view_dims=(3, 3), lengths=data.lengths[:, :1])
    with pytest.raises(DataError, match="lengths"):
        PartyData(data.ids, data.X, data.y, view_dims=(3, 3), lengths=data.lengths + 10_000)


def test_fit_fusion_refuses_labels_the_extractors_never_saw(watch: MultiViewSequences) -> None:
    """Before: the labels were encoded with searchsorted against classes_ unchecked, so a new
    label became an out-of-range index (a raw IndexError at predict) or another class."""
    ds = _clients(watch, 2, 20)
    (v0, y0), (v1, y1) = ds.by_client()
    est = SFedMV(**TINY).fit_extractors([(v0, y0), (v1, y1)])
    relabelled = np.where(y1 == y1[0], 999, y1)
    with pytest.raises(DataError, match=r"labels \[999\] were not seen"):
        est.fit_fusion([(v0, y0), (v1, relabelled)])


def test_set_params_after_fit_waits_for_the_next_fit(watch: MultiViewSequences) -> None:
    """predict read the modes from the current params: ``set_params(fusion="local")`` or
    ``set_params(extractors="local")`` after a fit raised a raw TypeError (``len`` of an
    HFedMV, a BiGRUExtractor not iterable) and the reverse an AttributeError. Now it uses the
    fitted modes; ``set_params(fusion="local").fit_fusion(...)`` (the docstring's recipe)
    switches the fusion, and a new fit_extractors drops the fusion of the former GRUs."""
    ds = _clients(watch, 2, 20)
    clients = ds.by_client()
    views = clients[1][0]
    fed, local = ("federated", "hfedmv"), ("local", "local")
    for setting, other in [(fed, local), (local, fed)]:
        est = SFedMV(extractors=setting[0], fusion=setting[1], **TINY).fit(clients)
        expected = est.predict(views, client=1)
        est.set_params(extractors=other[0], fusion=other[1])
        np.testing.assert_array_equal(est.predict(views, client=1), expected)
        assert est.setting_ == setting
    est = SFedMV(extractors="local", **TINY).fit(clients)  # Local Sequential H-FedMV
    est.set_params(fusion="local").fit_fusion(clients)  # Local Sequential LocalMVL, same GRUs
    assert est.setting_ == ("local", "local")
    own = est.fusion_[1].predict(est.transform(views, client=1))
    np.testing.assert_array_equal(est.predict(views, client=1), est.classes_[own])
    with pytest.raises(ConfigError, match="pass client"):
        est.predict(views)
    est.set_params(extractors="federated").fit_extractors(clients)
    with pytest.raises(NotFittedError):
        est.predict(views)


@pytest.mark.parametrize("claimed", [0, -30, float("nan"), 2.5])
def test_the_server_refuses_a_sample_count_that_is_no_count(
    watch: MultiViewSequences, monkeypatch: pytest.MonkeyPatch, claimed: float
) -> None:
    """A client's n_samples (its FedAvg weight N_l) was taken as sent: a dishonest client1
    claiming -30 samples turned the average of 20 + 20 windows into -2 w_0 + 3 w_1, one
    claiming NaN sent a NaN model to every client, 0 or 2.5 went into the weights; both the
    plain and the secure-aggregation server now refuse it."""
    honest = SequenceClient.reply

    def reply(self: SequenceClient, msg: object, **kw: object) -> object:
        meta = kw.get("meta")
        if self.name == "client1" and isinstance(meta, dict) and "n_samples" in meta:
            kw["meta"] = {**meta, "n_samples": claimed}
        return honest(self, msg, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SequenceClient, "reply", reply)
    clients = _clients(watch, 2, 20).by_client()
    for defense in (None, "secagg"):
        with pytest.raises(ProtocolError, match="'client1' sent n_samples"):
            SFedMV(**{**TINY, "n_rounds": 1}, defense=defense).fit_extractors(clients)


@pytest.mark.parametrize(
    ("tamper", "refusal"),
    [
        (lambda a: a.round().astype(np.int64), "as int64 .* expected floating point"),
        (lambda a: a[..., :1], "of shape .* expected"),
        (lambda a: np.full_like(a, np.nan), "not finite|NaN"),
    ],
    ids=["integer", "shape", "nan"],
)
def test_the_server_refuses_view_parameters_not_like_its_own(
    watch: MultiViewSequences,
    monkeypatch: pytest.MonkeyPatch,
    tamper: Callable[[np.ndarray], np.ndarray],
    refusal: str,
) -> None:
    """Every received view's parameters are checked against the receiver's own (names,
    shapes, floating point, finite): integer parameters from a dishonest client1 were taken
    as sent (``view_params`` checked names and shapes only), and a ``like=None`` call
    checked nothing."""
    honest = SequenceClient.reply

    def reply(self: SequenceClient, msg: object, **kw: object) -> object:
        arrays = kw.get("arrays")
        if self.name == "client1" and isinstance(arrays, dict):
            kw["arrays"] = {n: tamper(np.asarray(a)) for n, a in arrays.items()}
        return honest(self, msg, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(SequenceClient, "reply", reply)
    clients = _clients(watch, 2, 20).by_client()
    with pytest.raises(ProtocolError, match=f"'client1' sent .*({refusal})") as raised:
        SFedMV(**{**TINY, "n_rounds": 1}).fit_extractors(clients)
    assert raised.value.party == "client1"


@pytest.mark.parametrize("view", [0.5, -1, 2])
def test_a_client_refuses_a_view_it_does_not_hold(
    watch: MultiViewSequences, monkeypatch: pytest.MonkeyPatch, view: float
) -> None:
    """The server's ``view`` was cut to an integer (view 0.5 with view 0's parameters trained
    view 0; only the message of view 1 was then refused, as parameters of another view), and
    one out of range was refused without naming the sender. Now a view that is no index of
    the client's views is refused, naming the server."""
    from fedviews.federation import Party

    honest = Party._message

    def message(self, receiver, kind, arrays, meta, round):  # type: ignore[no-untyped-def]
        if kind == "train_view" and receiver == "client1":
            meta = {**meta, "view": view}
        return honest(self, receiver, kind, arrays, meta, round)

    monkeypatch.setattr(Party, "_message", message)
    clients = _clients(watch, 2, 20).by_client()
    with pytest.raises(
        ProtocolError, match=f"sent view {float(view)!r}; 'client1' holds views 0..1"
    ):
        SFedMV(**{**TINY, "n_rounds": 1}).fit_extractors(clients)


def test_both_stages_run_through_the_runner(
    watch: MultiViewSequences, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``fit`` and ``fit_extractors`` drive the server by the spec's ``run_coordinator``, as a
    deployment does; ``fit_extractors`` stops after stage 1."""
    from fedviews.deep.sfedmv.spec import SFedMVAlgorithm

    driven = []
    honest = SFedMVAlgorithm.run_coordinator

    def run_coordinator(self, coord, on_round_end=None):  # type: ignore[no-untyped-def]
        driven.append(coord)
        return honest(self, coord, on_round_end)

    monkeypatch.setattr(SFedMVAlgorithm, "run_coordinator", run_coordinator)
    clients = _clients(watch, 2, 16).by_client()
    est = SFedMV(**TINY, random_state=1).fit(clients)
    assert len(driven) == 1 and len(driven[0].fusion.objective) == TINY["fusion_rounds"]
    assert est.fusion_.objective_ == driven[0].fusion.objective
    SFedMV(**TINY, random_state=1).fit_extractors(clients)
    assert len(driven) == 2 and driven[1].fusion.objective == []


def test_progress_numbers_both_stages_out_of_their_planned_rounds(
    watch: MultiViewSequences, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deployment's round lines read ``round k/N`` (:func:`of_planned` with
    ``planned_rounds``, the stage-1 rounds); the fusion's lines, numbered on their own, said
    ``fusion round k`` without their total."""
    from fedviews.deep.sfedmv.spec import SFedMVAlgorithm

    lines: list[str] = []
    honest = SFedMVAlgorithm.run_coordinator

    def run_coordinator(self, coord, on_round_end=None):  # type: ignore[no-untyped-def]
        out = honest(self, coord, on_round_end)
        lines.extend(self.progress(coord))
        return out

    monkeypatch.setattr(SFedMVAlgorithm, "run_coordinator", run_coordinator)
    SFedMV(**TINY, random_state=1).fit(_clients(watch, 2, 16).by_client())
    views, R, F = watch.n_views, TINY["n_rounds"], TINY["fusion_rounds"]
    assert [line.split(":")[0] for line in lines] == [
        *(f"round {r}" for r in range(1, views * R + 1)),
        *(f"fusion round {r}/{F}" for r in range(1, F + 1)),
    ]


def test_torch_threads_is_checked_by_its_field() -> None:
    """``torch_threads`` (deployment only) is an integer >= 0, as its field declares (the
    check that once followed ``fusion()``'s return never ran)."""
    from fedviews.deep.sfedmv.spec import SFedMVParams

    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigError, match="torch_threads must be an integer >= 0"):
            SFedMVParams(torch_threads=bad).validate()
    SFedMVParams(torch_threads=0).validate()
    assert SFedMVParams(fusion_rounds=7).fusion().n_rounds == 7
