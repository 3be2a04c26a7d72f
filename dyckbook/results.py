"""Where runs live on disk: executed-notebook and result paths, run records, and result loading.

Layout, relative to the output root (the repository root unless ``DYCKBOOK_ROOT`` says otherwise)::

    book/runs/<group>/<run>.ipynb          executed notebook, published only after success
    book/results/<group>/<run>/            everything the run wrote:
        metrics.json, per_length.csv, config.json, fig_*.png   (written by the notebook)
        run.json                            the run record (written by the runner)
        failed.ipynb, partial/              only after a failure (never read as results)

``<group>`` is the notebook's stem (``01_dyck1``) for experiments and ``chapters`` for chapter
notebooks. Notebooks receive ``results_dir`` as a path *relative to the output root* (readable in
the published page, independent of the machine) and resolve it with :func:`resolve`, which also
works when the notebook is opened by hand from ``notebooks/`` in JupyterLab.

This module imports only the standard library, so notebooks and the summary can use it cheaply.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Environment variable naming the output root (where ``book/runs`` and ``book/results`` go).
ROOT_ENV = "DYCKBOOK_ROOT"
RUNS_DIR = Path("book") / "runs"
RESULTS_DIR = Path("book") / "results"
RUN_RECORD = "run.json"
FAILED_NOTEBOOK = "failed.ipynb"
PARTIAL_DIR = "partial"
#: Group name under which chapter notebooks are published (book/runs/chapters/<name>.ipynb).
CHAPTERS_GROUP = "chapters"
#: Run-record statuses. Only "ok" runs count as results.
STATUSES = ("ok", "failed", "blocked")


def repo_root() -> Path:
    """The output root: ``$DYCKBOOK_ROOT`` if set, else :func:`source_root`."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env).resolve()
    return source_root()


def source_root() -> Path:
    """The repository holding the manifest (ignores ``$DYCKBOOK_ROOT``).

    Searches upward from the current directory for ``notebooks/experiments.yml``, so a notebook
    opened from ``notebooks/`` in JupyterLab finds the repository; falls back to the directory
    above the installed package (an editable install) and finally to the current directory.
    """
    here = Path.cwd().resolve()
    for candidate in (here, *here.parents):
        if (candidate / "notebooks" / "experiments.yml").is_file():
            return candidate
    package_parent = Path(__file__).resolve().parent.parent
    if (package_parent / "notebooks" / "experiments.yml").is_file():
        return package_parent
    return here


def resolve(path: str | os.PathLike[str], root: str | os.PathLike[str] | None = None) -> Path:
    """Resolve a (usually repository-relative) path such as a notebook's ``results_dir``.

    Args:
        path: absolute, or relative to the output root.
        root: the output root; default :func:`repo_root`.

    Returns:
        The absolute path.
    """
    p = Path(path)
    if p.is_absolute():
        return p
    return (Path(root) if root is not None else repo_root()).resolve() / p


def run_notebook_path(group: str, run: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Absolute path of the published, executed notebook ``book/runs/<group>/<run>.ipynb``."""
    _check_name("group", group)
    _check_name("run", run)
    return resolve(RUNS_DIR / group / f"{run}.ipynb", root)


def run_results_rel(group: str, run: str) -> Path:
    """Root-relative results directory ``book/results/<group>/<run>`` (what notebooks receive)."""
    _check_name("group", group)
    _check_name("run", run)
    return RESULTS_DIR / group / run


def run_results_dir(group: str, run: str, root: str | os.PathLike[str] | None = None) -> Path:
    """Absolute results directory ``book/results/<group>/<run>/`` of one run."""
    return resolve(run_results_rel(group, run), root)


def read_run_record(group: str, run: str,
                    root: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The run record (``run.json``) of a run, or None if it was never run (or the file is bad)."""
    path = run_results_dir(group, run, root) / RUN_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def write_run_record(group: str, run: str, record: dict[str, Any],
                     root: str | os.PathLike[str] | None = None) -> Path:
    """Write ``run.json`` atomically (write a temporary file, then rename over the old one)."""
    status = record.get("status")
    if status not in STATUSES:
        raise ValueError(f"record['status'] must be one of {STATUSES}, got {status!r}")
    directory = run_results_dir(group, run, root)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / RUN_RECORD
    tmp = directory / f".{RUN_RECORD}.tmp"
    tmp.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n",
                   encoding="utf-8")
    os.replace(tmp, path)
    return path


def is_ok(group: str, run: str, root: str | os.PathLike[str] | None = None) -> bool:
    """Whether the run's last completion succeeded and its notebook is published."""
    record = read_run_record(group, run, root)
    return (record is not None and record.get("status") == "ok"
            and run_notebook_path(group, run, root).is_file())


