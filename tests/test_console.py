"""The one-line error of every command (fedviews._console.friendly)."""

from __future__ import annotations

import os
import sys

import pytest
import typer

from fedviews._console import DEBUG, friendly
from fedviews.cli import main
from fedviews.errors import ConfigError, Terminated


def test_error_text_in_brackets_is_printed_not_read_as_markup(capsys):
    @friendly
    def command() -> None:
        raise ConfigError("remove [federation.listen] or deploy with [bold]fedviews launch[/]")

    with pytest.raises(typer.Exit) as info:
        command()
    assert info.value.exit_code == 2
    err = capsys.readouterr().err
    assert "remove [federation.listen] or deploy with [bold]fedviews launch[/]" in err
    assert err.startswith("error: ConfigError: ")


@pytest.mark.parametrize(
    ("stop", "code", "said"),
    [(KeyboardInterrupt, 130, "interrupted"), (Terminated, 143, "terminated (SIGTERM)")],
)
def test_a_stopped_command_says_which_signal_stopped_it(capsys, stop, code, said):
    """Ctrl-C exits 130 and `kill` 143, the shells' statuses for SIGINT and SIGTERM (a kill
    read "interrupted" with 130, and its run's status "KeyboardInterrupt")."""

    @friendly
    def command() -> None:
        raise stop()

    with pytest.raises(typer.Exit) as info:
        command()
    assert info.value.exit_code == code
    assert capsys.readouterr().err.startswith(f"{said}: partial results (if any) are in ")


def test_a_path_that_cannot_be_written_is_one_line(capsys, tmp_path):
    """`--out` an existing file, `compare --out` a folder, `configs copy` onto a file: the
    OSError was a 39-line traceback (exit 1)."""
    taken = tmp_path / "full.log"
    taken.write_text("")

    @friendly
    def command() -> None:
        taken.mkdir()

    with pytest.raises(typer.Exit) as info:
        command()
    assert info.value.exit_code == 2
    assert capsys.readouterr().err == f"error: FileExistsError: File exists: {taken}\n"


def test_debug_shows_the_traceback_of_an_expected_failure(monkeypatch, capsys, tmp_path):
    """``fedviews --debug`` promises the traceback; the entry point used to catch the
    re-raised error and print the same one line as without --debug."""
    monkeypatch.setitem(DEBUG, "on", False)
    missing = str(tmp_path / "missing.toml")
    monkeypatch.setattr(sys, "argv", ["fedviews", "run", missing])
    with pytest.raises(SystemExit) as info:
        main()
    assert info.value.code == 2
    assert capsys.readouterr().err.startswith("error: ConfigError: config file")

    monkeypatch.setattr(sys, "argv", ["fedviews", "--debug", "run", missing])
    with pytest.raises(ConfigError, match="does not exist"):
        main()
    # after the command too (click took only `fedviews --debug run`: "No such option")
    monkeypatch.setattr(sys, "argv", ["fedviews", "run", missing, "--debug"])
    with pytest.raises(ConfigError, match="does not exist"):
        main()


def test_help_keeps_table_names_in_brackets():
    """Typer reads help text as rich markup: an unescaped ``[federation]`` or ``[data]``
    vanished from ``run --help`` and ``split-data --help`` ("with a ```` table")."""
    from typer.testing import CliRunner

    from fedviews.cli import app

    runner = CliRunner()
    for command, table in (("run", "[federation]"), ("split-data", "[data]")):
        r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0 and table in r.output, r.output


def test_help_describes_the_arguments():
    """click 8.5 with the typer that flwr pins (< 0.21) dropped every argument's help
    (``CONFIG`` with no description): pyproject pins click < 8.5."""
    from typer.testing import CliRunner

    from fedviews.cli import app

    r = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "Experiment TOML" in r.output, r.output


def test_help_texts_show_no_code_marks():
    """The docstrings' ``code`` marks (RST double and Markdown single backticks) are dropped
    from every command's help, as ``fedviews ... --help`` prints it."""
    import subprocess

    import click
    import typer

    from fedviews.cli import app, plain_help

    def texts(command: click.Command) -> list[str]:
        own = [command.help or "", command.short_help or ""]
        own += [getattr(p, "help", None) or "" for p in command.params]
        subs = command.commands.values() if isinstance(command, click.Group) else ()
        return own + [t for sub in subs for t in texts(sub)]

    assert any("``" in t for t in texts(typer.main.get_command(app)))  # what the source holds
    shown = texts(plain_help(typer.main.get_command(app)))
    assert len(shown) > 50 and not [t for t in shown if "`" in t]
    out = subprocess.run(
        [sys.executable, "-m", "fedviews", "run", "--help"], capture_output=True, text=True
    )
    assert "with a [federation] table) is run as fedviews launch:" in " ".join(out.stdout.split())


def test_a_help_paragraph_is_one_line_that_the_terminal_wraps():
    """A command's help paragraphs reach the terminal as single lines (rich kept the
    docstrings' line breaks: a 200-column terminal showed lines cut at 90 columns)."""
    import click

    from fedviews.cli import app, plain_help

    def helps(command: click.Command) -> list[str]:
        subs = command.commands.values() if isinstance(command, click.Group) else ()
        return [command.help or ""] + [h for sub in subs for h in helps(sub)]

    shown = helps(plain_help(typer.main.get_command(app)))
    assert sum("\n\n" in h for h in shown) >= 5  # several paragraphs, kept apart
    cut = [p for h in shown for p in h.split("\n\n") if "\n" in p]
    assert not cut, cut


def test_a_table_note_is_printed_below_the_table_at_the_consoles_width(monkeypatch):
    """A note as the rich caption of a narrow table broke every few words."""
    import io

    from rich.console import Console

    import fedviews.cli as cli
    from fedviews.experiments import Table

    note = "positive = MMVFL better; supFL and supMVLFL are non-federated and see every label"
    out = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=out, width=120))
    cli._print_table(Table("t", ["a", "b"], [["x", 1.0]], note=note))
    assert out.getvalue().splitlines()[-1] == note


@pytest.mark.parametrize("preset", [None, "ACTIVE"])
def test_commands_let_openmp_threads_wait_passively(monkeypatch, preset):
    """Every command sets ``OMP_WAIT_POLICY=PASSIVE`` before torch loads (as ``reproduce`` and
    the test suite did already), unless the user set it: spinning threads made a run on a
    shared machine several times slower."""
    from typer.testing import CliRunner

    from fedviews.cli import app

    if preset is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", preset)
    r = CliRunner().invoke(app, ["datasets", "list"])
    assert r.exit_code == 0, r.output
    assert os.environ["OMP_WAIT_POLICY"] == (preset or "PASSIVE")


def test_version_and_short_help():
    """``fedviews --version`` and ``-h`` (a newcomer tried both: "No such option")."""
    from typer.testing import CliRunner

    from fedviews import __version__
    from fedviews.cli import app

    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"fedviews {__version__}"
    for args in (["-h"], ["run", "-h"]):
        r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
        assert r.exit_code == 0 and "Usage: fedviews" in r.output, r.output
