"""A grid on worker processes: each (data config, seed) made once first, or by each worker.

``ablation_grid.run_grid`` with an executor first makes every distinct (data config, seed) once,
spread over the workers, into the data cache (``page.shared_data``); before that, every worker
made each split its cells needed (the data cache, where set, did not help: the workers start
together and all miss it). On the H200's 16 CUDA workers the cpu profile's grid (72 cells, ten
seeds each; a Dyck-3 split takes about 42 s on one core here) had not finished in 560 s.

This times ``run_grid`` on a process pool of ``--workers`` at the cpu profile's data sizes with
a short training budget (``--steps``), so that the data dominate, both ways in one run:
``shared`` (the package's path) and ``each`` (the cells submitted directly, as before; the same
records). Writes benchmarks/results/grid_data.json and prints a table.

    python benchmarks/bench_grid_data.py [--cells k3-L1-causal-none-end,k3-L1-causal-none-mean]
        [--seeds 2] [--workers 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import table

from dyckbook.chapters import ablation_grid as G
from dyckbook.pipeline import executors, manifest


def cpu_spec(steps: int) -> G.GridSpec:
    """The cpu profile's grid recipe, trained ``steps`` steps."""
    m = manifest.load_manifest()
    params = {r.name: r for r in manifest.resolve_profile(m, "cpu")}["ablation-grid"].params
    return G.GridSpec.from_flat({**params, "max_steps": steps})


def each_worker(cells: list[G.Cell], spec: G.GridSpec, seeds: list[int], pool) -> list[dict]:
    """The cells submitted directly: each worker makes the splits its cells need."""
    futures = [pool.submit(G.run_cell, spec.config(c).to_dict(), seeds) for c in cells]
    return [r for f in futures for r in f.result()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="k3-L1-causal-none-end,k3-L1-causal-none-mean")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", default=str(table.RESULTS / "grid_data.json"))
    args = parser.parse_args()
    if os.environ.get("DYCKBOOK_DATA_CACHE"):
        sys.exit("bench_grid_data: unset DYCKBOOK_DATA_CACHE (a warm cache would time nothing)")
    cells = [G.Cell.from_name(c) for c in args.cells.split(",")]
    spec, seeds, load = cpu_spec(args.steps), list(range(args.seeds)), list(os.getloadavg())
    raw: dict = {"cells": args.cells, "seeds": args.seeds, "workers": args.workers,
                 "steps": args.steps, "cpu_count": os.cpu_count()}
    got = {}
    for way in ("each", "shared"):  # fresh pools: no worker holds a split from before
        with executors.make_executor("processes", args.workers) as pool:
            start = time.perf_counter()
            records = (each_worker(cells, spec, seeds, pool) if way == "each" else
                       [r.to_dict() for r in G.run_grid(cells, spec, seeds, executor=pool)])
            raw[f"{way}_s"] = round(time.perf_counter() - start, 1)
        got[way] = sorted((r["config"]["seed"], str(r["scores"])) for r in records)
        print(f"{way}: {raw[f'{way}_s']} s", flush=True)
    raw["same_records"] = got["each"] == got["shared"]
    raw["speedup"] = round(raw["each_s"] / raw["shared_s"], 2)
    what = (f"{len(cells)} Dyck-{cells[0].k} cells x {args.seeds} seeds, {args.workers} workers,"
            f" {args.steps} steps")
    rows = [table.row("grid on workers, data made by each worker (before)", what + ", seconds",
                      raw["each_s"]),
            table.row("grid on workers, each split made once (shared_data)", what + ", seconds",
                      raw["shared_s"], raw["each_s"], lower_is_better=True),
            table.row("grid on workers", "the same records both ways", str(raw["same_records"]))]
    path = table.save_or_write(Path(args.out), "grid_data", rows, raw, load, "full")
    for r in rows:
        print(f"{r['benchmark']:<55} {r['measure']:<45} {r['dyckbook']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
