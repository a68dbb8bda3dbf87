"""APFed-R / APFed-C, TVFL and SingleVL: equations, protocol, privacy, export, errors."""

from __future__ import annotations

import copy
import json
import math
import pickle
import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from _fusedspy import joint_calls, state_tensors  # noqa: E402
from _tamper import tampered  # noqa: E402

from fedviews.data import balanced_subsample, load, load_cifar  # noqa: E402
from fedviews.deep import _fusedstep  # noqa: E402
from fedviews.deep._apfed_nets import (  # noqa: E402
    ARCHS,
    APFedNets,
    Decoder,
    Encoder,
    as_images,
    cut_strips,
    parse_setting,
)
from fedviews.deep._export import load_active_model, predict_exported  # noqa: E402
from fedviews.deep.apfed import (  # noqa: E402
    APFED_POLICY,
    TVFL,
    ActiveClient,
    APFed,
    PassiveClient,
    SingleVL,
    contrastive_loss,
    reconstruction_loss,
)
from fedviews.deep.apfed.baselines import TVFLPassiveClient  # noqa: E402
from fedviews.deep.apfed.spec import APFedAlgorithm, apfed_policy  # noqa: E402
from fedviews.errors import (  # noqa: E402
    ConfigError,
    DataError,
    DataWarning,
    NotFittedError,
    PrivacyError,
    ProtocolError,
)
from fedviews.federation import federate, get_algorithm_spec  # noqa: E402

F = torch.nn.functional


@pytest.fixture(scope="module")
def images() -> tuple[np.ndarray, np.ndarray]:
    """96 random 28x28 images whose class shows in both halves (3 classes)."""
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(3), 32)
    X = rng.random((96, 28, 28)) * 0.3
    for c in range(3):
        X[y == c, :, 4 + 8 * c : 8 + 8 * c] += 0.7
    return X.astype(np.float32), y


def _fit_kw(**kw: object) -> dict[str, object]:
    return {"epochs": 2, "batch_size": 16, "lr": 0.01, "device": "cpu", "random_state": 3, **kw}


# -- Eq. 14 ------------------------------------------------------------------------
def test_contrastive_loss_equals_loop_over_eq14() -> None:
    g = torch.Generator().manual_seed(0)
    ha = torch.randn(5, 3, 2, 2, generator=g, dtype=torch.float64)
    hp = torch.randn(5, 3, 2, 2, generator=g, dtype=torch.float64)
    tau = 0.3
    a, p = ha.flatten(1).numpy(), hp.flatten(1).numpy()

    def s(u: np.ndarray, v: np.ndarray) -> float:
        return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))

    terms = []
    for i in range(5):
        den = sum(
            (j != i) * math.exp(s(a[i], a[j]) / tau) + math.exp(s(a[i], p[j]) / tau)
            for j in range(5)
        )
        terms.append(-math.log(math.exp(s(a[i], p[i]) / tau) / den))
    assert float(contrastive_loss(ha, hp, tau)) == pytest.approx(np.mean(terms), rel=1e-12)


