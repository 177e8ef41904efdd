"""A headless Chromium for the web UI tests: Debian's `chromium` driven by playwright-core.

playwright-core comes from npm into `.browser/` at the top of the checkout (gitignored);
it never downloads a browser: it drives `/usr/bin/chromium`, which the `debian_binary`
fixture installs when missing. `Browser` talks to `browser.js` one JSON line at a time.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.support.locks import exclusive

__all__ = ["PLAYWRIGHT_CORE", "Browser", "install_playwright_core"]

PLAYWRIGHT_CORE = "playwright-core@1.65.1"
DRIVER = Path(__file__).with_name("browser.js")


def install_playwright_core(folder: Path, *, attempts: int = 3) -> Path:
    """`npm install` playwright-core into `folder` once; return the folder to run node in.

    The registry can fail a request: the install is tried `attempts` times, a few seconds
    apart, and the last failure says what npm printed.
    """
    # Test workers that ask at once: one installs, the others wait and find it installed.
    with exclusive(folder / ".install.lock"):
        _install(folder, attempts)
        # Replaced whole, never rewritten in place: another worker's node may be reading it.
        partial = folder / f".browser.js.{os.getpid()}"
        shutil.copy(DRIVER, partial)
        partial.replace(folder / "browser.js")
    return folder


def _install(folder: Path, attempts: int) -> None:
    marker = folder / "node_modules" / "playwright-core" / "package.json"
    if not marker.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is missing: install Debian's nodejs and npm")
        folder.mkdir(parents=True, exist_ok=True)
        command = [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--no-save",
            "--prefix",
            str(folder),
            PLAYWRIGHT_CORE,
        ]
        # The whole environment: npm needs what the machine sets for TLS (on this one
        # NODE_EXTRA_CA_CERTS; without it an install took a minute, or failed).
        env = {**os.environ, "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}
        for attempt in range(1, attempts + 1):
            try:
                done = subprocess.run(
                    command, timeout=300, capture_output=True, text=True, env=env, check=False
                )
            except subprocess.TimeoutExpired:
                failure = "timed out after 300 s"
            else:
                if done.returncode == 0:
                    break
                failure = f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"
            if attempt == attempts:
                raise RuntimeError(
                    f"npm install {PLAYWRIGHT_CORE} failed {attempts} times; last ({failure})"
                )
            time.sleep(5 * attempt)


class Browser:
    """One browser page; every method waits for the driver's answer."""

    def __init__(self, folder: Path, chromium: str, profile: Path) -> None:
        node = shutil.which("node")
        if node is None:
            raise RuntimeError("node is missing: install Debian's nodejs")
        self._process = subprocess.Popen(
            [node, str(folder / "browser.js"), chromium, str(profile)],
            cwd=folder,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._read()
        if not hello.get("ready"):
            raise RuntimeError(f"the browser did not start: {hello}")
        self.version = hello.get("version", "")

    def _read(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError("the browser driver exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._process.stdin.flush()
        answer = self._read()
        if not answer.get("ok"):
            raise AssertionError(f"browser {op} failed: {answer.get('error')}")
        return answer

    def goto(self, url: str) -> int:
        status: int = self.call("goto", url=url)["status"]
        return status

    def eval(self, js: str) -> Any:
        return self.call("eval", js=js)["value"]

    def click(self, selector: str, *, navigates: bool = True) -> str:
        url: str = self.call("click", selector=selector, navigates=navigates)["url"]
        return url

    def press(self, key: str, *, navigates: bool = False) -> str:
        url: str = self.call("press", key=key, navigates=navigates)["url"]
        return url

    def focused(self) -> dict[str, Any] | None:
        value: dict[str, Any] | None = self.call("focused")["value"]
        return value

    def select(self, selector: str, value: str) -> None:
        self.call("select", selector=selector, value=value)

    def fill(self, selector: str, value: str) -> None:
        self.call("fill", selector=selector, value=value)

    def wait(self, js: str, timeout_ms: int = 15000) -> None:
        self.call("wait", js=js, timeout=timeout_ms)

    def screenshot(self, path: Path, *, full_page: bool = True) -> Path:
        self.call("screenshot", path=str(path), fullPage=full_page)
        return path

    def color_scheme(self, value: str) -> None:
        self.call("scheme", value=value)

    def errors(self) -> list[str]:
        """Console errors, page errors and failed requests since the last call."""
        answer = self.call("errors")
        return [*answer["errors"], *(f"request failed: {u}" for u in answer["failed"])]

    def close(self) -> None:
        if self._process.poll() is None:
            with contextlib.suppress(AssertionError, RuntimeError, BrokenPipeError):
                self.call("close")
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for pipe in (self._process.stdin, self._process.stdout):
            if pipe is not None:
                pipe.close()
