"""``dyckbook verify``: recompute a published run in a scratch folder and compare it with its
publication, number by number.

The run is executed as the runner executes it (:func:`runner.execute`: papermill, its resolved
parameters, the published files of the runs it reads) but from nothing: no resume cache, no
run cache (``cache.RUN_ENV`` is emptied for its kernel). Everything it writes goes to a scratch
folder; the published tree is only read.

What is compared:

- every JSON and JSONL file of the results folder, value by value (numbers within the
  tolerance, other values equal, keys and lengths the same), a records file with the baseline
  scores its companion holds put back; not the files the manifest's ``keep`` names (resume
  caches: a resumed run's may hold its records in another order, or more lines than a run from
  nothing), whose numbers are compared where the page prints them;
- every glued text of the published page (the numbers the page prints), split into its numbers
  and the text between them: the text must be equal, the numbers within the tolerance;
- every other file byte for byte; a figure (``.png``, ``.svg``) that differs is reported but
  decides nothing, since the numbers drawn in it are checked where they are written.

A notebook declares its tolerance in the manifest (``tolerance: {abs, rel, ignore}``; default
exact): ``|a - b| <= abs + rel * max(|a|, |b|)``. ``ignore`` names glued texts, files or JSON
keys (glob patterns) that time or place the run; keys that do so everywhere
(:data:`IGNORED_KEYS`) are always ignored.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dyckbook.experiment import cache
from dyckbook.experiment import results as R
from dyckbook.pipeline import pages, runner
from dyckbook.pipeline.executors import cores
from dyckbook.pipeline.layout import PAGES_DIR, RESULTS_DIR, RUN_RECORD, RUNS_DIR

log = logging.getLogger(__name__)

__all__ = ["IGNORED_KEYS", "Difference", "Report", "Tolerance", "compare_files", "compare_text",
           "compare_values", "check_out", "glued_texts", "verify"]

#: JSON keys that time or place a run, never compared
IGNORED_KEYS = ("seconds", "*_seconds", "duration_s", "wall_s", "started", "finished", "date",
                "host", "machine", "commit", "load_average", "elapsed*")
FIGURES = (".png", ".svg")
_NUMBER = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")


@dataclass(frozen=True)
class Tolerance:
    """How far a recomputed number may be from the published one, and what is not compared."""

    abs: float = 0.0
    rel: float = 0.0
    ignore: tuple[str, ...] = ()

    @classmethod
    def of(cls, declared: Mapping[str, Any] | None) -> Tolerance:
        """From a manifest entry's ``tolerance`` (None: exact)."""
        d = declared or {}
        return cls(float(d.get("abs", 0.0)), float(d.get("rel", 0.0)), tuple(d.get("ignore", ())))

    def accepts(self, a: float, b: float) -> bool:
        return abs(a - b) <= self.abs + self.rel * max(abs(a), abs(b))

    def ignored(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in (*IGNORED_KEYS, *self.ignore))


@dataclass(frozen=True)
class Difference:
    """One compared item that is not equal: where, both values, and ``within`` or
    ``different``."""

    where: str
    published: Any
    recomputed: Any
    verdict: str


@dataclass
class Report:
    """Counts of equal and ignored items, and every item that is not equal."""

    run: str
    equal: int = 0
    ignored: int = 0
    differences: list[Difference] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)  # figure -> "equal" or "different"

    @property
    def within(self) -> list[Difference]:
        return [d for d in self.differences if d.verdict == "within"]

    @property
    def different(self) -> list[Difference]:
        return [d for d in self.differences if d.verdict == "different"]

    @property
    def ok(self) -> bool:
        return not self.different

    def add(self, where: str, published: Any, recomputed: Any, verdict: str) -> None:
        if verdict == "equal":
            self.equal += 1
        else:
            self.differences.append(Difference(where, published, recomputed, verdict))

    def summary(self) -> str:
        figures = sum(v == "different" for v in self.figures.values())
        return (f"{self.run}: {self.equal} equal, {len(self.within)} within the tolerance, "
                f"{len(self.different)} different, {self.ignored} ignored; "
                f"{len(self.figures) - figures} figure(s) equal, {figures} differ in bytes")

    def as_json(self) -> dict[str, Any]:
        return {"run": self.run, "ok": self.ok, "equal": self.equal, "ignored": self.ignored,
                "within": len(self.within), "different": len(self.different),
                "differences": [vars(d) for d in self.differences], "figures": self.figures}


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def compare_values(published: Any, recomputed: Any, where: str, tol: Tolerance,
                   report: Report) -> None:
    """Compare two JSON values recursively into ``report``."""
    if isinstance(published, dict) and isinstance(recomputed, dict):
        for key in sorted(set(published) | set(recomputed), key=str):
            at = f"{where}.{key}"
            if tol.ignored(str(key)):
                report.ignored += 1
            elif key not in published or key not in recomputed:
                report.add(at, published.get(key), recomputed.get(key), "different")
            else:
                compare_values(published[key], recomputed[key], at, tol, report)
    elif isinstance(published, list) and isinstance(recomputed, list):
        if len(published) != len(recomputed):
            report.add(f"{where} (length)", len(published), len(recomputed), "different")
            return
        for i, (a, b) in enumerate(zip(published, recomputed)):
            compare_values(a, b, f"{where}[{i}]", tol, report)
    elif _number(published) and _number(recomputed):
        if published == recomputed or (math.isnan(published) and math.isnan(recomputed)):
            report.add(where, published, recomputed, "equal")
        else:
            report.add(where, published, recomputed,
                       "within" if tol.accepts(published, recomputed) else "different")
    else:  # True is not 1 here: a flag that became a count is a change
        same = type(published) is type(recomputed) and published == recomputed
        report.add(where, published, recomputed, "equal" if same else "different")


