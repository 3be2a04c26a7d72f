"""environment.yml (for conda users) must declare exactly pyproject.toml's dependencies."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_NAMES = {"torch": "pytorch"}  # PyPI name -> conda-forge name where they differ


def _split(requirement: str) -> tuple[str, str]:
    match = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", requirement)
    assert match, f"unparseable requirement {requirement!r}"
    name, spec = match.groups()
    return name.lower().replace("_", "-"), spec.replace(" ", "")


def _pyproject_requirements() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += extra
    out = dict(_split(r) for r in requirements)
    return {CONDA_NAMES.get(name, name): spec for name, spec in out.items()}


def _environment_requirements() -> dict[str, str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    out: dict[str, str] = {}
    for entry in env["dependencies"]:
        if isinstance(entry, dict):
            for pip_entry in entry["pip"]:
                if not pip_entry.startswith("-e"):
                    name, spec = _split(pip_entry)
                    out[name] = spec
        else:
            name, spec = _split(entry)
            if name not in {"python", "pip"}:
                out[name] = spec
    return out


def test_environment_yml_equals_pyproject():
    assert _environment_requirements() == _pyproject_requirements()


def test_environment_uses_conda_forge_and_python_floor():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"python{requires}" in env["dependencies"]
