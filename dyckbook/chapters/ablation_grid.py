"""The ablation grid: mask x positional encoding x readout x layers x k, many seeds per cell.

A grid is "enumerate cells -> map ``run_cell`` over an executor -> append records": every cell
is an ordinary :class:`~dyckbook.experiment.run.RunConfig`
built from one :class:`GridSpec`, its seeds are
trained together (``run.run_seeds``), and the records are appended to a JSONL file as cells
finish, so an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from dyckbook.chapters.figure_style import HIDDEN, new_figure, style_context
from dyckbook.chapters.page import (
    accuracy_text,
    data_cache,
    failed_text,
    pct,
    plural,
    shared_data,
    strongest_text,
    summary_rows,
)
from dyckbook.chapters.page import summarise as run_summarise
from dyckbook.data.config import Config
from dyckbook.data.hardness import BINS
from dyckbook.data.protocol import DataConfig
from dyckbook.experiment import results
from dyckbook.experiment.evaluate import wilson
from dyckbook.experiment.grid import CELL_SETS, Cell, cells_named
from dyckbook.experiment.record import RunRecord
from dyckbook.experiment.run import RunConfig, config_digest, run_seeds
from dyckbook.experiment.train import TrainConfig
from dyckbook.nn import options
from dyckbook.nn.model import ModelConfig

__all__ = ["CELL_SETS", "SOLVED", "Cell", "GridSpec", "cell_of",
           "cells_named", "run_cell", "run_grid", "summarise"]

SOLVED = 0.99  # test accuracy at which a seed counts as having learned the language


@dataclass(frozen=True)
class GridSpec(Config):
    """The recipe shared by every cell: small models, a step budget, the sound protocol."""

    d_model: int = 32  # residual stream width
    n_heads: int = 2  # heads per layer
    d_mlp: int = 64  # MLP width
    dropout: float = 0.0  # small models on fresh data do not overfit within this budget
    min_length: int = 4  # shortest string
    max_length: int = 48  # longest string of Dyck-k, k >= 2 (stack negatives exist from 30)
    max_length_k1: int = 40  # longest Dyck-1 string (far negatives exist from 30)
    n_train: int = 8000  # training strings (half members; negatives a quarter each hard, local,
    #                      random, stack where stack negatives exist)
    n_val: int = 500  # validation strings (half hard, half stack negatives), for early stopping
    n_test: int = 2000  # requested strings per test set
    test_sets: tuple[str, ...] = ("stack", "hard", "local", "random")  # regimes of the test sets
    #                             (stack: the verdict-bearing set)
    batch_size: int = 64  # strings per step and model
    bucket: bool = True  # batch strings of similar length (less padding: ~1.5x faster here)
    matmul: str = "bfloat16"  # bfloat16 | float32 matrix products (TrainConfig.matmul: ~1.3x a
    #                           step here, results within the seed spread: bench_recipe.py)
    lr: float = 3e-3  # Adam's peak learning rate
    warmup_steps: int = 100  # linear warm-up
    schedule: str = "cosine"  # then cosine decay to 0 at max_steps
    grad_clip: float = 1.0  # per-model gradient-norm clipping
    max_steps: int = 1000  # optimiser steps at most
    eval_every: int = 50  # validation period in steps
    target_accuracy: float = 0.995  # stop a model once its last 3 validations average this

    def __post_init__(self) -> None:
        object.__setattr__(self, "test_sets", tuple(self.test_sets))
        self.config(Cell(1, 1, "causal", "none", "end"))  # every field checked by its config

    def config(self, cell: Cell, seed: int = 0) -> RunConfig:
        """The :class:`RunConfig` of one cell."""
        longest = self.max_length_k1 if cell.k == 1 else self.max_length
        data = DataConfig(k=cell.k, min_length=self.min_length, max_length=longest,
                          n_train=self.n_train, n_val=self.n_val, n_test=self.n_test,
                          test_sets=self.test_sets)
        model = ModelConfig(k=cell.k, n_ctx=longest, d_model=self.d_model, n_heads=self.n_heads,
                            d_mlp=self.d_mlp, n_layers=cell.n_layers, dropout=self.dropout,
                            mask=cell.mask, pos_encoding=cell.pos_encoding, readout=cell.readout)
        train = TrainConfig(lr=self.lr, batch_size=self.batch_size, max_steps=self.max_steps,
                            warmup_steps=self.warmup_steps, schedule=self.schedule,
                            grad_clip=self.grad_clip, eval_every=self.eval_every,
                            target_accuracy=self.target_accuracy, bucket=self.bucket,
                            matmul=self.matmul)
        return RunConfig(data, model, train, seed)

    @classmethod
    def from_flat(cls, params: Mapping[str, Any]) -> GridSpec:
        """A spec from the names of a notebook's parameters cell (other names are ignored)."""
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params})


