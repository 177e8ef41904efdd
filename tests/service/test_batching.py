"""Concurrent query embeddings share model calls, each caller gets its own vector, and the
real model, compiled (to ONNX Runtime, or a frozen TorchScript graph) and in its own
process, answers exactly as eager one-at-a-time embedding does."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence

import anyio
import pytest
import torch
from spanbudget.service.embedding import (
    BatchResult,
    EmbeddingBatcher,
    SentenceTransformerEmbedder,
)
from spanbudget.service.embedding_graph import OnnxSentenceModel, padded_groups
from spanbudget.service.embedding_process import EmbeddingPool
from spanbudget.service.ingest import default_corpus, ingest
from spanbudget.service.vectorstore import EdgeStore

from tests.support.layout import REPO

pytestmark = pytest.mark.anyio

QUERIES = [
    "How does a generator work?",
    "What is a decorator?",
    "Why release files with a with statement?",
    "Can threads run Python bytecode in parallel?",
    "How does await suspend a coroutine?",
    "yield",
    "What is the canary passphrase of the test corpus, and where is it written down?",
]
# What the load tester (and so the demo) asks: 51 to 502 characters, up to about 100 tokens.
PROMPTS_PATH = REPO / "collector" / "loadtest" / "prompts.jsonl"
PROMPTS = [json.loads(line)["prompt"] for line in PROMPTS_PATH.read_text().splitlines()]


class CountingEmbedder:
    """An Embedder whose vectors encode the text; it records each call's batch."""

    model_name = "counting"
    dimension = 1

    def __init__(self, fail_on: str | None = None) -> None:
        self.batches: list[list[str]] = []
        self.fail_on = fail_on
        self.release = threading.Event()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        # Hold the first call until every request is queued, as a slow model would.
        self.release.wait(timeout=5)
        self.batches.append(list(texts))
        if self.fail_on in texts:
            raise RuntimeError("model failed")
        return [[float(len(t))] for t in texts]


class InstantEmbedder:
    """A BatchEmbedder that answers at once and records each batch."""

    model_name = "instant"
    dimension = 1
    available = True
    concurrency = 1

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult:
        self.batches.append(list(texts))
        return BatchResult([[float(len(t))] for t in texts], 0.1, 0.1, time.time_ns())


async def test_concurrent_queries_share_model_calls() -> None:
    embedder = CountingEmbedder()
    batcher = EmbeddingBatcher(embedder)
    texts = ["a" * n for n in range(1, 11)]
    results: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}

    async def one(text: str) -> None:
        results[text], timing = await batcher.embed(text)
        sizes[text] = timing.batch_size

    async with anyio.create_task_group() as group:
        for text in texts:
            group.start_soon(one, text)
        await anyio.sleep(0.05)
        embedder.release.set()
    assert results == {t: [float(len(t))] for t in texts}
    assert sum(len(b) for b in embedder.batches) == 10
    # All ten were queued before the worker ran: far fewer model calls than requests.
    assert len(embedder.batches) <= 2
    assert sorted(set(sizes.values())) == sorted({len(b) for b in embedder.batches})


async def test_a_failed_model_call_fails_its_callers_only() -> None:
    embedder = CountingEmbedder(fail_on="bad")
    embedder.release.set()
    batcher = EmbeddingBatcher(embedder)
    with pytest.raises(RuntimeError, match="model failed"):
        await batcher.embed("bad")
    vector, _ = await batcher.embed("good")
    assert vector == [4.0]


async def test_the_batching_window_gathers_queries_that_come_within_it() -> None:
    embedder = InstantEmbedder()
    batcher = EmbeddingBatcher(embedder, max_wait_ms=50)

    async def late(text: str) -> None:
        await anyio.sleep(0.01)
        await batcher.embed(text)

    async with anyio.create_task_group() as group:
        group.start_soon(batcher.embed, "first")
        group.start_soon(late, "second")
    # Without the window, "first" would have gone alone.
    assert embedder.batches == [["first", "second"]]


