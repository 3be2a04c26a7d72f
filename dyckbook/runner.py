"""The papermill runner: resolve the run manifest, execute runs in parallel, publish only successes.

Contract (see ``notebooks/experiments.yml`` for the manifest format):

- Each run executes with papermill (kernel ``python3``, working directory = the output root, i.e.
  the repository root) into a temporary file; only on success is the executed notebook moved to
  ``book/runs/<group>/<run>.ipynb`` and ``run.json`` written with status ``"ok"``.
- A run is skipped when its hash (resolved parameters, notebook source, dyckbook version, and for
  later stages the hashes of all earlier-stage runs of the profile) equals the hash of its last
  successful completion and its notebook is still published. ``force=True`` reruns.
- Starting a run first unpublishes its old notebook and clears its results directory, so an
  interrupted or failed run can never leave stale results that look current. A failure records
  ``run.json`` with status ``"failed"`` and the failing cell, keeps the executed notebook as
  ``failed.ipynb`` and moves whatever the run wrote into ``partial/`` (never read as results):
  the book build then fails loudly on the missing page instead of showing old numbers.
- Stages run in order (chapters and experiments, then the summary). If a run fails, later stages
  are not executed; their runs are unpublished and recorded as ``"blocked"``.
- The output root is ``out_root`` if given, else ``$DYCKBOOK_ROOT``, else the repository root
  (:func:`dyckbook.results.repo_root`). The kernel sees ``DYCKBOOK_ROOT`` set to it.
"""

from __future__ import annotations

import concurrent.futures as cf
import fnmatch
import hashlib
import json
import multiprocessing
import os
import re
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from dyckbook import __version__
from dyckbook import results as R

#: Parameters the runner injects into every run (notebooks declare them; the manifest must not).
INJECTED = ("run_name", "results_dir", "num_threads")
#: Injected parameters that do not change results, hence are left out of the skip hash.
UNHASHED = frozenset({"num_threads"})
#: Where the profile index is written, relative to the output root.
INDEX_FILE = R.RESULTS_DIR / "index.json"
KERNEL = "python3"
_SCALARS = (str, int, float, bool, type(None))
_EXECUTING = ".executing.ipynb"


# ----------------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class NotebookEntry:
    """One notebook of the manifest (an experiment, the summary, or a chapter)."""

    key: str  # manifest key, e.g. "01_dyck1" or "dyck_languages"
    path: Path  # absolute path of the source notebook
    title: str
    group: str  # book/runs/<group>/...: the key, or "chapters" for chapters
    stage: int  # execution order: all runs of a stage finish before the next stage starts
    outputs: tuple[str, ...]  # files a successful run must have written into results_dir
    params: dict[str, Any]  # declared parameters with defaults (the parameters-cell contract)
    # files of results_dir kept when the run is redone (a resume cache the notebook validates
    # itself, e.g. the grid's records, each tagged with the hash of the settings that made it)
    keep: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunSpec:
    """One fully resolved run of a profile."""

    name: str  # e.g. "dyck1-exp1-s0"
    base: str  # the manifest run it expands, e.g. "dyck1-exp1"
    notebook: NotebookEntry
    params: dict[str, Any]  # resolved papermill parameters, including run_name and results_dir

    @property
    def group(self) -> str:
        """The output group (``book/runs/<group>``)."""
        return self.notebook.group

    @property
    def stage(self) -> int:
        """Execution stage of the run's notebook."""
        return self.notebook.stage


@dataclass
class Manifest:
    """A loaded, validated manifest."""

    path: Path
    notebooks: dict[str, NotebookEntry]
    runs: dict[str, dict[str, Any]]  # name -> {"notebook", "seeded", "params"}
    profiles: dict[str, dict[str, Any]]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def default_manifest() -> Path:
    """``notebooks/experiments.yml`` of the source repository (:func:`dyckbook.results.source_root`).

    Independent of the output root, so ``DYCKBOOK_ROOT=/elsewhere python -m dyckbook run`` runs
    this repository's manifest into ``/elsewhere``.
    """
    return R.source_root() / "notebooks" / "experiments.yml"


