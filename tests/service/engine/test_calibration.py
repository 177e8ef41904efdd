"""`spanbudget engine calibrate` and `predict`: the step-time model held to data, fitted back."""

from __future__ import annotations

import dataclasses
import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.app.cli import app
from spanbudget.collector.readers import read_traces
from spanbudget.service.engine.gpu_profile import load_profile, save_profile
from spanbudget.service.engine.model_arch import ModelArch
from spanbudget.service.engine.presets import compose_preset
from spanbudget.service.engine.profiles import MODEL_CONFIGS, get_gpu_profile, get_model_arch
from spanbudget.service.engine.simulation import Arrival, simulate
from spanbudget.service.engine.tracing import RequestSpanInfo, RequestTracer
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json

TABLE = Path("gpu") / "h200-qwen3-prefill-decode.json"


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["engine", *args])
    return result.exit_code, result.stdout, result.stderr


def test_the_model_config_counts_qwen3_8b_as_its_fixture_does(shared_fixtures: Path) -> None:
    table = json.loads((shared_fixtures / TABLE).read_text())
    for name, model in table["models"].items():
        arch = ModelArch.from_config(model["config"])
        assert abs(arch.params / model["params"] - 1) < 1e-4, name


def test_calibrate_on_the_h200_table_reproduces_the_shipped_profile(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    out = tmp_path / "h200.json"
    code, stdout, stderr = _invoke("calibrate", str(shared_fixtures / TABLE), "--out", str(out))
    assert code == 0, stderr
    assert "qwen3-32b prefill 8192" in stdout  # every point, measured against predicted
    mape = {
        line.split(":")[0].removeprefix("MAPE "): float(line.split(":")[1].split("%")[0])
        for line in stdout.splitlines()
        if line.startswith("MAPE ")
    }
    assert mape["prefill"] <= 5.0, mape
    assert mape["decode"] <= 15.0, mape
    fitted = load_profile(out)
    shipped = get_gpu_profile("h200")
    for name in ("mfu", "mbu", "attn_mbu", "layer_overhead_us"):
        assert getattr(fitted, name) == pytest.approx(getattr(shipped, name), rel=2e-3), name
    assert fitted.fit == pytest.approx(shipped.fit, abs=0.01)


def _emulator_traces(path: Path, truth_noise: float, seed: int) -> None:
    """llm_request spans of requests run one at a time through the emulator's scheduler
    (virtual time) on a known profile, with their phase times scaled by seeded noise."""
    truth = dataclasses.replace(get_gpu_profile("h100"), mfu=0.42, mbu=0.7, attn_mbu=0.3)
    rng = random.Random(seed)
    arrivals = []
    for i in range(600):
        if i % 2:  # prompts from 32 to ~8,000 tokens: prefill's knee and compute slope
            arrivals.append(Arrival(i * 30.0, int(32 * 2 ** (i % 11 * 0.9)), rng.randint(2, 100)))
        else:  # long contexts: the KV cache's share of a decode step
            arrivals.append(Arrival(i * 30.0, rng.randint(30000, 38000), 100))
    preset = compose_preset(truth, get_model_arch("Qwen/Qwen3-8B"))
    timings = simulate(preset, arrivals).timings()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = RequestTracer(provider)
    for i, (arrival, timing) in enumerate(zip(arrivals, timings, strict=True)):
        if truth_noise:
            timing = dataclasses.replace(
                timing,
                time_in_model_prefill=timing.time_in_model_prefill
                * (1 + rng.gauss(0, truth_noise)),
                time_in_model_decode=timing.time_in_model_decode * (1 + rng.gauss(0, truth_noise)),
            )
        info = RequestSpanInfo(f"req-{i}", None, arrival_time_ns=int(arrival.time * 1e9) + 1)
        tracer.emit(info, timing)
    path.write_bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())


@pytest.mark.parametrize("noise", [0.0, 0.05])
def test_calibrate_recovers_the_efficiencies_of_emulator_traces(
    tmp_path: Path, noise: float
) -> None:
    traces = tmp_path / "traces.pb"
    _emulator_traces(traces, noise, seed=11)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MODEL_CONFIGS["Qwen/Qwen3-8B"]))
    out = tmp_path / "mine.json"
    code, stdout, stderr = _invoke(
        "calibrate", str(traces), "--gpu-profile", "h100", "--model-config", str(config),
        "--out", str(out),
    )  # fmt: skip
    assert code == 0, stderr
    assert "MAPE decode" in stdout
    fitted = load_profile(out)
    assert fitted.mfu == pytest.approx(0.42, rel=0.02)
    assert fitted.mbu == pytest.approx(0.7, rel=0.02)
    assert fitted.attn_mbu == pytest.approx(0.3, rel=0.02)
    assert fitted.layer_overhead_us == get_gpu_profile("h100").layer_overhead_us


def test_calibrate_refuses_files_without_usable_spans(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"resourceSpans": []}))
    code, _, stderr = _invoke(
        "calibrate", str(empty), "--model-config", "Qwen/Qwen3-8B", "--out", str(tmp_path / "p")
    )
    assert code == 2
    assert "no llm_request span" in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()


def test_a_profile_missing_a_field_is_refused_in_one_line(
    shared_fixtures: Path, tmp_path: Path
) -> None:
    profile = tmp_path / "profile.json"
    save_profile(get_gpu_profile("h200"), profile)
    document = json.loads(profile.read_text())
    del document["mbu"]
    profile.write_text(json.dumps(document))
    for command in (
        ["calibrate", str(shared_fixtures / TABLE), "--gpu-profile", str(profile)],
        ["predict", "--prefill", "100", "--gpu-profile", str(profile)],
    ):
        code, _, stderr = (
            _invoke(*command, "--model-config", "Qwen/Qwen3-8B", "--out", str(tmp_path / "o"))
            if command[0] == "calibrate"
            else _invoke(*command, "--model-config", "Qwen/Qwen3-8B")
        )
        assert code == 2, command
        assert stderr.strip().splitlines() == [f"error: {profile}: profile lacks the field(s) mbu"]


