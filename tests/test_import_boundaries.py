"""The package's two sides stay apart: `spanbudget.service` (the reference path) and
`spanbudget.collector` (what measures it) never import each other, and the shared leaf
modules both use import nothing of spanbudget's (DESIGN: layout)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "spanbudget"  # the shared leaf, and links to the two sides
LEAVES = ("errors.py", "semconv.py", "serving.py", "telemetry.py")


def _imports(path: Path) -> set[str]:
    """Every module `path` imports, at any depth (function bodies, TYPE_CHECKING blocks)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _offending(side: str, other: str) -> list[str]:
    found = []
    for path in sorted((REPO / side).rglob("*.py")):
        bad = sorted(
            name
            for name in _imports(path)
            if name == f"spanbudget.{other}" or name.startswith(f"spanbudget.{other}.")
        )
        found += [f"{path.relative_to(REPO)}: {name}" for name in bad]
    return found


@pytest.mark.parametrize(("side", "other"), [("service", "collector"), ("collector", "service")])
def test_one_side_never_imports_the_other(side: str, other: str) -> None:
    assert _offending(side, other) == []


@pytest.mark.parametrize("leaf", LEAVES)
def test_the_shared_leaf_imports_nothing_of_spanbudget_but_the_leaf(leaf: str) -> None:
    leaves = {f"spanbudget.{name.removesuffix('.py')}" for name in LEAVES}
    own = sorted(
        name
        for name in _imports(PACKAGE / leaf)
        if (name == "spanbudget" or name.startswith("spanbudget."))
        and name.rsplit(".", 1)[0] not in leaves
        and name not in leaves
    )
    assert own == []


def test_the_walk_sees_imports_inside_functions(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from spanbudget.collector.check import run\n")
    assert "spanbudget.collector.check" in _imports(module)


# The collector's rooms from the bottom up: a room imports only from rooms below it, so no
# arrow runs back up and the rooms can be read in this order. The web UI's run page (live)
# renders the load tester's per-stage report; the load tester reaches the collector over
# HTTP only. The SVG charts (charts) are drawn alike by the web UI and by report.html.
COLLECTOR_LAYERS = (
    {"errors", "spans", "semconv", "durations", "links"},
    {"budget", "readers"},
    {"judging"},
    {"stats", "charts", "context"},
    {"check", "suggest", "alerts", "loadtest"},
    {"compare", "whatif"},
    {"live"},
    {"cli"},
)


def _room_imports() -> dict[str, set[str]]:
    """For each room of the collector (a package or a top-level module), the other rooms
    it imports."""
    rooms: dict[str, set[str]] = {}
    for path in sorted((REPO / "collector").rglob("*.py")):
        room = path.relative_to(REPO / "collector").parts[0].removesuffix(".py")
        imported = rooms.setdefault(room, set())
        for name in _imports(path):
            if name.startswith("spanbudget.collector."):
                other = name.split(".")[2]
                if other != room:
                    imported.add(other)
    rooms.pop("__init__", None)
    return rooms


def test_every_collector_room_imports_only_rooms_below_it() -> None:
    level = {room: n for n, layer in enumerate(COLLECTOR_LAYERS) for room in layer}
    rooms = _room_imports()
    assert set(rooms) == set(level), "a room is missing from COLLECTOR_LAYERS"
    upward = sorted(
        f"{room} -> {other}"
        for room, imported in rooms.items()
        for other in imported
        if level[other] >= level[room]
    )
    assert upward == []
