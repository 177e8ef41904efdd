"""What users type and set stays as it is: every command's options, the environment
variables the collector and the gateway read. A rename in the code (a setting moved into
a group, a module moved into another room) must not rename what scripts, compose files
and deployments already say; a new option is added here on purpose."""

from __future__ import annotations

from typing import Any

import typer.main
from spanbudget.app.cli import app
from spanbudget.collector.live.settings import ENV_PREFIX, CollectorSettings
from spanbudget.service.settings import Settings

OPTIONS = {
    "": ["--version"],
    "budget": [],
    "budget init": ["--force"],
    "budget suggest": [
        "--budget", "--force", "--jaeger-url", "--limit", "--objective", "--preset",
        "--service", "--since",
    ],
    "check": [
        "--allow-empty", "--budget", "--fail-on", "--format", "--jaeger-url", "--junit",
        "--limit", "--preset", "--rows", "--service", "--since",
    ],
    "collect": [
        "--alert-window-scale", "--alertmanager", "--api-token", "--body-timeout", "--budget",
        "--db", "--decision-wait", "--engine-metrics", "--forward-keep", "--forward-otlp",
        "--forward-sample", "--grpc-listen", "--grpc-tls-cert", "--grpc-tls-key",
        "--header-timeout", "--jaeger-ui", "--jaeger-url", "--listen",
        "--log-level", "--max-body-bytes", "--max-trace-age", "--pull-jaeger", "--pull-service",
        "--receiver-token", "--replay-wait", "--retention", "--webhook",
    ],
    "compare": [
        "--budget", "--collector", "--confidence", "--fail-on", "--format", "--html",
        "--min-effect", "--min-effect-ms", "--phase", "--preset", "--resamples", "--seed",
        "--statistic",
    ],
    "demo": [
        "--budget", "--burst-rate", "--collector-listen", "--data-dir", "--disaggregated",
        "--duration", "--engine-listen", "--exit", "--gateway-listen", "--jaeger", "--out",
        "--preset", "--rate",
    ],
    "engine": [
        "--attn-mbu", "--block-size", "--core-priority", "--disaggregated", "--drop-rate",
        "--engine-core", "--error-rate", "--faults", "--gpu-memory-utilization",
        "--gpu-profile", "--hbm-bandwidth-gbs", "--hbm-gb", "--head-dim", "--hidden-size",
        "--kv-cache-bytes", "--kv-link-gbs", "--kv-link-latency-ms", "--layer-overhead-us",
        "--list-presets", "--listen", "--max-model-len", "--max-num-batched-tokens",
        "--max-num-seqs", "--mbu", "--mfu", "--model", "--model-config", "--num-gpu-blocks",
        "--num-gpus", "--num-heads", "--num-kv-heads", "--num-layers", "--params-b",
        "--peak-tflops", "--preset", "--reserved-gb-per-gpu", "--seed", "--stall",
        "--step-overhead-ms", "--vocab-size", "--weight-bytes",
    ],
    "engine calibrate": [
        "--gpu-profile", "--jaeger-url", "--model-config", "--name", "--out", "--service",
        "--since",
    ],
    "engine predict": [
        "--batch", "--decode", "--format", "--gpu-profile", "--model-config", "--prefill",
        "--preset",
    ],
    "ingest": ["--data-dir"],
    "loadtest": [
        "--api-key", "--arrival", "--budget", "--collector", "--collector-token", "--delay",
        "--duration", "--jaeger-ui", "--max-concurrency", "--model", "--out", "--prompts",
        "--rate", "--requests", "--run-id", "--seed", "--sweep", "--target", "--warmup",
    ],
    "report": ["--budget", "--format", "--preset", "--slices"],
    "serve": [
        "--body-timeout", "--data-dir", "--faults", "--header-timeout", "--listen",
        "--llm-base-url",
    ],
    "whatif": [
        "--budget", "--collector", "--collector-token", "--format", "--phase", "--preset",
        "--run", "--since", "--stage",
    ],
}  # fmt: skip

OPTION_ENV = {
    "collect": ["SPANBUDGET_API_TOKEN", "SPANBUDGET_RECEIVER_TOKEN"],
    "loadtest": ["SPANBUDGET_API_TOKEN"],
    "whatif": ["SPANBUDGET_API_TOKEN"],
}

