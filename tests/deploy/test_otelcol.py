"""The OTel Collector configs: loaded and validated by the Collector `make binaries` builds,
their components all in the otelcol-contrib manifest (so the compose stack's contrib image
runs them), and wired as the compose stack expects."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.binaries import go_binary

REPO = Path(__file__).resolve().parents[2]
CONFIGS = ("otelcol.yaml", "otelcol-loadbalancing.yaml")
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
    # A connector is an exporter of one pipeline and a receiver of another.
    for connector in config.get("connectors") or {}:
        assert connector in used["exporters"] & used["receivers"], f"{name}: {connector}"
        used["connectors"].add(connector)
        used["exporters"].discard(connector)
        used["receivers"].discard(connector)
    for kind in KINDS:
        defined = set(config.get(kind) or {})
        assert used[kind] <= defined, f"{name}: {kind} {used[kind] - defined} are not defined"
        assert defined <= used[kind], f"{name}: {kind} {defined - used[kind]} are unused"


@pytest.mark.parametrize("name", CONFIGS)
def test_the_built_collector_validates_the_config(name: str, tmp_path: Path) -> None:
    """`otelcol validate` builds every component from the file: types, keys and values."""
    otelcol = str(go_binary("otelcol-spanbudget"))
    config = REPO / "deploy" / name
    result = subprocess.run(
        [otelcol, "validate", "--config", str(config)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    broken = yaml.safe_load(config.read_text())
    broken["processors"]["memory_limiter"]["check_intervall"] = "1s"  # the check bites
    (tmp_path / name).write_text(yaml.safe_dump(broken))
    result = subprocess.run(
        [otelcol, "validate", "--config", str(tmp_path / name)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "check_intervall" in result.stderr


@pytest.mark.parametrize("name", CONFIGS)
def test_listeners_default_to_all_interfaces_and_memory_limiter_comes_first(name: str) -> None:
    """In a container every endpoint listens on all interfaces; OTELCOL_LISTEN_HOST moves
    them (the tests run the same files on 127.0.0.1)."""
    config = _load(name)
    endpoints = [config["extensions"]["health_check"]["endpoint"]]
    for receiver in config["receivers"].values():
        endpoints += [settings["endpoint"] for settings in receiver["protocols"].values()]
    for endpoint in endpoints:
        host, _, port = endpoint.partition("}:")
        assert _env_default(host + "}") == "0.0.0.0", f"{name}: {endpoint}"
        assert _env_default(port).isdigit(), f"{name}: {endpoint}"
    for pipeline_id, pipeline in config["service"]["pipelines"].items():
        assert pipeline["processors"][0] == "memory_limiter", f"{name}: {pipeline_id}"
    prometheus = config["service"]["telemetry"]["metrics"]["readers"][0]["pull"]["exporter"]
    assert _env_default(prometheus["prometheus"]["host"]) == "0.0.0.0"


def _env_default(value: str) -> str:
    match = re.fullmatch(r"\$\{env:\w+:-(.+)\}", value)
    assert match, f"{value} should be ${{env:NAME:-default}}"
    return match.group(1)


def test_front_collector_feeds_the_budget_collector_and_jaeger_gets_annotated_spans() -> None:
    config = _load("otelcol.yaml")
    pipelines = config["service"]["pipelines"]
    assert pipelines["traces/intake"]["exporters"] == ["otlp_http/budget", "span_metrics"]
    assert pipelines["traces/annotated"]["exporters"] == ["otlp_grpc/jaeger"]
    budget = _env_default(config["exporters"]["otlp_http/budget"]["endpoint"])
    assert budget == "http://budget-collector:4318"
    assert _env_default(config["exporters"]["otlp_grpc/jaeger"]["endpoint"]) == "jaeger:4317"


def test_forward_port_and_load_balancer_match_the_compose_stack() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    command = compose["budget-collector"]["command"]
    forward = command[command.index("--forward-otlp") + 1]
    annotated = _load("otelcol.yaml")["receivers"]["otlp/annotated"]["protocols"]["http"]
    port = _env_default(annotated["endpoint"].partition("}:")[2])
    assert forward == f"http://otel-collector:{port}/v1/traces"

    # The balancer sends straight to each budget collector's own OTLP/gRPC listener: no
    # sidecar between them.
    balancer = _load("otelcol-loadbalancing.yaml")["exporters"]["load_balancing"]
    assert balancer["routing_key"] == "traceID"
    backends = yaml.safe_load(_env_default(balancer["resolver"]["static"]["hostnames"]))
    collectors = ("budget-collector", "budget-collector-2")
    grpc_ports = {
        _flag(compose[name]["command"], "--grpc-listen").rpartition(":")[2] for name in collectors
    }
    (grpc_port,) = grpc_ports
    assert backends == [f"{name}:{grpc_port}" for name in collectors]
    environment = compose["otel-collector"]["environment"]
    assert yaml.safe_load(environment["BUDGET_COLLECTORS"]) == backends
    assert not [name for name in compose if name.startswith("shard")]
    assert not (REPO / "deploy" / "otelcol-shard.yaml").exists()


def test_the_balancer_holds_a_backends_share_in_order_while_it_restarts() -> None:
    """Its per-backend exporter keeps retrying for longer than a restart, queues in spans,
    and sends one request at a time, so that a trace's parts reach a restarted collector
    in the order they came (docs/deployment.md, "What a restart costs")."""
    balancer = _load("otelcol-loadbalancing.yaml")["exporters"]["load_balancing"]
    otlp = balancer["protocol"]["otlp"]
    retry, queue = otlp["retry_on_failure"], otlp["sending_queue"]
    assert retry["enabled"]
    assert retry["max_elapsed_time"] == "300s"
    assert retry["max_interval"] == "5s"  # the budget collectors' replay wait is longer
    assert queue["enabled"]
    assert queue["sizer"] == "items"
    assert queue["queue_size"] >= 100_000
    assert queue["num_consumers"] == 1
    # Nothing in front of the per-backend queues that could reorder what reaches them.
    assert "sending_queue" not in balancer


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]
