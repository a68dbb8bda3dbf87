"""The one-line error of every command (fedviews._console.friendly)."""

from __future__ import annotations

import pytest
import typer

from fedviews._console import friendly
from fedviews.errors import ConfigError


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
