"""`spanbudget check`'s inputs: the trace files a command line names."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["expand_paths"]


def expand_paths(paths: Iterable[Path]) -> list[Path]:
    """Files as given; a directory stands for the files directly inside it, sorted."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.is_file()))
        else:
            files.append(path)
    return files
