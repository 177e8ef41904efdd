"""Where the package's modules lie: pyproject.toml's `[tool.setuptools.package-dir]` maps
each folder at the repository's top to its import name (`collector/` is
`spanbudget.collector`). Tests that walk the package read the map here rather than
`spanbudget.__path__`, which an editable install points at `spanbudget/` alone."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

__all__ = ["REPO", "copy_sources", "folders", "lay_out", "module_files", "shipped"]

REPO = Path(__file__).resolve().parents[2]


def _tool() -> dict[str, dict[str, dict[str, str]]]:
    tool: dict[str, dict[str, dict[str, str]]] = tomllib.loads(
        (REPO / "pyproject.toml").read_text()
    )["tool"]
    return tool


def folders() -> dict[str, str]:
    """Import name -> folder, e.g. `spanbudget.collector` -> `collector`."""
    return dict(_tool()["setuptools"]["package-dir"])


def shipped() -> dict[str, str]:
    """The files the package ships from elsewhere: name in `spanbudget/` -> repo path."""
    return dict(_tool()["spanbudget"]["shipped"])


def module_files(suffixes: tuple[str, ...] = (".py",)) -> dict[str, Path]:
    """Every module of the package by its import name (`spanbudget.collector.judging`
    for its `__init__.py`), with the file that holds it."""
    found: dict[str, Path] = {}
    for name, folder in folders().items():
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in suffixes or "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([name, *parts])] = path
    return found


def lay_out(dest: Path) -> Path:
    """The package's modules copied into `dest/spanbudget/...` as a wheel lays them out, for
    tools that find a package by its folders (grimp, import-linter); returns `dest`."""
    for name, folder in sorted(folders().items()):
        target = dest.joinpath(*name.split("."))
        shutil.copytree(
            REPO / folder,
            target,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.c"),
        )
    return dest


def copy_sources(to: Path) -> Path:
    """What a clean clone has of what the wheel is built from: a checkout's `build/` holds
    the modules of earlier builds, which setuptools would put in the wheel again."""
    to.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.py", "README.md", *shipped().values()):
        (to / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, to / name)
    for folder in folders().values():
        shutil.copytree(
            REPO / folder, to / folder, ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__")
        )
    return to
