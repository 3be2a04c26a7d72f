"""The verdict chapter's tables and sentences: each verdict with its registered recipe, seeds,
interval, one-seed sensitivity and stack-set evidence; the registration history; the interval's
coverage measured at the build's seed counts.

The science is in ``verdicts`` (the rules), ``registry`` (what may be judged) and ``intervals``;
this module only lays their answers out for ``book/re_examining_thesis.ipynb``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dyckbook.chapters import beyond_lengths
from dyckbook.chapters.page import pct, read_runs
from dyckbook.claims import registry
from dyckbook.claims.verdicts import RULES, UNREGISTERED, Evidence, Rule, Verdict, sensitivity
from dyckbook.data.languages import Dyck
from dyckbook.data.presets import thesis_result
from dyckbook.data.protocol import make_splits
from dyckbook.experiment import results
from dyckbook.experiment.intervals import METHOD, coverage
from dyckbook.experiment.run import RunConfig
from dyckbook.nn import tokenizer
from dyckbook.nn.model import Classifier, ModelConfig
from dyckbook.rules.baselines import order_blind_ceiling

__all__ = ["ORACLE_SETS", "answer_values", "beyond_answers", "beyond_levels",
           "beyond_mechanism", "ceilings", "coverage_sentence", "design_rows", "evidence_rows",
           "history_rows", "learned_by_language", "learned_sentence", "missing_sentence",
           "moved_sentence", "oracle_levels", "registration_check", "rule_rows", "verdict_json",
           "verdict_rows"]


def rule_rows(rules: Sequence[Rule] = RULES) -> list[dict[str, str]]:
    """The rules as table rows."""
    return [{"claim": r.claim, "the thesis says": r.statement, "evidence": r.evidence,
             "reproduced if": r.reproduced_if, "refuted if": r.refuted_if,
             "not testable if": r.not_testable_if or "—", "run": r.run}
            for r in rules]


def registration_check(folders: Sequence[str], registrations: Sequence[Any] | None = None
                       ) -> tuple[dict[str, str], dict[str, Any]]:
    """Which claims may be judged: every rule's run, found among results folders by the run
    name in each folder's ``run.json``.

    Args:
        folders: the results folders the chapter reads.
        registrations: ``registry.load()`` (default: the repository's).

    Returns:
        ``(problems, registered)``: ``{claim: why it is not judged}`` for every claim whose run
        is not among the folders, has no ``run.json`` (an interactive run), or fails
        ``registry.check``; and ``{claim: its registration}`` (None where none applies).
    """
    regs = registry.load() if registrations is None else registrations
    records = {}
    for folder in folders:
        file = results.resolve(folder.strip()) / "run.json"
        if file.is_file():
            record = results.read_json(file)
            records[str(record.get("run"))] = record
    problems: dict[str, str] = {}
    registered: dict[str, Any] = {}
    for rule in RULES:
        record = records.get(rule.run)
        if record is None:
            registered[rule.claim] = None
            problems[rule.claim] = f"no run record of `{rule.run}` among the folders read"
            continue
        registered[rule.claim], why = registry.check(record, regs)
        if why:
            problems[rule.claim] = why
    return problems, registered


def _evidence_text(e: Evidence) -> str:
    lo, hi = e.interval
    failed = f" ({e.n_failed} failed, counted)" if e.n_failed else ""
    strings = f", {e.n_strings} {e.test} strings each" if e.n_strings else ""
    if e.reference:  # a reference number, not a seed mean
        return f"{e.name}: {e.mean:.3f}"
    unit = "seed" if e.test else "model"  # the mechanism measures pool models of both k
    seeds = f"{e.n_seeds} {unit}{'s' * (e.n_seeds != 1)}"
    return f"{e.name}: {e.mean:.3f} [{lo:.3f}, {hi:.3f}], {seeds}{failed}{strings}"


def _sensitivity_text(v: Verdict, evidence: Mapping[str, Evidence]) -> str:
    if v.label == UNREGISTERED:
        return ""
    flip = sensitivity(v.rule, evidence)
    if flip is None:
        return "no single seed can change it"
    name, seed, value, label = flip
    was = evidence[name].values[seed]
    return f"{label} if one {evidence[name].name} seed scored {value:.3f} (not {was:.3f})"


def _no_stack(v: Verdict) -> str:
    tests = {e.test for e in v.evidence}
    if tests == {""}:
        return "not a test accuracy (no stack set applies)"
    return "no stack strings within these lengths" if "stack" not in tests else "-"


def verdict_rows(judged: Sequence[Verdict], evidence: Mapping[str, Evidence],
                 registered: Mapping[str, Any] | None = None) -> list[dict[str, str]]:
    """One row per verdict: claim, label, the evidence it rests on (mean [interval], seeds, the
    failed ones counted), the configuration held out as best, the evidence shown beside it
    (the stack set's, a reference), how far one seed would have to move to change the label,
    and the registered recipe (digest, registration, date)."""
    out = []
    for v in judged:
        reg = (registered or {}).get(v.rule.claim)
        recipe = (f"`{reg.digest[:16]}` (no. {reg.id}, {reg.registered[:10]})" if reg else "none")
        late = registry.post_hoc(reg) if reg is not None else None
        if late is not None:
            recipe += f"; not blind: written with results in hand ({late.commit})"
        best = "; ".join(dict.fromkeys(e.best() for e in v.evidence if e.best()))
        shown = []
        for e in v.shown:  # a shown set has its own held-out choice: name it where it differs
            own = e.best()
            other = own and own.split(" (")[0] not in best
            shown.append(_evidence_text(e) + (f", held-out best there: {own}" if other else ""))
        out.append({"claim": f"{v.rule.statement} (`{v.rule.claim}`)",
                    "verdict": v.label + (f" ({v.note})" if v.note else ""),
                    "evidence (mean [95% interval], seeds)": "; ".join(
                        _evidence_text(e) for e in v.evidence),
                    "best configuration (held out)": best or "-",
                    "shown beside": "; ".join(shown) or _no_stack(v),
                    "one seed away": _sensitivity_text(v, evidence),
                    "recipe": recipe})
    return out


def design_rows(changes: Sequence[Any]) -> list[dict[str, str]]:
    """``registry.design()``: every rule or set changed when results that bear on it existed,
    oldest first, as table rows."""
    return [{"date": c.date[:16].replace("T", " "), "commit": f"`{c.commit}`",
             "what changed": c.change, "results seen then": c.seen,
             "registered": c.registered} for c in sorted(changes, key=lambda c: c.date)]


def history_rows(registrations: Sequence[Any]) -> list[dict[str, str]]:
    """Every registration, oldest first, one row per batch registered together (same time and
    note): which runs of which profile, their digests, and what changed from the previous
    registration of the same run and profile."""
    rows: list[dict[str, Any]] = []
    last: dict[tuple[str, str], Any] = {}
    for r in registrations:
        before = last.get((r.profile, r.run))
        if before is None:
            changed = "first registration"
        else:
            keys = sorted(k for k in set(r.recipe) | set(before.recipe)
                          if r.recipe.get(k) != before.recipe.get(k))
            changed = ", ".join(f"{k}: {before.recipe.get(k)!r} -> {r.recipe.get(k)!r}"
                                for k in keys) or "the rules' text or the interval method"
        last[r.profile, r.run] = r
        entry = f"{r.profile} `{r.run}` `{r.digest}`"
        if rows and rows[-1]["_key"] == (r.registered, r.note):
            row = rows[-1]
            row["_ids"].append(r.id)
            row["runs (profile, run, digest)"] += f"; {entry}"
            if changed not in row["_changed"]:
                row["_changed"].append(changed)
        else:
            rows.append({"_key": (r.registered, r.note), "_ids": [r.id], "_changed": [changed],
                         "registered (UTC)": r.registered.replace("T", " "),
                         "runs (profile, run, digest)": entry, "why": r.note})
    out = []
    for row in rows:
        ids = row["_ids"]
        # a non-breaking hyphen (U+2011): "6-10" never wraps at its hyphen
        out.append({"no.": str(ids[0]) if len(ids) == 1 else f"{ids[0]}\u2011{ids[-1]}",
                    "registered (UTC)": row["registered (UTC)"],
                    "runs (profile, run, digest)": row["runs (profile, run, digest)"],
                    "changed": "; ".join(row["_changed"]), "why": row["why"]})
    return out


def coverage_sentence(seed_counts: Sequence[int], n_sim: int = 2000) -> str:
    """The interval method, and its coverage measured now by simulation at each seed count."""
    def normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return np.clip(rng.normal(0.9, 0.03, shape), 0, 1)

    def skewed(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
        return 1 - rng.exponential(0.01, shape)

    parts = []
    for n in sorted(set(seed_counts)):
        if n < 2:
            continue
        parts.append(f"{n} seeds: {coverage(normal, 0.9, n, n_sim):.3f} on normal values, "
                     f"{coverage(skewed, 0.99, n, n_sim):.3f} on skewed ones (1 - exponential, "
                     f"mean 0.99)")
    measured = "; ".join(parts) if parts else "no seed count of two or more in this build"
    return (f"Intervals: {METHOD}. How often such an interval holds the true mean, measured "
            f"now by {n_sim:,} simulated experiments at this build's seed counts: {measured}. "
            f"One seed alone gives the whole range, so no verdict rests on one seed.")


def learned_by_language(records: Sequence[Any], bar: float) -> dict[int, tuple[int, int]]:
    """``{k: (models that learned, models)}`` of the explainability run's records: hard-test
    accuracy at least ``bar`` (the evidence's ``learned_bar``)."""
    out: dict[int, list[int]] = {}
    for r in records:
        k = int(r.config["data"]["k"])
        counts = out.setdefault(k, [0, 0])
        counts[0] += r.accuracy("hard") >= bar
        counts[1] += 1
    return {k: (a, b) for k, (a, b) in sorted(out.items())}


def learned_sentence(explain: Mapping[str, Any],
                     by_language: Mapping[int, tuple[int, int]] | None = None) -> str:
    """How many explainability models the mechanism verdicts pool (those that learned), of
    which languages, and what the others measure, reported apart; where the pooled models'
    "previous symbol" and "most recent opener" shares are equal at every model (as they are
    by definition under Dyck-1), that the attention claim's filter cannot tell them apart."""
    if not explain or "models" not in explain:
        return ""
    text = _learned_text(explain)
    if by_language:
        parts = [f"Dyck-{k}: {a} of {b}" for k, (a, b) in by_language.items()]
        text += f" By language, the models that learned: {'; '.join(parts)}."
        none = [k for k, (a, b) in by_language.items() if b and a == 0]
        if none:
            text += (" So these verdicts say nothing about "
                     + " or ".join(f"Dyck-{k}" for k in none)
                     + ", whose models never reached the bar.")
    prev, recent = explain.get("previous_share") or [], explain.get("recent_share") or []
    if prev and len(prev) == len(recent) and np.allclose(prev, recent):
        text += (" At every pooled model the share of closers whose partner is the previous "
                 "symbol equals the share whose partner is the most recent opener "
                 f"({np.mean(prev):.3f} on average), as it must under Dyck-1, where a closer's "
                 "partner is the most recent opener exactly when it is the previous symbol: the "
                 "attention claim's two baselines coincide there, so its filter removes one kind "
                 "of closer, not two; the uniform head's attention on the partner is shown beside "
                 "it.")
    return text


def _learned_text(explain: Mapping[str, Any]) -> str:
    rest = explain.get("not_learned") or {}
    n_rest = explain["models"] - explain["learned"]
    text = (f"The preview and head verdicts pool the {explain['learned']} of "
            f"{explain['models']} explainability models that learned (hard-test accuracy at "
            f"least {100 * explain['learned_bar']:.0f}%): a model that never learned has nothing "
            f"to explain, and its head-reset drop of about zero would favour `static_head`. The "
            f"attention verdicts read each language's own (`attention_k1`, `attention_k3`): a "
            f"language none of whose models learned is not testable there.")
    if n_rest:
        parts = [f"{name.replace('_', ' ')} {np.mean(v):.3f}" for name, v in rest.items()
                 if name in ("partner_attention", "preview_auc", "head_reset_drop") and v]
        text += f" The other {n_rest}, apart: {', '.join(parts)} (means)."
    return text


def held_out_sentence(judged: Sequence[Verdict]) -> str:
    """Where a held-out choice failed on the very seed it is scored on: which claim, how often
    and at what value, and why that is intended (the choice never sees that seed)."""
    parts = []
    for v in judged:
        for e in v.evidence:
            if not e.chosen or not e.n_failed:
                continue
            worst = int(np.argmin(e.values))
            parts.append(f"`{v.rule.claim}` ({e.name}: {e.n_failed} of {e.n_seeds} seeds, e.g. "
                         f"the seed at position {worst + 1}, whose choice {e.chosen[worst]} "
                         f"scored {e.values[worst]:.3f} there)")
    if not parts:
        return ""
    return ("A held-out choice is made on the other seeds only, so a configuration that is best "
            "on them can fail on the seed it is then scored on, and that seed counts at its "
            "failed value: " + "; ".join(parts) + ". This is intended: choosing with the scored "
            "seed in view would let the choice see the test.")


def moved_sentence(judged: Sequence[Verdict], local: Sequence[Verdict]) -> str:
    """Which verdicts differ between the stack sets and the local (hard) sets."""
    before = {v.rule.claim: v.label for v in local}
    moved = [f"`{v.rule.claim}` ({before[v.rule.claim]} on the local sets, {v.label} on the "
             f"stack sets)" for v in judged if v.rule.claim in before
             and before[v.rule.claim] != v.label]
    if not moved:
        return "Every verdict is the same on the local sets as on the stack sets."
    return f"Verdicts that move with the test set: {'; '.join(moved)}."


def evidence_rows(judged: Sequence[Verdict]) -> list[dict[str, Any]]:
    """One row per seed value of every verdict's evidence, for ``plotting.plot_seeds``:
    ``config`` names the claim, its label and the evidence; ``value`` is the number. A
    reference (a rule's score, a share: one number, no seeds) is left out: it has no interval,
    and the headline figure marks it beside the claim it bears on."""
    return [{"config": f"{v.rule.claim} ({v.label}): {e.name}", "value": x}
            for v in judged for e in v.evidence if not e.reference for x in e.values]


#: the thesis experiment whose Table 5.2 test accuracy a claim's first evidence answers
THESIS_VALUE_OF = {"bidirectional_k1": 1, "causal_k1": 2, "bidirectional_k3": 3,
                   "causal_k3": 4, "lengths_k3": 6}
#: the evidence a claim's main number is compared with (by its name), in order of
#: preference: a rule without a stack on the same strings, the adversary, a counter's floor,
#: the order-blind ceiling
_COMPARATORS = ("strongest stack-free rule", "adversary", "counter floor", "counts floor",
                "order-blind ceiling", "uniform attention")


def headline_rows(judged: Sequence[Verdict]) -> list[dict[str, Any]]:
    """One row per judged claim for ``plotting.plot_headline``: its statement (``title``, up to
    the first parenthesis), label, its first non-reference evidence (``name``, ``mean``,
    ``low``, ``high``, ``n``), the thesis' Table 5.2 value where one answers it (``thesis``,
    :data:`THESIS_VALUE_OF`) and the strongest stack-free rule or floor on the same strings
    (``rule``, ``rule_name``), where the rule reads or shows one."""
    rows = []
    for v in judged:
        main = next((e for e in v.evidence if not e.reference), None)
        if main is None or not main.values:
            continue
        lo, hi = main.interval
        compare = next((e for prefix in _COMPARATORS for e in (*v.evidence, *v.shown)
                        if e is not main and e.name.startswith(prefix)), None)
        exp = THESIS_VALUE_OF.get(v.rule.claim)
        title = v.rule.statement.split(" (")[0].rstrip(".")
        k = v.rule.claim.rsplit("_k", 1)[-1] if v.rule.claim[-3:-1] == "_k" else ""
        title += f" (Dyck-{k})" if k and f"Dyck-{k}" not in title else ""
        rows.append({"claim": v.rule.claim, "title": title,
                     "label": v.label, "name": main.name, "mean": main.mean, "low": lo,
                     "high": hi, "n": main.n_seeds,
                     "thesis": thesis_result(exp).test_acc / 100 if exp else None,
                     "rule": compare.mean if compare is not None else None,
                     "rule_name": compare.name if compare is not None else ""})
    return rows


def verdict_json(judged: Sequence[Verdict], registered: Mapping[str, Any] | None = None
                 ) -> dict[str, Any]:
    """``{claim: {label, digest, evidence: {name: {mean, low, high, values, n_failed}}}}``."""
    out = {}
    for v in judged:
        reg = (registered or {}).get(v.rule.claim)
        out[v.rule.claim] = {"label": v.label, "note": v.note,
                             "digest": reg.digest if reg else None,
                             "evidence": {e.name: {"mean": e.mean, "low": e.interval[0],
                                                   "high": e.interval[1],
                                                   "values": list(e.values),
                                                   "n_failed": e.n_failed}
                                          for e in (*v.evidence, *v.shown)}}
    return out


def missing_sentence(judged: Sequence[Verdict], rules: Sequence[Rule] = RULES) -> str:
    """Which claims have no verdict because their evidence was not run."""
    missing = [r.claim for r in rules if r.claim not in {v.rule.claim for v in judged}]
    if not missing:
        return "Every claim has its evidence in this build."
    return (f"No verdict for {', '.join(missing)}: the runs that measure "
            f"{'it' if len(missing) == 1 else 'them'} are not in this build.")


#: the Dyck chapter's adversary tables (``oracle.json``) of the grid's stack sets, per k
ORACLE_SETS = {1: "Dyck-1 far", 3: "Dyck-3 stack"}


def oracle_levels(folder: str) -> dict[int, float]:
    """``{k: the strongest stack-free rule's pooled accuracy}`` on the grid's stack test
    distribution, each rule fitted on that distribution itself (the Dyck chapter's
    ``oracle.json`` in ``folder``; empty where the chapter has not run)."""
    path = results.resolve(folder) / "oracle.json"
    if not path.is_file():
        return {}
    tables = json.loads(path.read_text(encoding="utf-8"))
    return {k: max(float(row["all"]) for row in tables[name].values())
            for k, name in ORACLE_SETS.items() if name in tables}


def beyond_levels(folder: str) -> dict[str, float]:
    """The beyond-lengths study's adversary level per multiple for Dyck-3 (``{"2×": accuracy}``,
    its ``adversary.json``; empty where the study has not run)."""
    path = results.resolve(folder) / "adversary.json"
    if not path.is_file():
        return {}
    return {m: float(v) for m, v in json.loads(path.read_text(encoding="utf-8"))
            .get("3", {}).get("level", {}).items()}


def beyond_answers(folder: str) -> dict[str, str]:
    """Plain-text values of the study beyond the lengths the landing page quotes (its run's
    ``folder``): ``beyond_holds`` and ``beyond_deep`` (how far each configuration holds on
    the long-range and on the deep set), ``beyond_adversary_1x`` (the adversary's level
    within the lengths) and ``beyond_mechanism`` (:func:`beyond_mechanism`)."""
    records = read_runs(folder)
    return {"beyond_holds": beyond_lengths.holds_sentence(records),
            "beyond_deep": beyond_lengths.holds_sentence(records, on="deep"),
            "beyond_adversary_1x": pct(beyond_levels(folder).get("1×", math.nan)),
            "beyond_mechanism": beyond_mechanism(folder)}


def beyond_mechanism(folder: str) -> str:
    """The beyond-lengths study's mechanism check in one line (its ``mechanism.json``, written
    by :func:`dyckbook.chapters.beyond_lengths.mechanism_brief`); "not measured yet" where the
    study has not run."""
    path = results.resolve(folder) / "mechanism.json"
    if not path.is_file():
        return "not measured yet"
    return str(json.loads(path.read_text(encoding="utf-8"))["brief"])


def answer_values(judged: Sequence[Verdict], evidence: Mapping[str, Evidence],
                  rules: Sequence[Rule] = RULES) -> dict[str, str]:
    """Plain-text values the landing page quotes from this chapter (``{glue:text}`` across
    documents): ``verdict_<claim>`` for every rule (its label, or "not judged yet" where its
    run has not been published or its evidence is missing) and ``evidence_<name>`` for every
    piece of evidence a rule reads or shows (mean [95% interval], or a reference's value; "not
    measured yet" where missing)."""
    labels = {v.rule.claim: v.label for v in judged}
    out = {f"verdict_{r.claim}": labels.get(r.claim, "not judged yet") for r in rules}
    for name in dict.fromkeys(n for r in rules for n in (*r.needs, *r.shows)):
        e = evidence.get(name)
        if e is None or not e.values:
            out[f"evidence_{name}"] = "not measured yet"
        elif e.reference:
            out[f"evidence_{name}"] = f"{e.mean:.3f}"
        else:
            lo, hi = e.interval
            out[f"evidence_{name}"] = (f"{e.mean:.3f} [{lo:.3f}, {hi:.3f}] over {e.n_seeds} "
                                       f"{'seed' if e.n_seeds == 1 else 'seeds'}")
    return out


def ceilings(experiments: Sequence[Any]) -> dict[int, float]:
    """``{k: order-blind ceiling}`` of the hard test set of the first seed of the thesis'
    bidirectional reruns (exp. 1: Dyck-1, exp. 3: Dyck-3), regenerated from its config."""
    out = {}
    for k, e in ((1, 1), (3, 3)):
        group = [r for r in experiments if r.label.startswith(f"exp. {e}: bidirectional")]
        if not group:
            continue
        first = min(group, key=lambda r: int(r.config["seed"]))
        config = RunConfig.from_dict(first.config)
        test = make_splits(config.data, config.seed).tests["hard"]
        value = order_blind_ceiling(test.codes, test.lengths, test.labels)
        if math.isfinite(value):
            out[k] = value
    return out


def permutation_check(n_strings: int, seed: int = 0) -> str:
    """The proof, numerically: logits of bidirectional no-PE models (each readout, untrained,
    since the argument holds for all weights) on strings and rearrangements of them."""
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
