"""The length study's configurations and measures: Transformers with any position, objective
or readout beside recurrent references at a matched parameter count, run on a process pool,
and how far each holds beyond its training lengths.

A configuration is named ``mask-encoding-readout`` (``causal-rope-end``), optionally with an
auxiliary objective (``causal-none-end+next_symbols``, :data:`dyckbook.nn.model.OBJECTIVES`), or by
a recurrent reference (:data:`REFERENCES`: ``lstm``, ``stack-rnn``), whose hidden width is the
one whose parameter count is closest to the Transformer's of the same study.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from dyckbook.chapters.page import pct, span
from dyckbook.data.dataset import MEMBER
from dyckbook.experiment import results, run
from dyckbook.experiment.checkpoint import build_model
from dyckbook.experiment.evaluate import pool
from dyckbook.experiment.grid import expand_configs
from dyckbook.experiment.run import RunConfig, config_digest, training_device
from dyckbook.nn import blocks, options
from dyckbook.nn.model import OBJECTIVES
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig

__all__ = ["REFERENCES", "Study", "cell_fields", "check_sentence", "config",
           "fields", "matched_hidden", "panels",
           "reach", "reach_rows", "reach_sentence", "recipe_sentence", "run_records", "side_rows",
           "side_sentence", "study", "theme_rows", "theme_sentence"]

#: the recurrent references' configuration names and their cells (``dyckbook.nn.recurrent.CELLS``):
#: "stack-rnn", not "stack", which names the stack test set
REFERENCES = {"lstm": "lstm", "stack-rnn": "stack"}


def fields(name: str) -> dict[str, str]:
    """What configuration ``name`` means: ``{"cell": "lstm"}`` for a recurrent reference
    (:data:`REFERENCES`), else ``{"mask", "pos_encoding", "readout"}`` and, after each ``+``,
    an ``"objective"`` or the ``"attention"`` weights (``+sigmoid``; softmax without one).

    Raises:
        ValueError: a name that is neither (the message names it and what is allowed).
    """
    if not isinstance(name, str):
        raise ValueError(f"a configuration must be a string, got {name!r}")
    name = name.strip()
    if name in REFERENCES:
        return {"cell": REFERENCES[name]}
    cell, *extras = name.split("+")
    allowed = {"mask": options.MASKS, "pos_encoding": options.POS_ENCODINGS,
               "readout": options.READOUTS}
    try:
        out = cell_fields(cell)  # the grid's mask-encoding-readout names
    except ValueError:
        out = {}
    if not out or any(out[key] not in values for key, values in allowed.items()):
        raise ValueError(f"a configuration must be one of {tuple(REFERENCES)} or "
                         f"mask-encoding-readout "
                         f"(masks {options.MASKS}, encodings {options.POS_ENCODINGS}, "
                         f"readouts {options.READOUTS}) "
                         f"with an optional +objective {OBJECTIVES} and +sigmoid, got {name!r}")
    weights = [w for w in blocks.ATTENTION_WEIGHTS if w != "softmax"]
    for extra in extras:
        key = "objective" if extra in OBJECTIVES else "attention" if extra in weights else None
        if key is None or key in out:
            raise ValueError(f"each '+' must add one objective {OBJECTIVES} or attention "
                             f"weights {tuple(weights)}, each at most once, got {extra!r} in "
                             f"{name!r}")
        out[key] = extra
    return out


def matched_hidden(cell: str, k: int, n_ctx: int, n_params: int) -> int:
    """The hidden width of recurrent ``cell`` whose parameter count is closest to ``n_params``
    (its embedding and stack widths at their defaults)."""
    def size(width: int) -> int:
        return RecurrentClassifier(RecurrentConfig(k=k, n_ctx=n_ctx, cell=cell,
                                                   d_hidden=width)).n_params

    low, high = 1, 2048
    while high - low > 1:  # the count grows with the width: the last width at most n_params
        mid = (low + high) // 2
        low, high = (mid, high) if size(mid) <= n_params else (low, mid)
    return min((low, high), key=lambda w: abs(size(w) - n_params))


def config(base: Any, name: str) -> Any:
    """The ``RunConfig`` of configuration ``name`` on ``base``'s data and training (``base``:
    a classifier run); a recurrent cell gets :func:`matched_hidden` for ``base``'s model."""
    chosen = fields(name)
    if "cell" not in chosen:
        return base.override(**chosen)
    m = base.model
    width = matched_hidden(chosen["cell"], m.k, m.n_ctx, build_model(m, [0]).n_params)
    return replace(base, model=RecurrentConfig(k=m.k, n_ctx=m.n_ctx, cell=chosen["cell"],
                                               d_hidden=width))


