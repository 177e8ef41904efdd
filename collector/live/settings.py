"""Settings of the live budget collector: CLI options, then `SPANBUDGET_COLLECTOR_*`, then defaults.

Built once at start-up (`CollectorSettings(...)`) and passed to every part; nothing reads
the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from spanbudget.collector.live.forward_policy import parse_keep
from spanbudget.serving import parse_listen

__all__ = ["CollectorSettings"]


class CollectorSettings(BaseSettings):
    """Every bound and knob of the collector, validated once."""

    model_config = SettingsConfigDict(env_prefix="SPANBUDGET_COLLECTOR_", frozen=True)

    listen: str = "127.0.0.1:4318"
    budget_path: Path | None = None  # None: ./budget.yaml, else the packaged default
    db_path: Path = Path("data/verdicts.db")
    forward_otlp: str | None = None
    alertmanager: str | None = None
    webhook: str | None = None
    receiver_token: str | None = None
    # Required to read: the web UI, /api/* (Bearer, or HTTP Basic with it as the password).
    # None: the receiver token when one is set, else open. /healthz, /readyz, /metrics and
    # /static/* stay open (probes, Prometheus, the pages' own script and stylesheet).
    api_token: str | None = None

    # Alerts (DESIGN §8).
    alert_window_scale: float = Field(default=1.0, gt=0)  # every window, `for` and hold
    alert_min_traces: int = Field(default=10, ge=1)  # judged traces in each of a rule's windows
    alert_min_overruns: int = Field(default=5, ge=1)  # traces over the limit in each window
    alert_resend_seconds: float = Field(default=60.0, gt=0)
    alert_tick_seconds: float = Field(default=1.0, gt=0)  # rules evaluated without new verdicts
    public_url: str | None = None  # this collector's address in links; default from `listen`
    jaeger_ui: str | None = None  # Jaeger's UI, for trace links in alerts

    # Intake (request path).
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)  # after decompression
    max_span_bytes: int = Field(default=64 * 1024, gt=0)  # one encoded span, attributes included
    intake_queue_spans: int = Field(default=50_000, gt=0)
    retry_after_seconds: int = Field(default=1, ge=0)
    header_timeout_seconds: float = Field(default=10.0, gt=0)  # request line and headers
    body_timeout_seconds: float = Field(default=30.0, gt=0)  # a whole body, once headers are in
    journal: bool = True  # accepted bodies kept on disk until judged: kill -9 loses none
    intake_decoders: int = Field(default=2, gt=0)  # threads decoding bodies off the event loop

    # Tail-based assembly.
    decision_wait_seconds: float = Field(default=2.0, ge=0)
    max_trace_age_seconds: float = Field(default=30.0, gt=0)
    max_traces: int = Field(default=50_000, gt=0)
    max_spans_per_trace: int = Field(default=1_000, gt=0)
    max_buffered_spans: int = Field(default=500_000, gt=0)  # all held traces together
    decided_memory: int = Field(default=200_000, gt=0)  # trace ids remembered to spot late spans
    # Late spans within this long after a trace's verdict revise it (0: never); the decided
    # traces' spans are kept that long, at most revise_spans spans in all.
    revise_seconds: float = Field(default=60.0, ge=0)
    revise_spans: int = Field(default=100_000, ge=0)

    # Verdict store.
    retention_seconds: float = Field(default=7 * 86400.0, gt=0)
    retention_count: int = Field(default=1_000_000, gt=0)

    # Spans of judged traces, for the web UI's waterfall (same age limit as the verdicts).
    spans_db_path: Path | None = None  # None: spans.db beside db_path
    span_retention_count: int = Field(default=100_000, ge=0)  # traces; 0 keeps none
    span_retention_bytes: int = Field(default=256 * 1024 * 1024, gt=0)  # compressed bodies
    jaeger_url: str | None = None  # Jaeger's query API: spans of traces no longer kept here

    # Forwarding. With neither of the first two set, every trace is forwarded.
    forward_keep: str | None = None  # verdict statuses forwarded whole, e.g. "overrun,error"
    forward_sample: float | None = Field(default=None, ge=0, le=1)  # share of the rest
    forward_queue_spans: int = Field(default=100_000, gt=0)
    forward_batch_spans: int = Field(default=2_048, gt=0)
    forward_timeout_seconds: float = Field(default=10.0, gt=0)
    forward_backoff_seconds: float = Field(default=0.5, gt=0)
    forward_backoff_max_seconds: float = Field(default=30.0, gt=0)
    # None: a batch is retried until delivered; spans are dropped only at the queue's bound.
    forward_max_elapsed_seconds: float | None = Field(default=None, gt=0)
    shutdown_drain_seconds: float = Field(default=5.0, ge=0)

    # The engine's Prometheus metrics (vLLM's /metrics): its state around each request's
    # arrival goes into the verdict (waiting, running, KV cache), beside its prompt tokens.
    engine_metrics: str | None = None
    engine_metrics_every_seconds: float = Field(default=1.0, gt=0)

    # One view over many collectors (live/jaeger_pull.py): judge what they sent to Jaeger.
    pull_jaeger: str | None = None  # Jaeger's query address (API v3), or with /api/traces
    pull_service: str | None = None  # whose traces to search for
    pull_every_seconds: float = Field(default=5.0, gt=0)
    pull_window_seconds: float = Field(default=300.0, gt=0)  # how far back each search looks
    pull_settle_seconds: float = Field(default=5.0, ge=0)  # a trace's last span ended as long ago
    pull_limit: int = Field(default=1_000, gt=0)  # traces per search

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("engine_metrics")
    @classmethod
    def _check_engine_metrics(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"must be an http(s) URL, e.g. http://127.0.0.1:8000/metrics: {value!r}"
            )
        return value

    @field_validator("forward_otlp")
    @classmethod
    def _check_forward(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL, e.g. http://127.0.0.1:4318: {value!r}")
        return value

    @model_validator(mode="after")
    def _check_pull(self) -> CollectorSettings:
        if self.pull_jaeger is not None and not self.pull_service:
            raise ValueError("--pull-jaeger needs --pull-service: the service to search for")
        return self

    @field_validator("forward_keep")
    @classmethod
    def _check_keep(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return ",".join(sorted(parse_keep(value)))

    @property
    def forward_keep_statuses(self) -> frozenset[str] | None:
        """The `--forward-keep` set, None when not given."""
        return None if self.forward_keep is None else parse_keep(self.forward_keep)

    @property
    def public_base_url(self) -> str:
        """This collector's address in links: `public_url`, else the `listen` address."""
        if self.public_url:
            return self.public_url
        host, port = parse_listen(self.listen)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def alert_state_path(self) -> Path | None:
        """The alert rules' saved state (`alerts.persist`), beside the verdict store and
        named after it (`verdicts.alerts.json`), so that collectors sharing a directory
        keep their own; None for a store in memory, which a restart does not keep either."""
        if str(self.db_path) == ":memory:":
            return None
        return self.db_path.with_name(f"{self.db_path.stem}.alerts.json")

    @property
    def read_token(self) -> str | None:
        """The token the web UI and the API ask for: `api_token`, else the receiver's."""
        return self.api_token or self.receiver_token

    @property
    def journal_path(self) -> Path | None:
        """The durable intake's journal (`live.journal`), beside the verdict store and
        named after it (`verdicts.intake.db`); None when it is off or the store is in
        memory."""
        if not self.journal or str(self.db_path) == ":memory:":
            return None
        return self.db_path.with_name(f"{self.db_path.stem}.intake.db")

    @property
    def spans_path(self) -> Path:
        return self.spans_db_path or self.db_path.with_name("spans.db")

    @property
    def forward_traces_url(self) -> str | None:
        """The OTLP/HTTP traces URL: a bare base URL gets `/v1/traces`, as OTel exporters do."""
        if self.forward_otlp is None:
            return None
        url = self.forward_otlp.rstrip("/")
        return url if url.endswith("/v1/traces") else f"{url}/v1/traces"
