"""Package list for setuptools: maps the top-level importers/, quantizers/ and exporters/ folders
under the ``pegasus`` namespace so nothing generic lands in site-packages (metadata: pyproject.toml).

Folders of data the code reads at run time (exporters/glow/templates: the bundle's Makefile and example
program; exporters/glow/run/harness: the C harness and the boards' linker scripts) have no __init__.py; they are
found as namespace packages and listed like the others, so setuptools installs their files without warning
that an importable folder is missing from ``packages``."""

from setuptools import find_namespace_packages, setup

MAPPED = {"pegasus": "pegasus", "pegasus.importers": "importers",
          "pegasus.quantizers": "quantizers", "pegasus.exporters": "exporters"}
DATA_FILES = ["*.c", "*.ld", "*.mk"]   # the harness's and the templates' files, beside the code


def _packages() -> list[str]:
    found = []
    for name, folder in MAPPED.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_namespace_packages(where=folder, exclude=["*__pycache__*"])]
    return found


PACKAGES = _packages()
setup(packages=PACKAGES, package_dir=MAPPED, package_data={package: DATA_FILES for package in PACKAGES})
