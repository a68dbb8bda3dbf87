"""Command line: ``fedviews run CONFIG``, ``fedviews reproduce``, ``fedviews datasets ...``,
``fedviews experiments``.

Every expected failure (bad config, bad data, missing extra, privacy violation, a
party that dies) is printed as one ``error:`` line with a non-zero exit status;
tracebacks are shown only with ``--debug``.
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import click
import typer

from fedviews._cli_datasets import datasets_app
from fedviews._configs import config_file, copy_config, list_configs
from fedviews._console import DEBUG, OWN_PROCESS, console, err_console, friendly
from fedviews._heap import keep_freed_memory
from fedviews._tables import read_toml
from fedviews.errors import ConfigError, FedViewsError

_Quiet = Annotated[
    bool,
    typer.Option(
        "--quiet",
        "-q",
        help="No progress bars or progress lines (warnings, tables and the summary still print).",
    ),
]
app = typer.Typer(
    name="fedviews",
    help="Multi-party vertical federated learning and multi-view learning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(datasets_app, name="datasets")
configs_app = typer.Typer(
    help="The configs shipped with fedviews: list them, copy one to edit.", no_args_is_help=True
)
app.add_typer(configs_app, name="configs")


def _version(shown: bool) -> None:
    if shown:
        from fedviews import __version__

        console.print(f"fedviews {__version__}", highlight=False)
        raise typer.Exit()


@app.callback(context_settings={"help_option_names": ["-h", "--help"]})
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks.")] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    DEBUG["on"] = debug
    # OpenMP threads (torch's) that wait at a barrier sleep instead of spinning out their time
    # slice: on a machine other jobs share, spinning made a run more than twice as slow (a
    # defense-sweep cell took 72 s wall against 29 s; docs/benchmarks.md, "Threads on a busy
    # machine") and the sums are the same bit for bit. Set before torch loads (no command of
    # ours has imported it yet); the processes a command starts inherit it; a user's own
    # setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    # every command of ours may move or train on megabyte arrays in a loop: keep freed
    # memory in the heap instead of page-faulting it back for each one (fedviews._heap)
    keep_freed_memory()


@app.command()
@friendly
def run(
    config: Annotated[
        Path | None,
        typer.Argument(
            help="Experiment TOML (configs/*.toml) or deployment TOML (configs/deploy_*); "
            "a shipped config's name (fedviews configs list) where no such file exists."
        ),
    ] = None,
    overrides: Annotated[
        list[str] | None, typer.Argument(help="key=value overrides, e.g. params.max_iter=10 seed=3")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Run folder (default runs/<name>-<timestamp>).")
    ] = None,
    quiet: _Quiet = False,
    resume: Annotated[
        Path | None,
        typer.Option(
            help="Run folder of a killed or interrupted run (experiment or deployment): "
            "continue it, skipping the work it already finished."
        ),
    ] = None,
) -> None:
    """Run an experiment (tables + HTML report) or a deployment (one process per party).

    A deployment config (with a ``\\[federation]`` table) is run as ``fedviews launch``:
    the coordinator and every party as separate processes over loopback gRPC with
    mutual TLS. ``--resume RUN_DIR`` continues a run after it was killed: an
    experiment skips the cells (setting x method x seed, ...) it finished, a
    deployment goes on from the parties' last checkpoints.
    """
    if resume is not None:
        if config is not None:
            what = "overrides" if "=" in str(config) else "CONFIG"  # (an override comes first)
            raise ConfigError(
                f"--resume RUN_DIR continues a run with its own saved config: drop {what} "
                f"({config}); to run it with other settings, start a new run"
            )
        if not resume.is_dir():
            raise ConfigError(f"--resume {resume}: no such folder")
        if not (resume / "config.json").is_file() and not (resume / "launch.json").is_file():
            raise ConfigError(
                f"--resume {resume}: not the folder of a run (no config.json of an experiment, "
                "no launch.json of a deployment); for a coordinator or party started by hand, "
                "restart each process with --resume <its folder>"
            )
        if (resume / "config.json").is_file():
            from fedviews.experiments import resume_experiment

            console.print(f"[bold]fedviews run --resume[/] {resume}")
            _show(*resume_experiment(resume, console=console, quiet=quiet))
            return
        from fedviews.deploy import resume_launch

        _show_deployment(resume_launch(resume))
        return
    if config is None:
        raise ConfigError("give a CONFIG file (see configs/) or --resume RUN_DIR")
    config = config_file(config)
    if "federation" in read_toml(config):  # a deployment (experiments name no federation)
        from fedviews.deploy import launch, load_deploy_config

        dcfg = load_deploy_config(config, overrides or [])
        console.print(f"[bold]fedviews run[/] {dcfg.name}: deployment of [cyan]{dcfg.algorithm}[/]")
        _show_deployment(launch(config, dcfg, overrides or [], out_dir=out))
        return
    from fedviews.experiments import load_config, run_experiment

    cfg = load_config(config, overrides or [])
    console.print(
        f"[bold]fedviews run[/] {cfg.name}: experiment [cyan]{cfg.experiment}[/] on [cyan]{cfg.data.name}[/]"
    )
    _show(*run_experiment(cfg, console=console, quiet=quiet, out_dir=out))


@app.command()
@friendly
def audit(
    run_dir: Annotated[Path, typer.Argument(help="Folder of a finished privacy_audit run.")],
    overrides: Annotated[
        list[str] | None,
        typer.Argument(help="key=value overrides, e.g. params.labelled=100 params.attacks=[...]"),
    ] = None,
) -> None:
    """Re-run the leakage attacks of a privacy_audit run on its recorded messages (no training)."""
    from fedviews.experiments.privacy_audit import reaudit

    result = reaudit(run_dir, overrides or [])
    for table in result.tables:
        _print_table(table)
    console.print(f"table: [bold]{run_dir / 'reaudit.json'}[/]")


@app.command()
@friendly
def reproduce(
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Manifest entries to run (default: every entry of --tier)."),
    ] = None,
    tier: Annotated[
        str | None, typer.Option(help="Run every entry of this tier: smoke or full.")
    ] = None,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Compare the fresh tables with the committed results; exit 1 naming every "
            "number that moved by more than the entry's tolerance.",
        ),
    ] = False,
    record: Annotated[
        bool,
        typer.Option(
            "--record",
            help="Write the fresh tables (and command, date, machine, wall time) as the "
            "committed results.",
        ),
    ] = False,
    continue_: Annotated[
        bool,
        typer.Option(
            "--continue",
            help="With --record: start from the cells committed in docs/results/NAME.cells.json "
            "and write each finished cell there (a long entry over several sessions); an "
            "--out that holds this entry's unfinished run folder continues its cell in "
            "progress from its checkpoints.",
        ),
    ] = False,
    sample: Annotated[
        int,
        typer.Option(
            "--sample",
            metavar="K",
            help="With --check: re-run K cells of the recorded run, drawn at random, and take "
            "the others from the cells that --record kept (docs/results/cells/NAME.json.gz): "
            "a long entry checked in minutes.",
        ),
    ] = 0,
    sample_seed: Annotated[
        int | None,
        typer.Option(help="Draw the --sample cells with this seed (default: a fresh one, shown)."),
    ] = None,
    list_: Annotated[
        bool, typer.Option("--list", help="List the entries with tier and expected cost.")
    ] = False,
    manifest: Annotated[
        Path | None,
        typer.Option(help="The manifest (default: reproductions.toml here or in a parent)."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="Folder of the entries' run folders (default runs/reproduce-<time>)."),
    ] = None,
    quiet: _Quiet = False,
) -> None:
    """Re-make the published results tables (reproductions.toml) and check or record them.

    On an x86-64 CPU it computes with the libraries' AVX2 kernels, the same on every such CPU
    (run again in a process of its own with them pinned where they are not)."""
    from datetime import datetime

    from fedviews._kernels import pinned_run, pins_missing

    if not list_ and pins_missing() and click.get_current_context().obj is OWN_PROCESS:
        raise typer.Exit(pinned_run(sys.argv[1:]))

    from fedviews.experiments import (
        find_manifest,
        load_manifest,
        reproduce_entries,
        reproduction_table,
        select_entries,
    )

    path = manifest if manifest is not None else find_manifest()
    entries = load_manifest(path)
    if list_:
        console.print(reproduction_table(path, entries, names or [], tier))
        return
    if check and record:
        raise ConfigError(
            "--check compares with the committed results, --record rewrites them: give one"
        )
    if continue_ and not record:
        raise ConfigError("--continue goes with --record (it records a run made over sessions)")
    if sample < 0 or (sample or sample_seed is not None) and not check:
        raise ConfigError("--sample K (K >= 1) and --sample-seed go with --check")
    if not names and tier is None:
        raise ConfigError("give entry NAMEs or --tier smoke|full (--list shows them)")
    chosen = select_entries(entries, names or [], tier)
    missing = [e.name for e in chosen if check and not (path.parent / e.results).is_file()]
    if missing:
        raise ConfigError(
            f"no committed results to check {', '.join(missing)} against: record them first "
            "(fedviews reproduce NAME --record)"
        )
    base = out or Path("runs") / f"reproduce-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if sample and sample_seed is None:
        import random

        sample_seed = random.SystemRandom().randrange(2**31)
    sampling = (sample, sample_seed or 0)
    drifted = reproduce_entries(
        chosen, path.parent, base, console, check, record, continue_, quiet, sampling
    )
    if drifted:
        for line in drifted:
            err_console.print(line, highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(1)


def _show(run_dir: Path, result: Any) -> None:
    """Print a finished experiment's tables, then its files, report link and summary."""
    for table in result.tables:
        _print_table(table)
    console.print(f"metrics: {run_dir / 'metrics.json'}")
    _show_report(run_dir)


