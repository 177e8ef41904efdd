"""Every command is documented: in the README, and with an example in its own --help."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from spanbudget.app.cli import app
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[1]


def _name(command: typer.models.CommandInfo) -> str:
    return command.name or (command.callback.__name__ if command.callback else "")


# Every command, groups' commands as "group command".
COMMANDS = sorted(
    [_name(command) for command in app.registered_commands]
    + [
        f"{group.name} {_name(command)}"
        for group in app.registered_groups
        if group.typer_instance
        for command in group.typer_instance.registered_commands
    ]
    # A group that runs without a subcommand (`spanbudget engine`) is a command too.
    + [
        group.name or ""
        for group in app.registered_groups
        if group.typer_instance
        and group.typer_instance.registered_callback
        and group.typer_instance.registered_callback.invoke_without_command
    ]
)


def test_every_command_is_registered() -> None:
    assert (
        sorted(
            [
                "check",
                "compare",
                "whatif",
                "collect",
                "serve",
                "ingest",
                "engine",
                "engine calibrate",
                "engine predict",
                "loadtest",
                "report",
                "demo",
                "budget init",
                "budget suggest",
            ]
        )
        == COMMANDS
    )


@pytest.mark.parametrize("name", COMMANDS)
def test_command_is_in_the_readme_and_has_an_example(name: str) -> None:
    readme = (REPO / "README.md").read_text()
    assert f"`spanbudget {name}" in readme
    result = CliRunner().invoke(app, [*name.split(), "--help"])
    assert result.exit_code == 0
    assert "Example" in result.stdout
    assert f"spanbudget {name}" in result.stdout


def test_readme_opens_with_the_two_commands() -> None:
    head = (REPO / "README.md").read_text()[:1500]
    assert "make demo" in head
    assert "make test" in head


def test_an_example_continued_on_the_next_line_keeps_its_backslash() -> None:
    # A backslash-newline in a docstring is Python's line continuation: it vanishes, and
    # the example's next line runs into this one after a gap of spaces.
    commands = [*app.registered_commands]
    for group in app.registered_groups:
        if group.typer_instance:
            commands += group.typer_instance.registered_commands
    for command in commands:
        doc = command.callback.__doc__ if command.callback else None
        for line in (doc or "").splitlines():
            assert not re.search(r"\S {4,}--", line), f"{_name(command)}: {line}"
