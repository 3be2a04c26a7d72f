"""Rewrite published records in today's compact form without changing one value.

Two steps, each checked by reading the new form back: a records file names its baselines'
scores by digest (below), and a records file of at least :data:`GZIP_FROM` bytes is stored
gzip-compressed as ``<name>.jsonl.gz`` (``layout.gzip_folder``; ``results.stored`` reads either
form). The runner publishes every run in that form; this module brings older publications to it.

A run record carries its shortcut baselines' scores (about 40 KB with every per-length count),
and every configuration trained on the same strings carries the same ones: 07's length study
wrote 130 records holding 20 distinct blobs (9.4 MB). ``results.append_records`` now writes each
distinct blob once, to a companion file (``results.baselines_path``), and a record names it by
digest. This module brings a run published before that to the same form:

- only runs published ``ok`` whose files are as recorded (``runner.run_status``) are touched;
- each records file is rewritten only if reading it back gives every line exactly as it was
  (``results.expand_records``), else nothing is written and the error names the file;
- ``run.json`` gets the new file hashes and a ``compacted`` entry (date, commit, every file's
  bytes before and after), so a reader sees that the format changed after the run, and how;
- a run that reads a compacted one becomes stale (what it reads changed as bytes): rerun it.

``python -m dyckbook compact --profile P [--only RUN ...]`` is the command.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dyckbook.experiment import results as R
from dyckbook.pipeline import pages, runner
from dyckbook.pipeline.layout import GZIP_FROM, RUN_RECORD, gzip_folder

__all__ = ["compact", "compact_folder"]


def _lines(path: Path) -> list[Any]:
    return [row for _, row in R._json_lines(path)]  # the reader read_records uses


def _inline(lines: Sequence[Any]) -> bool:
    """Run records with baselines written inline (a file in the form before companions)."""
    return bool(lines) and all(isinstance(x, dict) and "config" in x and "scores" in x
                               for x in lines) and any(
        isinstance(x.get("baselines"), dict) and x["baselines"] for x in lines)


def compact_folder(folder: str | Path) -> dict[str, list[int]]:
    """Rewrite every records file under ``folder`` that holds inline baselines and shrinks
    by it (a blob repeats); returns
    ``{relative path: [bytes before, bytes after (with its companion)]}``. A file whose compact
    form would not read back exactly is left as it was (ValueError naming it)."""
    folder = Path(folder)
    changed = {}
    for path in sorted(folder.rglob("*.jsonl")):
        if path.name.endswith(".baselines.jsonl") or R.baselines_path(path).exists():
            continue
        lines = _lines(path)
        if not _inline(lines):
            continue
        with tempfile.TemporaryDirectory(dir=path.parent, prefix=".compact-") as tmp:
            trial = Path(tmp) / path.name
            R.write_records(trial, lines)
            companion = R.baselines_path(trial)
            back = R.expand_records(_lines(trial), _lines(companion), str(trial))
            if json.dumps(back, sort_keys=True) != json.dumps(lines, sort_keys=True):
                raise ValueError(f"{path}: its compact form does not read back as written; "
                                 "left as it was")
            before = path.stat().st_size
            after = trial.stat().st_size + companion.stat().st_size
            if after >= before:  # no blob repeats: the inline form is as small
                continue
            R.write_bytes(R.baselines_path(path), companion.read_bytes())
            R.write_bytes(path, trial.read_bytes())
        changed[path.relative_to(folder).as_posix()] = [before, after]
    return changed


def compact(profile: str, only: Sequence[str] | None = None,
            manifest: str | Path | None = None, root: str | Path | None = None
            ) -> dict[str, dict[str, list[int]]]:
    """Compact the records of a profile's published runs (``only``: names, keys or globs);
    returns ``{run: {file: [before, after]}}`` for the runs changed. A selected run that is
    not published ``ok`` with its files as recorded is a ValueError (nothing is written)."""
    runs, every, root = runner._profile_runs(profile, manifest, root)
    chosen = runner.select_runs(runs, only, profile) if only else runs
    ready = []
    for run in chosen:  # a publication whose files are as recorded (stale or not)
        status = runner.run_status(run, runner.run_inputs(run, every, root), root)
        if status == "stale" and runner.file_hashes(runner._folder(run, root)) != \
                runner._record(run, root).get("files"):
            status = "edited"
        if status in ("ok", "stale"):
            ready.append(run)
        elif only:
            raise ValueError(f"run {run.name!r} of profile {profile!r} is {status}: only a "
                             "publication whose files are as recorded is compacted")
    out = {}
    commit = pages.source_commit(root)
    for run in ready:
        folder = runner._folder(run, root)
        record = runner._record(run, root)
        changed = compact_folder(folder)
        packed = gzip_folder(folder)
        if not changed and not packed:
            continue
        how = ["baselines written once each"] * bool(changed) + \
            [f"records of {GZIP_FROM / 2**20:g} MiB or more gzip-compressed"] * bool(packed)
        changed = {**changed, **{f"{k} -> .gz": v for k, v in packed.items()}}
        entry = {"on": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                 "commit": commit, "by": f"dyckbook compact: {'; '.join(how)} (values unchanged)",
                 "files": changed}
        record = {**record, "files": runner.file_hashes(folder),
                  "compacted": [*record.get("compacted", []), entry]}
        R.write_json(folder / RUN_RECORD, record)
        out[run.name] = changed
    return out