COLLECTOR_ENV = [
    "ALERTMANAGER", "ALERT_MIN_OVERRUNS", "ALERT_MIN_TRACES", "ALERT_RESEND_SECONDS",
    "ALERT_TICK_SECONDS", "ALERT_WINDOW_SCALE", "API_TOKEN", "BODY_TIMEOUT_SECONDS",
    "BUDGET_PATH", "DB_PATH", "DECIDED_MEMORY", "DECISION_WAIT_SECONDS", "ENGINE_METRICS",
    "ENGINE_METRICS_EVERY_SECONDS", "FORWARD_BACKOFF_MAX_SECONDS", "FORWARD_BACKOFF_SECONDS",
    "FORWARD_BATCH_SPANS", "FORWARD_KEEP", "FORWARD_MAX_ELAPSED_SECONDS", "FORWARD_OTLP",
    "FORWARD_QUEUE_SPANS", "FORWARD_SAMPLE", "FORWARD_TIMEOUT_SECONDS", "GRPC_LISTEN",
    "GRPC_TLS_CERT", "GRPC_TLS_KEY",
    "HEADER_TIMEOUT_SECONDS", "INTAKE_DECODERS", "INTAKE_QUEUE_SPANS", "JAEGER_UI",
    "JAEGER_URL", "JOURNAL", "LISTEN", "MAX_BODY_BYTES", "MAX_BUFFERED_SPANS",
    "MAX_SPANS_PER_TRACE", "MAX_SPAN_BYTES", "MAX_TRACES", "MAX_TRACE_AGE_SECONDS",
    "PUBLIC_URL", "PULL_EVERY_SECONDS", "PULL_JAEGER", "PULL_LIMIT", "PULL_SERVICE",
    "PULL_SETTLE_SECONDS", "PULL_WINDOW_SECONDS", "RECEIVER_TOKEN", "REPLAY_WAIT_SECONDS",
    "RETENTION_COUNT",
    "RETENTION_SECONDS", "RETRY_AFTER_SECONDS", "REVISE_SECONDS", "REVISE_SPANS",
    "SHUTDOWN_DRAIN_SECONDS", "SPANS_DB_PATH", "SPAN_RETENTION_BYTES", "SPAN_RETENTION_COUNT",
    "WEBHOOK",
]  # fmt: skip

GATEWAY_SETTINGS = [
    "api_keys", "body_timeout_seconds", "collection", "context_token_budget", "data_dir",
    "embedding_batch_wait_ms", "embedding_max_batch", "embedding_nice", "embedding_process",
    "embedding_processes", "embedding_runtime", "embedding_threads", "faults",
    "full_scan_threshold_kb", "header_timeout_seconds", "hnsw_ef", "hnsw_ef_construct",
    "hnsw_m", "jwt_algorithms", "jwt_audience", "jwt_issuer", "jwt_secret", "listen",
    "llm_api_key", "llm_base_url", "llm_max_connections", "llm_model", "llm_provider",
    "llm_timeout_seconds", "max_body_bytes", "qdrant_check_compatibility",
    "qdrant_search_threads", "qdrant_url", "rate_limit_burst", "rate_limit_per_second",
    "template", "templates_dir", "tokenizer", "top_k",
]  # fmt: skip


def _commands() -> dict[str, Any]:
    found: dict[str, Any] = {}

    def walk(command: Any, path: tuple[str, ...]) -> None:
        found[" ".join(path)] = command
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return found


def test_every_commands_options_are_as_documented() -> None:
    options = {
        path: sorted(
            o for p in command.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-")
        )
        for path, command in _commands().items()
    }
    assert options == OPTIONS


def test_the_options_read_from_the_environment() -> None:
    env = {
        path: sorted(str(p.envvar) for p in command.params if getattr(p, "envvar", None))
        for path, command in _commands().items()
    }
    assert {path: names for path, names in env.items() if names} == OPTION_ENV


def test_the_collectors_environment_variables() -> None:
    names = sorted(flat.upper() for flat in CollectorSettings.flat_names())
    assert names == COLLECTOR_ENV
    assert ENV_PREFIX == "SPANBUDGET_COLLECTOR_"


def test_each_collector_variable_sets_its_setting(monkeypatch: Any) -> None:
    """Every flat name set in the environment lands where `flat_names` says."""
    for flat in CollectorSettings.flat_names():
        monkeypatch.delenv(ENV_PREFIX + flat.upper(), raising=False)
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_FORWARD_QUEUE_SPANS", "7")
    monkeypatch.setenv("SPANBUDGET_COLLECTOR_DECISION_WAIT_SECONDS", "0.25")
    monkeypatch.setenv("spanbudget_collector_alert_window_scale", "0.5")  # any case
    settings = CollectorSettings.from_flat(max_traces=9)
    assert settings.forward.queue_spans == 7
    assert settings.assembly.decision_wait_seconds == 0.25
    assert settings.assembly.max_traces == 9
    assert settings.alerts.window_scale == 0.5


def test_the_gateways_settings_and_their_environment() -> None:
    assert sorted(Settings.model_fields) == GATEWAY_SETTINGS
    assert Settings.model_config.get("env_prefix") == "SPANBUDGET_"
