"""The compact attributes the compiled wire reader gives its spans behave as the dict
`spans_from_otlp` makes of the same span, for every use the collector and its users make
of one, and hold less memory: one empty mapping shared, the keys' tuple shared by the
spans of a request with the same keys (bench/wire.py measures it)."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from spanbudget.collector.readers import spans_from_otlp
from spanbudget.collector.readers.span_records import COMPILED, AttributeKeys, SpanReader
from spanbudget.collector.spans import Span

from tests.support.otlp import to_request
from tests.support.traces import rag_trace

pytestmark = pytest.mark.skipif(not COMPILED, reason="the compiled reader (_wire) is not built")


def _read(spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """The spans as the compiled reader makes them, and as `spans_from_otlp` does."""
    body = to_request(spans).SerializeToString()
    compiled = SpanReader(AttributeKeys(every=True), compiled=True).read(body, "test")
    return compiled.to_spans(), spans_from_otlp(ExportTraceServiceRequest.FromString(body))


def _many(count: int) -> dict[str, int | str]:
    return {f"k{i}": (i if i % 2 else f"v{i}") for i in range(count)}


def test_they_behave_as_the_dict_of_the_same_span() -> None:
    trace = rag_trace()
    trace.spans[0] = Span(
        **{
            **{f: getattr(trace.spans[0], f) for f in Span.__dataclass_fields__},
            "attributes": {"a": "x", "n": 3, "f": 0.5, "b": True, "tags": ("p", "q")},
        }
    )
    ours, theirs = _read(trace.spans)
    assert ours == theirs  # spans equal, attributes and all
    mine, dict_ = ours[0].attributes, theirs[0].attributes
    assert type(mine) is not dict
    assert isinstance(mine, Mapping)
    assert mine == dict_
    assert dict_ == mine
    assert (mine != dict_) is False
    assert mine != {**dict_, "a": "y"}
    assert mine != {"a": "x"}
    assert list(mine) == list(dict_)
    assert len(mine) == len(dict_)
    assert mine["n"] == 3
    assert mine.get("f") == 0.5
    assert mine.get("absent", 7) == 7
    assert "b" in mine
    assert "absent" not in mine
    assert 3 not in mine
    with pytest.raises(KeyError):
        mine["absent"]
    assert dict(mine) == {**mine} == mine.copy() == dict_
    assert type(mine.copy()) is dict
    assert list(mine.copy().items()) == list(dict_.items())  # in order
    assert mine.keys() == dict_.keys()
    assert mine.keys() & {"a", "z"} == {"a"}
    assert mine.values() == list(dict_.values())
    assert mine.items() == list(dict_.items())
    assert mine | {"a": "y"} == {**dict_, "a": "y"}
    assert repr(mine) == repr(dict_)
    assert pickle.loads(pickle.dumps(mine)) == dict_
    with pytest.raises(TypeError):
        hash(mine)
    with pytest.raises(TypeError):
        mine["a"] = "y"  # type: ignore[index]


def test_a_request_shares_the_empty_mapping() -> None:
    spans, _ = _read(rag_trace().spans + rag_trace(trace_id="ab" * 16).spans)
    empty = [span.attributes for span in spans if not span.attributes]
    assert len(empty) > 2
    assert all(a is empty[0] for a in empty)
    by_trace: dict[str, dict[str, Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, {})[span.span_id] = span
    first, second = by_trace.values()
    for span_id, span in first.items():
        assert list(span.attributes) == list(second[span_id].attributes)
    # Smaller than the dict of the same span (tracemalloc in bench/wire.py counts all).
    mine = next(span.attributes for span in spans if len(span.attributes) >= 2)
    assert sys.getsizeof(mine) < sys.getsizeof(dict(mine))


@pytest.mark.parametrize("count", [1, 12, 13, 40])
def test_any_number_of_attributes_reads_alike(count: int) -> None:
    trace = rag_trace()
    trace.spans[1] = Span(
        **{
            **{f: getattr(trace.spans[1], f) for f in Span.__dataclass_fields__},
            "attributes": _many(count),
        }
    )
    ours, theirs = _read(trace.spans)
    assert ours == theirs
    got = ours[1].attributes
    assert dict(got) == _many(count)
    assert list(got) == list(_many(count))
    assert all(got[key] == value for key, value in _many(count).items())
    # Past 12 a dict (a lookup in turn would be slower than a hash).
    assert (type(got) is dict) == (count > 12)
