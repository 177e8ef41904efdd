"""Admission before decoding: requests reserve the queue room their size says they need,
so that concurrent uploads are refused before they are parsed, not after."""

from __future__ import annotations

from spanbudget.collector.intake.admission import Admission


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
