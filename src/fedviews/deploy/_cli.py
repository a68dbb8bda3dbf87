"""Deployment commands: ``certs``, ``coordinator``, ``party``, ``launch``, ``predict``,
``split-data``."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, cast

import typer

from fedviews._console import OWN_PROCESS
from fedviews.errors import ConfigError

if TYPE_CHECKING:
    from fedviews.federation import TLSFiles

F = TypeVar("F", bound=Callable[..., Any])

_Overrides = Annotated[
    list[str] | None, typer.Argument(help="key=value overrides, e.g. params.max_iter=5")
]
_Certs = Annotated[
    Path | None, typer.Option(help="Folder with ca.crt and this process's NAME.crt/NAME.key.")
]
_Insecure = Annotated[
    bool, typer.Option("--insecure", help="Plain text, no authentication (local tests only).")
]
_Out = Annotated[Path | None, typer.Option(help="Result folder.")]
_RunDir = Annotated[Path | None, typer.Option(help="Run folder (default runs/<name>-<time>).")]
_DataDir = Annotated[Path | None, typer.Option(help="Folder of <party>.npz/.csv files.")]
_Model = Annotated[
    Path | None,
    typer.Option(
        help="This process's folder of a finished training run: predict the new rows of this "
        "session with its part of that model instead of training (fedviews predict)."
    ),
]
_Resume = Annotated[
    Path | None,
    typer.Option(
        help="This process's folder of a killed run: continue after the last round that all "
        "processes checkpointed (also the default --out)."
    ),
]


def check_resume(resume: Path | None) -> None:
    """A ``--resume`` folder that does not exist is a typo: refused (a coordinator started
    from round 1 without a word, and the parties' checkpoints were overwritten)."""
    if resume is not None and not resume.is_dir():
        from fedviews.errors import ConfigError

        raise ConfigError(
            f"--resume {resume}: no such folder (give this process's folder of the killed run)"
        )


def leaves_at_once(command: F) -> F:
    """End a deployment command's process as soon as the command returns or fails (its
    results, or its error line, written and flushed).

    Normal interpreter shutdown of a deployed process joins the transport's worker
    threads and garbage-collects torch and every other module: on a loaded machine
    (load 27 on 2 cores) a coordinator spent 8 s there after its error line, and a party
    outlived its coordinator by 20 s. Only where ``fedviews`` runs as its own process
    (:func:`fedviews.cli.main` marks the context ``OWN_PROCESS``); called in-process
    (tests), the command ends as usual.
    """

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import click

        if click.get_current_context().obj is not OWN_PROCESS:
            return command(*args, **kwargs)
        try:
            command(*args, **kwargs)
            code = 0
        except typer.Exit as exc:
            code = exc.exit_code
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    return cast(F, wrapper)


def register(app: typer.Typer, show_run: Callable[[Path], None] | None = None) -> None:
    """Add the deployment commands to the ``fedviews`` app; ``show_run(run_dir)`` ends a
    training launch's output as ``fedviews run`` ends it (run folder, report, summary)."""
    from fedviews._configs import config_file
    from fedviews._console import console, err_console, friendly

    certs_app = typer.Typer(
        help="Federation CA and per-party certificates (mutual TLS).", no_args_is_help=True
    )
    app.add_typer(certs_app, name="certs")

    def tls_for(
        certs: Path | None, insecure: bool, name: str, operator: bool = False
    ) -> TLSFiles | None:
        from fedviews.errors import ConfigError
        from fedviews.federation import TLSFiles, certificate_advice

        if insecure:
            err_console.print(
                "[bold yellow]WARNING[/]: --insecure: messages travel in plain text and "
                "nobody is authenticated; use certificates (fedviews certs) for real deployments"
            )
            return None
        if certs is None:
            raise ConfigError(
                f"pass --certs DIR (ca.crt, {name}.crt, {name}.key): "
                + certificate_advice(name, operator)
            )
        return TLSFiles.from_dir(certs, name, operator=operator)

    def launch_all(
        config: Path, overrides: list[str] | None, insecure: bool, **options: Any
    ) -> None:
        """`fedviews launch` (and `fedviews predict`): every process of ``config`` on this
        machine (``options``: those of :func:`fedviews.deploy.launch`)."""
        from fedviews.deploy._config import load_deploy_config
        from fedviews.deploy._launch import launch as _launch
        from fedviews.deploy._launch import training_overrides

        config = config_file(config)
        model = options.get("model")
        trained = training_overrides(model) if model is not None else []
        if trained:  # the training config, then what this session says
            console.print(f"the training run's overrides: {' '.join(trained)}", highlight=False)
            overrides = [*trained, *(overrides or [])]
        cfg = load_deploy_config(config, overrides or [])
        if insecure:
            tls_for(None, True, "")
        run_dir = _launch(config, cfg, overrides or [], insecure=insecure, **options)
        if show_run is not None and options.get("model") is None:
            show_run(run_dir)
        else:  # a prediction session writes no report: its predictions are with the label owner
            console.print(f"run folder: [bold]{run_dir}[/]")

    def setup_logging() -> None:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    @certs_app.command("init")
    @friendly
    def certs_init(directory: Path) -> None:
        """Create a federation CA (DIR/ca.key stays with the CA operator, DIR/ca.crt goes to everyone)."""
        from fedviews.federation import init_ca

        console.print(f"CA certificate: {init_ca(directory)}")

    @certs_app.command("issue")
    @friendly
    def certs_issue(
        directory: Path,
        name: str,
        host: Annotated[
            list[str] | None, typer.Option(help="Extra DNS name or IP (coordinator).")
        ] = None,
        replace: Annotated[
            bool, typer.Option(help="Replace NAME's certificate (the old one is revoked).")
        ] = False,
    ) -> None:
        """Issue NAME.crt/NAME.key (common name = party name) signed by the CA in DIR."""
        from fedviews.federation import issue_certificate

        cert = issue_certificate(directory, name, hosts=host or [], replace=replace)
        console.print(f"certificate: {cert}")

    @certs_app.command("revoke")
    @friendly
    def certs_revoke(directory: Path, name: str) -> None:
        """Revoke NAME's certificate (the coordinator refuses it from its next start)."""
        from fedviews.federation import revoke_certificate

        console.print(f"revoked serial {revoke_certificate(directory, name):x} ({name})")

    @app.command()
    @leaves_at_once
    @friendly
    def coordinator(
        config: Path,
        overrides: _Overrides = None,
        listen: Annotated[
            str | None,
            typer.Option(
                help="HOST:PORT to listen on (default 0.0.0.0:50051; with --insecure "
                "127.0.0.1:50051, this machine only)."
            ),
        ] = None,
        certs: _Certs = None,
        insecure: _Insecure = False,
        out: _Out = None,
        port_file: Annotated[Path | None, typer.Option(help="Write the bound port here.")] = None,
        resume: _Resume = None,
        model: _Model = None,
    ) -> None:
        """Run the coordinator of a deployment: listen, wait for the parties, drive the run."""
        from fedviews.deploy._config import check_address, load_deploy_config
        from fedviews.deploy._launch import terminate_as_interrupt
        from fedviews.deploy._session import run_coordinator

        setup_logging()
        config = config_file(config)
        cfg = load_deploy_config(config, overrides or [])
        check_resume(resume)
        tls = tls_for(certs, insecure, cfg.federation.coordinator, operator=True)
        if listen is None:  # plain text stays on this machine unless asked otherwise
            listen = "127.0.0.1:50051" if insecure else "0.0.0.0:50051"
        check_address(listen, "--listen", any_port=True)
        stop = terminate_as_interrupt()  # `kill` (or its launcher) stops it with its results
        try:
            run_coordinator(
                cfg,
                listen,
                out or resume or Path(cfg.output_dir) / cfg.name / "coordinator",
                tls=tls,
                port_file=port_file,
                resume=resume,
                model=model,
            )
        finally:
            stop()

    @app.command()
    @leaves_at_once
    @friendly
    def party(
        config: Path,
        overrides: _Overrides = None,
        party: Annotated[str, typer.Option("--party", help="This party's name.")] = "",
        data: Annotated[
            Path | None, typer.Option(help="This party's data file (.npz, .csv or .parquet).")
        ] = None,
        coordinator: Annotated[str, typer.Option(help="HOST:PORT of the coordinator.")] = "",
        certs: _Certs = None,
        insecure: _Insecure = False,
        out: _Out = None,
        resume: _Resume = None,
        listen: Annotated[
            str | None,
            typer.Option(
                help="HOST:PORT to bind for direct links from peers (default: this party's "
                "federation.listen entry; e.g. 0.0.0.0:7101 behind a NAT)."
            ),
        ] = None,
        model: _Model = None,
    ) -> None:
        """Run one party: load only its own data, dial out to the coordinator, serve the run."""
        from fedviews.deploy._config import check_address, load_deploy_config
        from fedviews.deploy._data import load_party_data
        from fedviews.deploy._launch import terminate_as_interrupt
        from fedviews.deploy._session import check_member, run_party
        from fedviews.errors import ConfigError

        setup_logging()
        if not party or data is None or not coordinator:
            raise ConfigError("--party, --data and --coordinator are required")
        config = config_file(config)
        cfg = load_deploy_config(config, overrides or [])
        check_member(cfg, party)
        check_resume(resume)
        check_address(coordinator, "--coordinator")
        if listen is not None:
            check_address(listen, "--listen")
        tls = tls_for(certs, insecure, party)
        stop = terminate_as_interrupt()  # `kill` stops it with its message log written
        try:
            run_party(
                cfg,
                party,
                load_party_data(data),
                coordinator,
                out or resume or Path(cfg.output_dir) / cfg.name / party,
                tls=tls,
                resume=resume,
                listen=listen,
                model=model,
            )
        finally:
            stop()

    @app.command()
    @friendly
    def launch(
        config: Path,
        overrides: _Overrides = None,
        out: _RunDir = None,
        data_dir: _DataDir = None,
        certs: _Certs = None,
        insecure: _Insecure = False,
        resume: Annotated[
            Path | None,
            typer.Option(
                help="Run folder of a killed launch: continue it (same config and overrides)."
            ),
        ] = None,
    ) -> None:
        """Coordinator + every party as separate local processes over loopback gRPC (mutual TLS)."""
        launch_all(
            config,
            overrides,
            insecure,
            out_dir=out,
            data_dir=data_dir,
            certs_dir=certs,
            resume=resume,
        )

    @app.command()
    @friendly
    def predict(
        config: Path,
        overrides: _Overrides = None,
        model: Annotated[
            Path | None,
            typer.Option(
                help="Run folder of the finished `fedviews launch` that trained the model."
            ),
        ] = None,
        data_dir: Annotated[
            Path | None,
            typer.Option(
                help="Folder of every party's new rows, <party>.npz/.csv, without labels."
            ),
        ] = None,
        out: _RunDir = None,
        certs: _Certs = None,
        insecure: _Insecure = False,
    ) -> None:
        """Predict new rows together with a launched run's model; predictions land with the label owner.

        The coordinator and every party run as local processes, each with its own part of the
        model (its run folder of the training launch). The training launch's overrides (its
        launch.json) apply first, then OVERRIDES."""
        from fedviews.errors import ConfigError

        if model is None:
            raise ConfigError("pass --model RUN_DIR: the run folder of the training launch")
        launch_all(
            config,
            overrides,
            insecure,
            out_dir=out,
            data_dir=data_dir,
            certs_dir=certs,
            model=model,
        )

    flower_app = typer.Typer(
        help="Run deployments on Flower infrastructure (flwr): MMVFL, V/H/S-FedMV; split NN, "
        "Multi-VFL and APFed on the simulation engine or with `fedviews flower executor`.",
        no_args_is_help=True,
    )
    app.add_typer(flower_app, name="flower")

    @flower_app.command("app")
    @friendly
    def flower_write_app(
        directory: Path,
        config: Annotated[Path, typer.Option(help="The deployment config (TOML).")],
        overrides: _Overrides = None,
    ) -> None:
        """Write the Flower App (code, deployment config copy) that `flwr run DIRECTORY` submits."""
        from fedviews.deploy._flower_launch import write_flower_app

        config = config_file(config)
        where = write_flower_app(directory, config, overrides or [])
        console.print(f"Flower app: {where}")
        console.print(
            f"submit it with: flwr run {directory} CONNECTION --stream "
            "-c \"out-dir='/runs/NAME'\"  (see docs/flower.md)"
        )

    @flower_app.command("launch")
    @friendly
    def flower_launch(
        config: Path,
        overrides: _Overrides = None,
        out: Annotated[Path | None, typer.Option(help="Run folder.")] = None,
        engine: Annotated[
            str, typer.Option(help="deployment (SuperLink + SuperNodes) or simulation (Ray).")
        ] = "deployment",
        data_dir: _DataDir = None,
        insecure: Annotated[
            bool,
            typer.Option(
                "--insecure",
                help="Plain text, no SuperNode authentication (local tests only); default: "
                "TLS with a fresh CA and every SuperNode's key registered under its party.",
            ),
        ] = False,
        ping: Annotated[int, typer.Option(min=0, help="Only time N echo round trips.")] = 0,
        ping_bytes: Annotated[int, typer.Option(min=0, help="Bytes per echo message.")] = 0,
    ) -> None:
        """A whole Flower deployment on this machine over loopback (one SuperNode per party)."""
        from fedviews.deploy._config import load_deploy_config
        from fedviews.deploy._flower_launch import launch_flower
        from fedviews.errors import ConfigError

        if engine not in ("deployment", "simulation"):
            raise ConfigError("--engine must be 'deployment' or 'simulation'")
        config = config_file(config)
        cfg = load_deploy_config(config, overrides or [])  # a bad override fails here, at once
        if insecure:
            tls_for(None, True, "")
        run_dir = out or Path(cfg.output_dir) / f"{cfg.name}-flower"
        res = launch_flower(
            config,
            run_dir,
            overrides=overrides or [],
            engine=engine,
            data_dir=data_dir,
            insecure=insecure,
            ping=ping,
            ping_bytes=ping_bytes,
        )
        status = str(res.get("status", "?"))
        per_round = res.get("seconds_per_round")
        extra = f", {per_round:.3f} s per round" if isinstance(per_round, (int, float)) else ""
        console.print(f"status: {status}{extra}; results in {run_dir}")
        if status != "ok":
            raise typer.Exit(1)

    @flower_app.command("executor")
    @friendly
    def flower_executor(
        runtime_api: Annotated[
            str, typer.Option(help="host:port of the SuperNode's Runtime API (its --port).")
        ],
        root_certificates: Annotated[
            Path | None,
            typer.Option(help="CA of a Runtime API served with TLS (none: plain HTTP)."),
        ] = None,
    ) -> None:
        """Run every ClientApp task of a `flower-supernode --isolation process` in this one
        process, so that the party stays live between messages (no process start, no rebuild)."""
        from fedviews.deploy._flower_exec import WarmExecutor

        host, _, port = runtime_api.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"--runtime-api {runtime_api!r}: expected HOST:PORT, the SuperNode's Runtime "
                "API (its --port), e.g. 127.0.0.1:9094"
            )
        if root_certificates is not None and not root_certificates.is_file():
            raise ConfigError(f"--root-certificates {root_certificates}: no such file")
        console.print(f"fedviews executor for the SuperNode at {runtime_api}")
        WarmExecutor(runtime_api, root_certificates=root_certificates).serve()

    @app.command("split-data")
    @friendly
    def split_data(
        dataset: str,
        outdir: Path,
        views: Annotated[str, typer.Option(help="Comma-separated views (default: all).")] = "",
        label_owner: Annotated[
            str, typer.Option(help="View that gets the labels (default: first).")
        ] = "",
        n_per_class: Annotated[int, typer.Option(help="Balanced subsample (0 = all).")] = 0,
        overlap: Annotated[float, typer.Option(help="Fraction of samples each party keeps.")] = 1.0,
        fmt: Annotated[str, typer.Option("--format", help="npz, csv or parquet.")] = "npz",
        seed: Annotated[
            int | None, typer.Option(help="Random seed (default 0; with --config, the config's).")
        ] = None,
        config: Annotated[
            Path | None,
            typer.Option(
                help="Deployment config: write the files its algorithm needs (its parties, "
                "label owners, \\[data] table; e.g. Multi-VFL image strips), from DATASET."
            ),
        ] = None,
        force: Annotated[
            bool, typer.Option("--force", help="Replace the party files OUTDIR holds.")
        ] = False,
    ) -> None:
        """Write one data file per party of a built-in dataset, IDs in each file.

        Without --config: one file per view (the first view, or --label-owner, gets the
        labels). With --config: the parties of that deployment config, as `fedviews launch`
        would write them (DATASET in place of the config's data.dataset where they differ).
        """
        from fedviews.deploy._data import SUFFIXES, split_dataset

        held = sorted(
            p.name
            for p in (outdir.iterdir() if outdir.is_dir() else [])
            if p.suffix.lstrip(".") in SUFFIXES
        )
        if held and not force:  # (they were replaced without a word)
            raise ConfigError(
                f"{outdir} holds party files already ({', '.join(held[:4])}"
                f"{', ...' if len(held) > 4 else ''}): choose another folder, or --force to "
                "replace them"
            )
        if config is not None:
            from fedviews.deploy._config import load_deploy_config
            from fedviews.deploy._data import write_demo_data

            given = {
                "--views": views != "",
                "--label-owner": label_owner != "",
                "--n-per-class": n_per_class != 0,
                "--overlap": overlap != 1.0,
                "--format": fmt != "npz",
            }
            if any(given.values()):
                raise ConfigError(
                    f"{', '.join(k for k, v in given.items() if v)}: not with --config, "
                    "whose parties, label owners and [data] table make the files (as "
                    "`fedviews launch` writes them); drop --config to choose these"
                )

            config = config_file(config)
            own = load_deploy_config(config).data.dataset
            over = [] if dataset == own else [f"data.dataset={dataset}"]
            try:
                cfg = load_deploy_config(config, over + ([] if seed is None else [f"seed={seed}"]))
                files = write_demo_data(cfg, outdir)
            except ConfigError as exc:
                if not over:
                    raise
                raise ConfigError(
                    f"{exc} (DATASET {dataset!r} replaces {config.name}'s data.dataset "
                    f"{own!r}; give {own!r} for the files `fedviews launch` writes)"
                ) from None
            for name, path in files.items():
                console.print(f"{name}: {path}")
            return
        files = split_dataset(
            dataset,
            outdir,
            views=tuple(v for v in views.split(",") if v),
            label_owner=label_owner,
            n_per_class=n_per_class,
            overlap=overlap,
            fmt=fmt,
            seed=seed or 0,
        )
        for name, path in files.items():
            console.print(f"{name}: {path}")
