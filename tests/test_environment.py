"""environment.yml (for conda users) declares exactly pyproject.toml's dependencies, pins Python."""

import re
from pathlib import Path

import tomllib
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


def _environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text())


def _environment_requirements() -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in _environment()["dependencies"]:
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


def test_environment_pins_the_python_that_pyproject_allows_and_ci_uses():
    env = _environment()
    assert env["channels"] == ["conda-forge"]
    pins = [d for d in env["dependencies"] if isinstance(d, str) and _split(d)[0] == "python"]
    assert len(pins) == 1 and re.fullmatch(r"python=3\.\d+", pins[0]), pins
    version = pins[0].removeprefix("python=")
    floor = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    floor = tuple(map(int, floor.removeprefix(">=").split(".")))
    assert tuple(map(int, version.split("."))) >= floor
    for workflow in (ROOT / ".github" / "workflows").glob("*.yml"):
        assert f'python-version: "{version}"' in workflow.read_text(), workflow.name


def test_dask_is_an_extra_and_make_venv_installs_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert {_split(r)[0] for r in extras["dask"]} == {"dask", "distributed"}
    assert "'.[book,dask,dev]'" in (ROOT / "Makefile").read_text()


def test_make_clean_keeps_every_result():
    """`make clean` removes build artefacts only; results go only with `make clean-results`."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    clean = subprocess.run(["make", "-n", "clean"], cwd=root, capture_output=True, text=True,
                           check=True).stdout
    assert "_build" in clean and "book/results" not in clean and "book/runs" not in clean
    results = subprocess.run(["make", "-n", "clean-results"], cwd=root, capture_output=True,
                             text=True, check=True).stdout
    assert "book/results" in results and "book/runs" in results
