"""Which configurations could hold the stack set to 16N: a probe for the length study (07).

07's configurations all read the class at ``[end]``; on Dyck-2 and Dyck-3 none holds even the
stack set's first lengths (30 and up, all beyond N = 16). The constructions
(``constructions.dyck_kd``) say why an end readout may be the obstacle: two causal layers flag a
mismatch at the closer, and only a third layer could carry the flags to the last position, while
a ``mean`` readout averages them. This trains the candidates stated below on 07's recipe for the
``cpu`` profile (read from notebooks/experiments.yml) with the test maximum raised to 16N, for
each k, on seeds 100-102 (no page uses them), and reports per configuration each seed's reach on
the stack set (``generalisation.reach_rows``) and its accuracy at every length bin, on test
strings of any depth (as 07's; each task records its ``test_max_depth``). Tasks (one per
configuration, k and seed) run on a process pool of one torch thread per worker.
Writes benchmarks/results/length_reach.json (tasks of an earlier run are kept unless rerun)
and prints a table; ``--records DIR`` also keeps the records.

    python benchmarks/bench_length_reach.py [--ks 1,2,3] [--configs C,C] [--workers 2]
        [--seeds 100,101,102] [--test-max-length 256] [--out PATH] [--max-steps S]
        [--recipe FILE | --write-recipe FILE] [--records DIR | --from-records FILE]
        [--no-early-stop] [--label-suffix TEXT]
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from dyckbook.chapters import generalisation
from dyckbook.experiment import results, run
from dyckbook.pipeline import executors

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

#: stated before any of them ran: the construction's readout (mean) with NoPE and with the
#: positions that can generalise, with the language-model loss (07's best end objective), and
#: the mean readout alone; then 07's best end configuration as the reference
CANDIDATES = ("causal-none-mean+language_model", "causal-alibi-mean+language_model",
              "causal-rope-mean+language_model", "causal-randomized-mean+language_model",
              "causal-none-mean", "causal-none-end+language_model")
#: stated 2026-11-26 after seed 101 of bench_length_break (07's causal-none-end, seeds 100-102)
#: held the stack set to 16N, before seeds 103-109 ran: does a majority of ten seeds of 07's NoPE
#: end configuration hold it (run with --ks 1 --configs causal-none-end --seeds 100,...,109)?
MOONSHOT_CHECK = "causal-none-end"
#: stated 2026-11-27 after the moonshot check's rerun on tests of any depth, before any seed of
#: it ran. There, the two seeds of ten that hold the stack set to 16N (101, 107) trained 600 and
#: 1,300 steps before the early stop; the eight that do not, 400-500. Hypothesis: the early stop
#: ends training before the count generalises. Test: 07's NoPE end configuration on ten fresh
#: seeds (200-209) trained to the end of its 3,000 steps (``--no-early-stop``) holds it to 16N in
#: a majority (>= 6 of 10), and the same seeds with the early stop (the control,
#: ``--label-suffix " seeds 200-209"``) in fewer. Rejected if the full budget holds in <= 5.
FULL_BUDGET_SEEDS = tuple(range(200, 210))
#: stated 2026-11-27, before any model with sigmoid attention weights trained. Mechanism: in
#: bench_length_break, a dip moved late in a long string breaks 07's NoPE models and the dip's
#: layer-0 vector carries the break (the pad's symbols dilute it): under softmax a causal head
#: reads the running count as a share of the prefix, so a dip of one symbol weighs 1/i at
#: position i. Hypothesis: a head that sums instead of averaging (``ModelConfig.attention =
#: "sigmoid"``: each key weighted on its own, no -log(n) bias) keeps the count an integer, and
#: the dip holds at any length. Test: 07's NoPE end configuration with sigmoid attention, its cpu
#: recipe otherwise (early stop included), Dyck-1, ten fresh seeds (300-309), tested to 16N:
#: it holds the stack set at >= 90% to 16N in a majority (>= 6 of 10); rejected if it holds in
#: <= 5. The reference is the softmax configuration's 2 of 20 early-stopped seeds (100-109,
#: 200-209) above. Run with --ks 1 --configs causal-none-end+sigmoid --seeds 300,...,309.
SIGMOID_CHECK = ("causal-none-end+sigmoid", tuple(range(300, 310)))
RESULTS = Path(__file__).resolve().parent / "results" / "length_reach.json"
THRESHOLD = 0.9  # 07's reach_threshold


def recipe(path: str | None = None, profile: str = "cpu") -> dict[str, Any]:
    """07's resolved parameters in ``profile``, from notebooks/experiments.yml or from a
    JSON file ``--write-recipe`` wrote (for a machine without the notebook packages)."""
    if path:
        return json.loads(Path(path).read_text())
    from dyckbook.pipeline import runner  # reads the notebooks: nbformat

    runs = runner.resolve_profile(runner.load_manifest(), profile)
    params = next(r.params for r in runs if r.name == "generalisation")
    return {k: v for k, v in params.items() if k not in ("run_name", "results_dir")}


def base_config(params: dict[str, Any], k: int, test_max_length: int,
                test_max_depth: int | None = None) -> run.RunConfig:
    """07's length-study base RunConfig (``generalisation.study``) for k, tested to
    ``test_max_length`` at any depth (or nested at most ``test_max_depth``), without the
    shortcut baselines (the stack set holds them at chance by construction). Until 2026-11-27
    this probe built it with ``RunConfig.from_flat``, which took the depth study's
    ``test_max_depth`` (6): the tasks measured so carry ``test_max_depth: 6`` in the results."""
    base = generalisation.study({**params, "test_max_length": test_max_length}).base
    return dataclasses.replace(base.override(k=k, test_max_depth=test_max_depth),
                               baselines=())  # none: a probe


def bins(score: Any, width: int) -> list[float | None]:
    """Accuracy per length bin of ``width`` (None where a bin has no strings)."""
    top = max(score.per_length, default=0)
    out = []
    for low in range(1, top + 1, width):
        a = score.accuracy_between(low, low + width - 1)
        out.append(None if a != a else round(a, 4))
    return out


def summarise(label: str, records: list[Any], n: int) -> dict[str, Any]:
    row = generalisation.reach_rows({label: records}, "stack", n, THRESHOLD)[0]
    return {"task": label, "seeds": [r.seed for r in records],
            "test_max_depth": records[0].config["data"]["test_max_depth"],
            "target_accuracy": records[0].config["train"]["target_accuracy"],
            "reach_xN": [x / n for x in row["_reaches"]], ">= 8N": row[">= 8N"],
            ">= 16N": row[">= 16N"], "status": [r.status for r in records],
            "steps": [r.steps for r in records], "n_params": records[0].n_params,
            "stack": [round(r.scores["stack"].accuracy, 4) for r in records],
            "hard": [round(r.scores["hard"].accuracy, 4) for r in records],
            "train": [round(r.train_accuracy, 4) for r in records],
            "stack_bins": [bins(r.scores["stack"], n) for r in records]}


def table_rows(tasks: dict[str, dict[str, Any]], n: int) -> list[dict[str, Any]]:
    rows = []
    for label, t in tasks.items():
        seeds, depth = len(t["seeds"]), t.get("test_max_depth")
        rows.append(table.row(
            f"Length reach on the stack set (07's cpu recipe, N = {n}, {seeds} seeds, tests "
            + ("of any depth)" if depth is None else f"nested <= {depth})"),
            f"{label}: seeds holding >= {THRESHOLD:.0%} to 16N; reach per seed "
            + " ".join(f"{x:g}N" for x in t["reach_xN"]),
            int(t[">= 16N"].split("/")[0]) if "/" in t[">= 16N"] else t[">= 16N"],
            target=f">= {seeds // 2 + 1} of {seeds}"))
    return rows


def train(config: run.RunConfig, seed: int) -> Any:
    """One seed's record (a task of the pool: a configuration's seeds train side by side)."""
    return run.run_seeds(config, [seed])[0].record


def run_tasks(configs: dict[str, run.RunConfig], seeds: list[int], workers: int,
              folder: Path) -> dict[str, list[Any]]:
    """Every (configuration, seed) on a pool of ``workers``; each record is appended to
    ``folder/records.jsonl`` as it finishes (a run cut short keeps what finished)."""
    got: dict[str, dict[int, Any]] = {}
    with executors.make_executor(None, min(workers, len(configs) * len(seeds))) as pool:
        futures = {pool.submit(train, c, s): (label, s) for label, c in configs.items()
                   for s in seeds}
        for future in cf.as_completed(futures):
            label, seed = futures[future]
            record = future.result()
            record.label = label
            results.append_records(folder / "records.jsonl", [record])
            got.setdefault(label, {})[seed] = record
            print(f"{label} seed {seed}: stack {record.scores['stack'].accuracy:.4f}", flush=True)
    return {label: [got[label][s] for s in seeds] for label in configs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ks", default="1,2,3")
    parser.add_argument("--configs", default=",".join(CANDIDATES))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seeds", default="100,101,102")
    parser.add_argument("--test-max-length", type=int, default=256)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--records", default=None, help="keep records.jsonl in this folder")
    parser.add_argument("--from-records", default=None,
                        help="summarise this records.jsonl (every seed of every task) instead")
    parser.add_argument("--recipe", default=None, help="07's parameters from this JSON file")
    parser.add_argument("--write-recipe", default=None, help="write 07's parameters here, exit")
    parser.add_argument("--max-steps", type=int, default=None, help="a check only (default: 07's)")
    parser.add_argument("--no-early-stop", action="store_true",
                        help="train every seed to the end of its steps (labels say so)")
    parser.add_argument("--label-suffix", default="", help="appended to each task's label")
    args = parser.parse_args()
    try:
        ks = [int(k) for k in args.ks.split(",")]
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise ValueError(f"--ks and --seeds must be comma-separated integers, got "
                         f"{args.ks!r} and {args.seeds!r}") from None
    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    if not names:
        raise ValueError(f"--configs must name at least one configuration, got {args.configs!r}")
    if args.workers < 1:
        raise ValueError(f"--workers must be >= 1, got {args.workers}")
    params = recipe(args.recipe)
    if args.write_recipe:
        Path(args.write_recipe).write_text(json.dumps(params, indent=1) + "\n")
        return
    if args.max_steps is not None:
        if args.max_steps < 1:
            raise ValueError(f"--max-steps must be >= 1, got {args.max_steps}")
        params["max_steps"] = args.max_steps
    n = int(params["max_length"])
    if args.test_max_length < n:
        raise ValueError(f"--test-max-length must be >= N = {n}, got {args.test_max_length}")
    suffix = (" no early stop" if args.no_early_stop else "") + args.label_suffix
    if args.no_early_stop:
        params["target_accuracy"] = None  # no early stop: to the end of the schedule
    configs = {f"Dyck-{k} {c}{suffix}": generalisation.config(
        base_config(params, k, args.test_max_length), c) for k in ks for c in names}
    out_path = Path(args.out)
    load = os.getloadavg()
    raw = json.loads(out_path.read_text())["raw"] if out_path.exists() else {}
    tasks = raw.get("tasks", {})
    os.environ["DYCKBOOK_QUIET"] = "1"
    start = time.perf_counter()
    if args.from_records:
        by_label: dict[str, dict[int, Any]] = {}
        for r in results.read_records(args.from_records):
            by_label.setdefault(r.label, {})[r.seed] = r
        missing = [f"{label} seed {s}" for label in configs for s in seeds
                   if s not in by_label.get(label, {})]
        if missing:
            raise ValueError(f"--from-records {args.from_records} lacks {missing}")
        done = {label: [by_label[label][s] for s in seeds] for label in configs}
    else:
        folder = Path(args.records or tempfile.mkdtemp(prefix="length_reach_"))
        done = run_tasks(configs, seeds, args.workers, folder)
    for label, records in done.items():
        tasks[label] = summarise(label, records, n)
        print(json.dumps({k: v for k, v in tasks[label].items() if k != "stack_bins"}),
              flush=True)
    raw.update(tasks=tasks, torch=torch.__version__, recipe={
        k: params[k] for k in ("max_length", "n_train", "n_test", "max_steps", "lr", "d_model",
                               "n_layers", "batch_size", "target_accuracy")},
        test_max_length=args.test_max_length, threshold=THRESHOLD, workers=args.workers,
        seconds=raw.get("seconds") if args.from_records else round(time.perf_counter() - start, 1),
        cores=os.cpu_count())
    rows = table_rows(tasks, n)
    table.save_or_write(out_path, "length_reach", rows, raw, load, "full")
    for r in rows:
        print(f"  {r['measure']}: {r['dyckbook']}")


if __name__ == "__main__":
    main()
