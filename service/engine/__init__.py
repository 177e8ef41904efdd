"""vLLM-compatible engine emulator: a continuous-batching scheduler on a roofline model.

An emulator, not an engine: it speaks vLLM's API and telemetry, and its latency responds
to load as a real serving engine's does. Real vLLM is one flag away (`--llm-base-url`).
"""
