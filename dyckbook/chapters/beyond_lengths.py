"""Beyond the training lengths (notebook 13_beyond_lengths): the Dyck-3 recipe that learned,
with positions that can extend, trained on lengths up to N and tested at 1×, 2× and 4× N on the
hard, stack, spread and deep sets, beside recurrent references, a Dyck-1 control and the
adversary of stack-free rules fitted both ways.

A configuration is a language, a depth and a position (``Dyck-3 L2 rope``); every one shares the
recipe of the ``recipe`` parameter (``key:value ...``, the fields of the grid's recipe,
:class:`~dyckbook.chapters.ablation_grid.GridSpec`, or of a run's configuration), with a causal
mask and the mean readout. Training sees hard negatives only (``train_negatives: hard``) and
validates on hard negatives only (``val_negatives: hard``), so no model ever sees, or is
selected on, the long-range kinds of its tests.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dyckbook.chapters import intervention
from dyckbook.chapters.ablation_grid import Cell
from dyckbook.chapters.learning_dyck3 import parse_recipes
from dyckbook.chapters.page import pct, span
from dyckbook.claims.verdicts import beyond_table
from dyckbook.data.languages import DeepDyck, Dyck
from dyckbook.data.negatives import sample_minimal_pairs, stack_kind
from dyckbook.data.protocol import regime_lengths
from dyckbook.experiment.evaluate import pool
from dyckbook.experiment.intervals import interval
from dyckbook.experiment.run import RunConfig, data_splits, run_seeds
from dyckbook.experiment.train import TrainConfig
from dyckbook.interp import patching, readout
from dyckbook.nn.recurrent import RecurrentConfig
from dyckbook.rules import adversary, baselines

__all__ = ["FADES", "HOLDS", "HOLDS_ON", "LONG_SETS", "MECHANISM_PAIRS", "SOLVED", "Study",
           "adversary_level", "adversary_rows", "adversary_sentence", "binned", "bins",
           "configuration_rows", "deep_depth", "deep_values", "extends_values",
           "holds_sentence", "int_list", "length_panels", "mechanism", "mechanism_brief",
           "mechanism_sentence", "own_adversary", "recorded_bins", "reference_configs",
           "seed_table", "study", "strongest", "table_rows", "test_adversary", "verdict_rows",
           "verdict_sentence"]

#: the long-range sets whose weaker score is the verdict's measure
LONG_SETS = ("stack", "spread")
#: a seed "holds" a set in a length bin at this accuracy or more
SOLVED = 0.95


@dataclass(frozen=True)
class Study:
    """The study's configurations, ``{label: RunConfig}``: ``models`` (every language, depth
    and position), ``references`` (the recurrent networks on the first Dyck-k data), and the
    length ``bins`` ``{"2×": (lo, hi)}`` of every multiple of N."""

    models: dict[str, RunConfig]
    references: dict[str, RunConfig]
    bins: dict[str, tuple[int, int]]


def int_list(value: Any) -> list[int]:
    """A comma-separated list of ints >= 1 (``"2,4"``; ``""``: none), as a notebook's text
    parameter gives it.

    Raises:
        ValueError: anything else (the message names the value).
    """
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"expected comma-separated ints >= 1, got {value!r}")
    out = []
    for item in (x.strip() for x in str(value).split(",")):
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise ValueError(f"expected comma-separated ints >= 1, got {value!r}")
        out.append(int(item))
    return out


def bins(max_length: int, test_min_length: int, multiples: Sequence[int]
         ) -> dict[str, tuple[int, int]]:
    """``{"1×": (test_min_length, N), "2×": (N + 2, 2N), "4×": (2N + 2, 4N)}``: multiple m
    holds the even lengths above the previous multiple's up to m·N (1×: from the shortest
    test length)."""
    out, previous = {}, None
    for m in sorted(int(x) for x in multiples):
        if m < 1:
            raise ValueError(f"multiples must be ints >= 1, got {m}")
        lo = test_min_length if previous is None else previous * max_length + 2
        out[f"{m}×"] = (lo, m * max_length)
        previous = m
    return out


def _cells(k: int, layers: Sequence[int], positions: Sequence[str]) -> list[tuple[str, Cell]]:
    return [(f"Dyck-{k} L{n} {p}", Cell(k, n, "causal", p, "mean"))
            for n in layers for p in positions]


def study(recipe: str, ks: Sequence[int], layers: Sequence[int], positions: Sequence[str],
          deep_layers: Sequence[int], deep_positions: Sequence[str],
          control_layers: Sequence[int], control_positions: Sequence[str], max_length: int,
          test_min_length: int, multiples: Sequence[int], test_sets: Sequence[str],
          n_test: int, references: str) -> Study:
    """Every configuration of the study. The first of ``ks`` is the language under study
    (``layers`` x ``positions``, then ``deep_layers`` x ``deep_positions``, the deeper models
    with fewer positions for the budget); each further one is a control (``control_layers`` x
    ``control_positions``). Every configuration trains on lengths up to ``max_length`` (N) and
    is tested from ``test_min_length`` to the largest multiple of N, its context that long."""
    spans = bins(max_length, test_min_length, multiples)
    longest = max(hi for _, hi in spans.values())
    models: dict[str, RunConfig] = {}
    for i, k in enumerate(int(x) for x in ks):
        chosen = _cells(k, layers, positions) + _cells(k, deep_layers, deep_positions) \
            if i == 0 else _cells(k, control_layers, control_positions)
        for label, cell in chosen:
            text = f"{label.replace(' ', '_')}@{cell.name} {recipe}"
            config = parse_recipes(text)[0].config()
            sets = tuple(s for s in test_sets if k > 1 or s != "spread")
            models[label] = config.override(
                max_length=max_length, test_min_length=test_min_length,
                test_max_length=longest, n_ctx=longest, test_sets=sets, n_test=n_test,
                train_negatives="hard", val_negatives="hard", test_pool="beyond")
    first = next(iter(models.values()))
    return Study(models, reference_configs(first, references), spans)


def configuration_rows(chosen: Study) -> list[dict[str, str]]:
    """One row per configuration: its language, depth, position, training and test lengths,
    test sets, and the model's size."""
    rows = []
    for label, c in {**chosen.models, **chosen.references}.items():
        m, d = c.model, c.data
        rows.append({"configuration": label,
                     "model": (f"{m.n_layers} layers, width {m.d_model}, "
                               f"{m.pos_encoding} positions" if hasattr(m, "n_layers")
                               else f"{m.cell} cell, hidden {m.d_hidden}"),
                     "trained on": f"lengths {d.min_length}-{d.max_length}, {d.train_negatives} "
                                   f"negatives, {d.n_train:,} strings, up to "
                                   f"{c.train.max_steps:,} steps",
                     "tested on": f"{', '.join(d.test_sets)}: lengths {d.test_min_length}-"
                                  f"{d.test_max_length}"})
    return rows


