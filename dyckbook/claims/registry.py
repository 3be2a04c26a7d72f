"""Pre-registration: the recipe of every verdict-bearing run, fixed before its results exist.

``notebooks/registrations.yml`` is an append-only list. Each entry registers one run of one
profile of ``notebooks/experiments.yml``: its resolved parameters (data, model, training, seeds,
test sets; the runner's execution settings left out), the rules of ``verdicts`` it feeds and the
interval method, under one digest, with the time it was registered and why.

The digest is the one key of ``recipe`` (kind ``registration``): the run, its recipe with what
its named sets expand to, the rules' text and the interval method, under
``version.RESULTS_VERSION``. So a registration fixes what a set *is*, not only its
parameters: a change that moves a number of the data, the negatives or the stack-free rules
bumps the results version (the golden records insist) and leaves every run read under the
registration unjudged until a new one; a refactor that moves no number leaves it judged.

A registration made under the earlier rule (a digest over the code of the data, negatives and
rules modules) was carried over once by an entry with ``of``: the same run and recipe, keyed
under the one rule, verified against the old digest at the commit that wrote it. Its time is
the original's (:func:`check`): carrying a key over registers nothing new.

A verdict reads a run only if the run's own ``run.json`` (its profile, name and parameters)
gives the digest of the latest registration of that run and profile, and the run finished after
that registration (:func:`check`; a record that does not say when it finished is not judged);
otherwise the claim is *not judged*. ``notebooks/design_history.yml`` records, beside the
registrations, every change to a rule or a set made after results existed (:func:`design`).
Changing a recipe or a rule is allowed: ``python -m dyckbook register --profile P --note
WHY`` appends a registration, and the book's history table shows it.
``tests/test_registry.py`` fails while any profile's recipe differs from its latest
registration.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from dyckbook.claims.verdicts import RULES
from dyckbook.experiment import recipe
from dyckbook.experiment import results as R
from dyckbook.experiment.intervals import METHOD

__all__ = ["DesignChange", "Registration", "blind", "check", "claims_of", "current", "design",
           "digest", "first_commit",
           "load", "post_hoc", "register", "registered_at", "registry_path", "verdict_runs"]



@dataclass(frozen=True)
class Registration:
    """One registered recipe."""

    id: int  # 1, 2, ... in the order registered
    registered: str  # ISO time (UTC)
    profile: str
    run: str  # run name in notebooks/experiments.yml
    claims: tuple[str, ...]  # the rules it feeds
    digest: str  # :func:`digest` of run, recipe, rules and interval method
    recipe: dict[str, Any]  # the resolved parameters, execution settings left out
    note: str = ""  # why it was registered (a new registration says what changed)
    of: int | None = None  # the registration whose key this entry carried over to the one rule


def registry_path() -> Path:
    """``notebooks/registrations.yml`` of the repository."""
    return R.source_root() / "notebooks" / "registrations.yml"


def verdict_runs() -> tuple[str, ...]:
    """The runs some rule reads, in ``RULES`` order."""
    return tuple(dict.fromkeys(r.run for r in RULES))


def claims_of(run: str) -> tuple[str, ...]:
    """The claims whose rule reads ``run``."""
    return tuple(r.claim for r in RULES if r.run == run)


def digest(run: str, params: Mapping[str, Any]) -> str:
    """The registration key (``recipe.key``): the run's name, its recipe with what its named
    sets expand to, the text of every rule it feeds and the interval method, under the
    results version."""
    return recipe.key("registration", _content(run, params))


def _content(run: str, params: Mapping[str, Any]) -> dict[str, Any]:
    rules = [r.text() for r in RULES if r.run == run]
    return {"run": run, "recipe": recipe.expanded(params), "rules": rules, "interval": METHOD}


def write(path: Path, entries: Sequence[Registration]) -> None:
    rows = [{k: v for k, v in {**asdict(r), "claims": list(r.claims)}.items()
             if not (k == "of" and v is None)} for r in entries]
    path.write_text("# Pre-registered recipes of the verdict-bearing runs (append-only; "
                    "python -m dyckbook register).\n"
                    + yaml.safe_dump(rows, sort_keys=False, width=100), encoding="utf-8")


def load(path: str | Path | None = None) -> list[Registration]:
    """Every registration, oldest first (an empty list if the file does not exist)."""
    path = Path(path) if path is not None else registry_path()
    if not path.is_file():
        return []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    if not isinstance(raw, list):
        raise ValueError(f"{path}: expected a list of registrations, got {type(raw).__name__}")
    out = []
    for entry in raw:
        out.append(Registration(**{**entry, "claims": tuple(entry["claims"])}))
    if [r.id for r in out] != list(range(1, len(out) + 1)):
        raise ValueError(f"{path}: registration ids must be 1, 2, ... in order")
    return out


def current(registrations: Sequence[Registration], profile: str,
            run: str) -> Registration | None:
    """The latest registration of ``run`` in ``profile``."""
    found = [r for r in registrations if r.profile == profile and r.run == run]
    return found[-1] if found else None


def register(profile: str, runs: Mapping[str, Mapping[str, Any]], note: str,
             path: str | Path | None = None, now: str | None = None) -> list[Registration]:
    """Append a registration for every verdict-bearing run of ``profile`` whose digest differs
    from its latest registration.

    Args:
        profile: the profile the parameters were resolved for.
        runs: ``{run name: resolved parameters}`` (``runner.resolve_profile``); runs no rule
            reads are ignored.
        note: why (required: the history table prints it).
        path: the registry (default :func:`registry_path`).
        now: the time to record (default: now, UTC).

    Returns:
        The new registrations (empty if every recipe is already registered).
    """
    if not isinstance(note, str) or not note.strip():
        raise ValueError(f"note must say why the recipe is registered, got {note!r}")
    path = Path(path) if path is not None else registry_path()
    existing = load(path)
    stamp = now or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    new = []
    for run in verdict_runs():
        if run not in runs:
            continue
        d = digest(run, runs[run])
        latest = current(existing + new, profile, run)
        if latest is None or latest.digest != d:
            new.append(Registration(len(existing) + len(new) + 1, stamp, profile, run,
                                    claims_of(run), d, recipe.recipe(runs[run]), note.strip()))
    if new:
        write(path, existing + new)
    return new


def check(run_record: Mapping[str, Any], registrations: Sequence[Registration],
          changes: Sequence[DesignChange] | None = None) -> tuple[Registration | None, str]:
    """Whether a run's results may be judged.

    Args:
        run_record: the run's ``run.json`` (``profile``, ``run``, ``params``, ``finished``).
        registrations: :func:`load`.

    Returns:
        ``(registration, problem)``: the latest registration of the run's profile and name, and
        "" if the run's digest is that registration's and it finished after it (or before it,
        where the design history (``changes``, default :func:`design`) names the registration
        among those judged after their results: :func:`post_hoc`), else why not.
    """
    profile, run = run_record.get("profile"), run_record.get("run")
    latest = current(registrations, str(profile), str(run))
    if latest is None:
        return None, f"run `{run}` of profile `{profile}` has no registered recipe"
    content = _content(str(run), run_record.get("params") or {})
    if recipe.check(latest.digest, "registration", content):
        d = recipe.key("registration", content)
        return latest, (f"run `{run}` ({profile}) has recipe digest {d}, not the registered "
                        f"{latest.digest} (registration {latest.id})")
    finished = str(run_record.get("finished") or "")
    if not finished:
        return latest, f"run `{run}` ({profile}) does not say when it finished"
    fixed = registered_at(latest, registrations)
    if _utc(finished) < _utc(fixed) and post_hoc(latest, changes) is None:
        return latest, (f"run `{run}` ({profile}) finished {finished}, before its registration "
                        f"{latest.of or latest.id} ({fixed})")
    return latest, ""


def registered_at(registration: Registration, registrations: Sequence[Registration]) -> str:
    """When ``registration``'s recipe was fixed: its own time, or for a carried-over key
    (``of``) the time of the registration it carries over."""
    if registration.of is None:
        return registration.registered
    return registrations[registration.of - 1].registered


def _utc(stamp: str) -> datetime:
    t = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class DesignChange:
    """A change to a rule or a set made when results that bear on it already existed."""

    date: str  # ISO time (UTC) of the change
    commit: str  # the commit that made it
    change: str  # what changed
    seen: str  # which results existed then and what they showed
    registered: str  # the registration (ids) the changed design entered, and when
    #: the registrations whose runs finished before them and are still judged, not blind: the
    #: registration says what was seen (an entry without them names none)
    judged_after: tuple[int, ...] = ()


def design(path: str | Path | None = None) -> list[DesignChange]:
    """``notebooks/design_history.yml``: every rule or set designed after results, oldest
    first."""
    path = Path(path) if path is not None else R.source_root() / "notebooks" / \
        "design_history.yml"
    if not path.is_file():
        return []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    fields = set(DesignChange.__dataclass_fields__)
    needed = fields - {"judged_after"}
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or not needed <= set(entry) <= fields:
            raise ValueError(f"{path}: entry {i} must have the keys {sorted(needed)} (and may "
                             f"have judged_after), got {entry!r:.120}")
        ids = entry.get("judged_after", [])
        if not isinstance(ids, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                for x in ids):
            raise ValueError(f"{path}: entry {i}: judged_after must be a list of registration "
                             f"ids, got {ids!r}")
        out.append(DesignChange(**{k: str(v) for k, v in entry.items() if k != "judged_after"},
                                judged_after=tuple(ids)))
    return out


def post_hoc(registration: Registration, changes: Sequence[DesignChange] | None = None
             ) -> DesignChange | None:
    """The design change that names ``registration`` (or the one it carries over, ``of``)
    among the registrations judged after their results: its verdicts are judged, not blind."""
    ids = {registration.id, registration.of} - {None}
    for change in design() if changes is None else changes:
        if ids & set(change.judged_after):
            return change
    return None


# ------------------------------------------------------------------ blindness, from git
def first_commit(paths: Sequence[str], root: str | Path | None = None) -> str | None:
    """When any of ``paths`` (a run's results folder, its resume folder) first entered git:
    the committer time (ISO) of the earliest commit that touched one, or None where none did
    or ``root`` is no git checkout."""
    where = Path(root) if root is not None else R.source_root()
    done = subprocess.run(["git", "-C", str(where), "log", "--reverse", "--format=%cI", "--",
                           *paths], capture_output=True, text=True, check=False)
    lines = done.stdout.split() if done.returncode == 0 else []
    return lines[0] if lines else None


def blind(registration: Registration, registrations: Sequence[Registration],
          first_result: str | None, changes: Sequence[DesignChange] | None = None
          ) -> tuple[bool, str]:
    """Whether ``registration`` was written blind, and if not, why: a result of its run was
    in git before its recipe was fixed (``first_result``: :func:`first_commit` of the run's
    folders), the design history names it among those judged after their results
    (:func:`post_hoc`), or its own note says "not blind"."""
    fixed = registered_at(registration, registrations)
    why = []
    if first_result and _utc(first_result) < _utc(fixed):
        why.append(f"a result of its run was committed at {first_result}, before it ({fixed})")
    change = post_hoc(registration, changes)
    if change is not None:
        why.append(f"the design history judges it after its results ({change.commit})")
    if "not blind" in registration.note.lower():
        why.append("its note says it is not blind")
    return not why, "; ".join(why)
