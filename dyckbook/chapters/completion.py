"""The completion chapter's configurations, tables and sentences (notebooks 10 and 90).

Three families of runs, one
:class:`~dyckbook.experiment.run.RunConfig` each per label: ``main`` (the
seed's encoder–decoder with each source encoding and the decoder-only model, on Dyck-k suffix
completion), ``lengths`` (the decoder-only model with positions that can generalise, tested on
longer prefixes) and ``bbh`` (both architectures trained on BIG-Bench Hard's regime and lengths,
scored on its 250 real items, on the original BIG-bench task's 1,000, and on any BIG-bench Dyck
file a user names).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from itertools import permutations
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from dyckbook.chapters.page import accuracy_text, failed_text, mean_interval, pct
from dyckbook.data.completion import (
    check_items,
    close_by_counts,
    open_positions,
    order_blind_best,
    order_blind_expected,
    to_items,
)
from dyckbook.data.config import is_int
from dyckbook.experiment.evaluate import pool
from dyckbook.experiment.results import read_bigbench, resolve, source_root
from dyckbook.experiment.run import RunConfig, config_fields
from dyckbook.experiment.train import first_reach
from dyckbook.nn.seq2seq import CompletionTask, greedy_decode, source_tokens

__all__ = ["BBH_PUBLISHED", "agreement_sentence", "bbh_configs", "bbh_reference_rows",
           "bbh_rows", "bigbench_paths", "bigbench_rows", "chapter_configs", "completion_rows",
           "completion_sentence", "item_sets", "merged_lengths", "missed_rows", "partner_rows",
           "steps_to_target"]

#: code-davinci-002 on BBH ``dyck_languages`` (Suzgun et al. 2022, Table 2): answer-only, CoT
BBH_PUBLISHED = {"code-davinci-002, answer only (published)": 0.468,
                 "code-davinci-002, chain of thought (published)": 0.568}
UNTRAINED = "untrained positions"
#: the notebook's parameters that bbh_configs reads beside the recipe's fields
_BBH_PARAMS = ("ks", "pos_encodings", "bbh_min_length", "bbh_max_length", "decoder_only_norm",
               "decoder_only_max_steps", "bbh_max_steps")


def chapter_configs(params: Mapping[str, Any], ks: str, pos_encodings: str,
                    length_encodings: str = "", length_test_max_length: int | None = None,
                    bbh_lengths: tuple[int, int] | None = None,
                    decoder_only: Mapping[str, Any] | None = None,
                    bbh_n_ctx: int = 0,
                    budgets: Mapping[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """``{"main" | "lengths" | "bbh": {label: RunConfig}}`` of the chapter.

    Args:
        params: the notebook's flat fields (``run.config_fields``): the encoder–decoder's recipe.
        ks: Dyck-k of the main runs, e.g. ``"3"`` or ``"1,3"``.
        pos_encodings: the encoder–decoder's source encodings (``none`` is the seed's); the
            decoder-only model beside it reads learned positions.
        length_encodings: the decoder-only model's positions in the length study (Dyck-k of the
            last of ``ks``); empty: no study.
        length_test_max_length: the study's longest test prefix (its n_ctx).
        bbh_lengths: ``(shortest, longest)`` training prefix of the BBH runs (Dyck-4, 1-3 final
            closers removed), or None: none.
        bbh_n_ctx: the longest prefix the BBH models must accept (the real items' longest);
            they accept at least their own test lengths (longest + 1 .. longest + 21).
        decoder_only: the decoder-only model's own training and model fields (its recipe, e.g.
            ``{"norm": "pre", "max_steps": 4000}``); its blocks are the encoder's and decoder's
            together.
    """
    base = RunConfig.from_flat(params, model="seq2seq")
    layers = base.model.n_encoder_layers + base.model.n_decoder_layers
    own = {"arch": "decoder_only", "n_encoder_layers": 0, "n_decoder_layers": layers,
           **(decoder_only or {})}
    out: dict[str, dict[str, Any]] = {"main": {}, "lengths": {}, "bbh": {}}
    budgets = {family: steps for family, steps in (budgets or {}).items() if steps}
    unknown = sorted(set(budgets) - {"lengths", "bbh"})
    if unknown:
        raise ValueError(f"budgets: {unknown[0]!r} is not 'lengths' or 'bbh'")
    k_list = [int(x) for x in str(ks).split(",")]
    for k in k_list:
        mine = base.override(k=k, regime="suffix")
        for pe in str(pos_encodings).split(","):
            out["main"][f"Dyck-{k}, encoder-decoder, {pe.strip()}"] = mine.override(
                pos_encoding=pe.strip())
        out["main"][f"Dyck-{k}, decoder-only, learned"] = mine.override(
            **own, pos_encoding="learned")
    study = [pe.strip() for pe in str(length_encodings).split(",") if pe.strip()]
    if study:
        longest = length_test_max_length or base.data.test_max_length
        mine = base.override(k=k_list[-1], regime="suffix", test_max_length=longest,
                             n_ctx=longest)
        steps = {"max_steps": budgets["lengths"]} if "lengths" in budgets else {}
        for pe in study:
            out["lengths"][f"Dyck-{k_list[-1]}, decoder-only, {pe}"] = mine.override(
                **{**own, **steps}, pos_encoding=pe)
    if bbh_lengths is not None:
        lo, hi = bbh_lengths
        if not (is_int(lo) and is_int(hi) and 2 <= lo < hi):
            raise ValueError(f"bbh_lengths: the shortest training prefix must be at least 2 and "
                             f"below the longest, got {tuple(bbh_lengths)}")
        mine = base.override(k=4, regime="bbh", min_length=lo, max_length=hi,
                             test_min_length=hi + 1, test_max_length=hi + 21,
                             n_ctx=max(hi + 21, bbh_n_ctx))
        steps = {"max_steps": budgets["bbh"]} if "bbh" in budgets else {}
        out["bbh"]["BBH Dyck-4, encoder-decoder, learned"] = mine.override(
            pos_encoding="learned", **steps)
        out["bbh"]["BBH Dyck-4, decoder-only, learned"] = mine.override(
            **{**own, **steps}, pos_encoding="learned")
    return out


def bbh_configs(params: Mapping[str, Any], items: Sequence[tuple[str, str]],
                source: str = "the items") -> dict[str, RunConfig]:
    """``{label: RunConfig}``: the chapter's BIG-Bench Hard models, as its notebook builds them
    from its resolved parameters ``params`` (a profile's ``completion`` run: every field of the
    recipe, the training lengths ``bbh_min_length``-``bbh_max_length`` included), each accepting
    the longest prefix of ``items`` too. The models are the chapter's whatever the items'
    lengths: a file of short prefixes is scored by the models the chapter trained.

    A ValueError names ``source`` (the file the items came from) if there is no item or the
    parameters train no BBH model (``bbh`` false).
    """
    items = check_items(items)
    if not items:
        raise ValueError(f"{source}: no items to score")
    if params.get("bbh") is False:
        raise ValueError(f"{source}: the parameters train no BIG-Bench Hard model (bbh=False)")
    missing = [name for name in _BBH_PARAMS if name not in params]
    if missing:
        raise ValueError(f"params: {missing} missing (pass the chapter's resolved parameters: "
                         f"resolve_profile(load_manifest(), profile), run 'completion')")
    longest = max(len(prefix) for prefix, _ in items)
    return chapter_configs(
        config_fields(params), params["ks"], params["pos_encodings"],
        bbh_lengths=(params["bbh_min_length"], params["bbh_max_length"]),
        decoder_only={"norm": params["decoder_only_norm"],
                      "max_steps": params["decoder_only_max_steps"]},
        bbh_n_ctx=longest, budgets={"bbh": params["bbh_max_steps"]})["bbh"]


def step_of_target(record: Any, target: float = 0.99) -> int | None:
    """The step at which a record's validation exact match reached ``target`` (the mean of its
    last ``target_window`` validations): its ``stopped_at`` where it stopped there, else read
    off its history (a run trained to the end of its schedule), or None."""
    if record.stopped_at is not None:
        return record.stopped_at
    history = [h for h in record.history if "val_accuracy" in h]
    window = int(record.config.get("train", {}).get("target_window", 3))
    at = first_reach([h["val_accuracy"] for h in history], target, window)
    return None if at is None else int(history[at]["step"])


def steps_to_target(groups: Mapping[str, Sequence[Any]]) -> dict[str, str]:
    """Per label: the median step at which a seed's validation exact match reached 99%
    (``n of m seeds``, :func:`step_of_target`)."""
    out = {}
    for label, group in groups.items():
        steps = [s for s in map(step_of_target, group) if s is not None]
        seeds = f"{len(group)} seed{'s' * (len(group) != 1)}"
        out[label] = (f"{int(statistics.median(steps)):,} ({len(steps)} of {seeds})"
                      if steps else f"not reached ({seeds})")
    return out


def _untrained(label: str) -> bool:
    return label.endswith(", learned")


def completion_rows(rows: Mapping[str, Sequence[Mapping[str, Any]]],
                    steps: Mapping[str, str] | None = None,
                    norms: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One display row per configuration: its LayerNorm placement where ``norms`` gives it
    (``pre`` | ``post``), exact match in and out of distribution (a learned table's rows past
    the training lengths never trained: shown as such, not as a length result), seeds at
    >= 99%, and the steps to the target where ``steps`` gives them."""
    out = []
    for ind, ood in zip(rows["in_distribution"], rows["ood"]):
        row = {"configuration": ind["label"]}
        if norms is not None:
            row["LayerNorm"] = f"{norms[ind['label']]}-LN"
        row |= {"seeds": f"{ind['seeds']}{failed_text(ind)}",
                "exact match, training lengths": accuracy_text(ind),
                "seeds >= 99%": f"{ind['solved']}/{ind['seeds']}",
                "exact match, longer prefixes": (
                    f"{UNTRAINED} ({accuracy_text(ood)})" if _untrained(ind["label"])
                    else accuracy_text(ood))}
        if steps is not None:
            row["steps to 99% validation (median)"] = steps.get(ind["label"], "")
        out.append(row)
    return out


