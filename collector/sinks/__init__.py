"""Where the judging core's decisions go, each a `core.decisions.VerdictSink`.

`store` keeps verdicts (SQLite, with the summaries the API serves), `span_store` the
judged traces' spans for the web UI, `forward` sends spans on annotated (which traces:
`forward_policy`), `alerting` feeds the burn-rate rules; `settings` holds what each is
told. Submodules are imported directly, so that `spanbudget --help` stays light.
"""
