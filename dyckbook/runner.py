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

from dyckbook import __version__
from dyckbook import results as R
from dyckbook.executors import Progress, cores, make_executor

__all__ = ["INJECTED", "Manifest", "Notebook", "Run", "Task", "describe_error", "execute",
           "load_manifest", "prepare_for_book", "resolve_profile", "run", "run_hash",
           "run_status", "select_runs", "statuses"]

log = logging.getLogger(__name__)

INJECTED = ("run_name", "results_dir", "num_threads")  # set by the runner, declared by notebooks
UNHASHED = frozenset({"num_threads"})  # injected values that cannot change results
KERNEL = "python3"
CHAPTERS_GROUP = "chapters"
RECORD = "run.json"
FAILED_NOTEBOOK = "failed.ipynb"
INDEX = R.RESULTS_DIR / "index.json"
MANIFEST_VERSION = 2
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SCALARS = (str, int, float, bool, type(None))
_TYPES = {bool: "bool", int: "int", float: "float", str: "str", type(None): "None"}


# ------------------------------------------------------------------------------ manifest


@dataclass(frozen=True)
class Notebook:
    """A notebook (or chapter) of the manifest and the parameters its ``parameters`` cell declares."""

    key: str  # manifest key: a notebook stem or a chapter name
    path: Path  # absolute path of the source notebook
    title: str  # title in listings
    group: str  # book/runs/<group>/: the key, or "chapters" for chapters
    stage: int  # every run of a stage finishes before the next stage starts
    outputs: tuple[str, ...]  # files a successful run must have written into results_dir
    keep: tuple[str, ...]  # files of results_dir that survive a rerun (resume caches)
    defaults: dict[str, Any]  # declared parameter -> default (a literal of the parameters cell)
    types: dict[str, str]  # declared parameter -> its annotation ("None" when it has none)


@dataclass(frozen=True)
class Run:
    """One run of a profile with its resolved parameters."""

    name: str  # page and folder name, unique in the manifest
    notebook: Notebook
    params: dict[str, Any]  # every declared parameter, run_name and results_dir included

    @property
    def group(self) -> str:
        """``book/runs/<group>`` and ``book/results/<group>``."""
        return self.notebook.group

    @property
    def stage(self) -> int:
        """The stage of its notebook."""
        return self.notebook.stage


@dataclass(frozen=True)
class Manifest:
    """A loaded, validated manifest (``notebooks/experiments.yml``, version 2)."""

    path: Path
    notebooks: dict[str, Notebook]
    runs: dict[str, tuple[str, dict[str, Any]]]  # run -> (notebook key, its params)
    profiles: dict[str, dict[str, Any]]  # profile -> its validated entry


