"""Deployment commands that need no network: certificates, data files, configs."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("grpc")
pytest.importorskip("cryptography")

from typer.testing import CliRunner  # noqa: E402

from fedviews.cli import app  # noqa: E402
from fedviews.deploy import PartyData, load_deploy_config, load_party_data, save_party_data  # noqa: E402
from fedviews.errors import ConfigError, DataError  # noqa: E402

runner = CliRunner()


def test_certs_commands(tmp_path):
    from cryptography import x509

    ca = tmp_path / "ca"
    assert runner.invoke(app, ["certs", "init", str(ca)]).exit_code == 0
    res = runner.invoke(app, ["certs", "issue", str(ca), "coordinator", "--host", "10.0.0.5"])
    assert res.exit_code == 0, res.output
    cert = x509.load_pem_x509_certificate((ca / "coordinator.crt").read_bytes())
    assert cert.subject.rfc4514_string() == "CN=coordinator"
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "coordinator" in san.get_values_for_type(x509.DNSName)
    assert oct((ca / "coordinator.key").stat().st_mode)[-3:] == "600"
    assert runner.invoke(app, ["certs", "revoke", str(ca), "coordinator"]).exit_code == 0
    assert f"{cert.serial_number:x}" in (ca / "revoked.txt").read_text()
    bad = runner.invoke(app, ["certs", "issue", str(ca), "../evil"])
    assert bad.exit_code == 2 and "party name" in bad.output


def test_split_data_and_party_files(tmp_path):
    res = runner.invoke(
        app,
        ["split-data", "handwritten", str(tmp_path), "--views", "fou,zer", "--n-per-class", "3"]
        + ["--overlap", "0.8", "--label-owner", "zer", "--format", "csv"],
    )
    assert res.exit_code == 0, res.output
    fou, zer = load_party_data(tmp_path / "fou.csv"), load_party_data(tmp_path / "zer.csv")
    assert fou.X.shape == (24, 76) and zer.X.shape == (24, 47)
    assert fou.y is None and zer.y is not None and set(zer.y) <= set(range(10))
    assert len(np.intersect1d(fou.ids, zer.ids)) < 30
    # the files are not replaced without a word (they were)
    again = ["split-data", "handwritten", str(tmp_path), "--views", "fou,zer", "--format", "csv"]
    res = runner.invoke(app, again)
    assert res.exit_code == 2 and "holds party files already (fou.csv, zer.csv)" in res.output
    assert load_party_data(tmp_path / "fou.csv").X.shape == (24, 76)
    res = runner.invoke(app, [*again, "--n-per-class", "2", "--force"])
    assert res.exit_code == 0 and load_party_data(tmp_path / "fou.csv").X.shape[0] < 24
    d = PartyData(np.array([3, 1, 2]), np.arange(6.0).reshape(3, 2), np.array([0, 1, 0]))
    for ext in ("npz", "csv"):
        back = load_party_data(save_party_data(tmp_path / f"p.{ext}", d))
        np.testing.assert_array_equal(back.ids, d.ids)
        np.testing.assert_array_equal(back.X, d.X)
        np.testing.assert_array_equal(back.y, d.y)
    with pytest.raises(DataError, match="duplicated"):
        PartyData(np.array([1, 1]), np.zeros((2, 1)))


def test_split_data_for_multivfl_and_nd_party_files(tmp_path):
    """--config writes what the algorithm needs: image strips, label owners, a test split."""
    config = tmp_path / "d.toml"
    config.write_text(
        'algorithm = "multivfl"\n[federation]\nparties = ["a", "b", "lo"]\n'
        'label_owners = ["lo"]\n[data]\nn_per_class = 3\nn_test = 7\n'
    )
    out = tmp_path / "files"
    res = runner.invoke(app, ["split-data", "mnist", str(out), "--config", str(config)])
    assert res.exit_code == 0, res.output
    a, b, lo = (load_party_data(out / f"{p}.npz") for p in ("a", "b", "lo"))
    assert a.X.shape == (30, 14, 28) and a.X.dtype == np.uint8 and a.X_test.shape == (7, 14, 28)
    assert a.y is None and b.y is None and lo.X.shape == (30, 0) and lo.y_test.shape == (7,)
    assert set(lo.ids) == set(a.ids) and set(lo.ids_test) == set(b.ids_test)
    # the strips are the top and bottom halves of the same images
    img = np.concatenate([a.X[np.argsort(a.ids)], b.X[np.argsort(b.ids)]], axis=1)
    assert img.shape == (30, 28, 28) and img.max() > 0
    with pytest.raises(DataError, match="NaN"):
        PartyData(np.arange(2), np.full((2, 3, 3), np.nan))
    with pytest.raises(DataError, match="shape"):
        PartyData(np.arange(2), np.zeros((2, 3)), ids_test=np.arange(1), X_test=np.zeros((1, 4)))
    with pytest.raises(DataError, match="unknown arrays"):
        np.savez(tmp_path / "bad.npz", ids=np.arange(2), Z=np.zeros(2))
        load_party_data(tmp_path / "bad.npz")
    with pytest.raises(DataError, match="use .npz"):
        save_party_data(tmp_path / "x.csv", a)


def test_split_data_with_a_config_writes_what_launch_writes(tmp_path):
    """It took seed 0 (its option's default) over the config's seed, so its files were not
    those of `fedviews launch` for a config of another seed; DATASET replaced the config's
    dataset without a word when that failed."""
    from fedviews.deploy import load_deploy_config
    from fedviews.deploy._data import write_demo_data

    config = tmp_path / "d.toml"
    config.write_text(
        'algorithm = "mmvfl"\nseed = 5\n[federation]\nparties = ["fou", "zer"]\n'
        'label_owner = "fou"\n[data]\nn_per_class = 3\n'
    )
    launched = write_demo_data(load_deploy_config(config), tmp_path / "launch")
    for seed, same in (([], True), (["--seed", "7"], False)):
        out = tmp_path / f"split{len(seed)}"
        res = runner.invoke(
            app, ["split-data", "handwritten", str(out), "--config", str(config)] + seed
        )
        assert res.exit_code == 0, res.output
        for name, path in launched.items():
            got, want = load_party_data(out / path.name), load_party_data(path)
            assert np.array_equal(got.ids, want.ids) == same, name
    res = runner.invoke(app, ["split-data", "mnist", str(tmp_path / "m"), "--config", str(config)])
    assert res.exit_code == 2
    said = " ".join(res.output.split())
    assert "DATASET 'mnist' replaces d.toml's data.dataset 'handwritten'" in said, said
    # the options of a split without a config were dropped without a word
    args = ["split-data", "handwritten", str(tmp_path / "o"), "--config", str(config)]
    res = runner.invoke(app, [*args, "--overlap", "0.5", "--format", "csv"])
    said = " ".join(res.output.split())
    assert res.exit_code == 2 and "--overlap, --format: not with --config" in said, said
    assert not (tmp_path / "o").exists()


def test_deploy_config_validation(tmp_path):
    base = {
        "algorithm": "mmvfl",
        "federation": {"parties": ["a", "b"], "label_owner": "a"},
    }
    cfg = load_deploy_config(base, ["params.max_iter=3"])
    assert cfg.params.max_iter == 3 and cfg.roles() == {"a": "party", "b": "party"}
    # the key as the config spells it (it read "max_iter must be ...")
    with pytest.raises(ConfigError, match=r"^params\.max_iter must be an integer >= 1, got 0$"):
        load_deploy_config(base, ["params.max_iter=0"])
    with pytest.raises(ConfigError, match="label_owner"):
        load_deploy_config({**base, "federation": {"parties": ["a"], "label_owner": "z"}})
    with pytest.raises(ConfigError, match="did you mean 'max_iter'"):
        load_deploy_config(base, ["params.max_iters=3"])
    with pytest.raises(ConfigError, match="cannot be deployed; did you mean 'mmvfl'"):
        load_deploy_config({**base, "algorithm": "mmvfll"})
    # names become folders and file names, and TLS compares them case-insensitively
    for parties, match in (
        (["a", "../../x"], "must be 1-64 letters"),
        (["a", "b/c"], "must be 1-64 letters"),
        (["a", "A"], "more than letter case"),
        (["a", "Coordinator"], "more than letter case"),
    ):
        with pytest.raises(ConfigError, match=match):
            load_deploy_config({**base, "federation": {"parties": parties, "label_owner": "a"}})
    with pytest.raises(ConfigError, match="names the run's folder"):
        load_deploy_config({**base, "name": "../../elsewhere"})


def test_certificates_are_not_overwritten_and_keys_are_private(tmp_path):
    pytest.importorskip("cryptography")
    import stat

    from fedviews.federation import init_ca, issue_certificate, revoke_certificate

    init_ca(tmp_path)
    ca = (tmp_path / "ca.crt").read_bytes()
    with pytest.raises(ConfigError, match="'ca' names the federation's CA"):
        issue_certificate(tmp_path, "ca")
    assert (tmp_path / "ca.crt").read_bytes() == ca  # the CA is intact
    first = issue_certificate(tmp_path, "pix").read_bytes()
    for key in ("ca.key", "pix.key"):
        assert stat.S_IMODE((tmp_path / key).stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="exists; pass --replace"):
        issue_certificate(tmp_path, "pix")
    assert (tmp_path / "pix.crt").read_bytes() == first
    revoke_certificate(tmp_path, "pix")  # revoked, then replaced (which revokes it too):
    issue_certificate(tmp_path, "pix", replace=True)  # its serial is listed once
    assert (tmp_path / "revoked.txt").read_text().count(" pix\n") == 1
    assert (tmp_path / "pix.crt").read_bytes() != first
    # 'PIX' beside 'pix' was issued (one file on a case-insensitive file system)
    with pytest.raises(ConfigError, match="'PIX' differs from the certified party 'pix' only"):
        issue_certificate(tmp_path, "PIX")
    assert not (tmp_path / "PIX.crt").exists()


def test_a_label_owner_cannot_size_everyone_s_allocations():
    """``n_classes`` reported by the label owner goes into every party's arrays: it is checked."""
    from fedviews.errors import ProtocolError
    from fedviews.federation import Roster, RunSpec, get_algorithm_spec
    from fedviews.linear import MMVFLParams

    algo = get_algorithm_spec("mmvfl")
    run = RunSpec("mmvfl", MMVFLParams(), Roster(("a", "b"), "a"), 0)
    infos = {"a": {"n/train": 100, "n_classes": 10**9}, "b": {"n/train": 100}}
    with pytest.raises(ProtocolError, match="label owner 'a' reported 1000000000 classes") as e:
        algo.make_setup(run, infos)
    assert e.value.party == "a"  # (results.json's culprit; it named no one)
    infos["a"]["n_classes"] = "many"
    with pytest.raises(ProtocolError, match="not a count") as e:
        algo.make_setup(run, infos)
    assert e.value.party == "a"
    infos["a"]["n_classes"] = 3
    assert algo.make_setup(run, infos)["n_classes"] == 3


def test_parquet_party_files_round_trip_and_bad_tables(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    res = runner.invoke(
        app,
        ["split-data", "handwritten", str(tmp_path), "--views", "fou,zer", "--n-per-class", "2"]
        + ["--label-owner", "zer", "--format", "parquet"],
    )
    assert res.exit_code == 0, res.output
    zer = load_party_data(tmp_path / "zer.parquet")
    assert zer.X.shape == (20, 47) and zer.y is not None and zer.ids.dtype.kind == "U"
    d = PartyData(np.array([7, 3]), np.arange(6.0).reshape(2, 3), np.array([1, 0]))
    back = load_party_data(save_party_data(tmp_path / "p.parquet", d))
    np.testing.assert_array_equal(back.ids, d.ids)
    np.testing.assert_array_equal(back.X, d.X)
    np.testing.assert_array_equal(back.y, d.y)
    pq.write_table(pa.table({"id": [1, 2], "f0": [1.0, None]}), tmp_path / "nan.parquet")
    with pytest.raises(DataError, match="missing values"):
        load_party_data(tmp_path / "nan.parquet")
    pq.write_table(pa.table({"id": [1, 2], "f0": ["a", "b"]}), tmp_path / "txt.parquet")
    with pytest.raises(DataError, match="non-numeric"):
        load_party_data(tmp_path / "txt.parquet")
    pq.write_table(pa.table({"key": [1, 2]}), tmp_path / "noid.parquet")
    with pytest.raises(DataError, match="`id` column"):
        load_party_data(tmp_path / "noid.parquet")
    (tmp_path / "junk.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match="not a readable Parquet"):
        load_party_data(tmp_path / "junk.parquet")


def test_bad_command_line_input_is_one_error_line(tmp_path):
    """A corrupt data file or an address grpc cannot parse: `error:` and exit 2, no traceback."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_handwritten.toml"
    corrupt = tmp_path / "pix.npz"
    corrupt.write_bytes(b"not an npz file")
    res = runner.invoke(
        app,
        ["party", str(config), "--insecure", "--party", "pix", "--data", str(corrupt)]
        + ["--coordinator", "127.0.0.1:1", "--out", str(tmp_path / "p")],
    )
    assert res.exit_code == 2, res.output
    assert "DataError" in res.output and "not a readable .npz" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(
        app,
        ["coordinator", str(config), "--insecure", "--listen", "notanaddress"]
        + ["--out", str(tmp_path / "c")],
    )
    assert res.exit_code == 2, res.output
    assert "ConfigError" in res.output and "--listen = 'notanaddress': expected HOST:PORT" in (
        " ".join(res.output.split())
    )
    # gRPC took a bare host as port 443 and a port beyond 65535 modulo 65536
    for bad in ("localhost", "localhost:99999"):
        res = runner.invoke(
            app,
            [
                "coordinator",
                str(config),
                "--insecure",
                "--listen",
                bad,
                "--out",
                str(tmp_path / "c"),
            ],
        )
        assert res.exit_code == 2 and f"--listen = '{bad}': expected HOST:PORT" in (
            " ".join(res.output.split())
        ), res.output


def test_missing_certificates_advice_depends_on_the_role(tmp_path):
    """A party missing its certificate is told to ask the federation's CA operator for one
    (never to create a CA of its own, which nobody would trust); the coordinator, which runs
    the CA, is told to create it and issue the certificates."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[2] / "configs" / "deploy_mmvfl_handwritten.toml"
    data = tmp_path / "pix.npz"
    save_party_data(data, PartyData(ids=np.array(["a", "b"]), X=np.zeros((2, 3))))
    party = ["party", str(config), "--party", "pix", "--data", str(data)]
    party += ["--coordinator", "127.0.0.1:1", "--out", str(tmp_path / "p")]
    for certs in ([], ["--certs", str(tmp_path / "certs")]):
        res = runner.invoke(app, party + certs)
        assert res.exit_code == 2, res.output
        text = " ".join(res.output.split())
        assert "ask the organisation that runs the federation's CA" in text
        assert "`fedviews certs issue CA_DIR pix`" in text
        assert "certs init" not in text
    # a misspelt party name is said as such, not as a certificate to ask for
    misspelt = [x if x != "pix" else "pixx" for x in party]
    res = runner.invoke(app, misspelt + ["--certs", str(tmp_path / "certs")])
    assert res.exit_code == 2, res.output
    assert "'pixx' is not a party of this federation" in res.output, res.output
    res = runner.invoke(app, ["coordinator", str(config), "--certs", str(tmp_path / "certs")])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"fedviews certs init {tmp_path / 'certs'}" in text
    assert f"fedviews certs issue {tmp_path / 'certs'} coordinator" in text


def test_csv_party_files_blank_lines_ids_and_labels(tmp_path):
    # a trailing blank line or a short row raised IndexError; "007" became the integer 7;
    # float labels "1.0" (pandas' to_csv) were "non-numeric"; a BOM hid the `id` column
    f = tmp_path / "a.csv"
    f.write_text("\ufeffid,label,a\n007,1.0,0.5\n7,0,1.5\n\n", encoding="utf-8")
    d = load_party_data(f)
    assert d.ids.tolist() == ["007", "7"] and d.y is not None and d.y.tolist() == [1, 0]
    np.testing.assert_array_equal(d.X, [[0.5], [1.5]])
    f.write_text("id,label,a\n1,0,0.5\n2,1\n")
    with pytest.raises(DataError, match="line 3 has 2 fields, the header 3"):
        load_party_data(f)
    f.write_text("id,label,a\n1,0.5,0.5\n")
    with pytest.raises(DataError, match="'0.5' is not a class index.*regression.*.npz"):
        load_party_data(f)  # (it said "non-numeric value" of a number)
    f.write_text("id,label,a\n1,cat,0.5\n")
    with pytest.raises(DataError, match="label 'cat' is not a class index"):
        load_party_data(f)
    f.write_text("id,label,a\n1,1,x\n")
    with pytest.raises(DataError, match="a.csv: line 2, column 'a': 'x' is not a number"):
        load_party_data(f)  # (it said "non-numeric value (could not convert ...)": where?)

    # an empty id cell was the ID "" (its row silently dropped) and made every other ID of
    # the file a string (integer IDs then matched no other party's)
    f.write_text("id,label,a\n1614,0,0.5\n,1,1.5\n")
    with pytest.raises(DataError, match="a.csv: line 3 has an empty id"):
        load_party_data(f)
    # labels a .csv cannot hold: one clear error, and no half-written file
    d = PartyData(np.array([1, 2]), np.ones((2, 1)), np.array(["cat", "dog"]))
    with pytest.raises(DataError, match="integer class labels"):
        save_party_data(tmp_path / "s.csv", d)
    with pytest.raises(DataError, match="integer class labels"):
        save_party_data(tmp_path / "s.csv", PartyData(np.array([1, 2]), np.ones((2, 1)), [0.5, 1]))
    assert not (tmp_path / "s.csv").exists()
    back = load_party_data(
        save_party_data(tmp_path / "f.csv", PartyData(np.array([1, 2]), np.ones((2, 1)), [1.0, 0]))
    )
    assert back.y is not None and back.y.tolist() == [1, 0]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (",id,a\n0,1,0.5\n", r"column 1 has no name \(a row index\? pandas: to_csv\(index="),
        ("id,a,a\n1,0.5,0.5\n", r"columns named twice: \['a'\]"),
        ("id,id,a\n1,1,0.5\n", r"columns named twice: \['id'\]"),
        ("id;a\n1;0.5\n", r"it reads \['id;a'\] \(is it delimited by another character"),
        ("ID,a\n1,0.5\n", r"it reads \['ID', 'a'\] \(names are case- and space-sensitive"),
        ("id,a\n", "the file has a header but no data rows"),
        ("", "the file is empty"),
        ("id,label,a\n1,one,0.5\n", "line 2: label 'one' .*text class names.*.npz or .parquet"),
    ],
)
def test_a_csv_mistake_is_named_where_it_is(tmp_path, content, says):
    """A pandas row index (a column without a name) or a second `id` became a feature
    without a word; a semicolon-delimited file, `ID` and an empty file all read "the header
    must contain an `id` column"; an empty file was "no shared ID" at the coordinator."""
    f = tmp_path / "a.csv"
    f.write_text(content)
    with pytest.raises(DataError, match=says):
        load_party_data(f)


def test_a_csv_that_is_not_utf8_or_an_npz_without_rows_is_a_data_error(tmp_path):
    f = tmp_path / "a.csv"
    f.write_bytes("id,a\n1,0.5\n".encode("utf-16"))  # Excel's "Unicode Text"
    with pytest.raises(DataError, match="a.csv: not UTF-8 text .* save it as a UTF-8 CSV"):
        load_party_data(f)  # (a UnicodeDecodeError traceback)
    np.savez(tmp_path / "b.npz", ids=np.array([], dtype=np.int64))
    with pytest.raises(DataError, match="b.npz: its ids are empty"):
        load_party_data(tmp_path / "b.npz")


def test_two_files_of_one_party_are_refused_naming_both(tmp_path):
    """`fou.npz` beside `fou.csv`: the first found trained, without a word."""
    from fedviews.deploy._data import party_files

    for name in ("fou.npz", "fou.csv"):
        (tmp_path / name).write_text("")
    with pytest.raises(DataError, match="holds fou.npz and fou.csv for party 'fou'"):
        party_files(["fou"], tmp_path, DataError)


def test_split_data_overlap_out_of_range_is_one_error_line(tmp_path):
    # --overlap 0 wrote one random sample per party (no two parties sharing an ID)
    res = runner.invoke(
        app, ["split-data", "handwritten", str(tmp_path), "--n-per-class", "2", "--overlap", "0"]
    )
    assert res.exit_code != 0 and "overlap" in res.output and "Traceback" not in res.output
    assert not list(tmp_path.iterdir())


def test_a_second_coordinator_on_a_port_in_use_is_refused(tmp_path):
    # grpc binds with SO_REUSEPORT: a second coordinator on the port of a running one bound
    # it too ("listening on port 50999") and the kernel handed each party to one of the two
    from fedviews.federation import GrpcHub, PrivacyPolicy

    policy = PrivacyPolicy.of("t", {})
    hub = GrpcHub(policy, {"a": "party"}, listen="127.0.0.1:0")
    try:
        with pytest.raises(ConfigError, match=r"cannot listen on .*not in use by another"):
            GrpcHub(policy, {"a": "party"}, listen=f"127.0.0.1:{hub.port}").close()
    finally:
        hub.close()


def test_launch_refuses_the_folder_of_another_run(tmp_path):
    # `fedviews launch CONFIG --out RUN` over a finished or killed run overwrote its
    # results.json, data files and launch.json (a 10-round run became a 5-round one)
    from fedviews.deploy import launch

    config = tmp_path / "deploy.toml"
    config.write_text(
        'algorithm = "mmvfl"\n[federation]\nparties = ["a", "b"]\nlabel_owner = "a"\n'
    )
    cfg = load_deploy_config(config)
    for held in ("launch.json", "config.json"):  # a launched run; an experiment
        run = tmp_path / held
        (run / "coordinator").mkdir(parents=True)
        (run / held).write_text("{}")
        with pytest.raises(ConfigError, match=rf"{run} holds a run already: .*--resume {run}"):
            launch(config, cfg, out_dir=run, insecure=True)
        assert sorted(p.name for p in run.iterdir()) == sorted([held, "coordinator"])
    # a finished one: nothing to resume (the advice to resume it failed with just that)
    run = tmp_path / "finished"
    (run / "coordinator").mkdir(parents=True)
    (run / "launch.json").write_text("{}")
    (run / "coordinator" / "results.json").write_text('{"status": "ok"}')
    with pytest.raises(ConfigError, match=rf"{run} holds a finished run .*: choose another --out"):
        launch(config, cfg, out_dir=run, insecure=True)
    run = tmp_path / "predicted"
    (run / "coordinator").mkdir(parents=True)
    (run / "predict.json").write_text("{}")
    with pytest.raises(ConfigError, match="holds a prediction session already.*another --out"):
        launch(config, cfg, out_dir=run, insecure=True)
    # a launch that failed before any process started (no data here) leaves its config copy
    # and launch.json only: the same --out is taken again, not refused as a run to resume
    run = tmp_path / "failed"
    for _ in range(2):
        with pytest.raises(DataError, match="nowhere"):
            launch(config, cfg, out_dir=run, data_dir=tmp_path / "nowhere", insecure=True)
    assert sorted(p.name for p in run.iterdir()) == ["config.toml", "launch.json"]


def test_a_hello_names_the_config_keys_that_differ(tmp_path):
    """Two processes of one run with different configs: the refusal names the keys (it said
    'algorithm, seed, parties, label owner or params differ', leaving the user to guess)."""
    from fedviews.deploy._roles import run_hello
    from fedviews.federation import run_differences

    config = tmp_path / "d.toml"
    config.write_text(
        'algorithm = "mmvfl"\nseed = 5\n[federation]\nparties = ["fou", "zer"]\n'
        'label_owner = "fou"\n'
    )
    mine = run_hello(load_deploy_config(config))
    assert run_differences(mine, mine) == ""
    for overrides, differ in (
        (["params.beta=3.0"], "params.beta"),
        (["seed=6", "params.max_iter=7"], "params.max_iter, seed"),
        (["federation.label_owner=zer"], "label_owners"),
    ):
        assert run_differences(mine, run_hello(load_deploy_config(config, overrides))) == differ
    for theirs in ("0" * 16, None, 7, "x" * 70_000):  # another version's, or a liar's
        assert run_differences(mine, theirs) == "its run identity"
    flood = mine + "".join(f";k{i:04d}{'y' * 50}=0" for i in range(1000))  # keys of its own
    said = run_differences(mine, flood)
    assert said.endswith(", 995 more") and len(said) < 300, said


def test_a_hub_closes_while_a_party_is_still_joining():
    """A party refused at its hello stopped the coordinator while others were joining: the
    hub's close iterated its live table of links as another thread added one (`dictionary
    changed size during iteration`), its server kept running and the process hung."""
    from fedviews.federation import GrpcHub, PrivacyPolicy
    from fedviews.federation._grpc import _Link

    hub = GrpcHub(PrivacyPolicy.of("t", {}), {"a": "party", "b": "party"}, listen="127.0.0.1:0")
    first, late = _Link("a", hub.options), _Link("b", hub.options)
    post = first.post

    def joins_meanwhile(*args, **kwargs):  # as "b"'s stream attaches during the goodbyes
        hub.links["b"] = late
        return post(*args, **kwargs)

    first.post = joins_meanwhile  # type: ignore[method-assign]
    hub.links["a"] = first
    hub.close(grace=0.1)
    assert first.closed.is_set() and late.closed.is_set()  # the late one is closed too


@pytest.mark.parametrize("command", ["coordinator", "party"])
def test_a_resume_folder_that_does_not_exist_is_refused(tmp_path, command):
    """A misspelt ``--resume`` of the coordinator started it from round 1 without a word,
    and every party's checkpoints were overwritten."""
    from pathlib import Path

    config = str(Path(__file__).parents[2] / "configs" / "deploy_mmvfl_handwritten.toml")
    args = [command, config, "--insecure", "--resume", str(tmp_path / "coordinatr")]
    if command == "party":
        args += ["--party", "pix", "--data", str(tmp_path / "pix.npz"), "--coordinator", "x:1"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert f"--resume {tmp_path / 'coordinatr'}: no such folder" in " ".join(r.output.split())


def test_a_party_sharing_few_of_its_rows_says_so(tmp_path):
    """5 common IDs of 950 trained without a word (IDs that should match but do not: a
    prefix, an int column against strings): a party sharing under a tenth of its training
    rows warns on its console; sharing none, the run stops naming the likely cause."""
    from fedviews.deploy import write_demo_data
    from fedviews.deploy._session import DeployCoordinator, DeployParty, session_policy
    from fedviews.federation import InProcessTransport

    config = tmp_path / "d.toml"
    config.write_text(
        'algorithm = "mmvfl"\n[federation]\nparties = ["fou", "zer"]\nlabel_owner = "fou"\n'
        "[data]\nn_per_class = 6\n[params]\nmax_iter = 2\n"
    )
    cfg = load_deploy_config(config)
    files = write_demo_data(cfg, tmp_path / "data")

    def run(kept: int) -> list[str]:
        """A session where zer's IDs but the first ``kept`` carry a prefix; zer's lines."""
        datas = {p: load_party_data(path) for p, path in files.items()}
        zer = datas["zer"]
        ids = np.array([i if k < kept else f"id{i}" for k, i in enumerate(zer.ids)])
        datas["zer"] = PartyData(ids, zer.X)
        said: list[str] = []
        transport = InProcessTransport(session_policy(cfg))
        coord = DeployCoordinator(cfg, lambda line: None)
        transport.register(coord)
        for p, d in datas.items():
            echo = said.append if p == "zer" else (lambda line: None)
            transport.register(DeployParty(cfg, p, d, tmp_path / "out" / p, echo))
        coord.run()
        return said

    said = run(3)
    assert [line for line in said if line.startswith("warning")] == [
        "warning: only 3 of this party's 60 training rows are shared with the other parties: "
        "check that their IDs match this file's (7 and '7', or 'id7' and '7', differ)"
    ]
    assert not [line for line in run(60) if line.startswith("warning")]
    with pytest.raises(DataError, match=r"share no sample ID \(check that their files' IDs"):
        run(0)
