"""The papermill runner: a manifest's runs executed on any executor, published only when whole.

Publication is a transaction per run: a run that succeeds replaces its results folder and page
whole; a run that fails (or is blocked by an earlier stage's failure) leaves its last good
publication in place, byte for byte, and records the attempt beside it (``run.json``'s
``attempt``, ``failed.ipynb``, resume caches in ``.<run>.attempt/``). Each profile publishes
into its own tree (``book/results/<profile>``, ``book/runs/<profile>``).
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import fnmatch
import hashlib
import json
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from dyckbook.experiment import cache, recipe
from dyckbook.experiment import results as R
from dyckbook.pipeline import devices, executors, pages
from dyckbook.pipeline.executors import (
    TEMP_PREFIX,
    Progress,
    check_scheduler,
    cores,
    make_executor,
    remove_orphaned_folders,
    sigterm_interrupts,
)
from dyckbook.pipeline.layout import (
    PAGES_DIR,
    RESULTS_DIR,
    RUN_RECORD,
    gzip_folder,
    migrate_legacy_tree,
    profile_index,
    run_notebook_path,
    run_results_dir,
)
from dyckbook.pipeline.manifest import (
    CHAPTERS_GROUP,
    INJECTED,
    Manifest,
    Notebook,
    Run,
    load_manifest,
    resolve_profile,
    select_runs,
)
from dyckbook.version import RESULTS_VERSION, __version__

__all__ = ["INJECTED", "Manifest", "Notebook", "Run", "Task", "assemble_pages", "describe_error",
           "execute", "external_runs", "kernel_threads", "load_manifest", "longest_first",
           "published", "resolve_profile", "run", "run_hash", "run_inputs", "run_status",
           "select_runs", "stale_reasons", "statuses"]

log = logging.getLogger(__name__)

#: injected parameters a page does not list (they say where a run executed: run.json does)
PAGE_HIDDEN = frozenset({"num_threads", "device"})
RECORD = RUN_RECORD
FAILED_NOTEBOOK = "failed.ipynb"
ATTEMPT = "attempt"  # run.json key: the last attempt, when it failed after a good publication


def external_runs(manifest: Manifest, profile: str, root: Path) -> list[Run]:
    """Runs the profile excludes by name that another profile published (say, the full grid
    of profile ``grid``): the book lists them and later stages read them (the first profile of
    the manifest that published one wins)."""
    out = []
    for name, (key, _) in manifest.runs.items():
        if not any(fnmatch.fnmatchcase(name, p)
                   for p in manifest.profiles[profile].get("exclude") or []):
            continue
        for other in (p for p in manifest.profiles if p != profile):
            record = _record(run := Run(name, manifest.notebooks[key], {}, other), root)
            if record.get("status") == "ok" and _page(run, root).is_file():
                out.append(Run(name, run.notebook, record["params"], other))
                break
    return out


# ------------------------------------------------------------------------------ hashes, status
def notebook_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a notebook's cells as they compute: each cell's type and source, a code
    cell's references to the package reduced to the names of what they reach
    (:func:`_computing`: ``recipe``'s rule, where a module lives is wiring, not a number;
    outputs and metadata do not count). The names the package's imports bind are read from
    every cell: the kernel shares them."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    bound = _bound(cells)
    return _digest([(c["cell_type"], _computing(c, bound)) for c in cells])


@lru_cache(maxsize=1)
def _package_modules() -> frozenset[str]:
    """The short names of the package's modules and subpackages (``seq2seq``, ``experiment``)."""
    here = Path(__file__).resolve().parents[1]
    return frozenset(p.stem for p in here.rglob("*.py") if p.stem != "__init__") | frozenset(
        p.parent.name for p in here.rglob("__init__.py"))


class _PackageReferences(ast.NodeTransformer):
    """Drops the package's imports and reduces each reference through them to the name it
    reaches: ``seq2seq.score_items(...)`` and ``completion_scores.score_items(...)`` both read
    ``score_items(...)``, ``from dyckbook.x import f as g; g()`` reads ``f()``."""

    def __init__(self, bound: Mapping[str, str | None]) -> None:
        self.bound = bound  # local name -> the name it stands for (None: a module)

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        return None if all(a.name.split(".")[0] == "dyckbook" for a in node.names) else node

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        return None if (node.module or "").split(".")[0] == "dyckbook" else node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id in self.bound \
                and self.bound[node.value.id] is None:
            return ast.copy_location(ast.Name(node.attr, node.ctx), node)
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if self.bound.get(node.id):
            return ast.copy_location(ast.Name(self.bound[node.id], node.ctx), node)
        return node


