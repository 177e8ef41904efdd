"""`spanbudget engine`: run the vLLM-compatible engine emulator (DESIGN §7).

A thin layer: flags become `EngineSettings`, which build the runtime, served by uvicorn.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from spanbudget.common.extras import exit_unless_installed

__all__ = ["engine", "engine_app"]

_OVR = "Preset overrides"


def _override(help_text: str) -> Any:
    return typer.Option(help=help_text, rich_help_panel=_OVR, show_default=False)


def engine(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on.")] = "127.0.0.1:8000",
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: the preset's model).")
    ] = None,
    preset: Annotated[
        str | None, typer.Option(help="Deployment preset; see --list-presets.")
    ] = None,
    gpu_profile: Annotated[
        str | None,
        typer.Option(
            help="A GPU profile file (spanbudget engine calibrate) or a shipped one (h200, "
            "h100, a100, l4), in place of the preset's GPU."
        ),
    ] = None,
    model_config: Annotated[
        str | None,
        typer.Option(
            help="A Hugging Face config.json (or Qwen/Qwen3-8B, ...), in place of the "
            "preset's model architecture."
        ),
    ] = None,
    faults: Annotated[
        bool, typer.Option("--faults", help="Honour the x-spanbudget-delay request header.")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="Seed of the generated text.")] = None,
    stall: Annotated[
        list[str] | None,
        typer.Option(
            help="AT:MS — from AT s after start the engine does no work for MS ms (steps "
            "under way or due then wait it out). Repeatable."
        ),
    ] = None,
    error_rate: Annotated[
        float | None, typer.Option(help="Share of requests failing at once with 500.")
    ] = None,
    drop_rate: Annotated[
        float | None, typer.Option(help="Share of requests whose stream is cut mid-way.")
    ] = None,
    engine_core: Annotated[
        str | None,
        typer.Option(help="Run the scheduler in its own 'process' (default) or a 'thread'."),
    ] = None,
    core_priority: Annotated[
        str | None,
        typer.Option(
            help="CPU priority of the step thread: 'realtime' (default; SCHED_FIFO where "
            "permitted, so steps keep time on a busy machine) or 'normal'."
        ),
    ] = None,
    disaggregated: Annotated[
        bool,
        typer.Option(
            "--disaggregated",
            help="Run as a prefill and a decode instance (two GPUs of the preset's kind), "
            "the KV cache moved between them over the profile's link; emits vLLM's "
            "vllm_queue/vllm_prefill/vllm_async_kv_transfer/vllm_decode spans.",
        ),
    ] = False,
    list_presets: Annotated[
        bool, typer.Option("--list-presets", help="Print the presets and exit.")
    ] = False,
    num_gpus: Annotated[int | None, _override("Tensor-parallel GPUs.")] = None,
    peak_tflops: Annotated[float | None, _override("Dense peak TFLOP/s per GPU.")] = None,
    hbm_bandwidth_gbs: Annotated[float | None, _override("HBM GB/s per GPU.")] = None,
    hbm_gb: Annotated[float | None, _override("HBM GB per GPU.")] = None,
    params_b: Annotated[float | None, _override("Model parameters, billions.")] = None,
    num_layers: Annotated[int | None, _override("Transformer layers.")] = None,
    num_heads: Annotated[int | None, _override("Query heads.")] = None,
    num_kv_heads: Annotated[int | None, _override("Key/value heads.")] = None,
    head_dim: Annotated[int | None, _override("Head dimension.")] = None,
    weight_bytes: Annotated[float | None, _override("Bytes per weight (2 bf16, 1 fp8).")] = None,
    kv_cache_bytes: Annotated[float | None, _override("Bytes per KV element.")] = None,
    max_model_len: Annotated[int | None, _override("Context length.")] = None,
    mfu: Annotated[float | None, _override("Achieved share of peak FLOP/s.")] = None,
    mbu: Annotated[float | None, _override("Achieved share of peak bandwidth.")] = None,
    step_overhead_ms: Annotated[float | None, _override("Fixed time per step, ms.")] = None,
    gpu_memory_utilization: Annotated[float | None, _override("vLLM's memory share.")] = None,
    reserved_gb_per_gpu: Annotated[float | None, _override("Non-KV memory per GPU.")] = None,
    block_size: Annotated[int | None, _override("KV block size, tokens.")] = None,
    max_num_batched_tokens: Annotated[int | None, _override("Token budget per step.")] = None,
    max_num_seqs: Annotated[int | None, _override("Sequences per step.")] = None,
    num_gpu_blocks: Annotated[int | None, _override("KV blocks (0: from memory).")] = None,
    hidden_size: Annotated[int | None, _override("Hidden size (with --vocab-size).")] = None,
    vocab_size: Annotated[int | None, _override("Vocabulary (0: no LM-head term).")] = None,
    attn_mbu: Annotated[float | None, _override("Bandwidth share reading KV (0: mbu).")] = None,
    layer_overhead_us: Annotated[float | None, _override("Fixed time per layer, µs.")] = None,
    kv_link_gbs: Annotated[float | None, _override("KV transfer link, GB/s.")] = None,
    kv_link_latency_ms: Annotated[float | None, _override("KV transfer latency, ms.")] = None,
) -> None:
    """Run the engine emulator: vLLM's API and telemetry, latency from a scheduler model.

    An emulator, not an engine: a continuous-batching scheduler (chunked prefill, 16-token
    KV blocks, preemption) times every step with a roofline model of the preset's GPU and
    model, so requests queue and slow down under load as on real vLLM. Spans go where
    OTEL_EXPORTER_OTLP_ENDPOINT says (default http://127.0.0.1:4318).

    Without a subcommand it serves; `calibrate` fits a GPU profile to measured step times
    or vLLM spans, `predict` prints modelled step times.

    Example:

        spanbudget engine --listen 127.0.0.1:8000 --preset qwen3-8b-a100 --faults

        spanbudget engine --preset qwen3-8b-h100 --mfu 0.3 --stall 30:500 --drop-rate 0.01

        spanbudget engine --preset qwen3-8b-h200 --disaggregated --faults

        spanbudget engine --gpu-profile my-h100.json --model-config config.json
    """
    if ctx.invoked_subcommand is not None:
        return
    exit_unless_installed("engine")
    from .faults import FaultError
    from .gpu_profile import ProfileError
    from .model_arch import ModelConfigError
    from .presets import PresetError, preset_parameters
    from .settings import EngineSettings

    overrides = {
        name: value
        for name, value in locals().items()
        if name in preset_parameters() and value is not None
    }
    given: dict[str, Any] = {
        "listen": listen,
        "model": model,
        "preset": preset,
        "gpu_profile": gpu_profile,
        "model_config_file": model_config,
        "seed": seed,
        "stalls": stall or None,
        "error_rate": error_rate,
        "drop_rate": drop_rate,
        "engine_core": engine_core,
        "core_priority": core_priority,
    }
    if faults:
        given["faults"] = True
    if disaggregated:
        overrides["disaggregated"] = True
    try:
        settings = EngineSettings(
            **{k: v for k, v in given.items() if v is not None}, preset_overrides=overrides
        )
        if list_presets:
            _print_presets()
            return
        resolved = settings.resolved_preset()
        settings.stall_schedule()
        settings.host_port()  # a bad --listen is a usage error before anything loads
    except (
        PresetError,
        FaultError,
        ProfileError,
        ModelConfigError,
        ValueError,
    ) as exc:  # pydantic's errors are ValueErrors
        raise typer.BadParameter(str(exc)) from None
    _serve(settings, resolved)


def _print_presets() -> None:
    from rich.table import Table
    from spanbudget.common.terminal import make_console, print_wide

    from .perf_model import BatchEntry, PerfModel
    from .presets import DEFAULT_PRESET, PRESETS

    table = Table(title="engine emulator presets (modelled)")
    columns = ("preset", "deployment", "prefill 500 tok ms", "decode step b=1 ms", "KV tokens")
    for column in (*columns, "efficiencies from"):
        table.add_column(column)
    for name, p in PRESETS.items():
        perf = PerfModel(p)
        label = f"{name} (default)" if name == DEFAULT_PRESET else name
        decode_ms = perf.step_seconds([BatchEntry(1, 500)]) * 1e3
        table.add_row(
            label,
            p.description,
            f"{perf.prefill_seconds(500) * 1e3:.1f}",
            f"{decode_ms:.1f}",
            f"{p.kv_capacity_blocks * p.block_size:,}",
            p.source,
        )
    print_wide(make_console(), table)


engine_app = typer.Typer(name="engine", no_args_is_help=False)
engine_app.callback(invoke_without_command=True)(engine)


def _register() -> None:
    from .model_cli import predict

    engine_app.command()(predict)  # `calibrate` reads traces: registered by spanbudget/cli.py


_register()


def _serve(settings: Any, preset: Any) -> None:
    import gc
    import logging
    import sys

    from prometheus_client import CollectorRegistry
    from spanbudget.common.serving import serve

    from ..tokens import load_tokenizer
    from ..tracers import engine_tracer_provider
    from .api import create_app, quiet_deliberate_cuts
    from .faults import TroubleMaker
    from .generation import OutputPlanner
    from .runtime import EngineRuntime
    from .tracing import RequestTracer

    log = logging.getLogger("spanbudget.engine")
    provider = engine_tracer_provider()
    planner = OutputPlanner(
        load_tokenizer(settings.tokenizer),
        seed=settings.seed,
        min_tokens=settings.output_min_tokens,
        max_tokens=settings.output_max_tokens,
    )
    runtime = EngineRuntime(
        preset,
        planner,
        model_name=settings.served_model(),
        tracer=RequestTracer(provider),
        registry=CollectorRegistry(),
        stall_seconds=settings.stall_schedule(),
        trouble=TroubleMaker(
            error_rate=settings.error_rate, drop_rate=settings.drop_rate, seed=settings.seed
        ),
        faults_enabled=settings.faults,
        core=settings.engine_core,
        core_priority=settings.core_priority,
    )
    app = create_app(runtime, on_shutdown=(provider.shutdown,))
    # Start-up garbage (tokenizer, corpus) never needs collecting: keep it out of the
    # collector's generations so collection pauses stay short while tokens go out.
    gc.collect()
    gc.freeze()
    if settings.engine_core == "thread":
        # The engine-core thread must get the GIL back within a fraction of a millisecond
        # when a step ends, not after the default 5 ms of frontend work. (The core process
        # sets this for itself.)
        sys.setswitchinterval(0.0005)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_deliberate_cuts()
    log.info(
        "engine emulator serving %s (preset %s: %s) on http://%s/v1, faults %s",
        runtime.model_name,
        preset.name,
        preset.description,
        settings.listen,
        "on" if settings.faults else "off",
    )
    # Streams still open at SIGTERM get a few seconds to finish, then the server stops anyway.
    if not serve(app, settings.listen, timeout_graceful_shutdown=5):
        raise typer.Exit(1)  # uvicorn said why (the port taken, say)
