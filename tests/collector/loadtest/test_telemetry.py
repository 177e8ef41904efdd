"""Where spans go (`spanbudget.common.tracing`): the load tester's root spans reach the collector
its verdicts are joined from; every other process follows the OTLP exporter specification."""

from __future__ import annotations

import pytest
from spanbudget.common.tracing import otlp_traces_endpoint

TRACES = "http://otel-collector:4318/v1/traces"
AMBIENT = "http://somewhere-else:4318"


@pytest.mark.parametrize(
    ("collector", "env", "expected"),
    [
        (None, {}, "http://127.0.0.1:4318/v1/traces"),
        ("http://bc:4318/", {}, "http://bc:4318/v1/traces"),
        # A general endpoint left in the shell does not beat an explicit --collector...
        ("http://bc:4318", {"OTEL_EXPORTER_OTLP_ENDPOINT": AMBIENT}, "http://bc:4318/v1/traces"),
        # ...but applies when no collector was named.
        (None, {"OTEL_EXPORTER_OTLP_ENDPOINT": AMBIENT}, f"{AMBIENT}/v1/traces"),
        # A traces endpoint is a deliberate route (docs/deployment.md) and is used as is.
        ("http://bc:4318", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": TRACES}, TRACES),
    ],
)
def test_endpoint_precedence_with_a_named_collector(
    collector: str | None, env: dict[str, str], expected: str
) -> None:
    assert otlp_traces_endpoint(env, base=collector) == expected


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, "http://127.0.0.1:4318/v1/traces"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": AMBIENT + "/"}, f"{AMBIENT}/v1/traces"),
        (
            {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": TRACES, "OTEL_EXPORTER_OTLP_ENDPOINT": AMBIENT},
            TRACES,
        ),
    ],
)
def test_endpoint_precedence_of_the_specification(env: dict[str, str], expected: str) -> None:
    assert otlp_traces_endpoint(env) == expected
