"""A whole load test: schedule, send, wait for verdicts, join, report, write the run's files."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
from opentelemetry.sdk.trace import TracerProvider
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..budget.model import Budget
from ..errors import CollectorError
from ..stats import percentile
from .client import ChatRequest, RequestRecord
from .files import (
    REPORT_JSON,
    REQUESTS_CSV,
    write_report,
    write_results,
)
from .records import join
from .render_html import render_html
from .render_terminal import render_terminal
from .report import build_report
from .report_model import Report, RunInfo
from .runner import Progress as Counters
from .runner import RunSettings, run_requests
from .schedule import Arrival, Phase, build_schedule
from .verdicts import CollectorUnavailable, wait_for_verdicts

__all__ = [
    "EXIT_BREACHED",
    "EXIT_FAILED",
    "EXIT_OK",
    "LoadTest",
    "RunFailed",
    "load_prompts",
    "new_run_id",
]

EXIT_OK, EXIT_BREACHED, EXIT_FAILED = 0, 1, 2


class RunFailed(CollectorError, RuntimeError):
    """The run itself failed (target unreachable, nothing answered, no verdicts)."""


@dataclass(frozen=True, slots=True)
class Prompt:
    prompt: str
    max_tokens: int = 64


def new_run_id(prefix: str = "run") -> str:
    """A short random run id, e.g. `run-3f2a9c1e`."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def load_prompts(path: Path | None = None) -> list[Prompt]:
    """Prompts from a JSONL file of `{"prompt": ..., "max_tokens": ...}`, or the shipped set."""
    if path is None:
        text = (
            resources.files("spanbudget.collector.loadtest").joinpath("prompts.jsonl").read_text()
        )
        source = "the shipped prompt set"
    else:
        text, source = path.read_text(), str(path)
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompts.append(Prompt(str(item["prompt"]), int(item.get("max_tokens", 64))))
        except (ValueError, KeyError, TypeError) as exc:
            raise RunFailed(f"{source}:{number}: not a prompt line ({exc})") from None
    if not prompts:
        raise RunFailed(f"{source}: no prompts")
    return prompts


