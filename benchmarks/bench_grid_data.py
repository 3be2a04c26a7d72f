"""A grid on worker processes: each (data config, seed) and its rules made once first, or not.

``ablation_grid.run_grid`` with an executor first makes every distinct (data config, seed) once,
spread over the workers, into the data cache (``page.shared_data``); before that, every worker
made each split its cells needed (the data cache, where set, did not help: the workers start
together and all miss it). On the H200's 16 CUDA workers the cpu profile's grid (72 cells, ten
seeds each; a Dyck-3 split takes about 42 s on one core here) had not finished in 560 s.

The rules' scores of a record depend on the data and seed alone (``run.baseline_block``), and
fitting them is most of a Dyck-3 record (22 s of 26 s for a grid seed on one core): since then
``shared_data`` makes them with the splits, once over the workers, and every cell reads them.

This times ``run_grid`` on a process pool of ``--workers`` at the cpu profile's data sizes with
a short training budget (``--steps``), so that the data and the rules dominate, three ways in
one run: ``each`` (the cells submitted directly, no data cache: every worker makes the splits
and fits the rules its cells need), ``data`` (the splits made once first, as ``shared_data``
did before the rules were shared; a worker fits the rules it finds in no cache) and ``shared``
(the package's path); the same records. Writes benchmarks/results/grid_data.json, a table.

    python benchmarks/bench_grid_data.py [--cells k3-L1-causal-none-end,...] [--seeds 2]
        [--workers 2] [--steps 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
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


def each_worker(cells: list[G.Cell], spec: G.GridSpec, seeds: list[int], pool,
                data: str | None = None) -> list[dict]:
    """The cells submitted directly: each worker makes the splits (none in ``data``) and fits
    the rules its cells need."""
    futures = [pool.submit(G.run_cell, spec.config(c).to_dict(), seeds, "cpu", data)
               for c in cells]
    return [r for f in futures for r in f.result()]


def splits_only(data: object, seed: int, folder: str) -> None:
    """A worker's task: the splits of ``data`` at ``seed`` into ``folder``, no rules."""
    from dyckbook.chapters.page import data_cache
    from dyckbook.experiment.run import data_splits

    with data_cache(folder):
        data_splits(data, seed)


def data_first(cells: list[G.Cell], spec: G.GridSpec, seeds: list[int], pool) -> list[dict]:
    """Every (data config, seed)'s splits made once over the workers, then the cells."""
    with tempfile.TemporaryDirectory(prefix="bench-grid-data-") as folder:
        tasks = dict.fromkeys((spec.config(c).data, s) for c in cells for s in seeds)
        for future in [pool.submit(splits_only, d, s, folder) for d, s in tasks]:
            future.result()
        return each_worker(cells, spec, seeds, pool, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", default="k3-L1-causal-none-end,k3-L1-causal-none-mean,"
                        "k3-L1-causal-learned-end,k3-L1-causal-learned-mean")
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
    ways = {"each": each_worker, "data": data_first,
            "shared": lambda *a: [r.to_dict() for r in G.run_grid(*a[:3], executor=a[3])]}
    for way, run in ways.items():  # fresh pools: no worker holds a split or a rule from before
        with executors.make_executor("processes", args.workers) as pool:
            start = time.perf_counter()
            records = run(cells, spec, seeds, pool)
            raw[f"{way}_s"] = round(time.perf_counter() - start, 1)
        got[way] = sorted((r["config"]["seed"], str(r["scores"]), str(r["baselines"]))
                          for r in records)
        print(f"{way}: {raw[f'{way}_s']} s", flush=True)
    raw["same_records"] = got["each"] == got["data"] == got["shared"]
    raw["speedup"] = round(raw["each_s"] / raw["shared_s"], 2)
    what = (f"{len(cells)} Dyck-{cells[0].k} cells x {args.seeds} seeds, {args.workers} workers,"
            f" {args.steps} steps")
    rows = [table.row("grid on workers, splits and rules made by each worker", what +
                      ", seconds", raw["each_s"]),
            table.row("grid on workers, splits made once, rules by each worker", what +
                      ", seconds", raw["data_s"], raw["each_s"], lower_is_better=True),
            table.row("grid on workers, splits and rules made once (shared_data)", what +
                      ", seconds", raw["shared_s"], raw["data_s"], lower_is_better=True),
            table.row("grid on workers", "the same records every way", str(raw["same_records"]))]
    path = table.save_or_write(Path(args.out), "grid_data", rows, raw, load, "full")
    for r in rows:
        print(f"{r['benchmark']:<55} {r['measure']:<45} {r['dyckbook']}")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
