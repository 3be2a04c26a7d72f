"""Grid throughput: models trained per second at the grid's spec, one at a time vs seeds batched.

Trains the seeds of one grid cell for a fixed number of steps (no early stop) five ways, all on
one torch thread: the grid of the previous release (its per-model loop, run from a git worktree
of ``--baseline-ref``), this package one model at a time, this package with the seeds batched
into one network, the same with every batch padded to its widest string in a random batch
(``bucket=False``: the grid's recipe before length bucketing), and the batched network with its
forward pass compiled by ``torch.compile`` (dynamic shapes; timed after a warm-up that compiles
it, so the compile time itself is left out). Writes benchmarks/results/grid.json and prints a
table.

    python benchmarks/bench_grid.py [--seeds 10] [--steps 200] [--cells CELL,CELL]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from dyckbook.blocks import init_models
from dyckbook.grid import Cell, GridSpec
from dyckbook.model import ClassificationTask, Classifier, seed_for
from dyckbook.protocol import make_splits
from dyckbook.train import train

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "grid.json"
PEAK = 160e9  # fp32 matmul peak of one core of the development machine, FLOP/s

_OLD = """
import json, sys, time, torch
from dyckbook.grid import GridCell, GridSpec, make_grid_data, run_cell
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


def old_loop(ref: str, cell: str, steps: int, seeds: list[int]) -> dict | None:
    """Train seconds per model of the previous release's grid, or None if it cannot run."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "old"
        made = subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                               ref], capture_output=True, text=True, check=False)
        if made.returncode:
            print(f"no baseline: {made.stderr.strip()}", file=sys.stderr)
            return None
        try:
            env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
            run = subprocess.run([sys.executable, "-c", _OLD, cell, str(steps),
                                  ",".join(map(str, seeds))], capture_output=True, text=True,
                                 env=env, cwd=tmp, check=False)
            if run.returncode:
                print(f"baseline failed: {run.stderr[-500:]}", file=sys.stderr)
                return None
            rows = json.loads(run.stdout.strip().splitlines()[-1])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True, check=False)
    return {"train_seconds": sum(r["train"] for r in rows), "models": len(rows)}


def timed_train(config, seeds: list[int], sets: list, **changes) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, parameters per model) of one train() call (``changes``:
    TrainConfig fields to change)."""
    model = Classifier(config.model, seeds)
    wall, cpu = time.perf_counter(), time.process_time()
    train(model, ClassificationTask(), sets, None, dataclasses.replace(config.train, **changes))
    return time.perf_counter() - wall, time.process_time() - cpu, model.n_params


def timed_compiled(config, seeds: list[int], sets: list) -> tuple[float, float]:
    """(wall seconds of train(), seconds of the compiling warm-up) with the batched network's
    forward compiled; the warm-up's weights are then reset to their initial values."""
    model = Classifier(config.model, seeds)
    model._run = torch.compile(model._run, dynamic=True)
    warm = time.perf_counter()
    train(model, ClassificationTask(), sets, None, dataclasses.replace(config.train, max_steps=20))
    warm = time.perf_counter() - warm
    init_models(model, [seed_for(s, "init") for s in seeds])
    wall = time.perf_counter()
    train(model, ClassificationTask(), sets, None, config.train)
    return time.perf_counter() - wall, warm


def measure_cell(cell: str, seeds: list[int], steps: int, baseline_ref: str) -> dict:
    """Models/s of one cell four ways, and the batched network's fraction of one core's peak."""
    spec = GridSpec(max_steps=steps, eval_every=steps, target_accuracy=None)
    config = spec.config(Cell.from_name(cell))
    sets = [make_splits(config.data, s).train for s in seeds]
    timed_train(config, seeds[:1], sets[:1])  # warm-up: imports, allocator
    single = [timed_train(config, [s], [d]) for s, d in zip(seeds, sets)]
    batched = timed_train(config, seeds, sets)
    padded = timed_train(config, seeds, sets, bucket=False)
    compiled, compile_s = timed_compiled(config, seeds, sets)
    old = old_loop(baseline_ref, cell, steps, seeds)
    tokens = steps * spec.batch_size * (sum(sets[0].lengths) / len(sets[0]) + 2)
    flops = 6 * single[0][2] * tokens * len(seeds)
    return {"cell": cell, "seeds": len(seeds), "steps": steps, "spec": spec.to_dict(),
            "models_per_s": {
                "previous release, per-model loop":
                    old["models"] / old["train_seconds"] if old else None,
                "one model at a time": len(seeds) / sum(w for w, _, _ in single),
                "seeds batched": len(seeds) / batched[0],
                "seeds batched, random batches (no bucketing)": len(seeds) / padded[0],
                "seeds batched, forward compiled": len(seeds) / compiled},
            "compile_warmup_s": compile_s,
            "fraction_of_peak_batched": flops / batched[0] / PEAK}


def cell_rows(m: dict) -> list[dict]:
    """The table rows of one measured cell."""
    name = f"grid {m['cell']}, {m['seeds']} seeds x {m['steps']} steps"
    old, one, batched, padded, compiled = m["models_per_s"].values()
    return [table.row(name, "models/s, one at a time vs the previous release's loop", one, old),
            table.row(name, "models/s, seeds batched vs the previous release's loop", batched,
                      old, target="≥ 3×"),
            table.row(name, "models/s, seeds batched vs one at a time (this release)", batched,
                      one),
            table.row(name, "models/s, seeds batched: length-bucketed vs random batches",
                      batched, padded),
            table.row(name, "models/s, seeds batched: torch.compile of the forward vs eager",
                      compiled, batched),
            table.row(name, "fraction of one core's fp32 peak (160 GFLOP/s), batched",
                      m["fraction_of_peak_batched"])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cells", default="k3-L2-causal-learned-mean,k3-L2-causal-learned-end")
    parser.add_argument("--baseline-ref", default="21b7ebb")
    args = parser.parse_args()
    load = os.getloadavg()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    measured = [measure_cell(c, seeds, args.steps, args.baseline_ref)
                for c in args.cells.split(",")]
    rows = [r for m in measured for r in cell_rows(m)]
    table.save("grid", rows, {"cells": measured, "torch": torch.__version__}, load,
               "full" if args.seeds >= 10 else "small")
    print(f"1 torch thread; load average at the start {load[0]:.2f}")
    for r in rows:
        ratio = "" if r["ratio"] is None else f"  x{r['ratio']:.2f}"
        print(f"  {r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])}{ratio}")


if __name__ == "__main__":
    main()
