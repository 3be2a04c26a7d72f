"""The one carry-over of published runs and registrations to the one rule (``recipe``).

Before the rule, a run's key covered its notebook's raw source and a few execution settings,
and a registration's digest covered the code of the data, negatives and rules modules. This
module checks each published run and each latest registration against the *earlier* rule, at
the commit that runs it, and only where it still holds writes the key of the one rule: a run's
``run.json`` gets the new ``hash``, ``params_hash`` and ``notebook_hash`` and a
``carried_over`` entry (date, the earlier hash); a registration gets an appended entry ``of``
it (``registry.carry_over``'s counterpart). Nothing stale or unjudged is carried over.
It is run once, then removed: the entries name the commit.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from dyckbook import cache, recipe
from dyckbook import results as R
from dyckbook.intervals import METHOD
from dyckbook.pipeline import registry, runner
from dyckbook.pipeline.verdicts import RULES

CODE_ROOTS = ("dyckbook.protocol", "dyckbook.completion", "dyckbook.baselines",
              "dyckbook.adversary")
OLD_UNHASHED = frozenset({"num_threads", "device"})


def _old_run_hash(run: runner.Run, inputs: dict[str, str]) -> str:
    cells = json.loads(Path(run.notebook.path).read_text(encoding="utf-8"))["cells"]
    notebook = runner._digest([(c["cell_type"], "".join(c["source"])) for c in cells])
    params = {k: v for k, v in run.params.items() if k not in OLD_UNHASHED}
    return runner._digest({"params": params, "notebook": notebook,
                           "results": recipe.RESULTS_VERSION, "inputs": dict(inputs)})


def _old_registration_digest(run: str, params: dict[str, Any]) -> str:
    rules = [r.text() for r in RULES if r.run == run]
    payload = {"run": run, "recipe": recipe.recipe(params), "rules": rules, "interval": METHOD,
               "code": cache.code_digest(CODE_ROOTS)}
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def carry_over_runs(profile: str, stamp: str) -> dict[str, str]:
    """``{run: what happened}`` for every run of ``profile``."""
    runs, every, root = runner._profile_runs(profile, None, None)
    out = {}
    for run in runs:
        record = runner._record(run, root)
        inputs = runner.run_inputs(run, every, root)
        if record.get("status") != "ok" or record.get(runner.ATTEMPT):
            out[run.name] = f"not carried over: status {record.get('status')}"
            continue
        if record.get("hash") != _old_run_hash(run, inputs):
            out[run.name] = "not carried over: stale under the earlier rule"
            continue
        if runner.file_hashes(runner._folder(run, root)) != record.get("files"):
            out[run.name] = "not carried over: edited"
            continue
        new = {**record, "hash": runner.run_hash(run, inputs),
               "params_hash": runner._params_hash(run),
               "notebook_hash": runner.notebook_hash(run.notebook.path),
               "carried_over": {"date": stamp, "earlier_hash": record["hash"],
                                "rule": "recipe + RESULTS_VERSION (issue 66)"}}
        R.write_json(runner._folder(run, root) / runner.RECORD, new)
        out[run.name] = "carried over"
    return out


def carry_over_registrations(note: str, stamp: str) -> list[registry.Registration]:
    """The entries appended: one ``of`` each latest registration whose earlier digest holds."""
    path = registry.registry_path()
    existing = registry.load(path)
    latest = {(r.profile, r.run): r for r in existing}
    new = []
    for (profile, run), reg in latest.items():
        if reg.of is not None or _old_registration_digest(run, reg.recipe) != reg.digest:
            continue
        new.append(registry.Registration(len(existing) + len(new) + 1, stamp, profile, run,
                                         reg.claims, registry.digest(run, reg.recipe),
                                         reg.recipe, note.format(of=reg.id), reg.id))
    if new:
        registry.write(path, existing + new)
    return new


if __name__ == "__main__":
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(json.dumps(carry_over_runs("cpu", now), indent=1))
    made = carry_over_registrations(
        "Carried over to the one rule (issue 66): the same recipe, claims and registration "
        "time as registration {of}; its digest under the earlier rule (code of protocol, "
        "completion, baselines, adversary) was verified to hold at the commit that wrote this",
        now)
    for reg in made:
        print(f"registration {reg.id}: {reg.profile}/{reg.run} of {reg.of}")
