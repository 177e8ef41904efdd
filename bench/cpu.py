"""Where the CPU goes in the embedded stack: CPU-ms per request for each process of
`spanbudget demo` (gateway, engine emulator frontend and core, collector, load tester) at
a nominal and a burst rate, and where retrieval's wall time goes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/cpu.py [--data-dir ./data] [--rates 2,16]
        [--seconds 20] [--configs before,after,after-1process] [--quick]

`--quick` (CI) ingests 3 documents into a temp dir and measures `after` at 4 req/s for
2 s: it checks the bench runs (with the reference models), not its numbers.

It starts the same processes as the demo (`spanbudget.app.stack.Stack`, as
`spanbudget.app.demo.stack_of` sets it up), on ports of its own, and drives the gateway with
the load tester's open-loop dispatcher from this process. CPU time comes from
/proc/<pid>/stat (utime + stime), the time spent runnable but waiting for a core from
/proc/<pid>/task/*/schedstat: contention from other work on the machine changes the wall
times much more than the CPU-ms. Configurations run one after the other in the same run:
`before` runs the query model as the gateway first did, eagerly, in a worker thread of the
gateway's own process; `after` with the shipped defaults; the others change one setting of
`after`. (Qdrant Edge's one search thread and the collector's lower priority apply to
every configuration: `after-qdrant8` undoes the first.)

The latency rows are the budget collector's verdicts, as in the demo. The collector also
forwards the spans to a receiver in this process, which reads what the `embeddings {model}`
span says about its query: the waits for the model and for the event loop, the model
call's wall and CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# The repository's packages come first: bench/collector.py would otherwise stand in for it.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_summary import record
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from rich.console import Console
from spanbudget.app.demo import DemoSettings, ingest_if_needed, stack_of
from spanbudget.app.processes import Supervisor
from spanbudget.collector.loadtest.client import ChatRequest
from spanbudget.collector.loadtest.run import load_prompts
from spanbudget.collector.loadtest.runner import RunSettings, run_requests
from spanbudget.collector.loadtest.schedule import Arrival, Phase, build_schedule
from spanbudget.collector.loadtest.tracer import loadtest_tracer_provider
from spanbudget.collector.loadtest.verdicts import wait_for_verdicts
from spanbudget.collector.stats import percentile
from spanbudget.service import attributes as names

from tests.support.servers import free_port

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")
MODEL = "Qwen/Qwen3-8B"
GOOD = ("ok", "warn")

# Gateway environment per configuration.
CONFIGS: dict[str, dict[str, str]] = {
    # As the gateway first ran: the eager model in a worker thread of the gateway's process.
    "before": {"SPANBUDGET_EMBEDDING_PROCESS": "false", "SPANBUDGET_EMBEDDING_RUNTIME": "eager"},
    "after": {},
    "after-1process": {"SPANBUDGET_EMBEDDING_PROCESSES": "1"},
    "after-nice0": {"SPANBUDGET_EMBEDDING_NICE": "0"},
    "after-2threads": {"SPANBUDGET_EMBEDDING_THREADS": "2"},
    "after-1process-2threads": {
        "SPANBUDGET_EMBEDDING_PROCESSES": "1",
        "SPANBUDGET_EMBEDDING_THREADS": "2",
    },
    "after-torchscript": {"SPANBUDGET_EMBEDDING_RUNTIME": "torchscript"},  # the last release
    "after-eager": {"SPANBUDGET_EMBEDDING_RUNTIME": "eager"},  # no compiled graph
    "after-wait3ms": {"SPANBUDGET_EMBEDDING_BATCH_WAIT_MS": "3"},
    "after-qdrant8": {"SPANBUDGET_QDRANT_SEARCH_THREADS": "8"},  # Qdrant's default here
}


def cpu_ms(pid: int | str) -> float:
    """utime + stime of a process (or `pid/task/tid` thread), in ms."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) * TICK_MS


