"""Helpers for the notebooks: where a run writes, gluing sentences, tables and figures into the book."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dyckbook import results

__all__ = ["glue", "glue_figure", "glue_md", "glue_table", "markdown_table", "pct", "setup",
           "span"]


def setup(results_dir: str | os.PathLike[str], num_threads: int | None = None) -> Path:
    """Prepare a notebook run: torch threads, a quiet non-interactive plot backend, the folder.

    Args:
        results_dir: where the run writes (relative to the output root, or absolute).
        num_threads: torch's intra-op threads (None: leave as is).

    Returns:
        The absolute results folder (created).
    """
    import matplotlib
    import torch

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    path = results.resolve(results_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _glue(name: str, value: Any, display: bool = False) -> None:
    from myst_nb import glue as myst_glue

    myst_glue(name, value, display=display)


def glue(name: str, value: Any) -> Any:
    """Glue a number or short text for ``{glue:text}`name``` (not displayed here)."""
    _glue(name, value)
    return value


def glue_md(name: str, text: str, display: bool = False) -> str:
    """Glue Markdown (a whole sentence or paragraph) for ``{glue:md}`name```."""
    from IPython.display import Markdown

    _glue(name, Markdown(text), display)
    return text


def glue_table(name: str, rows: Sequence[Mapping[str, Any]], display: bool = True,
               **fmt: str) -> str:
    """Glue and (by default) show a Markdown table of ``rows`` (see :func:`markdown_table`)."""
    return glue_md(name, markdown_table(rows, **fmt), display)


def glue_figure(name: str, fig: Any, results_dir: str | os.PathLike[str]) -> Path:
    """Save ``fig`` as ``fig_<name>.png`` in the results folder and glue it as ``fig_<name>``
    (shown where the page writes ``{glue:figure} fig_<name>`` with its caption)."""
    path = results.resolve(results_dir) / f"fig_{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    _glue(f"fig_{name}", fig)
    return path


def pct(x: float, digits: int = 1) -> str:
    """``0.9876`` -> ``98.8%``; NaN -> ``n/a``."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def span(lo: float, hi: float, digits: int = 1) -> str:
    """A 95% interval as ``[97.1%, 99.0%]``."""
    return f"[{pct(lo, digits)}, {pct(hi, digits)}]"


def _cell(value: Any, floatfmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else format(value, floatfmt)
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Mapping[str, Any]], floatfmt: str = ".3f") -> str:
    """A Markdown table; columns are the keys of the first row, floats formatted by ``floatfmt``."""
    if not rows:
        return ""
    keys = [k for k in rows[0] if not str(k).startswith("_")]  # "_" keys: data, not columns
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(row.get(k), floatfmt) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def run_all(configs: Mapping[str, Any], seeds: Sequence[int], out: str | os.PathLike[str],
            batched: bool = True) -> dict[str, list[Any]]:
    """Run every labelled ``RunConfig`` for every seed; records go to ``out/records.jsonl``.

    Returns:
        ``{label: [RunResult per seed]}``.
    """
    from dyckbook import run

    done = {}
    for label, config in configs.items():
        print(f"{label}: {len(seeds)} seed(s) ...", flush=True)
        done[label] = run.run_seeds(config, list(seeds), batched)
        results.append_records(results.resolve(out) / "records.jsonl",
                               [r.record for r in done[label]])
    return done


