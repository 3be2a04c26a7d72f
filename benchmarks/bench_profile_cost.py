"""What the thesis profile costs: each run's time at full size, from the cpu profile's measured one.

Nothing is trained here. For every run of the manifest, the cpu profile's published run gives
its measured wall time (``run.json``) and its records the training seconds and steps of each
group of seeds trained together. The thesis profile changes budgets only (seeds, epochs,
strings, steps, lengths; ``dyckbook list``), so its time is estimated as the cpu run's time
scaled by the ratio of the training work the two profiles' parameters ask for (hours of this
2-core machine as the runner runs a profile; a run whose models came from a resume cache has
its groups' training time, one after another, as its base):

- epoch-mode runs (``dyck1``, ``dyck3``, ``ood``, ``long``): seeds x epochs x strings, and for
  ``long`` x the longest string (a lower bound: attention grows with its square);
- ``thesis-literal``: per experiment, its training seconds x Table 5.1's steps under the
  thesis profile's caps / the cpu profile's steps (``presets``: epochs and dataset sizes);
- step-mode runs that stop early (``explainability``, ``ablation-grid``, ``generalisation``,
  ``intervention``, ``dyck3-budget``): seeds x the step budget (an upper bound: a model that
  reaches its target stops sooner);
- ``completion``: per group of its records, seeds x its thesis step budget / its cpu one, the
  groups the thesis profile adds (Dyck-1, learned positions) costed like their Dyck-3 /
  positions siblings;
- pages that train nothing: their cpu time.

A run's cpu time is the longest it took under the cpu profile (``run.json``'s ``longest_s``):
a run resumed from the run cache records only its resume as its last duration. Where its
records' training groups took longer than that, one after another over its workers
(learning-dyck3, the intervention: models resumed from a cache, trained by earlier attempts),
that is its time instead, a lower bound (its host work is not in it).

Where ``bench_dropout.py`` measured experiment 7's training at the long-context run's longest
string, that run's training alone is costed at that rate too (CPU hours of one core). Where a
lent GPU timed every run's training groups (``results/gpu.json``'s ``runs`` part,
``bench_gpu.py``: each group's steps at the thesis size x its measured step, on the card it
names), every run gets a GPU column: its training there plus its host work as the cpu run
measured it (data, scoring, the stack-free rules, figures: at the cpu size, a lower bound); a
run that trains nothing, its cpu time. A thesis run already published is shown beside its
estimate. Writes benchmarks/results/profile_cost.json and prints a table.

    python benchmarks/bench_profile_cost.py [--manifest notebooks/experiments.yml] [--partial]

It needs every cpu run published (``make book``); without them it stops and writes nothing,
unless ``--partial``: a run not published here is then taken from the profile_cost.json already
here (its row marked with that record's date; a training run's GPU row is its training on the
card alone, a lower bound, since its host work is measured by its cpu run), and a run in
neither is named and left out of the totals.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dyckbook.data import presets
from dyckbook.experiment import run
from dyckbook.pipeline import layout, manifest, runner

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

ROOT = Path(__file__).resolve().parent.parent
EPOCH_RUNS = ("dyck1", "dyck3", "ood", "long")
STEP_RUNS = ("explainability", "ablation-grid", "generalisation", "intervention")
#: the runs that train (bench_gpu's HEAVY); learning-dyck3 has the same budgets in both profiles
TRAINING = (*EPOCH_RUNS, *STEP_RUNS, "thesis-literal", "completion", "dyck3-budget",
            "learning-dyck3")


def published(profile: str, m: manifest.Manifest) -> dict[str, dict[str, Any]]:
    """``{run: its run.json}`` for the runs of ``profile`` whose last run succeeded."""
    return {run.name: record for run, _, record in runner.statuses(profile, m, ROOT)
            if record.get("status") == "ok"}


def groups(profile_run: manifest.Run) -> dict[str, dict[str, float]]:
    """Training seconds and steps of each group of seeds trained together, by label and k."""
    return layout.training_groups(ROOT / profile_run.params["results_dir"])


def ratio_of(name: str, c: dict[str, Any], t: dict[str, Any]) -> float:
    """Thesis over cpu training work, from the two profiles' parameters."""
    seeds = t.get("n_seeds", 1) / c.get("n_seeds", 1)
    if name in EPOCH_RUNS:
        work = seeds * t["epochs"] / c["epochs"] * t["n_train"] / c["n_train"]
        return work * (t["max_length"] / c["max_length"] if name == "long" else 1.0)
    if name in STEP_RUNS:
        return seeds * t["max_steps"] / c["max_steps"]
    if name == "dyck3-budget":
        def steps(budgets: str) -> int:
            return sum(int(b.split(":")[0]) for b in budgets.split(","))
        return seeds * steps(t["budgets"]) / steps(c["budgets"])
    return 1.0


