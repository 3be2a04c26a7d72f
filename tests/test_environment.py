"""environment.yml (for conda users) declares exactly pyproject.toml's dependencies, pins Python."""

import os
import re
from pathlib import Path

import pytest
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
    """`make clean` removes build artefacts only; results go only with `make clean-results`,
    one named profile at a time."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    clean = subprocess.run(["make", "-n", "clean"], cwd=root, capture_output=True, text=True,
                           check=True).stdout
    assert "_build" in clean and "book/results" not in clean and "book/runs" not in clean
    results = subprocess.run(["make", "-n", "clean-results", "PROFILE=smoke"], cwd=root,
                             capture_output=True, text=True, check=True).stdout
    assert "book/results/smoke" in results and "book/runs/smoke" in results
    assert "book/results/cpu" not in results
    unnamed = subprocess.run(["make", "clean-results"], cwd=root, capture_output=True, text=True,
                             check=False)
    assert unnamed.returncode == 2 and "name the profile" in unnamed.stderr


@pytest.mark.parametrize("profile", ["", "smoek", "smoke ../..", "../..", "cpu smoke"])
def test_make_clean_results_deletes_nothing_but_a_named_profile(tmp_path, profile):
    """Issue 54: `PROFILE=` deleted every profile's results, a typo exited 0, and
    `PROFILE='smoke ../..'` planned `rm -rf ../..`. Run for real, in a copy."""
    import subprocess

    root = Path(__file__).resolve().parents[1]
    here = tmp_path / "repo"
    (here / "notebooks").mkdir(parents=True)
    (here / "Makefile").write_bytes((root / "Makefile").read_bytes())
    (here / "notebooks" / "experiments.yml").write_bytes(
        (root / "notebooks" / "experiments.yml").read_bytes())
    kept = [here / "book" / base / p / "x.json" for base in ("results", "runs")
            for p in ("smoke", "cpu")] + [tmp_path / "outside.txt"]
    for path in kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("hours of compute")
    # as a user's shell runs it: `make test` runs this test under make, whose MAKELEVEL
    # would make the inner make print "Entering directory" on stdout
    env = {k: v for k, v in os.environ.items() if k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    out = subprocess.run(["make", "clean-results", f"PROFILE={profile}"], cwd=here, env=env,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 2 and not out.stdout
    assert len(out.stderr.strip().splitlines()) == 1 and "nothing deleted" in out.stderr
    assert all(path.is_file() for path in kept)
    done = subprocess.run(["make", "clean-results", "PROFILE=smoke"], cwd=here, env=env,
                          capture_output=True, text=True, check=True)
    assert done.returncode == 0
    assert [p.is_file() for p in kept] == [False, True, False, True, True]


def test_make_book_resumes_from_the_run_cache():
    """Issue 54: `make book` ran the experiments without DYCKBOOK_RUN_CACHE, so a stopped build
    retrained its runs (tests/test_runner.py stops a run and sees its seeds reused)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def plan(*args):
        return subprocess.run(["make", "-n", "book", "PROFILE=smoke", *args], cwd=root,
                              capture_output=True, text=True, check=True).stdout

    run = [line for line in plan().splitlines() if "-m dyckbook run" in line]
    assert run and all("DYCKBOOK_RUN_CACHE=.cache/runs " in line for line in run)
    off = [line for line in plan("RUN_CACHE=").splitlines() if "-m dyckbook run" in line]
    assert off and all("DYCKBOOK_RUN_CACHE= " in line for line in off)


@pytest.mark.parametrize("target", ["book", "runs"])
def test_a_full_recompute_is_asked_for_by_name(target):
    """Issue 51: `make book` reruns only what is not up to date; RERUN=all recomputes every run
    (`dyckbook run --force`, resumable); `make site` runs nothing."""
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def plan(*args):
        text = subprocess.run(["make", "-n", *args], cwd=root, capture_output=True, text=True,
                              check=True).stdout
        return text.replace("\\\n", " ")  # one line per recipe line

    def run_line(text):
        (line,) = [line for line in text.splitlines() if "-m dyckbook run" in line]
        return line

    assert "--force" not in run_line(plan(target))
    assert "--force" in run_line(plan(target, "RERUN=all"))
    assert "--only" not in run_line(plan(target, "RERUN=all"))
    # issue 65 item 2: any other value names runs, so a typo is dyckbook run's error, not a no-op
    for value, only in (("dyck1", "--only dyck1"), ("ALL", "--only ALL"),
                        ("dyck1 ood", "--only dyck1 ood")):
        assert "--force" in run_line(plan(target, f"RERUN={value}"))
        assert only in run_line(plan(target, f"RERUN={value}")), value
    assert "-m dyckbook run" not in plan("site") and "jupyter-book build" in plan("site")


