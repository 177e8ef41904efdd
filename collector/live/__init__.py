"""The live budget collector, assembled: `spanbudget collect`.

`settings` reads the options and `SPANBUDGET_COLLECTOR_*` once, `pipeline.assemble` builds
the intake, the judging core and the sinks from them, `app` serves them over HTTP (the
intake, the verdict API, /metrics, the web UI), and `cli` runs it all until a signal.
`engine_metrics` scrapes the engine's state for the verdicts. Submodules are imported
directly, so that `spanbudget --help` stays light.
"""
