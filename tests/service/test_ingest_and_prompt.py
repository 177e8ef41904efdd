"""Chunking with stable ids, idempotent ingest into Qdrant Edge, and prompt budgeting."""

from __future__ import annotations

import asyncio
import glob
import time
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from spanbudget.service.embedding import SentenceTransformerEmbedder
from spanbudget.service.ingest import Document, chunk_document, chunk_text, ingest, read_paths
from spanbudget.service.prompt import PromptBuilder
from spanbudget.service.settings import Settings
from spanbudget.service.tokens import TokenCounter
from spanbudget.service.tracers import build_tracer_provider
from spanbudget.service.vectorstore import EdgeStore, Hit
from spanbudget.service.wiring import build_store


def test_chunks_respect_the_size_and_keep_all_words() -> None:
    text = "\n\n".join(f"Paragraph {i} " + "word " * (i * 40) for i in range(8))
    chunks = chunk_text(text, max_chars=500)
    assert all(len(c) <= 500 for c in chunks)
    assert " ".join(chunks).split() == text.split()


def test_chunk_ids_are_stable_and_distinct() -> None:
    doc = Document("a.md", "a", "one\n\n" + "two " * 400)
    first, again = chunk_document(doc, 300), chunk_document(doc, 300)
    assert [c.id for c in first] == [c.id for c in again]
    assert len({c.id for c in first}) == len(first) > 1
    other = chunk_document(Document("b.md", "b", doc.text), 300)
    assert not {c.id for c in first} & {c.id for c in other}


def test_read_paths_takes_text_files_and_python_docstrings(tmp_path: Path) -> None:
    (tmp_path / "guide.md").write_text("# Guide\n\nUse the thing.")
    (tmp_path / "notes.rst").write_text("Notes\n=====\n\nMore.")
    (tmp_path / "skip.bin").write_bytes(b"\x00\x01")
    (tmp_path / "mod.py").write_text(
        '"""Module doc."""\n\nclass K:\n    """Class doc."""\n\n'
        'def f():\n    """Function doc."""\n\ndef g():\n    pass\n'
    )
    docs = list(read_paths([tmp_path]))
    texts = sorted(d.text for d in docs)
    assert texts == sorted(
        [
            "# Guide\n\nUse the thing.",
            "Notes\n=====\n\nMore.",
            "Module doc.",
            "Class doc.",
            "Function doc.",
        ]
    )


def test_ingest_twice_is_idempotent(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "c", collection="c", dimension=embedder.dimension)
    docs = [
        Document(f"d{i}.txt", f"d{i}", f"Document number {i} about topic {i}.") for i in range(5)
    ]
    try:
        first = ingest(docs, embedder, store, batch_size=2)
        assert store.count() == first.chunks == 5
        ingest(docs, embedder, store, batch_size=2)
        assert store.count() == 5
        best = store.query(embedder.embed(["topic 3"])[0], limit=1, hnsw_ef=64)[0]
        assert best.source == "d3.txt"
    finally:
        store.close()
    reopened = EdgeStore(tmp_path / "c", collection="c", dimension=embedder.dimension)
    assert reopened.exists()
    assert reopened.count() == 5
    reopened.close()


def _search_threads() -> set[str]:
    """Qdrant Edge's search pool threads in this process (each open shard has its own)."""
    found = set()
    for comm in glob.glob("/proc/self/task/*/comm"):
        try:
            name = Path(comm).read_text()
        except (FileNotFoundError, ProcessLookupError):  # the thread ended after the listing
            continue
        if name.startswith("edge-search"):
            found.add(comm)
    return found


def test_the_gateway_opens_its_shard_with_one_search_thread(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path)
    docs = [Document(f"d{i}.txt", f"d{i}", f"Document {i} about topic {i}.") for i in range(5)]
    store = EdgeStore(settings.shard_path, collection="rag-docs", dimension=embedder.dimension)
    ingest(docs, embedder, store)
    vector = embedder.embed(["topic 3"])[0]
    expected = [h.id for h in store.query(vector, limit=3, hnsw_ef=64)]
    store.close()
    before = _search_threads()
    gateway_store = build_store(settings, embedder.dimension)
    try:
        assert [h.id for h in gateway_store.query(vector, limit=3, hnsw_ef=64)] == expected
        # Not the 8 threads that Qdrant derives from this machine's CPUs. A thread names
        # itself once started: on a loaded machine the listing may come first, so it is
        # read again for up to 2 s (8 threads would stay 8).
        deadline = time.monotonic() + 2.0
        while len(_search_threads() - before) != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_search_threads() - before) == 1
    finally:
        gateway_store.close()


