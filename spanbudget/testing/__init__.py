"""Helpers for tests and benchmarks: synthetic traces of the reference path, OTLP encoding
of spans, and loopback servers. Nothing in spanbudget's commands imports them."""