def load_manifest(path: str | os.PathLike[str] | None = None) -> Manifest:
    """Load and validate a manifest file.

    Raises:
        FileNotFoundError: the manifest does not exist.
        ValueError: the manifest is malformed; the message names the offending entry.
    """
    mpath = Path(path) if path is not None else default_manifest()
    if not mpath.is_file():
        raise FileNotFoundError(f"manifest not found: {mpath}")
    raw = yaml.safe_load(mpath.read_text(encoding="utf-8")) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"manifest {mpath} must be a mapping, got {type(raw).__name__}")  # noqa: TRY004
    if raw.get("version", 1) != 1:
        raise ValueError(f"manifest version must be 1, got {raw.get('version')!r}")
    base = mpath.resolve().parent

    notebooks: dict[str, NotebookEntry] = {}
    runs: dict[str, dict[str, Any]] = {}
    for section, is_chapter in (("chapters", True), ("notebooks", False)):
        for key, entry in (_mapping(raw.get(section), section) or {}).items():
            where = f"{section}.{key}"
            entry = _mapping(entry, where)
            if key in notebooks:
                raise ValueError(f"{where}: notebook key {key!r} is defined twice")
            if "path" not in entry:
                raise ValueError(f"{where}: missing 'path'")
            params = dict(_params(entry.get("params"), f"{where}.params"))
            for name in INJECTED:
                if name in params:
                    raise ValueError(f"{where}.params: {name!r} is injected by the runner; "
                                     "remove it from the manifest")
            stage = entry.get("stage", 1)
            if not isinstance(stage, int) or isinstance(stage, bool):
                raise ValueError(f"{where}.stage must be an integer, got {stage!r}")  # noqa: TRY004
            outputs = entry.get("outputs", [])
            if not isinstance(outputs, list) or not all(isinstance(o, str) for o in outputs):
                raise ValueError(f"{where}.outputs must be a list of file names, got {outputs!r}")
            keep = entry.get("keep", [])
            if (not isinstance(keep, list) or not all(isinstance(k, str) for k in keep)
                    or any("/" in k or k.startswith(".") or not k for k in keep)):
                raise ValueError(f"{where}.keep must be a list of plain file names, got {keep!r}")
            notebooks[key] = NotebookEntry(
                key=key, path=(base / entry["path"]).resolve(), title=str(entry.get("title", key)),
                group=R.CHAPTERS_GROUP if is_chapter else key, stage=stage,
                outputs=tuple(outputs), params=params, keep=tuple(keep))
            if is_chapter:
                # A chapter is one unseeded run named after its key.
                runs[key] = {"notebook": key, "seeded": False, "params": {}}

    for name, entry in (_mapping(raw.get("runs"), "runs") or {}).items():
        where = f"runs.{name}"
        entry = _mapping(entry, where)
        if name in runs:
            raise ValueError(f"{where}: run name {name!r} is defined twice (chapters are runs too)")
        nb = entry.get("notebook")
        if nb not in notebooks:
            raise ValueError(f"{where}.notebook must name a notebook of the manifest, got {nb!r}")
        seeded = entry.get("seeded", True)
        if not isinstance(seeded, bool):
            raise ValueError(f"{where}.seeded must be true or false, got {seeded!r}")  # noqa: TRY004
        params = _params(entry.get("params"), f"{where}.params")
        _check_declared(params, notebooks[nb], f"{where}.params")
        if seeded and "seed" not in notebooks[nb].params:
            raise ValueError(f"{where}: a seeded run's notebook must declare a 'seed' parameter")
        if seeded and "seed" in params:
            raise ValueError(f"{where}.params: 'seed' of a seeded run comes from the profile")
        runs[name] = {"notebook": nb, "seeded": seeded, "params": params}

    profiles = _mapping(raw.get("profiles"), "profiles") or {}
    if not profiles:
        raise ValueError(f"manifest {mpath} defines no profiles")
    declared_anywhere = set().union(*(nb.params for nb in notebooks.values()))
    for pname, prof in profiles.items():
        where = f"profiles.{pname}"
        prof = _mapping(prof, where) or {}
        profiles[pname] = prof
        unknown_keys = set(prof) - {"description", "seeds", "params", "notebooks", "runs",
                                    "include", "exclude"}
        if unknown_keys:
            raise ValueError(f"{where}: unknown keys {sorted(unknown_keys)}")
        gparams = _params(prof.get("params"), f"{where}.params")
        stray = set(gparams) - declared_anywhere
        if stray:
            raise ValueError(f"{where}.params: no notebook declares {sorted(stray)}")
        for nb, over in (_mapping(prof.get("notebooks"), f"{where}.notebooks") or {}).items():
            if nb not in notebooks:
                raise ValueError(f"{where}.notebooks: unknown notebook {nb!r}")
            _check_declared(_params(over, f"{where}.notebooks.{nb}"), notebooks[nb],
                            f"{where}.notebooks.{nb}")
        for run, over in (_mapping(prof.get("runs"), f"{where}.runs") or {}).items():
            if run not in runs:
                raise ValueError(f"{where}.runs: unknown run {run!r}")
            _check_declared(_params(over, f"{where}.runs.{run}"),
                            notebooks[runs[run]["notebook"]], f"{where}.runs.{run}")
        _seeds_for(prof, "default", where)  # validates the seeds entry
    return Manifest(path=mpath.resolve(), notebooks=notebooks, runs=runs, profiles=profiles,
                    raw=raw)


