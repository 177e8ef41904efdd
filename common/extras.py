"""Which optional parts of spanbudget are installed.

`pip install spanbudget` is the measuring side (check, collect, alerts, loadtest, report,
the web UI). The reference path (the RAG gateway, ingest, the engine emulator, the demo)
needs `pip install 'spanbudget[reference]'`: torch, sentence-transformers, Qdrant and a
tokenizer. The list of what an extra holds is read from the installed package's own
metadata, so pyproject.toml stays the one place that names it.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from urllib.parse import unquote, urlparse

import typer

from .errors import SpanbudgetError
from .terminal import print_error

__all__ = [
    "REFERENCE",
    "MissingExtra",
    "exit_unless_installed",
    "install_command",
    "missing_distributions",
    "require_extra",
]

REFERENCE = "reference"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")


class MissingExtra(SpanbudgetError):
    """A command needs an extra that is not installed; the message says what to install."""


def _declared(extra: str, requirements: list[str]) -> list[str]:
    names = []
    for requirement in requirements:
        spec, _, marker = requirement.partition(";")
        if extra in _EXTRA.findall(marker):
            found = _NAME.match(spec.strip())
            if found:
                names.append(found.group(0))
    return names


def missing_distributions(extra: str) -> list[str]:
    """The distributions `extra` declares that are not installed (empty: all present)."""
    try:
        requirements = metadata.requires("spanbudget") or []
    except metadata.PackageNotFoundError:
        return []  # run from a source tree without metadata: nothing to check against
    missing = []
    for name in _declared(extra, requirements):
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


def install_command(extra: str, direct_url: str | None = None) -> str:
    """The pip command that adds `extra` to this install, from where it came from: the
    wheel file or the checkout it was installed from (`direct_url`, PEP 610's
    direct_url.json, read from the installed metadata when not given), else the index."""
    if direct_url is None:
        try:
            direct_url = metadata.distribution("spanbudget").read_text("direct_url.json")
        except metadata.PackageNotFoundError:
            direct_url = None
    origin = json.loads(direct_url) if direct_url else {}
    url = urlparse(str(origin.get("url", "")))
    if url.scheme == "file":
        editable = origin.get("dir_info", {}).get("editable", False)
        return f"pip install {'-e ' if editable else ''}'{unquote(url.path)}[{extra}]'"
    if url.scheme:
        return f"pip install 'spanbudget[{extra}] @ {url.geturl()}'"
    return f"pip install 'spanbudget[{extra}]'"


def require_extra(command: str, extra: str = REFERENCE) -> None:
    """Raise MissingExtra naming the pip command when `command`'s extra is incomplete."""
    missing = missing_distributions(extra)
    if missing:
        raise MissingExtra(
            f"`spanbudget {command}` needs the {extra} extra: "
            f"{install_command(extra)} (missing: {', '.join(missing)})"
        )


def exit_unless_installed(command: str, extra: str = REFERENCE) -> None:
    """At the top of a command's body: exit 2, naming the pip command, when its extra is
    missing (its --help still works, since the body does not run for it)."""
    try:
        require_extra(command, extra)
    except MissingExtra as exc:
        print_error(str(exc))
        raise typer.Exit(2) from None