def compare_text(published: str, recomputed: str, where: str, tol: Tolerance,
                 report: Report) -> None:
    """Compare two texts: the words between their numbers must be equal, the numbers within
    the tolerance, one item per number."""
    a, b = _NUMBER.split(published), _NUMBER.split(recomputed)
    if len(a) != len(b) or a[0::2] != b[0::2]:
        report.add(where, published, recomputed, "different")
        return
    for i, (x, y) in enumerate(zip(a[1::2], b[1::2])):
        compare_values(float(x), float(y), f"{where} number {i + 1}", tol, report)


def _json_lines(data: bytes) -> list[Any]:
    return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]


def compare_files(published: Mapping[str, bytes], recomputed: Mapping[str, bytes],
                  tol: Tolerance, report: Report) -> None:
    """Compare two results folders' files (relative path -> bytes) into ``report``. A records
    file is compared with its baselines put back (``results.expand_records``): its companion's
    digests are not numbers, and a baseline within the tolerance must read as equal."""
    every = set(published) | set(recomputed)
    companions = {R.baselines_path(rel).as_posix(): rel for rel in every
                  if rel.endswith(".jsonl")}
    for rel in sorted(every):
        if rel in companions and companions[rel] in every:
            continue  # compared within its records file
        if tol.ignored(rel):
            report.ignored += 1
            continue
        if rel not in published or rel not in recomputed:
            report.add(rel, "present" if rel in published else "absent",
                       "present" if rel in recomputed else "absent", "different")
            continue
        a, b = published[rel], recomputed[rel]
        if rel.endswith(FIGURES):
            report.figures[rel] = "equal" if a == b else "different"
        elif rel.endswith(".json"):
            compare_values(json.loads(a), json.loads(b), rel, tol, report)
        elif rel.endswith(".jsonl"):
            shared = R.baselines_path(rel).as_posix()
            compare_values(
                R.expand_records(_json_lines(a), _json_lines(published.get(shared, b"")), rel),
                R.expand_records(_json_lines(b), _json_lines(recomputed.get(shared, b"")), rel),
                rel, tol, report)
        else:
            report.add(rel, _sha(a), _sha(b), "equal" if a == b else "different")


def published_files(folder: Path, skip: Iterable[str] = ()) -> dict[str, bytes]:
    """A publication's files (relative path -> bytes) but ``skip``; a records file stored
    compressed (``results.stored``) under its own name, decompressed."""
    names = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    names = {n.removesuffix(".gz") if n.endswith(".jsonl.gz") else n for n in names}
    return {rel: R.read_stored(folder / rel) for rel in sorted(names - set(skip))}


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def glued_texts(notebook: Mapping[str, Any]) -> dict[str, str]:
    """An executed notebook's glued texts by name (Markdown, else plain text; images left
    out: their files are compared)."""
    out = {}
    for cell in notebook.get("cells", []):
        for output in cell.get("outputs", []):
            book = output.get("metadata", {}).get("scrapbook")
            if not book:
                continue
            data, prefix = output.get("data", {}), book.get("mime_prefix", "")
            for mime in ("text/markdown", "text/plain"):
                if f"{prefix}image/png" in data:
                    break
                if f"{prefix}{mime}" in data:
                    text = data[f"{prefix}{mime}"]
                    out[book["name"]] = "".join(text) if isinstance(text, list) else str(text)
                    break
    return out


def _compare_pages(published: Path, recomputed: bytes | None, tol: Tolerance,
                   report: Report) -> None:
    a = glued_texts(json.loads(published.read_text(encoding="utf-8")))
    b = glued_texts(json.loads(recomputed)) if recomputed else {}
    for name in sorted(set(a) | set(b)):
        where = f"page: {name}"
        if tol.ignored(name):
            report.ignored += 1
        elif name not in a or name not in b:
            report.add(where, a.get(name), b.get(name), "different")
        else:
            compare_text(a[name], b[name], where, tol, report)