def resolve_profile(manifest: Manifest, profile: str) -> list[RunSpec]:
    """Every run of a profile with its fully resolved parameters, in manifest order.

    Raises:
        ValueError: ``profile`` is not defined in the manifest.
    """
    if profile not in manifest.profiles:
        raise ValueError(f"profile must be one of {sorted(manifest.profiles)}, got {profile!r}")
    prof = manifest.profiles[profile]
    where = f"profiles.{profile}"
    gparams = prof.get("params") or {}
    nb_over = prof.get("notebooks") or {}
    run_over = prof.get("runs") or {}
    include = prof.get("include")
    exclude = prof.get("exclude") or []
    specs: list[RunSpec] = []
    for base, entry in manifest.runs.items():
        if include is not None and not any(fnmatch.fnmatchcase(base, p) for p in include):
            continue
        if any(fnmatch.fnmatchcase(base, p) for p in exclude):
            continue
        nb = manifest.notebooks[entry["notebook"]]
        params = dict(nb.params)
        params.update(entry["params"])
        params.update({k: v for k, v in gparams.items() if k in nb.params})
        params.update(nb_over.get(nb.key) or {})
        params.update(run_over.get(base) or {})
        seeds = _seeds_for(prof, base, where) if entry["seeded"] else [None]
        for seed in seeds:
            name = base if seed is None else f"{base}-s{seed}"
            resolved = dict(params)
            if seed is not None:
                resolved["seed"] = seed
            resolved["run_name"] = name
            resolved["results_dir"] = R.run_results_rel(nb.group, name).as_posix()
            specs.append(RunSpec(name=name, base=base, notebook=nb, params=resolved))
    names = [s.name for s in specs]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise ValueError(f"{where}: run names collide after seed expansion: {sorted(dupes)}")
    return specs


def select_runs(specs: Sequence[RunSpec], only: Iterable[str] | None,
                profile: str = "?") -> list[RunSpec]:
    """The runs matching ``only`` (run names, base names, notebook keys, or glob patterns).

    Raises:
        ValueError: a name or pattern matches no run of the profile (one line, for the CLI).
    """
    if not only:
        return list(specs)
    chosen: set[str] = set()
    for pattern in only:
        hits = {s.name for s in specs
                if any(fnmatch.fnmatchcase(candidate, pattern)
                       for candidate in (s.name, s.base, s.notebook.key))}
        if not hits:
            raise ValueError(f"--only {pattern!r} matches no run of profile {profile!r} "
                             f"(see: python -m dyckbook list --profile {profile})")
        chosen |= hits
    return [s for s in specs if s.name in chosen]


# ----------------------------------------------------------------------------------- hashing


