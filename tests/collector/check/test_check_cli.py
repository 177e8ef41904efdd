"""`spanbudget check`: files in every format, table and JSON output, exit codes, Jaeger's API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest
from spanbudget.app.cli import app
from typer.testing import CliRunner

from tests.support.otlp import to_otlp_json, to_request
from tests.support.traces import rag_trace

REPO = Path(__file__).resolve().parents[3]
BUDGET = str(REPO / "budget.yaml")
runner = CliRunner()


def trace_ids(n: int) -> list[str]:
    return [f"{i + 1:032x}" for i in range(n)]


@pytest.fixture
def mixed_file(tmp_path: Path) -> Path:
    """Three traces: ok, warn (retrieval 25 ms), overrun (prefill 125 ms)."""
    ok, warn, overrun = trace_ids(3)
    spans = (
        rag_trace(trace_id=ok).spans
        + rag_trace(trace_id=warn, retrieval=7).spans
        + rag_trace(trace_id=overrun, prefill=25).spans
    )
    path = tmp_path / "traces.json"
    path.write_text(to_otlp_json(spans))
    return path


def test_json_output_and_exit_code(mixed_file: Path) -> None:
    result = runner.invoke(app, ["check", str(mixed_file), "--budget", BUDGET, "--format", "json"])
    assert result.exit_code == 1, result.output
    verdicts = json.loads(result.stdout)
    assert [(v["trace_id"][-1], v["status"]) for v in verdicts] == [
        ("1", "ok"),
        ("2", "warn"),
        ("3", "overrun"),
    ]
    assert verdicts[2]["blame"] == ["prefill"]
    assert verdicts[1]["stages"][2] == {
        "name": "retrieval",
        "ms": 25.0,
        "target_ms": 20.0,
        "limit_ms": 40.0,
        "status": "warn",
        "breakdown": {
            "retrieval rag-docs": 1.0,
            "query rag-docs": 10.0,
            "embeddings all-MiniLM-L6-v2": 14.0,
        },
    }


@pytest.mark.parametrize(
    ("fail_on", "traces", "code"),
    [
        ("never", {"prefill": 25}, 0),
        ("overrun", {"retrieval": 7}, 0),
        ("warn", {"retrieval": 7}, 1),
        ("warn", {}, 0),
        ("overrun", {"prefill": 25}, 1),
    ],
)
def test_fail_on(tmp_path: Path, fail_on: str, traces: dict[str, float], code: int) -> None:
    path = tmp_path / "t.json"
    path.write_text(to_otlp_json(rag_trace(**traces).spans))
    result = runner.invoke(app, ["check", str(path), "--budget", BUDGET, "--fail-on", fail_on])
    assert result.exit_code == code, result.output


def test_table_output(mixed_file: Path) -> None:
    result = runner.invoke(app, ["check", str(mixed_file), "--budget", BUDGET])
    assert result.exit_code == 1
    out = result.stdout
    for text in ("overrun", "warn", "ok", "prefill", "123.0", "25.0", "140.0", "retrieval"):
        assert text in out
    assert "3 traces judged (1 ok, 1 warn, 1 overrun); 0 skipped" in " ".join(out.split())


def test_protobuf_and_json_lines_give_the_same_verdicts(tmp_path: Path, mixed_file: Path) -> None:
    spans = rag_trace(trace_id=trace_ids(1)[0], queue=40).spans
    proto = tmp_path / "t.bin"
    proto.write_bytes(to_request(spans).SerializeToString())
    lines = tmp_path / "t.jsonl"
    half = len(spans) // 2
    lines.write_text(to_otlp_json(spans[:half]) + "\n" + to_otlp_json(spans[half:]) + "\n")
    outputs = []
    for path in (proto, lines):
        result = runner.invoke(app, ["check", str(path), "--budget", BUDGET, "--format", "json"])
        assert result.exit_code == 1, result.output
        outputs.append([{**v, "evaluated_at": None} for v in json.loads(result.stdout)])
    assert outputs[0] == outputs[1]
    assert outputs[0][0]["stages"][4]["breakdown"]["vllm.queue"] == 50.0


def test_folder_of_files(tmp_path: Path) -> None:
    for i, trace_id in enumerate(trace_ids(3)):
        (tmp_path / f"{i}.json").write_text(to_otlp_json(rag_trace(trace_id=trace_id).spans))
    result = runner.invoke(app, ["check", str(tmp_path), "--budget", BUDGET, "--format", "json"])
    assert result.exit_code == 0
    assert len(json.loads(result.stdout)) == 3


def test_real_fixture_files_are_read_and_skipped(shared_fixtures: Path) -> None:
    # Third-party traces (telemetrygen, Jaeger's examples) match no stage: not judged, and
    # a check that judged nothing passed nothing: exit 2 saying why, unless --allow-empty.
    paths = sorted(str(p) for p in (shared_fixtures / "otlp").glob("*.json"))
    paths += sorted(str(p) for p in (shared_fixtures / "jaeger").glob("*.json"))
    result = runner.invoke(app, ["check", *paths, "--budget", BUDGET])
    assert result.exit_code == 2, result.output
    assert "0 traces judged (none);" in " ".join(result.stdout.split())
    said = " ".join(result.stderr.split())
    assert "no span matched any stage of budget 'rag-ttft'" in said
    allowed = runner.invoke(app, ["check", *paths, "--budget", BUDGET, "--allow-empty"])
    assert allowed.exit_code == 0, allowed.output
    assert "no trace judged" not in allowed.stderr


def test_a_selector_that_matches_nothing_fails_the_build(tmp_path: Path, mixed_file: Path) -> None:
    budget = tmp_path / "typo.yaml"  # the service's name misspelt: nothing matches
    budget.write_text(
        "version: 1\nname: typo\ntotal: {target_ms: 170, limit_ms: 250}\nstages:\n"
        "  - {name: gateway, target_ms: 10, limit_ms: 15, match: [{service: rag-gatewya}]}\n"
    )
    result = runner.invoke(app, ["check", str(mixed_file), "--budget", str(budget)])
    assert result.exit_code == 2, result.output
    assert "in 3 trace(s) read no span matched any stage" in " ".join(result.stderr.split())


def test_no_spans_at_all_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "none.json").write_text('{"resourceSpans": []}')
    result = runner.invoke(app, ["check", str(empty), "--budget", BUDGET])
    assert result.exit_code == 2, result.output
    assert "the input holds no spans" in " ".join(result.stderr.split())


def test_a_bad_file_in_a_folder_is_reported_and_the_rest_judged(tmp_path: Path) -> None:
    for i, trace_id in enumerate(trace_ids(3)):
        (tmp_path / f"{i}.json").write_text(to_otlp_json(rag_trace(trace_id=trace_id).spans))
    (tmp_path / "1b.json").write_text("{not json")
    result = runner.invoke(app, ["check", str(tmp_path), "--budget", BUDGET, "--format", "json"])
    assert result.exit_code == 2, result.output
    assert [v["trace_id"] for v in json.loads(result.stdout)] == trace_ids(3)
    said = " ".join(result.stderr.split())
    assert "1b.json" in said
    assert "(skipped)" in said
    assert "1 of 4 inputs could not be read" in said
    # --allow-empty is about judging nothing, not about unreadable input.
    allowed = runner.invoke(app, ["check", str(tmp_path), "--budget", BUDGET, "--allow-empty"])
    assert allowed.exit_code == 2


def test_dash_reads_stdin(mixed_file: Path) -> None:
    args = ["check", "-", "--budget", BUDGET, "--format", "json"]
    result = runner.invoke(app, args, input=mixed_file.read_bytes())
    assert result.exit_code == 1, result.output
    from_stdin = [{**v, "evaluated_at": None} for v in json.loads(result.stdout)]
    from_file = runner.invoke(
        app, ["check", str(mixed_file), "--budget", BUDGET, "--format", "json"]
    )
    assert from_stdin == [{**v, "evaluated_at": None} for v in json.loads(from_file.stdout)]
    assert len(from_stdin) == 3
    nothing = runner.invoke(app, ["check", "-", "--budget", BUDGET], input=b"")
    assert nothing.exit_code == 2
    assert "<stdin>: no trace data" in " ".join(nothing.stderr.split())


def test_bad_trace_file_exits_2_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7}]}]}]}')
    result = runner.invoke(app, ["check", str(path), "--budget", BUDGET])
    assert result.exit_code == 2
    assert "broken.json" in result.stderr
    assert "Traceback" not in result.output


def test_bad_budget_exits_2_naming_line(tmp_path: Path, mixed_file: Path) -> None:
    budget = tmp_path / "b.yaml"
    budget.write_text((REPO / "budget.yaml").read_text().replace("limit_ms: 40", "limit_ms: 4"))
    result = runner.invoke(app, ["check", str(mixed_file), "--budget", str(budget)])
    assert result.exit_code == 2
    assert f"{budget}:17: stages[2].target_ms: target 20 ms is above the limit 4 ms" in " ".join(
        result.stderr.split()
    )


def test_usage_errors_exit_2(mixed_file: Path) -> None:
    assert runner.invoke(app, ["check", "--budget", BUDGET]).exit_code == 2
    assert runner.invoke(app, ["check", str(mixed_file), "--format", "xml"]).exit_code == 2
    missing = runner.invoke(app, ["check", "/nonexistent/t.json", "--budget", BUDGET])
    assert missing.exit_code == 2
    assert "/nonexistent/t.json" in missing.stderr


class _JaegerV3(BaseHTTPRequestHandler):
    body: bytes = b""
    queries: list[dict[str, list[str]]] = []  # noqa: RUF012

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path != "/api/v3/traces":
            self.send_error(404)
            return
        type(self).queries.append(parse_qs(url.query))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def jaeger() -> Iterator[tuple[str, type[_JaegerV3]]]:
    handler = type("Handler", (_JaegerV3,), {"queries": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_jaeger_url_reads_the_real_v3_response(
    jaeger: tuple[str, type[_JaegerV3]], shared_fixtures: Path
) -> None:
    url, handler = jaeger
    handler.body = (shared_fixtures / "jaeger" / "jaeger_apiv3_GetTrace.json").read_bytes()
    args = ["check", "--jaeger-url", url, "--service", "rag-gateway", "--since", "5m"]
    result = runner.invoke(app, [*args, "--budget", BUDGET, "--allow-empty"])
    assert result.exit_code == 0, result.output
    assert "0 traces judged (none); 1 skipped" in " ".join(result.stdout.split())
    query = handler.queries[0]
    assert "rag-gateway" in (query.get("query.service_name") or query["query.serviceName"])


def test_jaeger_url_judges_served_traces(jaeger: tuple[str, type[_JaegerV3]]) -> None:
    url, handler = jaeger
    otlp = json.loads(to_otlp_json(rag_trace(prefill=25).spans))
    handler.body = json.dumps({"result": otlp}).encode()
    args = ["check", "--jaeger-url", url, "--service", "rag-gateway", "--format", "json"]
    result = runner.invoke(app, [*args, "--budget", BUDGET])
    assert result.exit_code == 1, result.output
    assert [v["status"] for v in json.loads(result.stdout)] == ["overrun"]


def test_jaeger_down_exits_2() -> None:
    args = ["check", "--jaeger-url", "http://127.0.0.1:9", "--service", "x", "--budget", BUDGET]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "127.0.0.1:9" in result.stderr
