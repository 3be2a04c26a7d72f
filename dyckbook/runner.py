"""The papermill runner: a manifest's runs executed on any executor, published only when whole."""

from __future__ import annotations

import ast
import concurrent.futures as cf
import fnmatch
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from dyckbook.version import __version__
from dyckbook import results as R
from dyckbook.executors import Progress, check_scheduler, cores, make_executor

__all__ = ["INJECTED", "Manifest", "Notebook", "Run", "Task", "describe_error", "execute",
           "kernel_threads", "load_manifest", "longest_first", "prepare_for_book",
           "resolve_profile", "run", "run_hash", "run_status", "select_runs", "statuses"]

log = logging.getLogger(__name__)

INJECTED = ("run_name", "results_dir", "num_threads")  # set by the runner, declared by notebooks
UNHASHED = frozenset({"num_threads"})  # injected values that cannot change results
CHAPTERS_GROUP = "chapters"
RECORD = "run.json"
FAILED_NOTEBOOK = "failed.ipynb"
INDEX = R.RESULTS_DIR / "index.json"
MANIFEST_VERSION = 2
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SCALARS = (str, int, float, bool, type(None))


# ------------------------------------------------------------------------------ manifest
@dataclass(frozen=True)
class Notebook:
    """A notebook (or chapter) of the manifest, and what its ``parameters`` cell declares."""

    key: str  # manifest key: a notebook stem or a chapter name
    path: Path  # absolute path of the source notebook
    title: str  # title in listings
    group: str  # book/runs/<group>/: the key, or "chapters" for chapters
    stage: int  # every run of a stage finishes before the next stage starts
    outputs: tuple[str, ...]  # files a successful run must have written into results_dir
    keep: tuple[str, ...]  # files of results_dir that survive a rerun (resume caches)
    defaults: dict[str, Any]  # declared parameter -> default (a literal of the parameters cell)


@dataclass(frozen=True)
class Run:
    """One run of a profile with its resolved parameters."""

    name: str  # page and folder name, unique in the manifest
    notebook: Notebook
    params: dict[str, Any]  # every declared parameter, run_name and results_dir included


@dataclass(frozen=True)
class Manifest:
    """A loaded, validated manifest (``notebooks/experiments.yml``, version 2)."""

    notebooks: dict[str, Notebook]
    runs: dict[str, tuple[str, dict[str, Any]]]  # run -> (notebook key, its params)
    profiles: dict[str, dict[str, Any]]  # profile -> its validated entry


def load_manifest(path: str | os.PathLike[str] | None = None) -> Manifest:
    """Load a manifest (default ``notebooks/experiments.yml``) and check it against the
    notebooks' parameters cells (an override of a parameter no notebook declares is an error).
    A missing file is a FileNotFoundError, anything else a ValueError naming file and entry."""
    mpath = Path(path) if path is not None else R.source_root() / "notebooks" / "experiments.yml"
    if not mpath.is_file():
        raise FileNotFoundError(f"manifest not found: {mpath}" + " (a folder)" * mpath.is_dir())
    try:
        raw = yaml.safe_load(mpath.read_bytes().decode("utf-8"))
        return _parse(raw, mpath.resolve())
    except UnicodeDecodeError as error:
        raise ValueError(f"{mpath} is not UTF-8 text (byte {error.object[error.start]:#x} at "
                         f"offset {error.start})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{mpath} is not valid YAML: {' '.join(str(error).split())}") from None
    except ValueError as error:
        raise ValueError(f"{mpath}: {error}") from None


