"""Grid throughput: models trained per second at the grid's spec, one at a time vs seeds batched.

Trains the seeds of one grid cell for a fixed number of steps (no early stop), all on one
torch thread: the grid of the previous release (its per-model loop, run from a git worktree of
``--baseline-ref``), this package one model at a time, and the seeds batched into one network
three ways: with torch's ops only (``kernels.torch_only``: the batched grid before the C
kernels), with the C kernels (``dyckbook.nn.kernels``) in float32, and with the kernels and
bfloat16 matrix products (``TrainConfig.matmul``; the grid's default: bench_recipe.py checks
that its results stay within the seed spread). Writes benchmarks/results/grid.json and prints a
table. Tried before and not adopted: ``torch.compile`` of the batched forward (0.73x and 0.80x
of eager, commit e7852d7); random instead of length-bucketed batches: see bench_recipe.py.

Every way runs ``--repeats`` times, interleaved round by round; the table keeps the median.

    python benchmarks/bench_grid.py [--seeds 10] [--steps 200] [--cells CELL,CELL] [--repeats 3]
        [--before REF]   # also HEAD's grid default against commit REF's, interleaved
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from dyckbook.chapters.ablation_grid import Cell, GridSpec
from dyckbook.data.protocol import make_splits
from dyckbook.experiment.train import train
from dyckbook.nn import kernels
from dyckbook.nn.model import ClassificationTask, Classifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "grid.json"
PEAK = 160e9  # fp32 matmul peak of one core of the development machine, FLOP/s
#: the batched network's variants: name -> (torch ops only, TrainConfig.matmul)
BATCHED = {"seeds batched, torch ops only": (True, "float32"),
           "seeds batched, C kernels, float32": (False, "float32"),
           "seeds batched, C kernels, bfloat16 products (grid default)": (False, "bfloat16")}

_OLD = """
import json, sys, time, torch
from dyckbook.grid import GridCell, GridSpec, make_grid_data, run_cell  # the release's module
torch.set_num_threads(1)
cell = GridCell.from_name(sys.argv[1]); steps = int(sys.argv[2])
spec = GridSpec(max_steps=steps, eval_every=steps, target_accuracy=1.0)
out = []
for seed in map(int, sys.argv[3].split(",")):
    data = make_grid_data(cell.k, seed, spec)
    t = time.process_time()
    record = run_cell(cell, seed, spec, data)
    out.append({"cpu": time.process_time() - t, "train": record["seconds"]["train"]})
print(json.dumps(out))
"""


_NOW = """
import dataclasses, json, sys, time, torch
from dyckbook.chapters.ablation_grid import Cell, GridSpec
from dyckbook.nn.model import ClassificationTask, Classifier
from dyckbook.data.protocol import make_splits
from dyckbook.experiment.train import train
torch.set_num_threads(1)
cell, steps, seeds = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split(",")]
spec = GridSpec(max_steps=steps, eval_every=steps, target_accuracy=None, max_length=16,
                max_length_k1=20, test_sets=("hard", "local", "random"))
config = spec.config(Cell.from_name(cell))
sets = [make_splits(config.data, s).train for s in seeds]
train(Classifier(config.model, seeds[:1]), ClassificationTask(), sets[:1], None,
      dataclasses.replace(config.train, max_steps=5))
model = Classifier(config.model, seeds)
start = time.process_time()  # CPU seconds of its one thread: the shared machine's load aside
train(model, ClassificationTask(), sets, None, config.train)
print(json.dumps({"models_per_cpu_s": len(seeds) / (time.process_time() - start)}))
"""


def before_after(cells: list[str], seeds: list[int], steps: int, before: str, after: str,
                 repeats: int) -> tuple[dict, list[dict]]:
    """The grid default (seeds batched, C kernels, bfloat16) of each cell with the package of
    commit ``before`` and of ``after``, each in its own process, interleaved round by round
    (models per CPU-second of the one thread)."""
    raw, rows = {}, []
    for cell in cells:
        got = table.before_after(_NOW, [cell, str(steps), ",".join(map(str, seeds))], before,
                                 after, repeats=repeats)
        raw[cell] = got
        rows.append(table.row(f"grid {cell}, {len(seeds)} seeds x {steps} steps",
                              f"models/CPU-s, grid default: after ({got['after']}) vs before "
                              f"({got['before']}), median of {repeats} interleaved rounds",
                              got["median"]["after"]["models_per_cpu_s"],
                              got["median"]["before"]["models_per_cpu_s"]))
    return raw, rows


@contextlib.contextmanager
def previous_release(ref: str):
    """A git worktree of ``ref`` for the length of the block (None if it cannot be made)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "old"
        made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                               ref], capture_output=True, text=True, check=False)
        if made.returncode:
            print(f"no baseline: {made.stderr.strip()}", file=sys.stderr)
            yield None
            return
        try:
            yield tree
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True, check=False)


def old_loop(tree: Path | None, cell: str, steps: int, seeds: list[int]) -> float | None:
    """Train seconds of all ``seeds`` in the previous release's grid (its worktree ``tree``),
    or None if it cannot run."""
    if tree is None:
        return None
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", _OLD, cell, str(steps), ",".join(map(str, seeds))],
                         capture_output=True, text=True, env=env, cwd=tree.parent, check=False)
    if run.returncode:
        print(f"baseline failed: {run.stderr[-500:]}", file=sys.stderr)
        return None
    return sum(r["train"] for r in json.loads(run.stdout.strip().splitlines()[-1]))


