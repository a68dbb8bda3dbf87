"""Multi-VFL: split == unsplit, FedAvg of identical owners, privacy barrier, errors, one spec."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _tamper import tampered  # noqa: E402
from _wire import WireTransport, assert_same_run, batched_equals_one_each  # noqa: E402

from fedviews.deep.multivfl import (  # noqa: E402
    MultiVFL,
    build_models,
    epoch_order,
    label_owner_classes,
    partition_label_owners,
    round_seed,
)
from fedviews.deep.multivfl.nets import SplitNet  # noqa: E402
from fedviews.errors import ConfigError, DataError, DataWarning  # noqa: E402


@pytest.fixture(scope="module")
def fmnist() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from fedviews import data

    ds = data.load("fashion_mnist", subset="test")
    idx = np.random.default_rng(0).permutation(len(ds.y))[:600]
    return ds.images[idx], ds.y[idx], ds.ids[idx]


def _params(module: torch.nn.Module) -> list[np.ndarray]:
    return [p.detach().numpy().copy() for p in module.parameters()]


def _reference(
    images: np.ndarray, y: np.ndarray, n_strips: int, batch_size: int, lr: float, epochs: int
) -> SplitNet:
    """Plain single-process training of the same split network on the same batches."""
    strips = [
        s.reshape(len(images), 1, -1, 28)
        for s in np.array_split(images.astype(np.float32) / 255, n_strips, axis=1)
    ]
    heights = [s.shape[2] for s in strips]
    bottoms, top = build_models(heights, 28, 10, random_state=0)
    net = SplitNet(bottoms, top)
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    xs = [torch.as_tensor(np.ascontiguousarray(s)) for s in strips]
    yt = torch.as_tensor(y)
    for e in range(epochs):
        order = torch.as_tensor(epoch_order(round_seed(0, 1), 1, e, len(y)))
        for b in range(0, len(y), batch_size):
            idx = order[b : b + batch_size]
            loss = torch.nn.functional.cross_entropy(net([x[idx] for x in xs]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net


@pytest.mark.parametrize("n_data_owners", [1, 4])
def test_split_equals_unsplit(fmnist, n_data_owners: int) -> None:
    """K = 1: the federated parameters after one round equal plain training of the same network
    (same init, same batches); with one batch and SGD this is gradient equality."""
    images, y, _ = fmnist
    images, y = images[:128], y[:128]
    lr = 0.05
    for batch_size in (128, 32):  # one batch (gradient equality), then several batches
        est = MultiVFL(
            n_data_owners=n_data_owners,
            n_label_owners=1,
            rounds=1,
            batch_size=batch_size,
            lr=lr,
            local_optimizer="sgd",
            device="cpu",
            random_state=0,
        ).fit(images, y, label_owner_ids=[np.arange(len(y))])
        ref = _reference(images, y, n_data_owners, batch_size, lr, epochs=1)
        top = est.label_owners_[0].top
        for a, b in zip(_params(top), _params(ref.top), strict=True):
            np.testing.assert_allclose(a, b, atol=2e-6)
        np.testing.assert_allclose(
            np.concatenate([p.ravel() for p in est.server_.params.values()]),
            np.concatenate([p.ravel() for p in _params(ref.top)]),
            atol=2e-6,
        )
        for d in range(n_data_owners):
            got = _params(est.data_owners_[d].copies["label_owner_0"])
            for a, b in zip(got, _params(ref.bottoms[d]), strict=True):
                np.testing.assert_allclose(a, b, atol=2e-6)


def test_sgd_local_step_is_w_minus_eta_grad(fmnist) -> None:
    """Algorithm 1 line 7 (the default local step): one batch moves every weight, bottom and
    top, by exactly ``-lr * dℓ/dW`` at the initial weights (gradients by autograd, no optimizer)."""
    images, y, _ = fmnist
    images, y, lr = images[:64], y[:64], 0.1
    est = MultiVFL(
        n_data_owners=2, n_label_owners=1, rounds=1, batch_size=64, lr=lr, device="cpu"
    ).fit(images, y, label_owner_ids=[np.arange(len(y))])
    assert est.local_optimizer == "sgd"
    strips = [
        torch.as_tensor(s.reshape(len(images), 1, -1, 28))
        for s in np.array_split(images.astype(np.float32) / 255, 2, axis=1)
    ]
    bottoms, top = build_models([s.shape[2] for s in strips], 28, 10, random_state=0)
    net = SplitNet(bottoms, top)
    w0 = [p.detach().clone() for p in net.parameters()]
    loss = torch.nn.functional.cross_entropy(net(strips), torch.as_tensor(y))
    grads = torch.autograd.grad(loss, list(net.parameters()))
    expected = [w - lr * g for w, g in zip(w0, grads, strict=True)]
    got = [
        *[p for d in range(2) for p in _params(est.data_owners_[d].copies["label_owner_0"])],
        *_params(est.label_owners_[0].top),
    ]
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)


def test_a_killed_fit_continues_from_its_checkpoint(fmnist, tmp_path) -> None:
    """``fit(checkpoint=...)`` killed after round 2 of 4 and called again ends with the model
    and history of an uninterrupted fit (FedYogi: server moments are part of the state)."""
    images, y, _ = fmnist
    kw = {"n_data_owners": 2, "n_label_owners": 2, "optimizer": "fedyogi", "rounds": 4}
    kw.update(batch_size=50, samples_per_owner=100, device="cpu", random_state=1)
    eval_set = (images[500:], y[500:])
    whole = MultiVFL(**kw).fit(images[:500], y[:500], eval_set=eval_set)

    class Killed(Exception):
        pass

    def dies(r: int, rec: dict) -> None:
        if r == 3:
            raise Killed

    ckpt = tmp_path / "mvfl.npz"
    with pytest.raises(Killed):
        MultiVFL(**kw).fit(
            images[:500],
            y[:500],
            eval_set=eval_set,
            callback=dies,
            checkpoint=ckpt,
            checkpoint_every=2,
        )
    rounds_run: list[int] = []
    resumed = MultiVFL(**kw).fit(
        images[:500],
        y[:500],
        eval_set=eval_set,
        checkpoint=ckpt,
        checkpoint_every=2,
        callback=lambda r, rec: rounds_run.append(r),
    )
    assert rounds_run == [3, 4]
    assert resumed.history_["accuracy"] == whole.history_["accuracy"]
    assert resumed.history_["train_loss"] == whole.history_["train_loss"]
    for k, v in whole.server_.params.items():
        np.testing.assert_array_equal(resumed.server_.params[k], v)
    for a, b in zip(resumed.data_owners_, whole.data_owners_, strict=True):
        for pa, pb in zip(_params(a.bottom), _params(b.bottom), strict=True):
            np.testing.assert_array_equal(pa, pb)
    np.testing.assert_array_equal(resumed.predict(images[500:]), whole.predict(images[500:]))
    # the traffic of every session (it counted the resumed rounds only: a report of a
    # resumed experiment showed half the messages and bytes of the uninterrupted run); the
    # resumed session's start sends the global top model to the label owners once more
    got, ref = resumed.run_stats_, whole.run_stats_
    assert got["sessions"] == 2 and got["rounds"] == ref["rounds"]
    assert got["crossings"] == ref["crossings"]
    again = {f"server -> label_owner_{k}" for k in range(2)}
    again |= {f"label_owner_{k} -> server" for k in range(2)}
    for link, n in ref["crossing_bytes"].items():
        assert (
            (got["crossing_bytes"][link] > n)
            if link in again
            else (got["crossing_bytes"][link] == n)
        ), link
    assert got["messages"] == ref["messages"] + 4  # the top model and its acknowledgement


def test_checkpoint_of_another_run_or_no_interval_is_refused(fmnist, tmp_path) -> None:
    """A checkpoint of 3 rounds given to a 2-round fit was taken as it stood: history_ of 3
    rounds and batches_per_round counted over 2 (1.5x too many); checkpoint_every=0 trained
    a round, then raised ZeroDivisionError."""
    images, y, _ = fmnist
    kw = {"n_data_owners": 2, "n_label_owners": 2, "batch_size": 50, "samples_per_owner": 100}
    kw.update(channels=4, top_channels=4, hidden=16, device="cpu", random_state=0)
    ckpt = tmp_path / "mvfl.npz"
    MultiVFL(rounds=3, **kw).fit(images[:300], y[:300], checkpoint=ckpt)
    with pytest.raises(ConfigError, match=r"another run: params.rounds \(3 there, 2 here\)"):
        MultiVFL(rounds=2, **kw).fit(images[:300], y[:300], checkpoint=ckpt)
    for every in (0, -1, 1.5):
        with pytest.raises(ConfigError, match="checkpoint_every must be a positive integer"):
            MultiVFL(rounds=2, **kw).fit(
                images[:300], y[:300], checkpoint=tmp_path / "b.npz", checkpoint_every=every
            )
    assert not (tmp_path / "b.npz").exists()


def test_checkpoint_of_other_params_seed_or_data_or_a_corrupt_one_is_refused(
    fmnist, tmp_path
) -> None:
    """A checkpoint was continued whatever it belonged to: one of random_state=0 went on under
    random_state=1, one of FedAdam under FedAvg (its moments silently dropped), one of lr=1e-3
    under lr=0.5, one of other images; now the checkpoint names its run and a mismatch is
    refused. A corrupt file raised numpy's raw ValueError/EOFError."""
    images, y, _ = fmnist
    kw = {"n_data_owners": 2, "n_label_owners": 2, "batch_size": 50, "samples_per_owner": 100}
    kw.update(channels=4, top_channels=4, hidden=16, device="cpu", rounds=2)
    X, labels = images[:300], y[:300]
    ckpt = tmp_path / "mvfl.npz"
    base = {**kw, "random_state": 0, "optimizer": "fedadam"}
    MultiVFL(**{**base, "rounds": 1}).fit(X, labels, checkpoint=ckpt, checkpoint_every=1)
    saved = ckpt.read_bytes()
    other = tmp_path / "other.npz"
    for change, match in [
        ({"random_state": 1}, r"seed \(0 there, 1 here\)"),
        ({"optimizer": "fedavg"}, r'params.optimizer \("fedadam" there, "fedavg" here\)'),
        ({"lr": 0.5}, r"params.lr \(0.1 there, 0.5 here\)"),
    ]:
        other.write_bytes(saved)
        with pytest.raises(ConfigError, match=match):
            MultiVFL(**{**base, "rounds": 1, **change}).fit(X, labels, checkpoint=other)
    other.write_bytes(saved)
    with pytest.raises(DataError, match="another run: the data of data_owner_0"):
        MultiVFL(**{**base, "rounds": 1}).fit(X[::-1], labels[::-1], checkpoint=other)
    other.write_bytes(saved)  # the same run goes on, also on another device
    est = MultiVFL(**{**base, "rounds": 1, "device": "auto"}).fit(X, labels, checkpoint=other)
    assert est.history_["round"] == [1] and est.run_stats_["messages"] > 0
    for content in (b"", b"not a zip", b"PK\x03\x04 torn"):
        other.write_bytes(content)
        with pytest.raises(DataError, match=f"cannot read the checkpoint {other}"):
            MultiVFL(**base).fit(X, labels, checkpoint=other)
    with open(other, "wb") as fh:  # an .npz of a pickled object array
        np.savez(fh, state=np.array([{"a": 1}], dtype=object))
    with pytest.raises(DataError, match="cannot read the checkpoint"):
        MultiVFL(**base).fit(X, labels, checkpoint=other)
    np.savez(other, t=np.array(1))  # readable, but no run's checkpoint
    with pytest.raises(DataError, match="not a checkpoint of this run"):
        MultiVFL(**base).fit(X, labels, checkpoint=other)


