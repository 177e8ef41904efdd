"""`make typecheck`: mypy over the package's modules by their import names, and over the
tests' support package.

The package's folders sit at the repository's top under other names than their modules'
(`collector/` is `spanbudget.collector`: pyproject.toml's package-dir), which mypy cannot
be told on its command line; it can be given each file with its module name, as here.
Settings come from `[tool.mypy]` in pyproject.toml. Errors name the files as they are.
Exit 0 when clean, 1 with errors, 2 when mypy itself failed.
"""

from __future__ import annotations

import sys

from mypy import build
from mypy.errors import CompileError
from mypy.main import process_options
from mypy.modulefinder import BuildSource

from tests.support.layout import REPO, module_files


def sources() -> list[BuildSource]:
    """Every module of the package (its type stubs too) and of tests/support."""
    found = [
        BuildSource(str(path.relative_to(REPO)), name, None)
        for name, path in module_files((".py", ".pyi")).items()
    ]
    found.append(BuildSource("tests/__init__.py", "tests", None))
    for path in sorted((REPO / "tests" / "support").glob("*.py")):
        name = "tests.support" if path.stem == "__init__" else f"tests.support.{path.stem}"
        found.append(BuildSource(str(path.relative_to(REPO)), name, None))
    return found


def main() -> int:
    _, options = process_options(["--config-file", str(REPO / "pyproject.toml"), "-c", ""])
    checked = sources()
    try:
        result = build.build(checked, options)
    except CompileError as exc:
        print("\n".join(exc.messages), file=sys.stderr)
        return 2
    for line in result.errors:
        print(line)
    if result.errors:
        print(f"mypy: {len(result.errors)} line(s) over {len(checked)} modules", file=sys.stderr)
        return 1
    print(f"mypy: no issues in {len(checked)} modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