def check_out(out: str | Path | None, root: Path, profile: str) -> Path:
    """The folder ``--out`` names (default ``scratch/verify/<profile>``), checked before any
    recomputation: not empty, not inside the published trees (``book/results``, ``book/runs``,
    ``book/pages``: verify never writes into the book), not a file, and writable."""
    if out is None:
        return root / "scratch" / "verify" / profile
    if not str(out).strip():
        raise ValueError("--out must name a folder, got '' (the default is "
                         f"scratch/verify/{profile})")
    path = Path(out)
    path = (path if path.is_absolute() else Path.cwd() / path).resolve()
    for tree in (RESULTS_DIR, RUNS_DIR, PAGES_DIR):
        if path == root / tree or (root / tree) in path.parents:
            raise ValueError(f"--out must lie outside the published tree {tree}, got {out!r}: "
                             "verify never writes into the book")
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out must name a folder, got {out!r} (a file)")
    if existing is not None and (not existing.is_dir() or not os.access(existing, os.W_OK)):
        raise ValueError(f"--out {out!r} cannot be written: {existing} is "
                         f"{'not a folder' if not existing.is_dir() else 'not writable'}")
    return path


def cost_sentence(name: str, record: Mapping[str, Any], folder: str | Path | None,
                  at: int = 1, of: int = 1, here: int | None = None) -> str:
    """What recomputing run ``name`` will cost, said before it starts: from nothing (the run
    cache off), so its models' training as recorded (``pages.provenance``'s ``compute_s``),
    not its last run's time, which a resumed run makes look cheap."""
    said = pages.provenance(record, folder, registrations=())
    spent, wall = said["compute_s"], said["wall_s"]
    cost = (f"its models' training took {pages.duration_text(spent)} on "
            f"{said['machine'] or 'an unrecorded machine'}" if spent is not None
            else "its training time is not recorded")
    last = (f" (its last run, {pages.duration_text(wall)}, resumed)"
            if wall is not None and spent is not None and spent > 1.5 * wall else "")
    return (f"verify: recomputing {name} ({at} of {of}) from nothing, the run cache off: "
            f"{cost}{last}; this machine has {here or cores()} cores")


def verify(profile: str, only: Sequence[str], out: str | Path | None = None,
           manifest: str | Path | None = None, root: str | Path | None = None) -> list[Report]:
    """Recompute each published run that ``only`` selects and compare it with its publication.

    Writes, per run, ``<out>/<run>/`` (default ``scratch/verify/<profile>``): the recomputed
    files, ``executed.ipynb`` and ``report.json``. Raises ValueError for a run that is not
    published ``ok``, is stale (its notebook, parameters or inputs changed since) or whose
    recomputation failed (the error named).
    """
    root = Path(root or R.repo_root()).resolve()
    man = runner.load_manifest(manifest)
    every = runner.resolve_profile(man, profile)
    chosen = runner.select_runs(every, only, profile)
    out = check_out(out, root, profile)
    reports = []
    for at, run in enumerate(chosen, 1):
        record = runner._record(run, root)
        if record.get("status") != "ok":
            raise ValueError(f"run {run.name!r} of profile {profile!r} is not published ok "
                             f"(status {record.get('status', 'missing')!r}); nothing to verify")
        status = runner.run_status(run, runner.run_inputs(run, every, root), root)
        if status != "ok":  # today's code would answer another question
            raise ValueError(f"run {run.name!r} of profile {profile!r} is {status}: "
                             f"rerun it first (dyckbook run --profile {profile} --only "
                             f"{run.name})")
        folder = runner._folder(run, root)
        log.info(cost_sentence(run.name, record, folder, at, len(chosen)))
        skip = {RUN_RECORD, runner.FAILED_NOTEBOOK, *run.notebook.keep}
        published = published_files(folder, skip)
        inputs = runner._input_files(root, profile, man, every, run)
        task = runner.Task(run.name, run.notebook.path.read_text(encoding="utf-8"),
                           {**run.params, "num_threads": cores()}, run.notebook.outputs, {},
                           inputs, env={cache.RUN_ENV: ""})
        result = runner.execute(task)
        if result["status"] != "ok":
            raise ValueError(f"recomputing {run.name!r} failed: "
                             f"{runner.describe_error(result['error'])}")
        recomputed = {k: v for k, v in result["files"].items() if k not in skip}
        report = Report(run.name)
        tol = Tolerance.of(run.notebook.tolerance)
        compare_files(published, recomputed, tol, report)
        _compare_pages(runner._page(run, root), result["notebook"], tol, report)
        where = out / run.name
        for rel, data in recomputed.items():
            R.write_bytes(where / "files" / rel, data)
        R.write_bytes(where / "executed.ipynb", result["notebook"] or b"")
        R.write_bytes(where / "report.json",
                      json.dumps(report.as_json(), indent=1, default=str).encode())
        reports.append(report)
    return reports
