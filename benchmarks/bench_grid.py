"""Grid throughput: models trained per second at the grid's spec, one at a time vs seeds batched.

Trains the seeds of one grid cell for a fixed number of steps (no early stop) three ways, all on
one torch thread: the grid of the previous release (its per-model loop, run from a git worktree
of ``--baseline-ref``), this package one model at a time, and this package with the seeds
batched into one network. Writes benchmarks/results/grid.json and prints a table.

    python benchmarks/bench_grid.py [--seeds 10] [--steps 200] [--cell k3-L2-causal-learned-mean]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from dyckbook import results
from dyckbook.grid import Cell, GridSpec
from dyckbook.model import ClassificationTask, Classifier
from dyckbook.protocol import make_splits
from dyckbook.train import train

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "grid.json"
PEAK = 320e9  # fp32 matmul peak of the 2-core development machine, FLOP/s

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
                               ref], capture_output=True, text=True)
        if made.returncode:
            print(f"no baseline: {made.stderr.strip()}", file=sys.stderr)
            return None
        try:
            env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
            run = subprocess.run([sys.executable, "-c", _OLD, cell, str(steps),
                                  ",".join(map(str, seeds))], capture_output=True, text=True,
                                 env=env, cwd=tmp)
            if run.returncode:
                print(f"baseline failed: {run.stderr[-500:]}", file=sys.stderr)
                return None
            rows = json.loads(run.stdout.strip().splitlines()[-1])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           capture_output=True)
    return {"train_seconds": sum(r["train"] for r in rows), "models": len(rows)}


def timed_train(config, seeds: list[int], sets: list) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, parameters per model) of one train() call."""
    model = Classifier(config.model, seeds)
    wall, cpu = time.perf_counter(), time.process_time()
    train(model, ClassificationTask(), sets, None, config.train)
    return time.perf_counter() - wall, time.process_time() - cpu, model.n_params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--cell", default="k3-L2-causal-learned-mean")
    parser.add_argument("--baseline-ref", default="21b7ebb")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    spec = GridSpec(max_steps=args.steps, eval_every=args.steps, target_accuracy=None)
    config = spec.config(Cell.from_name(args.cell))
    sets = [make_splits(config.data, s).train for s in seeds]
    timed_train(config, seeds[:1], sets[:1])  # warm-up: imports, allocator
    single = [timed_train(config, [s], [d]) for s, d in zip(seeds, sets)]
    batched = timed_train(config, seeds, sets)
    old = old_loop(args.baseline_ref, args.cell, args.steps, seeds)
    loop_wall = sum(w for w, _, _ in single)
    tokens = args.steps * spec.batch_size * (sum(sets[0].lengths) / len(sets[0]) + 2)
    flops = 6 * single[0][2] * tokens * args.seeds
    rows = [
        {"way": "previous release, per-model loop", "models_per_s":
            old["models"] / old["train_seconds"] if old else None},
        {"way": "one model at a time", "models_per_s": args.seeds / loop_wall},
        {"way": f"{args.seeds} seeds batched", "models_per_s": args.seeds / batched[0]},
    ]
    base = rows[0]["models_per_s"] or rows[1]["models_per_s"]
    for row in rows:
        row["ratio"] = row["models_per_s"] / base if row["models_per_s"] else None
    report = {"cell": args.cell, "seeds": args.seeds, "steps": args.steps,
              "spec": spec.to_dict(), "rows": rows,
              "fraction_of_peak_batched": flops / batched[0] / PEAK,
              "load_average": os.getloadavg(), "torch": torch.__version__}
    results.write_json(OUT, report)
    print(f"{args.cell}, {args.seeds} seeds x {args.steps} steps, 1 thread")
    for row in rows:
        rate = "n/a" if row["models_per_s"] is None else f"{row['models_per_s']:.3f}"
        ratio = "" if row["ratio"] is None else f"  x{row['ratio']:.2f}"
        print(f"  {row['way']:<34} {rate} models/s{ratio}")
    print(f"  batched: {100 * report['fraction_of_peak_batched']:.1f}% of the fp32 peak "
          f"(6 x parameters per token)")


if __name__ == "__main__":
    main()
