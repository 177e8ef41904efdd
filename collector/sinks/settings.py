"""What the sinks are told: the stores' places and retention, forwarding, the alerts.

Part of `spanbudget collect`'s settings (`live.settings.CollectorSettings.store`,
`.forward`, `.alerts`); each field's `validation_alias` is its flat name, as in the
environment (`SPANBUDGET_COLLECTOR_FORWARD_QUEUE_SPANS`) and in the CLI's options.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .forward_policy import parse_keep

__all__ = ["AlertsSettings", "ForwardSettings", "StoreSettings"]

_GROUP = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class StoreSettings(BaseModel):
    """The verdict store, and the spans of judged traces kept for the web UI's waterfall
    (same age limit as the verdicts)."""

    model_config = _GROUP

    db_path: Path = Path("data/verdicts.db")
    retention_seconds: float = Field(default=7 * 86400.0, gt=0)
    retention_count: int = Field(default=1_000_000, gt=0)
    spans_db_path: Path | None = None  # None: spans.db beside db_path
    span_retention_count: int = Field(default=100_000, ge=0)  # traces; 0 keeps none
    span_retention_bytes: int = Field(default=256 * 1024 * 1024, gt=0)  # compressed bodies

    @property
    def in_memory(self) -> bool:
        return str(self.db_path) == ":memory:"

    @property
    def spans_path(self) -> Path:
        return self.spans_db_path or self.db_path.with_name("spans.db")

    def beside(self, suffix: str) -> Path | None:
        """A file beside the verdict store and named after it (`verdicts.<suffix>`), so
        that collectors sharing a directory keep their own; None for a store in memory,
        which a restart does not keep either."""
        if self.in_memory:
            return None
        return self.db_path.with_name(f"{self.db_path.stem}.{suffix}")


class ForwardSettings(BaseModel):
    """Forwarding downstream. With neither `keep` nor `sample` set, every trace goes."""

    model_config = _GROUP

    otlp: str | None = Field(default=None, validation_alias="forward_otlp")
    # Verdict statuses forwarded whole, e.g. "overrun,error".
    keep: str | None = Field(default=None, validation_alias="forward_keep")
    # The share of the rest, chosen by trace id.
    sample: float | None = Field(default=None, ge=0, le=1, validation_alias="forward_sample")
    queue_spans: int = Field(default=100_000, gt=0, validation_alias="forward_queue_spans")
    batch_spans: int = Field(default=2_048, gt=0, validation_alias="forward_batch_spans")
    timeout_seconds: float = Field(default=10.0, gt=0, validation_alias="forward_timeout_seconds")
    backoff_seconds: float = Field(default=0.5, gt=0, validation_alias="forward_backoff_seconds")
    backoff_max_seconds: float = Field(
        default=30.0, gt=0, validation_alias="forward_backoff_max_seconds"
    )
    # None: a batch is retried until delivered; spans are dropped only at the queue's bound.
    max_elapsed_seconds: float | None = Field(
        default=None, gt=0, validation_alias="forward_max_elapsed_seconds"
    )
    shutdown_drain_seconds: float = Field(default=5.0, ge=0)

    @field_validator("otlp")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(f"must be an http(s) URL, e.g. http://127.0.0.1:4318: {value!r}")
        return value

    @field_validator("keep")
    @classmethod
    def _check_keep(cls, value: str | None) -> str | None:
        return None if value is None else ",".join(sorted(parse_keep(value)))

    @property
    def keep_statuses(self) -> frozenset[str] | None:
        """The `--forward-keep` set, None when not given."""
        return None if self.keep is None else parse_keep(self.keep)

    @property
    def traces_url(self) -> str | None:
        """The OTLP/HTTP traces URL: a bare base URL gets `/v1/traces`, as OTel exporters do."""
        if self.otlp is None:
            return None
        url = self.otlp.rstrip("/")
        return url if url.endswith("/v1/traces") else f"{url}/v1/traces"


class AlertsSettings(BaseModel):
    """The burn-rate alerts (DESIGN §8) and where they go besides the log."""

    model_config = _GROUP

    alertmanager: str | None = None
    webhook: str | None = None
    # Every window, `for` and hold times this.
    window_scale: float = Field(default=1.0, gt=0, validation_alias="alert_window_scale")
    # Judged traces in each of a rule's windows.
    min_traces: int = Field(default=10, ge=1, validation_alias="alert_min_traces")
    # Traces over the limit in each window.
    min_overruns: int = Field(default=5, ge=1, validation_alias="alert_min_overruns")
    resend_seconds: float = Field(default=60.0, gt=0, validation_alias="alert_resend_seconds")
    # Rules evaluated without new verdicts this often.
    tick_seconds: float = Field(default=1.0, gt=0, validation_alias="alert_tick_seconds")