def load_manifest(path: str | os.PathLike[str] | None = None) -> Manifest:
    """Load a manifest and check it against the notebooks' parameters cells.

    Args:
        path: the manifest; default ``notebooks/experiments.yml`` of the source repository.

    Raises:
        FileNotFoundError: no manifest, or a notebook it names is missing.
        ValueError: the file is not UTF-8 YAML or breaks the format; the message names the
            file and the entry (an override of an undeclared parameter is an error).
    """
    mpath = Path(path) if path is not None else R.source_root() / "notebooks" / "experiments.yml"
    if not mpath.is_file():
        raise FileNotFoundError(f"manifest not found: {mpath}" + (
            " (a folder)" if mpath.is_dir() else ""))
    try:
        raw = yaml.safe_load(mpath.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{mpath} is not UTF-8 text (byte {error.object[error.start]:#x} at "
                         f"offset {error.start})") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{mpath} is not valid YAML: {' '.join(str(error).split())}") from None
    try:
        return _parse(raw, mpath.resolve())
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
            if isinstance(stage, bool) or not isinstance(stage, int) or stage < 0:
                raise ValueError(f"{where}.stage must be an int >= 0, got {stage!r}")
            outputs, keep = (_names(entry.get(f, []), f"{where}.{f}") for f in ("outputs", "keep"))
            path = (mpath.parent / str(entry["path"])).resolve()
            notebooks[key] = Notebook(key, path, str(entry.get("title", key)),
                                      CHAPTERS_GROUP if chapter else key, stage, outputs, keep,
                                      *_declared(path, where))
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
        runs[name] = (entry["notebook"], _params(entry.get("params"), f"{where}.params",
                                                 [notebooks[entry["notebook"]]]))
    profiles = _entry(raw.get("profiles"), "profiles")
    if not profiles:
        raise ValueError("profiles: the manifest defines none")
    used = [notebooks[key] for key in {key for key, _ in runs.values()}]
    for pname, prof in profiles.items():
        where = f"profiles.{pname}"
        prof = profiles[pname] = _entry(prof, where, {"description", "params", "notebooks", "runs",
                                                      "include", "exclude"})
        _params(prof.get("params"), f"{where}.params", used, any_of=True)
        for key, over in _entry(prof.get("notebooks"), f"{where}.notebooks").items():
            if key not in notebooks:
                raise ValueError(f"{where}.notebooks: unknown notebook {key!r}")
            _params(over, f"{where}.notebooks.{key}", [notebooks[key]])
        for name, over in _entry(prof.get("runs"), f"{where}.runs").items():
            if name not in runs:
                raise ValueError(f"{where}.runs: unknown run {name!r}")
            _params(over, f"{where}.runs.{name}", [notebooks[runs[name][0]]])
        for field in ("include", "exclude"):
            for pattern in _names(prof.get(field, []), f"{where}.{field}", "patterns"):
                if not fnmatch.filter(runs, pattern):
                    raise ValueError(f"{where}.{field}: {pattern!r} matches no run")
    return Manifest(mpath, notebooks, runs, profiles)


def _declared(path: Path, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """Defaults and annotations of a notebook's parameters cell (papermill's inspection)."""
    import papermill

    if not path.is_file():
        raise FileNotFoundError(f"{where}.path: no notebook {path}")
    try:
        found = papermill.inspect_notebook(str(path))
    except (OSError, ValueError) as error:
        raise ValueError(f"{where}: cannot read {path}: {error}") from None
    missing = [name for name in INJECTED if name not in found]
    if missing:
        raise ValueError(f"{where}: the parameters cell of {path} must declare {missing}")
    defaults = {}
    for name, info in found.items():
        try:
            defaults[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            raise ValueError(f"{where}: {path} sets {name} = {info['default']}, which is not a "
                             "literal") from None
    return defaults, {name: info["inferred_type_name"] for name, info in found.items()}


def _entry(value: Any, where: str, allowed: Iterable[str] | None = None,
           required: Iterable[str] = ()) -> dict[str, Any]:
    if value is None:
        value = {}
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
    """Overrides checked against the declaring notebooks: declared, not injected, and of the
    annotated type (``any_of``: profile-wide values need only one notebook declaring them)."""
    params = _entry(value, where)
    for name, v in params.items():
        if name in INJECTED:
            raise ValueError(f"{where}: {name!r} is injected by the runner, never set here")
        declaring = [nb for nb in notebooks if name in nb.defaults]
        if not declaring or (not any_of and len(declaring) < len(notebooks)):
            keys = sorted(nb.key for nb in notebooks)
            raise ValueError(f"{where}: {'no notebook of' if any_of else 'notebook'} "
                             f"{keys[0] if len(keys) == 1 else keys} declares {name!r}")
        if not isinstance(v, _SCALARS):
            raise ValueError(f"{where}.{name} must be a flat scalar, got {type(v).__name__}")  # noqa: TRY004
        for nb in declaring:
            allowed = set(re.findall(r"\w+", nb.types[name])) & set(_TYPES.values())
            if allowed and _TYPES[type(v)] not in allowed | ({"int"} if "float" in allowed
                                                              else set()):
                raise ValueError(f"{where}.{name} must be {nb.types[name]} (as {nb.key} "
                                 f"declares it), got {v!r}")
    return params


def resolve_profile(manifest: Manifest, profile: str) -> list[Run]:
    """The runs of a profile, in manifest order, with resolved parameters.

    Later wins: notebook defaults, run params, profile params (to every notebook declaring the
    name), profile ``notebooks.<key>``, profile ``runs.<run>``, then ``run_name`` and
    ``results_dir`` (``num_threads`` is set when a run is executed).

    Raises:
        ValueError: ``profile`` is not in the manifest.
    """
    if profile not in manifest.profiles:
        raise ValueError(f"profile must be one of {sorted(manifest.profiles)}, got {profile!r}")
    prof = manifest.profiles[profile]
    out = []
    for name, (key, params) in manifest.runs.items():
        if not _chosen(name, prof):
            continue
        nb = manifest.notebooks[key]
        resolved = {**nb.defaults, **params}
        resolved.update({k: v for k, v in (prof.get("params") or {}).items() if k in nb.defaults})
        resolved.update((prof.get("notebooks") or {}).get(key) or {})
        resolved.update((prof.get("runs") or {}).get(name) or {})
        resolved.update(run_name=name, results_dir=(R.RESULTS_DIR / nb.group / name).as_posix())
        out.append(Run(name, nb, resolved))
    return out


def _chosen(name: str, prof: Mapping[str, Any]) -> bool:
    include, exclude = prof.get("include"), prof.get("exclude") or []
    return ((include is None or any(fnmatch.fnmatchcase(name, p) for p in include))
            and not any(fnmatch.fnmatchcase(name, p) for p in exclude))


def select_runs(runs: Sequence[Run], only: Iterable[str] | None, profile: str) -> list[Run]:
    """The runs matching ``only`` (run names, notebook keys or glob patterns; None: all).

    Raises:
        ValueError: a pattern matches no run of the profile.
    """
    if not only:
        return list(runs)
    chosen: set[str] = set()
    for pattern in only:
        hits = {r.name for r in runs if any(fnmatch.fnmatchcase(c, pattern)
                                            for c in (r.name, r.notebook.key))}
        if not hits:
            raise ValueError(f"--only {pattern!r} matches no run of profile {profile!r} "
                             f"(see: dyckbook list --profile {profile})")
        chosen |= hits
    return [r for r in runs if r.name in chosen]


def external_runs(manifest: Manifest, profile: str, root: Path) -> list[Run]:
    """Runs the profile excludes by name that another profile published (say, the full grid):
    the book lists them and later stages read them."""
    prof, out = manifest.profiles[profile], []
    for name, (key, _) in manifest.runs.items():
        excluded = any(fnmatch.fnmatchcase(name, p) for p in prof.get("exclude") or [])
        nb = manifest.notebooks[key]
        record = _record(nb.group, name, root)
        if excluded and record.get("status") == "ok" and R.run_notebook_path(
                nb.group, name, root).is_file():
            out.append(Run(name, nb, record.get("params", {})))
    return out


# ------------------------------------------------------------------------------ hashes, status


def notebook_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a notebook's cell types and sources (outputs and metadata do not count)."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    return _digest([(c["cell_type"], "".join(c["source"]) if isinstance(c["source"], list)
                     else c["source"]) for c in cells])


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
    return {r.name: _digest(_record(r.group, r.name, root).get("files"))
            for r in runs if r.stage < stage}


def run_status(run: Run, hash_: str, root: Path) -> str:
    """``ok``, ``stale`` (its hash changed), ``edited`` (a result file changed since it ran),
    ``missing``, ``failed`` or ``blocked``."""
    record = _record(run.group, run.name, root)
    if record.get("status", "missing") != "ok":
        return str(record.get("status", "missing"))
    if not R.run_notebook_path(run.group, run.name, root).is_file():
        return "missing"
    if record.get("hash") != hash_:
        return "stale"
    rdir = R.run_results_dir(run.group, run.name, root)
    return "ok" if file_hashes(rdir) == record.get("files") else "edited"


def statuses(profile: str, manifest: str | os.PathLike[str] | None = None,
             out_root: str | os.PathLike[str] | None = None) -> list[tuple[Run, str, dict]]:
    """``(run, status, run.json)`` for every run of a profile (for ``dyckbook list``)."""
    root = _root(out_root)
    man = load_manifest(manifest)
    runs = resolve_profile(man, profile)
    every = runs + external_runs(man, profile, root)
    return [(r, run_status(r, run_hash(r, _inputs(every, r.stage, root)), root),
             _record(r.group, r.name, root)) for r in runs]


def _record(group: str, name: str, root: Path) -> dict[str, Any]:
    path = R.run_results_dir(group, name, root) / RECORD
    try:
        return R.read_json(path) if path.is_file() else {}
    except ValueError:
        return {}  # unreadable: the run counts as missing and is redone


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
    kernel: str = KERNEL


def execute(task: Task) -> dict[str, Any]:
    """Execute one run with papermill in a private temporary folder (on any worker).

    The kernel's working directory and ``DYCKBOOK_ROOT`` are that folder, so the notebook
    reads its inputs and writes ``results_dir`` there; ``OMP_NUM_THREADS`` and friends equal
    ``num_threads``. It talks to this process over IPC sockets (no TCP port, no warning).

    Returns:
        ``{"status": "ok"|"failed", "error", "notebook": executed notebook bytes or None,
        "files": {relative path: bytes} of results_dir, "started", "finished", "duration_s",
        "host"}``.
    """
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
                kernel_name=task.kernel, progress_bar=False,
                kernel_manager_class=_kernel_manager(env, root, Path(tmp) / "kernel"))
        except PapermillExecutionError as exc:
            error = {"kind": "cell", "cell_index": _source_index(executed, exc.cell_index),
                     "source_line": next((s.strip()[:80] for s in exc.source.splitlines()
                                          if s.strip()), ""), "ename": exc.ename,
                     "evalue": exc.evalue}
        except Exception as exc:  # noqa: BLE001 - a kernel that will not start fails this run only
            error = {"kind": "runner", "ename": type(exc).__name__, "evalue": str(exc)}
        missing = [o for o in task.outputs if not (out / o).is_file()]
        if error is None and missing:
            error = {"kind": "outputs", "ename": "MissingOutputs",
                     "evalue": f"the run wrote no {missing} into results_dir"}
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


