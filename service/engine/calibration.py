"""Fit a GPU profile's efficiencies to measured step times: step-time tables or vLLM spans.

Pure: points in, a profile and per-point residuals out. Reading files is `calibrate_cli.py`'s.
The fit is least squares on log(predicted / measured) (relative errors weigh a 9 ms and a
1 s step alike), Levenberg-Marquardt over the logs of the fitted fields (they stay positive).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from spanbudget.common.semconv import (
    GEN_AI_LATENCY_TIME_IN_MODEL_DECODE,
    GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL,
    GEN_AI_LATENCY_TIME_IN_QUEUE,
    GEN_AI_USAGE_COMPLETION_TOKENS,
    GEN_AI_USAGE_PROMPT_TOKENS,
    VLLM_REQUEST_SPAN,
)

from ..errors import ServiceError
from .gpu_profile import FITTED, GpuProfile
from .model_arch import ModelArch
from .perf_model import BatchEntry, PerfModel
from .presets import compose_preset

__all__ = [
    "KINDS",
    "CalibrationError",
    "FitResult",
    "PointResult",
    "RequestSpan",
    "StepPoint",
    "fit_profile",
    "is_step_table",
    "points_from_spans",
    "points_from_step_table",
    "predict_point",
]

KINDS = ("prefill", "batched prefill", "decode")
# Spans cannot tell a per-layer floor from the per-step overhead: both are a constant per
# step. Fitted from spans alone, the floor keeps the base profile's value.
SPAN_FITTED = ("mfu", "mbu", "attn_mbu")


class CalibrationError(ServiceError, ValueError):
    """Nothing to fit, or a fit that makes no physical sense."""


class RequestSpan(Protocol):
    """What calibration reads of a span (the trace readers' spans have it)."""

    @property
    def trace_id(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def attributes(self) -> Mapping[str, Any]: ...


def _seconds(value: Any) -> float | None:
    """A phase attribute in seconds: a finite, non-negative number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    seconds = float(value)
    return seconds if seconds >= 0 and math.isfinite(seconds) else None


@dataclass(frozen=True)
class StepPoint:
    """A measured time: `steps` engine steps of `batch` sequences, each computing `tokens`
    new tokens over `context` cached ones. `with_overhead`: the time includes the per-step
    CPU overhead (spans do; GPU kernel times do not)."""

    kind: str
    label: str
    arch: ModelArch
    batch: float
    tokens: int
    context: float
    steps: int
    seconds: float
    with_overhead: bool  # else also one pass however long (a table row), not chunked


@dataclass(frozen=True)
class PointResult:
    point: StepPoint
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.point.seconds - 1.0


@dataclass(frozen=True)
class FitResult:
    profile: GpuProfile
    fitted: tuple[str, ...]
    points: list[PointResult]

    def mape(self) -> dict[str, float]:
        """Mean absolute percentage error per kind, in %."""
        by_kind: dict[str, list[float]] = {}
        for row in self.points:
            by_kind.setdefault(row.point.kind, []).append(abs(row.error))
        return {k: 100 * sum(v) / len(v) for k in KINDS if (v := by_kind.get(k))}


def is_step_table(document: Any) -> bool:
    """A step-time table as fixtures/gpu's measurement script writes it."""
    return (
        isinstance(document, dict)
        and isinstance(document.get("models"), dict)
        and all(isinstance(m, dict) and "config" in m for m in document["models"].values())
    )


def points_from_step_table(document: Mapping[str, Any], source: str) -> list[StepPoint]:
    """`prefill`, `batched_prefill` and `decode` rows of each model; `kernel_ms` (GPU
    kernels only) where a row has it, else the wall time `ms_median`."""
    points: list[StepPoint] = []
    for name, model in document["models"].items():
        arch = ModelArch.from_config(model["config"], model=name, source=source)
        rows: list[tuple[str, str, int, int, int, Any]] = []
        for row in model.get("prefill", ()):
            rows.append(("prefill", f"prefill {row['tokens']}", 1, int(row["tokens"]), 0, row))
        for row in model.get("batched_prefill", ()):
            b, t = int(row["batch"]), int(row["tokens_each"])
            rows.append(("batched prefill", f"prefill {b}x{t}", b, t, 0, row))
        for row in model.get("decode", ()):
            b, c = int(row["batch"]), int(row["context"])
            rows.append(("decode", f"decode B={b} C={c}", b, 1, c, row))
        for kind, label, batch, tokens, context, row in rows:
            seconds = _row_seconds(row, f"{source}: {name} {label}")
            points.append(
                StepPoint(kind, f"{name} {label}", arch, batch, tokens, context, 1, seconds, False)
            )
    return points


def _row_seconds(row: Mapping[str, Any], where: str) -> float:
    value = row.get("kernel_ms") or row.get("ms_median")
    if not isinstance(value, int | float) or value <= 0:
        raise CalibrationError(f"{where}: a row without kernel_ms or ms_median")
    return float(value) / 1e3


def points_from_spans(spans: Iterable[RequestSpan], arch: ModelArch) -> list[StepPoint]:
    """One prefill and one decode point per `llm_request` span with its phases.

    A prefill is taken as running alone (vLLM's chunked prefill does mix in decodes; under
    heavy load this reads as a slower GPU). A decode's batch is 1 plus the average number
    of other requests decoding at the same time, from the spans' own timestamps.
    """
    requests = []
    for span in spans:
        if span.name != VLLM_REQUEST_SPAN:
            continue
        a = span.attributes
        prompt = a.get(GEN_AI_USAGE_PROMPT_TOKENS)
        completion = a.get(GEN_AI_USAGE_COMPLETION_TOKENS)
        prefill = _seconds(a.get(GEN_AI_LATENCY_TIME_IN_MODEL_PREFILL))
        decode = _seconds(a.get(GEN_AI_LATENCY_TIME_IN_MODEL_DECODE))
        queue = _seconds(a.get(GEN_AI_LATENCY_TIME_IN_QUEUE)) or 0.0
        if not isinstance(prompt, int) or prompt < 1 or not prefill:
            continue
        done = span.start_ns / 1e9 + queue + prefill
        requests.append((span, prompt, completion, prefill, decode, done))
    points: list[StepPoint] = []
    for span, prompt, completion, prefill, decode, first in requests:
        label = f"{span.trace_id[:8]} {prompt} tok"
        points.append(StepPoint("prefill", label, arch, 1, prompt, 0, 1, prefill, True))
        if isinstance(completion, int) and completion >= 2 and decode:
            others = 0.0
            for _, _, _, _, other_decode, other_first in requests:
                if other_first == first or not other_decode:
                    continue
                overlap = min(first + decode, other_first + other_decode) - max(first, other_first)
                others += max(0.0, overlap) / decode
            steps = completion - 1
            context = prompt + (completion - 2) / 2
            points.append(
                StepPoint("decode", label, arch, 1 + others, 1, context, steps, decode, True)
            )
    return points


def predict_point(
    profile: GpuProfile, point: StepPoint, models: dict[tuple[Any, ...], PerfModel] | None = None
) -> float:
    """The modelled time of a point on a profile (`models`: a cache for one profile)."""
    # Spans' prefills ran in chunks of vLLM's default 8,192-token step budget.
    limit = 8192 if point.with_overhead else max(8192, point.tokens * math.ceil(point.batch))
    key = (id(point.arch), point.with_overhead, limit)
    perf = models.get(key) if models is not None else None
    if perf is None:
        if not point.with_overhead:
            profile = dataclasses.replace(profile, step_overhead_ms=0.0)
        perf = PerfModel(compose_preset(profile, point.arch, max_num_batched_tokens=limit))
        if models is not None:
            models[key] = perf
    if point.batch == 1 and point.context == 0:
        return perf.prefill_seconds(point.tokens) * point.steps
    whole = math.floor(point.batch)
    entries = [BatchEntry(point.tokens, round(point.context))] * whole
    step = perf.step_seconds(entries)
    share = point.batch - whole
    if share > 0:  # a fractional average batch: between its two neighbours
        bigger = perf.step_seconds([*entries, BatchEntry(point.tokens, round(point.context))])
        step += share * (bigger - step)
    return step * point.steps


def fit_profile(
    base: GpuProfile,
    points: Sequence[StepPoint],
    fields: Sequence[str] = FITTED,
    *,
    iterations: int = 200,
) -> FitResult:
    """Fit `fields` of `base` to the points; the other fields stay as they are."""
    if not points:
        raise CalibrationError("no usable points: no step-time rows and no llm_request spans")
    unknown = set(fields) - set(FITTED)
    if unknown:
        raise CalibrationError(f"cannot fit {', '.join(sorted(unknown))}; fittable: {FITTED}")
    measured = np.log(np.array([p.seconds for p in points]))

    def profile_at(theta: np.ndarray) -> GpuProfile:
        values: dict[str, Any] = dict(zip(fields, (float(v) for v in np.exp(theta)), strict=True))
        return dataclasses.replace(base, **values)

    def residuals(theta: np.ndarray) -> np.ndarray:
        profile = profile_at(theta)
        models: dict[tuple[Any, ...], PerfModel] = {}
        predicted = [predict_point(profile, p, models) for p in points]
        result: np.ndarray = np.log(np.array(predicted)) - measured
        return result

    start = [max(getattr(base, f), 1e-3) for f in fields]
    theta = np.log(np.array(start, dtype=float))
    r = residuals(theta)
    cost = float(r @ r)
    damping = 1e-3
    for _ in range(iterations):
        jacobian = np.empty((len(points), len(fields)))
        for j in range(len(fields)):
            shifted = theta.copy()
            shifted[j] += 1e-6
            jacobian[:, j] = (residuals(shifted) - r) / 1e-6
        normal = jacobian.T @ jacobian
        gradient = jacobian.T @ r
        improved = False
        while damping < 1e10:
            step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            trial = theta + np.clip(step, -1.0, 1.0)
            trial_r = residuals(trial)
            trial_cost = float(trial_r @ trial_r)
            if math.isfinite(trial_cost) and trial_cost < cost:
                improved = cost - trial_cost > 1e-14 * max(cost, 1e-30)
                theta, r, cost = trial, trial_r, trial_cost
                damping = max(damping / 10, 1e-12)
                break
            damping *= 10
        if not improved:
            break
    profile = profile_at(theta)
    for name in ("mfu", "mbu", "attn_mbu"):
        value = getattr(profile, name)
        if name in fields and value > 1:
            raise CalibrationError(
                f"the fit wants {name} = {value:.2f} > 1 of peak: check the profile's peak "
                "rates and the model config"
            )
    rows = [PointResult(p, predict_point(profile, p)) for p in points]
    result = FitResult(profile, tuple(fields), rows)
    return FitResult(
        dataclasses.replace(profile, fit={k: round(v, 2) for k, v in result.mape().items()}),
        tuple(fields),
        rows,
    )
