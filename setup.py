"""Package list for setuptools: maps the top-level importers/, quantizers/ and exporters/ folders
under the ``pegasus`` namespace so nothing generic lands in site-packages (metadata: pyproject.toml)."""

from setuptools import find_packages, setup

MAPPED = {"pegasus": "pegasus", "pegasus.importers": "importers",
          "pegasus.quantizers": "quantizers", "pegasus.exporters": "exporters"}


def _packages() -> list[str]:
    found = []
    for name, folder in MAPPED.items():
        found.append(name)
        found += [f"{name}.{sub}" for sub in find_packages(where=folder)]
    return found


setup(packages=_packages(), package_dir=MAPPED, package_data={"pegasus.exporters": ["**/*.c", "**/*.ld", "**/*.mk"]})