@dataclass
class LoadTest:
    """One run's configuration; `run()` does it and returns the report and an exit code."""

    target: str  # the gateway's base URL, e.g. http://127.0.0.1:8080
    collector: str  # the budget collector's base URL, for verdicts
    budget: Budget
    phases: Sequence[Phase]
    out: Path
    arrival: Arrival = Arrival.POISSON
    model: str | None = None
    prompts: Sequence[Prompt] = field(default_factory=load_prompts)
    run_id: str = field(default_factory=lambda: new_run_id())
    seed: int = 0
    max_concurrency: int = 256
    api_key: str | None = None
    collector_token: str | None = None  # for a collector whose API asks for one
    warmup: int = 0
    verdict_timeout_s: float = 30.0
    ui_url: str = ""
    jaeger_ui: str = ""
    delay: str = ""  # the fault header sent on every timed request, e.g. `retrieval=15`

    @property
    def base(self) -> str:
        return self.target.rstrip("/").removesuffix("/v1")

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def resolve_model(self) -> str:
        if self.model:
            return self.model
        try:
            response = httpx.get(f"{self.base}/v1/models", headers=self._headers(), timeout=10)
            response.raise_for_status()
            return str(response.json()["data"][0]["id"])
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise RunFailed(f"cannot list models at {self.base}/v1/models: {exc}") from None

    def requests(self) -> list[ChatRequest]:
        rng = random.Random(self.seed)
        order = list(self.prompts)
        rng.shuffle(order)
        cycle = itertools.cycle(order)
        schedule = build_schedule(self.phases, self.arrival, seed=self.seed)
        requests = []
        for index, (at, phase) in enumerate(schedule):
            prompt = next(cycle)
            requests.append(ChatRequest(index, phase, at, prompt.prompt, prompt.max_tokens))
        return requests

    def run(self, tracer_provider: TracerProvider, console: Console) -> tuple[Report, int]:
        model = self.resolve_model()
        requests = self.requests()
        if not requests:
            raise RunFailed("the schedule holds no requests: raise --rate or --duration")
        tracer = tracer_provider.get_tracer("spanbudget.loadtest")
        settings = RunSettings(
            url=f"{self.base}/v1/chat/completions",
            model=model,
            run_id=self.run_id,
            max_concurrency=self.max_concurrency,
            api_key=self.api_key,
            delay=self.delay,
        )
        if self.warmup:
            warm = [
                ChatRequest(-1 - i, "warmup", 0.0, r.prompt, 8)
                for i, r in enumerate(requests[: self.warmup])
            ]
            warm_settings = RunSettings(
                settings.url, model, f"{self.run_id}-warmup", 4, self.api_key
            )
            asyncio.run(run_requests(warm, warm_settings, tracer))
        started_at = datetime.now(UTC)
        start = time.perf_counter()
        records = asyncio.run(self._send(requests, settings, tracer, console))
        duration = max(time.perf_counter() - start, 1e-9)
        tracer_provider.force_flush(10_000)
        if not any(r.ok for r in records):
            raise RunFailed(f"no request succeeded; first error: {records[0].error}")
        with console.status(f"waiting for the verdicts of {len(records)} traces"):
            try:
                verdicts = wait_for_verdicts(
                    self.collector,
                    self.run_id,
                    [r.trace_id for r in records],
                    timeout_s=self.verdict_timeout_s,
                    token=self.collector_token,
                )
            except CollectorUnavailable as exc:
                raise RunFailed(str(exc)) from None
        if not verdicts:
            raise RunFailed(f"no verdict arrived from {self.collector} for run {self.run_id}")
        results = join(records, verdicts)
        info = RunInfo(
            run_id=self.run_id,
            target=self.base,
            model=model,
            started_at=started_at.isoformat(timespec="seconds"),
            duration_s=duration,
            config={
                "arrival": self.arrival.value,
                "phases": [
                    {
                        "name": p.name,
                        "rate": p.rate,
                        "duration_s": p.duration_s,
                        "requests": p.requests,
                    }
                    for p in self.phases
                ],
                "seed": self.seed,
                "max_concurrency": self.max_concurrency,
                "warmup": self.warmup,
                **({"delay": self.delay} if self.delay else {}),
            },
            ui_url=self.ui_url,
            jaeger_ui=self.jaeger_ui,
        )
        report = build_report(results, self.budget, info)
        self.out.mkdir(parents=True, exist_ok=True)
        write_results(self.out / REQUESTS_CSV, self.budget.stage_names(), results)
        write_report(self.out / REPORT_JSON, report)
        (self.out / "report.html").write_text(render_html(report, results))
        render_terminal(report, console)
        console.print(f"files: {self.out}/{{{REPORT_JSON},{REQUESTS_CSV},report.html}}")
        return report, EXIT_OK if report.slo_met else EXIT_BREACHED

    async def _send(
        self, requests: list[ChatRequest], settings: RunSettings, tracer: Any, console: Console
    ) -> list[RequestRecord]:
        counters = Counters(len(requests))
        ttfts: list[float] = []

        def on_record(record: RequestRecord) -> None:
            if record.ttft_ms is not None:
                ttfts.append(record.ttft_ms)

        def p95() -> str:
            return f"{percentile(sorted(ttfts), 95):.0f} ms" if ttfts else "—"

        columns = (
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("sent {task.fields[sent]} done {task.completed}/{task.total}"),
            TextColumn("errors {task.fields[errors]}  p95 TTFT {task.fields[p95]}"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task(self.run_id, total=len(requests), sent=0, errors=0, p95="—")
            work = asyncio.create_task(
                run_requests(requests, settings, tracer, on_record=on_record, progress=counters)
            )
            while True:
                bar.update(
                    task,
                    completed=counters.finished,
                    sent=counters.sent,
                    errors=counters.errors,
                    p95=p95(),
                )
                if work.done():
                    return work.result()
                await asyncio.wait({work}, timeout=0.25)
