"""`spanbudget whatif`: scale or shift stages in real traces and judge them again.

`change` parses a stage change, `transform` moves a trace's spans by the what-if rule
(its docstring states it, in DESIGN §5's terms), `predict` judges each trace before and
after with the one evaluator and sums both sides up, `sources` reads traces from files
or a collector, `render` prints the result.
"""

from .change import StageChange, parse_change, parse_changes
from .predict import Pair, Side, WhatIf, change_trace, predict
from .render import blamed_next, render_json, render_table
from .sources import (
    Source,
    SourceError,
    from_collector_window,
    from_files,
    from_run,
)
from .transform import retime

__all__ = [
    "Pair",
    "Side",
    "Source",
    "SourceError",
    "StageChange",
    "WhatIf",
    "blamed_next",
    "change_trace",
    "from_collector_window",
    "from_files",
    "from_run",
    "parse_change",
    "parse_changes",
    "predict",
    "render_json",
    "render_table",
    "retime",
]
