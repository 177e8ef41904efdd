"""`spanbudget engine calibrate` and `spanbudget engine predict`: the step-time model offline.

Thin: files and flags in, `calibration` and `perf_model` do the work, a table or JSON out.
Every refusal is one line on stderr and exit 2.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from spanbudget.common.commands import OutputFormat, usage_error
from spanbudget.common.terminal import make_console, print_wide

__all__ = ["JaegerQuery", "SpanSources", "calibrate_command", "fit_from", "predict"]


def _profile(spec: str) -> Any:
    from .profiles import resolve_gpu_profile

    return resolve_gpu_profile(spec)


def _arch(spec: str) -> Any:
    from .profiles import resolve_model_arch

    return resolve_model_arch(spec)


def _pair(spec: str, flag: str) -> tuple[int, int]:
    left, sep, right = spec.lower().partition("x")
    try:
        if not sep:
            raise ValueError(spec)
        a, b = int(left), int(right)
    except ValueError:
        raise usage_error(f"{flag} {spec!r}: expected NxM, for example 16x2048") from None
    if a < 1 or b < 1:
        raise usage_error(f"{flag} {spec!r}: both numbers must be at least 1")
    return a, b


def predict(
    prefill: Annotated[
        list[int] | None, typer.Option(help="A lone prompt of N tokens (chunked). Repeatable.")
    ] = None,
    batch: Annotated[
        list[str] | None,
        typer.Option(help="BxT: one step prefilling B prompts of T tokens. Repeatable."),
    ] = None,
    decode: Annotated[
        list[str] | None,
        typer.Option(help="BxC: one decode step of B sequences over C cached tokens. Repeatable."),
    ] = None,
    gpu_profile: Annotated[
        str | None, typer.Option(help="A profile file, or a shipped one: h200, h100, a100, l4.")
    ] = None,
    model_config: Annotated[
        str | None, typer.Option(help="A Hugging Face config.json (or Qwen/Qwen3-8B, ...).")
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="A named preset instead (spanbudget engine --list-presets).")
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="table or json.")
    ] = OutputFormat.TABLE,
) -> None:
    """Predict step times: what a prefill or a decode step costs on a GPU for a model.

    `ms` is the step as the emulator times it (with the per-step CPU overhead); `kernel_ms`
    leaves that overhead out, comparable with GPU kernel measurements.

    Example:

        spanbudget engine predict --prefill 1536 --batch 6x384 --preset qwen3-8b-h200

        spanbudget engine predict --decode 16x2048 --gpu-profile h100 --model-config config.json
    """
    from .gpu_profile import ProfileError
    from .model_arch import ModelConfigError
    from .perf_model import BatchEntry, PerfModel
    from .presets import PresetError, compose_preset, get_preset

    batches = [_pair(spec, "--batch") for spec in batch or ()]
    decodes = [_pair(spec, "--decode") for spec in decode or ()]
    if not (prefill or batches or decodes):
        raise usage_error("nothing to predict: give --prefill, --batch or --decode")
    if any(n < 1 for n in prefill or ()):
        raise usage_error("--prefill takes a number of tokens >= 1")
    try:
        if preset is not None:
            if gpu_profile or model_config:
                raise usage_error("give --preset, or --gpu-profile with --model-config (not both)")
            chosen = get_preset(preset)
        else:
            if not (gpu_profile and model_config):
                raise usage_error("give --preset NAME, or --gpu-profile with --model-config")
            chosen = compose_preset(_profile(gpu_profile), _arch(model_config))
    except (PresetError, ProfileError, ModelConfigError) as exc:
        raise usage_error(str(exc)) from None
    perf = PerfModel(chosen)
    bare = PerfModel(dataclasses.replace(chosen, step_overhead_ms=0.0))
    rows: list[dict[str, Any]] = []
    for tokens in prefill or ():
        steps = -(-tokens // chosen.max_num_batched_tokens)
        seconds = perf.prefill_seconds(tokens)
        shape = {"kind": "prefill", "batch": 1, "tokens": tokens, "context": 0, "steps": steps}
        kernel = bare.prefill_seconds(tokens)
        rows.append({**shape, "ms": seconds * 1e3, "kernel_ms": kernel * 1e3})
    shapes = [("batched prefill", b, t, 0, [BatchEntry(t, 0)] * b) for b, t in batches]
    shapes += [("decode", b, 1, c, [BatchEntry(1, c)] * b) for b, c in decodes]
    for kind, b, t, c, entries in shapes:
        cost = perf.step(entries)
        rows.append(
            {
                "kind": kind,
                "batch": b,
                "tokens": t,
                "context": c,
                "steps": 1,
                "ms": cost.seconds * 1e3,
                "kernel_ms": bare.step_seconds(entries) * 1e3,
                "bound": "compute" if cost.compute_bound else "memory",
            }
        )
    if output_format is OutputFormat.JSON:
        document = {
            "preset": chosen.name,
            "gpu": chosen.gpu_name,
            "num_gpus": chosen.num_gpus,
            "model": chosen.model,
            "source": chosen.source,
            "steps": rows,
        }
        typer.echo(json.dumps(document, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{chosen.model} on {chosen.num_gpus}x {chosen.gpu_name} (modelled)")
    for column in ("step", "ms", "kernel ms"):
        table.add_column(column, justify="right" if column != "step" else "left")
    for row in rows:
        step = {
            "prefill": f"prefill {row['tokens']} tokens",
            "batched prefill": f"prefill {row['batch']}x{row['tokens']}",
            "decode": f"decode {row['batch']} seq over {row['context']} tokens",
        }[row["kind"]]
        table.add_row(step, f"{row['ms']:.2f}", f"{row['kernel_ms']:.2f}")
    print_wide(make_console(), table)


TraceReader = Callable[[Path], Sequence[Any]]
# A Jaeger query address, a service and how far back (`1h`): the spans of its traces.
JaegerReader = Callable[[str, str, str], Sequence[Any]]


@dataclasses.dataclass(frozen=True)
class SpanSources:
    """Where `calibrate` reads vLLM's spans: trace files (`read_traces`) and a Jaeger
    (`read_jaeger`), each failing with one of `errors` and a one-line message. The
    composition root (app/cli.py) gives it the collector's trace readers."""

    read_traces: TraceReader
    read_jaeger: JaegerReader
    errors: tuple[type[Exception], ...]


