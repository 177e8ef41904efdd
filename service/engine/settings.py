"""Engine emulator settings, read once at start-up: flags first, then environment, then defaults."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from spanbudget.common.serving import parse_listen

from ..tokens import DEFAULT_TOKENIZER
from .faults import StallSchedule, parse_stall
from .presets import DEFAULT_PRESET, Preset, get_preset

__all__ = ["EngineSettings"]


class EngineSettings(BaseSettings):
    """Environment variables are `SPANBUDGET_ENGINE_<FIELD>`; faults also `SPANBUDGET_FAULTS`."""

    model_config = SettingsConfigDict(env_prefix="SPANBUDGET_ENGINE_", populate_by_name=True)

    listen: str = "127.0.0.1:8000"
    model: str | None = None  # served model name; the preset's model when unset
    preset: str = DEFAULT_PRESET
    preset_overrides: dict[str, Any] = Field(default_factory=dict)
    # A GPU profile (file or shipped name) and a config.json (file or shipped name) in
    # place of the preset's own; the preset still gives the engine limits.
    gpu_profile: str | None = None
    model_config_file: str | None = None
    faults: bool = Field(
        default=False,
        validation_alias=AliasChoices("faults", "SPANBUDGET_FAULTS", "SPANBUDGET_ENGINE_FAULTS"),
    )
    seed: int = 0
    tokenizer: str = DEFAULT_TOKENIZER
    output_min_tokens: int = Field(default=32, ge=1)
    output_max_tokens: int = Field(default=192, ge=1)
    stalls: list[str] = Field(default_factory=list)  # "AT:MS", seconds after start : ms
    engine_core: Literal["process", "thread"] = "process"
    core_priority: Literal["realtime", "normal"] = "realtime"  # "realtime" where permitted
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    drop_rate: float = Field(default=0.0, ge=0.0, le=1.0)

    def resolved_preset(self) -> Preset:
        return self._base_preset().with_overrides(self.preset_overrides)

    def served_model(self) -> str:
        return self.model or self._base_preset().model

    def _base_preset(self) -> Preset:
        preset = get_preset(self.preset)
        if self.gpu_profile is None and self.model_config_file is None:
            return preset
        from .profiles import resolve_gpu_profile, resolve_model_arch

        profile = resolve_gpu_profile(self.gpu_profile) if self.gpu_profile else None
        arch = resolve_model_arch(self.model_config_file) if self.model_config_file else None
        return preset.recomposed(profile, arch)

    def stall_schedule(self) -> StallSchedule:
        return StallSchedule(parse_stall(spec) for spec in self.stalls)

    def host_port(self) -> tuple[str, int]:
        return parse_listen(self.listen)
