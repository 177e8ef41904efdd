"""Ingest: chunk documents with stable ids, embed, upsert, build the index (idempotent).
The default corpus is the interpreter's own docs: `pydoc_data` topics, stdlib docstrings."""

from __future__ import annotations

import ast
import importlib.util
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .embedding import Embedder
from .vectorstore import Chunk, VectorStore

__all__ = [
    "TEXT_SUFFIXES",
    "Document",
    "IngestReport",
    "chunk_document",
    "chunk_text",
    "default_corpus",
    "ingest",
    "read_paths",
]

TEXT_SUFFIXES = frozenset({".md", ".txt", ".rst"})
_ID_NAMESPACE = uuid.UUID("5b1d3f0e-8c4a-4f7e-9a51-2f0c6d7e9b10")
DEFAULT_MAX_CHARS = 1000


@dataclass(frozen=True)
class Document:
    source: str
    title: str
    text: str


@dataclass(frozen=True)
class IngestReport:
    documents: int
    chunks: int
    seconds: float


def _split_long(paragraph: str, max_chars: int) -> Iterator[str]:
    """Cut a paragraph longer than `max_chars` at whitespace."""
    words = paragraph.split()
    piece: list[str] = []
    size = 0
    for word in words:
        if piece and size + 1 + len(word) > max_chars:
            yield " ".join(piece)
            piece, size = [], 0
        piece.append(word)
        size += len(word) + (1 if size else 0)
    if piece:
        yield " ".join(piece)


def chunk_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Pack blank-line-separated paragraphs greedily into chunks of at most `max_chars`."""
    paragraphs = [p.strip() for p in text.replace("\r\n", "\n").split("\n\n") if p.strip()]
    chunks: list[str] = []
    current = ""
    for paragraph in paragraphs:
        for piece in (
            _split_long(paragraph, max_chars) if len(paragraph) > max_chars else [paragraph]
        ):
            if current and len(current) + 2 + len(piece) > max_chars:
                chunks.append(current)
                current = ""
            current = f"{current}\n\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def chunk_document(document: Document, max_chars: int = DEFAULT_MAX_CHARS) -> list[Chunk]:
    return [
        Chunk(
            id=str(uuid.uuid5(_ID_NAMESPACE, f"{document.source}#{ordinal}")),
            text=text,
            source=document.source,
            title=document.title,
        )
        for ordinal, text in enumerate(chunk_text(document.text, max_chars))
    ]


def python_docstrings(source: str, origin: str, *, module_only: bool = False) -> list[Document]:
    """Docstrings of a module (and of its classes and functions unless `module_only`)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    documents: list[Document] = []
    if doc := ast.get_docstring(tree):
        documents.append(Document(source=origin, title=Path(origin).stem, text=doc))
    if module_only:
        return documents
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and (
            doc := ast.get_docstring(node)
        ):
            documents.append(Document(source=f"{origin}:{node.name}", title=node.name, text=doc))
    return documents


def read_paths(paths: Iterable[Path]) -> Iterator[Document]:
    """Documents from files and directories (recursively): text files and Python docstrings."""
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            suffix = file.suffix.lower()
            if suffix in TEXT_SUFFIXES:
                text = file.read_text(encoding="utf-8", errors="replace")
                yield Document(source=str(file), title=file.stem, text=text)
            elif suffix == ".py":
                source = file.read_text(encoding="utf-8", errors="replace")
                yield from python_docstrings(source, str(file))


def default_corpus() -> Iterator[Document]:
    """The interpreter's own documentation: language reference topics, then stdlib modules."""
    from pydoc_data.topics import topics

    for name in sorted(topics):
        yield Document(source=f"pydoc:{name}", title=name, text=topics[name])
    for name in sorted(sys.stdlib_module_names):
        if name.startswith("_"):
            continue
        # find_spec of a top-level name locates the file without importing (running) it.
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec else None
        if not origin or not origin.endswith(".py"):
            continue
        source = Path(origin).read_text(encoding="utf-8", errors="replace")
        for document in python_docstrings(source, f"stdlib:{name}", module_only=True):
            yield Document(source=document.source, title=name, text=document.text)


def ingest(
    documents: Iterable[Document],
    embedder: Embedder,
    store: VectorStore,
    *,
    batch_size: int = 64,
    max_chars: int = DEFAULT_MAX_CHARS,
    on_total: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Chunk, embed in batches, upsert and build the index; idempotent for the same input.

    A document ingested again replaces its chunks: those it no longer has are deleted.
    """
    started = time.perf_counter()
    docs = list(documents)
    chunks: list[Chunk] = [c for d in docs for c in chunk_document(d, max_chars)]
    # Batches of similar length pad less; the order of upserts does not matter.
    chunks.sort(key=lambda c: len(c.text))
    if on_total is not None:
        on_total(len(chunks))
    for start in range(0, len(chunks), batch_size):
        batch: Sequence[Chunk] = chunks[start : start + batch_size]
        vectors = embedder.embed([c.text for c in batch])
        store.upsert(batch, vectors)
        if on_progress is not None:
            on_progress(len(batch))
    store.remove_stale(sorted({d.source for d in docs}), [c.id for c in chunks])
    store.build_index()
    return IngestReport(len(docs), len(chunks), time.perf_counter() - started)
