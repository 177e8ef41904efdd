"""The live budget collector: OTLP intake, tail-based assembly, verdict store, metrics, forwarding.

`spanbudget collect` (`cli.py`) runs it; `processor.BudgetSpanProcessor` gives the same
verdicts in-process. Submodules are imported directly so `spanbudget --help` stays light.
"""