def test_a_document_that_shrank_loses_its_old_chunks(
    embedder: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    store = EdgeStore(tmp_path / "c", collection="c", dimension=embedder.dimension)
    long = Document(
        "guide.md", "guide", "\n\n".join(f"Part {i}: " + "word " * 150 for i in range(4))
    )
    other = Document("other.md", "other", "Something else entirely.")
    try:
        assert ingest([long, other], embedder, store, max_chars=800).chunks == 5
        assert store.count() == 5
        short = Document("guide.md", "guide", "Part 0 only, now.")
        assert ingest([short], embedder, store, max_chars=800).chunks == 1
        # The guide's three old tail chunks are gone; the other document is untouched.
        assert store.count() == 2
        hits = store.query(embedder.embed(["Part 3"])[0], limit=5, hnsw_ef=64)
        assert sorted(h.text for h in hits) == ["Part 0 only, now.", "Something else entirely."]
    finally:
        store.close()


def _hits(counter: TokenCounter) -> list[Hit]:
    texts = {0.9: "alpha " * 50, 0.5: "gamma " * 50, 0.7: "beta " * 50}
    return [Hit(f"id{s}", s, t, f"s{s}", f"t{s}") for s, t in texts.items()]


def test_prompt_drops_lowest_scoring_chunks_to_fit_the_budget(counter: TokenCounter) -> None:
    exporter = InMemorySpanExporter()
    provider = build_tracer_provider("t", processor=SimpleSpanProcessor(exporter), env={})
    hits = _hits(counter)
    per_hit = counter.count(hits[0].text)
    builder = PromptBuilder(counter, provider, context_token_budget=2 * per_hit + 1)
    kept, tokens = builder.fit(hits)
    assert [h.score for h in kept] == [0.9, 0.7]
    assert tokens <= 2 * per_hit + 1

    conversation = [{"role": "user", "content": "what?"}]
    prompt = asyncio.run(builder.render(conversation, hits))
    assert (prompt.kept, prompt.dropped) == (2, 1)
    system = prompt.messages[0]["content"]
    assert "alpha" in system
    assert "beta" in system
    assert "gamma" not in system
    assert system.index("alpha") < system.index("beta")
    assert prompt.messages[1:] == conversation
    assert prompt.input_tokens == builder.count_messages(prompt.messages)
    (span,) = exporter.get_finished_spans()
    assert span.name == "prompt.render"
    assert (span.attributes or {})["prompt.documents.dropped"] == 1
    assert (span.attributes or {})["gen_ai.usage.input_tokens"] == prompt.input_tokens
    provider.shutdown()


class _Tallying:
    """The real tokenizer, counting how often it is asked to encode."""

    def __init__(self, counter: TokenCounter) -> None:
        self.inner = counter
        self.encoded = 0

    def encode(self, text: str) -> list[int]:
        self.encoded += 1
        return self.inner.encode(text)

    def decode(self, tokens: list[int]) -> str:
        return self.inner.decode(tokens)


def test_the_prompt_counts_a_recurring_chunk_once(counter: TokenCounter) -> None:
    tally = _Tallying(counter)
    provider = build_tracer_provider(
        "t", processor=SimpleSpanProcessor(InMemorySpanExporter()), env={}
    )
    builder = PromptBuilder(TokenCounter(tally), provider)
    hits = _hits(counter)
    first = builder.fit(hits)
    assert tally.encoded == len(hits)
    assert builder.fit(hits) == first
    assert tally.encoded == len(hits)
    assert first[1] == sum(counter.count(h.text) for h in hits)
    # The counts kept are bounded: with room for two, the third chunk pushes the one used
    # least recently out, and it is counted again when it comes back.
    tally.encoded = 0
    bounded = PromptBuilder(TokenCounter(tally), provider, chunk_counts_kept=2)
    bounded.fit(hits[:2])  # the first two, counted
    bounded.fit(hits[:1])  # the first again: kept, and now used after the second
    assert tally.encoded == 2
    bounded.fit(hits[2:])  # the third pushes the second out
    bounded.fit(hits[:1])  # the first: still kept
    assert tally.encoded == 3
    bounded.fit(hits[1:2])  # the second: counted again
    assert tally.encoded == 4
    assert bounded.fit(hits) == first
    provider.shutdown()


def test_template_directory_overrides_the_shipped_default(
    counter: TokenCounter, tmp_path: Path
) -> None:
    (tmp_path / "rag.j2").write_text("CUSTOM {{ documents | length }} docs")
    provider = build_tracer_provider(
        "t", processor=SimpleSpanProcessor(InMemorySpanExporter()), env={}
    )
    builder = PromptBuilder(counter, provider, templates_dir=tmp_path)
    prompt = asyncio.run(builder.render([{"role": "user", "content": "q"}], _hits(counter)))
    assert prompt.messages[0]["content"] == "CUSTOM 3 docs"
    with pytest.raises(Exception, match=r"missing\.j2"):
        PromptBuilder(counter, provider, template="missing.j2")
    provider.shutdown()