def test_fedavg_identical_owners_equals_one_owner(fmnist) -> None:
    images, y, _ = fmnist
    images, y = images[:192], y[:192]
    kw = dict(
        n_data_owners=2, rounds=2, batch_size=64, device="cpu", random_state=3, optimizer="fedavg"
    )
    one = MultiVFL(n_label_owners=1, **kw).fit(images, y, label_owner_ids=[np.arange(192)])
    with pytest.warns(DataWarning, match="'label_owner_1' and 'label_owner_2' both hold 192\\)"):
        three = MultiVFL(n_label_owners=3, **kw)
        three.fit(images, y, label_owner_ids=[np.arange(192)] * 3)
    for k in one.server_.params:
        np.testing.assert_allclose(
            three.server_.params[k], one.server_.params[k], rtol=1e-4, atol=1e-5
        )
    for d in range(2):
        for a, b in zip(
            _params(three.data_owners_[d].copies["label_owner_2"]),
            _params(one.data_owners_[d].copies["label_owner_0"]),
            strict=True,
        ):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(three.predict(images[:50]), one.predict(images[:50]))


def test_privacy_barrier_in_message_log(fmnist) -> None:
    images, y, ids = fmnist
    est = MultiVFL(
        n_data_owners=4,
        n_label_owners=2,
        rounds=1,
        batch_size=100,
        samples_per_owner=100,
        device="cpu",
        log_entries=True,
    ).fit(images[:400], y[:400], ids=ids[:400], eval_set=(images[400:500], y[400:500]))
    log = est.transport_.log
    top_names = {f"update/{k}" for k in est.server_.params}
    for d in range(4):
        assert log.arrays_sent(sender=f"data_owner_{d}") == {"activations"}
        assert log.arrays_sent(receiver=f"data_owner_{d}") == {"activation_grad"}
        assert log.arrays_sent(sender=f"data_owner_{d}", receiver="server") == set()
    for k in range(2):
        assert log.arrays_sent(sender=f"label_owner_{k}", receiver="server") == top_names
        assert log.arrays_sent(sender="server", receiver=f"label_owner_{k}") == {
            f"top/{n}" for n in est.server_.params
        }
    assert log.arrays_sent(sender="server", receiver="data_owner_0") == set()
    # activations are (batch, 32, 7, 28); nothing with the shape of a raw strip or a label vector crosses
    shapes = {s for e in log.entries for s in e.shapes}
    assert (100, 32, 7, 28) in shapes
    assert not any(s[1:] == (7, 28) or s == (100,) for s in shapes)
    # labels never leave label owners: the only label-owner arrays are gradients and top updates
    assert all(
        set(e.arrays) <= {"activation_grad"} | top_names
        for e in log.entries
        if e.sender.startswith("label_owner")
    )
    # the round's recorded accuracy is the trained model's on the evaluation set
    assert est.history_["accuracy"] == [np.mean(est.predict(images[400:500]) == y[400:500])]


