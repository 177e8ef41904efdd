"""The emulator's HTTP errors, shaped as vLLM's: `{"error": {message, type, param, code}}`."""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from ..errors import ServiceError
from .protocol import ErrorInfo, ErrorResponse, RequestParameterError

__all__ = ["ApiError", "error_response", "validation_error"]


class ApiError(ServiceError):
    """A request the emulator refuses or fails; the app answers it with `error_response`."""

    def __init__(
        self, status: int, message: str, error_type: str, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.error_type = error_type
        self.param = param


def error_response(
    status: int, message: str, error_type: str, param: str | None = None
) -> JSONResponse:
    body = ErrorResponse(
        error=ErrorInfo(message=message, type=error_type, param=param, code=status)
    )
    return JSONResponse(body.model_dump(), status_code=status)


def validation_error(exc: RequestValidationError) -> JSONResponse:
    """vLLM's answer to a request its models reject: 400, type `Bad Request`, and `param`
    naming the field (the one a validator blamed, else the first error's location).

    The message lists locations and reasons only: echoing the input would put prompt text
    into error bodies and the logs that keep them.
    """
    errors = exc.errors()
    param = next(
        (
            error["ctx"]["error"].parameter
            for error in errors
            if isinstance(error.get("ctx", {}).get("error"), RequestParameterError)
        ),
        None,
    )
    if param is None and errors:
        param = ".".join(str(part) for part in errors[0].get("loc", ()))
    label = "error" if len(errors) == 1 else "errors"
    lines = [f"{len(errors)} validation {label}:"]
    lines += [f"  {'.'.join(map(str, e.get('loc', ())))}: {e.get('msg', '')}" for e in errors]
    return error_response(400, "\n".join(lines), "Bad Request", param)
