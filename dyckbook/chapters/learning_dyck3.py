"""Learning Dyck-3 (notebook 12_learning_dyck3): registered recipes trained on the grid's stack
regime, their learning curves, the strongest stack-free rule and the references beside them,
and probes of where a recipe that fails breaks.

A recipe is written in the notebook's ``recipes`` parameter, so that its registration (which
digests the run's parameters) fixes every choice: ``name@cell key:value ...``, recipes separated
by ``;``. ``cell`` is a grid cell (``k3-L2-causal-learned-mean``); a key is a field of the grid's
recipe (:class:`~dyckbook.chapters.ablation_grid.GridSpec`: ``max_steps``, ``n_train``,
``d_model`` ...) or of a run's configuration (``RunConfig.override``: ``objective``,
``train_negatives`` ...). What a recipe does not name is the grid's.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from dyckbook.chapters.ablation_grid import Cell, GridSpec
from dyckbook.chapters.figure_style import new_figure, style_context
from dyckbook.chapters.page import pct, plural, run_all
from dyckbook.data.dataset import Dataset
from dyckbook.data.protocol import DataConfig
from dyckbook.experiment import evaluate, results
from dyckbook.experiment.record import RunRecord
from dyckbook.experiment.run import RunConfig, config_digest, data_splits, run_seeds
from dyckbook.experiment.train import TrainConfig
from dyckbook.interp import constructions, probes
from dyckbook.nn.recurrent import RecurrentConfig

__all__ = ["Recipe", "parse_recipes", "plot_curves", "probe_rows", "recipe_rows",
           "reference_configs", "run_recipes", "stack_tops"]

_SPEC = {f.name for f in dataclasses.fields(GridSpec)}


@dataclass(frozen=True)
class Recipe:
    """One registered recipe: a grid cell, the grid fields it changes, the run fields it sets."""

    name: str
    cell: Cell
    spec: tuple[tuple[str, Any], ...]
    overrides: tuple[tuple[str, Any], ...]

    def config(self, seed: int = 0) -> RunConfig:
        config = GridSpec(**dict(self.spec)).config(self.cell, seed)
        return config.override(**dict(self.overrides)) if self.overrides else config

    def describe(self) -> str:
        changes = [f"{k} = {v}" for k, v in (*self.spec, *self.overrides)]
        return ", ".join(changes) or "the grid's recipe"


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a bare word: objective:language_model


def parse_recipes(text: str) -> list[Recipe]:
    """``name@cell key:value ...; ...`` -> recipes, each checked by building its configuration
    (a ValueError names the recipe and what is wrong)."""
    out: list[Recipe] = []
    for part in (p.strip() for p in str(text).split(";")):
        if not part:
            continue
        head, *pairs = part.split()
        name, at, cell = head.partition("@")
        if not at or not name or name in {r.name for r in out}:
            raise ValueError(f"recipes: each must start with a new 'name@cell', got {head!r}")
        spec, overrides = {}, {}
        for pair in pairs:
            key, colon, value = pair.partition(":")  # papermill reads no second '=' on a line
            if not colon:
                raise ValueError(f"recipes: {name}: expected key:value, got {pair!r}")
            (spec if key in _SPEC else overrides)[key] = _value(value)
        try:
            recipe = Recipe(name, Cell.from_name(cell), tuple(spec.items()),
                            tuple(overrides.items()))
            recipe.config()
        except (ValueError, TypeError) as error:
            raise ValueError(f"recipes: {name}: {error}") from None
        out.append(recipe)
    if not out:
        raise ValueError(f"recipes must name at least one recipe, got {text!r}")
    return out


def recipe_rows(recipes: Sequence[Recipe]) -> list[dict[str, str]]:
    return [{"recipe": r.name, "cell": r.cell.name, "what it changes": r.describe()}
            for r in recipes]


def run_recipes(configs: Mapping[str, RunConfig], seeds: Sequence[int],
                records_path: str | Path, device: str = "cpu") -> dict[str, list[RunRecord]]:
    """Each labelled configuration's seeds trained together (``page.run_all``), resuming from
    ``records_path``: a configuration whose every seed has a record there is not trained again
    (the file keeps only records of ``configs``), so a run stopped on one machine goes on from
    its records on another; within a machine ``DYCKBOOK_RUN_CACHE`` resumes a stopped one.
    A configuration that trains again trains all its seeds (the run cache reads back those it
    holds) and records them all, so its earlier records leave the file first: the file holds
    each (configuration, seed) once, the latest record where it held two."""
    path = Path(records_path)
    wanted = {c.with_seed(s).digest(): (label, s) for label, c in configs.items() for s in seeds}
    found = results.read_records(path)
    have = {config_digest(r.config): r for r in found if config_digest(r.config) in wanted}
    complete = {label for label, config in configs.items()
                if all(config.with_seed(s).digest() in have for s in seeds)}
    kept = [r for r in have.values() if wanted[config_digest(r.config)][0] in complete]
    if len(kept) < len(found):
        results.write_records(path, kept)
    out: dict[str, list[RunRecord]] = {}
    for label, config in configs.items():
        digests = [config.with_seed(s).digest() for s in seeds]
        if all(d in have for d in digests):
            out[label] = [have[d] for d in digests]
            for r in out[label]:
                r.label = label
        else:
            runs = run_all({label: config}, seeds, path.parent, device=device)
            out[label] = [r.record for r in runs[label]]
    return out


def reference_configs(configs: Mapping[str, RunConfig], cells: str, steps: int = 0
                      ) -> dict[str, RunConfig]:
    """The recurrent references (``cells``: ``stack``, ``lstm``, comma-separated; ``none``) on
    the first recipe's data, for ``steps`` steps (0: the most any recipe takes) at the grid's
    learning rate and schedule."""
    first = next(iter(configs.values()))
    budget = steps or max(c.train.max_steps for c in configs.values())
    data: DataConfig = first.data
    out = {}
    for cell in (c.strip() for c in cells.split(",") if c.strip() not in ("", "none")):
        name = "stack RNN" if cell == "stack" else cell.upper()
        out[name] = RunConfig(
            data=data, model=RecurrentConfig(k=data.k, n_ctx=data.max_length, cell=cell),
            train=TrainConfig(max_steps=budget, lr=first.train.lr, batch_size=32,
                              warmup_steps=first.train.warmup_steps, schedule="cosine",
                              grad_clip=1.0, eval_every=first.train.eval_every),
            seed=0, baselines=())
    return out


def stack_test(config: RunConfig, seed: int = 0) -> Dataset:
    """A configuration's stack test set at ``seed`` (made again: the data are a function of
    the configuration and the seed)."""
    return data_splits(config.data, seed).tests["stack"]


def first_model(config: RunConfig, seed: int, device: str = "cpu") -> Any:
    """The model of one seed of a configuration: read back from ``DYCKBOOK_RUN_CACHE`` where
    the run trained it, else trained again (a run resumed on another machine)."""
    return run_seeds(config, [seed], device=device, splits=False)[0].model


def model_accuracy(model: Any, test: Dataset) -> float:
    """A model's accuracy on a test set."""
    scored = evaluate.score(evaluate.predict(model, test), test)
    return scored.correct / scored.n