@dataclass(frozen=True)
class Study:
    """07's configurations: ``lengths`` (every k and configuration on the length recipe) and
    ``depths`` (the depth study's), each ``{label: RunConfig}``, and ``base``, the length
    recipe every configuration shares (:func:`recipe_sentence`)."""

    base: Any
    lengths: dict[str, Any]
    depths: dict[str, Any]

    @property
    def every(self) -> dict[str, Any]:
        return {**self.lengths, **self.depths}


_STUDY_PARAMS = ("ks", "configs", "depth_configs", "test_max_length", "depth_k",
                 "train_max_depth", "test_max_depth", "depth_length")


def study(params: Mapping[str, Any]) -> Study:
    """The configurations of the length and depth studies of 07's parameters (its notebook's
    globals, or the same values from a JSON file on a machine without the notebook packages).
    The length study tests lengths 2 .. ``test_max_length`` at any depth on the hard and stack
    sets; the depth study trains ``depth_k`` types to depth ``train_max_depth`` on strings of
    at most ``depth_length`` and tests to ``test_max_depth`` on the hard set.
    (``test_max_depth`` is the depth study's alone: until 2026-11-27 it also bounded the
    length study's test strings, at depth 6, because ``RunConfig.from_flat`` took it.)"""
    missing = [k for k in _STUDY_PARAMS if k not in params]
    if missing:
        raise ValueError(f"07's parameters lack {missing} (every one of {list(_STUDY_PARAMS)} "
                         f"is needed besides the recipe's)")
    base = RunConfig.from_flat(params).override(
        test_min_length=2, n_ctx=params["test_max_length"], test_sets=("hard", "stack"),
        test_max_depth=None)
    lengths = {f"Dyck-{k} {c}": config(base.override(k=k), c)
               for k in map(int, str(params["ks"]).split(","))
               for c in expand_configs(str(params["configs"]))}
    depth_base = base.override(
        k=params["depth_k"], max_depth=params["train_max_depth"],
        test_max_depth=params["test_max_depth"], max_length=params["depth_length"],
        test_max_length=params["depth_length"], n_ctx=params["depth_length"],
        test_sets=("hard",))
    depths = {f"depth {c}": config(depth_base, c)
              for c in expand_configs(str(params["depth_configs"]))}
    return Study(base, lengths, depths)


def _records(run_config: Any, seeds: Sequence[int], device: str = "cpu") -> list[Any]:
    return [r.record for r in run.run_seeds(  # a stopped run resumes from the run cache too
        run_config, list(seeds), device=device, splits=False,  # the records only
        progress=not os.environ.get("DYCKBOOK_QUIET"))]