def _print_table(table: Any) -> None:
    """An experiment table, its note below it at the console's width (as the table's caption,
    rich would wrap the note at the table's width: a narrow table broke it every few words)."""
    rich_table = table.to_rich()
    rich_table.caption = None
    console.print(rich_table)
    if table.note:
        console.print(table.note, highlight=False)


def _show_deployment(run_dir: Path) -> None:
    console.print(f"run folder: [bold]{run_dir}[/]")
    _show_report(run_dir)


def _show_report(run_dir: Path) -> None:
    """The last lines of a run: its report as a clickable link and a one-line summary."""
    from fedviews.report import load_run, run_summary

    rec = load_run(run_dir)
    report = (rec.folder / "report.html").resolve()
    console.print(f"report: [bold][link={report.as_uri()}]{report}[/link][/]", highlight=False)
    # the summary's clauses (joined by "; ") one per line, so that a terminal narrower than
    # the summary breaks no clause mid-word; a clause longer than a line wraps between words
    first, *rest = run_summary(rec).split("; ")
    console.print("\n".join([first, *(f"  {clause}" for clause in rest)]), highlight=False)


@app.command()
@friendly
def report(
    run_dir: Annotated[
        Path,
        typer.Argument(help="A run folder: experiment, deployment, or one deployment party's."),
    ],
) -> None:
    """(Re)write the HTML report of a finished run from its files."""
    from fedviews.report import write_report

    write_report(run_dir)
    _show_report(run_dir)


