"""The query-embedding model in a process of its own, answered on the gateway's event loop.

In the gateway's process the model's forward pass and the event loop take turns at the
interpreter lock: torch gives the lock up around every operator and must win it back from
a loop busy relaying streams, so a 12 ms forward pass took 50 to 150 ms under load. Here
the model runs in a child process with its own interpreter; the loop sends each batch down
a pipe and reads the vectors back when they are ready, with no thread of its own.

Errors: `EmbeddingWorkerError` when the child cannot start or has gone.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from .embedding import BatchResult, EmbeddingUnavailable, Runtime

__all__ = ["EmbeddingPool", "EmbeddingProcess", "EmbeddingWorkerError"]

_STARTUP_TIMEOUT_SECONDS = 180.0


class EmbeddingWorkerError(EmbeddingUnavailable):
    """The embedding process did not start, or ended while requests waited for it."""


def _raise_priority(nice: int) -> str:
    """Give the model first claim on a core when the machine is busy; say what was had.

    Called in a session of its own, hence in a scheduling group of its own (Linux autogroups
    share the CPU fairly between sessions, whatever each one's nice): that group's nice, and
    the process's, go to `nice`. Lowering nice needs root or CAP_SYS_NICE; without it the
    process keeps a normal priority.
    """
    if nice >= 0:
        return "normal priority"
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError as exc:
        return f"normal priority (nice {nice} refused: {exc.strerror}; needs CAP_SYS_NICE)"
    autogroup = Path("/proc/self/autogroup")
    with contextlib.suppress(OSError):  # no autogroups: the process's nice is enough
        if autogroup.exists():
            autogroup.write_text(str(nice))
    return f"nice {nice}"


def _worker_main(
    conn: Connection, model_path: str | None, name: str, threads: int, nice: int, runtime: Runtime
) -> None:
    # The parent stops this process through the pipe, or by ending (the pipe then closes).
    # Signals to the gateway's process group (Ctrl-C, a supervisor's SIGTERM) must not end
    # it while the gateway still finishes its requests: a session of its own keeps them
    # away. A SIGTERM sent to this process alone still ends it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setsid()
    priority = _raise_priority(nice)
    # Read when torch loads OpenMP: idle OpenMP threads sleep instead of spinning for the
    # next parallel region, which at a raised priority would take cores from the gateway.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import torch

    if threads:
        # Process-wide, hence here at this process's entry point.
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
    from .embedding import SentenceTransformerEmbedder

    # The parent logs a fallback to a slower runtime, once for all its children.
    embedder = SentenceTransformerEmbedder(
        model_path, name=name, runtime=runtime, log_fallback=False
    )
    conn.send(("ready", embedder.dimension, priority, embedder.graph))
    while True:
        try:
            texts = conn.recv()
        except (EOFError, OSError):
            return
        if texts is None:
            return
        # Process CPU time: with more than one torch thread, the others compute too.
        started, started_cpu = time.perf_counter(), time.process_time()
        try:
            vectors = embedder.embed(texts)
        except Exception as exc:  # one bad batch fails its callers, not the process
            conn.send(("error", f"{type(exc).__name__}: {exc}"))
            continue
        done_ns = time.time_ns()
        compute_ms = (time.perf_counter() - started) * 1e3
        cpu_ms = (time.process_time() - started_cpu) * 1e3
        # float32 bytes: a quarter of the pickled floats, and exactly the model's values.
        packed = array.array("f", [x for row in vectors for x in row]).tobytes()
        conn.send(("ok", len(vectors), packed, compute_ms, cpu_ms, done_ns))


class EmbeddingProcess:
    """all-MiniLM-L6-v2 (`SentenceTransformerEmbedder`) in a child process.

    Build it at a process entry point (it spawns a child and waits, seconds, for the model
    to load; with `wait=False` call `wait_ready()` later), use `embed_batch` from one event
    loop, and `close()` it at shutdown. Batches are answered in the order they were sent; a
    caller that stops waiting loses only its own answer. `threads` is torch's intra-op
    thread count in the child (0: torch's default); a negative `nice` raises the child's
    CPU priority where allowed (`priority` says what it got); `runtime` is the fastest way
    the transformer may run (embedding.RUNTIMES; `graph` says what the child runs).
    """

    concurrency = 1  # one model call at a time: the child computes batches in turn

    def __init__(
        self,
        model_path: str | None = None,
        *,
        name: str = "all-MiniLM-L6-v2",
        threads: int = 1,
        nice: int = 0,
        runtime: Runtime = "onnx",
        startup_timeout_s: float = _STARTUP_TIMEOUT_SECONDS,
        wait: bool = True,
    ) -> None:
        context = multiprocessing.get_context("spawn")  # never fork a threaded server
        self._conn, child = context.Pipe()
        self._process: Any = context.Process(
            target=_worker_main,
            args=(child, model_path, name, threads, nice, runtime),
            name="embedding-worker",
            daemon=True,
        )
        self._process.start()
        child.close()
        self._name = name
        self._deadline = time.monotonic() + startup_timeout_s
        self._dimension = 0
        self.priority = ""
        self.graph = ""
        self._waiting: deque[asyncio.Future[BatchResult]] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._gone: EmbeddingWorkerError | None = None
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Wait for the model to load (until the start-up timeout); raise if it did not."""
        if self._dimension:
            return
        if not self._conn.poll(max(0.0, self._deadline - time.monotonic())):
            self.close()
            raise EmbeddingWorkerError("the embedding model did not load in time")
        try:
            _, dimension, priority, graph = self._conn.recv()
        except EOFError:
            code = self._process.exitcode
            self.close()
            raise EmbeddingWorkerError(
                f"the embedding process ended at start-up (exit code {code})"
            ) from None
        self._dimension = int(dimension)
        self.priority = str(priority)
        self.graph = str(graph)

    @property
    def model_name(self) -> str:
        return self._name

    @property
    def pid(self) -> int:
        return int(self._process.pid)

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def available(self) -> bool:
        """True while the child runs; it is never restarted, so False is for good."""
        return self._gone is None and bool(self._process.is_alive())

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult:
        """Normalised vectors for `texts`, with the model call's wall and CPU time."""
        if self._gone is not None:
            raise self._gone
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._waiting:
                raise RuntimeError("EmbeddingProcess serves one event loop at a time")
            self._detach()
            self._loop = loop
            loop.add_reader(self._conn.fileno(), self._on_readable)
        future: asyncio.Future[BatchResult] = loop.create_future()
        try:
            self._conn.send(list(texts))
        except OSError:
            self._ended()
            raise self._gone or EmbeddingWorkerError("the embedding process is gone") from None
        self._waiting.append(future)
        return await future

    def _on_readable(self) -> None:
        while self._conn.poll():
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                self._ended()
                return
            future = self._waiting.popleft()
            if future.done():  # its caller stopped waiting
                continue
            if message[0] == "error":
                future.set_exception(EmbeddingWorkerError(f"embedding failed: {message[1]}"))
                continue
            _, count, packed, compute_ms, cpu_ms, done_ns = message
            flat = array.array("f", packed).tolist()
            size = len(flat) // count if count else 0
            vectors = [flat[i * size : (i + 1) * size] for i in range(count)]
            future.set_result(BatchResult(vectors, compute_ms, cpu_ms, done_ns))

    def _detach(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._conn.fileno())
        self._loop = None

    def _ended(self) -> None:
        self._detach()
        code = self._process.exitcode
        self._gone = EmbeddingWorkerError(f"the embedding process ended (exit code {code})")
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(self._gone)

    def close(self) -> None:
        """Stop the child (it finishes the batch in hand) and wait for it, briefly."""
        self._detach()
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(timeout=5)
        self._conn.close()


class EmbeddingPool:
    """`count` `EmbeddingProcess` children that load together and compute side by side.

    `concurrency` model calls can run at once, one per child; each goes to an idle child.
    The pool is available while every child is: one that has gone makes the gateway
    unhealthy, as a lone child would.
    """

    def __init__(self, count: int, **options: Any) -> None:
        if count < 1:
            raise ValueError("need at least one embedding process")
        self._workers: list[EmbeddingProcess] = []
        try:
            for _ in range(count):
                self._workers.append(EmbeddingProcess(wait=False, **options))
            for worker in self._workers:
                worker.wait_ready()
        except BaseException:
            self.close()
            raise
        self._idle = list(self._workers)
        self.concurrency = count

    @property
    def model_name(self) -> str:
        return self._workers[0].model_name

    @property
    def dimension(self) -> int:
        return self._workers[0].dimension

    @property
    def pids(self) -> list[int]:
        return [worker.pid for worker in self._workers]

    @property
    def priority(self) -> str:
        return self._workers[0].priority

    @property
    def graph(self) -> str:
        return self._workers[0].graph

    @property
    def available(self) -> bool:
        return all(worker.available for worker in self._workers)

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult:
        # The batcher keeps at most `concurrency` calls in flight, so a child is idle; should
        # one not be, the batch queues behind the first child's.
        worker = self._idle.pop() if self._idle else self._workers[0]
        try:
            return await worker.embed_batch(texts)
        finally:
            if worker not in self._idle:
                self._idle.append(worker)

    def close(self) -> None:
        for worker in self._workers:
            worker.close()