def notebook_source_hash(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a notebook's cell types and sources (outputs and metadata do not count)."""
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "missing"
    cells = [(c.get("cell_type"), "".join(c.get("source", "")) if isinstance(c.get("source"), list)
              else c.get("source", "")) for c in nb.get("cells", [])]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()


def compute_hashes(specs: Sequence[RunSpec],
                   external: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """The skip hash of every run of a (whole) profile, keyed by run name.

    A run's hash covers its resolved parameters (minus ``num_threads``), its notebook's source
    hash, the dyckbook version, and the hashes of every run of an earlier stage, so the summary
    reruns whenever an experiment it reads changes. ``external`` (see :func:`external_runs`):
    published runs of other profiles that this profile reads but does not run; they count as
    inputs of every later stage too, so the chapters rerun when, say, the full grid appears.
    """
    nb_hash: dict[Path, str] = {}
    own: dict[str, str] = {}
    for spec in specs:
        if spec.notebook.path not in nb_hash:
            nb_hash[spec.notebook.path] = notebook_source_hash(spec.notebook.path)
        own[spec.name] = _digest({
            "params": {k: v for k, v in spec.params.items() if k not in UNHASHED},
            "notebook": nb_hash[spec.notebook.path],
            "dyckbook": __version__,
        })
    out: dict[str, str] = {}
    for spec in specs:
        inputs = {s.name: own[s.name] for s in specs if s.stage < spec.stage}
        inputs.update({name: e["hash"] for name, e in (external or {}).items()
                       if e["stage"] < spec.stage})
        out[spec.name] = own[spec.name] if not inputs else _digest(
            {"own": own[spec.name], "inputs": inputs})
    return out


def external_runs(manifest: Manifest, profile: str,
                  root: str | os.PathLike[str] | None = None) -> dict[str, dict[str, Any]]:
    """Published runs that ``profile`` excludes by name but its chapters may read.

    A profile's ``exclude`` list names runs it never runs (the full ablation grid, hours on a
    CPU, has its own profile). When such a run has been published by another profile (its
    record ok, its notebook present), it is listed in this profile's index and its hash feeds
    the later stages; runs the profile merely does not list (other profiles' extra seeds) are
    not carried over.

    Returns:
        ``{run name: {"group", "notebook", "stage", "hash", "title", "profile"}}``.
    """
    prof = manifest.profiles[profile]
    include = prof.get("include")
    out: dict[str, dict[str, Any]] = {}
    for base, entry in manifest.runs.items():
        if include is not None and not any(fnmatch.fnmatchcase(base, p) for p in include):
            continue
        if not any(fnmatch.fnmatchcase(base, p) for p in prof.get("exclude") or []):
            continue
        nb = manifest.notebooks[entry["notebook"]]
        pattern = re.compile(rf"{re.escape(base)}(-s\d+)?" if entry["seeded"] else re.escape(base))
        for name in R.iter_ok_runs(nb.group, root):
            record = R.read_run_record(nb.group, name, root) or {}
            if pattern.fullmatch(name) and record.get("hash"):
                out[name] = {"group": nb.group, "notebook": nb.key, "stage": nb.stage,
                             "hash": record["hash"], "title": nb.title,
                             "profile": record.get("profile")}
    return out


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


# ----------------------------------------------------------------------------------- status


def run_status(spec: RunSpec, expected_hash: str, root: Path) -> str:
    """``ok``, ``stale`` (parameters/notebook/version changed), ``failed``, ``blocked`` or ``missing``."""
    record = R.read_run_record(spec.group, spec.name, root)
    if record is None:
        return "missing"
    status = record.get("status")
    if status != "ok":
        return str(status)
    if not R.run_notebook_path(spec.group, spec.name, root).is_file():
        return "missing"
    return "ok" if record.get("hash") == expected_hash else "stale"


def list_runs(profile: str = "cpu", manifest: str | os.PathLike[str] | None = None,
              out_root: str | os.PathLike[str] | None = None,
              echo: Callable[[str], None] = print) -> int:
    """Print the runs of a profile: status, last duration, and every resolved parameter.

    Returns:
        0 (listing is not a check; statuses are for reading).
    """
    root = _root(out_root)
    man = load_manifest(manifest if manifest is not None else default_manifest())
    specs = resolve_profile(man, profile)
    hashes = compute_hashes(specs, external_runs(man, profile, root))
    desc = " ".join(str(man.profiles[profile].get("description", "")).split())
    echo(f"profile {profile}: {len(specs)} runs" + (f" - {desc}" if desc else ""))
    echo(f"output root: {root}")
    width = max([len(s.name) for s in specs] + [3])
    nbw = max([len(s.notebook.key) for s in specs] + [8])
    echo(f"{'run':<{width}}  {'notebook':<{nbw}}  {'status':<7}  {'last':>8}  finished")
    counts: dict[str, int] = {}
    for spec in specs:
        status = run_status(spec, hashes[spec.name], root)
        if not spec.notebook.path.is_file():
            status = "missing"
        counts[status] = counts.get(status, 0) + 1
        record = R.read_run_record(spec.group, spec.name, root) or {}
        dur = record.get("duration_s")
        last = f"{dur:.1f}s" if isinstance(dur, (int, float)) else "-"
        finished = str(record.get("finished", "-"))[:19]
        echo(f"{spec.name:<{width}}  {spec.notebook.key:<{nbw}}  {status:<7}  {last:>8}  "
             f"{finished}")
        if not spec.notebook.path.is_file():
            echo(f"    (notebook source not found: {_rel(spec.notebook.path, root)})")
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in spec.params.items())
        echo(textwrap.fill(shown, width=100, initial_indent="    ", subsequent_indent="    ",
                           break_on_hyphens=False))
    echo("totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0


# ----------------------------------------------------------------------------------- running


def run(profile: str = "cpu", only: Sequence[str] | None = None, jobs: int = 1,
        force: bool = False, manifest: str | os.PathLike[str] | None = None,
        out_root: str | os.PathLike[str] | None = None,
        echo: Callable[[str], None] | None = None) -> int:
    """Execute the runs of a profile with papermill and publish the successful ones.

    Args:
        profile: manifest profile (``smoke``, ``cpu``, ``thesis``, ...).
        only: run names, base run names (all seeds), notebook keys, or glob patterns; None = all.
        jobs: parallel processes; 0 means one per CPU core. Each run gets
            ``num_threads = max(1, cores // jobs)`` (also as OMP/MKL/OpenBLAS thread limits).
        force: rerun even runs whose hash is unchanged.
        manifest: manifest path; default: the source repository's ``notebooks/experiments.yml``.
        out_root: output root (``book/runs``, ``book/results`` go below it); default
            ``$DYCKBOOK_ROOT`` or the repository root. It is also the kernels' working directory.
        echo: where progress lines go; default: stdout (through tqdm when stdout is a TTY).

    Returns:
        0 if every selected run succeeded or was up to date, 1 if any failed or was blocked.

    Raises:
        ValueError: unknown profile, an ``only`` pattern that matches nothing, or bad ``jobs``.
    """
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 0:
        raise ValueError(f"jobs must be an integer >= 0, got {jobs!r}")
    root = _root(out_root)
    man = load_manifest(manifest if manifest is not None else default_manifest())
    specs = resolve_profile(man, profile)
    external = external_runs(man, profile, root)
    hashes = compute_hashes(specs, external)
    selected = select_runs(specs, only, profile)
    cores = _cores()
    jobs = jobs or cores
    threads = max(1, cores // jobs)
    _write_index(root, profile, man, specs, hashes, external)

    todo: list[RunSpec] = []
    skipped: list[str] = []
    for spec in selected:
        if not force and run_status(spec, hashes[spec.name], root) == "ok":
            skipped.append(spec.name)
        else:
            todo.append(spec)

    bar = None
    if echo is None:
        if sys.stdout.isatty() and todo:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(todo), unit="run", desc=f"{profile}", leave=True)
            echo = bar.write
        else:
            echo = _print_flush
    echo(f"profile {profile}: {len(selected)} selected, {len(skipped)} up to date, "
         f"{len(todo)} to run with {jobs} job(s) x {threads} thread(s); output root {root}")
    for name in skipped:
        echo(f"[skip] {name} (up to date)")

    t0 = time.perf_counter()
    outcomes: list[dict[str, Any]] = []
    blocked: list[RunSpec] = []
    done = 0
    for stage in sorted({s.stage for s in todo}):
        batch = [s for s in todo if s.stage == stage]
        if any(o["status"] != "ok" for o in outcomes):
            blocked.extend(batch)
            continue
        tasks = [_task(s, hashes[s.name], root, threads, profile) for s in batch]
        for outcome in _execute_all(
                tasks, jobs, lambda t: echo(f"[start] {t['name']} ({t['notebook_key']})")):
            done += 1
            outcomes.append(outcome)
            tag = "ok" if outcome["status"] == "ok" else "FAIL"
            echo(f"[{tag}] {outcome['name']} {outcome['duration_s']:.1f} s "
                 f"({done}/{len(todo)})")
            if bar is not None:
                bar.update(1)
    for spec in blocked:
        _unpublish(spec.group, spec.name, root, keep=spec.notebook.keep)
        R.write_run_record(spec.group, spec.name, {
            "status": "blocked", "run": spec.name, "notebook": spec.notebook.key,
            "profile": profile, "hash": None, "params": spec.params,
            "finished": _now(), "reason": "an earlier stage failed"}, root)
        echo(f"[block] {spec.name} (not run: an earlier stage failed)")
    if bar is not None:
        bar.close()

    failed = [o for o in outcomes if o["status"] != "ok"]
    n_ok = len(outcomes) - len(failed)
    echo(f"done in {time.perf_counter() - t0:.1f} s: {n_ok} ok, {len(skipped)} skipped, "
         f"{len(failed)} failed, {len(blocked)} blocked")
    for o in failed:
        echo(f"FAILED {o['name']}: {describe_error(o['error'])}")
        echo(f"    failed notebook: {o['failed_notebook']}")
    if failed or blocked:
        return 1
    return 0


def describe_error(error: Mapping[str, Any]) -> str:
    """One line naming the failing cell (index, first source line) and the exception."""
    exc = f"{error.get('ename')}: {error.get('evalue')}"
    if error.get("kind") == "cell":
        return (f"cell {error.get('cell_index')} of {error.get('source_notebook')} "
                f"[{error.get('source_line')}] raised {exc}")
    return exc


def _task(spec: RunSpec, hash_: str, root: Path, threads: int, profile: str) -> dict[str, Any]:
    params = dict(spec.params)
    params["num_threads"] = threads
    return {"name": spec.name, "group": spec.group, "notebook_key": spec.notebook.key,
            "source": str(spec.notebook.path), "root": str(root), "params": params,
            "outputs": list(spec.notebook.outputs), "keep": list(spec.notebook.keep),
            "hash": hash_, "threads": threads,
            "profile": profile, "source_rel": _rel(spec.notebook.path, root)}


def _execute_all(tasks: list[dict[str, Any]], jobs: int,
                 on_start: Callable[[dict[str, Any]], None]) -> Iterable[dict[str, Any]]:
    if jobs == 1 or len(tasks) <= 1:
        for task in tasks:
            on_start(task)
            yield execute_task(task)
        return
    # spawn: a clean interpreter per worker (no inherited threads or event loops). At most
    # `jobs` tasks are submitted at a time, so a "[start]" line means the run really started.
    ctx = multiprocessing.get_context("spawn")
    pending = list(tasks)
    with cf.ProcessPoolExecutor(max_workers=min(jobs, len(tasks)), mp_context=ctx) as pool:
        running: set[cf.Future[dict[str, Any]]] = set()
        while pending or running:
            while pending and len(running) < jobs:
                task = pending.pop(0)
                on_start(task)
                running.add(pool.submit(execute_task, task))
            finished, running = cf.wait(running, return_when=cf.FIRST_COMPLETED)
            for future in finished:
                yield future.result()


def execute_task(task: dict[str, Any]) -> dict[str, Any]:
    """Execute one run (in this process) and publish it or record its failure.

    Args:
        task: as built by the runner: name, group, source, root, params, outputs, hash, threads,
            profile, source_rel.

    Returns:
        ``{"name", "status": "ok"|"failed", "duration_s", "error", "failed_notebook"}``.
    """
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    root = Path(task["root"])
    group, name = task["group"], task["name"]
    published = R.run_notebook_path(group, name, root)
    rdir = R.run_results_dir(group, name, root)
    # Unpublish first: from here on, an interruption leaves "missing", never stale-but-ok.
    _unpublish(group, name, root, keep=task.get("keep", ()))
    rdir.mkdir(parents=True, exist_ok=True)
    tmp = rdir / _EXECUTING
    threads = str(task["threads"])
    env_over = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
                "OPENBLAS_NUM_THREADS": threads, R.ROOT_ENV: str(root), "MPLBACKEND": "Agg",
                "PYDEVD_DISABLE_FILE_VALIDATION": "1"}
    saved = {k: os.environ.get(k) for k in env_over}
    os.environ.update(env_over)  # the kernel inherits this environment
    started = _now()
    t0 = time.perf_counter()
    error: dict[str, Any] | None = None
    try:
        pm.execute_notebook(task["source"], str(tmp), parameters=task["params"],
                            kernel_name=KERNEL, progress_bar=False, log_output=False,
                            cwd=str(root))
    except PapermillExecutionError as exc:
        error = {"kind": "cell", "cell_index": exc.cell_index, "exec_count": exc.exec_count,
                 "ename": exc.ename, "evalue": exc.evalue,
                 "source_line": _first_line(exc.source)}
        error["cell_index"] = _source_cell_index(tmp, exc.cell_index)
        error["source_notebook"] = task["source_rel"]
    except Exception as exc:  # noqa: BLE001 - any other failure is this run's failure
        error = {"kind": "runner", "ename": type(exc).__name__, "evalue": str(exc)}
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    duration = time.perf_counter() - t0
    if error is None:
        missing = [o for o in task["outputs"] if not (rdir / o).is_file()]
        if missing:
            error = {"kind": "outputs", "ename": "MissingOutputs",
                     "evalue": f"the run finished without writing {missing} to {rdir}"}
    record = {"run": name, "notebook": task["notebook_key"], "source": task["source_rel"],
              "profile": task["profile"], "params": task["params"], "hash": task["hash"],
              "dyckbook": __version__, "started": started, "finished": _now(),
              "duration_s": round(duration, 3), "num_threads": task["threads"]}
    failed_nb = None
    if error is None:
        prepare_for_book(tmp, name=name, group=group, params=task["params"],
                         profile=task["profile"], source=task["source_rel"])
        published.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, published)
        R.write_run_record(group, name, {**record, "status": "ok"}, root)
    else:
        partial = rdir / R.PARTIAL_DIR
        partial.mkdir(exist_ok=True)
        for entry in list(rdir.iterdir()):
            if entry.name not in (R.PARTIAL_DIR, _EXECUTING, *task.get("keep", ())):
                os.replace(entry, partial / entry.name)
        if not any(partial.iterdir()):
            partial.rmdir()
        if tmp.exists():
            failed_nb = rdir / R.FAILED_NOTEBOOK
            os.replace(tmp, failed_nb)
        R.write_run_record(group, name, {**record, "status": "failed", "hash": None,
                                         "error": error}, root)
    return {"name": name, "status": "ok" if error is None else "failed",
            "duration_s": duration, "error": error,
            "failed_notebook": _rel(failed_nb, root) if failed_nb else None}