def test_table3_scenarios_match_paper() -> None:
    table = json.loads(
        resources.files("fedviews.experiments").joinpath("paper_tables.json").read_text()
    )
    for scenario, owners in table["multivfl_claims"]["table3_non_iid"].items():
        got = label_owner_classes(scenario, 5, 10)
        expect = [
            list(range(10)) if o == "0-9" else [int(c) for c in o.strip("{}").split(",")]
            for o in owners
        ]
        assert got == expect


def test_partition_is_disjoint_and_class_restricted(fmnist) -> None:
    _, y, _ = fmnist
    parts = partition_label_owners(y, "4niid", 5, 20, np.random.default_rng(0))
    assert [len(p) for p in parts] == [20] * 5
    assert len(np.unique(np.concatenate(parts))) == 100
    assert set(y[parts[0]]) == set(range(10))
    for j, p in enumerate(parts[1:]):
        assert set(y[p]) == {2 * j, 2 * j + 1}


def test_errors(fmnist) -> None:
    images, y, _ = fmnist
    with pytest.raises(ConfigError, match="did you mean 'fedyogi'"):
        MultiVFL(optimizer="fedyogii").fit(images, y)
    # a strip of another width: its activations cannot be stacked with the others'
    with pytest.raises(DataError, match=r"of 'data_owner_1' .* \(32, 7, 20\), which cannot"):
        strips = [images[:, 0:7], images[:, 7:14, :20], images[:, 14:21], images[:, 21:]]
        MultiVFL(n_label_owners=1).fit(strips, y)
    with pytest.raises(DataError, match="mismatched shapes"):
        MultiVFL(n_label_owners=1).fit(
            [images[:, 0:7], images[:10, 7:14], images[:, 14:21], images[:, 21:]], y
        )
    with pytest.raises(DataError, match="X has 2 arrays but n_data_owners=4"):
        MultiVFL(n_label_owners=1).fit([images[:, :14], images[:, 14:]], y)
    nan = images[:, 21:].astype(np.float32)
    nan[0, 0, 0] = np.nan  # the data owner is named, not only "X"
    with pytest.raises(DataError, match=r"X\[3\] \(party 3's features\) contains NaN"):
        MultiVFL(n_label_owners=1).fit([images[:, 0:7], images[:, 7:14], images[:, 14:21], nan], y)
    # 28 rows in 3 strips were 10, 9 and 9 rows, silently: Multi-VFL's strips are equal
    with pytest.raises(DataError, match="28-row images cannot be cut into 3 equal strips"):
        MultiVFL(n_data_owners=3, n_label_owners=1).fit(images, y)
    with pytest.raises(DataError, match="label owner 1 has no samples"):
        MultiVFL(n_label_owners=2).fit(
            images, y, label_owner_ids=[np.arange(10), np.array([], dtype=int)]
        )
    with pytest.raises(ConfigError, match="every label owner needs samples"):
        MultiVFL(n_label_owners=5).fit(images[:4], y[:4])
    with pytest.raises(ConfigError, match="unknown scenario"):
        MultiVFL(scenario="5noniid").fit(images, y)
    with pytest.raises(DataError, match="only"):
        MultiVFL(scenario="4niid", samples_per_owner=500).fit(images, y)


