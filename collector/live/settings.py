"""Settings of the live budget collector: CLI options, then `SPANBUDGET_COLLECTOR_*`, then
defaults, nested by concern.

Built once at start-up and read once, by `pipeline.assemble`, which hands each part its
group: `.intake` (the OTLP receiver's limits), `.assembly` (tail-based assembly),
`.store` (the verdict and span stores), `.forward`, `.alerts`, `.pull` (Jaeger) and
`.engine` (the engine's metrics). The groups are defined beside the parts that read them.

Every setting keeps one flat name, the same in the environment and in the options:
`SPANBUDGET_COLLECTOR_FORWARD_QUEUE_SPANS` sets `.forward.queue_spans`, and
`CollectorSettings.from_flat(forward_queue_spans=...)` does too. A field's flat name is its
`validation_alias`, else its name. Nothing reads the environment at import time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from spanbudget.common.serving import parse_listen

from ..core.assembly import AssemblySettings
from ..intake.settings import IntakeSettings, PullSettings
from ..sinks.settings import AlertsSettings, ForwardSettings, StoreSettings

__all__ = ["ENV_PREFIX", "CollectorSettings", "EngineMetricsSettings"]

ENV_PREFIX = "SPANBUDGET_COLLECTOR_"


class EngineMetricsSettings(BaseModel):
    """The engine's Prometheus metrics (vLLM's /metrics): its state around each request's
    arrival goes into the verdict (waiting and running requests, KV cache use)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    url: str | None = Field(default=None, validation_alias="engine_metrics")
    every_seconds: float = Field(default=1.0, gt=0, validation_alias="engine_metrics_every_seconds")

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError(
                f"must be an http(s) URL, e.g. http://127.0.0.1:8000/metrics: {value!r}"
            )
        return value


class CollectorSettings(BaseSettings):
    """Every bound and knob of the collector, validated once."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="forbid")

    listen: str = "127.0.0.1:4318"
    budget_path: Path | None = None  # None: ./budget.yaml, else the packaged default
    # Required to read: the web UI, /api/* (Bearer, or HTTP Basic with it as the password).
    # None: the receiver token when one is set, else open. /healthz, /readyz, /metrics and
    # /static/* stay open (probes, Prometheus, the pages' own script and stylesheet).
    api_token: str | None = None
    public_url: str | None = None  # this collector's address in links; default from `listen`
    jaeger_ui: str | None = None  # Jaeger's UI, for trace links in alerts and the web UI
    jaeger_url: str | None = None  # Jaeger's query API: spans of traces no longer kept here

    intake: IntakeSettings = IntakeSettings()
    assembly: AssemblySettings = AssemblySettings()
    store: StoreSettings = StoreSettings()
    forward: ForwardSettings = ForwardSettings()
    alerts: AlertsSettings = AlertsSettings()
    pull: PullSettings = PullSettings()
    engine: EngineMetricsSettings = EngineMetricsSettings()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, _FlatEnvironment(settings_cls))

    @classmethod
    def flat_names(cls) -> dict[str, tuple[str, ...]]:
        """Each setting's flat name -> where it sits: `{"forward_queue_spans": ("forward",
        "queue_spans"), "listen": ("listen",), ...}`."""
        return dict(_flat_fields(cls.model_fields))

    @classmethod
    def from_flat(cls, **values: Any) -> CollectorSettings:
        """Settings from flat names (`decision_wait_seconds=0.1, forward_otlp=URL`), as
        the CLI gives its options; what is not given comes from the environment."""
        return cls(**nest(values))

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @model_validator(mode="after")
    def _check_pull(self) -> CollectorSettings:
        if self.pull.jaeger is not None and not self.pull.service:
            raise ValueError("--pull-jaeger needs --pull-service: the service to search for")
        return self

    @property
    def public_base_url(self) -> str:
        """This collector's address in links: `public_url`, else the `listen` address."""
        if self.public_url:
            return self.public_url
        host, port = parse_listen(self.listen)
        return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    @property
    def read_token(self) -> str | None:
        """The token the web UI and the API ask for: `api_token`, else the receiver's."""
        return self.api_token or self.intake.receiver_token

    @property
    def alert_state_path(self) -> Path | None:
        """The alert rules' saved state (`alerts.persist`): `verdicts.alerts.json`."""
        return self.store.beside("alerts.json")

    @property
    def journal_path(self) -> Path | None:
        """The durable intake's journal (`intake.journal`), the directory `verdicts.intake`;
        None when it is off or the store is in memory."""
        return self.store.beside("intake") if self.intake.journal else None


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Flat names to the nested shape `CollectorSettings` takes; unknown names go through
    as they are, so that validation names them."""
    where = CollectorSettings.flat_names()
    nested: dict[str, Any] = {}
    for name, value in flat.items():
        *groups, field = where.get(name, (name,))
        target = nested
        for group in groups:
            target = target.setdefault(group, {})
        target[field] = value
    return nested


def _flat_fields(
    fields: Mapping[str, FieldInfo], path: tuple[str, ...] = ()
) -> Iterator[tuple[str, tuple[str, ...]]]:
    for name, info in fields.items():
        group = info.annotation
        if isinstance(group, type) and issubclass(group, BaseModel):
            yield from _flat_fields(group.model_fields, (*path, name))
        else:
            alias = info.validation_alias
            yield (alias if isinstance(alias, str) else name), (*path, name)


class _FlatEnvironment(PydanticBaseSettingsSource):
    """`SPANBUDGET_COLLECTOR_<FLAT NAME>` for every setting, nested (case-insensitive, as
    pydantic-settings reads names by default)."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is read in __call__

    def __call__(self) -> dict[str, Any]:
        environ = {key.upper(): value for key, value in os.environ.items()}
        found = {
            flat: environ[ENV_PREFIX + flat.upper()]
            for flat in CollectorSettings.flat_names()
            if ENV_PREFIX + flat.upper() in environ
        }
        return nest(found)
