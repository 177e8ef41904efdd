"""What every command's edge shares: the `--format` choice, and a usage error that prints
one line and exits 2 (DESIGN §7: 2 is bad input or usage, for every command)."""

from __future__ import annotations

import enum

import typer

from .terminal import print_error

__all__ = ["OutputFormat", "usage_error"]


class OutputFormat(enum.Enum):
    """`--format`: a table for people, JSON for programs."""

    TABLE = "table"
    JSON = "json"


def usage_error(message: str) -> typer.Exit:
    """`error: message` on stderr, and the exit to raise: `raise usage_error(...)`."""
    print_error(message)
    return typer.Exit(2)
