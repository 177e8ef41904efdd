"""Which budget file a command uses: the one given, else `./budget.yaml`, else the default
that ships inside the package (the repository's `budget.yaml`).

Every command that takes `--budget` resolves it here once, at start-up, and says which
file it took, so that nobody is judged against a table they did not mean.
"""

from __future__ import annotations

import enum
import shutil
from dataclasses import dataclass
from pathlib import Path

from spanbudget.common.shipped import shipped_file

__all__ = [
    "BudgetSource",
    "Origin",
    "disaggregated_budget",
    "find_budget",
    "packaged_budget",
    "write_default_budget",
]

FILE_NAME = "budget.yaml"
DISAGGREGATED_FILE_NAME = "disaggregated-budget.yaml"  # examples/ in the repository


class Origin(enum.Enum):
    GIVEN = "given with --budget"
    WORKING_DIRECTORY = "found in the current directory"
    PACKAGED = "the packaged default"
    DISAGGREGATED = "packaged for a disaggregated engine, with a kv_transfer stage"


@dataclass(frozen=True, slots=True)
class BudgetSource:
    path: Path
    origin: Origin

    def describe(self) -> str:
        """One line for start-up logs: the file and why it was taken."""
        text = f"budget: {self.path} ({self.origin.value})"
        if self.origin is Origin.PACKAGED:
            text += "; `spanbudget budget init` writes a copy here to edit"
        return text


def packaged_budget(file_name: str = FILE_NAME) -> Path:
    """The default allocation table installed with the package (or another that ships)."""
    return shipped_file(file_name)


def disaggregated_budget() -> BudgetSource:
    """The reference path's table for an engine run as prefill and decode instances: the
    default's stages and a `kv_transfer` stage for the KV cache's move between them."""
    return BudgetSource(packaged_budget(DISAGGREGATED_FILE_NAME), Origin.DISAGGREGATED)


def find_budget(given: Path | None, *, cwd: Path | None = None) -> BudgetSource:
    """The file given; else `budget.yaml` in `cwd` (default: the working directory); else
    the packaged default. A given path is returned as it is, even when it does not exist,
    so that loading it reports the missing file by the name the user typed."""
    if given is not None:
        return BudgetSource(given, Origin.GIVEN)
    local = (cwd or Path.cwd()) / FILE_NAME
    if local.is_file():
        return BudgetSource(local if cwd else Path(FILE_NAME), Origin.WORKING_DIRECTORY)
    return BudgetSource(packaged_budget(), Origin.PACKAGED)


def write_default_budget(dest: Path, *, force: bool = False) -> Path:
    """Copy the packaged default to `dest` (a folder gets `budget.yaml` inside it).

    Raises FileExistsError rather than overwrite an edited table, unless `force`."""
    target = dest / FILE_NAME if dest.is_dir() else dest
    if target.exists() and not force:
        raise FileExistsError(target)
    shutil.copyfile(packaged_budget(), target)
    return target
