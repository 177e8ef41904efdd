"""The embedded stack, defined once: the budget collector, the engine emulator and the RAG
gateway as three processes that meet only over HTTP and OTLP, as in production.

`spanbudget demo` starts it, and so do the end-to-end and web UI tests and `bench/cpu.py`,
each with its own addresses, data folder and extra flags. With a Jaeger binary (`Jaeger`),
a real Jaeger v2 starts first and the collector forwards every judged trace to it, its
budget.* attributes on: the web UI's trace links then open that Jaeger.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spanbudget.common.shipped import shipped_file

from .processes import Child

__all__ = ["CHILD_ENV", "JAEGER_CONFIG", "Jaeger", "Stack", "spanbudget_command"]

# Spans leave each process within 200 ms, so verdicts follow the requests closely.
CHILD_ENV = {"OTEL_BSP_SCHEDULE_DELAY": "200", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}

# The collector judges traces after the fact, off every request's path: on a small machine
# it takes a core only when the request path leaves one (lowering priority needs no right).
_COLLECTOR_NICE = 10


def spanbudget_command(*args: str) -> list[str]:
    """`spanbudget ARGS...` with this interpreter, as a child process runs it."""
    return [sys.executable, "-m", "spanbudget", *args]


def _niced(command: list[str], nice: int) -> list[str]:
    """`command` at a lower CPU priority, with `nice` where the system has it."""
    tool = shutil.which("nice")
    return [tool, "-n", str(nice), *command] if tool else command


# deploy/jaeger.yaml, packaged: the file docker-compose.yml mounts into Jaeger's container.
JAEGER_CONFIG = shipped_file("jaeger.yaml")


@dataclass(frozen=True)
class Jaeger:
    """A Jaeger v2 binary run on `host` with the repository's config (deploy/jaeger.yaml),
    its ports given here instead of its defaults, which the stack's processes use."""

    binary: Path
    host: str = "127.0.0.1"
    query_port: int = 16686
    otlp_http_port: int = 14318
    otlp_grpc_port: int = 14317
    health_port: int = 13133
    query_grpc_port: int = 16685
    metrics_port: int = 18888
    config: Path = JAEGER_CONFIG

    @property
    def query_url(self) -> str:
        """The UI and the query APIs (/api/traces, /api/v3/...)."""
        return f"http://{self.host}:{self.query_port}"

    @property
    def otlp_traces_url(self) -> str:
        return f"http://{self.host}:{self.otlp_http_port}/v1/traces"

    def child(self, log: Path) -> Child:
        env = {
            "JAEGER_LISTEN_HOST": self.host,
            "JAEGER_QUERY_HTTP_PORT": str(self.query_port),
            "JAEGER_QUERY_GRPC_PORT": str(self.query_grpc_port),
            "JAEGER_OTLP_HTTP_PORT": str(self.otlp_http_port),
            "JAEGER_OTLP_GRPC_PORT": str(self.otlp_grpc_port),
            "JAEGER_HEALTH_PORT": str(self.health_port),
            "JAEGER_METRICS_PORT": str(self.metrics_port),
        }
        return Child(
            "jaeger",
            [str(self.binary), "--config", str(self.config)],
            f"http://{self.host}:{self.health_port}/status",
            log,
            env,
        )


@dataclass(frozen=True)
class Stack:
    """Where the three processes listen and keep their data, and what each adds.

    `logs` defaults to `data_dir / "logs"`; `env` goes to every child on top of
    `CHILD_ENV`; `collector_args` are appended to `spanbudget collect`'s. With `jaeger`,
    the collector forwards every judged trace to it and links the web UI to it.
    """

    data_dir: Path
    budget: Path
    collector: str = "127.0.0.1:4318"
    # OTLP/gRPC: None leaves the collector's default (127.0.0.1:4317, skipped if taken).
    collector_grpc: str | None = None
    engine: str = "127.0.0.1:8000"
    gateway: str = "127.0.0.1:8080"
    preset: str | None = None
    disaggregated: bool = False  # the engine as a prefill and a decode instance
    decision_wait: str = "1s"
    logs: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    collector_args: Sequence[str] = ()
    jaeger: Jaeger | None = None

    @property
    def collector_url(self) -> str:
        return f"http://{self.collector}"

    @property
    def gateway_url(self) -> str:
        return f"http://{self.gateway}"

    def children(self) -> list[Child]:
        """(Jaeger,) the collector, the engine emulator and the gateway, in the order to
        start them."""
        env = {**CHILD_ENV, **self.env}
        otlp_env = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": self.collector_url}
        logs = self.logs or self.data_dir / "logs"
        engine_args = ["engine", "--listen", self.engine]
        if self.preset:
            engine_args += ["--preset", self.preset]
        if self.disaggregated:
            engine_args.append("--disaggregated")
        collect = spanbudget_command(
            "collect",
            "--listen",
            self.collector,
            "--budget",
            str(self.budget),
            "--db",
            str(self.data_dir / "verdicts.db"),
            "--decision-wait",
            self.decision_wait,
            "--engine-metrics",
            f"http://{self.engine}/metrics",
            *(["--grpc-listen", self.collector_grpc] if self.collector_grpc else []),
            *self._to_jaeger(),
            *self.collector_args,
        )
        first = [self.jaeger.child(logs / "jaeger.log")] if self.jaeger else []
        return [
            *first,
            Child(
                "collector",
                _niced(collect, _COLLECTOR_NICE),
                f"{self.collector_url}/readyz",
                logs / "collector.log",
                env,
            ),
            Child(
                "engine",
                spanbudget_command(*engine_args),
                f"http://{self.engine}/health",
                logs / "engine.log",
                otlp_env,
            ),
            Child(
                "gateway",
                spanbudget_command(
                    "serve",
                    "--listen",
                    self.gateway,
                    "--llm-base-url",
                    f"http://{self.engine}/v1",
                    "--data-dir",
                    str(self.data_dir),
                ),
                f"{self.gateway_url}/readyz",
                logs / "gateway.log",
                {**otlp_env, "SPANBUDGET_API_KEYS": ""},
            ),
        ]

    def _to_jaeger(self) -> list[str]:
        if self.jaeger is None:
            return []
        query = self.jaeger.query_url
        return [
            "--forward-otlp",
            self.jaeger.otlp_traces_url,
            "--jaeger-ui",
            query,
            "--jaeger-url",
            query,
        ]