def construction_accuracy(test: Dataset) -> float:
    """The hand-set two-layer construction (``constructions.dyck_kd``) on a test set."""
    return model_accuracy(constructions.dyck_kd(test.language.k, 24, int(test.lengths.max())),
                          test)


def reference_rows(runs: Mapping[str, Sequence[RunRecord]], construction: float | None = None
                   ) -> list[dict[str, Any]]:
    """The references' table: per reference its seeds, their mean stack-set accuracy, the
    lowest and highest seed and how many reach 99%; the construction (nothing trained) last."""
    rows = []
    for name, group in runs.items():
        acc = [r.accuracy("stack") for r in group]
        rows.append({"reference": name, "seeds": len(acc) or "-",
                     "stack-set accuracy (mean)": pct(float(np.mean(acc))) if acc else "-",
                     "lowest, highest seed": f"{pct(min(acc))}, {pct(max(acc))}" if acc else "-",
                     "seeds at 99% or more": f"{sum(a >= 0.99 for a in acc)} of {len(acc)}"})
    if construction is not None:
        rows.append({"reference": "construction", "seeds": "-",
                     "stack-set accuracy (mean)": pct(construction),
                     "lowest, highest seed": "-", "seeds at 99% or more": "-"})
    return rows


def probed_sentence(probed: Mapping[str, tuple[float, float]]) -> str:
    """The probed models' own stack-set accuracy beside their records' (``{recipe: (model's,
    record's)}``), and why the two may differ."""
    if not probed:
        return ""
    parts = [f"{label} {pct(own)} (its record: {pct(recorded)})"
             for label, (own, recorded) in probed.items()]
    text = f"On the stack set the probed models (seed 0) score {', '.join(parts)}."
    if any(pct(own) != pct(recorded) for own, recorded in probed.values()):
        text += (" Where the two differ, the model was trained again from its configuration "
                 "and seed (weights are not committed) on another processor or with another "
                 "number of threads than its record: its sums run in another order, and its "
                 "optimiser steps carry that difference past the last bits. The probes "
                 "describe the model they read.")
    return text


