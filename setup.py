"""The evaluator's compiled fast path, `collector/judging/_judge.pyx`, built with Cython.

Everything else about the package is in pyproject.toml. The extension is optional: where
it cannot be compiled (no C compiler), spanbudget installs all the same and judges every
trace on its pure-Python path, with the same verdicts, at about five times the CPU.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

extensions = cythonize(
    [Extension("spanbudget.collector.judging._judge", ["collector/judging/_judge.pyx"])],
    language_level=3,
)
for extension in extensions:
    extension.optional = True  # a failed compile is a warning (cythonize drops the flag)

setup(ext_modules=extensions)
