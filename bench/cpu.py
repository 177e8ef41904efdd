"""Where the CPU goes in the embedded stack: CPU-ms per request for each process of
`spanbudget demo` (gateway, engine emulator frontend and core, collector, load tester) at
a nominal and a burst rate, and where retrieval's wall time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/cpu.py [--data-dir ./data] [--rates 2,16]
        [--seconds 15] [--configs before,after]

It starts the same processes as the demo (`spanbudget.demo.stack_children`), on ports of
its own, and drives the gateway with the load tester's open-loop dispatcher from this
process. CPU time comes from /proc/<pid>/stat (utime + stime), so contention from other
work on the machine changes the wall times but hardly the CPU-ms. `thread` runs the
gateway with the model in a worker thread of its own process, as earlier releases did;
`process` with the shipped default, the model in a process of its own; one after the
other in the same run. The latency tables are judged by the budget collector, as in the demo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The repository's packages come first: bench/collector.py would otherwise stand in for it.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console

from spanbudget.collector.loadtest.client import ChatRequest
from spanbudget.collector.loadtest.run import load_prompts
from spanbudget.collector.loadtest.runner import RunSettings, run_requests
from spanbudget.collector.loadtest.schedule import Arrival, Phase, build_schedule
from spanbudget.collector.loadtest.telemetry import loadtest_tracer_provider
from spanbudget.collector.loadtest.verdicts import wait_for_verdicts
from spanbudget.collector.stats import percentile
from spanbudget.demo import DemoSettings, ingest_if_needed, stack_children
from spanbudget.processes import Supervisor

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
MODEL = "Qwen/Qwen3-8B"
GOOD = ("ok", "warn")

# Gateway environment per configuration. `thread` keeps the model in the gateway's
# process, in a worker thread, as earlier releases did; `process` is the shipped default.
CONFIGS: dict[str, dict[str, str]] = {
    "thread": {"SPANBUDGET_EMBEDDING_PROCESS": "false"},
    "process": {},
    "process-nice0": {"SPANBUDGET_EMBEDDING_NICE": "0"},
    "process-2thr": {"SPANBUDGET_EMBEDDING_THREADS": "2"},
    "process-wait3": {"SPANBUDGET_EMBEDDING_BATCH_WAIT_MS": "3"},
}


def cpu_ms(pid: int | str) -> float:
    """utime + stime of a process (or `pid/task/tid` thread), in ms."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def busy_ms() -> float:
    """CPU time spent by the whole machine (every core, every process), in ms."""
    with open("/proc/stat") as stat:
        parts = [int(x) for x in stat.readline().split()[1:]]
    idle = parts[3] + parts[4]
    return (sum(parts[:8]) - idle) * TICK_MS


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            continue
    return found


def cmdline(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ").decode(errors="replace")


@dataclass
class Processes:
    """The pids whose CPU time is counted, by row of the table; `gateway` is split into
    its event loop (the main thread) and the rest of the process."""

    gateway: int
    rows: dict[str, list[int]] = field(default_factory=dict)

    def sample(self) -> dict[str, float]:
        total = cpu_ms(self.gateway)
        loop = cpu_ms(f"{self.gateway}/task/{self.gateway}")
        out = {"gateway: event loop thread": loop, "gateway: other threads": total - loop}
        for row, pids in self.rows.items():
            out[row] = 0.0
            for pid in pids:
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    out[row] += cpu_ms(pid)
        out["machine (all processes)"] = busy_ms()
        return out


def find_processes(supervisor: Supervisor) -> Processes:
    by_name = {c.name: c.process.pid for c in supervisor.children if c.process is not None}

    def spawned(pid: int) -> list[int]:  # multiprocessing children, not its resource tracker
        return [p for p in children_of(pid) if "resource_tracker" not in cmdline(p)]

    engine = by_name["engine"]
    rows: dict[str, list[int]] = {
        "gateway: embedding process": spawned(by_name["gateway"]),
        "engine frontend (HTTP, SSE)": [engine],
        "engine core (scheduler)": spawned(engine),
        "collector": [by_name["collector"]],
        "load tester (this process)": [os.getpid()],
    }
    return Processes(by_name["gateway"], rows)


@dataclass
class Measured:
    config: str
    rate: float
    requests: int
    seconds: float
    cpu: dict[str, float]  # ms over the window
    verdicts: list[dict[str, Any]]
    load: str


def drive(
    settings: DemoSettings, rate: float, seconds: float, run_id: str, seed: int
) -> tuple[int, float, list[str]]:
    prompts = load_prompts(None)
    schedule = build_schedule([Phase("p", rate, duration_s=seconds)], Arrival.POISSON, seed=seed)
    requests = [
        ChatRequest(
            i, "p", at, prompts[i % len(prompts)].prompt, prompts[i % len(prompts)].max_tokens
        )
        for i, (at, _) in enumerate(schedule)
    ]
    provider = loadtest_tracer_provider(f"http://{settings.collector}", env={})
    started = time.perf_counter()
    try:
        records = asyncio.run(
            run_requests(
                requests,
                RunSettings(f"http://{settings.gateway}/v1/chat/completions", MODEL, run_id),
                provider.get_tracer("bench.cpu"),
            )
        )
        provider.force_flush(10_000)
    finally:
        provider.shutdown()
    failed = [r.error for r in records if not r.ok]
    if failed:
        raise RuntimeError(f"{len(failed)} requests failed, first: {failed[0]}")
    return len(records), time.perf_counter() - started, [r.trace_id for r in records]


def measure(
    config: str, env: Mapping[str, str], args: argparse.Namespace, console: Console
) -> list[Measured]:
    settings = DemoSettings(
        data_dir=args.data_dir,
        gateway=f"127.0.0.1:{args.port_base + 80}",
        engine=f"127.0.0.1:{args.port_base}",
        collector=f"127.0.0.1:{args.port_base + 18}",
    )
    supervisor = Supervisor()
    out: list[Measured] = []
    try:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        ingest_if_needed(settings, supervisor, console)
        children = stack_children(settings, REPO / "budget.yaml")
        for child in children:
            if child.name == "gateway":
                child.env = {**child.env, **env}
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, settings.startup_timeout_s)
        processes = find_processes(supervisor)
        drive(settings, 4.0, 3.0, f"cpu-{config}-warmup", seed=99)
        for rate in args.rates:
            run_id = f"cpu-{config}-{rate:g}-{int(time.time())}"
            load = Path("/proc/loadavg").read_text().split()[0]
            before = processes.sample()
            n, seconds, trace_ids = drive(settings, rate, args.seconds, run_id, seed=int(rate))
            after = processes.sample()
            found = wait_for_verdicts(f"http://{settings.collector}", run_id, trace_ids)
            cpu = {row: after[row] - before[row] for row in after}
            out.append(Measured(config, rate, n, seconds, cpu, list(found.values()), load))
            console.print(
                f"{config} at {rate:g} req/s: {n} requests in {seconds:.1f} s, "
                f"{len(found)} verdicts, load average {load}"
            )
        supervisor.check_alive()
    finally:
        supervisor.stop_all()
    return out