def run_records(configs: Mapping[str, Any], seeds: Sequence[int], out: Any,
                executor: Any = None, device: str = "cpu") -> dict[str, list[Any]]:
    """Every labelled ``RunConfig`` for every seed (its seeds trained together), here in turn
    or, given a ``concurrent.futures`` ``executor`` (``executors.make_executor``: processes
    of one torch thread each), side by side, on ``device`` ("cpu", "cuda"). Records are
    appended to ``out/records.jsonl`` as each configuration finishes, and that file is a
    resume cache: a (configuration, seed) whose record is already there is not trained again
    (a record counts when its whole configuration, seed included, is the one asked for), and
    the file is rewritten to hold only this call's records. So an interrupted run, or one
    trained elsewhere (a GPU: ARCHITECTURE.md), resumes where it stopped.

    Returns:
        ``{label: [RunRecord per seed]}`` in the order of ``configs``.
    """
    if executor is not None and not isinstance(executor, cf.Executor):
        raise ValueError(f"executor must be None or a concurrent.futures.Executor, got "
                         f"{type(executor).__name__}")
    training_device(device)
    seeds = [int(s) for s in seeds]
    path = results.resolve(out) / "records.jsonl"
    wanted = {c.with_seed(s).digest(): (label, s) for label, c in configs.items() for s in seeds}
    found = results.read_records(path)
    done: dict[tuple[str, int], Any] = {}
    for r in found:
        if (key := wanted.get(config_digest(r.config))) is not None:
            r.label = key[0]
            done[key] = r
    if len(done) < len(found):  # records of another recipe: the file keeps this call's only
        results.write_records(path, done.values())
    if done:
        print(f"resumed {len(done)} of {len(wanted)} (configuration, seed) records from "
              f"{results.shown(path)}", flush=True)
    todo = {label: [s for s in seeds if (label, s) not in done] for label in configs}
    todo = {label: missing for label, missing in todo.items() if missing}

    def keep(label: str, records: list[Any]) -> None:
        for r in records:
            r.label = label
            done[(label, r.seed)] = r
        results.append_records(path, records)
        print(f"{label}: {len(records)} seed(s) done", flush=True)

    if executor is None:
        for label, missing in todo.items():
            keep(label, _records(configs[label], missing, str(device)))
    else:
        futures = {executor.submit(_records, configs[label], missing, str(device)): label
                   for label, missing in todo.items()}
        try:
            for future in cf.as_completed(futures):
                keep(futures[future], future.result())
        except BaseException:  # a failed configuration: the others are not waited for
            for future in futures:
                future.cancel()
            raise
    return {label: [done[(label, s)] for s in seeds] for label in configs}


def reach(score: Any, bin_width: int, threshold: float = 0.9, start: int = 0) -> int:
    """How far a score holds: the upper end of the last of the consecutive length bins
    ``[start + i * bin_width + 1, start + (i + 1) * bin_width]`` (those with strings) whose
    accuracy is at least ``threshold``, counted from the first bin with strings; ``start``
    when that first bin already falls below it."""
    if not isinstance(bin_width, int) or bin_width < 1:
        raise ValueError(f"bin_width must be an int >= 1, got {bin_width!r}")
    held, top = start, max(score.per_length, default=start)
    for low in range(start + 1, top + 1, bin_width):
        accuracy = score.accuracy_between(low, low + bin_width - 1)
        if math.isnan(accuracy):
            continue
        if accuracy < threshold:
            break
        held = low + bin_width - 1
    return held


def reach_rows(groups: Mapping[str, Sequence[Any]], test: str, train_max_length: int,
               threshold: float = 0.9) -> list[dict[str, Any]]:
    """Per configuration: parameters, the strings each seed trained on (steps x batch; how
    many stopped early on the validation target), each seed's reach on ``test`` (bins of
    ``train_max_length``, as multiples of it), the median, and how many seeds hold to 8N and
    to 16N (a failed seed counts, as failed)."""
    n = train_max_length
    out = []
    for label, group in groups.items():
        reaches = [reach(r.scores[test], n, threshold) if test in r.scores else 0 for r in group]
        failed = sum(r.status != "ok" for r in group)
        tested = max((max(r.scores[test].per_length, default=0) for r in group
                      if test in r.scores), default=0)
        strings = [r.steps * r.config["train"]["batch_size"] for r in group]
        early = sum(r.stopped_at is not None for r in group)
        out.append({"configuration": label, "seeds": len(group) if not failed
                    else f"{len(group)} ({failed} failed)",
                    "parameters": group[0].n_params if group else "",
                    "strings trained (median)": (f"{statistics.median(strings):,.0f} "
                                                 f"({early} stopped early)" if group else ""),
                    "holds to (each seed, xN)": " ".join(f"{x / n:g}" for x in reaches),
                    "median": f"{statistics.median(reaches) / n:g}N" if reaches else "",
                    ">= 8N": f"{sum(x >= 8 * n for x in reaches)}/{len(group)}",
                    ">= 16N": (f"{sum(x >= 16 * n for x in reaches)}/{len(group)}"
                               if tested > 15 * n else "not tested"),  # the 16N bin has strings
                    "_reaches": reaches, "_n": n})
    return out


