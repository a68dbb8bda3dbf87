"""Files aligned outside the run (``alignment = "none"``): a party in several alignment groups
(a Multi-VFL data owner with several label owners) tags its rows with their group.

The deployed session in one process (:class:`InProcessTransport`, the PSI included) on the
raw demo files against the same session without the PSI on the files that
``write_demo_data(aligned=True)`` writes (``fedviews flower launch``'s): equal models and
history. Members of a group that hold as many samples but other IDs are refused by name
(they were aligned wrongly without a word before), and so is a tag of a group a party is
not in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from _protocol import in_process_session  # noqa: E402

from fedviews.data import PartyData  # noqa: E402
from fedviews.deploy import (  # noqa: E402
    load_deploy_config,
    load_party_data,
    save_party_data,
    write_demo_data,
)
from fedviews.deploy._session import DeployParty  # noqa: E402
from fedviews.errors import DataError  # noqa: E402
from fedviews.federation import InProcessTransport, get_algorithm_spec  # noqa: E402
from fedviews.federation._setup import set_up_members  # noqa: E402

CONFIG = """
algorithm = "multivfl"
name = "tags_multivfl_test"
seed = 3
[federation]
parties = ["top", "bottom", "bank", "clinic"]
label_owners = ["bank", "clinic"]
alignment = "{alignment}"
[data]
dataset = "mnist"
n_per_class = 6
n_test = 20
scenario = "iid"
samples_per_owner = 12
overlap = 1.0
[params]
rounds = 2
batch_size = 8
channels = 4
top_channels = 4
hidden = 8
device = "cpu"
"""
PARTIES = ("top", "bottom", "bank", "clinic")


def _config(root: Path, alignment: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"deploy_{alignment}.toml"
    path.write_text(CONFIG.format(alignment=alignment))
    return path


def _session(path: Path, data: Path, out: Path) -> tuple[dict, InProcessTransport]:
    """The deployed session of config ``path`` on the files in ``data``, in one process:
    the coordinator's results and the transport."""
    _, res, transport = in_process_session(path, data, out)
    return res, transport


def _outputs(out: Path) -> dict[str, dict[str, np.ndarray]]:
    got = {}
    for p in PARTIES:
        with np.load(out / p / "result.npz") as z:
            got[p] = {k: z[k] for k in z.files}
    return got


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The raw demo files (the data owners hold the samples of both label owners, in their
    own order) and the pre-aligned ones; the PSI session on the raw files."""
    root = tmp_path_factory.mktemp("tags")
    psi = _config(root, "psi")
    cfg = load_deploy_config(psi)
    write_demo_data(cfg, root / "raw")
    write_demo_data(cfg, root / "aligned", aligned=True)
    ref, _ = _session(psi, root / "raw", root / "ref")
    return root, ref


def test_aligned_files_tag_the_data_owners_rows(files):
    """Each label owner's 12 samples keep their order; a data owner holds both groups' rows,
    each tagged with its label owner, its features those of the raw file's row of that ID;
    the label owners, in one group each, carry no tags."""
    root, _ = files
    raw = {p: load_party_data(root / "raw" / f"{p}.npz") for p in PARTIES}
    got = {p: load_party_data(root / "aligned" / f"{p}.npz") for p in PARTIES}
    for lo in ("bank", "clinic"):
        assert got[lo].group is None
        np.testing.assert_array_equal(got[lo].ids, raw[lo].ids)
    for do in ("top", "bottom"):
        d = got[do]
        assert d.group is not None and len(d.ids) == 24
        for lo in ("bank", "clinic"):
            np.testing.assert_array_equal(d.ids[d.group == lo], raw[lo].ids)
        where = {v: i for i, v in enumerate(raw[do].ids.tolist())}
        np.testing.assert_array_equal(d.X, raw[do].X[[where[v] for v in d.ids.tolist()]])
        np.testing.assert_array_equal(d.X_test, raw[do].X_test)


@pytest.mark.parametrize("alignment", ["none", "psi"])
def test_tagged_files_train_what_the_psi_trains(files, alignment):
    """Without the PSI (the members sort their IDs) or with it (a data owner offers each
    label owner only the rows tagged with its name), the tagged files train the models and
    history of the PSI on the raw files, bit for bit."""
    root, ref = files
    out = root / f"run_{alignment}"
    res, transport = _session(_config(root, alignment), root / "aligned", out)
    assert res["history"]["train_loss"] == ref["history"]["train_loss"]
    assert res["history"]["accuracy"] == ref["history"]["accuracy"]
    got, want = _outputs(out), _outputs(root / "ref")
    for p in PARTIES:
        assert sorted(got[p]) == sorted(want[p])
        for k, v in want[p].items():
            np.testing.assert_array_equal(got[p][k], v, err_msg=f"{p}: {k}")
    psi = [kind for _, _, kind, _ in transport.log.exchanges() if kind.startswith("psi:")]
    assert bool(psi) == (alignment == "psi")


def test_untagged_data_owners_without_the_psi_are_refused(files, tmp_path):
    """Untagged, a data owner offers both label owners all its 24 rows: the group sizes
    differ and the coordinator says so, with the hint."""
    root, _ = files
    data = tmp_path / "data"
    for p in PARTIES:
        d = load_party_data(root / "aligned" / f"{p}.npz")
        save_party_data(data / f"{p}.npz", PartyData(**{**d.arrays(), "group": None}))
    with pytest.raises(DataError, match=r"group 'bank' hold different numbers.*same IDs"):
        _session(_config(tmp_path, "none"), data, tmp_path / "out")


def test_as_many_samples_but_other_ids_are_refused(files, tmp_path):
    """A data owner whose rows of bank's group have one ID bank does not hold (as many
    samples, so the sizes agree): refused at setup, naming the group and who agrees with
    whom. Before, sorting the IDs aligned other samples' rows without a word."""
    root, _ = files
    data = tmp_path / "data"
    for p in PARTIES:
        d = load_party_data(root / "aligned" / f"{p}.npz")
        if p == "bottom":
            ids = d.ids.copy()
            ids[np.flatnonzero(d.group == "bank")[0]] = 10**9  # no one else's sample
            d = PartyData(**{**d.arrays(), "ids": ids})
        save_party_data(data / f"{p}.npz", d)
    msg = r"group 'bank' hold as many samples but not the same IDs.*top, bank; bottom"
    with pytest.raises(DataError, match=msg):
        _session(_config(tmp_path, "none"), data, tmp_path / "out")