# -- Eq. 9: the returned gradient and the active update ---------------------------
def _eq12(x_hat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Eq. 12 (q = 2) averaged over samples as in Eq. 7, written out sample by sample."""
    terms = [torch.sqrt(((x[i] - x_hat[i]) ** 2).sum()) for i in range(len(x))]
    return torch.stack(terms).sum() / len(x)


def test_reconstruction_loss_is_eq12_per_sample_norm() -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4, 1, 3, 5, generator=g, dtype=torch.float64)
    x_hat = torch.rand(4, 1, 3, 5, generator=g, dtype=torch.float64)
    norms = [np.linalg.norm((x[i] - x_hat[i]).numpy().ravel()) for i in range(4)]
    assert float(reconstruction_loss(x_hat, x)) == pytest.approx(np.mean(norms), rel=1e-12)
    assert float(reconstruction_loss(x_hat, x, "mse")) == pytest.approx(
        float(((x - x_hat) ** 2).mean()), rel=1e-12
    )


@pytest.mark.parametrize(("variant", "recon"), [("R", "l2"), ("R", "mse"), ("C", "l2")])
def test_split_gradients_equal_unsplit_autograd(
    images: tuple[np.ndarray, np.ndarray], variant: str, recon: str
) -> None:
    X, y = images
    views = cut_strips(X[:, None], 2)
    nets, lam = APFedNets("table3"), 0.7
    rep = ARCHS["table3"].out_shape(*views[1].shape[2:])
    kw = {"seed": 5, "tau": 0.4, "lr": 0.01, "recon_loss": recon}
    passive = PassiveClient("passive2", views[1], variant, nets, rep, **kw)
    active = ActiveClient(
        views[0], y, 3, nets, passives=["passive2"], lams=[lam], seed=4, batch_size=16
    )
    federate([active, passive], APFED_POLICY)
    a_net, p_net = copy.deepcopy(active.net), copy.deepcopy(passive.net)
    active.send("passive2", "apfed.epoch", meta={"shuffle_seed": 11, "batch_size": 16})
    idx = passive._order[0]

    # unsplit model: L = L_A + λ L_p with every parameter in one graph
    x_a, x_p = torch.as_tensor(views[0][idx]), torch.as_tensor(views[1][idx])
    h = a_net.encoder(x_a)
    l_a = F.cross_entropy(a_net.head(h), torch.as_tensor(y[idx]))
    if variant == "C":
        l_p = contrastive_loss(h, p_net(x_p), 0.4)
    else:
        l_p = _eq12(p_net(h), x_p) if recon == "l2" else F.mse_loss(p_net(h), x_p)
    (grad_h,) = torch.autograd.grad(lam * l_p, h, retain_graph=True)
    (l_a + lam * l_p).backward()

    # split: the passive's reply to h_A is λ ∂L_p/∂h_A ...
    reply = active.send(
        "passive2",
        "apfed.forward",
        arrays={"h_A": h.detach().numpy()},
        meta={"batch": 0, "lam": lam},
    )
    np.testing.assert_allclose(reply.arrays["grad_h_A"], grad_h.numpy(), rtol=1e-5, atol=1e-7)

    # ... and one full protocol step gives the active encoder the unsplit gradient
    active2 = ActiveClient(
        views[0], y, 3, nets, passives=["passive2"], lams=[lam], seed=4, batch_size=16
    )
    passive2 = PassiveClient("passive2", views[1], variant, nets, rep, **kw)
    federate([active2, passive2], APFED_POLICY)
    active2.send("passive2", "apfed.epoch", meta={"shuffle_seed": 11, "batch_size": 16})
    active2._step(0, 0, idx, 0)
    for (name, p_split), p_full in zip(
        active2.net.named_parameters(), a_net.parameters(), strict=True
    ):
        np.testing.assert_allclose(
            p_split.grad.numpy(), p_full.grad.numpy(), rtol=1e-4, atol=1e-6, err_msg=name
        )


# -- λ = 0 is SingleVL ---------------------------------------------------------------
@pytest.mark.parametrize("variant", ["R", "C"])
def test_lambda_zero_reproduces_singlevl_exactly(
    images: tuple[np.ndarray, np.ndarray], variant: str
) -> None:
    X, y = images
    apf = APFed(variant=variant, m=2, i=2, lam=0.0, **_fit_kw()).fit(X, y)
    single = SingleVL(m=2, i=2, **_fit_kw()).fit(X, y)
    sa, sb = apf.active_.net.state_dict(), single.active_.net.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    np.testing.assert_array_equal(apf.predict_proba(X), single.predict_proba(X))
    assert apf.history_ == single.history_
    # the passive client did take part (and learned), but its gradient was zero
    assert apf.transport_.log.arrays_sent("active", "passive1") == {"h_A"}
    with_lam = APFed(variant=variant, m=2, i=2, lam=1.0, **_fit_kw()).fit(X, y)
    assert not torch.equal(with_lam.active_.net.head.fc2.weight, sb["head.fc2.weight"])


# -- the optimiser step ----------------------------------------------------------------
@pytest.mark.parametrize("method", ["R", "C", "TVFL"])
def test_every_party_takes_the_multi_tensor_step_equal_to_its_own_step(
    images: tuple[np.ndarray, np.ndarray], method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every party of APFed-R, APFed-C and TVFL steps by the multi-tensor path of
    ``deep/_fusedstep.py`` after its first batch (whose ``step()`` creates the momentum
    buffers), and ends bit for bit as with every optimiser's own ``step()``."""
    X, y = images

    def fit() -> tuple[Any, list[Any]]:
        kw = _fit_kw(lam=1.0) if method != "TVFL" else _fit_kw()
        est = TVFL(m=2, i=1, **kw) if method == "TVFL" else APFed(variant=method, m=2, i=1, **kw)
        return est.fit(X, y), [p.opt for p in (est.active_, *est.passives_)]

    calls = joint_calls(monkeypatch)
    fused, opts = fit()
    n_active, n_passive = (len(opt.param_groups[0]["params"]) for opt in opts)
    # every batch but the first (2 epochs of 6); TVFL's active party steps before it sends
    # the passive party its gradient, APFed's after the passive party's reply
    per_batch = [n_active, n_passive] if method == "TVFL" else [n_passive, n_active]
    assert calls == per_batch * (2 * 6 - 1)
    calls.clear()
    monkeypatch.setattr(_fusedstep, "_parts", lambda opt: None)  # every optimiser its step()
    own, own_opts = fit()
    assert calls == []
    assert fused.history_ == own.history_
    np.testing.assert_array_equal(fused.predict_proba(X), own.predict_proba(X))
    tensors = zip(state_tensors(opts), state_tensors(own_opts), strict=True)
    assert all(torch.equal(a, b) for a, b in tensors)


# -- privacy --------------------------------------------------------------------------
def test_only_representations_and_their_gradients_cross(
    images: tuple[np.ndarray, np.ndarray],
) -> None:
    X, y = images
    est = APFed(variant="R", m=3, i=2, lam=1.0, pad=True, **_fit_kw(epochs=1)).fit(X, y)
    log = est.transport_.log
    assert log.crossings() == {
        "active -> passive1": ["h_A"],
        "active -> passive3": ["h_A"],
        "passive1 -> active": ["grad_h_A"],
        "passive3 -> active": ["grad_h_A"],
    }
    # epoch + 6 batches, request + reply, between the active client and each passive one ...
    between = [e for e in log.entries if "coordinator" not in (e.sender, e.receiver)]
    assert len(between) == 2 * 2 * (1 + 6)
    # ... and the driver's (the deployed protocol): apfed.train to the active client,
    # apfed.epoch_done to each passive client, request + reply
    assert est.message_log_["messages"] == 2 * 2 * (1 + 6) + 2 * (1 + 2)
    passive = est.passives_[0]
    with pytest.raises(PrivacyError):
        passive.send("active", "leak", arrays={"x_p": np.zeros(3)})
    with pytest.raises(PrivacyError):
        est.active_.send("passive1", "leak", arrays={"y": y})
    tv = TVFL(m=2, i=1, **_fit_kw(epochs=1)).fit(X, y)
    assert tv.transport_.log.crossings() == {
        "active -> passive2": ["grad_h_p"],
        "passive2 -> active": ["h_p"],
    }


def test_estimators_run_the_registered_spec(images: tuple[np.ndarray, np.ndarray]) -> None:
    """fit builds every client from its own strip with the "apfed" spec, driver included."""
    X, y = images
    est = APFed(variant="C", m=2, i=2, lam=[0.5], **_fit_kw(epochs=1)).fit(X, y)
    roles = est.transport_.roles
    assert roles == {"coordinator": "coordinator", "active": "active", "passive1": "passive"}
    spec = get_algorithm_spec("apfed")
    assert isinstance(spec, APFedAlgorithm) and spec.peer_to_peer
    assert est.transport_.policy == apfed_policy(1) == APFED_POLICY
    kinds = {(roles[e.sender], roles[e.receiver], e.kind) for e in est.transport_.log.entries}
    assert {k for k in kinds if not k[2].endswith(":reply")} == {
        ("coordinator", "active", "apfed.train"),
        ("coordinator", "passive", "apfed.epoch_done"),
        ("active", "passive", "apfed.epoch"),
        ("active", "passive", "apfed.forward"),
    }
    single = SingleVL(m=2, i=2, **_fit_kw(epochs=1)).fit(X, y)
    assert single.transport_.policy == apfed_policy(0)
    assert single.transport_.log.crossings() == {}
    assert single.run_stats_["messages"] == 2  # apfed.train and its reply


# -- inferring solely: the export ----------------------------------------------------------
def test_export_predicts_like_the_trained_active_model(
    images: tuple[np.ndarray, np.ndarray], tmp_path
) -> None:
    X, y = images
    est = APFed(variant="C", m=3, i=3, lam=1.0, pad=True, **_fit_kw(epochs=1)).fit(X, y + 10)
    expected = est.predict(X)
    proba = est.predict_proba(X)
    folder = est.export(tmp_path / "model", torchscript=True)
    del est  # no passive client (nor the estimator) exists any more
    model = load_active_model(folder)
    np.testing.assert_array_equal(model.predict(X), expected)
    np.testing.assert_allclose(model.predict_proba(X), proba, rtol=0, atol=0)
    assert set(expected) <= {10, 11, 12}
    strip = cut_strips(X[:, None], 3, pad=True)[2]
    np.testing.assert_array_equal(model.predict(strip), expected)  # active strips only
    np.save(tmp_path / "new.npy", X)
    np.testing.assert_array_equal(predict_exported(folder, tmp_path / "new.npy"), expected)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        scripted = torch.jit.load(str(folder / "active_model.ts"))
    np.testing.assert_allclose(
        scripted(torch.as_tensor(strip)).detach().numpy(), model.logits(strip), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(DataError, match="fits neither"):
        model.predict(X[:, :20])
    with pytest.raises(DataError, match="not an exported"):
        load_active_model(tmp_path)
    (tmp_path / "new.csv").write_text("1,2\n")
    with pytest.raises(DataError, match="new.csv: not a .npy file"):
        predict_exported(folder, tmp_path / "new.csv")  # (it said "pickled (object) data")
    # a factory that does not import is the user's to fix: its ConfigError, not "damaged"
    meta = json.loads((folder / "model.json").read_text())
    (folder / "model.json").write_text(
        json.dumps({**meta, "networks": {"head": "no_such_module_zz:head"}})
    )
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_zz'"):
        load_active_model(folder)


# -- TVFL baselines ----------------------------------------------------------------------
def test_tvfl_fills(images: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = images
    tv = TVFL(m=2, i=1, **_fit_kw()).fit(X, y)
    # TVFL-A (APFed Sec. 5.2): the average of the *active* client's representations
    strip = tv._active_strip(X)
    with torch.no_grad():
        h_a = tv.active_.encoder.eval()(torch.as_tensor(strip, dtype=torch.float32))
    mean = tv.active_.active_mean
    assert tuple(mean.shape) == (64, 6, 20)
    torch.testing.assert_close(mean, h_a.mean(0), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        alone = tv.active_.logits_alone(torch.as_tensor(strip[:5]), "mean", None)
        direct = tv.active_.head(
            torch.cat([h_a[:5].flatten(1), h_a.mean(0).expand(5, -1, -1, -1).flatten(1)], 1)
        )
    torch.testing.assert_close(alone, direct, rtol=1e-5, atol=1e-5)
    kinds = {e.kind for e in tv.transport_.log.entries}
    assert "tvfl.represent" not in kinds  # the fill needs no message
    preds = {f: tv.predict(X, f) for f in ("zero", "mean", "random")}
    np.testing.assert_array_equal(tv.predict(X, "random"), preds["random"])  # seeded noise
    assert all(set(p) <= {0, 1, 2} for p in preds.values())
    with pytest.raises(ConfigError, match="fill"):
        tv.predict(X, "median")


def test_tvfl_is_one_round_trip_per_batch(images: tuple[np.ndarray, np.ndarray]) -> None:
    """TVFL's passive client gets, per epoch of B batches, B ``tvfl.forward`` requests, every
    one but the first with the gradient of the batch before (``grad_h_p``), and the epoch's
    last gradient alone in one ``tvfl.backward``."""
    X, y = images
    tv = TVFL(m=2, i=1, **_fit_kw()).fit(X, y)
    to_passive = [
        (e.kind, e.arrays, e.shapes) for e in tv.transport_.log.entries if e.receiver != "active"
    ]
    grad = (("grad_h_p",), ((16, 64, 6, 20),))  # 96 rows by 16: 6 batches
    epoch = [("tvfl.epoch", (), ()), ("tvfl.forward", (), ())]
    epoch += [("tvfl.forward", *grad)] * 5 + [("tvfl.backward", *grad)]
    assert to_passive == epoch * 2


# -- errors ----------------------------------------------------------------------------------
def test_clear_errors(images: tuple[np.ndarray, np.ndarray]) -> None:
    X, y = images
    with pytest.raises(ConfigError, match="1 <= i <= m"):
        APFed(m=2, i=3).fit(X, y)
    with pytest.raises(ConfigError, match="1 <= i <= m"):
        parse_setting("3-4")
    with pytest.raises(DataError, match="cannot be cut into 3 equal strips"):
        APFed(m=3, i=1).fit(X, y)
    with pytest.raises(DataError, match="cannot be cut"):
        SingleVL(m=3, i=1).fit(X, y)
    with pytest.raises(ConfigError, match=">= 0"):
        APFed(lam=-0.5).fit(X, y)
    with pytest.raises(ConfigError, match="2 passive"):
        APFed(m=3, lam=[1.0]).fit(X, y)
    with pytest.raises(ConfigError, match="variant"):
        APFed(variant="X").fit(X, y)
    with pytest.raises(NotFittedError, match="not fitted"):
        APFed().predict(X)
    fitted = SingleVL(**_fit_kw(epochs=1)).fit(X, y)
    with pytest.raises(DataError, match="was fit on"):
        fitted.predict(X[:, :26])


def test_cut_strips_padding_and_table4_small_strips() -> None:
    X = np.arange(2 * 28 * 4, dtype=np.float32).reshape(2, 1, 28, 4)
    strips = cut_strips(X, 3, pad=True)
    assert [s.shape for s in strips] == [(2, 1, 10, 4)] * 3
    np.testing.assert_array_equal(np.concatenate(strips, axis=2)[:, :, :28], X)
    assert not strips[2][:, :, 8:].any()
    # CIFAR 3-x: 11-row strips are padded inside the encoder, decoder output cropped back
    spec = ARCHS["table4"]
    x = torch.zeros(2, 3, 11, 32)
    h = Encoder(spec, (11, 32))(x)
    assert tuple(h.shape) == (2, 64, 1, 21)
    assert tuple(Decoder(spec, (11, 32))(h).shape) == (2, 3, 11, 32)


def test_cifar_shaped_images_train_with_table4() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((24, 3, 32, 32)).astype(np.float32)
    y = np.arange(24) % 4
    est = APFed(variant="R", m=3, i=1, pad=True, **_fit_kw(epochs=1, batch_size=8)).fit(X, y)
    assert est.spec_.name == "table4" and est.strip_hw_ == (11, 32)
    assert est.predict(X).shape == (24,)


# -- CIFAR loader -----------------------------------------------------------------------------
def _write_batch(path, n: int, key: bytes, seed: int) -> None:
    rng = np.random.default_rng(seed)
    batch = {
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        key: list(rng.integers(0, 10, n)),
    }
    with path.open("wb") as fh:
        pickle.dump(batch, fh)


def test_cifar_loader_reads_python_batches(tmp_path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for k in range(1, 6):
        _write_batch(folder / f"data_batch_{k}", 3, b"labels", k)
    _write_batch(folder / "test_batch", 2, b"labels", 9)
    Xtr, ytr = load_cifar(tmp_path, "cifar10", "train")  # parent folder works
    Xte, yte = load_cifar(folder, "cifar10", "test")  # and the folder itself
    assert Xtr.shape == (15, 3, 32, 32) and Xtr.dtype == np.float32 and ytr.shape == (15,)
    assert Xte.shape == (2, 3, 32, 32) and 0 <= Xte.min() and Xte.max() <= 1
    with (folder / "test_batch").open("rb") as fh:
        raw = pickle.load(fh, encoding="bytes")
    np.testing.assert_allclose(
        Xte[1, 2, 0, :4] * 255, raw[b"data"][1, 2048:2052]
    )  # channels-first layout
    c100 = tmp_path / "cifar-100-python"
    c100.mkdir()
    _write_batch(c100 / "train", 4, b"fine_labels", 1)
    with pytest.raises(DataError, match="missing"):
        load_cifar(tmp_path, "cifar100", "test")
    assert load_cifar(tmp_path, "cifar100", "train")[0].shape == (4, 3, 32, 32)
    with pytest.raises(DataError, match="coarse_labels"):
        load_cifar(tmp_path, "cifar100", "train", label="coarse")
    with pytest.raises(DataError, match="kriz/cifar"):
        load_cifar(tmp_path / "nowhere", "cifar10")


# -- GPU ---------------------------------------------------------------------------------------
@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_training_and_cpu_export(images: tuple[np.ndarray, np.ndarray], tmp_path) -> None:
    X, y = images
    est = APFed(variant="C", m=2, i=1, **_fit_kw(device="cuda")).fit(X, y)
    assert next(est.active_.net.parameters()).is_cuda
    model = load_active_model(est.export(tmp_path / "m"), device="cpu")
    np.testing.assert_allclose(model.predict_proba(X), est.predict_proba(X), atol=1e-4)


def test_the_active_party_checks_what_passive_parties_send(
    images: tuple[np.ndarray, np.ndarray],
) -> None:
    """A dishonest passive party's misshapen gradient is named, not crashed on."""
    from fedviews.errors import ProtocolError
    from fedviews.federation import InProcessTransport

    def dishonest(policy):  # a transport whose passive party answers with half a gradient
        t = InProcessTransport(policy)
        register = t.register

        def with_a_liar(party):
            if party.role == "passive":
                honest = party._on_forward

                def forward(msg):
                    grad = honest(msg).arrays["grad_h_A"]
                    return party.reply(msg, arrays={"grad_h_A": grad[1:]})

                party._on_forward = forward
            register(party)

        t.register = with_a_liar  # type: ignore[method-assign]
        return t

    X, y = images
    with pytest.raises(ProtocolError, match="'passive2' sent 'grad_h_A' of shape"):
        APFed(variant="R", m=2, i=1, transport=dishonest, **_fit_kw(epochs=1)).fit(X, y)


def test_a_tampered_cifar_batch_cannot_run_code(tmp_path) -> None:
    import os
    import pickle

    class Evil:
        def __reduce__(self):  # what a malicious pickle would run on load
            return (os.remove, (str(tmp_path / "canary"),))

    (tmp_path / "canary").write_text("alive")
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    (folder / "data_batch_1").write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(DataError, match="refusing to load"):
        load_cifar(tmp_path)
    assert (tmp_path / "canary").read_text() == "alive"


def test_lossy_wire_encodings_of_h_a_and_its_gradient(
    images: tuple[np.ndarray, np.ndarray],
) -> None:
    """Opt-in codecs: the policy admits exactly their arrays, fewer bytes cross, and the active
    party still learns (its training loss falls)."""
    X, y = images
    exact = APFed(variant="R", m=2, i=1, **_fit_kw()).fit(X, y)
    lossy = APFed(
        variant="R", m=2, i=1, wire_activations="int8", wire_gradients="topk", topk_ratio=0.25,
        **_fit_kw(),
    ).fit(X, y)  # fmt: skip
    assert lossy.transport_.log.crossings() == {
        "active -> passive2": ["h_A", "h_A.scale"],
        "passive2 -> active": ["grad_h_A", "grad_h_A.idx"],
    }
    assert lossy.message_log_["total_bytes"] < 0.6 * exact.message_log_["total_bytes"]
    assert lossy.history_[-1] < lossy.history_[0]  # the active party's epoch losses
    with pytest.raises(ConfigError, match="top-k is for the returned gradients"):
        APFed(wire_activations="topk", **_fit_kw()).fit(X, y)


def test_uint8_images_are_scaled_as_a_deployed_party_scales_them(
    images: tuple[np.ndarray, np.ndarray],
) -> None:
    """The estimator takes raw uint8 pixels like a deployed party's strips: as ``X / 255``."""
    X, y = images
    pixels = np.round(X * 255).astype(np.uint8)
    a = APFed(variant="R", m=2, i=1, **_fit_kw(epochs=1)).fit(pixels, y)
    b = APFed(variant="R", m=2, i=1, **_fit_kw(epochs=1)).fit(pixels / np.float32(255), y)
    np.testing.assert_allclose(a.history_, b.history_, rtol=1e-5)
    np.testing.assert_array_equal(a.predict(pixels), b.predict(pixels / np.float32(255)))


def test_set_params_after_fit_does_not_recut_the_active_strip(tmp_path) -> None:
    """The network of a fit belongs to its strip: ``set_params(i=...)`` must not feed another
    strip to it in predict or describe another one in the export (real MNIST digits)."""
    ds = load("mnist")
    idx = np.random.default_rng(0).permutation(balanced_subsample(ds.y, 12, random_state=0))
    X, y = ds.images[idx], ds.y[idx]
    for est in (SingleVL(m=2, i=1, **_fit_kw(lr=0.05)), TVFL(m=2, i=1, **_fit_kw(lr=0.05))):
        est.fit(X, y)
        logits = est._logits(X[:, None, :14].astype(np.float32) / 255)  # strip 1, by hand
        expected = est.classes_[np.argmax(logits, axis=1)]
        np.testing.assert_array_equal(est.predict(X), expected)
        est.set_params(i=2, pad=True)
        np.testing.assert_array_equal(est.predict(X), expected)
        assert est.setting_ == (2, 1, False)
    single = SingleVL(m=2, i=1, **_fit_kw(lr=0.05)).fit(X, y).set_params(i=2)
    folder = single.export(tmp_path)
    assert json.loads((folder / "model.json").read_text())["i"] == 1
    np.testing.assert_array_equal(load_active_model(folder).predict(X), single.predict(X))


@pytest.fixture(scope="module")
def fashion() -> tuple[np.ndarray, np.ndarray]:
    """40 Fashion-MNIST test images (4 per class)."""
    ds = load("fashion_mnist", subset="test")
    idx = balanced_subsample(ds.y, 4, random_state=0)
    return ds.images[idx], ds.y[idx]


def test_score_needs_one_label_per_image(fashion: tuple[np.ndarray, np.ndarray]) -> None:
    """Before: one label broadcast against every prediction (a silent score), five a raw
    numpy broadcasting error."""
    X, y = fashion
    for est in (SingleVL(**_fit_kw(epochs=1)), TVFL(**_fit_kw(epochs=1))):
        est.fit(X, y)
        assert est.score(X, y) == np.mean(est.predict(X) == y)
        for bad in (y[:1], y[:5]):
            with pytest.raises(DataError, match="one label per sample"):
                est.score(X, bad)


def test_tvfl_random_fill_with_random_state_none(fashion: tuple[np.ndarray, np.ndarray]) -> None:
    """Before: predict raised a raw TypeError from int(None); now the fill seed is drawn at fit
    (the same for every predict of that fit) and is ``random_state`` where one is given."""
    X, y = fashion
    est = TVFL(fill="random", **_fit_kw(epochs=1, random_state=None)).fit(X, y)
    np.testing.assert_array_equal(est.predict(X), est.predict(X))
    seeded = TVFL(fill="random", **_fit_kw(epochs=1)).fit(X, y)
    assert seeded.fill_seed_ == 3


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("epochs", "abc"),
        ("epochs", None),
        ("batch_size", float("nan")),
        ("m", None),
        ("i", True),
        ("lr", "abc"),
        ("lr", float("inf")),  # before: accepted, the loss became NaN
        ("momentum", None),
        ("weight_decay", True),  # before: a raw RuntimeError from torch
        ("tau", "abc"),
    ],
)
def test_mistyped_parameters_are_config_errors(
    fashion: tuple[np.ndarray, np.ndarray], name: str, value: object
) -> None:
    X, y = fashion
    expect = "active strip i" if name == "i" else name
    with pytest.raises(ConfigError, match=expect):
        APFed(**{**_fit_kw(epochs=1), name: value}).fit(X, y)


@pytest.mark.parametrize(
    ("party", "name", "bad", "make"),
    [
        (PassiveClient, "grad_h_A", np.nan, lambda: APFed(variant="R", m=2, i=2, lam=1.0)),
        (TVFLPassiveClient, "h_p", np.inf, lambda: TVFL(m=2, i=1)),
        (TVFLPassiveClient, "h_p", "int64", lambda: TVFL(m=2, i=1)),
    ],
)
def test_the_active_refuses_nan_or_non_float_arrays(images, monkeypatch, party, name, bad, make):
    """A passive client's NaN grad_h_A made the APFed active model NaN without an error (its
    prediction alone then constant); a TVFL passive's infinite h_p the head NaN, and int64 h_p
    raised torch's raw RuntimeError ('only Tensors of floating point dtype can require
    gradients'). Each is now a ProtocolError naming the passive client."""
    X, y = images
    honest = party.reply

    def reply(self, msg, arrays=None, meta=None, **kw):
        arrays = dict(arrays or {})
        if name in arrays:
            arrays[name] = tampered(arrays[name], bad)
        return honest(self, msg, arrays, meta, **kw)

    monkeypatch.setattr(party, "reply", reply)
    est = make().set_params(**_fit_kw(epochs=1))
    with pytest.raises(ProtocolError, match=f"'passive.' sent '{name}' (with NaN|as int64)"):
        est.fit(X, y)


def _rce() -> None:  # pragma: no cover - what a tampered pickle would call
    raise AssertionError("a tampered model file ran code")


class _Payload:
    def __reduce__(self) -> tuple[object, tuple[()]]:
        return (_rce, ())


@pytest.mark.filterwarnings("ignore:Detected pickle protocol:UserWarning")  # torch, on the forgery
@pytest.mark.parametrize("tamper", ["code", "garbage", "truncated", "other-weights"])
def test_a_tampered_export_is_a_data_error_naming_the_file(images, tmp_path, tamper) -> None:
    """`fedviews apfed predict` on a tampered active_model.pt was an UnpicklingError
    traceback (weights_only refused the pickle, nothing ran): now one error line naming
    the file, from the library a DataError."""
    import subprocess
    import sys

    X, y = images
    folder = SingleVL(m=2, i=2, **_fit_kw(epochs=1)).fit(X[:40], y[:40]).export(tmp_path / "m")
    state = folder / "active_model.pt"
    if tamper == "code":
        state.write_bytes(pickle.dumps({"w": _Payload()}))
    elif tamper == "garbage":
        state.write_bytes(b"\x80\x04not a model at all")
    elif tamper == "truncated":
        state.write_bytes(state.read_bytes()[:100])
    else:
        torch.save({"w": torch.zeros(3)}, state)
    with pytest.raises(DataError, match="active_model.pt is not the weights"):
        load_active_model(folder)
    np.save(tmp_path / "x.npy", X[:4])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedviews",
            "apfed",
            "predict",
            str(folder),
            str(tmp_path / "x.npy"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out, out
    assert "active_model.pt is not the weights" in " ".join(out.split()), out
    # one line, without torch's warning nor its advice to load the file unsafely
    assert "weights_only" not in out and "Warning" not in out, out


def test_a_damaged_model_description_is_a_data_error(images, tmp_path) -> None:
    X, y = images
    folder = SingleVL(m=2, i=2, **_fit_kw(epochs=1)).fit(X[:40], y[:40]).export(tmp_path / "m")
    meta = folder / "model.json"
    for text, match in [("{not json", "not a JSON"), ("[1, 2]", "unknown format")]:
        meta.write_text(text)
        with pytest.raises(DataError, match=match):
            load_active_model(folder)


# -- user networks on images of any channels ---------------------------------------------------
def _two_channel_encoder(input_shape: tuple[int, ...]) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(input_shape[0], 4, 3, padding=1), torch.nn.ReLU())


def _two_channel_head(input_shape: tuple[int, ...], n_classes: int) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Flatten(), torch.nn.Linear(math.prod(input_shape), n_classes)
    )


def _two_channel_decoder(
    input_shape: tuple[int, ...], output_shape: tuple[int, ...]
) -> torch.nn.Module:
    return torch.nn.Conv2d(input_shape[0], output_shape[0], 3, padding=1)


def test_user_networks_take_images_the_paper_has_no_network_for() -> None:
    """2-channel images: the paper's Tables 3/4 have no network for them, the user's do. With
    every network of the fit the user's (APFed-R: encoder, head, decoder; APFed-C and
    SingleVL: encoder, head), the estimators train, predict and pickle; a network left
    to the paper is still refused, naming the channels."""
    rng = np.random.default_rng(0)
    X = rng.random((24, 2, 8, 6)).astype(np.float32)
    y = np.arange(24) % 3
    nets = {"encoder": _two_channel_encoder, "head": _two_channel_head}
    kw = _fit_kw(epochs=1, batch_size=8)
    fitted = [
        APFed(variant="R", decoder=_two_channel_decoder, **nets, **kw).fit(X, y),
        APFed(variant="C", **nets, **kw).fit(X, y),
        SingleVL(**nets, **kw).fit(X, y),
    ]
    for est in fitted:
        assert est.spec_ is None and est.image_shape_ == (2, 8, 6)
        expected = est.predict_proba(X)
        assert expected.shape == (24, 3)
        twin = pickle.loads(pickle.dumps(est))
        np.testing.assert_array_equal(twin.predict_proba(X), expected)
    for est in (APFed(variant="R", **nets, **kw), APFed(encoder=_two_channel_encoder, **kw)):
        with pytest.raises(
            ConfigError, match="no APFed network for 2-channel images.*give your own networks"
        ):
            est.fit(X, y)


def test_float_images_in_0_to_255_are_used_as_given_with_a_warning():
    """Only uint8 pixels are scaled to [0, 1]: ``images.astype(np.float32)`` of raw pixels
    made APFed-R diverge (loss 6.5e10) with no word. Now a DataWarning says so; uint8 pixels,
    scaled floats and standardised features pass silently."""
    raw = np.random.default_rng(0).integers(0, 256, size=(4, 6, 6))
    with pytest.warns(DataWarning, match="whole values from 0 to 255, as raw 0..255 pixels"):
        got = as_images(raw.astype(np.float32))
    assert got.max() > 1  # (used as given)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataWarning)
        assert as_images(raw.astype(np.uint8)).max() <= 1.0
        as_images(raw / 255.0)
        as_images(raw - 127.5)  # standardised: negative values
        as_images(raw + 0.5)  # not whole values


def test_apfed_takes_a_defense_and_reports_its_ledger(images) -> None:
    """``defense=`` of the APFed estimator (the defenses page offered ``label_rr``; the
    estimator refused the keyword): the active client's labels randomized, ε in the ledger."""
    X, y = images
    est = APFed(m=2, i=1, defense={"kind": "label_rr", "epsilon": 2.0}, **_fit_kw(epochs=1))
    est.fit(X, y)
    assert est.privacy_["parties"]["active"]["epsilon"] == pytest.approx(2.0)
    with pytest.raises(ConfigError, match="defense 'secagg' does not apply to apfed"):
        APFed(m=2, i=1, defense="secagg", **_fit_kw(epochs=1)).fit(X, y)
