"""`spanbudget serve` and `spanbudget ingest` are registered and documented with examples."""

from __future__ import annotations

import pytest
from spanbudget.app.cli import app
from spanbudget.common.serving import parse_listen
from typer.testing import CliRunner


@pytest.mark.parametrize("command", ["serve", "ingest"])
def test_command_help_has_an_example(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output
    assert f"spanbudget {command}" in result.output


def test_ingest_rejects_a_missing_path(tmp_path: object) -> None:
    result = CliRunner().invoke(app, ["ingest", "/nonexistent/path.md"])
    assert result.exit_code == 2
    assert "does not exist" in result.output


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--listen", "localhost"], "expected HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "port out of range"),
    ],
)
def test_serve_rejects_a_bad_setting_before_loading_anything(args: list[str], problem: str) -> None:
    result = CliRunner().invoke(app, ["serve", *args])
    assert result.exit_code == 2, result.output
    assert problem in result.output
    assert "Traceback" not in result.output


def test_a_bad_environment_value_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPANBUDGET_TOP_K", "0")
    result = CliRunner().invoke(app, ["ingest", "--help"])
    assert result.exit_code == 0  # help still works
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2, result.output
    assert "top_k" in result.output


def test_listen_accepts_ipv6_the_way_the_collector_does() -> None:
    assert parse_listen("[::1]:8080") == ("::1", 8080)
    assert parse_listen("0.0.0.0:8000") == ("0.0.0.0", 8000)


@pytest.mark.parametrize(
    ("algorithms", "problem"),
    [("RS256", "RS256 needs the cryptography package"), ("HS256,none", "'none'")],
)
def test_a_jwt_algorithm_this_install_cannot_verify_stops_serve(
    monkeypatch: pytest.MonkeyPatch, algorithms: str, problem: str
) -> None:
    """Not a 401 for every token at run time: the gateway refuses to start, saying why."""
    from jwt.algorithms import has_crypto

    if has_crypto and algorithms == "RS256":
        pytest.skip("cryptography is installed here: RS256 verifies")
    monkeypatch.setenv("COLUMNS", "300")  # the error box wraps at the terminal width
    monkeypatch.setenv("SPANBUDGET_JWT_SECRET", "s" * 32)
    monkeypatch.setenv("SPANBUDGET_JWT_ALGORITHMS", algorithms)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2, result.output
    assert problem in result.output
    assert "Traceback" not in result.output