def literal_steps(n: int, params: dict[str, Any]) -> int:
    """Optimiser steps of thesis experiment ``n`` under 00's caps (its notebook's ``literal``)."""
    e, config = presets.thesis_experiment(n), run.thesis_config(n)
    n_train = min(config.data.n_train, params["max_strings"])
    return min(e.epochs, params["max_epochs"]) * math.ceil(n_train / config.train.batch_size)


def literal_seconds(found: dict[str, dict[str, float]], c: dict[str, Any],
                    t: dict[str, Any]) -> float:
    """00's training seconds at the thesis caps, experiment by experiment."""
    total = 0.0
    for key, group in found.items():
        n = int(key.split("|")[1].split()[-1])
        total += group["seconds"] * literal_steps(n, t) / literal_steps(n, c)
    return total


def completion_seconds(found: dict[str, dict[str, float]], c: dict[str, Any],
                       t: dict[str, Any]) -> float:
    """10's training seconds at the thesis budgets, group by group."""
    seeds = t["n_seeds"] / c["n_seeds"]
    ks = len(t["ks"].split(",")) / len(c["ks"].split(","))
    labels = {key: key.split("|")[1] for key in found}
    main = {arch: max(g["steps"] for key, g in found.items() if arch in labels[key]
                      and not labels[key].startswith("BBH")
                      and (arch == "encoder-decoder" or labels[key].endswith("learned")))
            for arch in ("encoder-decoder", "decoder-only")}  # the main runs' budgets
    total, encoder_decoder = 0.0, []
    for key, group in found.items():
        label = labels[key]
        arch = "encoder-decoder" if "encoder-decoder" in label else "decoder-only"
        if label.startswith("BBH"):
            factor = (t["bbh_max_steps"] or main[arch]) / group["steps"]
        elif arch == "decoder-only" and not label.endswith("learned"):  # the length study
            factor = (t["length_max_steps"] or main[arch]) / group["steps"]
        else:  # a main run: one group per k
            factor = ks
            if arch == "encoder-decoder":
                encoder_decoder.append(group["seconds"])
        total += seeds * factor * group["seconds"]
    added = len(t["pos_encodings"].split(",")) - len(c["pos_encodings"].split(","))
    if added > 0 and encoder_decoder:  # an encoder-decoder per added position: their mean
        total += seeds * ks * added * sum(encoder_decoder) / len(encoder_decoder)
    return total


def estimate(name: str, cpu: manifest.Run, thesis: manifest.Run, done: dict[str, Any],
             mine: dict[str, Any] | None) -> dict[str, Any]:
    """One run's row: the cpu run's measured time (``done``, its run.json), the ratio, the
    thesis estimate, and the thesis run's time where it is published (``mine``)."""
    c, t = cpu.params, thesis.params
    # the longest this run took under the profile (the runner's ``longest_s``): a run resumed
    # from a cache records only its resume as its last duration
    measured = float(done.get("longest_s") or done["duration_s"])
    found = groups(cpu)
    # its groups' training, one after another over its workers (07 trains on two)
    trained = layout.training_seconds(ROOT / cpu.params["results_dir"], done)
    resumed = trained > measured  # its models came from a resume cache (the run cache): their
    measured = max(measured, trained)  # training took longer than the run that read them
    overhead = max(measured - trained, 0.0)
    if name == "thesis-literal":
        seconds = overhead + literal_seconds(found, c, t)
        how = "Table 5.1's steps at the thesis caps, per experiment"
    elif name == "completion":
        seconds = overhead + completion_seconds(found, c, t)
        how = "each group's step budget, Dyck-1 and learned positions added"
    else:
        ratio = ratio_of(name, c, t)
        seconds = measured * ratio
        how = ("training work ratio (an upper bound: early stops)" if name in STEP_RUNS
               or name == "dyck3-budget" else "training work ratio (a lower bound: length²)"
               if name == "long" else "training work ratio" if ratio != 1.0
               else "the same budgets in both profiles: its cpu time" if name in TRAINING
               else "no training at a larger size: its cpu time")
    if resumed:
        how += "; its cpu time is its models' training alone, resumed from a cache (a lower bound)"
    return {"run": name, "cpu_seconds": round(measured, 1), "thesis_seconds": round(seconds),
            "how": how, "measured_thesis_seconds": mine and round(
                float(mine.get("longest_s") or mine["duration_s"]), 1),
            # a resumed run's host work (data, scoring, figures) was spread over the attempts
            # that trained its models: not measured
            "host_seconds": None if resumed and name in TRAINING
            else round(overhead if name in TRAINING else measured, 1),
            "resumed_models": resumed,
            "resumed_at_full_duration": True}