def cell_of(record: RunRecord) -> Cell:
    """The cell a record belongs to."""
    m, d = record.config["model"], record.config["data"]
    return Cell(d["k"], m["n_layers"], m["mask"], m["pos_encoding"], m["readout"])


def run_cell(config: dict[str, Any], seeds: Sequence[int], device: str = "cpu",
             data: str | None = None) -> list[dict[str, Any]]:
    """Train one cell's seeds together on ``device``, their splits read from the data cache
    folder ``data`` where given (``page.shared_data``); records as dicts (what executors send
    back)."""
    with data_cache(data):
        results_ = run_seeds(RunConfig.from_dict(config), list(seeds), device=device)
    return [r.record.to_dict() for r in results_]


def run_grid(cells: Iterable[Cell], spec: GridSpec, seeds: Sequence[int],
             executor: Executor | None = None, records_path: str | Path | None = None,
             on_cell: Callable[[Cell, list[RunRecord]], None] | None = None,
             device: str = "cpu") -> list[RunRecord]:
    """Run every cell for every seed, resuming from ``records_path``.

    Args:
        cells: the cells.
        spec: the shared recipe.
        seeds: seeds of every cell.
        executor: any ``concurrent.futures.Executor`` (a process pool, a Dask client's
            executor); None runs the cells here, one after another.
        records_path: JSONL file that keeps the records: those already there for the same
            configuration and seed are reused, new ones are appended as cells finish.
        on_cell: called with each cell and its records as it finishes (progress reports).
        device: where each cell trains ("cpu", "cuda", "auto"); on a card the cells run as
            concurrent workers (``pipeline.devices.executor`` sizes the pool to its memory).

    Returns:
        The records of every (cell, seed), in cell then seed order.
    """
    cells = list(cells)
    done = {}
    if records_path is not None:
        kept = results.keep_records(records_path, lambda r: config_digest(r.config)
                                    == spec.config(cell_of(r), r.config["seed"]).digest())
        done = {config_digest(r.config): r for r in kept}
    todo = []
    for cell in cells:
        missing = [s for s in seeds if spec.config(cell, s).digest() not in done]
        if missing:
            todo.append((cell, missing))

    def finish(cell: Cell, records: list[dict[str, Any]]) -> None:
        parsed = [RunRecord.from_dict(r) for r in records]
        for record in parsed:
            done[config_digest(record.config)] = record
        if records_path is not None:
            results.append_records(records_path, parsed)
        if on_cell is not None:
            on_cell(cell, parsed)

    if executor is None:
        for cell, missing in todo:
            finish(cell, run_cell(spec.config(cell).to_dict(), missing, device))
    else:  # each (data, seed) made once, over the workers, before the cells
        with shared_data({c.name: spec.config(c) for c, _ in todo},
                         sorted({s for _, m in todo for s in m}), executor) as data:
            futures = {executor.submit(run_cell, spec.config(cell).to_dict(), missing, device,
                                       data): cell for cell, missing in todo}
            for future in as_completed(futures):
                finish(futures[future], future.result())
    return [done[spec.config(cell, s).digest()] for cell in cells for s in seeds]


