"""Notebook tests: every manifest run under the smoke profile, clean sources, parameters cells, nbval.

One smoke execution of the whole manifest (the runner into a temporary output root) is shared by
the module: the run tests read its files, and nbval re-executes one executed copy per source
notebook and compares the cells marked ``# NBVAL_CHECK_OUTPUT`` with the runner's outputs (a
determinism check). That a failing notebook makes the runner exit non-zero and stays out of the
book is tested with a fixture notebook in ``tests/test_runner.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from dyckbook import results as R
from dyckbook import runner
from dyckbook.evaluate import validate_metrics

pytestmark = pytest.mark.notebook

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "notebooks" / "experiments.yml"
PROFILE = "smoke"
CHECK_MARK = "# NBVAL_CHECK_OUTPUT"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

_MAN = runner.load_manifest(MANIFEST)
SPECS = runner.resolve_profile(_MAN, PROFILE)
RUN_IDS = [s.name for s in SPECS]
SOURCES = sorted({nb.path for nb in _MAN.notebooks.values()})


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


@pytest.fixture(scope="module")
def smoke() -> SimpleNamespace:
    """Every run of the smoke profile, executed once per source state (shared with the book test)."""
    from book_build import SmokeRunError, smoke_root  # noqa: PLC0415

    missing = [str(p.relative_to(REPO)) for p in SOURCES if not p.is_file()]
    if missing:
        pytest.fail(f"the manifest references notebooks that do not exist: {missing}")
    start = time.perf_counter()
    try:
        root, rc = smoke_root(), 0
    except SmokeRunError as error:
        pytest.fail(str(error))
    lines = (root / "runner.log").read_text().splitlines()
    return SimpleNamespace(root=root, rc=rc, lines=lines, seconds=time.perf_counter() - start)


# ------------------------------------------------------------------------ sources (no kernels)


@pytest.mark.parametrize("path", SOURCES, ids=[p.stem for p in SOURCES])
def test_source_notebook_is_clean(path: Path) -> None:
    if not path.is_file():
        pytest.fail(f"{path.relative_to(REPO)} is referenced by the manifest but missing")
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert nb["nbformat"] == 4
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    dirty = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"
             and (c.get("outputs") or c.get("execution_count") is not None)]
    assert not dirty, f"{path.name}: cells {dirty} carry outputs or execution counts"


@pytest.mark.parametrize("key", sorted(_MAN.notebooks), ids=sorted(_MAN.notebooks))
def test_one_parameters_cell_declaring_the_manifest_parameters(key: str) -> None:
    pm = pytest.importorskip("papermill")
    nb = _MAN.notebooks[key]
    if not nb.path.is_file():
        pytest.fail(f"{nb.path.relative_to(REPO)} is referenced by the manifest but missing")
    tagged = [c for c in _cells(nb.path) if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{key}: {len(tagged)} cells tagged 'parameters'"
    declared = set(pm.inspect_notebook(str(nb.path)))
    expected = set(nb.params) | set(runner.INJECTED)
    if nb.group == R.CHAPTERS_GROUP:
        # chapters may keep page settings the manifest does not override
        assert declared >= expected, (key, sorted(expected - declared))
    else:
        assert declared == expected, (key, sorted(declared ^ expected))
    # flat scalars only: every line of the cell is an assignment of a literal (or a comment)
    for line in _source(tagged[0]).splitlines():
        code = line.split("#", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if code:
            name, _, value = code.partition("=")
            assert name.strip().isidentifier() and value.strip(), (key, line)


# ------------------------------------------------------------------------ the smoke execution


def test_smoke_profile_runs_without_failure(smoke: SimpleNamespace) -> None:
    failures = [line for line in smoke.lines if line.startswith(("FAILED", "[block]", "[FAIL]"))]
    assert smoke.rc == 0, "smoke runs failed:\n" + "\n".join(failures or smoke.lines[-20:])


@pytest.mark.parametrize("name", RUN_IDS, ids=RUN_IDS)
def test_run_is_published_with_every_promised_file(smoke: SimpleNamespace, name: str) -> None:
    spec = next(s for s in SPECS if s.name == name)
    record = R.read_run_record(spec.group, name, smoke.root)
    assert record is not None and record["status"] == "ok", (name, record and record.get("error"))
    assert R.run_notebook_path(spec.group, name, smoke.root).is_file()
    rdir = R.run_results_dir(spec.group, name, smoke.root)
    for output in spec.notebook.outputs:
        assert (rdir / output).is_file(), f"{name} did not write {output}"
    if "metrics.json" in spec.notebook.outputs:
        metrics = json.loads((rdir / "metrics.json").read_text(encoding="utf-8"))
        validate_metrics(metrics)
        assert metrics["seed"] == spec.params.get("seed", metrics["seed"])
    for output in spec.notebook.outputs:
        if output.endswith(".json"):
            json.loads((rdir / output).read_text(encoding="utf-8"))  # parses
    for fig in rdir.glob("fig_*.png"):
        assert fig.read_bytes()[:8] == PNG_MAGIC and fig.stat().st_size > 1000, fig.name
    executed = json.loads(R.run_notebook_path(spec.group, name, smoke.root).read_text())
    errors = [o for c in executed["cells"] for o in c.get("outputs", [])
              if o.get("output_type") == "error"]
    assert not errors


def test_explainability_measures_obey_their_invariants(smoke: SimpleNamespace) -> None:
    runs = [s for s in SPECS if s.notebook.key == "05_explainability"]
    assert runs
    for spec in runs:
        metrics = R.load_run_metrics(spec.group, spec.name, smoke.root)
        ex = metrics["explain"]
        # the thesis' artefact: a causal model read at [start] ignores its input
        assert ex["start_readout"]["max_logit_std"] == 0.0
        for name, ms in ex["matching_attention"].items():
            # the key categories partition each query's row, so their masses sum to 1
            total = sum(_nested_sum(ms["mean"][c][0]) for c in ms["categories"])
            n_heads = ms["n_layers"] * ms["n_heads"]
            assert total == pytest.approx(n_heads, abs=1e-4), name
        for name, pv in ex["preview"].items():
            for row in pv["auc"]:
                assert all(0.0 <= a <= 1.0 for a in row), name
            assert pv["n_pos"] > 0 and pv["n_neg"] > 0


def _nested_sum(value: object) -> float:
    if isinstance(value, list):
        return sum(_nested_sum(v) for v in value)
    return 0.0 if value is None else float(value)


def test_summary_agrees_with_the_run_files(smoke: SimpleNamespace) -> None:
    summaries = [s for s in SPECS if s.notebook.key == "90_summary"]
    assert summaries
    for spec in summaries:
        summary = json.loads((R.run_results_dir(spec.group, spec.name, smoke.root)
                              / "summary.json").read_text(encoding="utf-8"))
        groups = summary["groups"]
        expected: dict[int, dict[str, list[float]]] = {}
        for group in groups:
            for rec in R.collect_results(group, smoke.root):
                exp = rec["metrics"].get("thesis_experiment", rec["params"].get("experiment"))
                acc = rec["metrics"]["final"]["test"]["accuracy"]
                expected.setdefault(int(exp), {}).setdefault("test", []).append(acc)
        ran = sorted(expected)
        assert summary["missing_experiments"] == sorted(set(range(1, 8)) - set(ran))
        for exp, accs in expected.items():
            ours = summary["experiments"][str(exp)]["ours"]
            means = [v["test_accuracy"]["mean"] for v in ours.values()]
            n = sum(v["n_seeds"] for v in ours.values())
            assert n == len(accs["test"])
            if len(ours) == 1:
                assert means[0] == pytest.approx(sum(accs["test"]) / len(accs["test"]))


# ------------------------------------------------------------------------ nbval


def test_notebooks_rerun_under_nbval_with_stable_checked_cells(smoke: SimpleNamespace,
                                                               tmp_path: Path) -> None:
    """Re-execute one smoke copy of each source notebook with nbval (``--nbval-lax``).

    The copies are the runner's executed notebooks: parameterised with the smoke parameters and
    holding the outputs of the first execution, so nbval compares every ``# NBVAL_CHECK_OUTPUT``
    cell with the first run's output (a determinism check) and requires every other cell to run.
    """
    pytest.importorskip("nbval")
    if smoke.rc != 0:
        pytest.skip("the smoke execution failed (see test_smoke_profile_runs_without_failure)")
    # nbval re-executes into a private copy: the shared smoke root stays as the runner left it
    # (the book build in another worker copies it concurrently).
    work = tmp_path / "smoke"
    shutil.copytree(smoke.root, work)
    chosen: dict[str, Path] = {}
    for spec in SPECS:  # the first run of each source notebook
        chosen.setdefault(spec.notebook.key, R.run_notebook_path(spec.group, spec.name, work))
    checked = [key for key, path in chosen.items()
               if any(_source(c).lstrip().startswith(CHECK_MARK) for c in _cells(path))]
    assert {"05_explainability", "90_summary"} <= set(checked)
    env = {**os.environ, R.ROOT_ENV: str(work), "MPLBACKEND": "Agg",
           "OMP_NUM_THREADS": "1", "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
           "-p", "no:randomly", "-c", os.devnull, "--rootdir", str(work),
           "--nbval-lax", "--nbval-current-env", *map(str, chosen.values())]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]


def test_findings_chapters_see_every_group_that_ran(smoke: SimpleNamespace) -> None:
    """The re-examination chapter must find every notebook group the smoke profile ran (the grid,
    which writes no single-model metrics.json, was once reported as "not run")."""
    verdicts = json.loads((R.run_results_dir("chapters", "re_examining_thesis", smoke.root)
                           / "verdicts.json").read_text())
    assert verdicts["groups_run"] and all(verdicts["groups_run"].values()), verdicts["groups_run"]