def test_make_publish_checks_first_in_one_line(tmp_path):
    """`make publish` refuses, in under 10 s and one line, without committing anything: no
    remote, a local-path remote, uncommitted changes, no profile named."""
    import subprocess
    import time

    root = Path(__file__).resolve().parents[1]
    clone = tmp_path / "clone"
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    (clone / "Makefile").write_bytes((root / "Makefile").read_bytes())
    (clone / "notebooks").mkdir()
    (clone / "notebooks" / "experiments.yml").write_bytes(
        (root / "notebooks" / "experiments.yml").read_bytes())
    subprocess.run([*git, "-C", str(clone), "add", "Makefile", "notebooks"], check=True)
    subprocess.run([*git, "-C", str(clone), "commit", "-qm", "m"], check=True)

    def publish(*args: str) -> str:
        start = time.monotonic()
        done = subprocess.run(["make", "-s", "publish", *args], cwd=clone, capture_output=True,
                              text=True, check=False)
        assert time.monotonic() - start < 10
        assert done.returncode != 0 and not done.stdout
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        return done.stderr

    assert "no git remote 'origin'" in publish("PROFILE=cpu")
    subprocess.run(["git", "-C", str(clone), "remote", "add", "origin", str(tmp_path)],
                   check=True)
    assert "origin is a local path" in publish("PROFILE=cpu")
    subprocess.run(["git", "-C", str(clone), "remote", "set-url", "origin",
                    "https://github.com/example/example.git"], check=True)
    assert "name the profile" in publish()
    # issue 65 item 10: a profile the manifest lacks, before any venv is installed
    assert "PROFILE='bogus' is not a profile of notebooks/experiments.yml" in publish(
        "PROFILE=bogus")
    (clone / "new.txt").write_text("x")
    assert "uncommitted changes" in publish("PROFILE=cpu")
    branches = subprocess.run(["git", "-C", str(clone), "branch", "--list", "gh-pages"],
                              capture_output=True, text=True, check=True).stdout
    assert not branches and not (clone / ".venv").exists()


def _fake_checkout(tmp_path: Path, run_exit: int, source: str) -> Path:
    """A folder with the Makefile and a venv whose python fakes `dyckbook run` (exit
    ``run_exit``), `dyckbook pages`, MathJax's folder and the venv's dyckbook (``source``)."""
    import os

    root = Path(__file__).resolve().parents[1]
    here = tmp_path / "checkout"
    (here / "venv" / "bin").mkdir(parents=True)
    (here / "Makefile").write_bytes((root / "Makefile").read_bytes())
    mj = tmp_path / "mj"
    (mj / "input" / "tex" / "extensions").mkdir(parents=True)
    (mj / "tex-svg.js").write_text("")
    python = here / "venv" / "bin" / "python"
    python.write_text(f"""#!/bin/sh
case "$*" in
  "-I -c"*) echo '{source}' ;;
  *"import mathjax"*) echo '{mj}' ;;
  *"dyckbook run"*) echo "dyckbook run: error: no CUDA device" >&2; exit {run_exit} ;;
  *"dyckbook pages"*) echo "pages assembled" ;;
esac
""")
    book = here / "venv" / "bin" / "jupyter-book"
    book.write_text("#!/bin/sh\nfor i in 1 2 3; do echo 'book build line'; done\n")
    for path in (python, book):
        path.chmod(0o755)
    for name in ("pyproject.toml", "constraints.txt"):
        (here / name).write_text("")
        os.utime(here / name, (1_000_000_000, 1_000_000_000))
    (here / "venv" / ".installed").write_text("")
    os.utime(here / "venv" / ".installed", (1_000_000_100, 1_000_000_100))
    return here