def test_predict_checks_strip_shapes(fmnist) -> None:
    images, y, _ = fmnist
    est = MultiVFL(n_data_owners=2, n_label_owners=1, rounds=1, batch_size=100, device="cpu").fit(
        images[:100], y[:100]
    )
    assert est.predict(images[:7]).shape == (7,)
    with pytest.raises(DataError, match="differ from the training strips"):
        est.predict(images[:7, :, :20])


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round(fmnist) -> None:
    """A CUDA fit is the CPU fit of the same seeds, up to float reordering."""
    images, y, _ = fmnist
    kw = {"n_label_owners": 2, "rounds": 2, "samples_per_owner": 150, "batch_size": 32}
    runs = {
        dev: MultiVFL(lr=0.1, device=dev, **kw).fit(
            images[:400], y[:400], eval_set=(images[400:], y[400:])
        )
        for dev in ("cuda", "cpu")
    }
    gpu, cpu = runs["cuda"], runs["cpu"]
    assert gpu.run_stats_["device"].startswith("cuda")
    np.testing.assert_allclose(gpu.history_["train_loss"], cpu.history_["train_loss"], rtol=1e-3)
    assert np.mean(gpu.predict(images[400:]) == cpu.predict(images[400:])) > 0.95


def test_fit_runs_the_registered_spec(fmnist) -> None:
    """``fit`` == the spec run by hand on one PartyData per party; its policy is this run's."""
    from fedviews.data import PartyData
    from fedviews.deep import MultiVFLParams
    from fedviews.federation import Roster, RunSpec, build_in_process, get_algorithm_spec

    images, y, _ = fmnist
    images, y = images[:96], y[:96]
    est = MultiVFL(
        n_data_owners=2,
        n_label_owners=2,
        rounds=1,
        batch_size=32,
        channels=4,
        top_channels=4,
        hidden=8,
        device="cpu",
        random_state=5,
    ).fit(
        images,
        y,
        label_owner_ids=[np.arange(48), np.arange(48, 96)],
        eval_set=(images[:20], y[:20]),
    )
    params = MultiVFLParams(
        rounds=1, batch_size=32, channels=4, top_channels=4, hidden=8, device="cpu"
    )
    roster = Roster(("u", "v", "a", "b"), label_owners=("a", "b"))
    ids = np.arange(96)
    classes = np.unique(y)
    parts = est.label_owner_samples_
    datas = {
        "u": PartyData(ids, images[:, :14], ids_test=ids[:20], X_test=images[:20, :14]),
        "v": PartyData(ids, images[:, 14:], ids_test=ids[:20], X_test=images[:20, 14:]),
        "a": PartyData(
            ids[parts[0]],
            None,
            np.searchsorted(classes, y[parts[0]]),
            ids_test=ids[:20],
            y_test=np.searchsorted(classes, y[:20]),
        ),
        "b": PartyData(ids[parts[1]], None, np.searchsorted(classes, y[parts[1]])),
    }
    fed = build_in_process(RunSpec("multivfl", params, roster, seed=5), datas)
    fed()
    for k, v in est.server_.params.items():
        np.testing.assert_array_equal(fed.coordinator.params[k], v)
    assert [r["accuracy"] for r in fed.coordinator.history] == est.history_["accuracy"]
    spec = get_algorithm_spec("multivfl")
    assert spec.policy(fed.run, fed.setup) == est.transport_.policy == fed.transport.policy
    layers = set(est.server_.params)
    assert est.transport_.policy.allowed[("coordinator", "label_owner")] == {
        f"top/{k}" for k in layers
    }
    # the shapes of this run's modules: 14-row strips into 4 channels, stacked to 28 rows
    assert fed.setup == {
        "n_classes": 10,
        "top_input": "4x28x28",
        "input/u": "1x14x28",
        "input/v": "1x14x28",
        "output/u": "4x14x28",
        "output/v": "4x14x28",
    }


