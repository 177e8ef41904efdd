"""Budgets for spans that other instrumentations emit, shipped as package data.

Each `NAME.yaml` here is a whole budget file (DESIGN §4): the stage selectors and the
first-token marks of one instrumentation, with starting numbers. A budget file extends
one with `preset: NAME` and overrides what it needs; `spanbudget check --preset NAME`
judges against one as it is.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from ...errors import CollectorError

__all__ = ["UnknownPresetError", "preset_names", "preset_path"]

_SUFFIX = ".yaml"


class UnknownPresetError(CollectorError, KeyError):
    """A preset name that is not shipped; `str()` lists the known ones."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"unknown preset {self.name!r}; known: {', '.join(preset_names())}"


def _folder() -> Path:
    return Path(str(resources.files(__name__)))


def preset_names() -> tuple[str, ...]:
    """The shipped presets, sorted."""
    return tuple(sorted(p.name.removesuffix(_SUFFIX) for p in _folder().glob("*" + _SUFFIX)))


def preset_path(name: str) -> Path:
    """The file of preset `name`; raises `UnknownPresetError`."""
    if name not in preset_names():
        raise UnknownPresetError(name)
    return _folder() / (name + _SUFFIX)