def test_predict_json_holds_to_the_measured_prefill(shared_fixtures: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    table = json.loads((shared_fixtures / TABLE).read_text())
    config.write_text(json.dumps(table["models"]["qwen3-32b"]["config"]))
    code, stdout, stderr = _invoke(
        "predict", "--prefill", "2048", "--prefill", "16384", "--batch", "4x512",
        "--decode", "32x4096", "--gpu-profile", "h200", "--model-config", str(config),
        "--format", "json",
    )  # fmt: skip
    assert code == 0, stderr
    document = json.loads(stdout)
    assert document["gpu"] == "H200 SXM 141GB"
    steps = document["steps"]
    assert [s["kind"] for s in steps] == ["prefill", "prefill", "batched prefill", "decode"]
    assert steps[1]["steps"] == 2  # 16,384 tokens in two 8,192-token chunks
    # Within 5 % of the H200's measured kernels: 264.0 ms (2,048 tokens), 257.9 ms (4x512).
    assert steps[0]["kernel_ms"] == pytest.approx(263.99, rel=0.05)
    assert steps[2]["kernel_ms"] == pytest.approx(257.89, rel=0.05)
    assert steps[0]["ms"] == pytest.approx(steps[0]["kernel_ms"] + 1.0)  # the step overhead
    assert steps[3]["bound"] == "memory"
    same = json.loads(
        _invoke("predict", "--prefill", "2048", "--preset", "qwen3-32b-h200", "--format", "json")[1]
    )
    assert same["steps"][0]["ms"] == pytest.approx(steps[0]["ms"])


def test_predict_refuses_ambiguous_or_empty_requests() -> None:
    code, _, stderr = _invoke("predict", "--preset", "qwen3-8b-h200")
    assert code == 2
    assert "nothing to predict" in stderr
    code, _, stderr = _invoke("predict", "--decode", "16", "--preset", "qwen3-8b-h200")
    assert code == 2
    assert "expected NxM" in stderr
    code, _, stderr = _invoke("predict", "--prefill", "9", "--gpu-profile", "h200")
    assert code == 2
    assert "--model-config" in stderr


def test_the_server_takes_a_profile_file_and_a_config_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanbudget.service.engine.perf_model import PerfModel
    from spanbudget.service.engine.presets import get_preset
    from spanbudget.service.engine.settings import EngineSettings

    profile = tmp_path / "h200.json"
    save_profile(get_gpu_profile("h200"), profile)
    config = tmp_path / "config.json"
    config.write_text(json.dumps(MODEL_CONFIGS["Qwen/Qwen3-32B"]))
    settings = EngineSettings(
        gpu_profile=str(profile), model_config_file=str(config), model="Qwen/Qwen3-32B"
    )
    served = settings.resolved_preset()
    shipped = get_preset("qwen3-32b-h200")
    assert settings.served_model() == "Qwen/Qwen3-32B"
    assert served.params_b == shipped.params_b
    assert PerfModel(served).prefill_seconds(2048) == pytest.approx(
        PerfModel(shipped).prefill_seconds(2048)
    )
    # Only the GPU swapped: the default preset's model on an H200.
    h200 = EngineSettings(gpu_profile="h200").resolved_preset()
    assert (h200.model, h200.hbm_bandwidth_gbs) == ("Qwen/Qwen3-8B", 4800.0)
    assert PerfModel(h200).prefill_seconds(512) == pytest.approx(
        PerfModel(get_preset("qwen3-8b-h200")).prefill_seconds(512)
    )
    # Named from where it runs: the error box wraps a long path (a worker's temp folder is
    # longer) across lines, and the file's name with it.
    monkeypatch.chdir(tmp_path)
    code, stdout, stderr = _invoke("--gpu-profile", "absent.json")
    assert code == 2  # a usage error before anything serves
    assert "absent.json" in stdout + stderr


class _JaegerV3(BaseHTTPRequestHandler):
    """Jaeger's query API v3 (`/api/v3/traces`) answering with one OTLP/JSON body."""

    body: bytes = b""

    def do_GET(self) -> None:
        if urlparse(self.path).path != "/api/v3/traces":
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_calibrate_reads_the_spans_from_jaeger(tmp_path: Path) -> None:
    traces = tmp_path / "traces.pb"
    _emulator_traces(traces, 0.0, seed=11)
    body = json.dumps({"result": json.loads(to_otlp_json(read_traces(traces)))}).encode()
    handler = type("Handler", (_JaegerV3,), {"body": body})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "mine.json"
    try:
        code, stdout, stderr = _invoke(
            "calibrate", "--jaeger-url", f"http://127.0.0.1:{server.server_address[1]}",
            "--gpu-profile", "h100", "--model-config", "Qwen/Qwen3-8B", "--out", str(out),
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert code == 0, stderr
    assert "MAPE prefill" in stdout
    assert load_profile(out).mfu == pytest.approx(0.42, rel=0.02)


def test_calibrate_says_when_jaeger_cannot_be_read(tmp_path: Path) -> None:
    code, _, stderr = _invoke(
        "calibrate", "--jaeger-url", "http://127.0.0.1:9", "--model-config", "Qwen/Qwen3-8B",
        "--out", str(tmp_path / "p"),
    )  # fmt: skip
    assert code == 2
    assert "127.0.0.1:9" in stderr
    assert len(stderr.strip().splitlines()) == 1