@dataclasses.dataclass(frozen=True)
class JaegerQuery:
    url: str
    service: str
    since: str

    def describe(self) -> str:
        return f"{self.url} (service {self.service}, last {self.since})"


def fit_from(
    files: Sequence[Path],
    jaeger: JaegerQuery | None,
    sources: SpanSources,
    *,
    gpu_profile: str,
    model_config: str | None,
    name: str | None,
) -> tuple[Any, Any]:
    """The fit of `gpu_profile`'s efficiencies to the step-time tables and the traces
    among `files` and in `jaeger`, and the fitted profile named `name`. Refusals are
    usage errors (exit 2)."""
    from .calibration import (
        SPAN_FITTED,
        CalibrationError,
        fit_profile,
        is_step_table,
        points_from_spans,
        points_from_step_table,
    )
    from .gpu_profile import FITTED, ProfileError
    from .model_arch import ModelConfigError

    try:
        base = _profile(gpu_profile)
        arch = _arch(model_config) if model_config else None
        points: list[Any] = []

        def from_spans(where: str, read: Callable[[], Sequence[Any]]) -> None:
            if arch is None:
                raise usage_error(f"{where}: traces need --model-config (the model they ran)")
            try:
                spans = read()
            except sources.errors as exc:
                raise usage_error(str(exc)) from None
            found = points_from_spans(spans, arch)
            if not found:
                raise usage_error(
                    f"{where}: no llm_request span with prompt tokens and phase times"
                )
            points.extend(found)

        traced = jaeger is not None
        for path in files:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise usage_error(f"{path}: {exc.strerror or exc}") from None
            document = _json_or_none(data)
            if is_step_table(document):
                points += points_from_step_table(document, str(path))
            else:
                from_spans(str(path), functools.partial(sources.read_traces, path))
                traced = True
        if jaeger is not None:
            from_spans(
                jaeger.describe(),
                lambda: sources.read_jaeger(jaeger.url, jaeger.service, jaeger.since),
            )
        tables = any(not p.with_overhead for p in points)
        result = fit_profile(base, points, FITTED if tables or not traced else SPAN_FITTED)
    except (CalibrationError, ProfileError, ModelConfigError) as exc:
        raise usage_error(str(exc)) from None
    fitted_to = ", ".join([path.name for path in files] + ([jaeger.url] if jaeger else []))
    profile = dataclasses.replace(
        result.profile,
        name=name or f"{base.name}-calibrated",
        source=f"fitted by spanbudget engine calibrate to {fitted_to}",
    )
    return result, profile