def reference_configs(config: RunConfig, cells: str) -> dict[str, RunConfig]:
    """The recurrent references (``cells``: ``stack``, ``lstm``, comma-separated; ``none``) on
    ``config``'s data, at its budget, learning rate and schedule, reading strings as long as
    its tests."""
    out = {}
    for cell in (c.strip() for c in cells.split(",") if c.strip() not in ("", "none")):
        name = "stack RNN" if cell == "stack" else cell.upper()
        t = config.train
        out[f"Dyck-{config.data.k} {name}"] = RunConfig(
            data=config.data, model=RecurrentConfig(k=config.data.k, n_ctx=config.model.n_ctx,
                                                    cell=cell),
            train=TrainConfig(max_steps=t.max_steps, lr=t.lr, batch_size=32,
                              warmup_steps=t.warmup_steps, schedule="cosine", grad_clip=1.0,
                              eval_every=t.eval_every, target_accuracy=t.target_accuracy),
            seed=0, baselines=())
    return out


def binned(score: Any, lo: int, hi: int) -> float:
    """Accuracy of a :class:`~dyckbook.experiment.evaluate.Score` over its lengths in
    ``[lo, hi]`` (nan where it has none)."""
    return score.accuracy_between(lo, hi)


def extends_values(group: Sequence[Any], lo: int, hi: int) -> list[float]:
    """Per seed, the lower of the long-range sets' accuracies (:data:`LONG_SETS` that the
    records hold) at lengths ``[lo, hi]``: the verdict's measure
    (:func:`dyckbook.claims.verdicts.beyond_table`)."""
    table = beyond_table({"g": group}, lo, hi)["g"]
    return [table[s] for s in sorted(table)]


