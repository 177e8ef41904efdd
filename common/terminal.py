"""Console output that survives CI logs, pipes and files.

Off a terminal, rich would cut everything to 80 columns: tables shrink their columns and
truncate numbers (`550…`), and text is hard-wrapped mid-sentence. Commands print through
these helpers instead: off a terminal, text lines are never wrapped; everywhere, a table
is laid out at its natural width, even when that is wider than the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segments

__all__ = ["HELP_WIDTH", "make_console", "print_error", "print_notices", "print_wide"]

# Width of `--help` off a terminal: the examples in help texts fit on one line.
HELP_WIDTH = 120
_UNBOUNDED = 10_000


def make_console(*, stderr: bool = False) -> Console:
    """A console for a command's output (`stderr` for notices and errors)."""
    console = Console(stderr=stderr, highlight=False)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=_UNBOUNDED)


def print_wide(console: Console, renderable: RenderableType) -> None:
    """Print a table (or any renderable) at its natural width, never squeezed into the
    console's width: a line longer than the terminal wraps on screen, but no cell is cut."""
    natural = Measurement.get(console, console.options.update_width(_UNBOUNDED), renderable)
    width = max(natural.maximum, 1)
    if width <= console.width:
        console.print(renderable)
        return
    lines = console.render_lines(
        renderable, console.options.update_width(width), pad=False, new_lines=True
    )
    console.print(Segments(segment for line in lines for segment in line), crop=False)


def print_error(message: str, *, label: str = "error") -> None:
    """`error: message` on stderr; the message is text, never markup (paths, `[extra]`)."""
    make_console(stderr=True).print(f"[bold red]{label}:[/] {escape(message)}")


def print_notices(described: str, warnings: Sequence[str] = ()) -> None:
    """What a command is about to use (`budget: …`) and its warnings, on stderr, as text."""
    notices = make_console(stderr=True)
    notices.print(escape(described), highlight=False)
    for warning in warnings:
        notices.print(f"[yellow]warning:[/] {escape(warning)}")