def _parse(raw: Any, mpath: Path) -> Manifest:
    raw = _entry(raw, "the manifest", {"version", "chapters", "notebooks", "runs", "profiles"})
    if raw.get("version") != MANIFEST_VERSION:
        raise ValueError(f"version must be {MANIFEST_VERSION}, got {raw.get('version')!r}")
    notebooks: dict[str, Notebook] = {}
    runs: dict[str, tuple[str, dict[str, Any]]] = {}
    for section, chapter in (("chapters", True), ("notebooks", False)):
        for key, entry in _entry(raw.get(section), section).items():
            where = f"{section}.{key}"
            entry = _entry(entry, where, {"path", "title", "stage", "outputs", "keep"}, {"path"})
            if not isinstance(key, str) or not _NAME.fullmatch(key) or key in notebooks:
                raise ValueError(f"{where}: keys must be unique plain names, got {key!r}")
            stage = entry.get("stage", 0 if chapter else 1)
            if type(stage) is not int or stage < 0:
                raise ValueError(f"{where}.stage must be an int >= 0, got {stage!r}")
            path = (mpath.parent / str(entry["path"])).resolve()
            notebooks[key] = Notebook(
                key, path, str(entry.get("title", key)), CHAPTERS_GROUP if chapter else key, stage,
                *(_names(entry.get(f, []), f"{where}.{f}") for f in ("outputs", "keep")),
                _declared(path, where))
            if chapter:
                runs[key] = (key, {})  # a chapter is one run named after it
    for name, entry in _entry(raw.get("runs"), "runs").items():
        where = f"runs.{name}"
        entry = _entry(entry, where, {"notebook", "params"}, {"notebook"})
        if not isinstance(name, str) or not _NAME.fullmatch(name) or name in runs:
            raise ValueError(f"{where}: run names must be unique plain names (chapters are runs "
                             f"too), got {name!r}")
        if entry["notebook"] not in notebooks:
            raise ValueError(f"{where}.notebook must name a notebook of the manifest, "
                             f"got {entry['notebook']!r}")
        nb = notebooks[entry["notebook"]]
        runs[name] = (nb.key, _params(entry.get("params"), f"{where}.params", [nb]))
    profiles = _entry(raw.get("profiles"), "profiles")
    if not profiles:
        raise ValueError("profiles: the manifest defines none")
    used = [notebooks[key] for key in {key for key, _ in runs.values()}]
    for pname, prof in profiles.items():
        where = f"profiles.{pname}"
        prof = profiles[pname] = _entry(prof, where, {"description", "params", "notebooks", "runs",
                                                      "include", "exclude"})
        _params(prof.get("params"), f"{where}.params", used, any_of=True)
        for field, known in (("notebooks", notebooks), ("runs", runs)):
            for key, over in _entry(prof.get(field), f"{where}.{field}").items():
                if key not in known:
                    raise ValueError(f"{where}.{field}: unknown {field[:-1]} {key!r}")
                nb = notebooks[key if field == "notebooks" else runs[key][0]]
                _params(over, f"{where}.{field}.{key}", [nb])
        for field in ("include", "exclude"):
            for pattern in _names(prof.get(field, []), f"{where}.{field}", "patterns"):
                if not fnmatch.filter(runs, pattern):
                    raise ValueError(f"{where}.{field}: {pattern!r} matches no run")
    return Manifest(notebooks, runs, profiles)


def _declared(path: Path, where: str) -> dict[str, Any]:
    """The defaults of a notebook's parameters cell (papermill's inspection)."""
    import papermill

    if not path.is_file():
        raise FileNotFoundError(f"{where}.path: no notebook {path}")
    try:
        found = papermill.inspect_notebook(str(path))
    except (OSError, ValueError) as error:
        raise ValueError(f"{where}: cannot read {path}: {error}") from None
    missing = [name for name in INJECTED if name not in found]
    if missing:
        raise ValueError(f"{where}: the parameters cell of {path} must declare {missing} (as "
                         "`name: type = literal`; papermill cannot read `X | None` annotations)")
    defaults = {}
    for name, info in found.items():
        try:
            defaults[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            raise ValueError(f"{where}: {path} sets {name} = {info['default']}, which is not a "
                             "literal") from None
    return defaults


def _entry(value: Any, where: str, allowed: Iterable[str] | None = None,
           required: Iterable[str] = ()) -> dict[str, Any]:
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")  # noqa: TRY004
    unknown = sorted(map(str, set(value) - set(allowed))) if allowed is not None else []
    missing = [key for key in required if key not in value]
    if unknown or missing:
        raise ValueError(f"{where}: " + (f"unknown keys {unknown}" if unknown else
                                         f"missing {missing}"))
    return value


def _names(value: Any, where: str, kind: str = "paths") -> tuple[str, ...]:
    """A list of relative paths without ``..`` ("paths"), or of glob patterns ("patterns")."""
    ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value)
    if not ok or (kind == "paths" and not all(_NAME.fullmatch(part) for v in value
                                              for part in v.split("/"))):
        raise ValueError(f"{where} must be a list of {kind} (relative, no '..'), got {value!r}")
    return tuple(value)


