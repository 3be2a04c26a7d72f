"""A change to the grid's recipe: same cells, seeds and budget, trained with and without it.

A speed-up of the grid that also changes the arithmetic is only taken where the results stay
within the seed spread. ``--change bucket`` compares random with length-bucketed batches
(``GridSpec.bucket``: less padding, but other strings share a batch); ``--change matmul``
float32 with bfloat16 matrix products (``GridSpec.matmul``). This trains the same cells both
ways at the grid's full recipe (early stopping included) and records the wall time and, per
cell, the seeds that solved it and the mean hard-test accuracy with its 95% bootstrap
interval. Writes benchmarks/results/recipe_<change>.json and prints a table.

    python benchmarks/bench_recipe.py [--change bucket|matmul|all] [--seeds 5] [--cells C,C]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

from dyckbook.chapters import ablation_grid
from dyckbook.experiment import run

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

CELLS = ("k1-L2-causal-none-end,k3-L1-bidirectional-learned-start,k3-L2-causal-learned-mean,"
         "k1-L3-bidirectional-sinusoidal-mean,k3-L3-causal-learned-end")
#: change -> (GridSpec field, value without it, value with it, names of both)
CHANGES = {"bucket": ("bucket", False, True, "bucketed", "random batches"),
           "matmul": ("matmul", "float32", "bfloat16", "bfloat16", "float32")}


def measure(cells: list[ablation_grid.Cell], seeds: range, spec: ablation_grid.GridSpec) -> dict:
    """Wall seconds and the per-cell summary of one pass over ``cells``."""
    run._splits.cache_clear()  # each pass generates its data, as a grid worker does
    start = time.perf_counter()
    rows = ablation_grid.summarise(ablation_grid.run_grid(cells, spec, seeds))
    keep = ("cell", "seeds", "failed", "solved", "accuracy", "low", "high")
    return {"seconds": time.perf_counter() - start, "rows": [{k: r[k] for k in keep} for r in rows]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--change", choices=[*sorted(CHANGES), "all"], default="all")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--cells", default=CELLS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for change in sorted(CHANGES) if args.change == "all" else [args.change]:
        compare(change, ablation_grid.cells_named(args.cells), range(args.seeds))


def compare(change: str, cells: list[ablation_grid.Cell], seeds: range) -> None:
    """Both passes of one change; its results file and table."""
    field, without, with_, on_name, off_name = CHANGES[change]
    load = os.getloadavg()
    off = measure(cells, seeds, ablation_grid.GridSpec(**{field: without}))
    on = measure(cells, seeds, ablation_grid.GridSpec(**{field: with_}))
    name = f"grid recipe, {len(cells)} cells x {len(seeds)} seeds"
    rows = [table.row(name, f"wall seconds, {on_name} vs {off_name}", on["seconds"],
                      off["seconds"], lower_is_better=True)]
    for a, b in zip(off["rows"], on["rows"]):
        rows.append(table.row(
            f"{a['cell']}, {len(seeds)} seeds",
            f"stack accuracy {on_name} [{b['low']:.3f}, {b['high']:.3f}] vs {off_name} "
            f"[{a['low']:.3f}, {a['high']:.3f}]; solved {b['solved']} vs {a['solved']}",
            b["accuracy"], a["accuracy"]))
    table.save(f"recipe_{change}", rows, {off_name: off, on_name: on, "torch": torch.__version__},
               load, "full" if len(seeds) >= 5 else "small")
    print(f"1 torch thread; load average at the start {load[0]:.2f}")
    for r in rows:
        print(f"  {r['benchmark']}: {r['measure']}: {table.number(r['dyckbook'])} "
              f"({off_name}: {table.number(r['reference'])})")


if __name__ == "__main__":
    main()