def load_run_metrics(group: str, run: str,
                     root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The ``metrics.json`` of a successful run.

    Raises:
        FileNotFoundError: the run has no successful record (never run, failed, or blocked), or
            it succeeded without writing ``metrics.json``. A failed run's partial files are never
            returned.
    """
    record = read_run_record(group, run, root)
    if record is None or record.get("status") != "ok":
        status = "never run" if record is None else record.get("status")
        raise FileNotFoundError(f"run {group}/{run} has no successful result ({status})")
    path = run_results_dir(group, run, root) / "metrics.json"
    return json.loads(path.read_text(encoding="utf-8"))


def load_per_length(group: str, run: str,
                    root: str | os.PathLike[str] | None = None) -> list[dict[str, str]]:
    """The rows of a successful run's ``per_length.csv`` as dicts of strings (no pandas needed)."""
    if not is_ok(group, run, root):
        raise FileNotFoundError(f"run {group}/{run} has no successful result")
    path = run_results_dir(group, run, root) / "per_length.csv"
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def iter_ok_runs(group: str, root: str | os.PathLike[str] | None = None) -> Iterator[str]:
    """Names of the runs of ``group`` whose last completion succeeded, sorted."""
    base = resolve(RESULTS_DIR / group, root)
    if not base.is_dir():
        return
    for entry in sorted(base.iterdir()):
        if entry.is_dir() and not entry.name.startswith(".") and is_ok(group, entry.name, root):
            yield entry.name


def read_index(root: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """The profile index the runner writes (``book/results/index.json``), or None.

    ``{"profile": name, "runs": {run: {"group", "notebook", "stage", "hash", "title"}}}`` for
    every run of the profile last passed to ``python -m dyckbook run``.
    """
    path = resolve(RESULTS_DIR / "index.json", root)
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return index if isinstance(index, dict) else None


def published_runs(group: str | None = None,
                   root: str | os.PathLike[str] | None = None) -> list[tuple[str, str]]:
    """``(group, run)`` of every current, successful run of the indexed profile, in manifest order.

    What a table of contents or the summary should show: runs of the last profile run whose
    record is ok and whose hash matches the index (results left over from another profile or
    older parameters are excluded).
    """
    index = read_index(root)
    if index is None:
        return []
    out = []
    for run, entry in index.get("runs", {}).items():
        g = entry.get("group")
        if group is not None and g != group:
            continue
        record = read_run_record(g, run, root)
        if (record is not None and record.get("status") == "ok"
                and record.get("hash") == entry.get("hash")
                and run_notebook_path(g, run, root).is_file()):
            out.append((g, run))
    return out


def collect_results(group: str,
                    root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """One record per successful run of a notebook, for the summary.

    Args:
        group: notebook stem, e.g. ``"01_dyck1"``.
        root: the output root; default :func:`repo_root`.

    Returns:
        A list (sorted by run name) of ``{"run": name, "params": the run's resolved papermill
        parameters, "metrics": metrics.json (or None if the run wrote none), "duration_s": ...}``.
        Failed, blocked and never-run runs are left out: the summary reads only results that were
        published. When the runner's index exists, only runs of the indexed profile with a
        matching hash count (see :func:`published_runs`); without it, every ok run of the group.
    """
    out: list[dict[str, Any]] = []
    if read_index(root) is not None:
        runs = sorted(run for _, run in published_runs(group, root))
    else:
        runs = list(iter_ok_runs(group, root))
    for run in runs:
        record = read_run_record(group, run, root) or {}
        metrics_path = run_results_dir(group, run, root) / "metrics.json"
        metrics = (json.loads(metrics_path.read_text(encoding="utf-8"))
                   if metrics_path.is_file() else None)
        out.append({"run": run, "params": record.get("params", {}), "metrics": metrics,
                    "duration_s": record.get("duration_s")})
    return out


def runs_with_metrics(group: str,
                      root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The :func:`collect_results` records of ``group`` that wrote a ``metrics.json``.

    [] when the group was not run in the indexed profile. (The ablation grid writes records and
    summaries instead; read it with :func:`dyckbook.grid.published_grid`.)
    """
    return [r for r in collect_results(group, root) if r["metrics"] is not None]


def write_json(path: str | os.PathLike[str], obj: Any, sort_keys: bool = True) -> Path:
    """Write JSON (indented, trailing newline; keys sorted unless told) atomically, e.g. metrics."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n", encoding="utf-8")
    os.replace(tmp, p)
    return p


def _check_name(what: str, name: str) -> None:
    # Names become path components: refuse anything that could escape the layout.
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith("."):
        raise ValueError(f"{what} must be a plain file name, got {name!r}")