def _source_index(executed: Path, index: int) -> int:
    # papermill counts the injected-parameters cell; the reader opens the source notebook
    cells = json.loads(executed.read_text(encoding="utf-8"))["cells"] if executed.is_file() else []
    tags = [c.get("metadata", {}).get("tags", []) for c in cells[:index]]
    return index - sum("injected-parameters" in t for t in tags)


# ------------------------------------------------------------------------------ the client


def run(profile: str = "cpu", only: Sequence[str] | None = None, *, force: bool = False,
        jobs: int = 1, scheduler: str | None = None, executor: cf.Executor | None = None,
        manifest: str | os.PathLike[str] | None = None,
        out_root: str | os.PathLike[str] | None = None) -> int:
    """Execute the runs of a profile that are not up to date, stage by stage, and publish them.

    Args:
        profile: a profile of the manifest.
        only: run names, notebook keys or glob patterns (None: every run of the profile).
        force: rerun runs that are up to date.
        jobs: workers of the pool or LocalCluster (0: one per core); each kernel gets
            ``num_threads = cores // jobs`` (one on an existing cluster).
        scheduler: see :func:`dyckbook.executors.make_executor` (None: the process pool).
        executor: an executor to use instead (the caller shuts it down).
        manifest: default ``notebooks/experiments.yml``.
        out_root: default ``$DYCKBOOK_ROOT`` or the repository.

    Returns:
        0 if every selected run is up to date or succeeded, 1 if one failed or was blocked
        (a failure blocks every later stage). Failures are logged at ERROR level (stderr).

    Raises:
        ValueError: a bad manifest, profile, ``only`` pattern, ``jobs`` or ``scheduler``.
        KeyboardInterrupt: after cancelling outstanding runs (none of them is published).
    """
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0:
        raise ValueError(f"jobs must be an int >= 0, got {jobs!r}")
    root = _root(out_root)
    man = load_manifest(manifest)
    runs = resolve_profile(man, profile)
    chosen = select_runs(runs, only, profile)
    external = external_runs(man, profile, root)
    every = runs + external
    several = {key for key in man.notebooks if sum(k == key for k, _ in man.runs.values()) > 1}
    remote = isinstance(scheduler, str) and scheduler.startswith("tcp://")
    threads = 1 if remote else max(1, cores() // (jobs or cores()))
    _write_index(root, profile, man, runs, external)
    pool, futures, counts, failures = executor, {}, dict.fromkeys(
        ("ok", "skipped", "failed", "blocked"), 0), []
    t0, interrupted = time.perf_counter(), False
    try:
        with Progress(len(chosen), f"profile {profile}", "run") as bar:
            for stage in sorted({r.stage for r in chosen}):
                batch = [r for r in chosen if r.stage == stage]
                if failures:
                    for r in batch:
                        _publish(r, None, {"status": "blocked", "error": None}, root, profile)
                        log.error("[block] %s: not run, an earlier stage failed", r.name)
                    counts["blocked"] += len(batch)
                    bar.skip(len(batch))
                    continue
                inputs = _inputs(every, stage, root)
                hashes = {r.name: run_hash(r, inputs) for r in batch}
                todo = [r for r in batch if force or run_status(r, hashes[r.name], root) != "ok"]
                for r in batch:
                    if r not in todo:
                        log.info("[skip] %s (up to date)", r.name)
                counts["skipped"] += len(batch) - len(todo)
                bar.skip(len(batch) - len(todo))
                if not todo:
                    continue
                pool = pool or make_executor(scheduler, jobs)
                files = _input_files(root, [r for r in every if r.stage < stage])
                for r in todo:
                    log.info("[run] %s (%s)", r.name, r.notebook.key)
                    futures[pool.submit(execute, _task(r, threads, root, files))] = r
                for future in cf.as_completed(list(futures)):
                    r = futures.pop(future)
                    try:
                        result = future.result()
                    except Exception as exc:  # noqa: BLE001 - a lost worker fails its run only
                        result = {"status": "failed", "notebook": None, "files": {}, "error": {
                            "kind": "worker", "ename": type(exc).__name__, "evalue": str(exc)}}
                    _publish(r, result, {**result, "hash": hashes[r.name]}, root, profile,
                             r.notebook.key in several)
                    counts["ok" if result["status"] == "ok" else "failed"] += 1
                    if result["status"] == "ok":
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
    log.info("done in %.1f s: %s", time.perf_counter() - t0,
             ", ".join(f"{v} {k}" for k, v in counts.items()))
    for line in failures:
        log.error("%s", line)
    return 1 if failures or counts["blocked"] else 0


def _task(run: Run, threads: int, root: Path, inputs: dict[str, bytes]) -> Task:
    rdir = R.run_results_dir(run.group, run.name, root)
    kept = {k: (rdir / k).read_bytes() for k in run.notebook.keep if (rdir / k).is_file()}
    return Task(run.name, run.notebook.path.read_text(encoding="utf-8"),
                {**run.params, "num_threads": threads}, run.notebook.outputs, kept, inputs)


def _input_files(root: Path, earlier: Sequence[Run]) -> dict[str, bytes]:
    """The index and every file of the published earlier-stage runs, keyed relative to root."""
    paths = [root / INDEX] if earlier else []
    for r in earlier:
        if _record(r.group, r.name, root).get("status") == "ok":
            paths += [p for p in R.run_results_dir(r.group, r.name, root).rglob("*") if p.is_file()]
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in paths}