def records_of(runs: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{label: [RunRecord]}`` of ``run_all``'s results."""
    return {label: [r.record for r in group] for label, group in runs.items()}


def summary_rows(rows: Sequence[Mapping[str, Any]],
                 shortcuts: Sequence[str] = ("counts", "bigrams", "local")) -> list[dict[str, Any]]:
    """Display rows of ``run.summarise``: accuracy with its interval, seeds, the shortcuts."""
    out = []
    for row in rows:
        trained = row["seeds"] - row["failed"]
        failed = f" ({row['failed']} failed: {', '.join(row['failures'])})" if row["failed"] else ""
        out.append({"configuration": row["label"], "seeds": f"{trained}{failed}",
                    "accuracy": f"{pct(row['accuracy'])} {span(row['low'], row['high'])}",
                    "solved": f"{row['solved']}/{trained}", "strings per seed": row["n_test"],
                    **{b: pct(row["baselines"].get(b, math.nan)) for b in shortcuts}})
    return out


def versus_shortcuts(row: Mapping[str, Any]) -> str:
    """One sentence comparing a configuration with the best shortcut on the same test sets.

    "Beats" only when the configuration's whole 95% interval lies above the best shortcut's
    accuracy; "does no better" when it lies below or straddles it.
    """
    name, best = max(row["baselines"].items(), key=lambda kv: kv[1])
    trained = row["seeds"] - row["failed"]
    if trained == 0:
        return f"{row['label']}: no seed trained ({', '.join(row['failures'])})."
    head = (f"{row['label']} scores {pct(row['accuracy'])} {span(row['low'], row['high'])} "
            f"over {trained} seed{'s' * (trained != 1)}")
    if row["low"] > best:
        return f"{head}, {100 * (row['accuracy'] - best):.1f} points above the best shortcut " \
               f"({name}, {pct(best)})."
    if row["high"] < best:
        return f"{head}, below the best shortcut ({name}, {pct(best)})."
    return f"{head}: no better than the best shortcut ({name}, {pct(best)})."


def seed_rows(groups: Mapping[str, Sequence[Any]], test: str = "hard") -> list[dict[str, Any]]:
    """Per-seed rows for ``plotting.plot_seeds``: configuration, accuracy, status."""
    return [{"config": label, "accuracy": r.accuracy(test), "status": r.status}
            for label, group in groups.items() for r in group if test in r.scores]


def best_label(rows: Sequence[Mapping[str, Any]]) -> str:
    """The configuration with the highest mean accuracy among those with a seed that trained."""
    trained = [r for r in rows if r["seeds"] > r["failed"]]
    if not trained:
        raise ValueError("no configuration has a seed that trained")
    return max(trained, key=lambda r: r["accuracy"])["label"]


def standard_figures(groups: Mapping[str, Sequence[Any]], out: str | os.PathLike[str],
                     train_max_length: int, test: str = "hard",
                     shortcuts: Sequence[str] = ("counts", "bigrams", "local")) -> str:
    """Glue the figures every experiment page shows; returns the best configuration's label.

    ``fig_seeds`` (accuracy per seed and configuration), ``fig_kinds`` (accuracy per kind of
    the best configuration beside the shortcuts), ``fig_length`` (accuracy by length, seeds
    pooled, the training lengths marked).
    """
    from dyckbook import plotting
    from dyckbook.evaluate import pool
    from dyckbook.run import summarise

    best = best_label(summarise(groups, test))
    glue_figure("seeds", plotting.plot_seeds(seed_rows(groups, test), title=f"{test} test set, "
                                             "per seed"), out)
    glue_figure("kinds", plotting.plot_kinds(
        [r.scores[test] for r in groups[best]],
        {b: [r.baselines[test][b] for r in groups[best]] for b in shortcuts}, title=best), out)
    glue_figure("length", plotting.plot_accuracy_by_length(
        {label: pool([r.scores[test] for r in group]) for label, group in groups.items()},
        train_max_length=train_max_length, title=f"{test} test set by length, seeds pooled"),
        out)
    glue("best", best)
    return best


def kind_rows(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A row per configuration, a column per kind of string: mean accuracy over seeds."""
    kinds = sorted({k for r in rows for k in r["per_kind"]}, key=lambda k: (k != "member", k))
    return [{"configuration": r["label"], **{k: pct(r["per_kind"].get(k, math.nan))
                                             for k in kinds}} for r in rows]


def length_split_rows(groups: Mapping[str, Sequence[Any]], test: str, boundary: int,
                      by: str = "per_length") -> list[dict[str, Any]]:
    """Per configuration: accuracy up to ``boundary`` (the longest, or deepest, training
    string) and beyond it, each the mean over the seeds that trained with a 95% bootstrap
    interval."""
    from dyckbook.verdicts import bootstrap

    out = []
    for label, group in groups.items():
        ok = [r.scores[test] for r in group if r.status == "ok"]
        row: dict[str, Any] = {"configuration": label, "seeds": len(ok)}
        for part, (lo, hi) in (("within", (0, boundary)), ("beyond", (boundary + 1, 10**9))):
            values = [v for v in (s.accuracy_between(lo, hi, by) for s in ok) if math.isfinite(v)]
            mean = sum(values) / len(values) if values else math.nan
            row[part] = f"{pct(mean)} {span(*bootstrap(values))}"
            row[f"_{part}"] = values
        out.append(row)
    return out


def length_split_sentences(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A sentence per configuration saying whether its accuracy falls beyond the boundary:
    "falls" when the two 95% intervals do not overlap, "holds" when they do."""
    from dyckbook.verdicts import bootstrap

    out = []
    for row in rows:
        within, beyond = row["_within"], row["_beyond"]
        if not within or not beyond:
            out.append(f"{row['configuration']}: no seed trained, or no strings on one side.")
            continue
        (wlo, whi), (blo, bhi) = bootstrap(within), bootstrap(beyond)
        verb = "falls" if bhi < wlo else "rises" if blo > whi else "holds"
        out.append(f"{row['configuration']} {verb} beyond the training lengths: "
                   f"{row['within']} within, {row['beyond']} beyond.")
    return out


def literal_row(n: int, result: Any) -> dict[str, Any]:
    """A row of the literal reproduction: what ran, the thesis' number, ours, the shortcut."""
    from dyckbook.presets import thesis_experiment, thesis_result

    record, e = result.record, thesis_experiment(n)
    train = result.splits.train
    return {"exp.": n, "epochs": f"{record.config['train']['epochs']} of {e.epochs}",
            "lr": f"{record.config['train']['lr']:g}",
            "Table 5.2": pct(thesis_result(n).test_acc / 100, 2),
            "ours": pct(record.accuracy("thesis"), 2),
            "first symbol": pct(record.baselines["thesis"]["first_symbol"].accuracy, 2),
            "distinct non-members": len(train.subset(train.labels == 0).unique()),
            "hard": pct(record.accuracy("hard")), "random": pct(record.accuracy("random")),
            "training": record.failure or "ok"}


def constant_sentences(records: Mapping[int, Any], test: str = "thesis") -> str:
    """For every experiment whose output did not depend on its input: which class it always
    answers and why that gives its accuracy (the class's share of the test split)."""
    from dyckbook.presets import thesis_result

    out = []
    for n, record in records.items():
        if record.failure != "constant":
            continue
        score = record.scores[test]
        members, hit = score.per_kind.get("member", [0, 0])
        answer, count = ("member", members) if hit == members else ("non-member",
                                                                     score.n - members)
        out.append(f"Experiment {n}'s output is the same for every input (margin spread "
                   f"{record.margin_std:.1e}): it answers \"{answer}\" every time, {count} of the "
                   f"{score.n} strings of the thesis' test split are {answer}s, so it scores "
                   f"{pct(score.accuracy, 2)} (Table 5.2: {pct(thesis_result(n).test_acc / 100, 2)}).")
    return " ".join(out) or "Every experiment's output depends on its input."


def pattern_gap_sentence(real: Any, thesis_way: Any) -> str:
    """How far the thesis' attention extraction is from the real patterns, layer by layer
    (both (layer, head, query, key) of one string)."""
    import numpy as np

    gaps = np.abs(np.asarray(real) - np.asarray(thesis_way)).reshape(len(real), -1).max(axis=1)
    parts = [f"layer {layer}: {gap:.2g}" for layer, gap in enumerate(gaps)]
    return ("Largest difference in attention probability between the thesis' extraction and "
            f"the forward pass, by layer: {'; '.join(parts)}.")
