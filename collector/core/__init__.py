"""The judging core: spans in, decided traces out to every sink.

`judging_core.JudgingCore` holds the intake queue, the tail-based assembly
(`assembly.Assembly`, bounded by `assembly.AssemblySettings`) and the worker thread that
judges each trace once it is due and hands each step (`decisions.Decisions`) to the sinks
(`decisions.VerdictSink`); `metrics` counts the pipeline's health and observes every
verdict; `processor.BudgetSpanProcessor` runs a core inside any process as an OTel SDK
span processor. Submodules are imported directly, so that `spanbudget --help` stays light.
"""
