"""What the intake is told: the OTLP receiver's limits, and the pull from Jaeger.

Part of `spanbudget collect`'s settings (`live.settings.CollectorSettings.intake` and
`.pull`); each field's `validation_alias` is its flat name, as in the environment
(`SPANBUDGET_COLLECTOR_INTAKE_QUEUE_SPANS`) and in the CLI's options.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from spanbudget.common.serving import parse_listen

__all__ = ["GRPC_OFF", "IntakeSettings", "PullSettings"]

GRPC_OFF = "off"

_GROUP = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class IntakeSettings(BaseModel):
    """The OTLP receiver's limits, each checked before the next costs anything."""

    model_config = _GROUP

    receiver_token: str | None = None  # required as `Authorization: Bearer` on /v1/traces
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)  # after decompression
    max_span_bytes: int = Field(default=64 * 1024, gt=0)  # one encoded span, attributes included
    queue_spans: int = Field(default=50_000, gt=0, validation_alias="intake_queue_spans")
    retry_after_seconds: int = Field(default=1, ge=0)
    header_timeout_seconds: float = Field(default=10.0, gt=0)  # request line and headers
    body_timeout_seconds: float = Field(default=30.0, gt=0)  # a whole body, once headers are in
    journal: bool = True  # accepted bodies kept on disk until judged: kill -9 loses none
    # After a start that took spans back from the journal, no trace is judged as complete
    # for this long (each within its max trace age): the senders retry what the restart
    # refused, each request on its own back-off, so a root may come before its children.
    # At least the senders' longest retry interval (the Collector's exporters: 30 s).
    replay_wait_seconds: float = Field(default=30.0, ge=0)
    # Threads decoding bodies off the event loop.
    decoders: int = Field(default=2, gt=0, validation_alias="intake_decoders")
    # OTLP/gRPC beside OTLP/HTTP: HOST:PORT, or `off`. Left at its default, a port taken
    # is a warning (OTLP/HTTP goes on); given, it is an error.
    grpc_listen: str = "127.0.0.1:4317"
    grpc_tls_cert: Path | None = None  # PEM: with grpc_tls_key, the gRPC listener is TLS
    grpc_tls_key: Path | None = None

    @field_validator("grpc_listen")
    @classmethod
    def _check_grpc_listen(cls, value: str) -> str:
        if value.strip().lower() == GRPC_OFF:
            return GRPC_OFF
        parse_listen(value)
        return value

    @model_validator(mode="after")
    def _check_tls(self) -> IntakeSettings:
        if (self.grpc_tls_cert is None) != (self.grpc_tls_key is None):
            raise ValueError("--grpc-tls-cert and --grpc-tls-key go together")
        return self

    @property
    def grpc_on(self) -> bool:
        return self.grpc_listen != GRPC_OFF

    @property
    def grpc_listen_given(self) -> bool:
        """Whether the gRPC address was asked for (option or environment), not defaulted."""
        return "grpc_listen" in self.model_fields_set


class PullSettings(BaseModel):
    """One view over many collectors (`intake.jaeger_pull`): judge what they sent to Jaeger."""

    model_config = _GROUP

    # Jaeger's query address (API v3), or with /api/traces.
    jaeger: str | None = Field(default=None, validation_alias="pull_jaeger")
    service: str | None = Field(default=None, validation_alias="pull_service")  # whose traces
    every_seconds: float = Field(default=5.0, gt=0, validation_alias="pull_every_seconds")
    # How far back each search looks.
    window_seconds: float = Field(default=300.0, gt=0, validation_alias="pull_window_seconds")
    # A trace's last span ended at least this long ago.
    settle_seconds: float = Field(default=5.0, ge=0, validation_alias="pull_settle_seconds")
    limit: int = Field(default=1_000, gt=0, validation_alias="pull_limit")  # traces per search
