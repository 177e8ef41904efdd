"""The vLLM-compatible HTTP surface of the emulator: the app, its errors, and the routes
that report on the engine (health, models, metrics, the emulator's own step records).

The OpenAI endpoints are in completions.py, the token streams they answer with in
streaming.py; `create_app` puts them together around one `EngineRuntime`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .api_errors import ApiError, error_response, validation_error
from .completions import completions_router
from .protocol import model_card, system_fingerprint
from .runtime import EngineRuntime
from .streaming import StreamDropped, quiet_deliberate_cuts

__all__ = ["StreamDropped", "create_app", "quiet_deliberate_cuts"]


def create_app(
    runtime: EngineRuntime, *, on_shutdown: Sequence[Callable[[], None]] = ()
) -> FastAPI:
    """The ASGI app; its lifespan runs the engine core (tests may run it themselves).

    `on_shutdown` runs after the engine core has stopped, for example to flush spans:
    uvicorn re-raises SIGTERM once the server is down, so later code may never run.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with runtime.running():
            yield
        for hook in on_shutdown:
            hook()

    app = FastAPI(title="spanbudget engine emulator (vLLM-compatible)", lifespan=lifespan)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(ApiError, _api_error)
    app.include_router(status_router(runtime))
    fingerprint = system_fingerprint(
        tensor_parallel_size=runtime.preset.num_gpus, config_hash=_config_hash(runtime)
    )
    app.include_router(completions_router(runtime, fingerprint))
    return app


async def _invalid_request(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return validation_error(exc)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.message, exc.error_type, exc.param)


def _config_hash(runtime: EngineRuntime) -> str:
    """Stands in for vLLM's `VllmConfig.compute_hash()`: changes with the served model and
    with any modelled hardware or engine setting."""
    config = {"model": runtime.model_name, **dataclasses.asdict(runtime.preset)}
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def status_router(runtime: EngineRuntime) -> APIRouter:
    status = EngineStatus(runtime)
    router = APIRouter()
    router.add_api_route("/health", status.health, methods=["GET"])
    router.add_api_route("/healthz", status.healthz, methods=["GET"])
    router.add_api_route("/v1/models", status.models, methods=["GET"])
    router.add_api_route("/metrics", status.metrics, methods=["GET"])
    router.add_api_route("/emulator/steps", status.steps, methods=["GET"])
    router.add_api_route("/emulator/core", status.core, methods=["GET"])
    return router


class EngineStatus:
    """The routes that say how the engine is, none of which touches a request."""

    def __init__(self, runtime: EngineRuntime) -> None:
        self.runtime = runtime

    async def health(self) -> Response:
        """Like vLLM's /health: 503 once the engine core is dead, so orchestrators restart it."""
        return Response(status_code=503 if self.runtime.loop.dead else 200)

    async def healthz(self) -> JSONResponse:
        if self.runtime.loop.dead:
            return JSONResponse({"status": "dead", "error": str(self.runtime.loop.dead)}, 503)
        return JSONResponse({"status": "ok"})

    async def models(self) -> dict[str, Any]:
        runtime = self.runtime
        card = model_card(runtime.model_name, runtime.preset.max_model_len, runtime.created)
        return {"object": "list", "data": [card]}

    async def metrics(self) -> Response:
        return Response(generate_latest(self.runtime.registry), media_type=CONTENT_TYPE_LATEST)

    async def steps(self, since: float = 0.0) -> list[dict[str, float]]:
        """Emulator-only: modelled against actual step times (for bench/engine.py)."""
        return [
            {
                "start": r.start,
                "modelled_seconds": r.modelled_seconds,
                "actual_seconds": r.actual_seconds,
                "stall_seconds": r.stall_seconds,
                "num_seqs": r.num_seqs,
                "num_tokens": r.num_tokens,
            }
            for r in self.runtime.loop.records()
            if r.start >= since
        ]

    async def core(self) -> dict[str, str | int | None]:
        """Emulator-only: where the step loop runs and at what CPU priority."""
        loop = self.runtime.loop
        return {
            "engine_core": self.runtime.core,
            "step_thread_id": loop.step_thread_id,
            "scheduling": loop.scheduling,
        }
