"""Seconds per ablation-grid cell: the package's generic pipeline (before) vs dyckbook.grid (after).

Writes ``benchmarks/results/grid.json`` and prints a table. For each measured cell both pipelines
train the same model for the same number of steps on the same protocol (``GridSpec`` defaults,
early stopping off so that the step count is equal) and evaluate it on a hard and a random test
set; the time is split into data (generation, splitting, tokenising), training and evaluation.

- before: what an experiment notebook does per run -- generate and split the data for the cell,
  iterate ``data.make_loader`` batches (gathered and tokenised per step), ``train.train`` (which
  evaluates the whole train and validation splits after every epoch), ``evaluate.evaluate``
  (per-item Python bookkeeping).
- after, unbucketed: ``grid.run_cell`` with ``bucket=False`` (batches padded to n_ctx + 2);
- after: ``grid.run_cell`` -- data generated and tokenised once per (k, seed) and shared by the
  90 cells of that k (its cost is shown once and divided by 90 in the per-cell total), fixed-shape
  index batches from pre-built tensors, validation every ``eval_every`` steps, one forward pass
  per test set with ``numpy.bincount`` counts, and (``bucket=True``) each batch drawn from one
  length, so no position is padding and attention takes the unmasked fused path.

Both use one torch thread. CPU time (``time.process_time``) is reported beside wall time since the
2-core machine is shared; quote ratios from one run.

Two more views of where a cell's time goes:

- ``op_shares``: one cell's training steps under ``torch.profiler``, self CPU time grouped into
  matrix products, fused attention, layout copies, layer norms, the optimiser and the rest;
- ``grid_run`` (with ``--records``): per (k, layers) mean seconds per record of a real grid run
  (its ``grid_records.jsonl``), split into data, training and evaluation, with the mean number of
  steps and the share of seeds that stopped early.

    .venv/bin/python benchmarks/bench_grid.py [--steps 300] [--records PATH/grid_records.jsonl]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np
import torch

from dyckbook import data as D
from dyckbook import grid as G
from dyckbook.evaluate import evaluate
from dyckbook.model import TransformerClassifier
from dyckbook.negatives import HARD_KINDS
from dyckbook.tokenizer import DyckTokenizer
from dyckbook.train import TrainConfig, train

OUT = Path(__file__).resolve().parent / "results" / "grid.json"
CELLS = [
    G.GridCell(1, 2, "bidirectional", "learned", "end"),
    G.GridCell(3, 1, "causal", "absolute", "mean"),
    G.GridCell(1, 3, "bidirectional", "sinusoidal", "start"),
]


class Clock:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> Clock:  # noqa: PYI034
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.w, time.process_time() - self.c


def before(cell: G.GridCell, spec: G.GridSpec, seed: int) -> dict[str, float]:
    """The generic pipeline, with the data made per cell."""
    base = {"k": cell.k, "min_length": spec.min_length, "max_length": spec.max_length}
    with Clock() as t_data:
        sizes = [spec.n_train, spec.n_val, spec.n_test]
        mixed = D.generate_dataset(
            D.DatasetSpec(n=sum(sizes), negatives=HARD_KINDS + ("random",), seed=seed, **base)
        )
        train_set, val_set, _ = D.split_dataset(mixed, np.array(sizes) / sum(sizes), seed)
        hard = D.generate_dataset(
            D.DatasetSpec(n=spec.n_test, negatives="hard", seed=seed + 1, **base)
        )
        rand = D.generate_dataset(
            D.DatasetSpec(n=spec.n_random_test, negatives="random", seed=seed + 2, **base)
        )
        tok = DyckTokenizer(mixed.language)
        loaders = {
            name: D.make_loader(
                ds, spec.batch_size if name == "train" else 256, shuffle=name == "train", seed=seed
            )
            for name, ds in (
                ("train", train_set),
                ("val", val_set),
                ("hard", hard),
                ("random", rand),
            )
        }
    model = TransformerClassifier(
        spec.model_config(cell, tok.vocab_size), generator=torch.Generator().manual_seed(seed)
    )
    epochs = -(-spec.max_steps // len(loaders["train"]))
    config = TrainConfig(
        lr=spec.lr,
        epochs=epochs,
        max_steps=spec.max_steps,
        warmup_steps=spec.warmup_steps,
        seed=seed,
        device="cpu",
        progress=False,
    )
    with Clock() as t_train:
        train(model, loaders["train"], loaders["val"], config)
    with Clock() as t_eval:
        evaluate(model, loaders["hard"])
        evaluate(model, loaders["random"])
    return {
        "data": t_data.cpu,
        "train": t_train.cpu,
        "eval": t_eval.cpu,
        "wall": t_data.wall + t_train.wall + t_eval.wall,
        "total": t_data.cpu + t_train.cpu + t_eval.cpu,
    }


def after(cell: G.GridCell, spec: G.GridSpec, seed: int, cells_per_data: int) -> dict[str, float]:
    """dyckbook.grid.run_cell with its data made once per (k, seed)."""
    with Clock() as t_data:
        data = G.make_grid_data(cell.k, seed, spec)
    with Clock() as t_cell:
        record = G.run_cell(cell, seed, spec, data)
    # split the cell's CPU time in the proportions of its own wall-clock breakdown
    share = t_cell.cpu / max(record["seconds"]["total"], 1e-9)
    return {
        "data": t_data.cpu,
        "data_per_cell": t_data.cpu / cells_per_data,
        "train": record["seconds"]["train"] * share,
        "eval": record["seconds"]["eval"] * share,
        "wall": t_cell.wall + t_data.wall / cells_per_data,
        "total": t_cell.cpu + t_data.cpu / cells_per_data,
    }


OP_GROUPS = (  # (group, substrings of aten op names), first match wins
    ("matrix products", ("aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")),
    ("fused attention", ("scaled_dot_product",)),
    ("layout copies", ("aten::copy_", "aten::cat", "aten::clone", "aten::contiguous")),
    ("layer norm", ("layer_norm",)),
    ("optimiser", ("adam", "Optimizer", "clip_grad", "aten::norm", "foreach")),
)


def op_shares(cell: G.GridCell, spec: G.GridSpec, steps: int = 60) -> dict[str, object]:
    """Self-CPU-time shares of one cell's training steps, grouped (``torch.profiler``)."""
    from torch.profiler import profile

    data = G.make_grid_data(cell.k, 0, spec)
    warm = G.GridSpec(**{**spec.to_dict(), "max_steps": 5, "eval_every": 5, "target_accuracy": 1.0})
    G.run_cell(cell, 0, warm, data)  # first-call costs out of the measurement
    short = G.GridSpec(**{**spec.to_dict(), "max_steps": steps, "eval_every": steps,
                          "target_accuracy": 1.0})
    with profile() as prof:
        G.run_cell(cell, 0, short, data)
    totals: dict[str, float] = {name: 0.0 for name, _ in OP_GROUPS}
    totals["other"] = 0.0
    for event in prof.key_averages():
        if not event.key.startswith("aten::") and "Optimizer" not in event.key:
            continue  # Python-level and autograd wrapper events would double count
        group = next((g for g, keys in OP_GROUPS if any(k in event.key for k in keys)), "other")
        totals[group] += event.self_cpu_time_total / 1e6
    whole = sum(totals.values()) or 1.0
    return {"cell": cell.name, "steps": steps,
            "seconds": {k: round(v, 3) for k, v in totals.items()},
            "share": {k: round(v / whole, 3) for k, v in totals.items()}}


