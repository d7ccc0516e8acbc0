"""constraints.txt installs on every Python that pyproject.toml admits (``requires-python``), down to its
oldest release: Debian 12's own python3.11 is 3.11.2, and set-up picks it where it is the fastest build on
PATH (scripts/setup.sh). A pin re-frozen on a newer Python can ask for more (soupsieve 3.0 and newer need
3.11.5); read from the installed packages' own metadata, with no index needed."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def oldest_admitted_python() -> Version:
    """The lowest version pyproject.toml's ``requires-python`` (a ``>=X.Y``) admits: X.Y.0."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (lowest,) = [spec.version for spec in SpecifierSet(project["requires-python"]) if spec.operator == ">="]
    return Version(f"{Version(lowest).major}.{Version(lowest).minor}.0")


def test_every_pin_installs_on_the_oldest_python_the_project_admits() -> None:
    oldest = oldest_admitted_python()
    assert oldest == Version("3.11.0")
    refused: list[str] = []
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        pin = Requirement(line)
        try:
            installed = metadata.metadata(pin.name)
        except metadata.PackageNotFoundError:  # pinned for another platform or extra: not installed here
            continue
        assert pin.specifier.contains(installed["Version"], prereleases=True), (
            f"{pin.name} {installed['Version']} is installed, {line} pinned: ./scripts/setup.sh installs it"
        )
        requires_python = installed.get("Requires-Python")
        if requires_python and oldest not in SpecifierSet(requires_python):
            refused.append(f"{line} needs Python {requires_python}")
    assert refused == [], (
        f"these pins do not install on Python {oldest} (pyproject.toml's requires-python); pin an older "
        f"release that does: {refused}"
    )