@app.command()
@friendly
def compare(
    runs: Annotated[
        list[Path], typer.Argument(help="Two or more run folders of one experiment (or algorithm).")
    ],
    out: Annotated[
        Path | None,
        typer.Option(help="HTML page to write (default compare.html beside the first run)."),
    ] = None,
) -> None:
    """Compare runs: headline metrics, the config values that differ, overlaid curves."""
    from fedviews.report import compare_runs

    cmp = compare_runs(runs)
    for table in cmp.rich_tables():
        console.print(table)
    page = cmp.write_html(out or runs[0].resolve().parent / "compare.html").resolve()
    console.print(f"comparison: [bold][link={page.as_uri()}]{page}[/link][/]", highlight=False)


@app.command()
@friendly
def experiments(
    module: Annotated[
        list[str] | None,
        typer.Option(
            "--module",
            "-m",
            help="Import this module first (repeatable), as a config's `modules` list does: "
            "what it registers is listed too.",
        ),
    ] = None,
) -> None:
    """List the registered experiments and algorithms (fedviews' own; with --module, also a
    module's of your own)."""
    from rich.table import Table

    from fedviews._tables import import_modules
    from fedviews.experiments import list_algorithms, list_experiments

    import_modules(list(module or []), "--module")

    title = "experiments (use as `experiment = ...` in a config)"
    t = Table("name", "default data", "needs", "description", title=title)
    for spec in list_experiments():
        t.add_row(spec.name, spec.default_dataset, spec.needs or "", spec.description)
    console.print(t)
    console.print("estimators: " + ", ".join(list_algorithms()))
    from fedviews.federation import ALGORITHMS

    specs = ", ".join(ALGORITHMS.names())
    console.print(f"algorithms (`algorithm = ...` in a deployment config): {specs}")