@pytest.mark.parametrize("run_exit", [2, 1])
def test_a_failed_make_book_ends_with_its_failure(tmp_path, run_exit):
    """Issue 65 item 9: `make book DEVICE=cuda` without CUDA (dyckbook run's bad input, exit 2)
    builds nothing and its error is the last thing printed; a run that failed (exit 1) still
    gets its book built, and the failure is said again after the build."""
    import subprocess

    here = _fake_checkout(tmp_path, run_exit, str(tmp_path / "checkout"))
    done = subprocess.run(["make", "-s", "book", "VENV=venv", "DEVICE=cuda"], cwd=here,
                          capture_output=True, text=True, check=False)
    assert done.returncode != 0
    printed = [line for line in (done.stdout + done.stderr).splitlines()
               if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make's own 'Error N' line
    if run_exit == 2:
        assert "book build line" not in done.stdout and "pages assembled" not in done.stdout
        assert "no CUDA device" in done.stderr and "nothing built" in printed[-1]
    else:
        assert "book build line" in done.stdout
        errors = [line for line in done.stderr.splitlines()
                  if not re.match(r"make(\[\d+\])?: \*\*\*", line)]  # make's own lines, any level
        assert errors[-1].startswith("make book: the book is built, but dyckbook run failed "
                                     "(exit 1)"), errors


def test_a_venv_of_another_checkout_is_never_installed_into(tmp_path):
    """Issue 65 item 11: `make ... VENV=<another checkout's venv>` plans no `pip install -e`
    into it (which would repoint that checkout's venv here): it refuses, naming the checkout;
    with nothing to install it warns that the venv runs the other checkout's code."""
    import os
    import subprocess

    here = _fake_checkout(tmp_path, 0, "/elsewhere/other-checkout")
    os.utime(here / "pyproject.toml", (1_000_000_200, 1_000_000_200))  # an install is due
    plan = subprocess.run(["make", "-n", "venv", "VENV=venv"], cwd=here, capture_output=True,
                          text=True, check=False)
    assert plan.returncode != 0 and "pip install" not in plan.stdout
    assert "has dyckbook installed from /elsewhere/other-checkout, another checkout" in plan.stderr
    os.utime(here / "pyproject.toml", (1_000_000_000, 1_000_000_000))
    done = subprocess.run(["make", "-s", "venv", "VENV=venv"], cwd=here, capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0 and "runs the dyckbook of /elsewhere/other-checkout" in \
        done.stderr
    mine = _fake_checkout(tmp_path / "mine", 0, str((tmp_path / "mine" / "checkout").resolve()))
    os.utime(mine / "pyproject.toml", (1_000_000_200, 1_000_000_200))
    plan = subprocess.run(["make", "-n", "venv", "VENV=venv"], cwd=mine, capture_output=True,
                          text=True, check=False)
    assert plan.returncode == 0 and "pip install" in plan.stdout  # its own: installed as ever


def test_ruff_is_pinned_once_with_explicit_rules():
    """`make lint` and the pre-commit hook run the same ruff, pinned in the dev extra, with an
    explicit rule set (ruff's default rules change between versions)."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = [_split(r) for r in pyproject["project"]["optional-dependencies"]["dev"]]
    ruff = [spec for name, spec in pins if name == "ruff"]
    assert len(ruff) == 1 and re.fullmatch(r"==\d+\.\d+\.\d+", ruff[0]), ruff
    hooks = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())["repos"]
    revs = [h["rev"] for h in hooks if h["repo"] == "https://github.com/astral-sh/ruff-pre-commit"]
    assert revs == [f"v{ruff[0].removeprefix('==')}"], revs
    select = pyproject["tool"]["ruff"]["lint"]["select"]
    assert isinstance(select, list) and select, select


def test_the_pages_workflow_never_deploys_a_site_of_stand_ins(tmp_path):
    """Issue 65 item 6: the Pages workflow checks the built site before uploading it, and the
    check fails on a site whose pages are all 'Not published' stand-ins."""
    import importlib.util
    import json
    import subprocess
    import sys

    import yaml

    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "pages.yml").read_text())
    steps = workflow["jobs"]["build"]["steps"]
    runs = [step.get("run", "") for step in steps]
    uses = [step.get("uses", "") for step in steps]
    check = next(i for i, run in enumerate(runs) if ".ci/check_site.py" in run)
    upload = next(i for i, use in enumerate(uses) if "upload-pages-artifact" in use)
    build = next(i for i, run in enumerate(runs) if run.startswith("make "))
    assert build < check < upload
    script = ROOT / ".ci" / "check_site.py"
    spec = importlib.util.spec_from_file_location("check_site", script)
    check_site = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_site)
    index = tmp_path / "book" / "pages" / "index.json"
    assert "missing" in check_site.problem(tmp_path)
    index.parent.mkdir(parents=True)
    stand_ins = {"profile": "smoke", "states": {f"run{i}": "not published (missing)"
                                                for i in range(20)}}
    index.write_text(json.dumps(stand_ins))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 1 and "every one of the 20 pages" in proc.stderr
    index.write_text(json.dumps({**stand_ins, "states": {**stand_ins["states"], "dyck1": "ok"}}))
    assert check_site.problem(tmp_path) is None
    assert subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          check=False).returncode == 0