def _publish(run: Run, result: Mapping[str, Any] | None, record: Mapping[str, Any], root: Path,
             profile: str, several: bool = False) -> None:
    """Swap in a run's results folder whole, then its page (only when it succeeded)."""
    rdir = R.run_results_dir(run.group, run.name, root)
    page = R.run_notebook_path(run.group, run.name, root)
    ok = record["status"] == "ok"
    files = {k: (rdir / k).read_bytes() for k in run.notebook.keep if (rdir / k).is_file()}
    returned = dict((result or {}).get("files", {}))
    files.update(returned if ok else {k: v for k, v in returned.items() if k in run.notebook.keep})
    notebook = (result or {}).get("notebook")
    if not ok and notebook:
        files[FAILED_NOTEBOOK] = notebook
    new, old = rdir.with_name(f".{run.name}.new"), rdir.with_name(f".{run.name}.old")
    for folder in (new, old):
        shutil.rmtree(folder, ignore_errors=True)
    for rel, data in files.items():
        if rel != RECORD:
            R.write_bytes(new / rel, data)
    R.write_json(new / RECORD, {
        "run": run.name, "notebook": run.notebook.key, "profile": profile, "params": run.params,
        "dyckbook": __version__, "hash": record.get("hash") if ok else None,
        "files": file_hashes(new), **{k: record.get(k) for k in (
            "status", "error", "started", "finished", "duration_s", "host")}})
    page.unlink(missing_ok=True)  # first: an interruption from here on leaves no page at all
    if rdir.exists():
        os.replace(rdir, old)
    os.replace(new, rdir)
    shutil.rmtree(old, ignore_errors=True)
    if ok:
        R.write_bytes(page, prepare_for_book(notebook, run, profile, several))