def timed_train(config, seeds: list[int], sets: list, torch_only: bool = False,
                **changes) -> float:
    """Wall seconds of one train() call (``changes``: TrainConfig fields to change;
    ``torch_only``: without the C kernels)."""
    model = Classifier(config.model, seeds)
    with kernels.torch_only() if torch_only else contextlib.nullcontext():
        wall = time.perf_counter()
        train(model, ClassificationTask(), sets, None, dataclasses.replace(config.train, **changes))
        return time.perf_counter() - wall


def measure_cell(cell: str, seeds: list[int], steps: int, tree: Path | None,
                 repeats: int) -> dict:
    """Models/s of one cell every way (each the median of ``repeats`` rounds, the ways
    interleaved within a round so that the machine's load drifts over all of them alike), and
    the batched network's fraction of one core's peak."""
    # the shape every earlier release was measured at (the grid then trained on lengths 4..16,
    # Dyck-1 4..20): like with like against the previous release's loop and the JSON on record
    spec = GridSpec(max_steps=steps, eval_every=steps, target_accuracy=None, max_length=16,
                    max_length_k1=20, test_sets=("hard", "local", "random"))
    config = spec.config(Cell.from_name(cell))
    sets = [make_splits(config.data, s).train for s in seeds]
    timed_train(config, seeds[:1], sets[:1], max_steps=5)  # warm-up: imports, kernels, allocator
    rounds: dict[str, list[float]] = {}
    for _ in range(repeats):
        walls = {"previous release, per-model loop": old_loop(tree, cell, steps, seeds),
                 "one model at a time": sum(timed_train(config, [s], [d])
                                            for s, d in zip(seeds, sets)),
                 **{name: timed_train(config, seeds, sets, plain, matmul=matmul)
                    for name, (plain, matmul) in BATCHED.items()}}
        for name, wall in walls.items():
            rounds.setdefault(name, []).append(wall)
    wall = {name: None if None in w else statistics.median(w) for name, w in rounds.items()}
    n_params = Classifier(config.model, seeds[:1]).n_params
    tokens = steps * spec.batch_size * (sum(sets[0].lengths) / len(sets[0]) + 2)
    flops = 6 * n_params * tokens * len(seeds)
    return {"cell": cell, "seeds": len(seeds), "steps": steps, "repeats": repeats,
            "spec": spec.to_dict(), "kernels": kernels.available(), "wall_seconds": rounds,
            "models_per_s": {name: None if w is None else len(seeds) / w
                             for name, w in wall.items()},
            "fraction_of_peak": {name: flops / wall[name] / PEAK for name in BATCHED}}


def cell_rows(m: dict) -> list[dict]:
    """The table rows of one measured cell."""
    name = f"grid {m['cell']}, {m['seeds']} seeds x {m['steps']} steps"
    rates = m["models_per_s"]
    old, one = rates["previous release, per-model loop"], rates["one model at a time"]
    plain, fp32, default = (rates[k] for k in BATCHED)
    return [table.row(name, "models/s, one at a time vs the previous release's loop", one, old),
            table.row(name, "models/s, grid default (seeds batched, C kernels, bfloat16 "
                      "products) vs the previous release's loop", default, old, target="≥ 3×"),
            table.row(name, "models/s, seeds batched, C kernels, float32 vs the previous "
                      "release's loop", fp32, old),
            table.row(name, "models/s, seeds batched, torch ops only (the previous batched "
                      "grid) vs the previous release's loop", plain, old),
            table.row(name, "models/s, seeds batched: C kernels vs torch ops only (float32)",
                      fp32, plain),
            table.row(name, "models/s, seeds batched: bfloat16 vs float32 products", default,
                      fp32),
            table.row(name, "fraction of one core's fp32 peak (160 GFLOP/s), grid default",
                      m["fraction_of_peak"][list(BATCHED)[-1]])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cells", default="k3-L2-causal-learned-mean,k3-L2-causal-learned-end")
    parser.add_argument("--baseline-ref", default="21b7ebb")
    parser.add_argument("--repeats", type=int, default=3, help="rounds; the median is kept")
    parser.add_argument("--before", default=None, metavar="REF",
                        help="also the grid default with the package of commit REF vs HEAD, "
                             "each in its own process, interleaved (a change's ratio)")
    args = parser.parse_args()
    load = os.getloadavg()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    with previous_release(args.baseline_ref) as tree:
        measured = [measure_cell(c, seeds, args.steps, tree, args.repeats)
                    for c in args.cells.split(",")]
    rows = [r for m in measured for r in cell_rows(m)]
    raw = {"cells": measured, "torch": torch.__version__}
    if args.before:
        after = table.commit("HEAD")  # once: a commit landing meanwhile is not measured
        raw["before_after"], more = before_after(args.cells.split(","), seeds, args.steps,
                                                 args.before, after, max(args.repeats, 5))
        rows += more
    table.save("grid", rows, raw, load, "full" if args.seeds >= 10 else "small")
    print(f"1 torch thread, median of {args.repeats} interleaved rounds; load average at the "
          f"start {load[0]:.2f}")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"  x{r['ratio']:.2f}"
        print(f"  {r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])}{ratio}")


if __name__ == "__main__":
    main()
