"""`loadtest --sweep`: one normal load-test run per rate, then the knee per stage.

Each step is a `LoadTest` of its own (run id `RUNID-r8`, folder `OUT/r8`, its verdicts
joined from the collector, its report.json, requests.csv and report.html), so each shows
in the web UI as any run does. The sweep reads each step's figures back from the step's
own files and writes `sweep.json` and `sweep.html` beside the step folders.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from opentelemetry.sdk.trace import TracerProvider
from rich.console import Console

from ..stats import min_count
from .files import REQUESTS_CSV, read_results
from .render_sweep import render_sweep, step_line
from .run import (
    EXIT_BREACHED,
    EXIT_FAILED,
    EXIT_OK,
    LoadTest,
    RunFailed,
)
from .schedule import Phase
from .sweep import BOUNDED_P95, Sweep, SweepStep, rate_label
from .sweep_chart import sweep_page

__all__ = ["STEP_CAP_S", "SWEEP_HTML", "SWEEP_JSON", "SweepRun", "step_phase"]

SWEEP_JSON = "sweep.json"
SWEEP_HTML = "sweep.html"
# A step is lengthened to hold the requests a p95 needs, but never past this: a sweep that
# starts at 0.1 req/s would otherwise take ten minutes a step.
STEP_CAP_S = 120.0


def step_phase(rate: float, duration_s: float | None, requests: int | None) -> Phase:
    """One step's schedule: exactly `requests` when given; else `duration_s` at `rate`,
    lengthened to the requests that bound a p95 from both sides (`BOUNDED_P95`, 72; a p95
    needs `min_count(95)`, 59) within `STEP_CAP_S`."""
    name = f"r{rate_label(rate)}"
    if requests is not None:
        return Phase(name, rate, requests=requests)
    seconds = duration_s if duration_s is not None else 30.0
    wanted = max(math.ceil(rate * seconds), BOUNDED_P95)
    if wanted / rate <= max(seconds, STEP_CAP_S):
        return Phase(name, rate, requests=wanted)
    return Phase(name, rate, duration_s=max(seconds, STEP_CAP_S))


def expected_requests(phase: Phase) -> int:
    if phase.requests is not None:
        return phase.requests
    return math.floor(phase.rate * (phase.duration_s or 0.0))


@dataclass
class SweepRun:
    """A sweep's configuration: `template` is the load test every step copies (target,
    collector, budget, prompts, ...); each step gets its rate, run id and folder."""

    template: LoadTest
    rates: Sequence[float]
    duration_s: float | None = None  # per step
    requests: int | None = None  # per step

    def run(self, tracer_provider: TracerProvider, console: Console) -> tuple[Sweep, int]:
        base = self.template
        out, run_id = base.out, base.run_id
        model = base.resolve_model()  # once, not once a step
        budget = base.budget
        phases = [step_phase(rate, self.duration_s, self.requests) for rate in self.rates]
        few = [p for p in phases if expected_requests(p) < min_count(95)]
        console.print(
            f"sweep {run_id}: {len(phases)} steps, "
            + ", ".join(f"{rate_label(p.rate)}" for p in phases)
            + f" req/s, to {base.target}; each step a run of its own ({run_id}-r…)"
        )
        if few:
            console.print(
                f"[yellow]note:[/] {len(few)} step(s) will send fewer than the "
                f"{min_count(95)} requests a p95 needs (their p95s read `few`): "
                + ", ".join(f"{rate_label(p.rate)} req/s" for p in few)
            )
        steps: list[SweepStep] = []
        failed = ""
        quiet = Console(quiet=True)
        for index, phase in enumerate(phases):
            folder = out / f"r{rate_label(phase.rate)}"
            test = replace(
                base,
                model=model,
                phases=[phase],
                run_id=f"{run_id}-r{rate_label(phase.rate)}",
                out=folder,
                warmup=base.warmup if index == 0 else 0,
            )
            length = (
                f"{phase.requests} requests"
                if phase.requests is not None
                else f"{phase.duration_s:g} s"
            )
            try:
                with console.status(
                    f"step {index + 1}/{len(phases)}: {rate_label(phase.rate)} req/s, {length}"
                ):
                    report, _ = test.run(tracer_provider, quiet)
                    results = read_results(folder / REQUESTS_CSV)
            except RunFailed as exc:
                failed = f"{rate_label(phase.rate)} req/s: {exc}"
                console.print(f"[bold red]step failed:[/] {failed}", highlight=False)
                break
            step = SweepStep.of(phase.rate, report, results)
            steps.append(step)
            console.print(step_line(step, budget.stage_names()), highlight=False)
        sweep = Sweep(
            run_id=run_id,
            budget_name=budget.name,
            objective=budget.slo_objective,
            total_limit_ms=budget.total_limit_ms,
            limits_ms={s.name: s.limit_ms for s in budget.stages},
            targets_ms={s.name: s.target_ms for s in budget.stages},
            rates=list(self.rates),
            steps=steps,
            failed=failed,
            ui_url=base.ui_url,
        )
        out.mkdir(parents=True, exist_ok=True)
        (out / SWEEP_JSON).write_text(json.dumps(sweep.to_dict(), indent=2) + "\n")
        if steps:
            (out / SWEEP_HTML).write_text(sweep_page(sweep))
            render_sweep(sweep, console)
        console.print(f"files: {out}/{{{SWEEP_JSON},{SWEEP_HTML}}}; each step in {out}/r…/")
        if failed:
            return sweep, EXIT_FAILED
        return sweep, EXIT_OK if sweep.slo_met else EXIT_BREACHED