def test_a_tag_of_a_group_the_party_is_not_in_is_refused(files, tmp_path):
    root, _ = files
    cfg = load_deploy_config(_config(tmp_path, "none"))
    d = load_party_data(root / "aligned" / "top.npz")
    group = d.group.copy()
    group[0] = "nobody"
    bad = PartyData(**{**d.arrays(), "group": group})
    with pytest.raises(DataError, match=r"'top' tags rows with the groups \['nobody'\]"):
        DeployParty(cfg, "top", bad, tmp_path / "top", lambda _: None)
    # the same check in one process (the clear alignment of the estimators and experiments)
    datas = {p: load_party_data(root / "aligned" / f"{p}.npz") for p in PARTIES}
    with pytest.raises(DataError, match=r"'top' tags rows with the groups \['nobody'\]"):
        set_up_members(get_algorithm_spec("multivfl"), cfg, {**datas, "top": bad})


def test_in_one_process_tags_give_the_psi_rows(files):
    """The clear alignment in one process (:func:`set_up_members`) offers each group only
    its tagged rows too: every member's rows name the IDs the raw files align to."""
    root, _ = files
    cfg = load_deploy_config(_config(root, "none"))
    spec = get_algorithm_spec("multivfl")
    tagged = {p: load_party_data(root / "aligned" / f"{p}.npz") for p in PARTIES}
    raw = {p: load_party_data(root / "raw" / f"{p}.npz") for p in PARTIES}
    a, b = set_up_members(spec, cfg, tagged), set_up_members(spec, cfg, raw)
    for p in PARTIES:
        ra, rb = a.members[p].local.rows, b.members[p].local.rows  # type: ignore[union-attr]
        assert sorted(ra) == sorted(rb)
        for g in ra:
            split = "test" if g == "test" else "train"
            ids_a = tagged[p].split(split)[0][ra[g]]
            np.testing.assert_array_equal(ids_a, raw[p].split(split)[0][rb[g]])
        if p in ("top", "bottom"):
            np.testing.assert_array_equal(
                tagged[p].group[ra["bank"]], np.full(len(ra["bank"]), "bank")
            )


@pytest.mark.parametrize("suffix", ["npz", "csv", "parquet"])
def test_the_group_column_round_trips(tmp_path, suffix):
    if suffix == "parquet":
        pytest.importorskip("pyarrow")
    d = PartyData(np.array([3, 1, 2]), np.arange(6.0).reshape(3, 2), group=["a", "b", "a"])
    got = load_party_data(save_party_data(tmp_path / f"p.{suffix}", d))
    np.testing.assert_array_equal(got.group, ["a", "b", "a"])
    np.testing.assert_array_equal(got.X, d.X)
    np.testing.assert_array_equal(got.offered("a"), [0, 2])
    np.testing.assert_array_equal(got.offered("b"), [1])


@pytest.mark.parametrize(
    ("group", "match"),
    [
        (["a", "b"], r"group has shape \(2,\) for 3 IDs"),
        ([1, 2, 3], "group must hold group names"),
        (["a", "", "b"], "group has empty names"),
    ],
)
def test_bad_tags_are_refused(group, match):
    with pytest.raises(DataError, match=match):
        PartyData(np.array([3, 1, 2]), np.zeros((3, 1)), group=group)