def pct(values: Sequence[float], q: float) -> float:
    return percentile(sorted(values), q) if values else float("nan")


def print_tables(results: list[Measured]) -> None:
    heads = [f"{m.config} {m.rate:g}/s" for m in results]
    width = max(12, *(len(h) + 1 for h in heads))
    rows = list(results[0].cpu)

    def header(title: str) -> None:
        print(f"\n{title:42}" + "".join(f"{h:>{width}}" for h in heads))

    header("CPU ms per request")
    for row in rows:
        cells = "".join(f"{m.cpu[row] / m.requests:>{width}.2f}" for m in results)
        print(f"{row:42}{cells}")
    ours = [sum(v for k, v in m.cpu.items() if k != "machine (all processes)") for m in results]
    cells = "".join(f"{o / m.requests:>{width}.2f}" for o, m in zip(ours, results, strict=True))
    print(f"{'the stack, in all':42}{cells}")
    header("share of the 2 cores (% of wall time x cores)")
    cores = os.cpu_count() or 1
    for row in [*rows, "the stack, in all"]:
        cells = ""
        for o, m in zip(ours, results, strict=True):
            value = o if row == "the stack, in all" else m.cpu[row]
            cells += f"{100 * value / (m.seconds * 1000 * cores):>{width}.1f}"
        print(f"{row:42}{cells}")

    header("latency as judged, ms (p50 / p95)")
    stage_rows: dict[str, list[list[float]]] = defaultdict(lambda: [[] for _ in results])
    within = []
    for i, m in enumerate(results):
        good = 0
        for verdict in m.verdicts:
            good += verdict.get("status") in GOOD
            for stage in verdict.get("stages", []):
                if stage.get("ms") is None:
                    continue
                stage_rows[stage["name"]][i].append(stage["ms"])
                if stage["name"] == "retrieval":
                    for part, ms in (stage.get("breakdown") or {}).items():
                        stage_rows[f"  {part}"][i].append(ms)
        within.append(100 * good / max(1, len(m.verdicts)))
    order = ["network", "gateway", "retrieval"]
    names = [n for n in order if n in stage_rows]
    names += sorted(n for n in stage_rows if n.startswith("  "))
    names += [n for n in stage_rows if n not in names]
    for name in names:
        cells = ""
        for values in stage_rows[name]:
            cells += (
                f"{pct(values, 50):>{width // 2}.1f}/{pct(values, 95):<{width - width // 2 - 1}.1f}"
            )
        print(f"{name:42}{cells}")
    print(f"{'within every limit %':42}" + "".join(f"{w:>{width}.1f}" for w in within))
    print(f"{'load average at start (1 min)':42}" + "".join(f"{m.load:>{width}}" for m in results))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=Path("./data"))
    parser.add_argument("--rates", default="2,16")
    parser.add_argument("--seconds", type=float, default=15.0, help="per rate")
    parser.add_argument("--configs", default="thread,process", help=", ".join(CONFIGS))
    parser.add_argument("--port-base", type=int, default=19000)
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    console = Console()
    results: list[Measured] = []
    started = time.perf_counter()
    for config in args.configs.split(","):
        results += measure(config, CONFIGS[config], args, console)
    print(f"\n{os.cpu_count()} CPUs; {args.seconds:g} s per rate; Poisson arrivals")
    print_tables(results)
    print(f"\nbench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