def _tree(cell: Mapping[str, Any]) -> ast.Module | None:
    """A code cell's syntax tree (None: markdown, or IPython syntax such as magics)."""
    if cell["cell_type"] != "code":
        return None
    try:
        return ast.parse("".join(cell["source"]))
    except SyntaxError:
        return None


def _bound(cells: Sequence[Mapping[str, Any]]) -> dict[str, str | None]:
    """Every name the package's imports bind in any cell: local name -> the name it stands
    for (None: a module, whose attributes stand for themselves)."""
    modules, bound = _package_modules(), {}
    for tree in filter(None, map(_tree, cells)):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bound |= {a.asname or a.name.split(".")[0]: None for a in node.names
                          if a.name.split(".")[0] == "dyckbook"}
            elif isinstance(node, ast.ImportFrom) and \
                    (node.module or "").split(".")[0] == "dyckbook":
                bound |= {a.asname or a.name: None if a.name in modules else a.name
                          for a in node.names}
    return bound


def _computing(cell: Mapping[str, Any], bound: Mapping[str, str | None]) -> str:
    """A cell's source; a code cell's without the package's imports, each reference through
    the names they bind (``bound``) reduced to the name it reaches (a module's attribute to
    the attribute)."""
    tree = _tree(cell)
    if tree is None:
        return "".join(cell["source"])
    return ast.unparse(_PackageReferences(bound).visit(tree))