def strongest(scores: Mapping[str, Mapping[str, float]]) -> tuple[str, float]:
    """The rule with the highest lower score over the sets: ``scores`` is ``{set: {rule:
    accuracy}}``; a rule must be scored on every set. Returns ``(rule, its lower score)``."""
    sets = list(scores.values())
    common = set.intersection(*(set(s) for s in sets)) if sets else set()
    if not common:
        return "", math.nan
    best = max(sorted(common), key=lambda r: min(s[r] for s in sets))
    return best, min(s[best] for s in sets)


Table = dict[str, dict[str, dict[str, float]]]  # {multiple: {set: {rule: accuracy}}}


def test_adversary(k: int, sets: Sequence[str], spans: Mapping[str, tuple[int, int]],
                   n: int, seed: int = 0, window: int = 4, deep_depth: int | None = None
                   ) -> Table:
    """``{multiple: {set: {rule: accuracy}}}``: every stack-free rule of the adversary fitted on
    ``n`` members and ``n`` negatives of each test distribution (the set's regime at the bin's
    lengths where it has negatives) and scored on a fresh sample of it
    (``adversary.attack_regime``): the set's own hardness, whatever a model was trained on.
    The ``deep`` set's distribution is the hard regime of ``DeepDyck(k, deep_depth)`` (D, one
    more than the deepest training member: :func:`deep_depth`), from 2D on; without
    ``deep_depth`` it is left out."""
    language, out = Dyck(k), {}
    for m, (lo, hi) in spans.items():
        out[m] = {}
        for s in sets:
            if (s == "spread" and k == 1) or (s == "deep" and deep_depth is None):
                continue
            source = DeepDyck(k, deep_depth) if s == "deep" else language
            lengths = regime_lengths(source, s, lo, hi, window)
            if not lengths:
                continue
            names = [r for r in (*baselines.STACK_FREE, *adversary.ADVERSARY)
                     if r != "edit_knn" or max(lengths) <= adversary.EDIT_KNN_LONGEST]
            scores = adversary.attack_regime(source, s, lengths, n, seed, None, window,
                                             names=names)
            out[m][s] = {rule: float(row["all"]) for rule, row in scores.items()}
    return out


def deep_depth(config: RunConfig, seed: int = 0) -> int | None:
    """D of ``config``'s deep test set at ``seed`` (one more than the depth of its deepest
    training member; ``Splits.deep_depth``), or None where it has none."""
    return data_splits(config.data, seed).deep_depth


