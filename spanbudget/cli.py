"""The `spanbudget` command: a thin composition root over the `service` and `collector` CLIs.

Each command lives next to the code it drives and keeps heavy imports (torch, the
tokenizer, Qdrant) inside its body, so `spanbudget --help` stays fast.
"""

from __future__ import annotations

import importlib

import typer

__all__ = ["app", "main"]

# (module, function names): every function becomes the command of the same name.
COMMAND_MODULES: list[tuple[str, list[str]]] = [
    ("collector.cli", ["check"]),
]

app = typer.Typer(
    name="spanbudget",
    help="End-to-end latency budget tracer for LLM request paths, on OpenTelemetry.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
)


@app.callback()
def _root() -> None:
    """End-to-end latency budget tracer for LLM request paths, on OpenTelemetry."""


for module_name, names in COMMAND_MODULES:
    module = importlib.import_module(module_name)
    for name in names:
        app.command(name)(getattr(module, name))


def main() -> None:
    app()