def plot_curves(records: Mapping[str, Sequence[Any]], columns: int = 4) -> Figure:
    """Validation accuracy (half hard, half stack negatives) against steps: a panel per recipe
    (its seeds solved on the stack set in the title), each seed a thin line."""
    rows = max(1, -(-len(records) // columns))
    with style_context():
        fig, axes = new_figure(rows, columns, (2.3 * columns, 2.1 * rows + 0.4),
                               "Dyck-3: learning curves of the recipes", sharex=True,
                               sharey=True)
        for ax, (label, group) in zip(axes.flat, records.items()):
            for record in group:
                steps = [h["step"] for h in record.history]
                acc = [h["val_accuracy"][0] if isinstance(h["val_accuracy"], list)
                       else h["val_accuracy"] for h in record.history]
                ax.plot(steps, acc, lw=0.8, alpha=0.8)
            solved = sum(r.accuracy("stack") >= 0.99 for r in group if "stack" in r.scores)
            ax.axhline(0.99, color="0.5", lw=0.8, ls="--")
            ax.set_title(f"{label} ({solved}/{len(group)} solved)", fontsize=8)
            ax.set(ylim=(0.4, 1.01))
        for i, ax in enumerate(axes.flat):
            if i >= len(records):
                ax.set_axis_off()
            elif i + columns >= len(records):  # the lowest panel of its column
                ax.tick_params(labelbottom=True)
                ax.set_xlabel("optimiser steps")
        for ax in axes[:, 0]:
            ax.set_ylabel("validation accuracy")
        return fig


def stack_tops(dataset: Dataset) -> np.ndarray:
    """int64 (batch, pos): after each symbol, the type of the innermost open bracket (``k``:
    none open), following the heights (a closer pops whatever is on top)."""
    codes, n = dataset.codes.astype(np.int64), dataset.codes.shape[1]
    k, rows = dataset.language.k, np.arange(len(codes))
    heights = dataset.language.heights(dataset.codes, dataset.lengths).astype(np.int64)
    stack = np.full((len(codes), n + 1), k, np.int64)
    top = np.full(codes.shape, k, np.int64)
    for i in range(n):
        inside = i < dataset.lengths
        h = np.clip(heights[:, i], 0, n)
        opener = inside & (codes[:, i] & 1 == 0)
        stack[rows[opener], h[opener]] = codes[opener, i] >> 1
        top[:, i] = np.where(inside & (h > 0), stack[rows, h], k)
    return top


def probe_rows(label: str, model: Any, dataset: Dataset, seed: int = 0) -> list[dict[str, Any]]:
    """Linear probes of one model's residual stream (every hook) on ``dataset``: the height
    (R^2) and the type on top of the stack (accuracy, beside the majority class)."""
    data = probes.collect_residuals(model, dataset)
    b, s = np.nonzero(np.arange(dataset.codes.shape[1])[None, :] < dataset.lengths[:, None])
    top = stack_tops(dataset)[b, s]
    split = int(np.random.default_rng(seed).integers(2**63))  # one held-out split for all
    rows = []
    for hook in data.hooks:
        depth = probes.fit_linear_probe(data.token_features[hook], data.depth, "regression",
                                        np.random.default_rng(split), groups=data.string_index)
        kind = probes.fit_linear_probe(data.token_features[hook], top, "classification",
                                       np.random.default_rng(split), groups=data.string_index)
        rows.append({"recipe": label, "hook": hook.replace("hook_", ""),
                     "height R^2": round(depth.test_score, 3),
                     "top of stack": f"{pct(kind.test_score)} (majority {pct(kind.baseline)})"})
    return rows


def solved_sentence(summary: Sequence[Mapping[str, Any]], references: Mapping[str, float],
                    steps: int) -> str:
    """Which recipes solved the stack set (>= 0.99 in most seeds), beside the references."""
    won = [r["label"] for r in summary if r["seeds"] and r["solved"] * 2 > r["seeds"]]
    head = (f"{plural(len(won), 'recipe')} of {len(summary)} solved the stack set in most of "
            f"their seeds ({', '.join(won)})" if won else
            f"None of the {len(summary)} recipes solved the stack set in most of its seeds")
    trained = {name: acc for name, acc in references.items() if name != "construction"}
    scores = ", ".join(f"{name} {pct(acc)}" for name, acc in trained.items())
    refs = (f" The recurrent references, trained for {steps:,} steps on the same data, score "
            f"{scores}.") if trained else ""
    built = (f" The hand-set construction, trained on nothing, scores "
             f"{pct(references['construction'])}.") if "construction" in references else ""
    return f"{head}.{refs}{built}"
