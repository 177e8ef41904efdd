"""What pyproject.toml cannot say alone: the package's folders, the files it ships from
elsewhere in the repository, and the evaluator's compiled fast path.

The repository keeps the reference path (`service/`) and what measures it (`collector/`)
at the top, beside the command (`app/`) and the leaf both sides use (`common/`);
`[tool.setuptools.package-dir]` maps each folder to its import name (`spanbudget.service`,
...), and every package below is found here. `[tool.spanbudget.shipped]` names the files
that live elsewhere in the repository (the default `budget.yaml` at the top, Jaeger's
config in deploy/) and that a wheel carries inside `spanbudget/`; an editable install
reads them where they are (`spanbudget.common.shipped`).

The extensions, `collector/judging/_judge.pyx` (the evaluator's fast path) and
`collector/readers/_wire.pyx` (the OTLP wire reader), are optional: where they cannot be
compiled (no C compiler), spanbudget installs all the same and judges every trace on its
pure-Python path, with the same verdicts, at about five times the CPU.
"""

import shutil
import tomllib
from pathlib import Path

from Cython.Build import cythonize
from setuptools import Extension, find_namespace_packages, setup
from setuptools.command.build_py import build_py

TOOL = tomllib.loads(Path("pyproject.toml").read_text())["tool"]
FOLDERS: dict[str, str] = TOOL["setuptools"]["package-dir"]
SHIPPED: dict[str, str] = TOOL["spanbudget"]["shipped"]


def packages() -> list[str]:
    """Every package under each mapped folder, by its import name; folders of data files
    (templates/, static/) count as packages too, as setuptools expects of package data."""
    found = []
    for name, folder in FOLDERS.items():
        found.append(name)
        below = find_namespace_packages(folder, exclude=["*__pycache__*", "*.egg-info*"])
        found += [f"{name}.{sub}" for sub in below]
    return sorted(found)


class BuildWithShippedFiles(build_py):
    """Also copies `[tool.spanbudget.shipped]` into the built `spanbudget` package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "spanbudget"
        target.mkdir(parents=True, exist_ok=True)
        for name, source in SHIPPED.items():
            shutil.copyfile(source, target / name)


extensions = cythonize(
    [
        Extension("spanbudget.collector.judging._judge", ["collector/judging/_judge.pyx"]),
        Extension("spanbudget.collector.readers._wire", ["collector/readers/_wire.pyx"]),
    ],
    language_level=3,
)
for extension in extensions:
    extension.optional = True  # a failed compile is a warning (cythonize drops the flag)

setup(packages=packages(), ext_modules=extensions, cmdclass={"build_py": BuildWithShippedFiles})
