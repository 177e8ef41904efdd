"""The budget: the allocation table's model (`model`), its file read strictly with every
error placed at a line (`loader`, `nodes`, `extends`), written back (`render`), found on
disk or packaged (`source`), and the instrumentation presets it may extend (`presets`).

Pure data and parsing; nothing here judges a trace (that is `spanbudget.collector.judging`).
"""

from .loader import (
    BudgetError,
    LoadedBudget,
    load_budget,
    load_preset,
    parse_budget,
)
from .model import (
    DEFAULT_FIRST_TOKEN,
    Budget,
    FirstTokenMark,
    GlobError,
    Selector,
    Stage,
    WhenAbsent,
)
from .presets import UnknownPresetError, preset_names
from .source import BudgetSource, find_budget, packaged_budget

__all__ = [
    "DEFAULT_FIRST_TOKEN",
    "Budget",
    "BudgetError",
    "BudgetSource",
    "FirstTokenMark",
    "GlobError",
    "LoadedBudget",
    "Selector",
    "Stage",
    "UnknownPresetError",
    "WhenAbsent",
    "find_budget",
    "load_budget",
    "load_preset",
    "packaged_budget",
    "parse_budget",
    "preset_names",
]
