"""Pre-registration: the recipe of every verdict-bearing run, fixed before its results exist.

``notebooks/registrations.yml`` is an append-only list. Each entry registers one run of one
profile of ``notebooks/experiments.yml``: its resolved parameters (data, model, training, seeds,
test sets; the runner's execution settings left out), the rules of ``verdicts`` it feeds and the
interval method, under one digest, with the time it was registered and why.

The digest also covers the code that makes the data, the negatives and the stack-free rules
(:data:`CODE_ROOTS`, through ``cache.code_digest``: the same syntax-only reading the data
cache keys use), so a registration fixes what a set *is*, not only its parameters: an edit to
the negatives after a registration makes every run read under it unjudged until a new one.

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

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from dyckbook import cache
from dyckbook import results as R
from dyckbook.intervals import METHOD
from dyckbook.pipeline.verdicts import RULES

__all__ = ["CODE_ROOTS", "EXECUTION", "DesignChange", "Registration", "check", "claims_of",
           "code_digest", "current", "design", "digest", "load", "recipe", "register",
           "registry_path", "verdict_runs"]

#: the code a registration covers: what makes the data and the negatives, and the rules scored
#: beside the models (every package module these import, wherever it lies)
CODE_ROOTS = ("dyckbook.protocol", "dyckbook.completion", "dyckbook.baselines",
              "dyckbook.adversary")
#: parameters that say where and how fast a run executes, not what it computes
EXECUTION = frozenset({"run_name", "results_dir", "num_threads", "workers", "scheduler",
                       "device"})


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


def registry_path() -> Path:
    """``notebooks/registrations.yml`` of the repository."""
    return R.source_root() / "notebooks" / "registrations.yml"


def verdict_runs() -> tuple[str, ...]:
    """The runs some rule reads, in ``RULES`` order."""
    return tuple(dict.fromkeys(r.run for r in RULES))


def claims_of(run: str) -> tuple[str, ...]:
    """The claims whose rule reads ``run``."""
    return tuple(r.claim for r in RULES if r.run == run)


def recipe(params: Mapping[str, Any]) -> dict[str, Any]:
    """A run's parameters without its execution settings (:data:`EXECUTION`)."""
    return {k: params[k] for k in sorted(params) if k not in EXECUTION}


def code_digest() -> str:
    """The digest of :data:`CODE_ROOTS`' code (``cache.code_digest``)."""
    return cache.code_digest(CODE_ROOTS)


def digest(run: str, params: Mapping[str, Any], code: str | None = None) -> str:
    """16 hex digits of SHA-256 over the run's name, recipe, the text of every rule it feeds,
    the interval method and the code that makes its data and its rules (``code``: default
    :func:`code_digest`)."""
    rules = [r.text() for r in RULES if r.run == run]
    payload = {"run": run, "recipe": recipe(params), "rules": rules, "interval": METHOD,
               "code": code if code is not None else code_digest()}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
                                    claims_of(run), d, recipe(runs[run]), note.strip()))
    if new:
        entries = [{**asdict(r), "claims": list(r.claims)} for r in existing + new]
        path.write_text("# Pre-registered recipes of the verdict-bearing runs (append-only; "
                        "python -m dyckbook register).\n"
                        + yaml.safe_dump(entries, sort_keys=False, width=100),
                        encoding="utf-8")
    return new


def check(run_record: Mapping[str, Any],
          registrations: Sequence[Registration]) -> tuple[Registration | None, str]:
    """Whether a run's results may be judged.

    Args:
        run_record: the run's ``run.json`` (``profile``, ``run``, ``params``, ``finished``).
        registrations: :func:`load`.

    Returns:
        ``(registration, problem)``: the latest registration of the run's profile and name, and
        "" if the run's digest is that registration's and it finished after it, else why not.
    """
    profile, run = run_record.get("profile"), run_record.get("run")
    latest = current(registrations, str(profile), str(run))
    if latest is None:
        return None, f"run `{run}` of profile `{profile}` has no registered recipe"
    d = digest(str(run), run_record.get("params") or {})
    if d != latest.digest:
        return latest, (f"run `{run}` ({profile}) has recipe digest {d}, not the registered "
                        f"{latest.digest} (registration {latest.id})")
    finished = str(run_record.get("finished") or "")
    if not finished:
        return latest, f"run `{run}` ({profile}) does not say when it finished"
    if _utc(finished) < _utc(latest.registered):
        return latest, (f"run `{run}` ({profile}) finished {finished}, before its registration "
                        f"{latest.id} ({latest.registered})")
    return latest, ""


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


def design(path: str | Path | None = None) -> list[DesignChange]:
    """``notebooks/design_history.yml``: every rule or set designed after results, oldest
    first."""
    path = Path(path) if path is not None else R.source_root() / "notebooks" / \
        "design_history.yml"
    if not path.is_file():
        return []
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    fields = set(DesignChange.__dataclass_fields__)
    out = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != fields:
            raise ValueError(f"{path}: entry {i} must have exactly the keys {sorted(fields)}, "
                             f"got {entry!r:.120}")
        out.append(DesignChange(**{k: str(v) for k, v in entry.items()}))
    return out
