"""A dropped stream (`--drop-rate`) ends like a crashed upstream: cut mid-way, one log line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import httpx
import pytest
from spanbudget.service.engine.api import quiet_deliberate_cuts
from spanbudget.service.engine.faults import TroubleMaker
from spanbudget.service.engine.generation import OutputPlanner

from .harness import build_engine, preset, serve

BODY = {"messages": [{"role": "user", "content": "hello"}], "stream": True, "max_tokens": 20}
INCOMPLETE = "ASGI callable returned without completing response."


class _Recorder(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return True


@contextlib.contextmanager
def server_log() -> Iterator[_Recorder]:
    """The records uvicorn's error logger lets through.

    A filter, not a handler: uvicorn's logging set-up removes the logger's handlers, and
    its records never reach the root logger. Installed after the engine's own filter (which
    the test server, like `spanbudget engine`, installs), so it sees only what that passes.
    """
    quiet_deliberate_cuts()
    recorder = _Recorder()
    logger = logging.getLogger("uvicorn.error")
    # At uvicorn's own level: a server started quieter earlier in the process (a test's
    # ServerThread at log_level "critical") leaves the logger there, and a logger's level
    # is checked before its filters run.
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addFilter(recorder)
    try:
        yield recorder
    finally:
        logger.removeFilter(recorder)
        logger.setLevel(level)


def test_a_dropped_stream_is_cut_and_logged_once_without_traceback(
    planner: OutputPlanner, caplog: pytest.LogCaptureFixture
) -> None:
    engine = build_engine(preset(), planner, trouble=TroubleMaker(drop_rate=1.0, seed=4))
    received: list[str] = []

    async def read(client: httpx.AsyncClient) -> None:
        async with client.stream("POST", "/v1/chat/completions", json=BODY) as response:
            async for line in response.aiter_lines():
                received.append(line)

    async def run() -> None:
        async with serve(engine.app) as url, httpx.AsyncClient(base_url=url) as client:
            for _ in range(3):
                with pytest.raises(httpx.RemoteProtocolError):
                    await read(client)
            # The server goes on serving after the cuts.
            health = await client.get("/health")
            assert health.status_code == 200

    with server_log() as uvicorn_log, caplog.at_level(logging.INFO, logger="spanbudget.engine"):
        asyncio.run(run())
    data = [line for line in received if line.startswith("data: ")]
    assert data
    assert "data: [DONE]" not in data
    assert not [r for r in uvicorn_log.records if r.levelno >= logging.WARNING]
    assert not [r for r in uvicorn_log.records if r.exc_info]
    drops = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(drops) == 3
    for record in drops:
        assert (record.name, record.levelno) == ("spanbudget.engine", logging.WARNING)
        assert record.exc_info is None
        assert "injected stream drop" in record.getMessage()
        assert "\n" not in record.getMessage()


def test_other_unfinished_responses_are_still_reported() -> None:
    """Only the engine's own cuts are kept quiet: uvicorn's complaint about any other
    response an app leaves unfinished still gets through."""
    logger = logging.getLogger("uvicorn.error")
    with server_log() as uvicorn_log:
        logger.error(INCOMPLETE)
    assert [r.getMessage() for r in uvicorn_log.records] == [INCOMPLETE]
