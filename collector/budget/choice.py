"""The budget a command was asked for: `--preset NAME`, or `--budget FILE` found as every
command finds it (`source.find_budget`), loaded, with one line saying which it took."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import CollectorError
from .loader import BudgetError, LoadedBudget, load_budget, load_preset
from .presets import UnknownPresetError, preset_path
from .source import find_budget

__all__ = ["BudgetChoiceError", "ChosenBudget", "choose_budget"]


class BudgetChoiceError(CollectorError, ValueError):
    """No budget to judge with: both given, an unknown preset, a file that does not load.
    `str()` is the message for people (a `BudgetError`'s, placed at its line)."""


@dataclass(frozen=True, slots=True)
class ChosenBudget:
    loaded: LoadedBudget
    described: str  # `budget: preset vllm (…)` or `budget: budget.yaml (found in …)`


def choose_budget(budget: Path | None, preset: str | None) -> ChosenBudget:
    """The preset when one is named, else the budget file; raises `BudgetChoiceError`."""
    try:
        if preset is None:
            source = find_budget(budget)
            return ChosenBudget(load_budget(source.path), source.describe())
        if budget is not None:
            raise BudgetChoiceError(
                "give --budget or --preset, not both (a budget file can say preset:)"
            )
        described = f"budget: preset {preset} ({preset_path(preset)})"
        return ChosenBudget(load_preset(preset), described)
    except (BudgetError, UnknownPresetError) as exc:
        raise BudgetChoiceError(str(exc)) from None
