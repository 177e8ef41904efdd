"""Helpers the tests share: never a test module itself, never shipped in the wheel."""
