"""`BatchHistogram` exposes what prometheus_client's own `Histogram` does when fed the same
values one by one (the last of each bucket with its exemplar), in both exposition formats:
the buckets, count and sum to the last digit, a creation time, one series a label set."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest as text_format
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics
from spanbudget.collector.core.histogram import BatchHistogram
from spanbudget.collector.core.metrics import BUDGET_BUCKETS_SECONDS

NAME = "spanbudget_stage_duration_seconds"
LABELS = ["budget", "stage"]
# Values on the bounds, between them, beyond the last, zero, and ones whose sum rounds.
VALUES = st.one_of(
    st.sampled_from([0.0, *BUDGET_BUCKETS_SECONDS, 30.000001, 1e9]),
    st.floats(min_value=0, max_value=40, allow_nan=False),
)
BATCHES = st.lists(
    st.tuples(
        st.sampled_from([("rag-ttft", "retrieval"), ("rag-ttft", "gpu_prefill"), ("b", "x")]),
        st.lists(st.tuples(VALUES, st.integers(0, 10**6).map(lambda n: f"{n:032x}")), max_size=30),
    ),
    max_size=6,
)


def _same_clock(text: str) -> str:
    """The exposition without what reads the wall clock: creation times, exemplars' times."""
    text = re.sub(r"(_created\{[^}]*\}) [0-9.e+]+", r"\1 T", text)
    return re.sub(r"(# \{trace_id=\"[0-9a-f]+\"\} [0-9.e+-]+) [0-9.]+", r"\1 T", text)


@settings(max_examples=150, deadline=None)
@given(BATCHES)
def test_it_exposes_what_a_histogram_fed_one_by_one_does(
    batches: list[tuple[tuple[str, str], list[tuple[float, str]]]],
) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    batched = BatchHistogram(NAME, "Stage times.", LABELS, BUDGET_BUCKETS_SECONDS, ours)
    reference = Histogram(
        NAME, "Stage times.", LABELS, buckets=BUDGET_BUCKETS_SECONDS, registry=theirs
    )
    for labels, values in batches:
        batched.observe(labels, values)
        child = reference.labels(*labels)
        last = {}
        for n, (value, _) in enumerate(values):
            last[min(i for i, b in enumerate((*BUDGET_BUCKETS_SECONDS, 1e400)) if value <= b)] = n
        for n, (value, trace_id) in enumerate(values):
            child.observe(value, {"trace_id": trace_id} if n in last.values() else None)
    for generate in (openmetrics, text_format):
        expected = _same_clock(generate(theirs).decode())
        assert _same_clock(generate(ours).decode()) == expected
    if any(values for _, values in batches):
        assert "_created{" in expected
        assert "trace_id=" in openmetrics(ours).decode()
