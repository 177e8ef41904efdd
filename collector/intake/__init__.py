"""What brings spans to the judging core.

`http` serves OTLP/HTTP's `POST /v1/traces`; `receiver.Intake` takes an accepted export
body whatever carried it: `otlp` decodes it within the limits (`settings.IntakeSettings`),
`journal` keeps it on disk until its traces are decided, and `admission` refuses what
cannot fit before a body is read. `jaeger_pull` brings the traces other collectors sent
to Jaeger. Submodules are imported directly, so that `spanbudget --help` stays light.
"""
