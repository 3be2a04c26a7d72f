"""Length bucketing in the grid: same cells, seeds and budget, batches random or length-bucketed.

Bucketing (``GridSpec.bucket``) batches strings of similar length, so a step pads less; it
also changes which strings share a batch. This trains the same cells with it off and on, at
the grid's full recipe (early stopping included), and records the wall time and, per cell,
the seeds that solved it and the mean hard-test accuracy with its 95% bootstrap interval, so
that the speed-up is only taken where the results stay within the seed spread. Writes
benchmarks/results/bucketing.json and prints a table.

    python benchmarks/bench_bucketing.py [--seeds 5] [--cells CELL,CELL]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from dyckbook import grid

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

CELLS = "k1-L2-causal-none-end,k3-L1-bidirectional-learned-start,k3-L2-causal-learned-mean"


def measure(cells: list[grid.Cell], seeds: range, bucket: bool) -> dict:
    """Wall seconds and the per-cell summary of one pass over ``cells``."""
    start = time.perf_counter()
    rows = grid.summarise(grid.run_grid(cells, grid.GridSpec(bucket=bucket), seeds))
    keep = ("cell", "seeds", "failed", "solved", "accuracy", "low", "high")
    return {"seconds": time.perf_counter() - start, "rows": [{k: r[k] for k in keep} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cells", default=CELLS)
    args = parser.parse_args()
    load = os.getloadavg()
    torch.set_num_threads(1)
    cells = grid.cells_named(args.cells)
    seeds = range(args.seeds)
    off, on = measure(cells, seeds, False), measure(cells, seeds, True)
    name = f"grid recipe, {len(cells)} cells x {args.seeds} seeds"
    rows = [table.row(name, "wall seconds, bucketed vs random batches", on["seconds"],
                      off["seconds"], lower_is_better=True)]
    for a, b in zip(off["rows"], on["rows"]):
        rows.append(table.row(
            f"{a['cell']}, {args.seeds} seeds",
            f"hard accuracy bucketed [{b['low']:.3f}, {b['high']:.3f}] vs random "
            f"[{a['low']:.3f}, {a['high']:.3f}]; solved {b['solved']} vs {a['solved']}",
            b["accuracy"], a["accuracy"]))
    table.save("bucketing", rows, {"random": off, "bucketed": on, "torch": torch.__version__},
               load, "full" if args.seeds >= 5 else "small")
    print(f"1 torch thread; load average at the start {load[0]:.2f}")
    for r in rows:
        print(f"  {r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])} "
              f"(random: {table.number(r['reference'])})")


if __name__ == "__main__":
    main()
