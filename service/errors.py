"""The reference path's exceptions' root: what the gateway or the engine emulator refused or
could not do.

Below it: the gateway's `gateway.schemas.GatewayError` and `gateway.auth.AuthError`
(answered with their HTTP status), `llm_client.UpstreamError`, `vectorstore.StoreError`,
`embedding.EmbeddingUnavailable`, `embedding_graph.GraphUnavailable`; the engine's
`engine.api_errors.ApiError` (vLLM's error answers), `engine.protocol.RequestParameterError`,
`engine.presets.PresetError`, `engine.faults.FaultError`, `engine.runtime.PromptTooLong`,
`engine.engine_loop.EngineDead` and `engine.streaming.StreamDropped`.
"""

from __future__ import annotations

from spanbudget.common.errors import SpanbudgetError

__all__ = ["ServiceError"]


class ServiceError(SpanbudgetError):
    """Raised by spanbudget.service on purpose."""
