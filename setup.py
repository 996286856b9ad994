"""Package discovery, the one part of the build that pyproject.toml cannot declare.

``backends/`` at the repository root is the package ``functrans.backends``; setuptools'
declarative ``find`` names packages after their folders, so it would install
``backends.llvm`` instead of ``functrans.backends.llvm``. Here every package under
``functrans/`` and under ``backends/`` is found (a folder with an ``__init__.py``), so a new
subpackage is in the wheel without being listed anywhere. Everything else is in
pyproject.toml.
"""
from setuptools import find_packages, setup

packages = find_packages(include=["functrans", "functrans.*"])
packages += ["functrans.backends"] + [f"functrans.backends.{name}"
                                      for name in find_packages("backends")]
setup(packages=packages)
