"""The ablation grid: mask x positional encoding x readout x layers x k, many seeds per cell.

A grid is "enumerate cells -> map ``run_cell`` over an executor -> append records": every cell
is an ordinary :class:`~dyckbook.run.RunConfig` built from one :class:`GridSpec`, its seeds are
trained together (``run.run_seeds``), and the records are appended to a JSONL file as cells
finish, so an interrupted grid resumes where it stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor, as_completed
from dataclasses import asdict, dataclass, fields
from itertools import product
from pathlib import Path
from typing import Any

from dyckbook import results
from dyckbook.blocks import POS_ENCODINGS
from dyckbook.config import Config
from dyckbook.evaluate import wilson
from dyckbook.model import MASKS, READOUTS, ModelConfig
from dyckbook.protocol import DataConfig
from dyckbook.run import RunConfig, RunRecord, config_digest, run_seeds
from dyckbook.run import summarise as run_summarise
from dyckbook.train import TrainConfig

__all__ = ["CELL_SETS", "GRID_POS_ENCODINGS", "SOLVED", "Cell", "GridSpec", "cell_of",
           "cells_named", "run_cell", "run_grid", "summarise"]

LAYERS = (1, 2, 3)
KS = (1, 3)
#: the full grid's encodings (its 1,800 published models); a cell may name any of
#: blocks.POS_ENCODINGS (rope, alibi, randomized are studied in 07's length runs)
GRID_POS_ENCODINGS = ("none", "absolute", "absolute_ctx", "sinusoidal", "learned")
SOLVED = 0.99  # test accuracy at which a seed counts as having learned the language


@dataclass(frozen=True, order=True)
class Cell:
    """One architecture of the grid; everything else comes from the :class:`GridSpec`."""

    k: int
    n_layers: int
    mask: str
    pos_encoding: str
    readout: str

    @property
    def name(self) -> str:
        """e.g. ``k1-L2-causal-learned-mean``."""
        return f"k{self.k}-L{self.n_layers}-{self.mask}-{self.pos_encoding}-{self.readout}"

    @classmethod
    def from_name(cls, name: str) -> Cell:
        """Inverse of :attr:`name`; a malformed name raises ``ValueError`` naming it."""
        parts = name.split("-") if isinstance(name, str) else []
        try:
            k, layers = int(parts[0].removeprefix("k")), int(parts[1].removeprefix("L"))
            cell = cls(k, layers, *parts[2:])
        except (IndexError, ValueError, TypeError):
            raise ValueError(f"cell name must look like 'k3-L2-causal-learned-end', "
                             f"got {name!r}") from None
        if (cell.mask not in MASKS or cell.pos_encoding not in POS_ENCODINGS
                or cell.readout not in READOUTS):
            raise ValueError(f"cell name {name!r} names an unknown mask, encoding or readout")
        return cell


def all_cells() -> list[Cell]:
    """k x layers x mask x PE x readout: 180 cells, in a fixed order."""
    return [Cell(*c) for c in product(KS, LAYERS, MASKS, GRID_POS_ENCODINGS, READOUTS)]


def _reduced() -> list[Cell]:
    """What the verdicts need at 1 and 2 layers, for both k: the thesis' configurations, every
    causal configuration with a readout that can see the string, and the bidirectional ones
    with a position encoding that can tell order."""
    keep = []
    for c in all_cells():
        if c.n_layers == 3 or c.pos_encoding == "absolute_ctx":
            continue
        causal_ok = c.mask == "causal" and c.readout != "start"
        bidirectional_ok = c.mask == "bidirectional" and c.readout != "end"
        thesis = c.pos_encoding in ("none", "absolute") and c.readout == "start"
        if causal_ok or bidirectional_ok or thesis:
            keep.append(c)
    return keep


def _smoke() -> list[Cell]:
    return [Cell(1, 1, "bidirectional", "learned", "start"), Cell(1, 1, "causal", "none", "start"),
            Cell(1, 1, "causal", "learned", "mean")]


CELL_SETS: dict[str, Callable[[], list[Cell]]] = {"full": all_cells, "reduced": _reduced,
                                                  "smoke": _smoke}


def cells_named(name: str) -> list[Cell]:
    """A named cell set (``full``, ``reduced``, ``smoke``) or comma-separated cell names."""
    if name in CELL_SETS:
        return CELL_SETS[name]()
    if "-" in name:
        return [Cell.from_name(part.strip()) for part in name.split(",")]
    raise ValueError(f"cells must be one of {sorted(CELL_SETS)} or cell names, got {name!r}")


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


def run_cell(config: dict[str, Any], seeds: Sequence[int]) -> list[dict[str, Any]]:
    """Train one cell's seeds together; records as dicts (what executors send back)."""
    results_ = run_seeds(RunConfig.from_dict(config), list(seeds))
    return [r.record.to_dict() for r in results_]


def run_grid(cells: Iterable[Cell], spec: GridSpec, seeds: Sequence[int],
             executor: Executor | None = None, records_path: str | Path | None = None,
             on_cell: Callable[[Cell, list[RunRecord]], None] | None = None) -> list[RunRecord]:
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

    Returns:
        The records of every (cell, seed), in cell then seed order.
    """
    cells = list(cells)
    done = {}
    if records_path is not None:
        found = results.read_records(records_path)
        done = {d: r for r in found if (d := config_digest(r.config))
                == spec.config(cell_of(r), r.config["seed"]).digest()}
        if len(done) < len(found):  # records of another recipe: the file keeps this one only
            results.write_bytes(records_path, b"")
            results.append_records(records_path, done.values())
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
            finish(cell, run_cell(spec.config(cell).to_dict(), missing))
    else:
        futures = {executor.submit(run_cell, spec.config(cell).to_dict(), missing): cell
                   for cell, missing in todo}
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