def _mean_of_finite(values: Sequence[float]) -> float:
    """The mean of the finite values, NaN where there is none (a bin without such strings),
    without numpy's warning, which a page would print."""
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def own_adversary(group: Sequence[Any], sets: Sequence[str], lo: int, hi: int
                  ) -> dict[str, dict[str, float]]:
    """``{set: {rule: accuracy}}``, every rule fitted on a model's own training strings and
    scored on its test strings of lengths ``[lo, hi]``, averaged over the group's seeds."""
    out: dict[str, dict[str, float]] = {}
    for s in sets:
        if not any(s in r.baselines for r in group):
            continue  # a set these records do not hold (Dyck-1 has no spread layout)
        rules = set.intersection(*(set(r.baselines.get(s, {})) for r in group)) if group else set()
        values = {rule: _mean_of_finite([binned(r.baselines[s][rule], lo, hi) for r in group])
                  for rule in sorted(rules)}
        out[s] = {rule: v for rule, v in values.items() if not math.isnan(v)}
    return out


def adversary_rows(own: Mapping[str, Mapping[str, Mapping[str, float]]],
                   test: Mapping[str, Mapping[str, Mapping[str, float]]]
                   ) -> list[dict[str, str]]:
    """One row per multiple and set: the strongest rule fitted each way (``{multiple: {set:
    {rule: accuracy}}}``), and where there are two long-range sets the rule whose lower score
    over them is highest (``stack and spread``)."""
    rows = []
    for m in own:
        present = [x for x in LONG_SETS if x in own[m] or x in test.get(m, {})]
        together = " and ".join(present) if len(present) > 1 else ""
        for s in [*own[m], *([together] if together else [])]:
            row = {"lengths": m, "set": s}
            for way, table in (("fitted on the training strings", own),
                               ("fitted on the test distribution", test)):
                if s == together:
                    rule, value = strongest({x: table.get(m, {}).get(x, {}) for x in LONG_SETS
                                             if x in table.get(m, {})})
                else:
                    scores = table.get(m, {}).get(s, {})
                    rule, value = max(scores.items(), key=lambda kv: kv[1]) if scores \
                        else ("", math.nan)
                row[way] = f"`{rule}` {pct(value)}" if rule else "—"
            rows.append(row)
    return rows


def adversary_level(own: Mapping[str, Mapping[str, Mapping[str, float]]],
                    test: Mapping[str, Mapping[str, Mapping[str, float]]], m: str) -> float:
    """The verdict's adversary at multiple ``m``: the strongest rule's lower accuracy over the
    long-range sets, the higher of its two fits."""
    values = [strongest({s: t[m][s] for s in LONG_SETS if s in t.get(m, {})})[1]
              for t in (own, test)]
    values = [v for v in values if not math.isnan(v)]
    return max(values) if values else math.nan


def seed_table(groups: Mapping[str, Sequence[Any]], test: str,
               spans: Mapping[str, tuple[int, int]]) -> dict[str, dict[str, list[float]]]:
    """``{label: {multiple: [per-seed accuracy]}}`` on one test set."""
    return {label: {m: [binned(r.scores[test], lo, hi) if test in r.scores else math.nan
                        for r in group] for m, (lo, hi) in spans.items()}
            for label, group in groups.items()}


def table_rows(groups: Mapping[str, Sequence[Any]], tests: Sequence[str],
               spans: Mapping[str, tuple[int, int]]) -> list[dict[str, str]]:
    """One row per configuration and test set: every multiple's mean accuracy over seeds, its
    95% interval and the seeds at :data:`SOLVED` or more (the literature's form)."""
    rows = []
    for test in tests:
        table = seed_table(groups, test, spans)
        for label, by_m in table.items():
            if all(math.isnan(v) for vs in by_m.values() for v in vs):
                continue
            row = {"configuration": label, "set": test, "seeds": str(len(groups[label]))}
            for m, values in by_m.items():
                values = [v for v in values if not math.isnan(v)]
                if not values:
                    row[m] = "—"
                    continue
                lo, hi = interval(values)
                held = sum(v >= SOLVED for v in values)
                row[m] = f"{pct(float(np.mean(values)))} {span(lo, hi)}; {held}/{len(values)}"
            rows.append(row)
    return rows


