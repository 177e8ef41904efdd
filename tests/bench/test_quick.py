"""Every benchmark runs, in its short mode, as `make bench` runs it: as a script from the
repository, so that a refactor cannot break one unseen. Only that it ran and printed its
table and its summary figures is checked, never a timing (the machine is shared)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.binaries import go_binary

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
# bench -> a line its table prints, and the summary figures it must record.
LIGHT = {
    "evaluate.py": ("evaluate (long-lived Evaluator)", 1),
    "readers.py": ("decode + spans_from_otlp", 1),
    "wire.py": ("compiled wire reader", 2),
    "journal.py": ("segment files (this release)", 1),
    "pipeline.py": ("full pipeline, in-process", 1),
    "overload.py": ("never wait", 1),
    "ui.py": ("overview, everything (100%)", 1),
    "loadgen.py": ("poisson", 1),
    "engine.py": ("step time modelled vs actual", 1),
    # The real Collector and Jaeger binaries that `make binaries` builds; its last row is the
    # Collector's tail sampler, the anchor of the summary's throughput figures.
    "interop.py": ("Collector tail_sampling", 5),
}
# Counted under valgrind, which the test installs from Debian when it is missing.
VALGRIND = {"instructions.py": ("instructions per 12-span trace", 1)}
# These load the reference models and start the demo's processes: a minute or so each.
HEAVY = {
    "gateway.py": ("tracing on (SDK + batch)", 2),
    "cpu.py": ("the stack, in all", 1),
}


def start_quick(script: str, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SPANBUDGET_BENCH_SUMMARY": str(tmp_path / f"{script}.jsonl"),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.Popen(
        [sys.executable, str(BENCH / script), "--quick", *extra],
        cwd=tmp_path,  # not the repository: a bench must find the checkout by itself
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def check(script: str, process: subprocess.Popen[str], tmp_path: Path) -> None:
    shown, figures = {**LIGHT, **VALGRIND, **HEAVY}[script]
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, out[-2000:] + err[-4000:]
    assert shown in out
    summary = tmp_path / f"{script}.jsonl"
    recorded = [json.loads(line) for line in summary.read_text().splitlines()]
    assert len(recorded) >= figures
    for figure in recorded:
        assert figure["bench"] == script.removesuffix(".py")
        assert isinstance(figure["measured"], float | int)
        assert figure["aim"]


@pytest.mark.parametrize("script", sorted(LIGHT))
def test_each_bench_runs_quick(script: str, tmp_path: Path) -> None:
    if script == "interop.py":
        go_binary("otelcol-spanbudget")  # fails, or skips, as every test that runs it
    check(script, start_quick(script, tmp_path), tmp_path)
    if script == "interop.py":
        summary = (tmp_path / "interop.py.jsonl").read_text().splitlines()
        anchors = [row for row in map(json.loads, summary) if row["anchor"]]
        assert [row["unit"] for row in anchors] == ["spans/CPU-s"]
        assert anchors[0]["measured"] > 0


def test_the_instruction_count_runs_quick(
    tmp_path: Path, debian_binary: Callable[[str], str]
) -> None:
    debian_binary("valgrind")
    check("instructions.py", start_quick("instructions.py", tmp_path), tmp_path)


def test_the_collector_counted_by_instructions_runs(tmp_path: Path) -> None:
    """What bench/instructions.py counts of the collector (left out of its `--quick`: a
    minute and more under valgrind), run here without valgrind: a pass judges the warm-up
    traces (a request of 40), the next the 40 counted too."""
    for passes, judged in (("0", 40), ("1", 80)):
        done = subprocess.run(
            [
                sys.executable,
                str(BENCH / "instructions.py"),
                "--child",
                str(BENCH.parent),
                "collector",
                passes,
                "40",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert f"judged {judged}" in done.stdout


@pytest.mark.slow
def test_the_model_benches_run_quick(tmp_path: Path) -> None:
    """Side by side, to keep the suite short: most of their time is waiting for start-up."""
    running = {
        "gateway.py": start_quick("gateway.py", tmp_path),
        "cpu.py": start_quick("cpu.py", tmp_path, "--port-base", "19600"),
    }
    for script, process in running.items():
        check(script, process, tmp_path)


def test_every_bench_is_covered_and_none_shadows_a_package() -> None:
    scripts = {p.name for p in BENCH.glob("*.py")} - {"bench_summary.py"}
    assert scripts == set(LIGHT) | set(VALGRIND) | set(HEAVY)
    for script in scripts | {"bench_summary.py"}:
        module = script.removesuffix(".py")
        assert module not in {"spanbudget", "collector", "service", "tests", "bench"}
        try:
            __import__(module)
        except ImportError:
            continue  # not importable from here: nothing it could shadow
        else:
            pytest.fail(f"bench/{script} shares its name with an importable module")


def test_the_summary_prints_every_figure(tmp_path: Path) -> None:
    path = tmp_path / "summary.jsonl"
    rows = [
        {"bench": "a", "figure": "x", "measured": 12.5, "unit": "µs", "aim": "≤ 20 µs",
         "floor": 2.5, "floor_name": "walk", "met": True},
        {"bench": "pipeline", "figure": "y", "measured": 30000, "unit": "spans/s",
         "aim": "≥ 50,000", "floor": 120000, "floor_name": "decode", "met": False},
        {"bench": "interop", "figure": "z", "measured": 45000, "unit": "spans/CPU-s",
         "aim": "≥ anchor", "floor": None, "floor_name": "", "met": False},
        {"bench": "interop", "figure": "tail", "measured": 150000, "unit": "spans/CPU-s",
         "aim": "the anchor", "floor": None, "floor_name": "", "met": None, "anchor": True},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = subprocess.run(
        [sys.executable, str(BENCH / "bench_summary.py"), str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout
    assert "5×" in out  # 12.5 / 2.5
    assert "0.25×" in out  # 30,000 / 120,000, its own floor and the decode floor
    assert "not met" in out
    assert "0.2×" in out  # 30,000 / the anchor's 150,000
    assert "0.3×" in out  # 45,000 / 150,000
    assert "0.375×" in out  # 45,000 / the decode floor's 120,000
    assert "1.25×" in out  # the anchor / the decode floor
    assert "150,000 spans per CPU-s" in out
    assert "120,000 spans/s" in out
