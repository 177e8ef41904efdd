"""Slow, vanishing and oversized clients against `spanbudget collect`: a connection that
never finishes its headers is closed after the header timeout, headers past their bound
are refused at once, a body that never finishes is answered 408 after the body timeout,
and an upload cut short is one log line, not a traceback. Before, a hundred such
connections each kept a descriptor for ever."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.deploy.processes import spanbudget_command, start_process, stop_process
from tests.support.servers import free_port, wait_until

pytestmark = pytest.mark.timing  # the timeouts are one second

# A request line and headers past this are refused: h11's bound (DEFAULT_MAX_INCOMPLETE_
# EVENT_SIZE), which uvicorn keeps.
HEAD_LIMIT_BYTES = 16 * 1024

SLOW = 100
TIMEOUT_S = 1.0


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[tuple[int, int, Path]]:
    """(port, pid, log) of a collector with 1 s header and body timeouts."""
    port = free_port()
    log = tmp_path / "collector.log"
    command = spanbudget_command(
        "collect",
        *("--listen", f"127.0.0.1:{port}"),
        *("--grpc-listen", "off"),  # not the shared default port
        *("--db", str(tmp_path / "v.db")),
        *("--header-timeout", f"{TIMEOUT_S}s", "--body-timeout", f"{TIMEOUT_S}s"),
    )
    process = start_process(command, f"http://127.0.0.1:{port}/healthz", log)
    try:
        yield port, process.pid, log
    finally:
        stop_process(process)


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_descriptors(pid: int) -> int:
    """The descriptors once their count holds for 0.3 s: the start-up health check's
    connection may still be closing on the server's side (on a loaded machine, a count
    taken before it went made every slow connection look one short)."""
    count = descriptors(pid)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = descriptors(pid)
        if now == count:
            break
        count = now
    return count


def closed_by_peer(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_connections_that_never_finish_their_headers_are_closed(
    collector: tuple[int, int, Path],
) -> None:
    port, pid, _ = collector
    before = settled_descriptors(pid)
    sockets = []
    for _ in range(SLOW):
        sock = socket.create_connection(("127.0.0.1", port))
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl")
        sockets.append(sock)
    try:
        wait_until(lambda: descriptors(pid) >= before + SLOW, "every slow connection accepted")
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
        started = time.monotonic()
        wait_until(lambda: all(closed_by_peer(s) for s in sockets), "all closed", timeout=15)
        closed_after = time.monotonic() - started
        wait_until(lambda: descriptors(pid) <= before + 2, "their descriptors released")
    finally:
        for sock in sockets:
            sock.close()
    print(
        f"\n{SLOW} slow connections: descriptors {before} -> {before + SLOW} -> back,"
        f" closed {closed_after:.1f} s after the last was accepted"
    )
    assert closed_after < TIMEOUT_S + 2


def test_a_body_that_never_finishes_is_408_and_a_cut_upload_one_line(
    collector: tuple[int, int, Path],
) -> None:
    port, _, log = collector
    head = (
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\nContent-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head + b"\x0a" * 10)
        sock.settimeout(TIMEOUT_S + 5)
        started = time.monotonic()
        answer = sock.recv(4096)
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408"), answer[:80]
    assert TIMEOUT_S - 0.2 <= waited < TIMEOUT_S + 2
    for _ in range(3):  # uploads cut short: the client goes away mid-body
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(head + b"\x0a" * 10)
            time.sleep(0.1)
    time.sleep(0.5)
    assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    text = log.read_text()
    assert "Traceback" not in text
    assert text.count("aborted") == 3  # one line each


def test_a_request_head_past_its_bound_is_refused_and_the_next_is_served(
    collector: tuple[int, int, Path],
) -> None:
    """Headers that keep coming (within the header timeout) are refused once past
    HEAD_LIMIT_BYTES, not held: 400 at once and the connection closed; a keep-alive
    connection's second request, whose head the deadline waits for again, is answered
    as the first."""
    port, _, log = collector
    line = b"X-Filler: " + b"a" * 1000 + b"\r\n"
    head = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + line * (
        HEAD_LIMIT_BYTES // len(line) + 3
    )
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(5)
        started = time.monotonic()
        sock.sendall(head)  # one write, never finished: only the bound answers it at once
        answer = b""
        while chunk := sock.recv(4096):  # to the end: the server closes after its answer
            answer += chunk
        waited = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 400"), answer[:80]
    assert waited < TIMEOUT_S / 2  # refused and closed at once, not by the header deadline
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:  # one connection
        assert [client.get("/healthz").status_code for _ in range(2)] == [200, 200]
    assert "Traceback" not in log.read_text()