def length_panels(groups: Mapping[str, Sequence[Any]], max_length: int
                  ) -> dict[str, dict[str, dict[str, Any]]]:
    """The figures' panels, ``{"long": {title: {label: pooled Score}}, "control": ...}``: the
    Dyck-3 stack and spread sets, 2-layer configurations apart from the deeper ones and the
    references (at most four lines a panel), then the deep set and the Dyck-1 control."""
    def lines(test: str, keep: Any) -> dict[str, Any]:
        return {label: pool([r.scores[test] for r in group]) for label, group in groups.items()
                if keep(label) and all(test in r.scores for r in group)}

    two = lambda label: label.startswith("Dyck-3 L2 ")  # noqa: E731
    rest = lambda label: label.startswith("Dyck-3 ") and not two(label)  # noqa: E731
    long = {f"Dyck-3 {test} set, {name}": lines(test, keep)
            for test in LONG_SETS for name, keep in (("2 layers", two),
                                                     ("4 layers and references", rest))}
    control = {"Dyck-3 deep set, 2 layers": lines("deep", two),
               "Dyck-1 far set (control)": lines("stack", lambda x: x.startswith("Dyck-1 "))}
    return {"long": {t: s for t, s in long.items() if s},
            "control": {t: s for t, s in control.items() if s}}


def verdict_rows(judged: Sequence[Any]) -> list[dict[str, str]]:
    """One row per beyond-lengths verdict: its claim, the multiple it asks, its label, the
    configuration held out as best, its seeds, and every piece of evidence as mean [95%
    interval] over seeds, under names without the multiple (``beyond k3``, ``within k3``,
    ``adversary k3``), so every row fills the same columns."""
    rows = []
    for v in judged:
        multiple = re.search(r"_(\d+)x_", v.rule.claim)
        row = {"claim": v.rule.claim, "lengths": f"{multiple.group(1)}× N" if multiple else "",
               "verdict": v.label,
               "held-out best": next((e.best() for e in v.evidence if e.chosen), ""),
               "seeds": max((e.n_seeds for e in v.evidence if not e.reference), default=0)}
        for e in v.evidence:
            lo, hi = e.interval
            row[re.sub(r" \d+x\b", "", e.name)] = (pct(e.mean) if e.reference
                                                     else f"{pct(e.mean)} {span(lo, hi)}")
        rows.append(row)
    return rows


def verdict_sentence(judged: Sequence[Any]) -> str:
    """The registered verdicts in words: per multiple, the label, the held-out best
    configuration, its measure beyond with its interval, the same seeds within, and the
    adversary's level."""
    parts = []
    for row in verdict_rows(judged):
        said = [f"at {row['lengths']} **{row['verdict']}**"]
        if row.get("held-out best"):
            said.append(f"held-out best {row['held-out best']}")
        said += [f"{name.split()[0]} {row[name]}" for name in row
                 if name.startswith(("beyond ", "within ", "adversary ")) and row[name]]
        parts.append(", ".join(said))
    return ("The registered verdicts on the thesis' claim 4: " + "; ".join(parts) + "."
            if parts else "No registered verdict was judged.")


#: minimal pairs per length bin for the mechanism check (and its hypotheses' selection pairs)
MECHANISM_PAIRS = 200


def _pairs(lo: int, hi: int, n: int, seed: int) -> tuple[Any, Any] | None:
    """``n`` minimal pairs of Dyck-3 at lengths drawn uniformly from those of ``[lo, hi]``
    with stack negatives (None where there are none)."""
    language = Dyck(3)
    usable = regime_lengths(language, "stack", lo, hi)
    if not usable:
        return None
    lengths = np.random.default_rng(seed).choice(usable, n)
    members, negatives, lengths = sample_minimal_pairs(language, np.random.default_rng(seed),
                                                       lengths, stack_kind(language))
    return patching.pair_tokens(members, negatives, lengths)