def _params(value: Any, where: str, notebooks: Sequence[Notebook],
            any_of: bool = False) -> dict[str, Any]:
    """Overrides checked against the notebooks they reach: declared, not injected, flat scalars
    (``any_of``: a profile-wide value; one notebook declaring it is enough)."""
    params = _entry(value, where)
    for name, v in params.items():
        if name in INJECTED:
            raise ValueError(f"{where}: {name!r} is injected by the runner, never set here")
        if not any(name in nb.defaults for nb in notebooks):
            raise ValueError(f"{where}: {name!r} is not a parameter of "
                             f"{'any notebook' if any_of else notebooks[0].key} (papermill reads "
                             "lines `name: type = value  # note`)")
        if type(v) not in _SCALARS:
            raise ValueError(f"{where}.{name} must be a flat scalar, got {type(v).__name__}")
    return params


def resolve_profile(manifest: Manifest, profile: str) -> list[Run]:
    """The runs of a profile, in manifest order (a ValueError if there is no such profile).

    Later wins: notebook defaults, run params, profile params (to every notebook declaring the
    name), profile ``notebooks.<key>``, profile ``runs.<run>``, then ``run_name`` and
    ``results_dir`` (``num_threads`` is set at execution).
    """
    if profile not in manifest.profiles:
        raise ValueError(f"profile must be one of {sorted(manifest.profiles)}, got {profile!r}")
    prof, out = manifest.profiles[profile], []
    for name, (key, params) in manifest.runs.items():
        nb = manifest.notebooks[key]
        include, exclude = prof.get("include"), prof.get("exclude") or []
        if ((include is None or any(fnmatch.fnmatchcase(name, p) for p in include))
                and not any(fnmatch.fnmatchcase(name, p) for p in exclude)):
            resolved = {**nb.defaults, **params, **{k: v for k, v in (
                prof.get("params") or {}).items() if k in nb.defaults}}
            resolved.update((prof.get("notebooks") or {}).get(key) or {})
            resolved.update((prof.get("runs") or {}).get(name) or {})
            resolved.update(run_name=name, results_dir=(R.RESULTS_DIR / nb.group / name).as_posix())
            out.append(Run(name, nb, resolved))
    return out


def select_runs(runs: Sequence[Run], only: Iterable[str] | None, profile: str) -> list[Run]:
    """The runs matching ``only`` (run names, notebook keys or glob patterns; None: all); a
    pattern that matches no run of the profile is a ValueError."""
    chosen: set[str] = set()
    for pattern in only or ["*"]:
        hits = {r.name for r in runs if fnmatch.fnmatchcase(r.name, pattern)
                or fnmatch.fnmatchcase(r.notebook.key, pattern)}
        if not hits:
            raise ValueError(f"--only {pattern!r} matches no run of profile {profile!r} "
                             f"(see: dyckbook list --profile {profile})")
        chosen |= hits
    return [r for r in runs if r.name in chosen]


def external_runs(manifest: Manifest, profile: str, root: Path) -> list[Run]:
    """Runs the profile excludes by name that another profile published (say, the full grid):
    the book lists them and later stages read them."""
    out = []
    for name, (key, _) in manifest.runs.items():
        record = _record(run := Run(name, manifest.notebooks[key], {}), root)
        if (any(fnmatch.fnmatchcase(name, p) for p in manifest.profiles[profile].get("exclude")
                or []) and record.get("status") == "ok" and _page(run, root).is_file()):
            out.append(Run(name, run.notebook, record["params"]))
    return out


# ------------------------------------------------------------------------------ hashes, status
def notebook_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a notebook's cell types and sources (outputs and metadata do not count)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return _digest([(c["cell_type"], "".join(c["source"])) for c in cells])