def reach_sentence(rows: Sequence[Mapping[str, Any]], threshold: float) -> str:
    """Whether a configuration holds the stack set to 16N in a majority of its seeds (the
    moonshot), else which configurations hold furthest, from :func:`reach_rows`."""
    if not rows:
        return "No configuration ran."
    level = f"{threshold:.0%}"
    tested = [r for r in rows if r[">= 16N"] != "not tested"]
    wins = [r for r in tested if 2 * int(r[">= 16N"].split("/")[0]) > len(r["_reaches"])]
    if wins:
        return (f"Held at {level} or more to 16N in a majority of seeds: "
                + "; ".join(f"{r['configuration']} ({r['>= 16N']} seeds)" for r in wins) + ".")
    counts = {len(r["_reaches"]) for r in rows}

    def name(r: Mapping[str, Any]) -> str:  # its seeds named where the rows' counts differ
        k = len(r["_reaches"])
        return r["configuration"] + (f" ({k} seed{'s' * (k != 1)})" if len(counts) > 1 else "")

    best = max(statistics.median(r["_reaches"]) if r["_reaches"] else 0 for r in rows)
    top = [name(r) for r in rows if r["_reaches"] and statistics.median(r["_reaches"]) == best]
    where = ("to 16N was not tested" if not tested
             else "no configuration holds it to 16N in a majority of seeds")
    held = max((int(r[">= 16N"].split("/")[0]) for r in tested), default=0)
    most = ("" if not held else "; the most seeds held to 16N: " + ", ".join(
        f"{r['>= 16N']} by {r['configuration']}" for r in tested
        if int(r[">= 16N"].split("/")[0]) == held))
    if best == 0:
        return (f"At {level} on the stack set, {where}: none holds even its first length bin "
                f"(lengths 30 and up) in a majority of seeds{most}.")
    n = int(rows[0]["_n"])
    return (f"At {level} on the stack set, {where}; the furthest median reach is "
            f"{best / n:g}N, by {', '.join(top)}{most}.")


def check_sentence(rows: Sequence[Mapping[str, Any]], checks: Sequence[str]) -> str:
    """The verdict of each registered check of the moonshot probe (its configuration's label in
    :func:`probe_rows`; each predicted to hold to 16N in a majority of its seeds): confirmed
    when more than half its seeds hold, else rejected; every seed counted.

    Raises:
        ValueError: a check with no row, or one not tested to 16N (the message names it).
    """
    by_label = {r["configuration"]: r for r in rows}
    out = []
    for label in checks:
        row = by_label.get(label)
        if row is None or row[">= 16N"] == "not tested":
            raise ValueError(f"check {label!r} has no row tested to 16N; rows: {list(by_label)}")
        held, n = int(row[">= 16N"].split("/")[0]), len(row["_reaches"])
        verdict = "confirmed" if 2 * held > n else "rejected"
        out.append(f"{label}: {held} of {n} seeds hold to 16N (median {row['median']}), "
                   f"predicted a majority: **{verdict}**.")
    return " ".join(out)


