"""Helpers for the notebooks: where a run writes, gluing sentences, tables and figures into the
book."""

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


def setup(results_dir: str | os.PathLike[str], num_threads: int = 0) -> Path:
    """Prepare a notebook run: torch threads, a quiet non-interactive plot backend, the folder.

    Args:
        results_dir: where the run writes (relative to the output root, or absolute).
        num_threads: torch's intra-op threads (0: leave as is).

    Returns:
        The absolute results folder (created).
    """
    import matplotlib
    import torch

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    if num_threads:
        torch.set_num_threads(int(num_threads))
    path = results.resolve(results_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def glue(name: str, value: Any, display: bool = False) -> None:
    """Glue a number or short text for ``{glue:text}`name``` (not displayed here by default)."""
    from myst_nb import glue as myst_glue

    myst_glue(name, value, display=display)


def glue_md(name: str, text: str, display: bool = False) -> None:
    """Glue Markdown (a whole sentence or paragraph) for ``{glue:md}`name``` (returns nothing,
    so that a cell ending with it shows no echo)."""
    from IPython.display import Markdown

    glue(name, Markdown(text), display)


def glue_table(name: str, rows: Sequence[Mapping[str, Any]], display: bool = True,
               **fmt: str) -> None:
    """Glue and (by default) show a Markdown table of ``rows`` (see :func:`markdown_table`)."""
    glue_md(name, markdown_table(rows, **fmt), display)


def glue_figure(name: str, fig: Any, results_dir: str | os.PathLike[str]) -> None:
    """Save ``fig`` as ``fig_<name>.png`` in the results folder and glue that PNG as
    ``fig_<name>`` (shown where the page writes ``{glue:figure} fig_<name>``; a figure glued
    as an object would render as text under the non-interactive backend)."""
    from IPython.display import Image

    path = results.resolve(results_dir) / f"fig_{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    glue(f"fig_{name}", Image(filename=str(path)))


def pct(x: float, digits: int = 1) -> str:
    """``0.9876`` -> ``98.8%``; NaN -> ``n/a``."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def span(lo: float, hi: float, digits: int = 1) -> str:
    """A 95% interval as ``[97.1%, 99.0%]``."""
    return f"[{pct(lo, digits)}, {pct(hi, digits)}]"


def _accuracy(row: Mapping[str, Any]) -> str:
    """A summary row's mean accuracy with its 95% interval: ``98.8% [97.1%, 99.0%]``."""
    return f"{pct(row['accuracy'])} {span(row['low'], row['high'])}"


def _mean_interval(values: Sequence[float], percent: bool = True) -> str:
    """The mean of ``values`` with its 95% interval, in percent or to 3 decimals."""
    from dyckbook.intervals import interval

    mean, (lo, hi) = sum(values) / len(values) if values else math.nan, interval(values)
    return f"{pct(mean)} {span(lo, hi)}" if percent else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


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
    lines = ["| " + " | ".join(str(k).replace("|", "\\|") for k in keys) + " |",
             "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(row.get(k), floatfmt) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def run_all(configs: Mapping[str, Any], seeds: Sequence[int], out: str | os.PathLike[str],
            batched: bool = True) -> dict[str, list[Any]]:
    """Run every labelled ``RunConfig`` for every seed; records go to ``out/records.jsonl``.
    Where ``DYCKBOOK_RUN_CACHE`` names a folder, seeds trained there before are read back
    (``run_cache``): a long run that was stopped resumes.

    Returns:
        ``{label: [RunResult per seed]}``.
    """
    from dyckbook import run_cache

    done = {}
    for label, config in configs.items():
        print(f"{label}: {len(seeds)} seed(s) ...", flush=True)
        done[label] = run_cache.run_seeds(config, list(seeds), batched,
                                          progress=not os.environ.get("DYCKBOOK_QUIET"))
        for r in done[label]:
            r.record.label = label
        results.append_records(results.resolve(out) / "records.jsonl",
                               [r.record for r in done[label]])
    return done


def records_of(runs: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{label: [RunRecord]}`` of ``run_all``'s results."""
    return {label: [r.record for r in group] for label, group in runs.items()}


def summary_rows(rows: Sequence[Mapping[str, Any]], shortcuts: Sequence[str] = (),
                 name: str = "configuration") -> list[dict[str, Any]]:
    """Display rows of ``run.summarise``: accuracy with its interval, seeds, the balanced
    accuracy of every hardness bin present (``hardness.BINS``) against the members of its
    lengths, the strongest shortcut and any ``shortcuts`` named (``name`` heads the column of
    the rows' labels)."""
    from dyckbook.hardness import BINS

    bins = [b for b in BINS if any(b in row.get("per_bin", {}) for row in rows)]
    out = []
    for row in rows:
        failed = f" ({row['failed']} failed: {', '.join(row['failures'])})" if row["failed"] else ""
        strongest = row.get("strongest")
        out.append({name: row["label"], "seeds": f"{row['seeds']}{failed}",
                    "accuracy": _accuracy(row),
                    "solved": f"{row['solved']}/{row['seeds']}", "strings per seed": row["n_test"],
                    **{f"bin {b}": pct(row["per_bin"].get(b, math.nan)) for b in bins},
                    "strongest shortcut": f"{strongest[0]} {pct(strongest[1])}" if strongest
                    else "",
                    **{b: pct(row["baselines"].get(b, math.nan)) for b in shortcuts}})
    return out


def bin_sentence(rows: Sequence[Mapping[str, Any]], test: str = "hard") -> str:
    """What the hardness bins of a test set say: the share of its negatives that counters,
    and windows of up to 8 symbols, reject (the rest needs a stack), and where the best
    configuration's accuracy comes from."""
    if not rows or not rows[0].get("bin_shares"):
        return ""
    shares = {k: v for k, v in rows[0]["bin_shares"].items() if v > 0}
    parts = [f"{pct(v, 0)} {k}" for k, v in shares.items()]
    best = max(rows, key=lambda r: r["accuracy"] if math.isfinite(r["accuracy"]) else -1)
    bins = ", ".join(f"{b}: {pct(v)}" for b, v in best["per_bin"].items())
    why = "w<=n: rejected by an exact window of n symbols"
    if "counter" in shares:
        why = "counter: rejected by counts without a stack; " + why
    return (f"The {test} test set's negatives by hardness bin: {', '.join(parts)} ({why}). "
            f"{best['label']} by bin, balanced against the members of the same lengths: "
            f"{bins}.")


def versus_shortcuts(row: Mapping[str, Any]) -> str:
    """One sentence comparing a configuration with the best shortcut on the same test sets.

    "Beats" only when the configuration's whole 95% interval lies above the best shortcut's
    accuracy; "does no better" when it lies below or straddles it.
    """
    seeds, failed = row["seeds"], row["failed"]
    if seeds == 0:
        return f"{row['label']}: not run."
    failures = f", {failed} of them failed ({', '.join(row['failures'])})" if failed else ""
    head = f"{row['label']} scores {_accuracy(row)} over {seeds} seed{'s' * (seeds != 1)}" \
           f"{failures}"
    if not row["baselines"]:
        return f"{head}."
    name, best = max(row["baselines"].items(), key=lambda kv: kv[1])
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
    """The configuration with the highest mean accuracy among those with a seed that trained
    (the first configuration when none trained: its failures are what the figures show)."""
    trained = [r for r in rows if r["seeds"] > r["failed"]]
    if not trained:
        return rows[0]["label"]
    return max(trained, key=lambda r: r["accuracy"])["label"]


def standard_figures(groups: Mapping[str, Sequence[Any]], out: str | os.PathLike[str],
                     train_max_length: int, test: str = "hard", shortcuts: int = 3) -> str:
    """Glue the figures every experiment page shows; returns the best configuration's label.

    ``fig_seeds`` (accuracy per seed and configuration), ``fig_kinds`` (balanced accuracy per
    kind and per hardness bin of the best configuration beside its ``shortcuts`` strongest
    shortcuts), ``fig_length`` (accuracy by length, seeds pooled, the training lengths marked).
    """
    from dyckbook import plotting
    from dyckbook.evaluate import pool
    from dyckbook.run import summarise

    rows = summarise(groups, test)
    best = best_label(rows)
    ranked = sorted(next(r for r in rows if r["label"] == best)["baselines"].items(),
                    key=lambda kv: -kv[1])
    shortcuts = [name for name, _ in ranked[:shortcuts]]
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
    """A row per configuration: the members' mean accuracy, then per negative kind the mean
    balanced accuracy against the members of its lengths."""
    kinds = sorted({k for r in rows for k in r["per_kind"]})
    return [{"configuration": r["label"], "members": pct(r.get("members", math.nan)),
             **{k: pct(r["per_kind"].get(k, math.nan)) for k in kinds}} for r in rows]


def length_split_rows(groups: Mapping[str, Sequence[Any]], test: str, boundary: int,
                      by: str = "per_length") -> list[dict[str, Any]]:
    """Per configuration: accuracy up to ``boundary`` (the longest, or deepest, training
    string) and beyond it, each the mean over every seed with its 95% interval."""
    out = []
    for label, group in groups.items():
        ok = [r.scores[test] for r in group if test in r.scores]
        row: dict[str, Any] = {"configuration": label, "seeds": len(ok)}
        for part, (lo, hi) in (("within", (0, boundary)), ("beyond", (boundary + 1, 10**9))):
            values = [v for v in (s.accuracy_between(lo, hi, by) for s in ok) if math.isfinite(v)]
            row[part], row[f"_{part}"] = _mean_interval(values), values
        out.append(row)
    return out


def length_split_sentences(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A sentence per configuration saying whether its accuracy falls beyond the boundary:
    "falls" (or "rises") when the two 95% intervals do not overlap; when they do, that the two
    cannot be told apart (not that it holds: a wide interval over few seeds overlaps much)."""
    from dyckbook.intervals import interval

    out = []
    for row in rows:
        within, beyond = row["_within"], row["_beyond"]
        if not within or not beyond:
            out.append(f"{row['configuration']}: no seed run, or no strings on one side.")
            continue
        (wlo, whi), (blo, bhi) = interval(within), interval(beyond)
        if blo <= whi and bhi >= wlo:
            out.append(f"{row['configuration']}: within and beyond the training lengths cannot "
                       f"be told apart (the 95% intervals overlap): {row['within']} within, "
                       f"{row['beyond']} beyond.")
            continue
        verb = "falls" if bhi < wlo else "rises"
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
                   f"{pct(score.accuracy, 2)} "
                   f"(Table 5.2: {pct(thesis_result(n).test_acc / 100, 2)}).")
    return " ".join(out) or "Every experiment's output depends on its input."


def pattern_gap_sentence(real: Any, thesis_way: Any) -> str:
    """How far the thesis' attention extraction is from the real patterns, layer by layer
    (both (layer, head, query, key) of one string)."""
    import numpy as np

    gaps = np.abs(np.asarray(real) - np.asarray(thesis_way)).reshape(len(real), -1).max(axis=1)
    parts = [f"layer {layer}: {gap:.2g}" for layer, gap in enumerate(gaps)]
    return ("Largest difference in attention probability between the thesis' extraction and "
            f"the forward pass, by layer: {'; '.join(parts)}.")


# ------------------------------------------------------------------------------ the grid
def cell_fields(name: str) -> dict[str, str]:
    """``"causal-none-end"`` -> ``{"mask": "causal", "pos_encoding": "none", "readout": "end"}``."""
    parts = name.strip().split("-")
    if len(parts) != 3:
        raise ValueError(f"a configuration must be mask-encoding-readout, got {name!r}")
    return dict(zip(("mask", "pos_encoding", "readout"), parts))


def grid_scope(rows: Sequence[Mapping[str, Any]], spec: Any) -> str:
    """What this grid ran: cells, seeds, models, budget."""
    seeds = max((r["seeds"] for r in rows), default=0)
    return (f"This page shows {len(rows)} cells x {seeds} seeds = "
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
    from dyckbook.hardness import BINS

    by_cell = {r["cell"]: r for r in hard}
    ranked = sorted((r for r in stack if r["k"] == k and math.isfinite(r["accuracy"])),
                    key=lambda r: -r["accuracy"])[:top]
    bins = [b for b in BINS if any(b in by_cell.get(r["cell"], {}).get("per_bin", {})
                                   for r in ranked)]
    out = []
    for r in ranked:
        h = by_cell.get(r["cell"], {})
        out.append({"cell": r["cell"], "stack": _accuracy(r),
                    "stack: strongest shortcut": _strongest(r),
                    "hard": _accuracy(h) if h else "n/a",
                    **{f"hard, bin {b}": pct(h.get("per_bin", {}).get(b, math.nan))
                       for b in bins},
                    "hard: strongest shortcut": _strongest(h)})
    return out


def _strongest(row: Mapping[str, Any]) -> str:
    best = row.get("strongest")
    return f"{best[0]} {pct(best[1])}" if best else ""


def _failed_text(row: Mapping[str, Any]) -> str:
    return f", {row['failed']} failed" if row["failed"] else ""


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
                       f"{best['cell']} ({best['solved']} of {best['seeds']} seeds"
                       f"{_failed_text(best)}, {pct(best['accuracy'])}).")
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


def budget_label(budget: str) -> str:
    """``"1000:8000"`` -> ``"1000 steps, 8000 strings"``."""
    fields = budget_fields(budget)
    return f"{fields['max_steps']} steps, {fields['n_train']} strings"


def budget_fields(budget: str) -> dict[str, int]:
    """``"1000:8000"`` -> the GridSpec fields of a budget run in full (validated at the end)."""
    try:
        steps, strings = (int(x) for x in budget.split(":"))
    except ValueError:
        raise ValueError(f"a budget must be max_steps:n_train, got {budget!r}") from None
    return {"max_steps": steps, "n_train": strings, "eval_every": steps}


def budget_groups(records: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{budget: records}`` -> ``{"<cell> @ <budget>": records of that cell}``."""
    out: dict[str, list[Any]] = {}
    for label, group in records.items():
        for r in group:
            m, d = r.config["model"], r.config["data"]
            cell = f"k{d['k']}-L{m['n_layers']}-{m['mask']}-{m['pos_encoding']}-{m['readout']}"
            out.setdefault(f"{cell} @ {label}", []).append(r)
    return out


def budget_rows(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Display rows of every (budget, cell)."""
    return [{"budget": label, **r} for label, group in rows.items()
            for r in summary_rows(group, name="cell")]


def budget_sentence(rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """Mean accuracy and seeds solved of all cells at each budget, and the error ratio."""
    parts, errors = [], []
    for label, group in rows.items():
        acc = [r["accuracy"] for r in group if math.isfinite(r["accuracy"])]
        mean = sum(acc) / len(acc) if acc else math.nan
        solved = sum(r["solved"] for r in group)
        seeds = sum(r["seeds"] for r in group)
        parts.append(f"{label}: {pct(mean)} on average, {solved} of {seeds} seeds solved")
        errors.append(1 - mean)
    ratio = (f" The error falls by a factor of {errors[0] / errors[-1]:.1f} from the first "
             "budget to the last." if len(errors) > 1 and errors[-1] > 0 else "")
    return "; ".join(parts) + "." + ratio


# ------------------------------------------------------------------------------ summary
def _seeds_text(records: Sequence[Any], test: str = "hard") -> str:
    """Mean accuracy over every seed, and how many failed and why."""
    if not records:
        return "not run"
    acc = [r.accuracy(test) for r in records]
    failed = sorted({r.failure for r in records if r.status != "ok"})
    text = f"{pct(sum(acc) / len(acc))}, {len(records)} seeds"
    if failed:
        n = sum(r.status != "ok" for r in records)
        text += f" ({n} failed: {', '.join(failed)})"
    return text


def recipe_departure(experiment: int, record: Any) -> str:
    """How a rerun of the thesis' pipeline departs from Table 5.1 and the notebook's data
    (epochs, learning rate, strings), or ``"Table 5.1"`` when it does not."""
    from dyckbook.presets import thesis_experiment

    e = thesis_experiment(experiment)
    train = record.config["train"]
    parts = []
    if train["epochs"] != e.epochs:
        parts.append(f"{train['epochs']} of {e.epochs} epochs")
    if not math.isclose(train["lr"], e.lr):
        parts.append(f"lr {train['lr']:g} (Table 5.1: {e.lr:g})")
    strings = int(record.config["data"]["n_train"])
    if strings < e.data.n:
        parts.append(f"{strings:,} of {e.data.n:,} strings")
    return "; ".join(parts) or "Table 5.1"


def table52_rows(literal: Sequence[Any], sound: Sequence[Any]) -> list[dict[str, Any]]:
    """Table 5.2 beside the rerun of its pipeline (with how its recipe departs from Table
    5.1) and the sound reruns, one row per experiment."""
    from dyckbook.presets import THESIS_RESULTS

    rows = []
    for n, reported in THESIS_RESULTS.items():
        lit = [r for r in literal if r.label == f"experiment {n}"]
        rows.append({
            "exp.": n, "Table 5.2": pct(reported.test_acc / 100, 2),
            "its pipeline: thesis split": pct(lit[0].accuracy("thesis"), 2) if lit
            else "not run",
            "its pipeline: hard": pct(lit[0].accuracy("hard")) if lit else "not run",
            "recipe vs Table 5.1": recipe_departure(n, lit[0]) if lit else "not run",
            "sound: thesis' model": _seeds_text([r for r in sound
                                                  if r.label.startswith(f"exp. {n}:")]),
            "sound: read at [end]": _seeds_text([r for r in sound
                                                 if r.label.startswith(f"exp. {n} read")]),
            "strongest shortcut, same strings": _strongest_text(
                [r for r in sound if r.label.startswith((f"exp. {n}:", f"exp. {n} read"))]),
        })
    return rows


def _strongest_text(records: Sequence[Any], test: str = "hard") -> str:
    """The stack-free shortcut with the best mean accuracy over the records' test sets."""
    means: dict[str, list[float]] = {}
    for r in records:
        for name, s in r.baselines.get(test, {}).items():
            means.setdefault(name, []).append(s.accuracy)
    if not means:
        return "not run"
    name, values = max(means.items(), key=lambda kv: sum(kv[1]) / len(kv[1]))
    return f"{name} {pct(sum(values) / len(values))}"


# ------------------------------------------------------------------------------ verdicts
def read_runs(paths: str, first_only: bool = False) -> list[Any]:
    """Records of the runs whose results folders are listed (comma-separated); with
    ``first_only`` the first folder that holds any records (e.g. the full grid, then the
    reduced one)."""
    return [r for path in ([first_present(paths)] if first_only else paths.split(","))
            for r in _records(path)]


def _records(path: str) -> list[Any]:
    return results.read_records(results.resolve(path.strip()) / "records.jsonl")


def group_by_label(records: Sequence[Any]) -> dict[str, list[Any]]:
    """``{label: [RunRecord]}`` in order of first appearance (e.g. the seeds of each
    configuration of a run read back with :func:`read_runs`)."""
    out: dict[str, list[Any]] = {}
    for r in records:
        out.setdefault(r.label, []).append(r)
    return out


def first_present(paths: str) -> str:
    """The first of comma-separated results folders that holds records (or the first)."""
    folders = [path.strip() for path in paths.split(",")]
    files = [results.resolve(path) / "records.jsonl" for path in folders]
    return next((p for p, f in zip(folders, files) if f.is_file() and f.stat().st_size),
                folders[0])


def read_evidence(path: str) -> dict[str, list[float]]:
    """The per-model measurements an explainability run wrote (none if it did not run)."""
    file = results.resolve(path) / "evidence.json"
    return results.read_json(file) if file.is_file() else {}


def sources_sentence(**paths: str) -> str:
    """Where the evidence was read."""
    return "Evidence read from " + "; ".join(f"{k}: `{v}`" for k, v in paths.items()) + "."


def permutation_check(n_strings: int, seed: int = 0) -> str:
    """The proof, numerically: logits of bidirectional no-PE models (each readout, untrained,
    since the argument holds for all weights) on strings and rearrangements of them."""
    import numpy as np
    import torch

    from dyckbook import tokenizer
    from dyckbook.languages import Dyck
    from dyckbook.model import Classifier, ModelConfig

    rng = np.random.default_rng(seed)
    codes, lengths = Dyck(3).sample_codes(rng, np.full(n_strings, 12))
    shuffled = rng.permuted(codes, axis=1)
    gaps = []
    for readout in ("start", "end", "mean"):
        model = Classifier(ModelConfig(k=3, n_ctx=12, d_model=32, n_heads=2, d_mlp=64,
                                       readout=readout), [seed]).eval()
        with torch.no_grad():
            a, b = (model(tokenizer.encode(c, lengths)) for c in (codes, shuffled))
        gaps.append(float((a - b).abs().max()))
    return (f"Numerically: for {n_strings} Dyck-3 words of length 12 and a random "
            f"rearrangement of each, bidirectional models without positions give logits that "
            f"differ by at most {max(gaps):.1e} (readouts [start], [end], mean), which is "
            f"floating-point rounding.")


# ------------------------------------------------------------------------------ explainability
EXPLAIN_EVIDENCE = ("partner_attention", "preview_auc", "head_reset_drop", "previous_share",
                    "recent_share", "uniform_hard")


def measure_rows(measures: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per configuration: every measure of ``explain.model_measures``, mean [95% interval]."""
    names = ("accuracy", "partner_attention", "uniform_hard", "previous_share", "recent_share",
             "preview_auc", "head_reset_drop", "head_movement")
    out = []
    for label, per_seed in measures.items():
        row = {"model": label, "seeds": len(per_seed)}
        for name in names:
            values = [m[name] for m in per_seed if math.isfinite(m[name])]
            row[name.replace("_", " ")] = _mean_interval(values, False) if values else "n/a"
        out.append(row)
    return out


LEARNED_BAR = 0.95  # hard-test accuracy from which a model's mechanism is evidence


def explain_evidence(measures: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """The verdict-bearing measures of the models that learned (hard-test accuracy >=
    :data:`LEARNED_BAR`), all k and seeds pooled; those of the others under ``not_learned``
    (a model that never learned has nothing to explain: its head-reset drop is ~0)."""
    models = [m for per_seed in measures.values() for m in per_seed]
    learned = [m for m in models if m["accuracy"] >= LEARNED_BAR]
    rest = [m for m in models if m["accuracy"] < LEARNED_BAR]

    def pooled(group: Sequence[Mapping[str, Any]]) -> dict[str, list]:
        return {name: [m[name] for m in group if math.isfinite(m[name])]
                for name in EXPLAIN_EVIDENCE}

    return {**pooled(learned), "models": len(models), "learned": len(learned),
            "learned_bar": LEARNED_BAR, "not_learned": pooled(rest)}


def explain_sentences(evidence: Mapping[str, Any]) -> str:
    """The three measures in words, each with its mean and 95% interval over the models that
    learned, and how many did not."""
    def said(name: str) -> str:
        values = evidence.get(name, [])
        return f"{_mean_interval(values, False)} over {len(values)} models" if values \
            else "not measured"

    head = ""
    if "models" in evidence:
        head = (f"{evidence['learned']} of {evidence['models']} models learned (hard-test "
                f"accuracy at least {pct(evidence['learned_bar'], 0)}); the measures below pool "
                f"those, the others are in the table. ")
    return head + (f"Attention of the best head on the partner where no heuristic finds it: "
            f"{said('partner_attention')}. ROC AUC of the `[end]` self-attention as a "
            f"membership score: {said('preview_auc')}. Hard-test accuracy lost when the head "
            f"is reset to its initial weights: {said('head_reset_drop')}.")


def load_models(folder: str) -> dict[str, list[tuple[Any, Any]]]:
    """The models an explainability run saved, each with its (regenerated) hard test set:
    ``{label: [(model, test set) per seed]}``."""
    from dyckbook.protocol import make_splits
    from dyckbook.run import RunConfig

    path = results.resolve(folder)
    out: dict[str, list[tuple[Any, Any]]] = {}
    for record in results.read_records(path / "records.jsonl"):
        model = results.load_model(path / f"model_{record.label}_s{record.seed}.pt")
        config = RunConfig.from_dict(record.config)
        out.setdefault(record.label, []).append(
            (model, make_splits(config.data, record.seed).tests["hard"]))
    return out


def head_rows(drops: Mapping[str, Sequence[Any]],
              partner: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Per model and seed: the head that matters most and the head that matches most."""
    import numpy as np

    out = []
    for label in drops:
        for seed, (d, p) in enumerate(zip(drops[label], partner[label])):
            d, p = np.asarray(d), np.nan_to_num(np.asarray(p), nan=-1.0)
            top, match = np.unravel_index(d.argmax(), d.shape), np.unravel_index(p.argmax(),
                                                                                   p.shape)
            out.append({"model": label, "seed": seed,
                        "most needed head": f"L{top[0]}H{top[1]} ({pct(d[top])} lost)",
                        "most matching head": f"L{match[0]}H{match[1]} ({p[match]:.2f} on the "
                                              f"partner, {pct(d[match])} lost without it)"})
    return out


def head_sentence(drops: Mapping[str, Sequence[Any]], partner: Mapping[str, Sequence[Any]]) -> str:
    """How often the head that matches brackets best is also the one the model needs most."""
    rows = head_rows(drops, partner)
    same = sum(r["most needed head"].split()[0] == r["most matching head"].split()[0]
               for r in rows)
    return (f"In {same} of {len(rows)} models the head that attends most to the matching bracket "
            f"(where no heuristic explains it) is also the head whose removal costs the most "
            f"accuracy.")