def file_hashes(folder: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every file of a results folder but ``run.json``."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != RECORD}


def run_hash(run: Run, inputs: Mapping[str, str]) -> str:
    """What a run's results depend on: parameters (not ``num_threads``), notebook source,
    package version, and ``inputs`` (earlier-stage run -> digest of its result files)."""
    return _digest({"params": {k: v for k, v in run.params.items() if k not in UNHASHED},
                    "notebook": notebook_hash(run.notebook.path), "dyckbook": __version__,
                    "inputs": dict(inputs)})


def _inputs(runs: Iterable[Run], stage: int, root: Path) -> dict[str, str]:
    return {r.name: _digest(_record(r, root).get("files"))
            for r in runs if r.notebook.stage < stage}


def run_status(run: Run, hash_: str, root: Path) -> str:
    """``ok``, ``stale`` (its hash changed), ``edited`` (a result file changed since it ran),
    ``missing``, ``failed`` or ``blocked``."""
    record = _record(run, root)
    if record.get("status", "missing") != "ok":
        return str(record.get("status", "missing"))
    if not _page(run, root).is_file():
        return "missing"
    if record.get("hash") != hash_:
        return "stale"
    return "ok" if file_hashes(_folder(run, root)) == record.get("files") else "edited"


def statuses(profile: str, manifest: str | os.PathLike[str] | None = None,
             out_root: str | os.PathLike[str] | None = None) -> list[tuple[Run, str, dict]]:
    """``(run, status, run.json)`` for every run of a profile (for ``dyckbook list``)."""
    root, man = Path(out_root or R.repo_root()).resolve(), load_manifest(manifest)
    every = (runs := resolve_profile(man, profile)) + external_runs(man, profile, root)
    return [(r, run_status(r, run_hash(r, _inputs(every, r.notebook.stage, root)), root),
             _record(r, root)) for r in runs]


def _record(run: Run, root: Path) -> dict[str, Any]:
    path = _folder(run, root) / RECORD
    try:
        return R.read_json(path) if path.is_file() else {}
    except ValueError:
        return {}  # unreadable: the run counts as missing and is redone


def _folder(run: Run, root: Path) -> Path:
    return R.run_results_dir(run.notebook.group, run.name, root)


def _page(run: Run, root: Path) -> Path:
    return R.run_notebook_path(run.notebook.group, run.name, root)


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
    inputs: dict[str, bytes]  # earlier stages' result files and the index (relative to the root)
    kernel: str = "python3"  # the kernel every notebook declares


def execute(task: Task) -> dict[str, Any]:
    """Execute one run with papermill on whatever worker runs this, in a private temporary
    folder (the kernel's working directory and ``DYCKBOOK_ROOT``); the kernel talks to it over
    IPC sockets. Returns ``{"status", "error", "notebook": bytes | None, "files": {path in
    results_dir: bytes}, "started", "finished", "duration_s", "host"}``."""
    import nbformat
    import papermill
    from papermill.exceptions import PapermillExecutionError

    started, t0 = _now(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="dyckbook-run-") as tmp:
        root, executed = Path(tmp) / "root", Path(tmp) / "executed.ipynb"
        out = root / task.params["results_dir"]
        for base, files in ((root, task.inputs), (out, task.files)):
            for rel, data in files.items():
                (base / rel).parent.mkdir(parents=True, exist_ok=True)
                (base / rel).write_bytes(data)
        out.mkdir(parents=True, exist_ok=True)
        threads = str(task.params["num_threads"])
        env = {**os.environ, R.ROOT_ENV: str(root), "MPLBACKEND": "Agg", "DYCKBOOK_QUIET": "1",
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
                "duration_s": round(time.perf_counter() - t0, 3), "host": socket.gethostname()}


def _kernel_manager(env: dict[str, str], cwd: Path, sockets: Path) -> type:
    from jupyter_client.manager import AsyncKernelManager

    sockets.mkdir()

    class _Manager(AsyncKernelManager):
        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw, transport="ipc", ip=str(sockets / "ipc"))

        async def start_kernel(self, **kw: Any) -> None:
            # per-run environment and folder without touching this (maybe threaded) process's
            kw.update(env=env, cwd=str(cwd))
            await super().start_kernel(**kw)

    return _Manager


