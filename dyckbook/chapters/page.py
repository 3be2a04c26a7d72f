"""Helpers for the notebooks: where a run writes, gluing sentences, tables and figures into the
book."""

from __future__ import annotations

import logging
import math
import os
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dyckbook.data.hardness import BINS
from dyckbook.experiment import cache, results, run
from dyckbook.experiment.evaluate import Score, pool
from dyckbook.experiment.intervals import interval
from dyckbook.experiment.record import RunRecord
from dyckbook.experiment.run import prepare, run_seeds

__all__ = ["glue", "glue_figure", "glue_md", "glue_table", "markdown_table", "pct", "plural",
           "setup", "span"]

log = logging.getLogger(__name__)


def setup(results_dir: str | os.PathLike[str], num_threads: int = 0) -> Path:
    """Prepare a notebook run: torch threads, a quiet non-interactive plot backend, the folder.

    Args:
        results_dir: where the run writes (relative to the output root, or absolute).
        num_threads: torch's intra-op threads (0: leave as is).

    Returns:
        The absolute results folder (created).
    """
    import matplotlib  # deferred: start-up: matplotlib (~0.1 s) off train-lengths workers

    matplotlib.use("Agg")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    if num_threads:
        torch.set_num_threads(int(num_threads))
    path = results.resolve(results_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def glue(name: str, value: Any, display: bool = False) -> None:
    """Glue a number or short text for ``{glue:text}`name``` (not displayed here by default)."""
    from myst_nb import glue as myst_glue  # deferred: optional dependency myst_nb

    myst_glue(name, value, display=display)


def glue_md(name: str, text: str, display: bool = False) -> None:
    """Glue Markdown (a whole sentence or paragraph) for ``{glue:md}`name``` (returns nothing,
    so that a cell ending with it shows no echo)."""
    from IPython.display import Markdown  # deferred: optional dependency IPython

    glue(name, Markdown(text), display)


def glue_table(name: str, rows: Sequence[Mapping[str, Any]], display: bool = True,
               **fmt: str) -> None:
    """Glue and (by default) show a Markdown table of ``rows`` (see :func:`markdown_table`)."""
    glue_md(name, markdown_table(rows, **fmt), display)


def glue_figure(name: str, fig: Any, results_dir: str | os.PathLike[str]) -> None:
    """Save ``fig`` as ``fig_<name>.png`` in the results folder and glue that PNG as
    ``fig_<name>`` (shown where the page writes ``{glue:figure} fig_<name>``; a figure glued
    as an object would render as text under the non-interactive backend)."""
    from IPython.display import Image  # deferred: optional dependency IPython

    path = results.resolve(results_dir) / f"fig_{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    glue(f"fig_{name}", Image(filename=str(path)))


def plural(n: int, noun: str) -> str:
    """``"1 seed"``, ``"3 seeds"``, ``"1,200 seeds"``."""
    return f"{n:,} {noun}{'s' * (n != 1)}"


def pct(x: float, digits: int = 1) -> str:
    """``0.9876`` -> ``98.8%``; NaN -> ``n/a``."""
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def span(lo: float, hi: float, digits: int = 1) -> str:
    """A 95% interval as ``[97.1%, 99.0%]``."""
    return f"[{pct(lo, digits)}, {pct(hi, digits)}]"


def accuracy_text(row: Mapping[str, Any]) -> str:
    """A summary row's mean accuracy with its 95% interval: ``98.8% [97.1%, 99.0%]``."""
    return f"{pct(row['accuracy'])} {span(row['low'], row['high'])}"


def mean_interval(values: Sequence[float], percent: bool = True,
                  bounds: tuple[float, float] = (0.0, 1.0)) -> str:
    """The mean of ``values`` with its 95% interval (clipped to ``bounds``, the range a value
    can take), in percent or to 3 decimals."""
    mean = sum(values) / len(values) if values else math.nan
    lo, hi = interval(values, bounds=bounds)
    return f"{pct(mean)} {span(lo, hi)}" if percent else f"{mean:.3f} [{lo:.3f}, {hi:.3f}]"


def _cell(value: Any, floatfmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "n/a" if not math.isfinite(value) else format(value, floatfmt)
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Mapping[str, Any]], floatfmt: str = ".3f") -> str:
    """A Markdown table; columns are every row's keys in the order they first appear (a row
    without one leaves its cell empty), floats formatted by ``floatfmt``."""
    if not rows:
        return ""
    keys = [k for k in dict.fromkeys(k for row in rows for k in row)
            if not str(k).startswith("_")]  # "_" keys: data, not columns
    lines = ["| " + " | ".join(str(k).replace("|", "\\|") for k in keys) + " |",
             "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(_cell(row.get(k), floatfmt) for k in keys) + " |" for row in rows]
    return "\n".join(lines)


def run_all(configs: Mapping[str, Any], seeds: Sequence[int] | Mapping[str, Sequence[int]],
            out: str | os.PathLike[str], batched: bool = True, device: str = "cpu",
            executor: Any = None, splits: bool = True) -> dict[str, list[Any]]:
    """Run every labelled ``RunConfig`` for every seed (``seeds`` a mapping: its label's seeds)
    on ``device`` (a notebook's ``device`` parameter: "cpu", "cuda", "auto"...); records go to
    ``out/records.jsonl`` in the order of ``configs``. Where ``DYCKBOOK_RUN_CACHE`` names a
    folder, seeds trained there before are read back (``run.run_seeds``): a long run that was
    stopped resumes. Given an ``executor`` the groups train side by side first
    (:func:`side_by_side`; on a card ``devices.card_executor`` makes one). A page that reads
    only the models and records passes ``splits=False``: a seed read back from the cache then
    has no data made again (``run.run_seeds``).

    Returns:
        ``{label: [RunResult per seed]}``.
    """
    groups = {label: _seeds_of(seeds, label) for label in configs}
    done = {}
    with side_by_side(configs, groups, device, executor):
        for label, config in configs.items():
            log.info("%s: %d seed(s) ...", label, len(groups[label]))  # a log line only
            done[label] = run.run_seeds(config, groups[label], batched, device=device,
                                        progress=not os.environ.get("DYCKBOOK_QUIET"),
                                        splits=splits)
            for r in done[label]:
                r.record.label = label
            results.append_records(results.resolve(out) / "records.jsonl",
                                   [r.record for r in done[label]])
    return done


def _seeds_of(seeds: Sequence[int] | Mapping[str, Sequence[int]], label: str) -> list[int]:
    if isinstance(seeds, Mapping) and label not in seeds:
        raise ValueError(f"seeds names no seeds for the label {label!r} (it has {list(seeds)})")
    return [int(s) for s in (seeds[label] if isinstance(seeds, Mapping) else seeds)]


@contextmanager
def side_by_side(configs: Mapping[str, Any], seeds: Mapping[str, Sequence[int]], device: str,
                 executor: Any) -> Iterator[None]:
    """Every labelled group (its ``seeds``) trained at once over ``executor``'s workers into
    the run cache (``DYCKBOOK_RUN_CACHE``, else a temporary folder, set for the duration), their
    splits made once over them (:func:`shared_data`, also set): ``run.run_seeds`` then reads
    each group back. A card's steps of small models are launch-bound, so groups side by side
    take about as long as the longest alone (the cpu profile's intervention: six groups, 13 min
    one after another on an H200, the longest 3.8 min). No executor, or one group: nothing."""
    if executor is None or len(configs) < 2:
        yield
        return
    root = cache.folder(cache.RUN_ENV)
    with (nullcontext(str(root)) if root is not None
          else tempfile.TemporaryDirectory(prefix="dyckbook-runs-")) as runs, \
            environ(cache.RUN_ENV, runs), shared_data(configs, seeds, executor) as data, \
            data_cache(data):
        for future in [executor.submit(_train, config, seeds[label], device, data, runs)
                       for label, config in configs.items()]:
            future.result()
        yield


def _train(config: Any, seeds: list[int], device: str, data: str | None, runs: str) -> None:
    with data_cache(data), environ(cache.RUN_ENV, runs):
        run_seeds(config, seeds, device=device, splits=False)


@contextmanager
def environ(name: str, value: str | None) -> Iterator[None]:
    """The environment variable ``name`` is ``value`` for the duration (None: as set)."""
    if value is None:
        yield
        return
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def data_cache(folder: str | None) -> Any:
    """In a worker: ``DYCKBOOK_DATA_CACHE`` is ``folder`` for the duration (None: as set)."""
    return environ(cache.DATA_ENV, folder)


def _make_data(configs: list[Any], seed: int, folder: str | None = None) -> None:
    with data_cache(folder):
        for config in configs:
            prepare(config, seed)


def make_data(configs: Mapping[str, Any], seeds: Sequence[int] | Mapping[str, Sequence[int]],
              executor: Any = None, folder: str | None = None) -> int:
    """The splits of every (data config, seed) the labelled ``RunConfig``s train on (``seeds``
    a mapping: its label's seeds) and the rules' scores of each (``run.prepare``), each made
    once into the data cache (``folder``, else ``DYCKBOOK_DATA_CACHE``, which must then name
    one), here or spread over ``executor``'s workers; returns how many (data config, seed)."""
    if folder is None and cache.folder(cache.DATA_ENV) is None:
        raise ValueError(f"make_data writes the data cache: set {cache.DATA_ENV} to its folder")
    tasks: dict[tuple[Any, int], dict[tuple[str, ...], Any]] = {}
    for label, c in configs.items():
        for s in _seeds_of(seeds, label):
            tasks.setdefault((c.data, s), {}).setdefault(tuple(c.baselines), c)
    work = [(list(by_rules.values()), s) for (_, s), by_rules in tasks.items()]
    if executor is None:
        for group, seed in work:
            _make_data(group, seed, folder)
    else:
        for future in [executor.submit(_make_data, g, s, folder) for g, s in work]:
            future.result()
    return len(work)


@contextmanager
def shared_data(configs: Mapping[str, Any], seeds: Sequence[int] | Mapping[str, Sequence[int]],
                executor: Any) -> Iterator[str | None]:
    """With ``executor``'s workers, every distinct (data config, seed) made once, spread over
    them, before they train (else each makes every split its cells need: on a card's 16
    workers, ten Dyck-3 splits of the cpu grid at 42 s each, before any training); yields the
    folder their tasks read (:func:`data_cache`): ``DYCKBOOK_DATA_CACHE`` where set, else a
    temporary one (on a remote cluster name a shared folder: a machine that cannot see it makes
    its own splits again, with the same result). No executor: None (made where needed)."""
    if executor is None:
        yield None
        return
    root = cache.folder(cache.DATA_ENV)
    with (nullcontext(str(root)) if root is not None
          else tempfile.TemporaryDirectory(prefix="dyckbook-data-")) as folder:
        make_data(configs, seeds, executor, folder)
        yield folder


def records_of(runs: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """``{label: [RunRecord]}`` of ``run_all``'s results."""
    return {label: [r.record for r in group] for label, group in runs.items()}


def summary_rows(rows: Sequence[Mapping[str, Any]], shortcuts: Sequence[str] = (),
                 name: str = "configuration") -> list[dict[str, Any]]:
    """Display rows of ``run.summarise``: accuracy with its interval, seeds, the balanced
    accuracy of every hardness bin present (``hardness.BINS``) against the members of its
    lengths, the strongest shortcut and any ``shortcuts`` named (``name`` heads the column of
    the rows' labels)."""
    bins = [b for b in BINS if any(b in row.get("per_bin", {}) for row in rows)]
    out = []
    for row in rows:
        failed = f" ({row['failed']} failed: {', '.join(row['failures'])})" if row["failed"] else ""
        strongest = row.get("strongest")
        out.append({name: row["label"], "seeds": f"{row['seeds']}{failed}",
                    "accuracy": accuracy_text(row),
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
    head = f"{row['label']} scores {accuracy_text(row)} over {seeds} seed{'s' * (seeds != 1)}" \
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
    from dyckbook.chapters import (  # deferred: start-up: seaborn/pyplot (~1 s) off workers
        plotting,
    )

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
            row[part], row[f"_{part}"] = mean_interval(values), values
        out.append(row)
    return out


def length_split_sentences(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A sentence per configuration saying whether its accuracy falls beyond the boundary:
    "falls" (or "rises") when the two 95% intervals do not overlap; when they do, that the two
    cannot be told apart (not that it holds: a wide interval over few seeds overlaps much)."""
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



def strongest_text(row: Mapping[str, Any]) -> str:
    best = row.get("strongest")
    return f"{best[0]} {pct(best[1])}" if best else ""


def failed_text(row: Mapping[str, Any]) -> str:
    return f", {row['failed']} failed" if row["failed"] else ""



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
    files = [results.stored(results.resolve(path) / "records.jsonl") for path in folders]
    return next((p for p, f in zip(folders, files) if f and f.stat().st_size), folders[0])


def read_evidence(path: str) -> dict[str, list[float]]:
    """The per-model measurements an explainability run wrote (none if it did not run)."""
    file = results.resolve(path) / "evidence.json"
    return results.read_json(file) if file.is_file() else {}


def sources_sentence(**paths: str) -> str:
    """Where the evidence was read."""
    return "Evidence read from " + "; ".join(f"{k}: `{v}`" for k, v in paths.items()) + "."



def _bin_shares(scores: Sequence[Score]) -> dict[str, float]:
    """Share of the negatives in every hardness bin, over the scores pooled."""
    counts = {b: sum(s.per_bin.get(b, [0])[0] for s in scores) for b in BINS}
    total = sum(counts.values())
    return {b: c / total for b, c in counts.items()} if total else {}


def _nanmean(values: Sequence[float]) -> float:
    """Mean of the values that are not NaN (NaN if none)."""
    kept = [v for v in values if not np.isnan(v)]
    return float(np.mean(kept)) if kept else float("nan")


def summarise(groups: Mapping[str, Sequence[RunRecord]],
              test: str = "hard") -> list[dict[str, Any]]:
    """One row per group of records (e.g. the seeds of one configuration) on one test set.

    Every seed counts in every mean and share: a failed seed is shown as failed (``failed``,
    ``failures``), never dropped.

    Row: ``label``, ``seeds``, ``failed`` (and the rules broken), ``accuracy`` (mean over all
    seeds) with its 95% interval over seeds (``low``, ``high``; ``intervals.METHOD``),
    ``solved`` (seeds at >= 0.99), ``n_test`` (strings per seed), ``members`` (mean accuracy on
    the members), ``per_kind`` and ``per_bin`` (mean balanced accuracy of each negative kind and
    hardness bin against the members of its lengths), ``bin_shares`` (the share of the test
    set's negatives in each bin), ``baselines`` (mean accuracy of every
    shortcut on the same sets) and ``strongest`` (the best of them: ``(name, accuracy)``).
    """
    rows = []
    for label, group in groups.items():
        ok = [r for r in group if test in r.scores]  # every seed scored, failed ones too
        acc = [r.accuracy(test) for r in ok]
        lo, hi = interval(acc)
        kinds = sorted({k for r in ok for k in r.scores[test].per_kind if k != "member"})
        bins = [b for b in BINS if any(r.scores[test].per_bin.get(b, [0])[0] for r in ok)]
        shortcuts = {b: float(np.mean([r.baselines[test][b].accuracy for r in group]))
                     for b in (group[0].baselines.get(test, {}) if group else {})}
        rows.append({
            "label": label, "seeds": len(group), "failed": sum(r.status != "ok" for r in group),
            "failures": sorted({r.failure for r in group if r.failure}),
            "accuracy": float(np.mean(acc)) if acc else float("nan"), "low": lo, "high": hi,
            "solved": sum(a >= 0.99 for a in acc),
            "n_test": int(np.mean([r.scores[test].n for r in group if test in r.scores] or [0])),
            "members": _nanmean([r.scores[test].accuracy_of("per_kind", "member") for r in ok]),
            "per_kind": {k: _nanmean([r.scores[test].balanced(kind=k) for r in ok])
                         for k in kinds},
            "per_bin": {b: _nanmean([r.scores[test].balanced(bin=b) for r in ok]) for b in bins},
            "bin_shares": _bin_shares([r.scores[test] for r in group if test in r.scores]),
            "baselines": shortcuts,
            "strongest": max(shortcuts.items(), key=lambda kv: kv[1]) if shortcuts else None,
        })
    return rows