def test_the_spec_loads_without_torch() -> None:
    """The registry's provider and a deployment config load where torch is not installed."""
    code = """
import sys

class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError("No module named 'torch'", name="torch")

sys.meta_path.insert(0, NoTorch())
from fedviews.deep import MultiVFLParams
from fedviews.deploy import load_deploy_config
from fedviews.federation import ALGORITHMS

assert "fedviews.deep.multivfl.spec" in ALGORITHMS.providers
cfg = load_deploy_config(
    {"algorithm": "multivfl", "federation": {"parties": ["a", "lo"], "label_owners": ["lo"]},
     "params": {"rounds": 3}}
)
assert cfg.params == MultiVFLParams(rounds=3) and cfg.roles()["a"] == "data_owner"
assert "torch" not in sys.modules
try:
    from fedviews.deep import MultiVFL
except ImportError as exc:
    print("MissingDependency" if type(exc).__name__ == "MissingDependency" else exc)
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MissingDependency"


def test_a_label_owner_checks_what_data_owners_send(fmnist) -> None:
    """A dishonest data owner's misshapen activations are named, not crashed on."""
    from fedviews.errors import ProtocolError
    from fedviews.federation import build_in_process

    datas, run = _two_data_owners(fmnist)
    fed = build_in_process(run, datas)
    bad = fed.parties["v"]
    honest = bad.forward

    def forward(msg):  # one sample short
        reply = honest(msg)
        return bad.reply(msg, {"activations": reply.arrays["activations"][1:]})

    bad.forward = forward  # type: ignore[method-assign]
    with pytest.raises(ProtocolError, match="'v' sent 'activations' of shape \\(15, "):
        fed()


def test_label_owners_holding_the_same_samples_are_warned_of(fmnist) -> None:
    """Two label owners that both hold some samples (the paper's hold distinct ones) train on
    them twice a round, and conflicting labels could not be seen: the first data owner, which
    sees both groups' rows, says so, naming them and the count; distinct samples: no word."""
    import warnings

    from fedviews.data import PartyData
    from fedviews.errors import DataWarning
    from fedviews.federation import Roster, RunSpec, build_in_process

    images, y, params = _tiny(fmnist)
    ids = np.arange(32)
    roster = Roster(("u", "v", "a", "b"), label_owners=("a", "b"))
    for b_rows, shared in ((slice(16, 32), 0), (slice(10, 32), 6)):
        datas = {
            "u": PartyData(ids, images[:, :14]),
            "v": PartyData(ids, images[:, 14:]),
            "a": PartyData(ids[:16], None, y[:16]),
            "b": PartyData(ids[b_rows], None, y[b_rows]),
        }
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            build_in_process(RunSpec("multivfl", params, roster, seed=1), datas)
        said = [str(w.message) for w in seen if issubclass(w.category, DataWarning)]
        assert said == (
            [
                f"label owners share training samples ('a' and 'b' both hold {shared}): "
                "each trains on them every round, and conflicting labels would go unnoticed "
                "(Multi-VFL's label owners hold distinct samples)"
            ]
            if shared
            else []
        )


def _two_data_owners(fmnist):
    """The party data and run of a tiny Multi-VFL: data owners u, v (top and bottom halves),
    label owner a."""
    from fedviews.data import PartyData
    from fedviews.federation import Roster, RunSpec

    images, y, params = _tiny(fmnist)
    ids = np.arange(32)
    datas = {
        "u": PartyData(ids, images[:, :14]),
        "v": PartyData(ids, images[:, 14:]),
        "a": PartyData(ids, None, y),
    }
    return datas, RunSpec("multivfl", params, Roster(("u", "v", "a"), label_owners=("a",)), seed=1)


def _tiny(fmnist):
    """32 Fashion-MNIST images, their labels as 0..C-1 and the params of a tiny one-round run."""
    from fedviews.deep import MultiVFLParams

    images, y, _ = fmnist
    images, y = images[:32], np.searchsorted(np.unique(y[:32]), y[:32])
    params = MultiVFLParams(
        rounds=1, batch_size=16, channels=4, top_channels=4, hidden=8, device="cpu", evaluate=False
    )
    return images, y, params


