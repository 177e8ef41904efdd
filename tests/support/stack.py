"""The embedded stack (`spanbudget.app.stack.Stack`) on free loopback ports, as the end-to-end,
web UI, preset and Jaeger tests start it: the repository's budget, a short decision wait,
and a corpus of three small documents ingested in seconds."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from spanbudget.app.processes import Child, Supervisor
from spanbudget.app.stack import JAEGER_CONFIG, Jaeger, Stack, spanbudget_command

from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[2]
SMALL_CORPUS = {
    "with.md": "# The with statement\n\nThe with statement wraps a block with methods defined "
    "by a context manager: __enter__ runs first, __exit__ always runs last, even when the "
    "block raises.\n",
    "generators.txt": "Generators\n\nA generator function contains yield. Calling it returns "
    "an iterator; each next() runs the body to the following yield.\n",
    "slices.rst": "Slices\n======\n\nA slice a[i:j:k] selects items from i up to j in steps "
    "of k; negative steps walk backwards and omitted bounds default to the ends.\n",
}


def jaeger_on_free_ports(binary: Path, config: Path | None = None) -> Jaeger:
    """Jaeger on free ports of 127.0.0.1, every one of them (its defaults may be taken by
    another test's Jaeger), with the repository's config or `config`."""
    return Jaeger(
        binary,
        query_port=free_port(),
        otlp_http_port=free_port(),
        otlp_grpc_port=free_port(),
        health_port=free_port(),
        query_grpc_port=free_port(),
        metrics_port=free_port(),
        config=JAEGER_CONFIG if config is None else config,
    )


@contextmanager
def running(children: Sequence[Child], healthy_within_s: float = 180) -> Iterator[Supervisor]:
    """The stack's processes started in order, each healthy, until the block ends."""
    supervisor = Supervisor()
    try:
        for child in children:
            supervisor.start(child)
        for child in children:
            supervisor.wait_healthy(child, healthy_within_s)
        yield supervisor
    finally:
        supervisor.stop_all()


def ingest_small_corpus(root: Path, env: Mapping[str, str]) -> Path:
    """The data folder under `root` with `SMALL_CORPUS` ingested into its Qdrant shard."""
    docs = root / "docs"
    docs.mkdir()
    for name, text in SMALL_CORPUS.items():
        (docs / name).write_text(text)
    data = root / "data"
    subprocess.run(
        spanbudget_command("ingest", str(docs), "--data-dir", str(data)),
        check=True,
        timeout=300,
        capture_output=True,
        env={**os.environ, **env},
        cwd=REPO,
    )
    return data


def corpus_copy(ingested: Path, root: Path) -> Path:
    """A data folder under `root` holding a copy of an ingested one (the `small_corpus`
    fixture's): each stack writes its own shard, and the corpus is embedded once."""
    data = root / "data"
    shutil.copytree(ingested, data)
    return data


def local_stack(
    data: Path,
    logs: Path,
    env: Mapping[str, str],
    collector_args: Sequence[str] = (),
    jaeger_binary: Path | None = None,
) -> Stack:
    """The three processes on free ports of 127.0.0.1, their data in `data`, logs in `logs`;
    with `jaeger_binary`, Jaeger too, every port of it free."""
    jaeger = None
    if jaeger_binary is not None:
        jaeger = jaeger_on_free_ports(jaeger_binary)
    return Stack(
        data_dir=data,
        budget=REPO / "budget.yaml",
        collector=f"127.0.0.1:{free_port()}",
        collector_grpc=f"127.0.0.1:{free_port()}",
        engine=f"127.0.0.1:{free_port()}",
        gateway=f"127.0.0.1:{free_port()}",
        decision_wait="0.5s",
        logs=logs,
        env=env,
        collector_args=collector_args,
        jaeger=jaeger,
    )