def gpu_rows(data: dict[str, Any] | None, thesis: Sequence[str],
             host: Mapping[str, float], resumed: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Every run of the thesis profile on the card of ``data`` (``gpu.json``, its ``runs`` part):
    a run that trains (:data:`TRAINING`), its groups' training seconds there at the thesis size
    plus ``host[run]`` (its cpu run's time outside training); one that trains nothing,
    ``host[run]`` (its cpu time); a training run the card did not time, ``gpu_seconds`` None.
    A run missing from ``host`` (``--partial``: its cpu run not published here; or among
    ``resumed``: its models came from a resume cache, so its host work was not measured) counts
    its training alone (``lower_bound``), or None if it trains nothing.
    No ``runs`` part (a ``gpu.json`` from before it): no rows."""
    measured = ((data or {}).get("raw") or {}).get("runs")
    if not isinstance(measured, dict):
        return []
    card, when = data["raw"].get("device", "unnamed"), str(data.get("date", ""))[:10]
    out = []
    for name in thesis:
        entry = (measured.get(name) or {}).get("thesis") or {}
        seconds, work = entry.get("training_seconds"), host.get(name)
        if name not in TRAINING:
            row = ({"gpu_seconds": None, "how": "its cpu run is not published here"}
                   if work is None else
                   {"gpu_seconds": round(work), "how": "trains nothing: its cpu time"})
        elif seconds is None:
            row = {"gpu_seconds": None, "how": "not timed on the card"}
        else:
            plus = ("plus its host work at the cpu size" if work is not None else
                    "its training alone (a lower bound: its cpu run resumed its models from a "
                    "cache, so its host work is not measured)" if name in resumed else
                    "its training alone (a lower bound: its cpu run, which measures its host "
                    "work, is not published here)")
            row = {"gpu_seconds": round(seconds + (work or 0.0)), "lower_bound": work is None,
                   "how": f"{len(entry['groups'])} training groups' steps x their step on the "
                          f"card ({entry['estimated']} untimed, at their run's mean), {plus}; "
                          f"measured {when}"}
        out.append({"run": name, "gpu": card, **row})
    return out


def earlier_estimates(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--partial``: the rows of ``names`` from the profile_cost.json already here (a cpu run
    published on another machine, costed there), marked as such; their host work unknown."""
    path = table.RESULTS / "profile_cost.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    when = str(data.get("date", "an unrecorded date"))[:10]
    out = {}
    for row in data.get("raw", {}).get("runs", []):
        if row.get("run") in names:
            previous = row.get("from_record") or when
            host = None if row["run"] in TRAINING else row["cpu_seconds"]  # trains nothing
            out[row["run"]] = {**row, "host_seconds": host, "from_record": previous,
                               "how": row["how"].split(" [")[0]
                               + f" [its cpu run costed on {previous}: not published here]"}
    return out


def long_training(thesis: dict[str, manifest.Run]) -> dict[str, Any] | None:
    """The long-context run's training alone at the rate ``bench_dropout.py`` measured at its
    longest string (one core, CPU seconds per 1000 sequences), where it did."""
    path = table.RESULTS / "dropout.json"
    if "long" not in thesis or not path.exists():
        return None
    p = thesis["long"].params
    data = json.loads(path.read_text(encoding="utf-8"))
    measured = data["raw"].get(f"exp7_{p['max_length']}")
    if measured is None:
        return None
    sequences = p["n_seeds"] * p["epochs"] * p["n_train"]
    return {"run": "long", "sequences": sequences, "per_1000": measured["per_1000"]["current"],
            "cpu_seconds": sequences * measured["per_1000"]["current"] / 1000,
            "date": data["date"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", default=None)
    parser.add_argument("--partial", action="store_true",
                        help="cost a cpu run not published here from the earlier "
                             "profile_cost.json's record of it (its GPU row: training alone)")
    args = parser.parse_args()
    m = manifest.load_manifest(args.manifest)
    cpu = {r.name: r for r in manifest.resolve_profile(m, "cpu")}
    thesis = {r.name: r for r in manifest.resolve_profile(m, "thesis")}
    missing = sorted(set(thesis) - set(cpu))
    if missing:
        raise ValueError(f"runs of the thesis profile with no cpu run to scale from: {missing}")
    done, mine = published("cpu", m), published("thesis", m)
    unpublished = sorted(set(thesis) - set(done))
    earlier = earlier_estimates(unpublished) if args.partial else {}
    missing = [name for name in unpublished if name not in earlier]
    if missing and not args.partial:  # an estimate from part of the profile would replace it
        raise SystemExit(f"the cpu profile's runs {missing} are not published here: run "
                         "`make book` (or `python -m dyckbook run --profile cpu`) first, or "
                         "pass --partial")
    earlier.update({name: {"run": name, "cpu_seconds": None, "thesis_seconds": None,
                           "host_seconds": None, "measured_thesis_seconds": None,
                           "how": "not costed: not published here nor in the earlier record"}
                    for name in missing})  # --partial: named, left out of the totals
    runs = [earlier[name] if name in earlier else
            estimate(name, cpu[name], thesis[name], done[name], mine.get(name)) for name in thesis]
    path = table.RESULTS / "gpu.json"
    gpu = gpu_rows(json.loads(path.read_text(encoding="utf-8")) if path.exists() else None,
                   list(thesis), {r["run"]: r["host_seconds"] for r in runs
                                  if r.get("host_seconds") is not None},
                   [r["run"] for r in runs if r.get("resumed_models")])
    long = long_training(thesis)
    uncosted = [r["run"] for r in runs if r["thesis_seconds"] is None]
    total = sum(r["thesis_seconds"] for r in runs if r["thesis_seconds"] is not None)
    bench = "thesis profile on this machine, 2 cores (the cpu profile's wall time, scaled)"
    rows = [table.row(bench, f"{r['run']}: hours ({r['how']})", r["thesis_seconds"] / 3600)
            for r in runs if r["thesis_seconds"] is not None]
    rows += [table.row(bench, f"{r['run']}: hours measured (the thesis run, published)",
                       r["measured_thesis_seconds"] / 3600)
             for r in runs if r.get("measured_thesis_seconds") is not None]
    rows.append(table.row(bench, "every run: hours" + (
        f" (without {', '.join(uncosted)}: not costed)" if uncosted else ""), total / 3600))
    if long:
        rows.append(table.row(bench, f"long: CPU hours of its training alone, "
                              f"{long['sequences']:,} sequences at bench_dropout.py's rate at "
                              f"its length (one core, {long['date'][:10]})",
                              long["cpu_seconds"] / 3600))
    rows += [table.row(f"thesis profile on a GPU ({g['gpu']}, results/gpu.json)",
                       f"{g['run']}: GPU hours ({g['how']})", g["gpu_seconds"] / 3600)
             for g in gpu if g["gpu_seconds"] is not None]
    if gpu:
        short = sum(bool(g.get("lower_bound")) for g in gpu)
        left = [g["run"] for g in gpu if g["gpu_seconds"] is None]
        notes = ([f"{short} runs without their host work"] if short else []) + (
            [f"without {', '.join(left)}: not costed"] if left else [])
        rows.append(table.row(f"thesis profile on a GPU ({gpu[0]['gpu']}, results/gpu.json)",
                              "every run: GPU hours, one after another" + (
                                  f" (a lower bound: {'; '.join(notes)})" if notes else ""),
                              sum(g["gpu_seconds"] or 0 for g in gpu) / 3600))
    path = table.save("profile_cost", rows, {"runs": runs, "gpu": gpu, "total_seconds": total,
                                             "long_training": long,
                                             "from_earlier_record": sorted(earlier)},
                      os.getloadavg(), "full")
    width = max(len(r["run"]) for r in runs)
    print(f"{'run':{width}}  {'cpu h':>7}  {'thesis h':>9}  {'measured':>8}  how")
    for r in runs:
        if r["thesis_seconds"] is None:
            print(f"{r['run']:{width}}  {'-':>7}  {'-':>9}  {'-':>8}  {r['how']}")
            continue
        cpu_h, th_h = f"{r['cpu_seconds'] / 3600:.2f}", f"{r['thesis_seconds'] / 3600:,.1f}"
        got = r.get("measured_thesis_seconds")
        print(f"{r['run']:{width}}  {cpu_h:>7}  {th_h:>9}  "
              f"{'-' if got is None else f'{got / 3600:.2f}':>8}  {r['how']}")
    print(f"{'total':{width}}  {'':>7}  {total / 3600:>9,.1f}")
    if long:
        print(f"long, training alone at bench_dropout.py's rate: {long['cpu_seconds'] / 3600:,.0f} "
              "CPU hours (one core)")
    for g in gpu:
        hours = "-" if g["gpu_seconds"] is None else f"{g['gpu_seconds'] / 3600:,.1f} h"
        print(f"GPU ({g['gpu']}): {g['run']} {hours} ({g['how']})")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