def probe_rows(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of :func:`reach_rows` for the moonshot probe's committed results
    (``benchmarks/bench_length_reach.py``'s ``raw``: per task its seeds, each seed's reach as a
    multiple of N, its steps, test depth and early-stop target), so :func:`reach_sentence`
    reads them; a seed that did not train counts, as failed."""
    n, batch = int(raw["recipe"]["max_length"]), int(raw["recipe"]["batch_size"])
    tested = int(raw["test_max_length"])
    out = []
    for label, task in raw["tasks"].items():
        reaches = [round(x * n) for x in task["reach_xN"]]
        failed = sum(status != "ok" for status in task["status"])
        depth = task.get("test_max_depth")
        target = task.get("target_accuracy", raw["recipe"].get("target_accuracy"))
        seeds = task["seeds"]
        out.append({"configuration": label,
                    "seeds": (f"1 (seed {seeds[0]})" if len(seeds) == 1 else
                              f"{len(seeds)} ({seeds[0]}-{seeds[-1]})"
                              if seeds == list(range(seeds[0], seeds[-1] + 1)) else
                              f"{len(seeds)} ({', '.join(map(str, seeds))})")
                    + (f", {failed} failed" if failed else ""),
                    "test depth": "any" if depth is None else f"<= {depth}",
                    "early stop": "none" if target is None else f"at {target:.1%} validation",
                    "strings trained (median)":
                        f"{statistics.median(task['steps']) * batch:,.0f}",
                    "holds to (each seed, xN)": " ".join(f"{x / n:g}" for x in reaches),
                    "median": f"{statistics.median(reaches) / n:g}N",
                    ">= 16N": (f"{sum(x >= 16 * n for x in reaches)}/{len(reaches)}"
                               if tested > 15 * n else "not tested"),
                    "_reaches": reaches, "_n": n})
    return out


def side_rows(groups: Mapping[str, Sequence[Any]], test: str, train_max_length: int,
              split_at: int = 4, holds: float = 0.9, gap: float = 0.2) -> list[dict[str, Any]]:
    """How each configuration errs on ``test``: its accuracy on the members and on the
    negatives separately (seeds pooled), at lengths up to ``split_at`` N and beyond, and which
    side its errors fall on beyond it: *holds* (both sides at ``holds`` or more), *accepts the
    negatives* (members right ``gap`` more often than negatives: it has lost the long-range
    evidence), *rejects the members* (the converse: it reads a state that drifts with length),
    else *errs both ways*."""
    if not isinstance(split_at, int) or split_at < 1:
        raise ValueError(f"split_at must be an int >= 1, got {split_at!r}")
    cut = split_at * train_max_length
    out = []
    for label, group in groups.items():
        counts = {(side, far): [0, 0] for side in ("members", "negatives") for far in (0, 1)}
        for r in group:
            for kind, _, length, n, right in (r.scores[test].cell_items() if test in r.scores
                                              else []):
                cell = counts["members" if kind == MEMBER else "negatives", length > cut]
                cell[0] += n
                cell[1] += right
        share = {key: right / n if n else math.nan for key, (n, right) in counts.items()}
        members, negatives = share["members", 1], share["negatives", 1]
        if math.isnan(members) or math.isnan(negatives):
            how = "not tested beyond"
        elif min(members, negatives) >= holds:
            how = "holds"
        elif members - negatives >= gap:
            how = "accepts the negatives"
        elif negatives - members >= gap:
            how = "rejects the members"
        else:
            how = "errs both ways"
        row: dict[str, Any] = {"configuration": label}
        for far, span_text in ((0, f"to {split_at}N"), (1, f"beyond {split_at}N")):
            row[f"members right, {span_text}"] = pct(share["members", far])
            row[f"negatives right, {span_text}"] = pct(share["negatives", far])
        row[f"beyond {split_at}N"] = how
        out.append(row)
    return out


def side_sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """:func:`side_rows`' last column in words: the configurations grouped by how they err."""
    column = next((key for key in (rows[0] if rows else {}) if key.startswith("beyond ")), None)
    if column is None:
        return "No configuration ran."
    ways: dict[str, list[str]] = {}
    for r in rows:
        ways.setdefault(r[column], []).append(r["configuration"])
    return (f"{column[0].upper()}{column[1:]}: "
            + "; ".join(f"{len(names)} of {len(rows)} {_agree(way, len(names))} "
                        f"({', '.join(names)})"
                        for way, names in sorted(ways.items(), key=lambda w: -len(w[1])))
            + ".")


def _agree(way: str, n: int) -> str:
    """A class of :func:`side_rows` ("accepts the negatives") with its verb agreeing with n
    configurations ("accept the negatives")."""
    verb, _, rest = way.partition(" ")
    return way if n == 1 else " ".join(filter(None, (verb.removesuffix("s"), rest)))


def panels(groups: Mapping[str, Sequence[Any]], test: str, split: bool = False
           ) -> dict[str, dict[str, Any]]:
    """``{"Dyck-k": {configuration: pooled score of its seeds on test}}`` for the labels
    ``Dyck-<k> <configuration>`` of ``groups`` that have ``test``, a panel per language; with
    ``split``, two per language: the positions (plain Transformers) apart from the auxiliary
    objectives and the recurrent references, so no panel draws more than a few lines."""
    out: dict[str, dict[str, Any]] = {}
    for label, group in groups.items():
        language, _, name = label.partition(" ")
        scores = [r.scores[test] for r in group if test in r.scores]
        if not scores:
            continue
        title = language
        if split:
            plain = "+" not in name and name not in REFERENCES
            title = f"{language}: {'positions' if plain else 'objectives and references'}"
        out.setdefault(title, {})[name] = pool(scores)
    return out


def recipe_sentence(base: Any, n_seeds: int) -> str:
    """The study's recipe, from its base ``RunConfig`` (the same for every configuration)."""
    d, m, t = base.data, base.model, base.train
    low, high = d.lengths()
    test_low, test_high = d.lengths(test=True)
    clip = f"gradients clipped at {t.grad_clip}" if t.grad_clip else "no gradient clipping"
    stop = (f"stopped early once the validation accuracy reaches {t.target_accuracy:.1%}"
            if t.target_accuracy else "no early stop")
    return (f"The recipe, the same for every configuration: {n_seeds} seed{'s' * (n_seeds != 1)}, "
            f"{d.n_train:,} "
            f"training strings of length {low} to {high} (N = {high}), at most "
            f"{t.max_steps:,} steps of {t.batch_size} strings, Adam at {t.lr:g} with "
            f"{t.warmup_steps} warm-up steps and {t.schedule} decay, {clip}, {stop}; "
            f"Transformers of {m.n_layers} layers, width {m.d_model}, {m.n_heads} heads, MLP "
            f"{m.d_mlp}; test sets of {d.n_test:,} requested strings of length {test_low} to "
            f"{test_high} ({test_high / high:g}N), "
            + (f"nested at most {d.test_max_depth} deep." if d.test_max_depth is not None
               else "of any depth."))


def theme_rows(split: Sequence[Mapping[str, Any]], stack: Sequence[Mapping[str, Any]],
               reaches: Sequence[Mapping[str, Any]], theme: str) -> list[dict[str, Any]]:
    """The rows of one theme, per language, from the study's tables (``book.length_split_rows``
    on the hard set, ``run.summarise`` on the stack set, :func:`reach_rows`): ``"objectives"``
    (NoPE-causal membership beside its ``+next_symbols`` and ``+language_model`` versions) or
    ``"references"`` (the LSTM and the stack RNN, :data:`REFERENCES`, beside the Transformer
    configuration of the highest mean stack-set accuracy in that language)."""
    if theme not in ("objectives", "references"):
        raise ValueError(f"theme must be 'objectives' or 'references', got {theme!r}")
    hard = {r["configuration"]: r for r in split}
    held = {r["configuration"]: r for r in reaches}
    by_language: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in stack:
        language, _, name = row["label"].partition(" ")
        by_language.setdefault(language, {})[name] = row
    out = []
    for language, rows in by_language.items():
        if theme == "objectives":
            names = [n for n in rows if n.split("+")[0] == "causal-none-end"]
        else:
            transformers = [n for n in rows if n not in REFERENCES]
            best = max(transformers, key=lambda n: _finite(rows[n]["accuracy"]), default=None)
            names = [n for n in REFERENCES if n in rows] + ([best] if best else [])
        for name in names:
            label, row = f"{language} {name}", rows[name]
            out.append({"language": language, "configuration": name,
                        "hard, within N": hard.get(label, {}).get("within", ""),
                        "hard, beyond N": hard.get(label, {}).get("beyond", ""),
                        "stack set": f"{pct(row['accuracy'])} {span(row['low'], row['high'])}",
                        "holds to (median)": held.get(label, {}).get("median", ""),
                        "strings trained (median)": held.get(label, {}).get(
                            "strings trained (median)", ""),
                        "_accuracy": row["accuracy"]})
    return out


def theme_sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per language, the configuration of :func:`theme_rows` with the highest mean stack-set
    accuracy, and the others' means beside it."""
    parts = []
    for language in dict.fromkeys(r["language"] for r in rows):
        mine = sorted((r for r in rows if r["language"] == language),
                      key=lambda r: -_finite(r["_accuracy"]))
        others = ", ".join(f"{r['configuration']} {pct(r['_accuracy'])}" for r in mine[1:])
        parts.append(f"{language}: highest on the stack set {mine[0]['configuration']} "
                     f"({pct(mine[0]['_accuracy'])})" + (f"; then {others}" if others else ""))
    return "; ".join(parts) + "." if parts else "No configuration of this theme ran."


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -1.0


def cell_fields(name: str) -> dict[str, str]:
    """``"causal-none-end"`` -> ``{"mask": "causal", "pos_encoding": "none", "readout": "end"}``."""
    parts = name.strip().split("-")
    if len(parts) != 3:
        raise ValueError(f"a configuration must be mask-encoding-readout, got {name!r}")
    return dict(zip(("mask", "pos_encoding", "readout"), parts))
