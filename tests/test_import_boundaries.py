"""The package's walls, held by import-linter's contracts in pyproject.toml: the reference
path (`spanbudget.service`) and what measures it (`spanbudget.collector`) never import
each other, the shared leaf (`spanbudget.common`) imports nothing else of spanbudget's,
the command (`spanbudget.app`) sits on top, and the collector's rooms form layers that
no import runs back up (DESIGN: layout).

Both tools find a package by its folders, as a wheel lays them out: the tests copy the
package's modules so (`tests.support.layout.lay_out`) and build the graph from the copy,
with grimp, which import-linter uses.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.layout import REPO, lay_out, module_files


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return lay_out(tmp_path_factory.mktemp("layout"))


def _python(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """This interpreter in `root`, with the package found there first (before the
    editable install's, which this process has imported already)."""
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _lint_imports(root: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """import-linter over the package found in `root`, with `config`'s contracts."""
    lint = Path(sys.executable).with_name("lint-imports")  # import-linter's command
    return subprocess.run(
        [str(lint), str(config), "--no-cache"],
        env={**os.environ, "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )


_GRAPH = """
import json, grimp
graph = grimp.build_graph("spanbudget", cache_dir=None)
print(json.dumps({m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}))
"""


def test_the_contracts_hold(laid_out: Path) -> None:
    result = _lint_imports(laid_out, REPO / "pyproject.toml")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_a_broken_wall_is_found(laid_out: Path, tmp_path: Path) -> None:
    """The contracts would catch a collector module reaching into the reference path, and
    a room of the collector importing one above it."""
    broken = lay_out(tmp_path / "broken")
    judging = broken / "spanbudget" / "collector" / "judging" / "evaluate.py"
    wrong = "from ...service import errors as _e\nfrom ..live import app as _a\n"
    judging.write_text(judging.read_text() + "\n" + wrong)
    result = _lint_imports(broken, REPO / "pyproject.toml")
    assert result.returncode == 1
    assert "spanbudget.collector.judging.evaluate -> spanbudget.service.errors" in result.stdout
    assert "spanbudget.collector.judging.evaluate -> spanbudget.collector.live.app" in result.stdout


def _imported(name: str, path: Path, modules: set[str]) -> set[str]:
    """The spanbudget modules that module `name`'s source imports, at any depth, relative
    ones made absolute: `from .x import y` is `x.y` where that is a module, else `x`."""
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *(node.module or "").split(".")]).rstrip(".")
            else:
                module = node.module or ""
            if module.split(".")[0] == "spanbudget":
                for alias in node.names:
                    child = f"{module}.{alias.name}"
                    found.add(child if child in modules else module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "spanbudget"}
    return found


def test_a_graph_built_from_the_files_resolves_every_import(laid_out: Path) -> None:
    """Every import of every module is an arrow of grimp's graph to a module that exists:
    relative imports name files by their place (`from ..judging import verdict`), so the
    folders are the graph, whatever the package's import name."""
    built = _python(laid_out, "-c", _GRAPH)
    assert built.returncode == 0, built.stderr[-3000:]
    graph: dict[str, list[str]] = json.loads(built.stdout)
    files = module_files()
    assert set(graph) >= set(files)
    missing = []
    for name, path in files.items():
        for module in _imported(name, path, set(graph)):
            if module not in graph:
                missing.append(f"{name}: {module} is no module")
            elif module != name and module not in graph[name]:
                missing.append(f"{name} -> {module} is not in the graph")
    assert missing == []
    assert sum(len(arrows) for arrows in graph.values()) > 500