# ------------------------------------------------------------------------------ the client
def run(profile: str = "cpu", only: Sequence[str] | None = None, *, force: bool = False,
        jobs: int = 1, scheduler: str | None = None, executor: cf.Executor | None = None,
        manifest: str | os.PathLike[str] | None = None,
        out_root: str | os.PathLike[str] | None = None) -> int:
    """Execute the runs of a profile (or those ``only`` names) that are not up to date, stage
    by stage, on ``executor`` or one made by ``make_executor(scheduler, jobs)``; publish each.

    Each kernel gets ``kernel_threads``: the cores shared by the runs of its stage that run at
    once (1 on an existing cluster), so a run alone in its stage gets every core. Returns 0 if
    every selected run is up to date or succeeded, 1 if one failed (which blocks every later
    stage); failures are logged at ERROR level. Bad arguments are ValueErrors; Ctrl-C cancels
    the outstanding runs (none is published) and raises KeyboardInterrupt.
    """
    if type(jobs) is not int or jobs < 0:
        raise ValueError(f"jobs must be an int >= 0, got {jobs!r}")
    root, man = Path(out_root or R.repo_root()).resolve(), load_manifest(manifest)
    runs = resolve_profile(man, profile)
    chosen, external = select_runs(runs, only, profile), external_runs(man, profile, root)
    every = runs + external
    several = {key for key in man.notebooks if sum(k == key for k, _ in man.runs.values()) > 1}
    check_scheduler(scheduler)
    _write_index(root, profile, man, runs, external)
    pool, futures, done, failures = executor, {}, {"ok": 0, "skipped": 0, "blocked": 0}, []
    t0, interrupted = time.perf_counter(), False
    try:
        with Progress(len(chosen), f"profile {profile}", "run") as bar:
            for stage in sorted({r.notebook.stage for r in chosen}):
                batch = [r for r in chosen if r.notebook.stage == stage]
                inputs = _inputs(every, stage, root)  # the earlier stages' results, as they are
                hashes = {r.name: run_hash(r, inputs) for r in batch}
                todo = [r for r in batch if not failures and (
                    force or run_status(r, hashes[r.name], root) != "ok")]
                for r in batch:
                    if failures:
                        _publish(r, None, {"status": "blocked"}, root, profile)
                        log.error("[block] %s: not run, an earlier stage failed", r.name)
                    elif r not in todo:
                        log.info("[skip] %s (up to date)", r.name)
                done["blocked" if failures else "skipped"] += len(batch) - len(todo)
                bar.skip(len(batch) - len(todo))
                if todo:
                    pool = pool or make_executor(scheduler, jobs)
                    files = _input_files(root, [r for r in every if r.notebook.stage < stage])
                todo = longest_first(todo, root, profile)
                threads = kernel_threads(scheduler, jobs, len(todo))
                for r in todo:
                    log.info("[queued] %s (%s)", r.name, r.notebook.key)
                    futures[pool.submit(execute, _task(r, threads, root, files))] = r
                for future in cf.as_completed(list(futures)):
                    r = futures.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # noqa: BLE001 - a lost worker fails its run only
                        result = {"status": "failed",
                                  "error": {"ename": type(exc).__name__, "evalue": str(exc)}}
                    _publish(r, result, {**result, "hash": hashes[r.name]}, root, profile,
                             r.notebook.key in several)
                    if result["status"] == "ok":
                        done["ok"] += 1
                        log.info("[ok] %s %.1f s on %s", r.name, result["duration_s"],
                                 result["host"])
                    else:
                        failures.append(f"FAILED {r.name}: {describe_error(result['error'])}")
                        log.error("[FAIL] %s", failures[-1].removeprefix("FAILED "))
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
    log.info("done in %.1f s: %d ok, %d skipped, %d failed, %d blocked",
             time.perf_counter() - t0, done["ok"], done["skipped"], len(failures), done["blocked"])
    for line in failures:
        log.error("%s", line)
    return 1 if failures or done["blocked"] else 0


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


def _task(run: Run, threads: int, root: Path, inputs: dict[str, bytes]) -> Task:
    rdir = _folder(run, root)
    kept = {k: (rdir / k).read_bytes() for k in run.notebook.keep if (rdir / k).is_file()}
    return Task(run.name, run.notebook.path.read_text(encoding="utf-8"),
                {**run.params, "num_threads": threads}, run.notebook.outputs, kept, inputs)


def _input_files(root: Path, earlier: Sequence[Run]) -> dict[str, bytes]:
    """The index and every file of the published earlier-stage runs, keyed relative to root."""
    paths = [root / INDEX] if earlier else []
    for r in earlier:
        if _record(r, root).get("status") == "ok":
            paths += [p for p in _folder(r, root).rglob("*") if p.is_file()]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}