def grid_run(path: Path) -> dict[str, object]:
    """Mean seconds per record of a real grid run, per (k, layers)."""
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not records:
        raise SystemExit(f"--records {path}: no records")
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(f"k{r['cell']['k']}-L{r['cell']['n_layers']}", []).append(r)
    out: dict[str, object] = {}
    for key, rs in sorted(groups.items()):
        out[key] = {
            "records": len(rs),
            **{f"{part}_s": round(float(np.mean([r["seconds"][part] for r in rs])), 3)
               for part in ("data", "train", "eval", "total")},
            "steps": round(float(np.mean([r["steps"] for r in rs])), 1),
            "stopped_early": round(float(np.mean([r["stopped_early"] for r in rs])), 3),
        }
    total = float(sum(r["seconds"]["total"] for r in records))
    return {"path": str(path), "records": len(records), "cpu_seconds_total": round(total, 1),
            "per_group": out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps per cell")
    parser.add_argument("--records", type=Path, default=None,
                        help="grid_records.jsonl of a grid run to summarise (optional)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # target 1.0 with validation only at the end: both pipelines take exactly --steps steps
    spec = G.GridSpec(max_steps=args.steps, eval_every=args.steps, target_accuracy=1.0)
    rows = []
    flat = G.GridSpec(**{**spec.to_dict(), "bucket": False})
    print(
        f"{'cell':42s} {'before':>28s} | {'after, unbucketed':>22s} | {'after (bucketed)':>22s} | x"
    )
    for cell in CELLS:
        b = before(cell, flat, 0)
        u = after(cell, flat, 0, cells_per_data=90)
        a = after(cell, spec, 0, cells_per_data=90)
        rows.append(
            {
                "cell": cell.name,
                "steps": args.steps,
                "before": b,
                "after_unbucketed": u,
                "after": a,
                "speedup_cpu": b["total"] / a["total"],
            }
        )
        print(
            f"{cell.name:42s} {b['total']:6.2f} (d {b['data']:.2f} t {b['train']:.2f} e "
            f"{b['eval']:.2f}) | {u['total']:6.2f} (t {u['train']:.2f} e {u['eval']:.2f}) | "
            f"{a['total']:6.2f} (t {a['train']:.2f} e {a['eval']:.2f}) | "
            f"{rows[-1]['speedup_cpu']:.2f}",
            flush=True,
        )
    result = {
        "what": "seconds per ablation-grid cell, generic pipeline vs dyckbook.grid (1 thread)",
        "spec": spec.to_dict(),
        "cells": rows,
        "cpu_seconds_per_step_after": float(
            np.mean([r["after"]["train"] for r in rows]) / args.steps
        ),
        "op_shares": op_shares(CELLS[0], flat),
        "grid_run": grid_run(args.records) if args.records else None,
        "machine": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "processor": platform.processor() or platform.machine(),
            "loadavg": list(__import__("os").getloadavg()),
        },
    }
    shares = result["op_shares"]["share"]
    print(f"op shares of {result['op_shares']['cell']} training (self CPU time): "
          + ", ".join(f"{k} {v:.0%}" for k, v in shares.items()))
    if result["grid_run"]:
        g = result["grid_run"]
        print(f"grid run {g['path']}: {g['records']} records, {g['cpu_seconds_total']:.0f} CPU-s")
        for key, row in g["per_group"].items():
            print(f"  {key}: {row['records']:4d} records, {row['total_s']:.2f} s each (data "
                  f"{row['data_s']:.2f}, train {row['train_s']:.2f}, eval {row['eval_s']:.2f}), "
                  f"{row['steps']:.0f} steps, {row['stopped_early']:.0%} stopped early")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
