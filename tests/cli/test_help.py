"""Every command's --help reads as written: no words eaten as markup, no value shown for a flag."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from cli.main import app

COMMANDS = sorted(c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_plain_and_whole(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.output  # a flag takes no value
    assert "Usage: " in result.output and "Show this message and exit." in result.output


def test_brackets_survive() -> None:
    train = CliRunner().invoke(app, ["train", "--help"], env={"COLUMNS": "120"}).output
    assert "override [train] epochs" in train
    imported = CliRunner().invoke(app, ["import-bundle", "--help"], env={"COLUMNS": "120"}).output
    assert "[data] and [train]; the [model]" in " ".join(imported.split())
