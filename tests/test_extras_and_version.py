"""What the root command says about itself: `--version`, and the pip command that adds an
extra, named after where this install came from (spanbudget is not on a package index)."""

from __future__ import annotations

import json
from importlib import metadata

from spanbudget.app.cli import app
from spanbudget.common.extras import install_command
from typer.testing import CliRunner


def test_version_is_the_installed_distributions() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.stdout == f"spanbudget {metadata.version('spanbudget')}\n"


def _direct_url(url: str, **info: object) -> str:
    return json.dumps({"url": url, **info})


def test_installed_from_a_wheel_file_names_the_wheel() -> None:
    wheel = "/tmp/dist/spanbudget-0.1.0-py3-none-any.whl"
    recorded = _direct_url(f"file://{wheel}", archive_info={})
    assert install_command("reference", recorded) == f"pip install '{wheel}[reference]'"


def test_installed_from_a_checkout_names_the_checkout() -> None:
    editable = _direct_url("file:///home/me/span%20budget", dir_info={"editable": True})
    assert install_command("reference", editable) == (
        "pip install -e '/home/me/span budget[reference]'"
    )
    copied = _direct_url("file:///home/me/spanbudget", dir_info={})
    assert install_command("reference", copied) == "pip install '/home/me/spanbudget[reference]'"


def test_installed_from_a_url_or_an_index() -> None:
    url = "https://example.org/spanbudget-0.1.0-py3-none-any.whl"
    assert install_command("reference", _direct_url(url, archive_info={})) == (
        f"pip install 'spanbudget[reference] @ {url}'"
    )
    assert install_command("reference", "") == "pip install 'spanbudget[reference]'"


def test_this_install_is_named_as_it_was_made() -> None:
    # make test installs the checkout editable: the command points back at it.
    recorded = metadata.distribution("spanbudget").read_text("direct_url.json")
    assert install_command("reference") == install_command("reference", recorded)