def _hypotheses(n_heads: int, selection: tuple[Any, Any]) -> dict[str, Any]:
    """The intervention chapter's H5, H7 and H8 for a 2-layer model."""
    h5 = ((0, "mlp"), *((1, h) for h in range(n_heads)), (1, "mlp"))
    return {"H5": list(h5), "H7": patching.ChosenHeads(h5, (0,), *selection),
            "H8": patching.ChosenHeads(((0, "mlp"), (1, "mlp")), (0, 1), *selection)}


def mechanism(records: Mapping[str, Sequence[Any]], chosen: Study, device: str = "cpu",
              n_pairs: int = MECHANISM_PAIRS) -> dict[str, list[dict[str, Any]]]:
    """For the best and the worst Dyck-3 configuration at 2 layers (by the mean over seeds of
    the verdict's measure at 2×), every seed's model (read back from the run cache, else
    trained again) on ``n_pairs`` minimal pairs at 1× and 2× (and as many to choose H7's
    and H8's heads on, drawn apart): the readout's
    evidence (``interp.readout``) and the hypotheses H5, H7, H8 (``interp.patching``).

    Returns:
        ``{"dilution": rows, "heads": rows}``.
    """
    spans = {m: chosen.bins[m] for m in ("1×", "2×") if m in chosen.bins}
    two = {label: group for label, group in records.items() if label.startswith("Dyck-3 L2 ")}
    if not two or "2×" not in spans:
        return {"dilution": [], "heads": []}
    score = {label: _mean_of_finite(extends_values(group, *spans["2×"]))
             for label, group in two.items()}
    ranked = sorted(score, key=score.get)
    picked = dict.fromkeys([ranked[-1], ranked[0]])  # best first; one row set if they coincide
    pairs = {m: _pairs(lo, hi, n_pairs, 7 + i) for i, (m, (lo, hi)) in
             enumerate(spans.items())}
    pairs = {m: p for m, p in pairs.items() if p is not None}
    selection = _pairs(*spans["1×"], n_pairs, 101) or _pairs(*spans["2×"], n_pairs, 101)
    if not pairs or selection is None:
        return {"dilution": [], "heads": []}
    dilution, heads, found = [], [], []
    for label in picked:
        seeds = [int(r.seed) for r in two[label]]
        models = [r.model for r in run_seeds(chosen.models[label], seeds, device=device,
                                             splits=False)]
        role = "best" if label == ranked[-1] else "worst"
        for m, (members, negatives) in pairs.items():
            per = [readout.pair_evidence(model, members, negatives) for model in models]
            mean = {key: float(np.mean([p[key] for p in per])) for key in per[0]}
            dilution += readout.evidence_rows(f"{label} ({role}, {len(models)} seeds)",
                                              {m: mean})
            tested = patching.judge_hypotheses(models, members, negatives,
                                               _hypotheses(models[0].config.n_heads, selection))
            heads += intervention.hypothesis_rows({f"{label} ({role}), {m}": tested})
            found.append({"label": label, "role": role, "multiple": m, "seeds": len(models),
                          "evidence": mean,
                          "verdicts": {r["hypothesis"]: r["verdict"] for r in tested}})
    for row in heads:
        row.pop("components", None)
    return {"dilution": dilution, "heads": heads, "found": found,
            "words": mechanism_sentence(found), "brief": mechanism_brief(found)}


#: the readout's evidence "holds" at 2× when its total keeps this share of the 1× total; below
#: FADES of it the evidence itself fades (shown, not a registered rule)
HOLDS, FADES = 0.8, 0.5


def _reading(at: Mapping[str, Mapping[str, Any]]) -> tuple[str, float]:
    """How the readout's evidence changes from 1× to 2× (one of ``dilution``, ``holds``,
    ``fades``, ``partly``; ``""`` without both multiples) and the share of the 1× total that
    the 2× total keeps."""
    if "1×" not in at or "2×" not in at:
        return "", math.nan
    one, two = at["1×"]["evidence"], at["2×"]["evidence"]
    kept = two["total"] / one["total"] if one["total"] > 0 else math.nan
    if not math.isfinite(kept):
        return "", kept
    if kept >= HOLDS:
        return ("dilution" if two["mean"] < one["mean"] else "holds"), kept
    return ("fades" if kept < FADES else "partly"), kept