def summarise(records: Iterable[RunRecord], test: str = "stack") -> list[dict[str, Any]]:
    """``run.summarise`` by cell, plus the cell's fields and the Wilson interval of the share of
    seeds that solved it (>= ``SOLVED``), over every seed (failed ones count as not solved)."""
    by_cell: dict[Cell, list[RunRecord]] = {}
    for record in records:
        by_cell.setdefault(cell_of(record), []).append(record)
    cells = sorted(by_cell)
    rows = run_summarise({c.name: by_cell[c] for c in cells}, test)
    for cell, row in zip(cells, rows):
        seeds = row["seeds"]
        row.update(asdict(cell), cell=cell.name, solved_interval=wilson(row["solved"], seeds),
                   solved_share=row["solved"] / seeds if seeds else math.nan)
    return rows


def grid_scope(rows: Sequence[Mapping[str, Any]], spec: Any) -> str:
    """What this grid ran: cells, seeds, models, budget."""
    seeds = max((r["seeds"] for r in rows), default=0)
    return (f"This page shows {len(rows)} cells x {plural(seeds, 'seed')} = "
            f"{sum(r['seeds'] for r in rows)} trained models: d_model {spec.d_model}, "
            f"{spec.n_heads} heads, at most {spec.max_steps} steps of {spec.batch_size} strings "
            f"({'of similar length' if spec.bucket else 'drawn at random'}) "
            f"from {spec.n_train} training strings of length {spec.min_length} to "
            f"{spec.max_length} (Dyck-1: {spec.max_length_k1}), matrix products in "
            f"{spec.matmul}, stopped early once the mean of a model's last three validation "
            f"accuracies (hard and stack negatives) reaches {pct(spec.target_accuracy)}; test "
            f"sets: "
            f"{', '.join(spec.test_sets)}.")


def grid_rows(rows: Sequence[Mapping[str, Any]], top: int = 12) -> list[dict[str, Any]]:
    """The ``top`` cells by seeds solved, then mean accuracy, as display rows."""
    ranked = sorted(rows, key=lambda r: (-r["solved"], -(r["accuracy"] if math.isfinite(
        r["accuracy"]) else -1)))[:top]
    return summary_rows(ranked, name="cell")  # a cell's label is its name


def stack_beside_hard(stack: Sequence[Mapping[str, Any]], hard: Sequence[Mapping[str, Any]],
                      k: int, top: int = 10) -> list[dict[str, Any]]:
    """The ``top`` cells of one k by stack accuracy, each with its stack accuracy beside its hard
    (local) accuracy, the hard set's bins and the strongest shortcut on each set."""
    by_cell = {r["cell"]: r for r in hard}
    ranked = sorted((r for r in stack if r["k"] == k and math.isfinite(r["accuracy"])),
                    key=lambda r: -r["accuracy"])[:top]
    bins = [b for b in BINS if any(b in by_cell.get(r["cell"], {}).get("per_bin", {})
                                   for r in ranked)]
    out = []
    for r in ranked:
        h = by_cell.get(r["cell"], {})
        out.append({"cell": r["cell"], "stack": accuracy_text(r),
                    "stack: strongest shortcut": strongest_text(r),
                    "hard": accuracy_text(h) if h else "n/a",
                    **{f"hard, bin {b}": pct(h.get("per_bin", {}).get(b, math.nan))
                       for b in bins},
                    "hard: strongest shortcut": strongest_text(h)})
    return out


