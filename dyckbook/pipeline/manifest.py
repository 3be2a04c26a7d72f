"""The run manifest (``notebooks/experiments.yml``): its notebooks, runs and profiles, checked
against the notebooks' parameters cells and resolved into the runs of a profile."""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dyckbook.experiment import results as R
from dyckbook.pipeline.layout import RESULTS_DIR

__all__ = ["CHAPTERS_GROUP", "INJECTED", "Manifest", "Notebook", "READS", "RESULTS_PLACEHOLDER",
           "Run", "load_manifest", "resolve_profile", "select_runs"]

INJECTED = ("run_name", "results_dir", "num_threads")  # set by the runner, declared by notebooks
CHAPTERS_GROUP = "chapters"
RESULTS_PLACEHOLDER = "{results}"  # in manifest params: this profile's book/results/<profile>
MANIFEST_VERSION = 2
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SCALARS = (str, int, float, bool, type(None))
READS = ("named", "every")  # manifest `reads`: the runs a run depends on (see runner.run_inputs)


@dataclass(frozen=True)
class Notebook:
    """A notebook (or chapter) of the manifest, and what its ``parameters`` cell declares."""

    key: str  # manifest key: a notebook stem or a chapter name
    path: Path  # absolute path of the source notebook
    title: str  # title in listings
    group: str  # book/runs/<group>/: the key, or "chapters" for chapters
    stage: int  # every run of a stage finishes before the next stage starts
    outputs: tuple[str, ...]  # files a successful run must have written into results_dir
    keep: tuple[str, ...]  # files of results_dir that survive a rerun (resume caches; a
    # records file brings its companion, ``results.baselines_path``)
    defaults: dict[str, Any]  # declared parameter -> default (a literal of the parameters cell)
    reads: str = "named"  # "named" (runs its parameters name) or "every" (runner.run_inputs)
    # what `dyckbook verify` accepts: {"abs": x, "rel": y, "ignore": [names]} (verify.Tolerance)
    tolerance: dict[str, Any] | None = None


@dataclass(frozen=True)
class Run:
    """One run of a profile with its resolved parameters."""

    name: str  # page and folder name, unique in the manifest
    notebook: Notebook
    params: dict[str, Any]  # every declared parameter, run_name and results_dir included
    profile: str = ""  # the profile whose tree it publishes into


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
            entry = _entry(entry, where, {"path", "title", "stage", "outputs", "keep", "reads",
                                          "tolerance"}, {"path"})
            if not isinstance(key, str) or not _NAME.fullmatch(key) or key in notebooks:
                raise ValueError(f"{where}: keys must be unique plain names, got {key!r}")
            stage = entry.get("stage", 0 if chapter else 1)
            if type(stage) is not int or stage < 0:
                raise ValueError(f"{where}.stage must be an int >= 0, got {stage!r}")
            if entry.get("reads", "named") not in READS:
                raise ValueError(f"{where}.reads must be one of {list(READS)}, got "
                                 f"{entry['reads']!r}")
            path = (mpath.parent / str(entry["path"])).resolve()
            # a records file's companion (its baselines, written once each) is kept with it
            keep = tuple(name for k in _names(entry.get("keep", []), f"{where}.keep")
                         for name in R.record_files(k))
            notebooks[key] = Notebook(
                key, path, str(entry.get("title", key)), CHAPTERS_GROUP if chapter else key, stage,
                _names(entry.get("outputs", []), f"{where}.outputs"), keep,
                _declared(path, where), entry.get("reads", "named"),
                _tolerance(entry.get("tolerance"), f"{where}.tolerance"))
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
    import papermill  # deferred: optional dependency papermill

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


def _tolerance(value: Any, where: str) -> dict[str, Any] | None:
    """A notebook's verify tolerance: ``abs`` and ``rel`` numbers >= 0, ``ignore`` names."""
    if value is None:
        return None
    value = _entry(value, where, {"abs", "rel", "ignore"})
    for key in ("abs", "rel"):
        v = value.get(key, 0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"{where}.{key} must be a number >= 0, got {v!r}")
    return {"abs": float(value.get("abs", 0)), "rel": float(value.get("rel", 0)),
            "ignore": _names(value.get("ignore", []), f"{where}.ignore", "patterns")}


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
        if name == "device":  # one device for a whole build: dyckbook run --device
            raise ValueError(f"{where}: 'device' is the build's (dyckbook run --device, make "
                             "book DEVICE=...), never set here")
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
    ``results_dir`` (``num_threads`` is set at execution). ``{results}`` in a string value
    stands for the profile's results tree, ``book/results/<profile>``.
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
            tree = (RESULTS_DIR / profile).as_posix()
            resolved = {k: v.replace(RESULTS_PLACEHOLDER, tree) if isinstance(v, str) else v
                        for k, v in resolved.items()}
            resolved.update(run_name=name, results_dir=f"{tree}/{nb.group}/{name}")
            out.append(Run(name, nb, resolved, profile))
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