def describe_error(error: Mapping[str, Any]) -> str:
    """One line: the failing cell (index and first line) and the exception."""
    exc = " ".join(f"{error.get('ename')}: {error.get('evalue')}".split())
    if error.get("kind") == "cell":
        return f"cell {error['cell_index']} [{error['source_line']}] raised {exc}"
    return exc


def prepare_for_book(notebook: bytes, run: Run, profile: str, several: bool) -> bytes:
    """An executed notebook made into a page: parameter cells removed, the run's parameters in a
    dropdown under the title (and the run name in the title when its notebook has several
    runs), an experiment's code collapsed (a chapter's stays visible: it is the argument)."""
    import nbformat

    nb = nbformat.reads(notebook.decode("utf-8"), as_version=4)
    chapter = run.group == CHAPTERS_GROUP
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if {"parameters", "injected-parameters"} & set(tags):
            tags.append("remove-cell")
        elif cell.cell_type == "code" and not chapter and not any(
                t.startswith(("remove-", "hide-")) for t in tags):
            tags.append("hide-input")
        if tags:
            cell.metadata["tags"] = tags
    source = run.notebook.path.as_posix().rsplit("/", 2)
    nb.metadata.get("papermill", {}).update(input_path="/".join(source[-2:]),
                                            output_path=f"{run.name}.ipynb")
    if not chapter:
        rows = "\n".join(f"| `{k}` | `{v!r}` |" for k, v in run.params.items() if k not in UNHASHED)
        block = (f":::{{dropdown}} Parameters of run `{run.name}` (profile `{profile}`)\n"
                 f"Executed from `{'/'.join(source[-2:])}` by `dyckbook run --profile "
                 f"{profile}`.\n\n| parameter | value |\n|---|---|\n{rows}\n:::\n")
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
    made_by = {r.name: _record(r.group, r.name, root).get("profile") for r in external}
    R.write_json(root / INDEX, {
        "profile": profile,
        "description": " ".join(str(man.profiles[profile].get("description", "")).split()),
        "runs": {r.name: {"group": r.group, "notebook": r.notebook.key, "stage": r.stage,
                          "title": r.notebook.title, "profile": made_by.get(r.name, profile)}
                 for r in [*runs, *external]}})


def _root(out_root: str | os.PathLike[str] | None) -> Path:
    return Path(out_root).resolve() if out_root is not None else R.repo_root()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")
