"""`spanbudget budget suggest`: a budget proposed from observed traces (`budget`), with its
stages found in the span tree's structure when no preset names them (`stages`)."""

from .budget import NoTracesError, Suggestion, render, suggest

__all__ = ["NoTracesError", "Suggestion", "render", "suggest"]
