"""OpenAI wire types the gateway reads and writes: chat requests and error objects;
`GatewayError` is the one exception the app turns into an OpenAI-style error response."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ServiceError

__all__ = ["ChatMessage", "ChatRequest", "GatewayError", "error_body", "parse_chat_request"]


class GatewayError(ServiceError):
    """A request the gateway refuses; becomes `{"error": {...}}` with `status_code`."""

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        error_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.error_type = error_type
        self.code = code
        self.param = param
        self.headers = dict(headers or {})


def error_body(
    message: str, error_type: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The fields the gateway uses; other sampling fields pass through to the LLM untouched."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(None, ge=1, le=1)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def query(self) -> str:
        """The retrieval query: the last user message."""
        for message in reversed(self.messages):
            if message.role == "user" and message.text().strip():
                return message.text()
        raise GatewayError(400, "messages must contain a non-empty user message", param="messages")

    def conversation(self) -> list[dict[str, str]]:
        return [{"role": m.role, "content": m.text()} for m in self.messages]

    def upstream_body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body = self.model_dump(exclude_none=True, exclude={"messages", "stream", "stream_options"})
        body["messages"] = messages
        return body


def parse_chat_request(raw: bytes) -> ChatRequest:
    """Parse and validate; errors name the field but never echo the submitted values."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GatewayError(400, "request body is not valid JSON", code="invalid_json") from None
    except RecursionError:  # `[[[[…` a hundred thousand deep: the parser's own limit
        raise GatewayError(400, "request body nested too deeply", code="invalid_json") from None
    if not isinstance(data, dict):
        raise GatewayError(400, "request body must be a JSON object", code="invalid_json")
    try:
        return ChatRequest.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        param = ".".join(str(p) for p in first["loc"])
        raise GatewayError(
            400, f"{param}: {first['msg']}", param=param, code="invalid_value"
        ) from None