def _by_label(found: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Mapping[str, Any]]]:
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for entry in found:
        out.setdefault(entry["label"], {})[entry["multiple"]] = entry
    return out


def mechanism_brief(found: Sequence[Mapping[str, Any]]) -> str:
    """:func:`mechanism_sentence` in one line of plain text (the landing page quotes it):
    per configuration its role, the reading of its evidence and the hypotheses accepted at
    each multiple."""
    words = {"dilution": "dilution (the total evidence keeps {} of itself at 2×, its mean falls)",
             "holds": "the evidence holds (its total keeps {} at 2×)",
             "fades": "the evidence itself fades (its total keeps {} at 2×)",
             "partly": "partly dilution, partly fading (its total keeps {} at 2×)"}
    parts = []
    for label, at in _by_label(found).items():
        reading, kept = _reading(at)
        accepted = "; ".join(
            f"at {m} " + (", ".join(h for h, v in e["verdicts"].items() if v == "accepted")
                          or "no hypothesis") + " accepted" for m, e in at.items())
        said = words[reading].format(pct(kept)) if reading else "no 1× to compare"
        parts.append(f"{label} ({next(iter(at.values()))['role']}): {said}; {accepted}")
    return "; ".join(parts) if parts else "not measured yet"


def mechanism_sentence(found: Sequence[Mapping[str, Any]]) -> str:
    """What the mechanism check found, in words, from :func:`mechanism`'s raw measures (one
    entry per configuration and multiple: ``label``, ``role``, ``multiple``, ``seeds``, the
    seed-mean ``evidence`` of :func:`dyckbook.interp.readout.pair_evidence` and each
    hypothesis' ``verdicts``).

    Per configuration: the negatives of minimal pairs rejected and the total and mean evidence
    at 1× and 2×; *dilution* when the total at 2× keeps :data:`HOLDS` of the 1× total or more
    while the mean falls (*the evidence holds* if the mean does not fall), *the evidence itself
    fades* below :data:`FADES`, *partly both* between; and
    which hypotheses are accepted at each multiple."""
    lines = []
    for label, at in _by_label(found).items():
        first = next(iter(at.values()))
        seeds = f"{first['seeds']} seed{'s' if first['seeds'] != 1 else ''}"
        head = f"- **{label}** ({first['role']}, {seeds}):"
        said = [f"at {m} the negatives rejected {pct(e['evidence']['negatives_right'])}, total "
                f"evidence {e['evidence']['total']:.2f}, its mean (the decision) "
                f"{e['evidence']['mean']:.3f} over {e['evidence']['tokens']:.0f} tokens"
                for m, e in at.items()]
        reading, kept = _reading(at)
        said += [{"dilution": f"**dilution**: the total keeps {pct(kept)} of itself at 2× while "
                              f"the mean falls",
                  "holds": f"**the evidence holds**: the total keeps {pct(kept)} of itself at "
                           f"2× and the mean does not fall",
                  "fades": f"**the evidence itself fades**: the total keeps {pct(kept)} of "
                           f"itself at 2×",
                  "partly": f"**partly dilution, partly fading**: the total keeps {pct(kept)} "
                            f"of itself at 2×"}[reading]] if reading else []
        verdicts = "; ".join(
            f"{m}: " + (", ".join(f"{h} {v}" for h, v in e["verdicts"].items()) or "none tested")
            for m, e in at.items())
        lines.append(f"{head} {'; '.join(said)}. Heads: {verdicts}.")
    return "\n".join(lines) if lines else "No mechanism check ran (no 2-layer Dyck-3 model at 2×)."


