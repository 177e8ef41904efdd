"""Build, or reuse, the Jaeger and OpenTelemetry Collector binaries that the interop tests and
`spanbudget demo --jaeger` run, from the Go modules beside this file.

    python deploy/build/binaries.py          build what is missing, print both paths
    python deploy/build/binaries.py jaeger   one of them

Each binary is built with CGO_ENABLED=0 from a module of ours whose go.sum pins every
dependency (downloads go through the Go module proxy), into the cache folder
$SPANBUDGET_BIN_CACHE (default ~/.cache/spanbudget/bin). Its file name carries the version
and a hash of the module's files, so a changed go.mod builds a new binary and an unchanged
one is reused at no cost; `jaeger` and `otelcol-spanbudget` in that folder link to the
latest build, for people to run by hand. Nothing here is kept in the repository.

Standard library only: `make binaries` runs it before the test suite's own imports.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BINARIES", "GoBinary", "by_name", "cache_dir"]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class GoBinary:
    """One program built from a module folder beside this file."""

    name: str
    version: str
    module: str  # folder name beside this file
    package: str  # what `go build` builds in that module
    ldflags: str = ""

    @property
    def module_dir(self) -> Path:
        return HERE / self.module

    def key(self) -> str:
        """A hash of every file of the module: what the binary is built from."""
        digest = hashlib.sha256()
        for path in sorted(self.module_dir.iterdir()):
            if path.is_file():
                digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
        return digest.hexdigest()[:12]

    def path(self, cache: Path | None = None) -> Path:
        """Where the binary built from the module's present files is, or goes."""
        return (cache or cache_dir()) / f"{self.name}-{self.version}-{self.key()}"

    def build(self, cache: Path | None = None) -> tuple[Path, float | None]:
        """The binary's path and the seconds its build took (None: it was there already)."""
        target = self.path(cache)
        if not target.is_file():
            started = time.monotonic()
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.{os.getpid()}")
            command = ["go", "build", "-trimpath", "-o", str(partial)]
            if self.ldflags:
                command += ["-ldflags", self.ldflags]
            env = {**os.environ, "CGO_ENABLED": "0", "GOTOOLCHAIN": "local", "GOFLAGS": ""}
            try:
                subprocess.run([*command, self.package], cwd=self.module_dir, env=env, check=True)
                partial.replace(target)
            finally:
                partial.unlink(missing_ok=True)
            elapsed: float | None = time.monotonic() - started
        else:
            elapsed = None
        latest = target.with_name(self.name)
        latest.unlink(missing_ok=True)
        latest.symlink_to(target.name)
        return target, elapsed


BINARIES = (
    # Jaeger v2.12.0: its Go module is tagged v1.75.0 (the module path has no /v2).
    GoBinary(
        "jaeger",
        "2.12.0",
        "jaeger",
        "github.com/jaegertracing/jaeger/cmd/jaeger",
        "-X github.com/jaegertracing/jaeger/internal/version.latestVersion=v2.12.0",
    ),
    # The Collector with exactly the components of deploy/otelcol*.yaml (builder-config.yaml).
    GoBinary("otelcol-spanbudget", "0.161.0", "otelcol", "."),
)


def by_name(name: str) -> GoBinary:
    for binary in BINARIES:
        if binary.name == name:
            return binary
    raise KeyError(f"no binary named {name!r}: {', '.join(b.name for b in BINARIES)}")


def cache_dir() -> Path:
    configured = os.environ.get("SPANBUDGET_BIN_CACHE")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "spanbudget" / "bin"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="jaeger, otelcol-spanbudget (default: both)")
    args = parser.parse_args(argv)
    if shutil.which("go") is None:
        print("binaries: `go` is not on PATH (Go 1.26 or newer builds these)", file=sys.stderr)
        return 1
    try:
        chosen = [by_name(name) for name in args.names] or list(BINARIES)
    except KeyError as error:
        print(f"binaries: {error.args[0]}", file=sys.stderr)
        return 2
    for binary in chosen:
        try:
            path, seconds = binary.build()
        except subprocess.CalledProcessError as error:
            print(f"binaries: building {binary.name} failed ({error})", file=sys.stderr)
            return 1
        size = path.stat().st_size / 1e6
        how = "reused" if seconds is None else f"built in {seconds:.0f} s"
        print(f"{binary.name} {binary.version}: {path} ({size:.0f} MB, {how})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
