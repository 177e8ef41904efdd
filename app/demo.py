"""`spanbudget demo`: the whole embedded stack as separate processes, and a two-phase load test.

The composition root: it starts the engine emulator, the budget collector and the RAG
gateway as children (they meet only over HTTP and OTLP, as in production), drives the
gateway at a nominal rate that fits the budget and then in a burst that makes the engine
queue, and prints the per-stage report.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape
from spanbudget.collector.budget.loader import BudgetError, load_budget
from spanbudget.collector.budget.source import disaggregated_budget, find_budget
from spanbudget.collector.loadtest.files import read_results
from spanbudget.collector.loadtest.report_model import Report
from spanbudget.collector.loadtest.run import EXIT_FAILED, LoadTest, RunFailed, new_run_id
from spanbudget.collector.loadtest.schedule import Arrival, Phase
from spanbudget.collector.loadtest.tracer import loadtest_tracer_provider
from spanbudget.collector.loadtest.verdicts import CollectorUnavailable, wait_for_verdicts
from spanbudget.collector.stats import decide_slo, enough_for, percentile
from spanbudget.service.settings import Settings as GatewaySettings

from .processes import Child, ChildFailed, Supervisor
from .stack import CHILD_ENV, Jaeger, Stack, spanbudget_command

__all__ = ["DemoSettings", "ingest_if_needed", "run_demo", "stack_of"]


@dataclass(frozen=True)
class DemoSettings:
    duration_s: float = 30.0
    out: Path | None = None
    exit_after: bool = False
    data_dir: Path = Path("data")
    budget: Path | None = None  # ./budget.yaml, else the packaged default
    gateway: str = "127.0.0.1:8080"
    engine: str = "127.0.0.1:8000"
    collector: str = "127.0.0.1:4318"
    # One H100 (see `spanbudget engine --list-presets`): the nominal rate fits the 100 ms
    # prefill target; the burst keeps it busy enough to queue past the 120 ms limit.
    preset: str | None = "qwen3-8b-h100"
    # The engine as a prefill and a decode instance, the KV cache moved between them; without
    # a budget given, judged with the packaged one that has a kv_transfer stage.
    disaggregated: bool = False
    nominal_rate: float = 2.0
    burst_rate: float = 16.0
    burst_share: float = 0.3  # of the duration
    decision_wait: str = "1s"
    startup_timeout_s: float = 180.0
    jaeger: Path | None = None  # a Jaeger v2 binary: started first, every trace forwarded


class _Interrupted(Exception):
    pass


def _intakes(collector_url: str) -> str:
    """Where the collector takes spans: OTLP/HTTP, and OTLP/gRPC when it serves."""
    http = f"OTLP/HTTP {collector_url}/v1/traces"
    try:
        health = httpx.get(f"{collector_url}/healthz", timeout=5).json()
    except (httpx.HTTPError, ValueError):
        return http
    grpc = health.get("grpc_address")
    if grpc:
        return f"{http}, OTLP/gRPC {grpc}"
    state = health.get("listeners", {}).get("grpc", "off")
    return f"{http} (OTLP/gRPC {'not serving: its port is taken' if state != 'off' else 'off'})"


def ingest_if_needed(settings: DemoSettings, supervisor: Supervisor, console: Console) -> None:
    # Where the gateway will read, with the same environment (SPANBUDGET_COLLECTION, ...).
    overrides: dict[str, Any] = {"data_dir": settings.data_dir}
    shard = GatewaySettings(**overrides).shard_path
    if shard.is_dir() and any(shard.iterdir()):
        return
    console.print("[bold]first run:[/] ingesting the default corpus (the Python docs)...")
    child = Child(
        "ingest",
        spanbudget_command("ingest", "--data-dir", str(settings.data_dir)),
        "",
        settings.data_dir / "logs" / "ingest.log",
        CHILD_ENV,
    )
    supervisor.start(child)
    assert child.process is not None
    code = child.process.wait()
    supervisor.children.remove(child)
    if code != 0:
        raise ChildFailed(f"ingest failed with code {code}:\n{child.log_tail()}")


def stack_of(settings: DemoSettings, budget: Path) -> Stack:
    """The embedded stack as the demo starts it; bench/cpu.py starts the same to measure
    where the CPU goes."""
    return Stack(
        data_dir=settings.data_dir,
        budget=budget,
        collector=settings.collector,
        engine=settings.engine,
        gateway=settings.gateway,
        preset=settings.preset,
        disaggregated=settings.disaggregated,
        decision_wait=settings.decision_wait,
        jaeger=Jaeger(settings.jaeger) if settings.jaeger else None,
    )


def what_to_look_at(report: Report | None) -> str:
    """Phase by phase (the burst is meant to break what the nominal phase keeps): the share
    within every limit against the objective, and the stages whose p95 went over their
    limit, when the phase had requests enough to bound a p95."""
    if report is None:
        return "the logs under the data dir: the run did not finish."
    limits = {stage.name: stage.limit_ms for stage in report.stages}
    notes = []
    for phase in report.phases:
        within = round(phase.within_limits * phase.requests)
        decision = decide_slo(within, phase.requests, report.slo_objective).value
        head = f"{phase.name} {phase.within_limits:.0%} within limits (SLO {decision})"
        if not enough_for(95, phase.requests):
            notes.append(f"{head}, too few requests for a p95")
            continue
        over = [
            f"{name} p95 {p95:.0f} ms > {limits[name]:g}"
            for name, p95 in phase.stage_p95_ms.items()
            if p95 is not None and p95 > limits[name]
        ]
        notes.append(f"{head}, " + (", ".join(over) if over else "every stage's p95 within"))
    return (
        "; ".join(notes)
        + ". The blame column of the slowest traces names the stage that ate the budget."
    )


# The parts of the retrieval stage's breakdown that are waits, not the model computing.
_RETRIEVAL_WAITS = {
    "embeddings.queue": "for a model call",
    "embeddings.loop_wait": "for the gateway's event loop",
}


def retrieval_waits(
    collector_url: str, run_id: str, requests_csv: Path, *, client: httpx.Client | None = None
) -> str:
    """Per phase, the p95 of the time retrieval waited (for a model call, for the event
    loop) rather than computed, from the collector's verdicts: when the machine has too
    little CPU, this is where it shows. Empty when the run's files or verdicts cannot be
    read."""
    try:
        records = [result.request for result in read_results(requests_csv)]
    except (OSError, ValueError):
        return ""
    phase_of = {record.trace_id: record.phase for record in records if record.trace_id}
    try:  # what has arrived: the report was made after waiting for the verdicts
        verdicts = wait_for_verdicts(collector_url, run_id, phase_of, timeout_s=0.0, client=client)
    except CollectorUnavailable:
        return ""
    waits: dict[str, dict[str, list[float]]] = {}
    for trace_id, verdict in verdicts.items():
        retrieval = next((s for s in verdict.stages if s.name == "retrieval"), None)
        if retrieval is None:
            continue
        phase_waits = waits.setdefault(phase_of[trace_id], {})
        for part in _RETRIEVAL_WAITS:
            phase_waits.setdefault(part, []).append(retrieval.breakdown.get(part, 0.0))
    notes = []
    for phase in dict.fromkeys(record.phase for record in records):  # in the run's order
        parts = waits.get(phase)
        if not parts:
            continue
        said = ", ".join(
            f"{percentile(sorted(parts[part]), 95):.1f} ms {what} ({part})"
            for part, what in _RETRIEVAL_WAITS.items()
        )
        notes.append(f"{phase}: {said}")
    return "; ".join(notes)


def run_demo(settings: DemoSettings, console: Console) -> int:
    """Run the demo; returns 0 when the report was made, 2 when the stack or the run failed."""
    if settings.disaggregated and settings.budget is None:
        source = disaggregated_budget()
    else:
        source = find_budget(settings.budget)
    console.print(source.describe(), highlight=False)
    try:
        loaded = load_budget(source.path)
    except BudgetError as exc:  # before any child starts: nothing to stop
        console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        return EXIT_FAILED
    run_id = new_run_id("demo")
    out = settings.out or Path("runs") / run_id
    logs = settings.data_dir / "logs"
    supervisor = Supervisor()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()
        raise _Interrupted(signal.Signals(signum).name)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    collector_url = f"http://{settings.collector}"
    try:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        ingest_if_needed(settings, supervisor, console)
        stack = stack_of(settings, source.path)
        children = stack.children()
        for child in children:
            supervisor.start(child)
        with console.status("starting the engine emulator, the collector and the gateway"):
            for child in children:
                supervisor.wait_healthy(child, settings.startup_timeout_s)
        jaeger = f", Jaeger {stack.jaeger.query_url}" if stack.jaeger else ""
        console.print(
            f"stack up: gateway http://{settings.gateway}, engine http://{settings.engine}, "
            f"collector {collector_url}{jaeger} (logs in {logs})\n"
            f"collector intake: {_intakes(collector_url)}"
        )
        burst_s = settings.duration_s * settings.burst_share
        test = LoadTest(
            target=f"http://{settings.gateway}",
            collector=collector_url,
            budget=loaded.budget,
            phases=[
                Phase("nominal", settings.nominal_rate, duration_s=settings.duration_s - burst_s),
                Phase("burst", settings.burst_rate, duration_s=burst_s),
            ],
            out=out,
            arrival=Arrival.POISSON,
            run_id=run_id,
            warmup=2,
            ui_url=collector_url,
        )
        # The demo's own collector, whatever OTLP variables the shell has: it joins from there.
        provider = loadtest_tracer_provider(collector_url, env={})
        report: Report | None = None
        try:
            # The burst is meant to break the budget: a finished run is a successful demo.
            report, _ = test.run(provider, console)
            code = 0
        except RunFailed as exc:
            console.print(f"[bold red]run failed:[/] {escape(str(exc))}")
            code = EXIT_FAILED
        finally:
            provider.shutdown()
        supervisor.check_alive()
        waits = retrieval_waits(collector_url, run_id, out / "requests.csv") if report else ""
        console.print(
            f"\nweb UI: {collector_url}/  (run {run_id}; click a trace for its stages)\n"
            f"what to look at: {what_to_look_at(report)}\n"
            + (f"retrieval waited (p95), not computing: {waits}\n" if waits else "")
            + f"`spanbudget report {out}` prints the report again; {out}/report.html has charts."
        )
        if not settings.exit_after:
            console.print("the stack stays up; Ctrl-C stops it")
            while not stop.is_set():
                supervisor.check_alive()
                time.sleep(0.5)
        return code
    except _Interrupted:
        console.print("\nstopping")
        return 0
    except ChildFailed as exc:
        console.print(f"[bold red]stack failed:[/] {escape(str(exc))}")
        return EXIT_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with console.status("stopping children"):
            supervisor.stop_all()