def file_hashes(folder: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of the published files of a results folder (not
    ``run.json`` nor a failed attempt's ``failed.ipynb``)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (RECORD, FAILED_NOTEBOOK)}


def run_hash(run: Run, inputs: Mapping[str, str]) -> str:
    """A run's key (``recipe.key``, kind ``run``): its recipe with what its named sets expand
    to (``recipe.expanded``: no execution setting), its notebook as it computes
    (:func:`notebook_hash`) and ``inputs`` (what it reads -> digest: see ``run_inputs``), under
    ``version.RESULTS_VERSION``."""
    return recipe.key("run", _content(run, inputs))


def _content(run: Run, inputs: Mapping[str, str]) -> dict[str, Any]:
    return {"params": recipe.expanded(run.params), "notebook": notebook_hash(run.notebook.path),
            "inputs": dict(inputs)}


def _params_hash(run: Run) -> str:
    return _digest(recipe.expanded(run.params))


def _reads(run: Run, every: Sequence[Run]) -> list[Run]:
    """The runs whose results ``run`` reads. ``reads: named`` (the default): those whose results
    folder one of its parameters names (a value, or an item of a comma list). ``reads: every``:
    every run of an earlier stage (a page that finds runs through the profile's index). Naming
    the folder of a run that does not run before it is a ValueError (a result not yet made)."""
    if run.notebook.reads == "every":
        return [r for r in every if r.notebook.stage < run.notebook.stage]
    named = _named(run)
    out = []
    for other in every:
        folder = _relative_folder(other)
        hits = [k for k, paths in named.items() if folder in paths]
        if not hits or other.name == run.name:
            continue
        if other.notebook.stage >= run.notebook.stage:
            raise ValueError(
                f"run {run.name!r}: parameter {hits[0]!r} names the results of run "
                f"{other.name!r} (stage {other.notebook.stage}), which does not run before it "
                f"(stage {run.notebook.stage}): give {run.notebook.key} a later stage")
        out.append(other)
    return out


def _named(run: Run) -> dict[str, set[str]]:
    """Parameter -> the paths its string value names (a comma list gives several)."""
    return {k: {part.strip().rstrip("/") for part in v.split(",")} - {""}
            for k, v in run.params.items() if isinstance(v, str) and k != "results_dir"}


def _relative_folder(run: Run) -> str:
    return (RESULTS_DIR / run.profile / run.notebook.group / run.name).as_posix()


def run_inputs(run: Run, every: Sequence[Run], root: Path) -> dict[str, str]:
    """What ``run`` reads, each with the digest of its contents: the runs of ``_reads`` (name ->
    digest of their published files) and the committed files its parameters name (``file:``
    path -> SHA-256; a path relative to the repository, like a benchmark's results; text of 256
    characters or more, a recipe, names none). A change makes the run stale; others never do."""
    out = {r.name: _digest(_record(r, root).get("files")) for r in _reads(run, every)}
    source = R.source_root()
    for paths in _named(run).values():
        for rel in paths:
            path = source / rel
            if (len(rel) < 256 and not Path(rel).is_absolute() and ".." not in Path(rel).parts
                    and not rel.startswith(RESULTS_DIR.as_posix()) and path.is_file()):
                out[f"file:{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return dict(sorted(out.items()))


def run_status(run: Run, inputs: Mapping[str, str], root: Path) -> str:
    """``ok``, ``stale`` (what it depends on changed: ``run_hash``), ``edited`` (a result file
    changed since it ran), ``missing``, ``failed`` or ``blocked`` (the last attempt; a last good
    publication, if any, is still in place: see ``published``)."""
    record = _record(run, root)
    if record.get("status", "missing") != "ok":
        return str(record.get("status", "missing"))
    if not _page(run, root).is_file():
        return "missing"
    if record.get(ATTEMPT):
        return str(record[ATTEMPT]["status"])
    if recipe.check(record.get("hash"), "run", _content(run, inputs)) \
            and not _unchanged_legacy(record, run, inputs):
        return "stale"
    return "ok" if file_hashes(_folder(run, root)) == record.get("files") else "edited"


def _unchanged_legacy(record: Mapping[str, Any], run: Run, inputs: Mapping[str, str]) -> bool:
    """A record from before runs declared what they read (no ``inputs``): its hash covered every
    earlier-stage run. A run that reads nothing is up to date if its parameters, notebook and
    results version are those it ran with (each recorded apart)."""
    return "inputs" not in record and not inputs and not _own_changes(run, record)


def statuses(profile: str, manifest: str | os.PathLike[str] | Manifest | None = None,
             out_root: str | os.PathLike[str] | None = None) -> list[tuple[Run, str, dict]]:
    """``(run, status, run.json)`` for every run of a profile (for ``dyckbook list``);
    ``manifest``: a path, or one already loaded."""
    runs, every, root = _profile_runs(profile, manifest, out_root)
    return [(r, run_status(r, run_inputs(r, every, root), root), _record(r, root))
            for r in runs]


def stale_reasons(profile: str, manifest: str | os.PathLike[str] | Manifest | None = None,
                  out_root: str | os.PathLike[str] | None = None) -> dict[str, list[str]]:
    """``{run: [why it is stale, ...]}`` for the stale runs of a profile: what changed since
    its publication (its parameters, notebook or results version; a run or committed file it
    reads republished or changed; what it reads)."""
    runs, every, root = _profile_runs(profile, manifest, out_root)
    out = {}
    for run in runs:
        inputs = run_inputs(run, every, root)
        if run_status(run, inputs, root) == "stale":
            out[run.name] = _why(run, inputs, _record(run, root))
    return out


def _profile_runs(profile: str, manifest: str | os.PathLike[str] | Manifest | None,
                  out_root: str | os.PathLike[str] | None) -> tuple[list[Run], list[Run], Path]:
    """The runs of a profile, those and the ones it takes from other profiles, and the root."""
    root = Path(out_root or R.repo_root()).resolve()
    man = manifest if isinstance(manifest, Manifest) else load_manifest(manifest)
    migrate_legacy_tree(root)
    runs = resolve_profile(man, profile)
    return runs, runs + external_runs(man, profile, root), root


def _own_changes(run: Run, record: Mapping[str, Any]) -> list[str]:
    """What changed of the run itself since ``record`` (each part recorded apart)."""
    out = _results_changes(record)
    if record.get("notebook_hash") != notebook_hash(run.notebook.path):
        out.append(f"its notebook changed ({run.notebook.path.name})")
    if record.get("params_hash") != _params_hash(run):
        out.append("its parameters changed")
    return out


def _results_changes(record: Mapping[str, Any]) -> list[str]:
    """Why a record's numbers may be stale although its recipe is not: another results
    version (a record from before results versions has none)."""
    if record.get("results_version") != RESULTS_VERSION:
        return [f"the results version changed ({record.get('results_version')} -> "
                f"{RESULTS_VERSION})"]
    return []


def _why(run: Run, inputs: Mapping[str, str], record: Mapping[str, Any]) -> list[str]:
    out = _own_changes(run, record)
    if "inputs" not in record:
        if inputs:
            out.append("it was published before runs recorded what they read")
        return out or ["what it depends on changed (its recorded hash differs)"]
    read = record["inputs"] or {}
    for name in sorted(set(inputs) | set(read)):
        shown = name.removeprefix("file:")
        if name not in read:
            out.append(f"it now reads {shown}")
        elif name not in inputs:
            out.append(f"it no longer reads {shown}")
        elif inputs[name] != read[name]:
            out.append(f"{shown} changed" if name.startswith("file:") else
                       f"{shown} republished")
    return out or ["what it depends on changed (its recorded hash differs)"]


def _record(run: Run, root: Path) -> dict[str, Any]:
    path = _folder(run, root) / RECORD
    try:
        return R.read_json(path) if path.is_file() else {}
    except ValueError:
        return {}  # unreadable: the run counts as missing and is redone


def published(run: Run, root: Path) -> bool:
    """Whether a run has a publication in place (its page and an ``ok`` record)."""
    return _record(run, root).get("status") == "ok" and _page(run, root).is_file()


def _folder(run: Run, root: Path) -> Path:
    return run_results_dir(run.profile, run.notebook.group, run.name, root)


def _attempt_folder(run: Run, root: Path) -> Path:
    """Where a failed attempt's resume caches wait for the next attempt (never published)."""
    return _folder(run, root).with_name(f".{run.name}.attempt")


def _page(run: Run, root: Path) -> Path:
    return run_notebook_path(run.profile, run.notebook.group, run.name, root)


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


# ------------------------------------------------------------------------------ the worker
@dataclass(frozen=True)
class Task:
    """Everything a worker needs to execute one run; nothing refers to the client's disk."""

    name: str  # the run
    source: str  # the notebook (JSON text)
    params: dict[str, Any]  # resolved parameters, num_threads included
    outputs: tuple[str, ...]  # files the run must write into results_dir
    files: dict[str, bytes]  # kept files of the run's results folder (relative to it)
    inputs: dict[str, bytes]  # files of the runs it reads, and the index (relative to the root)
    kernel: str = "python3"  # the kernel every notebook declares
    env: dict[str, str] = field(default_factory=dict)  # more of the kernel's environment


def execute(task: Task) -> dict[str, Any]:
    """Execute one run with papermill on whatever worker runs this, in a private temporary
    folder (the kernel's working directory and ``DYCKBOOK_ROOT``); the kernel talks to it over
    IPC sockets. Returns ``{"status", "error", "notebook": bytes | None, "files": {path in
    results_dir: bytes}, "started", "finished", "duration_s", "host", "machine"}``."""
    import nbformat  # deferred: start-up: nbformat + papermill (~0.95 s) off dyckbook list
    import papermill  # deferred: start-up: papermill (~0.95 s with nbformat) off dyckbook list
    from papermill.exceptions import PapermillExecutionError  # deferred: start-up: ~0.95 s

    started, t0 = _now(), time.perf_counter()
    # named after this process, so a later run removes it if this worker is killed
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        root, executed = Path(tmp) / "root", Path(tmp) / "executed.ipynb"
        out = root / task.params["results_dir"]
        for base, files in ((root, task.inputs), (out, task.files)):
            for rel, data in files.items():
                (base / rel).parent.mkdir(parents=True, exist_ok=True)
                (base / rel).write_bytes(data)
        out.mkdir(parents=True, exist_ok=True)
        threads = str(task.params["num_threads"])
        env = {**os.environ, **cache_folders(), **task.env, R.ROOT_ENV: str(root),
               "MPLBACKEND": "Agg",
               "DYCKBOOK_QUIET": "1", "PYTHONPATH": executors.package_path(),
               "PYDEVD_DISABLE_FILE_VALIDATION": "1", "OMP_NUM_THREADS": threads,
               "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads}
        error = None
        try:
            papermill.execute_notebook(
                nbformat.reads(task.source, as_version=4), str(executed), parameters=task.params,
                kernel_name=task.kernel, progress_bar=False, shutdown_kernel="immediate",
                kernel_manager_class=_kernel_manager(env, root, Path(tmp) / "kernel"))
        except PapermillExecutionError as exc:
            # papermill counts its injected-parameters cell; the reader opens the source
            line = next((s.strip()[:80] for s in exc.source.splitlines() if s.strip()), "")
            error = {"cell": f"cell {exc.cell_index - 1} [{line}]", "ename": exc.ename,
                     "evalue": exc.evalue}
        except Exception as exc:  # noqa: BLE001 - a kernel that will not start fails this run only
            error = {"ename": type(exc).__name__, "evalue": str(exc)}
        missing = [o for o in task.outputs if not (out / o).is_file()]
        if error is None and missing:
            error = {"ename": "MissingOutputs", "evalue": f"no {missing} in results_dir"}
        return {"status": "failed" if error else "ok", "error": error,
                "notebook": executed.read_bytes() if executed.is_file() else None,
                "files": {p.relative_to(out).as_posix(): p.read_bytes()
                          for p in sorted(out.rglob("*")) if p.is_file()},
                "started": started, "finished": _now(),
                "duration_s": round(time.perf_counter() - t0, 3), "host": socket.gethostname(),
                "machine": pages.machine()}


def cache_folders() -> dict[str, str]:
    """The cache variables set here (``cache.DATA_ENV``, ``cache.RUN_ENV``), each made absolute:
    the kernel works in a temporary folder, where a relative path would vanish with it."""
    return {name: str(Path(os.environ[name].strip()).resolve())
            for name in (cache.DATA_ENV, cache.RUN_ENV) if os.environ.get(name, "").strip()}


KERNEL_LOG_LEVEL = "--IPKernelApp.log_level=ERROR"  # what each kernel is started with
MAX_SOCKET_PATH = 100  # bytes of a Unix socket path the kernel's IPC transport may use


def _kernel_manager(env: dict[str, str], cwd: Path, sockets: Path) -> type:
    from jupyter_client.manager import AsyncKernelManager  # deferred: start-up: ~0.1 s

    sockets.mkdir()
    # IPC sockets in the run's folder; a socket path is limited to ~107 bytes, so under a long
    # $TMPDIR the kernel talks over loopback TCP instead
    ipc = len(str(sockets / "ipc-99")) <= MAX_SOCKET_PATH
    where = {"transport": "ipc", "ip": str(sockets / "ipc")} if ipc else {
        "transport": "tcp", "ip": "127.0.0.1"}

    class _Manager(AsyncKernelManager):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw, **where)

        async def start_kernel(self, **kw: Any) -> None:
            # per-run environment and folder without touching this (maybe threaded) process's
            kw.update(env=env, cwd=str(cwd))
            await super().start_kernel(**kw)

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            # the kernel's own log only from errors up: an interrupted `dyckbook run` printed
            # "[IPKernelApp] WARNING | Parent appears to have exited" once per kernel
            return [*super().format_kernel_cmd(extra_arguments), KERNEL_LOG_LEVEL]

    return _Manager


# ------------------------------------------------------------------------------ the client
def run(profile: str = "cpu", only: Sequence[str] | None = None, *, force: bool = False,
        jobs: int = 1, scheduler: str | None = None, executor: cf.Executor | None = None,
        manifest: str | os.PathLike[str] | None = None,
        out_root: str | os.PathLike[str] | None = None, device: str | None = None) -> int:
    """Execute the runs of a profile (or those ``only`` names) that are not up to date, stage
    by stage, on ``executor`` or one made by ``make_executor(scheduler, jobs)``; publish each.

    Each kernel gets ``kernel_threads``: the cores shared by the runs of its stage that run at
    once (1 on an existing cluster), so a run alone in its stage gets every core. A run that
    fails keeps its last good publication; a later-stage run that reads it (``run_inputs``) and
    is not up to date is then blocked (not run, its publication kept), and so on down the
    stages; one that is up to date, or reads none of them, is left alone. Returns 0 if
    every selected run is up to date or succeeded, 1 if one failed or was blocked (logged at
    ERROR level). Bad arguments are ValueErrors; Ctrl-C (or SIGTERM) cancels the outstanding
    runs (none is published), stops the workers and raises KeyboardInterrupt.

    ``device`` (``devices.DEVICES``; None: each notebook's default, the CPU) is handed to every
    notebook that declares a ``device`` parameter and recorded in its ``run.json``, never hashed;
    on a card of this machine no more kernels run at once than fit in its memory
    (``devices.kernels``).
    """
    if type(jobs) is not int or jobs < 0:
        raise ValueError(f"jobs must be an int >= 0, got {jobs!r}")
    root, man = Path(out_root or R.repo_root()).resolve(), load_manifest(manifest)
    runs = resolve_profile(man, profile)
    chosen = select_runs(runs, only, profile)
    remote = check_scheduler(scheduler) == "remote"
    on = device and devices.resolve(device, not remote)  # None: each notebook's default
    slots, env = devices.kernels(on, remote, jobs, [r.params for r in chosen])
    migrate_legacy_tree(root)
    remove_orphaned_folders()
    every, commit = runs + external_runs(man, profile, root), pages.source_commit(root)
    several = {key for key in man.notebooks if sum(k == key for k, _ in man.runs.values()) > 1}
    log.debug("output root %s, %d of %d runs of profile %s selected", root, len(chosen),
              len(runs), profile)
    pool, futures, done, failures = executor, {}, {"ok": 0, "skipped": 0, "blocked": 0}, []
    unrunnable: set[str] = set()  # runs that failed or were blocked: a run reading one is blocked
    t0, interrupted = time.perf_counter(), False
    try:
        with sigterm_interrupts(), Progress(len(chosen), f"profile {profile}", "run") as bar:
            for stage in sorted({r.notebook.stage for r in chosen}):
                batch = [r for r in chosen if r.notebook.stage == stage]
                # what each reads (earlier stages' results and committed files), as they are
                inputs = {r.name: run_inputs(r, every, root) for r in batch}
                status = {r.name: run_status(r, inputs[r.name], root) for r in batch}
                todo = [r for r in batch if force or status[r.name] != "ok"]
                for r in batch:
                    failed_inputs = sorted(unrunnable & set(inputs[r.name]))
                    if r not in todo:
                        log.info("[skip] %s (up to date)", r.name)
                    elif failed_inputs:
                        unrunnable.add(r.name)
                        why = f"it reads {', '.join(failed_inputs)}, which did not run"
                        _publish(r, None, {"status": "blocked", "error": {
                            "ename": "Blocked", "evalue": why}}, root, man, every)
                        log.error("[block] %s (%s): not run, %s%s", r.name, status[r.name], why,
                                  ", its last good results stay published" * published(r, root))
                    else:
                        log.debug("[todo] %s: %s", r.name, "forced" if force and
                                  status[r.name] == "ok" else status[r.name])
                done["skipped"] += len(batch) - len(todo)
                bar.skip(len(batch) - len(todo))
                blocked = [r for r in todo if r.name in unrunnable]
                done["blocked"] += len(blocked)
                bar.skip(len(blocked))
                todo = [r for r in todo if r.name not in unrunnable]
                if todo:
                    pool = pool or make_executor(scheduler, slots, gpu=bool(on) and on != "cpu")
                todo = longest_first(todo, root, profile)
                threads = kernel_threads(scheduler, slots, len(todo))
                for r in todo:
                    log.info("[queued] %s (%s)", r.name, r.notebook.key)
                    files = _input_files(root, profile, man, every, r)
                    futures[pool.submit(execute, _task(r, threads, root, files, on, env))] = r
                for future in _as_completed(futures, root):
                    r = futures.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # noqa: BLE001 - a lost worker fails its run only
                        result = {"status": "failed",
                                  "error": {"ename": type(exc).__name__, "evalue": str(exc)}}
                    _publish(r, result, {**result, "inputs": inputs[r.name], "hash": run_hash(
                        r, inputs[r.name]), "device": _device(r, on), "commit": commit}, root,
                        man, every, r.notebook.key in several)
                    if result["status"] == "ok":
                        done["ok"] += 1
                        log.info("[ok] %s %.1f s on %s", r.name, result["duration_s"],
                                 result["host"])
                    else:
                        failures.append(f"FAILED {r.name}: {describe_error(result['error'])}"
                                        + " (its last good results stay published)"
                                        * published(r, root))
                        log.error("[FAIL] %s", failures[-1].removeprefix("FAILED "))
                        unrunnable.add(r.name)
                    bar.update()
    except KeyboardInterrupt:
        interrupted = True
        log.error("interrupted: %d outstanding run(s) cancelled, none published", len(futures))
        raise
    finally:
        for future in futures:
            future.cancel()
        if pool is not None and executor is None:
            pool.shutdown(wait=not interrupted, cancel_futures=interrupted)
        remove_orphaned_folders()
    log.info("done in %.1f s: %d ok, %d skipped, %d failed, %d blocked",
             time.perf_counter() - t0, done["ok"], done["skipped"], len(failures), done["blocked"])
    for line in failures:
        log.error("%s", line)
    return 1 if failures or done["blocked"] else 0


REPORT_EVERY_S = 300.0  # how often a line names the runs still going


def _as_completed(futures: Mapping[cf.Future, Run], root: Path,
                  every: float = REPORT_EVERY_S) -> Iterator[cf.Future]:
    """``futures`` as they finish; while none does, a line every ``every`` seconds names the
    runs still going and what each took last time (a long run is not a frozen bar)."""
    pending, start = set(futures), time.monotonic()
    while pending:
        done, pending = cf.wait(pending, timeout=every, return_when=cf.FIRST_COMPLETED)
        if not done:
            last = {f: _record(futures[f], root).get("longest_s") for f in pending}
            log.info("[running] %d run(s) after %.0f min: %s", len(pending),
                     (time.monotonic() - start) / 60, ", ".join(
                         futures[f].name + (f" (took {last[f] / 60:.0f} min last time)"
                                            if isinstance(last[f], (int, float)) else "")
                         for f in sorted(pending, key=lambda f: futures[f].name)))
        yield from done


def longest_first(runs: Sequence[Run], root: Path, profile: str) -> list[Run]:
    """The order to start a stage's runs in: those never run under ``profile`` first, in
    manifest order (the manifest lists the long runs first), then the others by the longest
    they took under it (a resumed run's last duration is not its cost), longest first, so the
    last run to finish is a short one and no core idles."""
    def key(run: Run) -> tuple[int, float]:
        record = _record(run, root)
        seconds = record.get("longest_s", record.get("duration_s")) \
            if record.get("profile") == profile else None
        return (1, -float(seconds)) if isinstance(seconds, (int, float)) else (0, 0.0)

    return sorted(runs, key=key)


def kernel_threads(scheduler: str | None, jobs: int, n_runs: int) -> int:
    """Torch threads of each of ``n_runs`` runs executed ``jobs`` at a time (0: one per core):
    the machine's cores split among the runs that run at once; 1 on an existing cluster."""
    if check_scheduler(scheduler) == "remote":
        return 1
    return max(1, cores() // max(1, min(jobs or cores(), n_runs)))


def _device(run: Run, device: str | None) -> str | None:
    """The device a run's notebook trains on: ``device`` (None: its default), None if it
    declares none (it trains nothing)."""
    return (device or run.params["device"]) if "device" in run.notebook.defaults else None


def _task(run: Run, threads: int, root: Path, inputs: dict[str, bytes], device: str | None = None,
          env: dict[str, str] | None = None) -> Task:
    # resume caches: a failed attempt's, if one waits, else the published run's
    rdir = next((d for d in (_attempt_folder(run, root), _folder(run, root))
                 if any(R.stored(d / k) for k in run.notebook.keep)), _folder(run, root))
    kept = {k: R.read_stored(rdir / k) for k in run.notebook.keep if R.stored(rdir / k)}
    log.debug("task %s: %d kept file(s) from %s, %d input file(s)", run.name, len(kept), rdir,
              len(inputs))
    params = {**run.params, "num_threads": threads}
    if device and _device(run, device):
        params["device"] = device
    return Task(run.name, run.notebook.path.read_text(encoding="utf-8"), params,
                run.notebook.outputs, kept, inputs, env=env or {})


def _input_files(root: Path, profile: str, man: Manifest,
                 every: Sequence[Run], run: Run) -> dict[str, bytes]:
    """What ``run`` reads, keyed relative to root: the profile's index as it stands now, and
    the published files of the runs it reads (``_reads``)."""
    paths = []
    for r in _reads(run, every):
        if _record(r, root).get("status") == "ok":
            paths += [p for p in _folder(r, root).rglob("*")
                      if p.is_file() and p.name != FAILED_NOTEBOOK]
    index = profile_index(profile, root).relative_to(root).as_posix()
    return {index: json.dumps(_index(profile, man, every), indent=1, sort_keys=True).encode(),
            **{p.relative_to(root).as_posix(): p.read_bytes() for p in paths}}


def _publish(run: Run, result: Mapping[str, Any] | None, record: Mapping[str, Any], root: Path,
             man: Manifest, every: Sequence[Run], several: bool = False) -> None:
    """A successful run: swap in its results folder whole, then its page, then the profile's
    index. A failed or blocked one: its last good publication (if any) stays byte for byte;
    ``run.json`` records the attempt, ``failed.ipynb`` holds the failed notebook and the
    attempt's resume caches wait in ``.<run>.attempt/``. With no publication to keep, the
    folder holds just those."""
    rdir, page, ok = _folder(run, root), _page(run, root), record["status"] == "ok"
    result = result or {}
    before = _record(run, root)
    attempt = {k: record.get(k) for k in (
        "status", "error", "started", "finished", "duration_s", "host", "machine")}
    if not ok and "files" in result:  # an attempt that ran: its caches replace the last's
        kept = {k: v for k, v in result["files"].items() if k in run.notebook.keep}
        shutil.rmtree(_attempt_folder(run, root), ignore_errors=True)
        for rel, data in kept.items():
            R.write_bytes(_attempt_folder(run, root) / rel, data)
    if not ok:
        if published(run, root):
            if result.get("notebook"):
                R.write_bytes(rdir / FAILED_NOTEBOOK, result["notebook"])
            R.write_json(rdir / RECORD, {**before, ATTEMPT: attempt})
            log.debug("kept the publication of %s; recorded its %s attempt", run.name,
                      record["status"])
            return
    # the longest a run of this profile took: a run that resumed from kept files (the grid's
    # records) finishes in seconds, which is not what it costs from a fresh clone
    earlier = (before.get("longest_s"), before.get("duration_s")) \
        if before.get("profile") == run.profile else ()
    seconds = [s for s in (record.get("duration_s"), *earlier) if isinstance(s, (int, float))]
    files = dict(result.get("files", {})) if ok else {}
    if not ok and result.get("notebook"):
        files[FAILED_NOTEBOOK] = result["notebook"]
    new, old = rdir.with_name(f".{run.name}.new"), rdir.with_name(f".{run.name}.old")
    for folder in (new, old):
        shutil.rmtree(folder, ignore_errors=True)
    for rel, data in files.items():
        R.write_bytes(new / rel, data)
    gzip_folder(new)  # large records committed compressed
    R.write_json(new / RECORD, {
        "run": run.name, "notebook": run.notebook.key, "profile": run.profile,
        "params": run.params, "dyckbook": __version__, "results_version": RESULTS_VERSION,
        "hash": record.get("hash") if ok else None,
        "inputs": record.get("inputs") if ok else None, "params_hash": _params_hash(run),
        "device": record.get("device"), "commit": record.get("commit"),
        "notebook_hash": notebook_hash(run.notebook.path),
        "files": file_hashes(new), **attempt, "longest_s": max(seconds) if seconds else None})
    page.unlink(missing_ok=True)  # first: an interruption from here on leaves no page at all
    if rdir.exists():
        os.replace(rdir, old)
    os.replace(new, rdir)
    shutil.rmtree(old, ignore_errors=True)
    if ok:
        shutil.rmtree(_attempt_folder(run, root), ignore_errors=True)
        R.write_bytes(page, pages.prepare_for_book(
            result["notebook"], name=run.name, source="/".join(run.notebook.path.parts[-2:]),
            params=run.params, profile=run.profile, chapter=run.notebook.group == CHAPTERS_GROUP,
            several=several, hidden=PAGE_HIDDEN))
        # the index the landing page names: rewritten only when a run of the profile publishes
        R.write_json(profile_index(run.profile, root), _index(run.profile, man, every))
        log.debug("published %s: %d file(s) in %s, page %s", run.name, len(files), rdir, page)


def describe_error(error: Mapping[str, Any]) -> str:
    """One line: the failing cell (index and first line), if any, and the exception."""
    exc = " ".join(f"{error['ename']}: {error['evalue']}".split())
    return f"{error['cell']} raised {exc}" if "cell" in error else exc


def assemble_pages(profile: str, manifest: str | os.PathLike[str] | None = None,
                   out_root: str | os.PathLike[str] | None = None) -> dict[str, str]:
    """Fill ``book/pages/`` with the pages of ``profile`` and of the runs it takes from other
    profiles, each marked with its state (``dyckbook.pages``), plus its ``index.json``; returns
    ``{run: state}``. The stored pages are read, never changed."""
    root, man = Path(out_root or R.repo_root()).resolve(), load_manifest(manifest)
    listed = statuses(profile, man, root)
    listed += [(r, "ok", _record(r, root)) for r in external_runs(man, profile, root)]
    why = stale_reasons(profile, man, root) if any(s == "stale" for _, s, _ in listed) else {}
    dest, states = root / PAGES_DIR, {}
    shutil.rmtree(dest, ignore_errors=True)
    for run, status, record in listed:
        page = _page(run, root)
        has_page = page.is_file() and record.get("status") == "ok"
        error = (record.get(ATTEMPT) or record).get("error")
        warning = pages.banner(name=run.name, made_by=run.profile, status=status, record=record,
                               profile=profile, has_page=has_page,
                               error=describe_error(error) if error else "",
                               changed=why.get(run.name, ()))
        target = dest / run.notebook.group / f"{run.name}.ipynb"
        stored = page.read_bytes() if has_page else None
        if warning is None and stored is not None and b"{glue:table}" not in stored:
            R.write_bytes(target, stored)  # byte for byte
        else:
            R.write_text(target, pages.marked_page(
                None if stored is None else stored.decode("utf-8"), run.notebook.title, warning,
                run.notebook.path.read_bytes() if stored is None else None))
        states[run.name] = status if has_page else f"not published ({status})"
        log.debug("page %s: %s", run.name, states[run.name])
    index = profile_index(profile, root)
    built = R.read_json(index) if index.is_file() else {"profile": profile, "runs": {}}
    said = {r.name: pages.provenance(rec, _folder(r, root)) for r, _, rec in listed}
    R.write_json(dest / "index.json", {**built, "description": _description(man, profile),
                                       "states": states, "provenance": said})
    return states


def _description(man: Manifest, profile: str) -> str:
    return " ".join(str(man.profiles[profile].get("description", "")).split())


def _index(profile: str, man: Manifest, every: Sequence[Run]) -> dict[str, Any]:
    """A profile's ``index.json``: the profile, and each run with the profile that made it
    (runs of another profile that this one excludes are listed once published)."""
    return {"profile": profile, "description": _description(man, profile),
            "runs": {r.name: {"group": nb.group, "notebook": nb.key, "stage": nb.stage,
                              "title": nb.title, "profile": r.profile}
                     for r in every for nb in [r.notebook]}}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
