"""Gateway settings: one pydantic-settings object, read from `SPANBUDGET_*` once at start-up."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from spanbudget.common.serving import BODY_TIMEOUT_SECONDS, HEADER_TIMEOUT_SECONDS, parse_listen

from .embedding import Runtime
from .tokens import DEFAULT_TOKENIZER

__all__ = ["Settings"]


def _valid_listen(value: str) -> str:
    parse_listen(value)
    return value


def _split_csv(value: object) -> object:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    return value


class Settings(BaseSettings):
    """Everything `spanbudget serve` and `spanbudget ingest` can be told.

    Environment: `SPANBUDGET_<FIELD>`; `LLM_BASE_URL` and `QDRANT_URL` are also accepted
    under their plain names (DESIGN §2). CLI options override these at construction.
    """

    model_config = SettingsConfigDict(env_prefix="SPANBUDGET_", extra="ignore", frozen=True)

    listen: str = "127.0.0.1:8080"
    llm_base_url: str = Field(
        "http://127.0.0.1:8000/v1",
        validation_alias=AliasChoices("SPANBUDGET_LLM_BASE_URL", "LLM_BASE_URL", "llm_base_url"),
    )
    llm_api_key: str = ""
    # Listed by the gateway's /v1/models when the upstream cannot be asked: by default the
    # model the engine emulator serves (its default preset's).
    llm_model: str = "Qwen/Qwen3-8B"
    llm_provider: str = "vllm"
    llm_timeout_seconds: float = 60.0
    llm_max_connections: int = 100
    data_dir: Path = Path("./data")
    collection: str = "rag-docs"
    qdrant_url: str | None = Field(
        None, validation_alias=AliasChoices("SPANBUDGET_QDRANT_URL", "QDRANT_URL", "qdrant_url")
    )
    # qdrant-client compares its version with the server's in a background thread.
    qdrant_check_compatibility: bool = True
    # Qdrant Edge's search thread pool (written into the shard's config when it opens). Its
    # default, 8 threads on 2 CPUs, reads segments in parallel and wakes several threads for
    # a query of a fraction of a millisecond; one thread answers as fast and does not crowd
    # a small machine (0: leave the shard's setting as it is).
    qdrant_search_threads: int = Field(1, ge=0)
    # Query embeddings are tiny: one intra-op thread answers them about as fast as two on a
    # small machine and leaves a core to the event loop (0 keeps torch's default).
    embedding_threads: int = Field(1, ge=0)
    # The model in a process of its own (embedding_process.py), so that its forward pass
    # does not wait on the event loop for the interpreter lock; false runs it in a thread.
    embedding_process: bool = True
    # How the model's transformer runs (embedding_graph.py), each with the eager model's
    # vectors: "onnx", exported to ONNX Runtime, a third of eager PyTorch's CPU time for a
    # lone query here; "torchscript", a frozen TorchScript graph, about half;
    # "eager". One that cannot run gives way to the next (logged).
    embedding_runtime: Runtime = "onnx"
    # How many such processes: each computes one batch at a time, on a core of its own.
    # Two on a 2-core machine answer a burst's overlapping queries side by side instead of
    # in ever larger batches, whose forward passes take ever longer.
    embedding_processes: int = Field(
        default_factory=lambda: min(2, os.cpu_count() or 1), ge=1, le=16
    )
    # The embedding process's nice (and its scheduling group's): the model is on every
    # request's path, so on a busy machine it goes first. Needs root or CAP_SYS_NICE.
    embedding_nice: int = Field(-10, ge=-20, le=19)
    # Queries embedded in one model call at most, and how long one that finds the model
    # idle may wait for others to join it (0: it goes at once).
    embedding_max_batch: int = Field(32, ge=1)
    embedding_batch_wait_ms: float = Field(0.0, ge=0, le=100)
    top_k: int = Field(5, ge=1, le=100)
    hnsw_m: int = Field(16, ge=4)
    hnsw_ef_construct: int = Field(100, ge=4)
    hnsw_ef: int = Field(64, ge=1)
    # Qdrant uses exact search below this size (KB); small enough that the corpus is HNSW.
    full_scan_threshold_kb: int = Field(10, ge=1)
    templates_dir: Path | None = None
    template: str = "rag.j2"
    tokenizer: str = DEFAULT_TOKENIZER
    context_token_budget: int = Field(1500, ge=0)
    api_keys: Annotated[tuple[str, ...], NoDecode] = ()
    jwt_secret: str = ""
    jwt_algorithms: Annotated[tuple[str, ...], NoDecode] = ("HS256",)
    jwt_audience: str = "spanbudget"
    jwt_issuer: str = "spanbudget"
    rate_limit_per_second: float = Field(50.0, gt=0)
    rate_limit_burst: int = Field(100, ge=1)
    max_body_bytes: int = Field(1_000_000, ge=1)
    # Slow clients: a connection whose request line and headers are not in within this long
    # is closed; a body not in within this long once its headers are is answered 408.
    header_timeout_seconds: float = Field(HEADER_TIMEOUT_SECONDS, gt=0)
    body_timeout_seconds: float = Field(BODY_TIMEOUT_SECONDS, gt=0)
    faults: bool = False

    _split = field_validator("api_keys", "jwt_algorithms", mode="before")(_split_csv)
    _listen = field_validator("listen")(_valid_listen)

    @field_validator("jwt_algorithms")
    @classmethod
    def _check_jwt_algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        """Refuse at start what would otherwise be a 401 for every token: an algorithm
        this install cannot verify (RS256 and the like need `cryptography`), or `none`."""
        from jwt.algorithms import get_default_algorithms, requires_cryptography

        usable = sorted(set(get_default_algorithms()) - {"none"})
        for name in value:
            if name in requires_cryptography and name not in usable:
                raise ValueError(
                    f"{name} needs the cryptography package (pip install cryptography); "
                    f"this install verifies {', '.join(usable)}"
                )
            if name not in usable:
                raise ValueError(f"unknown JWT algorithm {name!r}; choose from {', '.join(usable)}")
        return value

    @property
    def shard_path(self) -> Path:
        return self.data_dir / "qdrant" / self.collection

    @property
    def host_port(self) -> tuple[str, int]:
        return parse_listen(self.listen)