def prepare_for_book(path: str | os.PathLike[str], *, name: str, group: str,
                     params: Mapping[str, Any], profile: str, source: str) -> None:
    """Make an executed notebook read well as a book page: parameters visible, plumbing hidden.

    - Both parameter cells (the notebook's defaults and papermill's injected values) are removed
      from the page (tag ``remove-cell``); the resolved parameters of the run appear instead as a
      table in a collapsible block under the title, with the run name, profile and source.
    - A seeded run's title gets the run name (``...-s3``), so the pages of its seeds are told apart.
    - An experiment run's code cells are collapsed (tag ``hide-input``): outputs stay visible and
      the code is one click away. Chapter notebooks keep their code visible (it is part of the
      argument).
    The notebook file itself is rewritten in place (still a valid, executed notebook).
    """
    import nbformat

    nb = nbformat.read(str(path), as_version=4)
    is_chapter = group == R.CHAPTERS_GROUP
    for cell in nb.cells:
        tags = list(cell.metadata.get("tags", []))
        if "parameters" in tags or "injected-parameters" in tags:
            tags.append("remove-cell")
        elif cell.cell_type == "code" and not is_chapter and not any(
                t.startswith(("remove-", "hide-")) for t in tags):
            tags.append("hide-input")
        if tags:
            cell.metadata["tags"] = tags
    if not is_chapter:
        rows = "\n".join(f"| `{key}` | `{_fmt(value)}` |" for key, value in params.items()
                         if key != "num_threads")
        block = (f":::{{dropdown}} Parameters of run `{name}` (profile `{profile}`)\n"
                 f"Executed from `{source}` by `python -m dyckbook run --profile {profile}`.\n\n"
                 f"| parameter | value |\n|---|---|\n{rows}\n:::\n")
        first = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), None)
        if first is not None and re.search(r"-s\d+$", name):  # one page per seed: say which
            lines = nb.cells[first].source.split("\n")
            if lines and lines[0].startswith("# "):
                lines[0] = f"{lines[0]} · `{name}`"
                nb.cells[first].source = "\n".join(lines)
        nb.cells.insert(0 if first is None else first + 1,
                        nbformat.v4.new_markdown_cell(block, metadata={"tags": ["run-parameters"]}))
    nbformat.write(nb, str(path))