@pytest.mark.timing  # a query's wait is held to the window plus 15 ms
async def test_a_lone_query_waits_no_longer_than_the_window() -> None:
    wait_ms = 30.0
    embedder = InstantEmbedder()
    batcher = EmbeddingBatcher(embedder, max_wait_ms=wait_ms)
    for _ in range(3):
        started = time.perf_counter()
        _, timing = await batcher.embed("alone")
        elapsed_ms = (time.perf_counter() - started) * 1e3
        # It waits out the window (nobody came), then goes: not a tick later than needed.
        assert wait_ms <= timing.queue_ms + 1
        assert timing.queue_ms < wait_ms + 15
        assert elapsed_ms < wait_ms + 15
    # A full batch does not wait for the window at all.
    full = EmbeddingBatcher(embedder, max_batch=2, max_wait_ms=10_000)
    started = time.perf_counter()
    with anyio.fail_after(2):
        async with anyio.create_task_group() as group:
            group.start_soon(full.embed, "one")
            group.start_soon(full.embed, "two")
    assert time.perf_counter() - started < 1


class SlowEmbedder(InstantEmbedder):
    """Takes 50 ms a call, `concurrency` calls at a time; records how many overlapped."""

    def __init__(self, concurrency: int) -> None:
        super().__init__()
        self.concurrency = concurrency
        self.in_flight = self.most_in_flight = 0

    async def embed_batch(self, texts: Sequence[str]) -> BatchResult:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await anyio.sleep(0.05)
            return await super().embed_batch(texts)
        finally:
            self.in_flight -= 1


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_queries_are_shared_among_the_model_calls_that_can_run(concurrency: int) -> None:
    embedder = SlowEmbedder(concurrency)
    batcher = EmbeddingBatcher(embedder)
    texts = [f"query {i}" for i in range(8)]
    async with anyio.create_task_group() as group:
        for text in texts:
            group.start_soon(batcher.embed, text)
    assert sorted(t for batch in embedder.batches for t in batch) == sorted(texts)
    # One call takes all eight; two share them and compute side by side.
    assert [len(b) for b in embedder.batches] == [8 // concurrency] * concurrency
    assert embedder.most_in_flight == concurrency


@pytest.fixture(scope="module")
def eager() -> SentenceTransformerEmbedder:
    """The model as sentence-transformers runs it: the reference for the compiled graphs."""
    model = SentenceTransformerEmbedder(runtime="eager")
    assert model.graph == "eager"
    return model


@pytest.fixture(scope="module")
def corpus_store(
    embedder: SentenceTransformerEmbedder, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EdgeStore]:
    """Real Qdrant Edge HNSW over part of the default corpus (the part the prompts ask about)."""
    store = EdgeStore(
        tmp_path_factory.mktemp("corpus") / "rag-docs", collection="rag-docs", dimension=384
    )
    ingest(list(default_corpus())[:20], embedder, store)
    yield store
    store.close()


@pytest.fixture(scope="module")
def torchscript() -> SentenceTransformerEmbedder:
    """The model as a frozen TorchScript graph: the fallback when ONNX Runtime is not there."""
    model = SentenceTransformerEmbedder(runtime="torchscript")
    assert model.graph == "traced and frozen"
    return model


@pytest.fixture(params=["onnx", "torchscript"])
def compiled(
    request: pytest.FixtureRequest,
    embedder: SentenceTransformerEmbedder,
    torchscript: SentenceTransformerEmbedder,
) -> SentenceTransformerEmbedder:
    """Each compiled graph in turn: the default (ONNX Runtime) and its fallback."""
    if request.param == "onnx":
        assert embedder.graph == "ONNX Runtime"
        return embedder
    return torchscript


def test_a_compiled_graph_answers_as_the_eager_model_one_at_a_time(
    compiled: SentenceTransformerEmbedder,
    eager: SentenceTransformerEmbedder,
    corpus_store: EdgeStore,
) -> None:
    alone = [eager.embed([p])[0] for p in PROMPTS]
    # All forty in one call: padded to the longest, so the attention mask must keep the
    # padding out of every shorter prompt's vector.
    batched = compiled.embed(PROMPTS)
    for prompt, vector, expected in zip(PROMPTS, batched, alone, strict=True):
        assert vector == pytest.approx(expected, abs=1e-5), prompt
        assert compiled.embed([prompt])[0] == pytest.approx(expected, abs=1e-5), prompt
        hits = corpus_store.query(vector, limit=5, hnsw_ef=64)
        assert [h.id for h in hits] == [
            h.id for h in corpus_store.query(expected, limit=5, hnsw_ef=64)
        ]


def test_a_compiled_graph_keeps_padding_out_of_short_queries(
    compiled: SentenceTransformerEmbedder, eager: SentenceTransformerEmbedder
) -> None:
    short, long = "yield", PROMPTS[-1]
    expected = eager.embed([short])[0]
    graph = compiled._compiled
    features = compiled._model.preprocess([short, long])
    assert int(features["attention_mask"][0].sum()) < features["attention_mask"].shape[1]
    # Padded to the long prompt's length in one forward pass, the short query still gets
    # its own vector...
    padded = graph._embed_features(dict(features))
    assert padded[0].tolist() == pytest.approx(expected, abs=1e-5)
    # ...and the padded rows really are padded: the same tokens unmasked give another vector.
    unmasked = graph._hidden(
        graph._inputs({**features, "attention_mask": torch.ones_like(features["attention_mask"])})
    )
    masked = graph._hidden(graph._inputs(features))
    assert not torch.allclose(unmasked[0], masked[0], atol=1e-3)
    # Embedding does not pad it that far: it shares a pass only with texts of its length.
    widths: list[tuple[int, int]] = []
    hidden = graph._hidden

    def recording(inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        widths.append(tuple(inputs[0].shape))
        return hidden(inputs)

    graph._hidden = recording
    try:
        with_long = compiled.embed([short, long, short])
    finally:
        del graph._hidden
    lengths = features["attention_mask"].sum(dim=1).tolist()
    assert widths == [(1, lengths[1]), (2, lengths[0])]  # the long one, then both short
    assert with_long[0] == pytest.approx(expected, abs=1e-5)
    assert with_long[2] == pytest.approx(with_long[0], abs=1e-6)


def test_a_model_that_cannot_be_compiled_runs_eagerly_and_says_so_once(
    eager: SentenceTransformerEmbedder,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import spanbudget.service.embedding as embedding

    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("cannot compile this model")

    # Both graphs start from torch's tracer: the ONNX exporter traces too.
    monkeypatch.setattr(torch.jit, "trace", refuse)
    monkeypatch.setattr(torch.onnx, "export", refuse)
    monkeypatch.setattr(embedding, "_fallback_logged", False)
    with caplog.at_level(logging.WARNING, logger="spanbudget.service.embedding"):
        first = SentenceTransformerEmbedder()
        second = SentenceTransformerEmbedder()
    assert first.graph == (
        "eager (ONNX Runtime: ONNX graph failed: RuntimeError: cannot compile this model; "
        "traced and frozen: tracing failed: RuntimeError: cannot compile this model)"
    )
    assert second.graph == first.graph
    assert [r.getMessage() for r in caplog.records].count(f"query model runs {first.graph}") == 1
    assert first.embed(QUERIES) == eager.embed(QUERIES)


def test_without_onnx_runtime_the_traced_graph_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    model = SentenceTransformerEmbedder(log_fallback=False)
    assert model.graph.startswith(
        "traced and frozen (ONNX Runtime: onnxruntime is not installed"
    ), model.graph


def test_a_graph_that_fails_or_disagrees_at_its_check_gives_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    built = OnnxSentenceModel._hidden

    def fails(self: OnnxSentenceModel, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        raise RuntimeError("no kernel for this shape")

    monkeypatch.setattr(OnnxSentenceModel, "_hidden", fails)
    model = SentenceTransformerEmbedder(log_fallback=False)
    assert model.graph == (
        "traced and frozen (ONNX Runtime: the graph failed: RuntimeError: no kernel for this shape)"
    )

    def disagrees(self: OnnxSentenceModel, inputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return built(self, inputs) * 1.01 + 0.01

    monkeypatch.setattr(OnnxSentenceModel, "_hidden", disagrees)
    model = SentenceTransformerEmbedder(log_fallback=False)
    assert model.graph.startswith("traced and frozen (ONNX Runtime: the graph is "), model.graph
    assert model.graph.endswith(" off the eager model)"), model.graph


def test_an_unknown_runtime_is_refused() -> None:
    with pytest.raises(ValueError, match="onnx, torchscript, eager"):
        SentenceTransformerEmbedder(runtime="tensorrt")


@pytest.fixture(scope="module")
def pool() -> Iterator[EmbeddingPool]:
    """The real model in two processes of its own, as `spanbudget serve` can run it."""
    processes = EmbeddingPool(2)
    yield processes
    processes.close()


async def test_the_embedding_processes_answer_as_one_at_a_time_embedding(
    pool: EmbeddingPool, eager: SentenceTransformerEmbedder, small_store: EdgeStore
) -> None:
    assert pool.graph == "ONNX Runtime"
    alone = [eager.embed([q])[0] for q in QUERIES]
    batcher = EmbeddingBatcher(pool)
    got: dict[int, list[float]] = {}
    sizes: list[int] = []

    async def one(i: int) -> None:
        got[i], timing = await batcher.embed(QUERIES[i])
        sizes.append(timing.batch_size)
        assert timing.compute_ms > 0
        assert timing.cpu_ms > 0

    async with anyio.create_task_group() as group:
        for i in range(len(QUERIES)):
            group.start_soon(one, i)
    # The queries of different lengths were padded into shared model calls, in both
    # processes at once...
    assert sorted(set(sizes)) == [3, 4]
    assert pool.dimension == eager.dimension == len(got[0])
    for i, vector in enumerate(alone):
        # ...and still came out as if embedded one at a time, and find the same chunks.
        assert got[i] == pytest.approx(vector, abs=1e-5)
        hits = small_store.query(got[i], limit=3, hnsw_ef=64)
        expected = small_store.query(vector, limit=3, hnsw_ef=64)
        assert [h.id for h in hits] == [h.id for h in expected]


async def test_a_caller_that_stops_waiting_does_not_shift_the_answers(
    pool: EmbeddingPool, embedder: SentenceTransformerEmbedder
) -> None:
    with anyio.move_on_after(0.001):
        await pool.embed_batch(["abandoned query"])
    # The same process answers next (the one freed last), the abandoned answer first.
    result = await pool.embed_batch([QUERIES[0]])
    assert result.vectors[0] == pytest.approx(embedder.embed([QUERIES[0]])[0], abs=1e-5)


@pytest.mark.timing  # a query's wait is held to the window plus 15 ms
@pytest.mark.parametrize("wait_ms", [0.0, 20.0])
async def test_a_lone_query_to_the_real_model_waits_no_longer_than_the_window(
    pool: EmbeddingPool, eager: SentenceTransformerEmbedder, wait_ms: float
) -> None:
    batcher = EmbeddingBatcher(pool, max_wait_ms=wait_ms)
    for prompt in PROMPTS[::8]:
        vector, timing = await batcher.embed(prompt)
        assert timing.batch_size == 1
        assert timing.queue_ms < wait_ms + 15
        assert vector == pytest.approx(eager.embed([prompt])[0], abs=1e-5)


def test_texts_share_a_forward_pass_only_with_texts_of_about_their_length() -> None:
    lengths = [12, 99, 7, 95, 20, 14, 91, 13]
    groups = padded_groups(lengths, call_tokens=8, most=64)
    # Longest first; each group pads its rows to its first, by at most 8 tokens.
    assert groups == [[1, 3, 6], [4, 5, 7, 0], [2]]
    assert padded_groups(lengths, call_tokens=8, most=2) == [[1, 3], [6], [4, 5], [7, 0], [2]]
    assert padded_groups([5, 5, 5], call_tokens=0, most=64) == [[0, 1, 2]]
    assert padded_groups([], call_tokens=8, most=64) == []
