"""The one error every trace reader raises, naming the input and what is wrong with it."""

from __future__ import annotations

from ..errors import CollectorError

__all__ = ["TraceReadError"]


class TraceReadError(CollectorError):
    """Trace input that cannot be read: a file, a byte string or a Jaeger URL.

    `source` names the input (file name or URL), `message` says what is wrong with it;
    `str(error)` is `"{source}: {message}"`, ready for a CLI to print as it is.
    """

    def __init__(self, source: str, message: str) -> None:
        super().__init__(f"{source}: {message}")
        self.source = source
        self.message = message