def _unpublish(group: str, name: str, root: Path, keep: Iterable[str] = ()) -> None:
    # Remove the published notebook and the results directory, except the ``keep`` files (a
    # resume cache): those stay where the next execution of the run will look for them.
    R.run_notebook_path(group, name, root).unlink(missing_ok=True)
    rdir = R.run_results_dir(group, name, root)
    keep = set(keep)
    if not keep:
        shutil.rmtree(rdir, ignore_errors=True)
        return
    if not rdir.is_dir():
        return
    for entry in list(rdir.iterdir()):
        if entry.name in keep and entry.is_file():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _source_cell_index(executed: Path, index: int) -> int:
    # papermill counts cells of the executed notebook, which has the injected-parameters cell
    # inserted; report the index in the source notebook the reader will open.
    try:
        cells = json.loads(executed.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError):
        return index
    injected = [i for i, cell in enumerate(cells)
                if "injected-parameters" in cell.get("metadata", {}).get("tags", [])]
    return index - 1 if injected and injected[0] < index else index


def _write_index(root: Path, profile: str, man: Manifest, specs: Sequence[RunSpec],
                 hashes: Mapping[str, str],
                 external: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    # The summary reads only runs listed here with a matching hash, so results left over from
    # another profile (same run name, other parameters) never leak into it. Runs this profile
    # excludes by name but another profile published (``external_runs``) are listed with the
    # profile that made them.
    runs = {s.name: {"group": s.group, "notebook": s.notebook.key, "stage": s.stage,
                     "hash": hashes[s.name], "title": s.notebook.title} for s in specs}
    runs.update({name: dict(e) for name, e in (external or {}).items() if name not in runs})
    index = {"profile": profile, "manifest": str(man.path), "written": _now(), "runs": runs}
    R.write_json(root / INDEX_FILE, index, sort_keys=False)  # keep manifest order


# ----------------------------------------------------------------------------------- helpers


def _root(out_root: str | os.PathLike[str] | None) -> Path:
    return Path(out_root).resolve() if out_root is not None else R.repo_root()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS/Windows
        return os.cpu_count() or 1


def _mapping(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, got {type(value).__name__}")  # noqa: TRY004
    return value


def _params(value: Any, where: str) -> dict[str, Any]:
    params = _mapping(value, where) or {}
    for key, v in params.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise ValueError(f"{where}: parameter names must be identifiers, got {key!r}")
        if not isinstance(v, _SCALARS):
            raise ValueError(f"{where}.{key} must be a flat scalar, got {type(v).__name__}")  # noqa: TRY004
    return params


def _check_declared(params: Mapping[str, Any], nb: NotebookEntry, where: str) -> None:
    unknown = set(params) - set(nb.params)
    if unknown:
        raise ValueError(f"{where}: notebook {nb.key!r} declares no parameter(s) {sorted(unknown)}")


def _seeds_for(prof: Mapping[str, Any], base: str, where: str) -> list[int]:
    seeds = prof.get("seeds", [0])
    if isinstance(seeds, dict):
        if "default" not in seeds:
            raise ValueError(f"{where}.seeds: a mapping needs a 'default' entry")
        seeds = seeds.get(base, seeds["default"])
    if (not isinstance(seeds, list) or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds)
            or len(set(seeds)) != len(seeds)):
        raise ValueError(f"{where}.seeds must be a non-empty list of distinct ints >= 0, "
                         f"got {seeds!r}")
    return seeds


def _first_line(source: str | None) -> str:
    for line in (source or "").splitlines():
        if line.strip():
            return line.strip()[:80]
    return ""


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, str) and (" " in value or not value) else str(value)


def _rel(path: Path | None, root: Path) -> str:
    if path is None:
        return ""
    try:
        return Path(path).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(path)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _print_flush(line: str) -> None:
    print(line, flush=True)