def completion_sentence(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per k: what the seed's model (no positions) reaches, and the best configuration."""
    out = []
    for k in sorted({r["label"].split(",")[0] for r in rows}):
        group = [r for r in rows if r["label"].startswith(f"{k},")]
        seed = next((r for r in group if r["label"].endswith("encoder-decoder, none")), None)
        best = max(group, key=lambda r: r["accuracy"] if math.isfinite(r["accuracy"]) else -1)
        text = f"{k}: best {best['label'].split(', ', 1)[1]}, {accuracy_text(best)} exact match"
        if seed is not None:
            text += f"; the seed's model without positions {accuracy_text(seed)}"
        out.append(f"- {text}.")
    return "\n".join(out)


def agreement_sentence(agreement: Mapping[str, float]) -> str:
    """The numerical check of the order-blindness proof, in words."""
    parts = [f"{label}: {pct(share)} of completions unchanged" for label, share in
             agreement.items()]
    return ("Shuffling the symbols of every in-distribution test prefix, the models without "
            f"positional encoding give: {'; '.join(parts) or 'no such model ran'}.")


def partner_rows(measures: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Cross-attention of the best head on the opener being closed, by the opener's depth."""
    cross = measures.get("cross_attention")
    if not cross:
        return []
    layer, head = cross["best"]
    return [{"depth of the opener": depth, "closers": n, f"share (layer {layer}, head {head})":
             f"{share:.2f}"} for depth, (n, share) in sorted(cross["by_depth"].items(),
                                                            key=lambda kv: int(kv[0]))]


def merged_lengths(groups: Mapping[str, Sequence[Any]], by: str = "length",
                   tests: Sequence[str] | None = None) -> dict[str, dict[int, list[int]]]:
    """Per configuration: exact match by prefix length (``by="depth"``: by completion length,
    i.e. the prefix's unmatched openers), the ``tests`` (default all) and every seed pooled."""
    out = {}
    for label, group in groups.items():
        scores = [s for r in group for name, s in r.scores.items()
                  if tests is None or name in tests]
        table = pool(scores)
        out[label] = table.per_length if by == "length" else table.per_depth
    return out


def bbh_rows(scores: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """One row per model trained for BBH: exact match on the real items, mean over seeds with
    its 95% interval, every seed's share, and how many items every seed / some seed misses.

    Args:
        scores: ``{label: [completion_scores.ItemScores per seed]}``, all on the same items.
    """
    out = []
    for label, seeds in scores.items():
        accuracy = [s.accuracy for s in seeds]
        missed = [set(s.missed) for s in seeds]
        out.append({"model": label, "seeds": len(seeds),
                    "exact match (mean, 95% interval over seeds)": mean_interval(accuracy),
                    "each seed": ", ".join(f"{s.score.correct}/{s.score.n}" for s in seeds),
                    "items missed by every seed": len(set.intersection(*missed)) if missed else 0,
                    "by some seed": len(set.union(*missed)) if missed else 0})
    return out


def bigbench_paths(files: str) -> list[Path]:
    """The files of ``files``, comma-separated paths (relative ones to the repository; empty:
    none); a ValueError names one that is not a file."""
    if not isinstance(files, str):
        raise ValueError(f"files must be a str of comma-separated paths, got {files!r}")
    out = []
    for text in (p.strip() for p in files.split(",")):
        path = resolve(text, source_root()) if text else None
        if path is not None and not path.is_file():
            raise ValueError(f"{text!r} is not a file ({path})")
        out += [path] if path is not None else []
    return out


def item_sets(bbh: Sequence[tuple[str, str]], original: Sequence[tuple[str, str]],
              files: str = "") -> dict[str, list[tuple[str, str]]]:
    """The BIG-bench Dyck items the chapter scores, by name: BIG-Bench Hard's, the original
    BIG-bench task's, the original items BBH left out, and each file of ``files``
    (:func:`bigbench_paths`: BIG-bench or BBH ``dyck_languages`` files, each named by the
    path given; errors name the path)."""
    taken = set(bbh)
    out = {"BIG-Bench Hard": list(bbh), "BIG-bench, every item": list(original),
           "BIG-bench, the items BBH left out": [i for i in original if i not in taken]}
    names = [p.strip() for p in files.split(",") if p.strip()] if isinstance(files, str) else []
    for name, path in zip(names, bigbench_paths(files)):
        out[name] = to_items(read_bigbench(path))
    return out


def bigbench_rows(scores: Mapping[str, Mapping[str, Sequence[Any]]]) -> list[dict[str, Any]]:
    """:func:`bbh_rows` for each set of items, led by the set's name and size.

    Args:
        scores: ``{set name: {label: [completion_scores.ItemScores per seed]}}``.
    """
    return [{"items": f"{name} ({next(iter(by_label.values()))[0].score.n:,})", **row}
            for name, by_label in scores.items() if by_label for row in bbh_rows(by_label)]


def bbh_reference_rows(items: Sequence[tuple[str, str]],
                       published: bool = True) -> list[dict[str, Any]]:
    """The published LLM scores on BBH (unless ``published`` is False: other items) and the
    order-blind references, computed on ``items``."""
    closers = ")]}>"
    fixed = {order: sum(close_by_counts(p, "".join(order)) == t for p, t in items) / len(items)
             for order in permutations(closers)}
    best_order = max(fixed, key=fixed.get)
    rows = [(label, pct(value), "published") for label, value in BBH_PUBLISHED.items()
            if published]
    rows += [("order-blind: the unmatched closers in a random order (expected)",
              pct(order_blind_expected(items)), "computed on these items"),
             (f"order-blind: the unmatched closers in the best fixed order ({''.join(best_order)})",
              pct(fixed[best_order]), "computed on these items"),
             ("order-blind, fitted to these items (the most frequent target per symbol count; "
              "memorises where counts are unique: an upper bound, no rule)",
              pct(order_blind_best(items)), "computed on these items")]
    return [{"reference": name, "exact match": value, "source": source}
            for name, value, source in rows]


def missed_rows(scores: Mapping[str, Sequence[Any]], items: Sequence[tuple[str, str]],
                limit: int = 12) -> list[dict[str, Any]]:
    """The items some seed of some model misses (up to ``limit``, longest first): prefix length,
    target, and each model's seeds' answers where wrong."""
    wrong: dict[int, dict[str, list[str]]] = {}
    for label, seeds in scores.items():
        for s in seeds:
            for i in s.missed:
                wrong.setdefault(i, {}).setdefault(label, []).append(s.predictions[i] or "∅")
    order = sorted(wrong, key=lambda i: -len(items[i][0]))[:limit]
    return [{"item": i, "prefix length": len(items[i][0]), "target": items[i][1],
             "wrong answers": "; ".join(f"{label.rsplit(', ', 2)[-2]}: {', '.join(answers)}"
                                        for label, answers in wrong[i].items())}
            for i in order]


def permutation_agreement(model: nn.Module, data: Any, seed: int = 0) -> float:
    """Share of completion prefixes whose greedy completion is unchanged when the prefix's
    symbols are shuffled (a model blind to order keeps every one)."""
    rng = np.random.default_rng(seed)
    shuffled = data.codes.copy()
    for i, n in enumerate(data.lengths):
        shuffled[i, :n] = rng.permutation(shuffled[i, :n])
    width = int(data.lengths.max())
    a, b = (greedy_decode(model, source_tokens(c, data.lengths, width), width + 1)
            for c in (data.codes, shuffled))
    steps = max(a.shape[1], b.shape[1])
    a, b = (torch.nn.functional.pad(x, (0, steps - x.shape[1])) for x in (a, b))
    return float((a == b).all(-1).float().mean())


def cross_attention_example(model: nn.Module, data: Any, row: int
                            ) -> tuple[np.ndarray, str, str, list[int]]:
    """``(patterns (layer, head, step, source), prefix, output, partners)`` of one completion
    prefix: the cross-attention of the teacher-forced completion, the prefix, the target with
    ``$`` for ``<eos>``, and the prefix position of the opener each output closes (-1: none)."""
    one = data.subset([row])
    task = CompletionTask()
    batch = task.batch(task.tensors(one, int(one.lengths[0])), torch.arange(1)[None])
    with torch.inference_mode():
        _, cache = model.run_with_cache(batch["source"][0], batch["target"][0],
                                        lambda name: "cross_attn.hook_pattern" in name)
    patterns = np.stack([cache[f"blocks.{i}.cross_attn.hook_pattern"][0].numpy()
                         for i in range(len(cache))])
    codes, lengths = one.targets()
    target = one.language.alphabet.decode(codes, lengths)[0]
    partners = open_positions(one.language, one.codes, one.lengths)[0, :len(target)].tolist()
    return patterns, one.strings()[0], target + "$", partners + [-1]
