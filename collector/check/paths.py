"""`spanbudget check`'s inputs: the trace files a command line names, `-` for stdin.

A file that cannot be read or parsed is reported and skipped, so that one bad file in a
folder does not hide the verdicts of the rest; the command exits 2 at the end.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..readers import TraceReadError, parse_traces, read_traces
from ..spans import Span

__all__ = ["STDIN", "Inputs", "expand_paths", "read_inputs"]

STDIN = Path("-")  # what a command line writes for standard input


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the files directly inside it, sorted."""
    files: list[Path] = []
    for path in paths:
        if path != STDIN and path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file()))
        else:
            files.append(path)
    return files


@dataclass
class Inputs:
    """Every span read, and one message per input that could not be read."""

    spans: list[Span] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    read: int = 0  # inputs read whole


def read_inputs(paths: Iterable[Path], stdin: BinaryIO) -> Inputs:
    """The spans of every file (folders expanded; `-` is `stdin`, read once)."""
    inputs = Inputs()
    stdin_read = False
    for path in expand_paths(paths):
        try:
            if path == STDIN:
                if stdin_read:
                    continue
                stdin_read = True
                spans = parse_traces(stdin.read(), "<stdin>")
            else:
                spans = read_traces(path)
        except TraceReadError as exc:
            inputs.problems.append(str(exc))
            continue
        inputs.spans.extend(spans)
        inputs.read += 1
    return inputs
