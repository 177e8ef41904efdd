"""The OTel Collector configs against the otelcol-contrib 0.159.0 manifest and the compose stack."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CONFIGS = ("otelcol.yaml", "otelcol-loadbalancing.yaml", "otelcol-shard.yaml")
KINDS = ("receivers", "processors", "exporters", "extensions", "connectors")
# Config type -> the manifest's module directory name, where the collector renamed a
# component to lower_snake_case (the old name stays a deprecated alias) in a way that is
# not just underscores: the OTLP gRPC exporter is `otlp_grpc`, its module `otlpexporter`.
RENAMED = {("exporters", "otlp_grpc"): "otlp"}


@pytest.fixture(scope="module")
def manifest(shared_fixtures: Path) -> dict[str, set[str]]:
    """The component types each kind offers, from the gomod module directory names."""
    document = yaml.safe_load(
        (shared_fixtures / "otelcol" / "otelcol-contrib-manifest.yaml").read_text()
    )
    assert document["dist"]["version"] == "0.159.0"
    types: dict[str, set[str]] = {}
    for kind in KINDS:
        suffix = kind.removesuffix("s")
        types[kind] = {
            entry["gomod"].split()[0].rsplit("/", 1)[1].removesuffix(suffix)
            for entry in document.get(kind, [])
        }
    return types


def _load(name: str) -> dict[str, Any]:
    document = yaml.safe_load((REPO / "deploy" / name).read_text())
    assert isinstance(document, dict)
    return document


def _component_type(kind: str, component_id: str) -> str:
    """`otlp_http/budget` -> the manifest's `otlphttp` (the part before `/`, snake case off)."""
    type_ = component_id.split("/", 1)[0]
    return RENAMED.get((kind, type_), type_.replace("_", ""))


def test_manifest_reading_knows_the_components_we_rely_on(manifest: dict[str, set[str]]) -> None:
    assert {"otlp"} <= manifest["receivers"]
    assert {"memorylimiter", "batch"} <= manifest["processors"]
    assert {"otlp", "otlphttp", "loadbalancing"} <= manifest["exporters"]
    assert {"healthcheck"} <= manifest["extensions"]
    assert "healthcheckv2" not in manifest["extensions"]


@pytest.mark.parametrize("name", CONFIGS)
def test_config_uses_only_components_of_the_contrib_distribution(
    name: str, manifest: dict[str, set[str]]
) -> None:
    config = _load(name)
    for kind in KINDS:
        for component_id in config.get(kind) or {}:
            assert re.fullmatch(r"[a-z0-9_]+(/[\w.-]+)?", component_id), component_id
            assert _component_type(kind, component_id) in manifest[kind], (
                f"{name}: {kind} {component_id} is not in otelcol-contrib 0.159.0"
            )


@pytest.mark.parametrize("name", CONFIGS)
def test_pipelines_reference_defined_components_and_use_all_of_them(name: str) -> None:
    config = _load(name)
    service = config["service"]
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    used["extensions"] = set(service.get("extensions", []))
    assert service["pipelines"], f"{name} has no pipeline"
    for pipeline_id, pipeline in service["pipelines"].items():
        assert pipeline_id.split("/")[0] in {"traces", "metrics", "logs"}
        assert pipeline["receivers"], pipeline_id
        assert pipeline["exporters"], pipeline_id
        for kind in ("receivers", "processors", "exporters"):
            used[kind].update(pipeline.get(kind, []))
    for kind in KINDS:
        defined = set(config.get(kind) or {})
        assert used[kind] <= defined, f"{name}: {kind} {used[kind] - defined} are not defined"
        assert defined <= used[kind], f"{name}: {kind} {defined - used[kind]} are unused"


@pytest.mark.parametrize("name", CONFIGS)
def test_receivers_bind_all_interfaces_and_memory_limiter_comes_first(name: str) -> None:
    config = _load(name)
    for receiver_id, receiver in config["receivers"].items():
        for protocol, settings in receiver["protocols"].items():
            host, _, port = settings["endpoint"].rpartition(":")
            assert host == "0.0.0.0", f"{name}: {receiver_id}.{protocol}"
            assert port.isdigit(), f"{name}: {receiver_id}.{protocol}"
    for pipeline_id, pipeline in config["service"]["pipelines"].items():
        assert pipeline["processors"][0] == "memory_limiter", f"{name}: {pipeline_id}"
    assert config["extensions"]["health_check"]["endpoint"] == "0.0.0.0:13133"
    prometheus = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]
    assert prometheus["prometheus"] == {"host": "0.0.0.0", "port": 8888}


def _env_default(value: str) -> str:
    match = re.fullmatch(r"\$\{env:\w+:-(.+)\}", value)
    assert match, f"{value} should be ${{env:NAME:-default}}"
    return match.group(1)


def test_front_collector_feeds_the_budget_collector_and_jaeger_gets_annotated_spans() -> None:
    config = _load("otelcol.yaml")
    pipelines = config["service"]["pipelines"]
    assert pipelines["traces/intake"]["exporters"] == ["otlp_http/budget"]
    assert pipelines["traces/annotated"]["exporters"] == ["otlp_grpc/jaeger"]
    budget = _env_default(config["exporters"]["otlp_http/budget"]["endpoint"])
    assert budget == "http://budget-collector:4318"
    assert _env_default(config["exporters"]["otlp_grpc/jaeger"]["endpoint"]) == "jaeger:4317"


def test_forward_port_and_load_balancer_match_the_compose_stack() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    command = compose["budget-collector"]["command"]
    forward = command[command.index("--forward-otlp") + 1]
    annotated = _load("otelcol.yaml")["receivers"]["otlp/annotated"]["protocols"]["http"]
    assert forward == f"http://otel-collector:{annotated['endpoint'].rpartition(':')[2]}/v1/traces"

    balancer = _load("otelcol-loadbalancing.yaml")["exporters"]["load_balancing"]
    assert balancer["routing_key"] == "traceID"
    dns = balancer["resolver"]["dns"]
    alias = _env_default(dns["hostname"])
    assert alias in compose["budget-collector"]["networks"]["default"]["aliases"]
    assert alias in compose["budget-collector-2"]["networks"]["default"]["aliases"]
    shard = _load("otelcol-shard.yaml")
    assert shard["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].endswith(f":{dns['port']}")
    assert (
        _env_default(shard["exporters"]["otlp_http/budget"]["endpoint"]) == "http://127.0.0.1:4318"
    )
    # Each shard sidecar sits in its collector's network namespace.
    assert compose["shard-1"]["network_mode"] == "service:budget-collector"
    assert compose["shard-2"]["network_mode"] == "service:budget-collector-2"