@pytest.mark.parametrize(
    ("who", "name", "bad", "match"),
    [
        ("v", "activations", np.nan, "'v' sent 'activations' with NaN"),
        ("v", "activations", "int64", "'v' sent 'activations' as int64"),
        ("a", "activation_grad", np.inf, "'a' sent 'activation_grad' with NaN"),
        # finite but huge: the victim's values overflow, the sender is named
        # (tests/deep/test_overflow_blame.py)
        ("v", "activations", 3e38, "'v' sent 'activations' with values so large"),
        ("a", "activation_grad", 3e38, "'a' sent 'activation_grad' with values so large"),
        ("a", "update/0.weight", np.nan, "'a' sent 'update/0.weight' with NaN"),
        ("a", "train_loss", np.nan, "'a': meta\\['train_loss'\\] must be float, got nan"),
        # numpy's ValueError in the data owner's thread (a security review's finding)
        ("a", "seed", -1, "'begin_epoch' from 'a': meta\\['seed'\\] must be a whole number >= 0"),
    ],
)
def test_receivers_refuse_nan_or_non_float_values(fmnist, monkeypatch, who, name, bad, match):
    """A data owner's NaN activations made the label owner's top model (and through FedAvg the
    server's) NaN, a label owner's infinite activation gradient the data owner's bottom, a
    NaN update the global top model, all without an error; int64 activations were taken; a NaN
    train loss was reported as the round's loss. Each is now a ProtocolError naming the sender."""
    from fedviews.errors import ProtocolError
    from fedviews.federation import Party, build_in_process

    datas, run = _two_data_owners(fmnist)
    honest = Party._message

    def message(self, receiver, kind, arrays, meta, round):
        arrays, meta = dict(arrays or {}), dict(meta or {})
        if self.name == who and name in arrays:
            arrays[name] = tampered(arrays[name], bad)
        if self.name == who and name in meta:
            meta[name] = bad
        return honest(self, receiver, kind, arrays, meta, round)

    monkeypatch.setattr(Party, "_message", message)
    with pytest.raises(ProtocolError, match=match):
        build_in_process(run, datas)()


def test_tensors_handed_over_equal_the_wire_run(fmnist) -> None:
    """In one process activations and gradients are handed over as tensors on their device;
    through their encoding (as gRPC carries them) the run is the same: equal models, equal
    messages and bytes."""
    from fedviews.federation import build_in_process

    datas, run = _two_data_owners(fmnist)
    fast, wire = build_in_process(run, datas), build_in_process(run, datas, transport=WireTransport)
    fast(), wire()
    assert_same_run(fast, wire)