@configs_app.command("list")
@friendly
def configs_list() -> None:
    """List the shipped configs (``fedviews run NAME`` runs one by name)."""
    from rich.table import Table

    configs = list_configs()
    t = Table(title="shipped configs")  # whole names; descriptions wrapped, never cut (a
    # cut "CIFAR cannot be" hid how to run the CIFAR configs)
    width = max(map(len, configs), default=4)
    t.add_column("name", no_wrap=True, min_width=width)
    # the rest of the line (7: the borders and padding)
    t.add_column("description", overflow="fold", max_width=max(console.width - width - 7, 10))
    for name, description in configs.items():
        t.add_row(name, description)
    console.print(t)


@configs_app.command("copy")
@friendly
def configs_copy(
    name: Annotated[str, typer.Argument(help="A shipped config (fedviews configs list).")],
    dest: Annotated[
        Path | None, typer.Argument(help="File or folder to write (default ./NAME.toml).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Copy a shipped config, to edit it and run it with ``fedviews run FILE``."""
    console.print(f"{name} -> {copy_config(name, dest, force=force)}", highlight=False)


apfed_app = typer.Typer(help="APFed: use an exported active-client model.", no_args_is_help=True)
app.add_typer(apfed_app, name="apfed")


@apfed_app.command("predict")
@friendly
def apfed_predict(
    model: Annotated[Path, typer.Argument(help="Folder written by APFed.export(...).")],
    data: Annotated[Path, typer.Argument(help=".npy of images (n,H,W) or active strips.")],
    out: Annotated[
        Path | None, typer.Option(help="Write predictions to this .npy / .csv file.")
    ] = None,
) -> None:
    """Predict labels for new data with the exported active model (no passive client)."""
    import numpy as np

    from fedviews.deep import predict_exported

    pred = predict_exported(model, data)
    if out is None:
        console.print("\n".join(str(p) for p in pred.tolist()))
        return
    if out.suffix == ".csv":
        np.savetxt(out, pred, fmt="%s", delimiter=",")
    else:
        np.save(out, pred)
    console.print(f"{len(pred)} predictions -> {out}")


_OPTIONAL = ("torch", "grpc", "cryptography")


def _register_plugins() -> None:
    """Command groups that live next to their subsystems (the deployment commands)."""
    import importlib

    try:
        mod = importlib.import_module("fedviews.deploy._cli")
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name.startswith("fedviews") or exc.name in _OPTIONAL):
            return  # subsystem not present, or its optional extra is not installed
        raise
    mod.register(app, show_run=lambda run_dir: _show_deployment(run_dir))


_register_plugins()


_CODE = re.compile(r"``(.+?)``|`([^`\n]+)`")


def _reflow(text: str) -> str:
    """``text`` with each paragraph on one line (the terminal wraps it at its own width; rich
    kept the docstring's line breaks, so a wide terminal showed lines cut at 90 columns),
    but for paragraphs of list items or indented lines."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(
        p
        if any(line.startswith(("-", "*", " ", "\b")) for line in p.splitlines())
        else " ".join(line.strip() for line in p.splitlines())
        for p in paragraphs
    )


def plain_help(command: click.Command) -> click.Command:
    """``command`` and its subcommands with help texts as a terminal shows them: the code marks
    of the docstrings (````fedviews launch````, ```flwr run```) dropped, their text kept, and
    each paragraph of a command's help on one line."""
    for obj in (command, *command.params):
        for attr in ("help", "short_help"):
            text = getattr(obj, attr, None)
            if isinstance(text, str):
                text = _CODE.sub(lambda m: m.group(1) or m.group(2), text)
                setattr(obj, attr, _reflow(text) if obj is command else text)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            plain_help(sub)
    return command


def main() -> None:
    """Console-script entry point."""
    args = sys.argv[1:]
    if "--debug" in args[1:]:  # `fedviews run CONFIG --debug` (click knows it before the command)
        args = ["--debug", *(a for a in args if a != "--debug")]
    try:
        plain_help(typer.main.get_command(app))(args=args, obj=OWN_PROCESS)
    except FedViewsError as exc:  # errors outside commands, and any with --debug
        if DEBUG["on"]:
            raise
        err_console.print(f"error: {exc}")
        sys.exit(2)


if __name__ == "__main__":  # pragma: no cover
    main()
