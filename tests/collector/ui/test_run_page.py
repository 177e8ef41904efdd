"""The web UI's run page states the SLO as the load tester does: the share within every
limit with its 95 % Wilson interval, decided only when the interval is on one side."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.collector import running_collector, send_spans
from tests.support.traces import rag_trace


def test_a_short_run_is_not_decided_and_a_long_one_is(tmp_path: Path) -> None:
    with running_collector(tmp_path) as collector:
        # 17 requests, one over the retrieval limit: 94.1 % against 95 % tells nothing.
        ids = [f"{n + 1:032x}" for n in range(17)]
        spans = [
            s
            for i, t in enumerate(ids)
            for s in rag_trace(trace_id=t, retrieval=30 * (i == 0)).spans
        ]
        send_spans(collector, spans)
        assert collector.pipeline.core.wait_idle(30)
        collector.verdict(ids[-1])
        page = collector.client.get("/runs/run-1").text
        line = re.search(r'<p class="verdict-line" id="run-slo"(.*?)</p>', page, re.S)
        assert line is not None
        said = " ".join(re.sub(r"<[^>]+>", "", line.group(0)).split())
        assert 'data-decision="not decided"' in line.group(0)
        assert said.startswith("SLO not decided 16 of 17 judged requests within every limit, 94.1%")
        assert (
            "(95% interval 73.0%–99.0%, Wilson; objective 95.0%: too few requests to tell)" in said
        )
        # 300 more within: the interval clears the objective.
        more = [f"{n + 100:032x}" for n in range(300)]
        send_spans(collector, [s for t in more for s in rag_trace(trace_id=t).spans])
        assert collector.pipeline.core.wait_idle(30)
        collector.verdict(more[-1])
        page = collector.client.get("/runs/run-1").text
        assert 'data-decision="met"' in page
        assert "316 of 317 judged requests" in page.replace("</b>", "").replace("<b>", "")