@pytest.mark.parametrize("label_owners", [1, 2])
def test_data_owners_backward_passes_run_as_one_and_equal_one_each(
    fmnist, monkeypatch, label_owners
) -> None:
    """In one process the gradients that a label owner scatters to the data owners go back
    through their bottoms in one autograd call; every model and every message is bit for bit
    that of one backward pass per data owner."""
    from fedviews.data import PartyData
    from fedviews.federation import Roster, RunSpec

    images, y, params = _tiny(fmnist)
    ids = np.arange(32)
    owners = ("d0", "d1", "d2")
    datas = {d: PartyData(ids, s) for d, s in zip(owners, np.array_split(images, 3, axis=1))}
    labels = ("a", "b")[:label_owners]
    for k, rows in zip(labels, np.array_split(ids, label_owners)):
        datas[k] = PartyData(rows, None, y[rows])
    run = RunSpec("multivfl", params, Roster((*owners, *labels), label_owners=labels), seed=1)
    # one call per batch of 16 (a batch's gradients go back with the request for the next
    # batch, the last one's alone), all three bottoms at once
    assert batched_equals_one_each(run, datas, monkeypatch) == [3] * (32 // 16)


def test_data_owners_adam_steps_run_as_one_and_equal_one_each(fmnist, monkeypatch) -> None:
    """With Adam as the local step, the data owners' optimisers step as one multi-tensor step
    (after each one's first step of a round, which creates its moments); every model and
    message is bit for bit that of one step per data owner."""
    import dataclasses

    import fedviews.deep._fusedstep as fused
    from fedviews.data import PartyData
    from fedviews.federation import Roster, RunSpec

    images, y, params = _tiny(fmnist)
    params = dataclasses.replace(params, local_optimizer="adam", rounds=2, batch_size=8)
    ids = np.arange(32)
    owners = ("d0", "d1", "d2")
    datas = {d: PartyData(ids, s) for d, s in zip(owners, np.array_split(images, 3, axis=1))}
    datas["a"] = PartyData(ids, None, y)
    run = RunSpec("multivfl", params, Roster((*owners, "a"), label_owners=("a",)), seed=1)
    sizes: list[int] = []
    real = fused.adam

    def counted(p: Any, *args: Any, **kw: Any) -> None:
        sizes.append(len(p))
        real(p, *args, **kw)

    monkeypatch.setattr(fused, "adam", counted)
    assert batched_equals_one_each(run, datas, monkeypatch) == [3] * (2 * 32 // 8)
    # per round, after every optimiser's first step: 3 steps of the label owner's (its top: 6
    # parameters), each followed by the data owners' (a bottom: 2), one by one, then as one
    assert sizes == [6, 2, 2, 2] * 3 * 2 + [6, 3 * 2] * 3 * 2


@pytest.mark.parametrize(
    ("acts", "grads", "up", "down"),
    [
        ("fp16", "bf16", {"activations"}, {"activation_grad"}),
        (
            "int8",
            "topk",
            {"activations", "activations.scale"},
            {"activation_grad", "activation_grad.idx"},
        ),
    ],
)
def test_lossy_wire_encodings_cut_bytes_and_still_train(fmnist, acts, grads, up, down) -> None:
    """Opt-in codecs change the math, so the run differs from the exact one, but it trains
    close to it with a fraction of the bytes; the policy admits exactly their arrays."""
    images, y, ids = fmnist
    kw = dict(n_data_owners=2, n_label_owners=1, rounds=2, batch_size=50, device="cpu")
    fit = dict(ids=ids[:300], eval_set=(images[300:500], y[300:500]))
    exact = MultiVFL(**kw).fit(images[:300], y[:300], **fit)
    lossy = MultiVFL(**kw, wire_activations=acts, wire_gradients=grads, topk_ratio=0.2).fit(
        images[:300], y[:300], **fit
    )
    log = lossy.transport_.log
    assert log.arrays_sent(sender="data_owner_0", receiver="label_owner_0") == up
    assert log.arrays_sent(sender="label_owner_0", receiver="data_owner_0") == down
    ratio = lossy.run_stats_["train_bytes_per_round"] / exact.run_stats_["train_bytes_per_round"]
    assert ratio < (0.55 if acts == "fp16" else 0.4)  # top-k: values and int32 positions
    assert lossy.history_["train_loss"][-1] < lossy.history_["train_loss"][0]
    assert abs(lossy.history_["accuracy"][-1] - exact.history_["accuracy"][-1]) < 0.1
    with pytest.raises(ConfigError, match="top-k is for the returned gradients"):
        MultiVFL(**kw, wire_activations="topk").fit(images[:300], y[:300], **fit)


def test_bad_labels_scores_and_params_are_clear_errors(fmnist) -> None:
    """A single class, a wrong-length ``y`` in ``score`` and mistyped parameters: each a
    fedviews error (before: a silent one-class fit, a silent 0.0 or a raw numpy error, and raw
    TypeError / ValueError from the checks)."""
    images, y, _ = fmnist
    kw = {"n_data_owners": 2, "n_label_owners": 1, "rounds": 1, "batch_size": 100, "device": "cpu"}
    with pytest.raises(DataError, match="at least two classes"):
        MultiVFL(**kw).fit(images[:100], np.zeros(100, dtype=int))
    est = MultiVFL(**kw).fit(images[:100], y[:100])
    assert est.score(images[100:120], y[100:120]) == np.mean(
        est.predict(images[100:120]) == y[100:120]
    )
    for bad in (y[100:101], y[100:105]):
        with pytest.raises(DataError, match="one label per sample"):
            est.score(images[100:120], bad)
    for name, value in [
        ("lr", "abc"),
        ("lr", float("inf")),
        ("scenario", 4),
        ("samples_per_owner", 1.5),
    ]:
        with pytest.raises(ConfigError, match=name if name != "scenario" else "unknown scenario"):
            MultiVFL(**{**kw, name: value}).fit(images[:100], y[:100])


def test_a_data_owner_names_a_label_owner_that_asks_for_rows_it_has_not(fmnist):
    """Activations of a batch before begin_epoch, of a batch past the epoch or of rows past a
    split raised a raw KeyError inside the data owner, so the run named the data owner (the
    victim) as failed; now a ProtocolError names the label owner that asked."""
    from fedviews.data import PartyData
    from fedviews.errors import ProtocolError
    from fedviews.federation import Message, Roster, RunSpec, build_in_process

    images, y, params = _tiny(fmnist)
    ids = np.arange(32)
    datas = {"u": PartyData(ids, images), "a": PartyData(ids, None, y)}
    fed = build_in_process(
        RunSpec("multivfl", params, Roster(("u", "a"), label_owners=("a",))), datas
    )
    u = fed.parties["u"]
    ask = {"batch": 0, "batch_size": 16}
    with pytest.raises(ProtocolError, match="'a' asked for batch 0 of size 16.*no begin_epoch"):
        u.handle(Message("forward", "a", "u", 1, meta=ask))
    u.handle(Message("begin_epoch", "a", "u", 1, meta={"epoch": 0, "seed": 3}))
    with pytest.raises(ProtocolError, match="'a' asked for batch 2 of size 16"):
        u.handle(Message("forward", "a", "u", 1, meta={**ask, "batch": 2}))
    assert u.handle(Message("forward", "a", "u", 1, meta=ask)).arrays["activations"].shape[0] == 16
    with pytest.raises(ProtocolError, match="'a' asked for rows 0:5 of the 'test' split"):
        u.handle(Message("infer", "a", "u", 1, meta={"split": "test", "start": 0, "stop": 5}))


def test_models_start_from_algorithm_1s_xavier_initializer() -> None:
    """Algorithm 1 initialises with "Gaussian/Xavier"; the models used PyTorch's defaults."""
    bottoms, top = build_models([7, 7, 7, 7], 28, 10, random_state=0)
    layers = [m for net in (*bottoms, top) for m in net.modules() if hasattr(m, "weight")]
    assert len(layers) == 4 + 3
    for layer in layers:
        w = layer.weight.detach().numpy()
        fan_in = w.shape[1] * int(np.prod(w.shape[2:]))
        fan_out = w.shape[0] * int(np.prod(w.shape[2:]))
        std = np.sqrt(2.0 / (fan_in + fan_out))
        assert abs(w.std() / std - 1) < (0.35 if w.size < 1000 else 0.05), layer
        assert not layer.bias.detach().numpy().any()
    torch_bottoms, _ = build_models([7, 7, 7, 7], 28, 10, random_state=0, init="torch")
    assert torch_bottoms[0][0].bias.detach().numpy().any()
    with pytest.raises(ConfigError, match="init must be one of"):
        MultiVFL(init="he").fit(np.zeros((20, 28, 28)), np.arange(20) % 2)


def test_default_samples_per_owner_fits_the_data() -> None:
    """2,000 random MNIST labels: n // K = 400 per owner overdrew class 0 ("label owner 4 needs
    36 samples of class 0 but only 34 are left"); the default now takes what fits."""
    from fedviews import data
    from fedviews.deep.multivfl import partition_label_owners

    y = data.load("mnist").y[np.random.default_rng(0).permutation(10_000)[:2000]]
    sizes = {}
    for scenario in ("iid", "2niid", "4niid"):
        parts = partition_label_owners(y, scenario, 5, None, np.random.default_rng(0))
        (size,) = {len(p) for p in parts}
        assert len(np.unique(np.concatenate(parts))) == 5 * size  # disjoint
        with pytest.raises(DataError, match="lower samples_per_owner"):  # the largest that fits
            partition_label_owners(y, scenario, 5, size + 1, np.random.default_rng(0))
        sizes[scenario] = size
    assert 0.8 * 400 < sizes["iid"] < 400 and max(sizes["2niid"], sizes["4niid"]) < sizes["iid"]
    with pytest.raises(DataError, match="needs 36 samples of class 0 but only 34"):
        partition_label_owners(y, "iid", 5, 400, np.random.default_rng(0))


def test_fit_prints_a_line_per_round_unless_quiet(fmnist, capsys) -> None:
    images, y, _ = fmnist
    kw = {"n_data_owners": 2, "n_label_owners": 2, "rounds": 2, "channels": 2, "hidden": 8}
    kw.update(top_channels=2, batch_size=50, device="cpu")
    MultiVFL(**kw, verbose=True).fit(images[:200], y[:200], eval_set=(images[200:300], y[200:300]))
    err = capsys.readouterr().err
    assert "Multi-VFL: 2 data owners, 2 label owners" in err
    assert "[1/2] round 1: train loss" in err and "[2/2] round 2: train loss" in err
    assert "test accuracy" in err
    MultiVFL(**kw).fit(images[:200], y[:200])  # verbose=False, the default of every estimator
    assert capsys.readouterr().err == ""


def _state(owner) -> dict[str, np.ndarray]:
    """A data owner's bottom copies and its optimisers' state, copied (bit for bit)."""
    out = {
        f"{k}/{n}": v.detach().clone().numpy()
        for k, m in owner.copies.items()
        for n, v in m.state_dict().items()
    }
    for k, opt in owner.optims.items():
        for i, s in opt.state_dict()["state"].items():
            out.update(
                {f"{k}/opt/{i}/{n}": torch.as_tensor(v).clone().numpy() for n, v in s.items()}
            )
    return out


@pytest.mark.parametrize("batch_backward", [True, False])
def test_a_refused_request_leaves_the_data_owner_as_it_was(fmnist, batch_backward) -> None:
    """A label owner's ``forward`` request carrying a valid gradient of the previous batch but
    a bad batch index, batch size or no meta at all was refused only after the gradient had
    stepped the data owner's bottom (in the staged path, the transport ran it before the
    handler; unstaged, the handler applied it first): the refused request still moved the
    model. Now every check of the request comes first; a refused one changes nothing."""
    from dataclasses import replace

    from fedviews.errors import ProtocolError
    from fedviews.federation import InProcessTransport, build_in_process

    datas, run = _two_data_owners(fmnist)
    run = replace(run, params=replace(run.params, local_optimizer="adam"))
    fed = build_in_process(
        run, datas, transport=lambda p: InProcessTransport(p, batch_backward=batch_backward)
    )
    u, a = fed.parties["u"], fed.parties["a"]
    a.broadcast(["u"], "begin_epoch", meta={"seed": 3, "epoch": 0})
    ask = {"batch": 0, "batch_size": 16}
    acts = a.scatter("forward", {"u": {}}, meta=ask)["u"].arrays["activations"]
    g = torch.randn(acts.shape, generator=torch.Generator().manual_seed(0))
    grad = {"u": {"activation_grad": g}}
    a.scatter("forward", grad, meta={**ask, "batch": 1})  # a step: Adam has its moments
    before = _state(u)
    assert any("/opt/" in k for k in before)
    for meta, match in [
        ({"batch": 2, "batch_size": 16}, "'a' asked for batch 2 of size 16"),
        ({"batch": 0, "batch_size": 0}, "'a' asked for batch 0 of size 0"),
        ({"batch": -1, "batch_size": 16}, "'a' asked for batch -1 of size 16"),
        ({"batch": 1.0, "batch_size": 16}, "meta\\['batch'\\] must be int"),
        ({}, "meta\\['batch'\\] must be int"),
    ]:
        with pytest.raises(ProtocolError, match=match) as err:
            a.scatter("forward", grad, meta=meta)
        assert err.value.party == "a"
        after = _state(u)
        assert after.keys() == before.keys()
        for k in before:
            np.testing.assert_array_equal(after[k], before[k], err_msg=f"{meta}: {k}")
    a.scatter("backward", grad)  # the same gradient, a valid request: the model moves
    assert any(not np.array_equal(v, before[k]) for k, v in _state(u).items())
