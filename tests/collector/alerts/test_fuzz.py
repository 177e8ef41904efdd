"""10,000 malformed and mutated OTLP bodies into `spanbudget collect` with its default
settings: never a 5xx, memory within 10% of where it started, at most one firing per rule.

Memory is the collector's resident set, measured after a warm-up (the 40 reference traces
and 200 fuzzed bodies of another seed, decided) and every 250 bodies from then on.
"""

from __future__ import annotations

import collections
import random
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest
from spanbudget.collector.alerts.burnrate import DEFAULT_RULES

from tests.collector.alerts.alertmanager import WebhookReceiver
from tests.collector.alerts.fuzz_bodies import (
    PROTOBUF,
    Body,
    fuzz_bodies,
    protobuf,
    reference_traces,
)
from tests.deploy.processes import spanbudget_command, start_process, stop_process
from tests.support.servers import free_port

BODIES = 10_000
SEED = 16
SAMPLE_EVERY = 250
DECIDED_S = 3.0  # the default decision wait is 2 s


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def post(client: httpx.Client, body: Body) -> int:
    headers = {"Content-Type": body.content_type, **body.headers}
    return client.post("/v1/traces", content=body.content, headers=headers).status_code


def warm_up() -> Iterable[Body]:
    for spans in reference_traces(random.Random(SEED + 1)):
        yield Body("reference", protobuf(spans), PROTOBUF, {})
    yield from fuzz_bodies(SEED + 2, 200)


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver() as hook:
        yield hook


@pytest.mark.slow
def test_fuzzed_bodies_never_5xx_keep_memory_flat_and_fire_each_rule_once_at_most(
    tmp_path: Path, receiver: WebhookReceiver
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--grpc-listen", "off"),  # not the shared default port
        *("--db", str(tmp_path / "verdicts.db")),
        *("--webhook", receiver.url),  # a sink, to count firings; every other setting default
    )
    log = tmp_path / "collector.log"
    process = start_process(command, f"{base}/healthz", log)
    first_trace = time.monotonic()
    statuses: collections.Counter[int] = collections.Counter()
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            for body in warm_up():
                post(client, body)
            time.sleep(DECIDED_S)
            start = rss_bytes(process.pid)
            samples = []
            began = time.monotonic()
            for i, body in enumerate(fuzz_bodies(SEED, BODIES)):
                statuses[post(client, body)] += 1
                if i % SAMPLE_EVERY == 0:
                    samples.append(rss_bytes(process.pid))
            elapsed = time.monotonic() - began
            time.sleep(DECIDED_S)  # the last traces are judged and alerted on
            samples.append(rss_bytes(process.pid))
            states = collections.Counter(
                r["state"] for r in client.get("/api/alerts").json()["rules"]
            )
    finally:
        stop_process(process)
    print(
        f"\n{BODIES} bodies in {elapsed:.1f} s: {dict(statuses)}; RSS {start / 2**20:.1f} MiB"
        f" at the start, at most {max(samples) / 2**20:.1f} MiB; rules {dict(states)}"
    )
    assert not [code for code in statuses if code >= 500], statuses
    assert statuses[200] > 500  # both paths really were exercised
    assert statuses[400] > 5000
    assert max(samples) <= start * 1.10
    firings = collections.Counter(
        (alert["labels"]["stage"], alert["labels"]["severity"])
        for notification in receiver.bodies()
        for alert in notification["alerts"]
        if alert["status"] == "firing"
    )
    assert all(n <= 1 for n in firings.values()), firings
    # Shorter than the shortest `for` (2m) since the first trace: nothing can fire at all.
    if time.monotonic() - first_trace < min(rule.for_s for rule in DEFAULT_RULES):
        assert firings == {}, firings
    # The log names every firing too (stage/severity); never twice for the same one.
    logged = collections.Counter(
        line.split("firing alert ", 1)[1].split(":", 1)[0]
        for line in log.read_text().splitlines()
        if "firing alert " in line
    )
    assert all(n <= 1 for n in logged.values()), logged
