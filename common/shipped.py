"""Files the package ships that the repository keeps elsewhere: the default `budget.yaml`
at its top, the disaggregated engine's budget in examples/, Jaeger's config in deploy/.

A wheel carries them inside `spanbudget/` (setup.py copies them there, as
`[tool.spanbudget.shipped]` in pyproject.toml names them); an editable install of a
checkout reads the repository's own, so that an edit to `budget.yaml` is the default at
once.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

__all__ = ["shipped_file"]

_CHECKOUT = Path(__file__).resolve().parents[1]  # common/ sits at the repository's top


def shipped_file(name: str) -> Path:
    """The shipped file `name` (`budget.yaml`, `disaggregated-budget.yaml`, `jaeger.yaml`)."""
    inside = resources.files("spanbudget").joinpath(name)
    if inside.is_file():
        return Path(str(inside))
    pyproject = _CHECKOUT / "pyproject.toml"
    shipped: dict[str, str] = tomllib.loads(pyproject.read_text())["tool"]["spanbudget"]["shipped"]
    if name not in shipped:
        raise FileNotFoundError(f"{name} is not one of the files spanbudget ships: {shipped}")
    return _CHECKOUT / shipped[name]