def calibrate_command(sources: SpanSources) -> Callable[..., None]:
    """The `calibrate` command over `sources`: its options, and `fit_from` behind them."""

    def calibrate(
        files: Annotated[
            list[Path] | None,
            typer.Argument(
                help="Step-time tables (fixtures/gpu format) and trace files with vLLM "
                "llm_request spans (OTLP JSON/JSONL/protobuf, Jaeger JSON).",
                show_default=False,
            ),
        ] = None,
        out: Annotated[
            Path | None, typer.Option(help="Where to write the fitted profile (JSON).")
        ] = None,
        jaeger_url: Annotated[
            str | None,
            typer.Option(
                help="Also read vLLM's llm_request spans from Jaeger: its query address (API "
                "v3), or that address with /api/traces."
            ),
        ] = None,
        service: Annotated[
            str, typer.Option(help="With --jaeger-url: the service whose traces to read.")
        ] = "vllm",
        since: Annotated[str, typer.Option(help="With --jaeger-url: how far back.")] = "1h",
        gpu_profile: Annotated[
            str,
            typer.Option(
                help="The GPU's peak rates and the fit's starting point: a shipped profile "
                "(h200, h100, a100, l4) or a profile file."
            ),
        ] = "h200",
        model_config: Annotated[
            str | None,
            typer.Option(help="The traces' model: a config.json (or Qwen/Qwen3-8B, ...)."),
        ] = None,
        name: Annotated[str | None, typer.Option(help="The new profile's name.")] = None,
    ) -> None:
        """Fit a GPU profile's efficiencies to measured step times or to vLLM's request spans.

        From step-time tables it fits mfu, mbu, attn_mbu and the per-layer floor against each
        row's GPU kernel time; from `llm_request` spans (prompt tokens, time_in_model_prefill
        and _decode) it fits mfu, mbu and attn_mbu, keeping the base profile's floor and step
        overhead. Prints every point's measured and predicted time and the MAPE per kind.

        Example:

            spanbudget engine calibrate fixtures/gpu/h200-qwen3-prefill-decode.json --out h200.json

            spanbudget engine calibrate traces.json --model-config config.json --out mine.json

            spanbudget engine calibrate --jaeger-url http://127.0.0.1:16686 --service vllm \\
                --model-config config.json --out mine.json
        """
        from .gpu_profile import save_profile

        if not files and jaeger_url is None:
            raise usage_error("give step-time tables or trace files, or --jaeger-url")
        if out is None:
            raise usage_error("--out: where to write the fitted profile")
        jaeger = None if jaeger_url is None else JaegerQuery(jaeger_url, service, since)
        result, profile = fit_from(
            files or [],
            jaeger,
            sources,
            gpu_profile=gpu_profile,
            model_config=model_config,
            name=name,
        )
        _print_fit(result, profile)
        save_profile(profile, out)
        make_console(stderr=True).print(f"wrote {out}")

    return calibrate


def _json_or_none(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def _print_fit(result: Any, profile: Any) -> None:
    from rich.table import Table

    console = make_console()
    table = Table(title="measured vs predicted")
    for column in ("kind", "point", "measured ms", "predicted ms", "error"):
        table.add_column(column, justify="left" if column in ("kind", "point") else "right")
    for row in result.points:
        table.add_row(
            row.point.kind,
            row.point.label,
            f"{row.point.seconds * 1e3:.2f}",
            f"{row.predicted * 1e3:.2f}",
            f"{row.error * 100:+.1f} %",
        )
    print_wide(console, table)
    for kind, value in result.mape().items():
        count = sum(row.point.kind == kind for row in result.points)
        console.print(f"MAPE {kind}: {value:.1f} % ({count} points)")
    fitted = ", ".join(f"{f} = {getattr(profile, f):.4g}" for f in result.fitted)
    console.print(f"fitted: {fitted}")
