"""Admission before decoding: requests reserve the queue room their size says they need,
so that concurrent uploads are refused before they are parsed, not after; and a sender
back before its Retry-After is over is held, not answered at once."""

from __future__ import annotations

import asyncio

import pytest
from spanbudget.collector.intake.admission import Admission, Throttle


def test_reservations_add_up_to_the_queue_bound_and_free_on_settle() -> None:
    queued = [0]
    admission = Admission(lambda: queued[0], capacity=1_000)
    first = admission.admit(100_000, compressed=False)  # 500 spans at 200 bytes a span
    second = admission.admit(100_000, compressed=False)
    assert (first, second) == (500, 500)
    assert admission.admit(2_000, compressed=False) is None  # 10 more would not fit
    admission.settle(first or 0)
    queued[0] = 400  # what the first brought is in the queue now
    assert admission.admit(20_000, compressed=False) == 100
    assert admission.admit(200, compressed=False) is None


def test_an_empty_queue_admits_any_size_and_compressed_bodies_reserve_nothing() -> None:
    queued = [0]
    admission = Admission(lambda: queued[0], capacity=1_000)
    assert admission.admit(10_000_000, compressed=False) == 50_000  # 413 after decoding
    admission.settle(50_000)
    assert admission.admit(10_000_000, compressed=True) == 0
    assert admission.admit(None, compressed=False) == 0
    queued[0] = 1_000
    assert admission.admit(None, compressed=False) is None  # full: refused whatever it is


def test_the_bytes_per_span_follow_the_accepted_bodies() -> None:
    admission = Admission(lambda: 0, capacity=10**6)
    for _ in range(60):
        admission.settle(0, body_bytes=500_000, spans=1_000)  # 500 bytes a span
    assert 490 < admission.bytes_per_span <= 500
    assert admission.admit(50_000, compressed=False) in (100, 101, 102)


@pytest.mark.timing
def test_a_sender_back_before_its_wait_is_held_until_it_fits_or_the_wait_is_over() -> None:
    """Refused at once the first time; back sooner than told, refused only once its wait is
    over, or taken as soon as room appears; a sender that waited is answered at once."""
    room = [False]

    def admit() -> int | None:
        return 7 if room[0] else None

    async def scenario() -> list[tuple[int | None, float]]:
        throttle = Throttle(0.3)
        loop = asyncio.get_running_loop()
        answers = []

        async def ask(sender: str) -> None:
            started = loop.time()
            answer = await throttle.admit(sender, admit)
            if answer is None:
                throttle.told(sender)
            answers.append((answer, loop.time() - started))

        await ask("10.0.0.1")  # full: refused at once, told to wait 0.3 s
        await ask("10.0.0.1")  # back at once: held for the rest of its wait, then refused
        await ask("10.0.0.2")  # another sender, never told: at once
        loop.call_later(0.1, room.__setitem__, 0, True)
        await ask("10.0.0.1")  # held, and taken when room appears
        await asyncio.sleep(0.35)
        room[0] = False
        await ask("10.0.0.1")  # waited as told: refused at once
        assert throttle.held == 0
        return answers

    answers = asyncio.run(scenario())
    assert [answer for answer, _ in answers] == [None, None, None, 7, None]
    waits = [waited for _, waited in answers]
    assert max(waits[0], waits[2], waits[4]) < 0.05  # answered at once
    assert 0.25 <= waits[1] < 0.5
    assert 0.08 <= waits[3] < 0.25  # the next poll after the room appeared


@pytest.mark.timing
def test_the_throttle_holds_only_so_many_and_never_past_the_bound_given() -> None:
    async def scenario() -> tuple[float, float]:
        throttle = Throttle(5.0, most_held=2)
        throttle.told("a")
        loop = asyncio.get_running_loop()
        started = loop.time()
        held = [asyncio.ensure_future(throttle.admit("a", lambda: None)) for _ in range(2)]
        await asyncio.sleep(0.01)
        assert throttle.held == 2
        assert await throttle.admit("a", lambda: None) is None  # a third: refused at once
        at_once = loop.time() - started
        for future in held:
            future.cancel()
        await asyncio.gather(*held, return_exceptions=True)
        assert throttle.held == 0
        started = loop.time()
        assert await throttle.admit("a", lambda: None, at_most=0.1) is None
        return at_once, loop.time() - started

    at_once, bounded = asyncio.run(scenario())
    assert at_once < 0.05
    assert 0.1 <= bounded < 0.5  # the call's own bound (a deadline), not the 5 s wait


def test_the_throttle_remembers_a_bounded_number_of_senders() -> None:
    throttle = Throttle(60.0, most_senders=3)
    for sender in ("a", "b", "c", "d"):
        throttle.told(sender)
    assert [throttle.early(s) > 0 for s in ("a", "b", "c", "d")] == [True, True, True, False]
    assert throttle.early(None) == 0.0
    zero = Throttle(0.0)  # Retry-After: 0 holds nobody
    zero.told("a")
    assert zero.early("a") == 0.0