def _publish(run: Run, result: Mapping[str, Any] | None, record: Mapping[str, Any], root: Path,
             profile: str, several: bool = False) -> None:
    """Swap in a run's results folder whole, then its page (only when it succeeded); a failed
    or blocked run keeps only its kept files, its record and the failed notebook."""
    rdir, page, ok = _folder(run, root), _page(run, root), record["status"] == "ok"
    result = result or {}
    before = _record(run, root)
    # the longest a run of this profile took: a run that resumed from kept files (the grid's
    # records) finishes in seconds, which is not what it costs from a fresh clone
    earlier = (before.get("longest_s"), before.get("duration_s")) \
        if before.get("profile") == profile else ()
    seconds = [s for s in (record.get("duration_s"), *earlier) if isinstance(s, (int, float))]
    longest = max(seconds) if seconds else None
    files = {k: (rdir / k).read_bytes() for k in run.notebook.keep if (rdir / k).is_file()}
    files.update((k, v) for k, v in result.get("files", {}).items()
                 if ok or k in run.notebook.keep)
    if not ok and result.get("notebook"):
        files[FAILED_NOTEBOOK] = result["notebook"]
    new, old = rdir.with_name(f".{run.name}.new"), rdir.with_name(f".{run.name}.old")
    for folder in (new, old):
        shutil.rmtree(folder, ignore_errors=True)
    for rel, data in files.items():
        R.write_bytes(new / rel, data)
    R.write_json(new / RECORD, {
        "run": run.name, "notebook": run.notebook.key, "profile": profile, "params": run.params,
        "dyckbook": __version__, "hash": record.get("hash") if ok else None,
        "notebook_hash": notebook_hash(run.notebook.path), "params_hash": _digest(
            {k: v for k, v in run.params.items() if k not in UNHASHED}),
        "files": file_hashes(new), **{k: record.get(k) for k in (
            "status", "error", "started", "finished", "duration_s", "host")},
        "longest_s": longest})
    page.unlink(missing_ok=True)  # first: an interruption from here on leaves no page at all
    if rdir.exists():
        os.replace(rdir, old)
    os.replace(new, rdir)
    shutil.rmtree(old, ignore_errors=True)
    if ok:
        R.write_bytes(page, prepare_for_book(result["notebook"], run, profile, several))


def describe_error(error: Mapping[str, Any]) -> str:
    """One line: the failing cell (index and first line), if any, and the exception."""
    exc = " ".join(f"{error['ename']}: {error['evalue']}".split())
    return f"{error['cell']} raised {exc}" if "cell" in error else exc


def prepare_for_book(notebook: bytes, run: Run, profile: str, several: bool) -> bytes:
    """An executed notebook made into a page: parameter cells removed, the run's parameters in a
    dropdown under the title (and the run name in the title when its notebook has several
    runs), an experiment's code collapsed (a chapter's stays visible: it is the argument)."""
    import nbformat

    nb = nbformat.reads(notebook.decode("utf-8"), as_version=4)
    chapter = run.notebook.group == CHAPTERS_GROUP
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if {"parameters", "injected-parameters"} & set(tags):
            tags.append("remove-cell")
        elif cell.cell_type == "code" and not chapter and not any(
                t.startswith(("remove-", "hide-")) for t in tags):
            tags.append("hide-input")
        if tags:
            cell.metadata["tags"] = tags
    source = "/".join(run.notebook.path.parts[-2:])
    nb.metadata.get("papermill", {}).update(input_path=source, output_path=f"{run.name}.ipynb")
    if not chapter:
        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in run.params.items() if k not in UNHASHED)
        block = (f":::{{dropdown}} Parameters of run `{run.name}` (profile `{profile}`)\n"
                 f"Executed from `{source}` by `dyckbook run --profile {profile}`.\n\n"
                 f"| parameter | value |\n|---|---|\n{rows}\n:::\n")
        first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), None)
        if first is not None and several and nb.cells[first].source.startswith("# "):
            title, _, rest = nb.cells[first].source.partition("\n")
            nb.cells[first].source = f"{title} · `{run.name}`\n{rest}".rstrip("\n")
        nb.cells.insert(0 if first is None else first + 1,
                        nbformat.v4.new_markdown_cell(block, metadata={"tags": ["run-parameters"]}))
    return nbformat.writes(nb).encode("utf-8")


def _write_index(root: Path, profile: str, man: Manifest, runs: Sequence[Run],
                 external: Sequence[Run]) -> None:
    # what the book and later stages read: the profile, and each run with the profile that made
    # it (runs of another profile that this one excludes are listed once published)
    made_by = {r.name: _record(r, root).get("profile") for r in external}
    R.write_json(root / INDEX, {
        "profile": profile,
        "description": " ".join(str(man.profiles[profile].get("description", "")).split()),
        "runs": {r.name: {"group": nb.group, "notebook": nb.key, "stage": nb.stage,
                          "title": nb.title, "profile": made_by.get(r.name, profile)}
                 for r in [*runs, *external] for nb in [r.notebook]}})


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