def grid_sentences(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per k and depth: how many cells at least half their seeds solve, the best cell; and
    what the cells that cannot see order score."""
    out = []
    for k in sorted({r["k"] for r in rows}):
        for layers in sorted({r["n_layers"] for r in rows if r["k"] == k}):
            group = [r for r in rows if r["k"] == k and r["n_layers"] == layers]
            solved = [r for r in group if r["seeds"] and r["solved"] >= r["seeds"] / 2]
            best = max(group, key=lambda r: (r["solved"], r["accuracy"]))
            out.append(f"- Dyck-{k}, {layers} layer{'s' * (layers > 1)}: {len(solved)} of "
                       f"{len(group)} cells solved by at least half their seeds; best "
                       f"{best['cell']} ({best['solved']} of {plural(best['seeds'], 'seed')}"
                       f"{failed_text(best)}, {pct(best['accuracy'])}).")
    blind = [r for r in rows if r["mask"] == "bidirectional" and r["pos_encoding"] == "none"]
    if blind:
        top = max(blind, key=lambda r: r["accuracy"] if math.isfinite(r["accuracy"]) else 0)
        out.append(f"- No positions and a bidirectional mask (order-blind): the best such cell "
                   f"scores {pct(top['accuracy'])}.")
    constant = [r for r in rows if "constant" in r["failures"]]
    if constant:
        out.append(f"- {len(constant)} cells have seeds whose output is the same for every "
                   f"input (all causal cells read at [start] are among them).")
    return "\n".join(out)


def plot_grid(rows: Sequence[Mapping[str, Any]], value: str = "solved_share",
              title: str | None = None) -> Figure:
    """The ablation grid as annotated heatmaps: a panel per (k, layers), rows = mask and
    positional encoding, columns = readout; empty cells were not run.

    Args:
        rows: one dict per cell (``grid.summarise``): ``k``, ``n_layers``, ``mask``,
            ``pos_encoding``, ``readout``, ``value``, ``seeds`` and ``failed`` and, for
            ``solved_share``, ``solved`` (annotated as solved / all seeds).
        value: ``solved_share`` (share of seeds that solved the language) or ``accuracy``
            (mean test accuracy over all seeds, failed ones included).

    Returns:
        A Figure with k x layers panels and a colour bar.
    """
    if value not in ("solved_share", "accuracy"):
        raise ValueError(f"value must be 'solved_share' or 'accuracy', got {value!r}")
    ks = sorted({r["k"] for r in rows})
    layers = sorted({r["n_layers"] for r in rows})
    lines = sorted({(r["mask"], r["pos_encoding"]) for r in rows},
                   key=lambda m_pe: (options.MASKS.index(m_pe[0]),
                                     options.POS_ENCODINGS.index(m_pe[1])))
    readouts = sorted({r["readout"] for r in rows}, key=options.READOUTS.index)
    vmin = 0.0 if value == "solved_share" else 0.5
    with style_context():
        fig, axes = new_figure(len(ks), len(layers), (2.2 * len(layers) * max(1, len(readouts)) / 3
                                                   + 2.6, 0.32 * len(lines) * len(ks) + 1.2),
                            sharex=True, sharey=True, title=title)
        for (i, k), (j, n_layers) in ((a, b) for a in enumerate(ks) for b in enumerate(layers)):
            grid = np.full((len(lines), len(readouts)), np.nan)
            text = np.full(grid.shape, "", dtype=object)
            for r in rows:
                if (r["k"], r["n_layers"]) == (k, n_layers):
                    cell = lines.index((r["mask"], r["pos_encoding"])), readouts.index(r["readout"])
                    grid[cell] = r[value]
                    text[cell] = ("all failed" if r["seeds"] == r["failed"] else
                                  f"{r['solved']}/{r['seeds']}"
                                  if value == "solved_share" else f"{r[value]:.2f}")
            ax = axes[i, j]
            ax.set_facecolor(HIDDEN)
            sns.heatmap(grid, ax=ax, vmin=vmin, vmax=1.0, cmap="viridis", annot=text, fmt="",
                        annot_kws={"fontsize": 7}, cbar=False, linewidths=0.5,
                        linecolor="white", xticklabels=readouts,
                        yticklabels=[f"{m}, {pe}" for m, pe in lines])
            # seaborn annotates a cell with a value; one without (NaN) it leaves blank
            for r, c in zip(*np.nonzero((text == "all failed") & np.isnan(grid))):
                ax.text(c + 0.5, r + 0.5, "all failed", ha="center", va="center", fontsize=7)
            ax.set_title(f"Dyck-{k}, {n_layers} layer{'s' * (n_layers > 1)}")
            ax.tick_params(length=0)
            ax.set(xlabel="readout" if i == len(ks) - 1 else "", ylabel="")
        fig.colorbar(axes[0, 0].collections[0], ax=axes.ravel().tolist(), shrink=0.8,
                     label=value.replace("_", " "))
    return fig