def wait_ms(pid: int, tid: int | None = None) -> float:
    """Time the process's threads (or one thread) spent runnable, waiting for a core, in ms
    (/proc schedstat: the scheduler's own account)."""
    tids = [str(tid)] if tid is not None else os.listdir(f"/proc/{pid}/task")
    total = 0
    for t in tids:
        with (
            contextlib.suppress(FileNotFoundError, ProcessLookupError),
            open(f"/proc/{pid}/task/{t}/schedstat") as stat,
        ):
            total += int(stat.read().split()[1])
    return total / 1e6


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


class SpanTap:
    """An OTLP/HTTP receiver for the collector's forwarded spans, in a thread of its own:
    per trace, what `embeddings {model}` says and how long the retrieval spans took."""

    def __init__(self) -> None:
        self.port = free_port()
        self.traces: dict[str, dict[str, float]] = defaultdict(dict)
        self.thread_id = 0
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                tap.take(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = HTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        self.thread_id = threading.get_native_id()
        self._server.serve_forever(poll_interval=0.2)

    def take(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    ms = (span.end_time_unix_nano - span.start_time_unix_nano) / 1e6
                    row = self.traces[span.trace_id.hex()]
                    if span.name.startswith("embeddings "):
                        row["embeddings span"] = ms
                        for kv in span.attributes:
                            value = kv.value
                            number = value.double_value if value.HasField("double_value") else 0
                            row[kv.key] = number or float(value.int_value)
                    elif span.name.startswith("query "):
                        row["query span"] = ms
                    elif span.name.startswith("retrieval "):
                        row["retrieval span"] = ms

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class Processes:
    """The pids whose CPU time is counted, by row of the table; `gateway` is split into
    its event loop (the main thread) and the rest of the process."""

    gateway: int
    rows: dict[str, list[int]] = field(default_factory=dict)
    tap_thread: int = 0

    def sample(self) -> tuple[dict[str, float], dict[str, float]]:
        """CPU ms and ms spent waiting for a core, by row, so far."""
        total = cpu_ms(self.gateway)
        loop = cpu_ms(f"{self.gateway}/task/{self.gateway}")
        cpu = {"gateway: event loop thread": loop, "gateway: other threads": total - loop}
        waited = {
            "gateway: event loop thread": wait_ms(self.gateway, self.gateway),
            "gateway: other threads": wait_ms(self.gateway) - wait_ms(self.gateway, self.gateway),
        }
        for row, pids in self.rows.items():
            cpu[row] = waited[row] = 0.0
            for pid in pids:
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    cpu[row] += cpu_ms(pid)
                    waited[row] += wait_ms(pid)
        # The span tap is the benchmark's, not the load tester's.
        me, tap = os.getpid(), self.tap_thread
        cpu["load tester (this process)"] -= cpu_ms(f"{me}/task/{tap}")
        waited["load tester (this process)"] -= wait_ms(me, tap)
        cpu["machine (all processes)"] = busy_ms()
        return cpu, waited


def find_processes(supervisor: Supervisor, tap: SpanTap) -> Processes:
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
    return Processes(by_name["gateway"], rows, tap.thread_id)


@dataclass
class Measured:
    config: str
    rate: float
    requests: int
    seconds: float
    cpu: dict[str, float]  # ms over the window
    waited: dict[str, float]  # ms runnable but waiting for a core, over the window
    verdicts: list[dict[str, Any]]
    retrieval: list[dict[str, float]]  # per trace, from the span tap
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
    tap = SpanTap()
    out: list[Measured] = []
    try:
        args.data_dir.mkdir(parents=True, exist_ok=True)
        ingest_if_needed(settings, supervisor, console)
        children = stack_of(settings, REPO / "budget.yaml").children()
        for child in children:
            if child.name == "gateway":
                child.env = {**child.env, **env}
            if child.name == "collector":
                child.argv = [*child.argv, "--forward-otlp", f"http://127.0.0.1:{tap.port}"]
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, settings.startup_timeout_s)
        processes = find_processes(supervisor, tap)
        drive(settings, 4.0, 3.0, f"cpu-{config}-warmup", seed=99)
        for rate in args.rates:
            run_id = f"cpu-{config}-{rate:g}-{int(time.time())}"
            load = Path("/proc/loadavg").read_text().split()[0]
            cpu_before, wait_before = processes.sample()
            n, seconds, trace_ids = drive(settings, rate, args.seconds, run_id, seed=int(rate))
            cpu_after, wait_after = processes.sample()
            found = wait_for_verdicts(f"http://{settings.collector}", run_id, trace_ids)
            time.sleep(1.5)  # the forwarder sends judged traces on within a second
            cpu = {row: cpu_after[row] - cpu_before[row] for row in cpu_after}
            waited = {row: wait_after[row] - wait_before[row] for row in wait_after}
            parts = [tap.traces[t] for t in trace_ids if "embeddings span" in tap.traces.get(t, {})]
            verdicts = [verdict.to_dict() for verdict in found.values()]
            out.append(Measured(config, rate, n, seconds, cpu, waited, verdicts, parts, load))
            console.print(
                f"{config} at {rate:g} req/s: {n} requests in {seconds:.1f} s, "
                f"{len(found)} verdicts, {len(parts)} traces tapped, load average {load}"
            )
        supervisor.check_alive()
    finally:
        supervisor.stop_all()
        tap.close()
    return out


def pct(values: Sequence[float], q: float) -> float:
    return percentile(sorted(values), q) if values else float("nan")


def retrieval_parts(trace: Mapping[str, float]) -> dict[str, float]:
    """Retrieval's wall time by where it went, for one trace (ms)."""
    span = trace["embeddings span"]
    queue = trace.get(names.EMBEDDINGS_QUEUE_MS, 0.0)
    compute = trace.get(names.EMBEDDINGS_COMPUTE_MS, 0.0)
    cpu = trace.get(names.EMBEDDINGS_COMPUTE_CPU_MS, 0.0)
    loop_wait = trace.get(names.EMBEDDINGS_LOOP_WAIT_MS, 0.0)
    return {
        "retrieval span": trace.get("retrieval span", float("nan")),
        "  embeddings span": span,
        "    waiting for the model (queue)": queue,
        "    handing the batch to the model": max(0.0, span - queue - compute - loop_wait),
        "    model call, wall": compute,
        "      of it on a core (CPU)": cpu,
        # With two torch threads the CPU time can exceed the wall time: then this is 0.
        "      of it waiting for a core": max(0.0, compute - cpu),
        "    waiting for the event loop": loop_wait,
        "    queries in its model call": trace.get(names.EMBEDDINGS_BATCH_SIZE, float("nan")),
        "  query span (Qdrant Edge HNSW)": trace.get("query span", float("nan")),
    }


def print_tables(results: list[Measured]) -> None:
    heads = [f"{m.config} {m.rate:g}/s" for m in results]
    width = max(14, *(len(h) + 1 for h in heads))
    rows = list(results[0].cpu)
    cores = os.cpu_count() or 1

    def header(title: str) -> None:
        print(f"\n{title:44}" + "".join(f"{h:>{width}}" for h in heads))

    def pair(values: Sequence[float]) -> str:
        half = width // 2
        return f"{pct(values, 50):>{half}.1f}/{pct(values, 95):<{width - half - 1}.1f}"

    header("CPU ms per request")
    for row in rows:
        cells = "".join(f"{m.cpu[row] / m.requests:>{width}.2f}" for m in results)
        print(f"{row:44}{cells}")
    ours = [sum(v for k, v in m.cpu.items() if k != "machine (all processes)") for m in results]
    cells = "".join(f"{o / m.requests:>{width}.2f}" for o, m in zip(ours, results, strict=True))
    print(f"{'the stack, in all':44}{cells}")
    header("waiting for a core (runnable), ms per request")
    for row in results[0].waited:
        cells = "".join(f"{m.waited[row] / m.requests:>{width}.2f}" for m in results)
        print(f"{row:44}{cells}")
    header("share of the 2 cores (% of wall time x cores)")
    for row in [*rows, "the stack, in all"]:
        cells = ""
        for o, m in zip(ours, results, strict=True):
            value = o if row == "the stack, in all" else m.cpu[row]
            cells += f"{100 * value / (m.seconds * 1000 * cores):>{width}.1f}"
        print(f"{row:44}{cells}")

    header("retrieval's wall time, ms (p50 / p95)")
    parts = [[retrieval_parts(t) for t in m.retrieval] for m in results]
    for name in retrieval_parts({"embeddings span": 0.0}):
        print(f"{name:44}" + "".join(pair([p[name] for p in rows_]) for rows_ in parts))

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
    rows = [n for n in order if n in stage_rows]
    rows += sorted(n for n in stage_rows if n.startswith("  "))
    rows += [n for n in stage_rows if n not in rows]
    for name in rows:
        print(f"{name:44}" + "".join(pair(values) for values in stage_rows[name]))
    print(f"{'within every limit %':44}" + "".join(f"{w:>{width}.1f}" for w in within))
    print(f"{'load average at start (1 min)':44}" + "".join(f"{m.load:>{width}}" for m in results))

    by_rate: dict[float, dict[str, Measured]] = defaultdict(dict)
    for m in results:
        by_rate[m.rate][m.config] = m
    ratios = []
    for rate, configs in by_rate.items():
        if "before" in configs and "after" in configs:
            b, a = configs["before"], configs["after"]
            stack_b = sum(v for k, v in b.cpu.items() if k != "machine (all processes)")
            stack_a = sum(v for k, v in a.cpu.items() if k != "machine (all processes)")
            rb = [s["ms"] for v in b.verdicts for s in v["stages"] if s["name"] == "retrieval"]
            ra = [s["ms"] for v in a.verdicts for s in v["stages"] if s["name"] == "retrieval"]
            ratios.append(
                f"at {rate:g}/s: stack CPU per request after/before "
                f"{(stack_a / a.requests) / (stack_b / b.requests):.2f}, "
                f"retrieval p95 after/before {pct(ra, 95) / pct(rb, 95):.2f}"
            )
    if ratios:
        print("\nsame-run ratios: " + "; ".join(ratios))


def ingest_sample(data_dir: Path, *, documents: int) -> None:
    """A few documents of the default corpus where the stack reads its collection."""
    import itertools

    from spanbudget.service.embedding import SentenceTransformerEmbedder
    from spanbudget.service.ingest import default_corpus, ingest
    from spanbudget.service.settings import Settings
    from spanbudget.service.vectorstore import EdgeStore
    from spanbudget.service.wiring import hnsw_params

    settings = Settings(_env_file=None, data_dir=data_dir)
    embedder = SentenceTransformerEmbedder()
    store = EdgeStore(
        settings.shard_path,
        collection=settings.collection,
        dimension=embedder.dimension,
        hnsw=hnsw_params(settings),
    )
    ingest(list(itertools.islice(default_corpus(), documents)), embedder, store)
    store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--data-dir", type=Path, default=Path("./data"))
    parser.add_argument("--rates", default="2,16")
    parser.add_argument("--seconds", type=float, default=20.0, help="per rate")
    parser.add_argument("--configs", default="before,after", help=", ".join(CONFIGS))
    parser.add_argument("--port-base", type=int, default=19000)
    parser.add_argument("--quick", action="store_true", help="a short run (CI)")
    args = parser.parse_args()
    if args.quick:
        args.rates, args.seconds, args.configs = "4", 2.0, "after"
        args.data_dir = Path(tempfile.mkdtemp(prefix="spanbudget-bench-quick-"))
        ingest_sample(args.data_dir, documents=3)
    args.rates = [float(r) for r in args.rates.split(",")]
    console = Console(width=140)  # a table the tests read: its names never wrap
    results: list[Measured] = []
    started = time.perf_counter()
    for config in args.configs.split(","):
        results += measure(config, CONFIGS[config], args, console)
    print(f"\n{os.cpu_count()} CPUs; {args.seconds:g} s per rate; Poisson arrivals")
    print_tables(results)
    for m in results:
        stack = sum(v for k, v in m.cpu.items() if k != "machine (all processes)")
        model = next((v for k, v in m.cpu.items() if k.startswith("gateway: embedding")), 0.0)
        record(
            "cpu",
            f"stack CPU per request, {m.config} at {m.rate:g} req/s",
            stack / max(1, m.requests),
            "ms",
            aim="as little as the reference path allows",
            floor=model / max(1, m.requests) if model else None,
            floor_name="the query model alone",
        )
    print(f"\nbench wall time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