def recorded_bins(records: Sequence[Any]) -> dict[str, tuple[int, int]]:
    """:func:`bins` of a run read from its records: N, the shortest test length and the
    multiples (1, 2, 4, ... up to the longest test length over N) of the first record."""
    if not records:
        return {}
    data = records[0].config["data"]
    n, top = int(data["max_length"]), int(data.get("test_max_length") or data["max_length"])
    multiples, m = [], 1
    while m * n <= top:
        multiples.append(m)
        m *= 2
    if top % n == 0 and top // n not in multiples:
        multiples.append(top // n)
    return bins(n, int(data.get("test_min_length") or 2), multiples)


def deep_values(group: Sequence[Any], lo: int, hi: int) -> list[float]:
    """Per seed, the deep set's accuracy at lengths ``[lo, hi]`` (nan where a record has no
    deep set or no string there)."""
    return [binned(r.scores["deep"], lo, hi) if "deep" in r.scores else math.nan for r in group]


#: what :func:`holds_sentence` reads: per seed values at a bin, and the sets' name in words
HOLDS_ON = {"long": (extends_values, "both long-range sets"),
            "deep": (deep_values, "the deep set")}


def holds_sentence(records: Sequence[Any], language: int = 3, on: str = "long") -> str:
    """How far each configuration of ``language`` holds, in words: per multiple, the seeds at
    :data:`SOLVED` or more and the mean, on both long-range sets (``on="long"``: the verdict's
    measure, per seed the lower of the two) or on the deep set (``on="deep"``); "not measured
    yet" without records."""
    if on not in HOLDS_ON:
        raise ValueError(f"on must be one of {sorted(HOLDS_ON)}, got {on!r}")
    measure, sets = HOLDS_ON[on]
    groups: dict[str, list[Any]] = {}
    for r in records:
        if r.label.startswith(f"Dyck-{language} "):  # references too: "Dyck-3 LSTM"
            groups.setdefault(r.label, []).append(r)
    spans = recorded_bins(records)
    parts = []
    for label, group in groups.items():
        values = {m: measure(group, lo, hi) for m, (lo, hi) in spans.items()}
        if all(math.isnan(v) for vs in values.values() for v in vs):
            continue
        finite = [[v for v in vs if math.isfinite(v)] for vs in values.values()]
        held = ", ".join(f"{sum(v >= SOLVED for v in vs)}/{len(vs)}" if vs else "—"
                         for vs in finite)  # "—": no string of the sets at these lengths
        means = ", ".join(pct(_mean_of_finite(vs)) if vs else "—" for vs in finite)
        parts.append(f"{label} {held} (mean {means})")
    if not parts:
        return "not measured yet"
    return (f"seeds at {SOLVED:.0%} or more on {sets} at "
            f"{', '.join(spans)} N: " + "; ".join(parts))


def adversary_sentence(own: Mapping[str, Mapping[str, Mapping[str, float]]],
                       test: Mapping[str, Mapping[str, Mapping[str, float]]],
                       sets: str = "both long-range sets") -> str:
    """The adversary at each multiple in words: the rule whose lower score over the long-range
    sets is highest, fitted each way (``{multiple: {set: {rule: accuracy}}}``), and the higher
    of the two (the verdicts' reference)."""
    parts = []
    for m in own:
        said = []
        for way, table in (("fitted on the models' training strings", own),
                           ("on the test distribution", test)):
            rule, value = strongest({s: table.get(m, {}).get(s, {}) for s in LONG_SETS
                                     if s in table.get(m, {})})
            if rule:
                said.append(f"{way} `{rule}` {pct(value)}")
        if said:
            parts.append(f"at {m} N, {' and '.join(said)}")
    if not parts:
        return f"No stack-free rule was fitted on {sets}."
    return (f"The strongest rule without a stack on {sets} (its lower score): "
            + "; ".join(parts) + ".")
