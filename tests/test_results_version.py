"""Staleness that cannot be fooled (issue 51): a published run is up to date while its recipe,
notebook, inputs and ``version.RESULTS_VERSION`` are unchanged, and no longer needs the
package version. What keeps that honest is this test: small fixed computations through every
path that makes a number, compared number by number with ``tests/golden_run.json``, one
section each:

``sampling``      exactly uniform words of Dyck-1, Dyck-3 and Dyck-(3, 3) at a few lengths
                  (fixed seeds), and the counts of words
``negatives``     every kind of ``negatives.NEGATIVE_KINDS`` (a new kind joins by itself) on
                  every language of a small set that it applies to: where it is available and
                  a fixed-seed draw, hard kinds with and without the window, long-range kinds
                  with their matched members and minimal pairs; the ``hard`` mixture
``datasets``      the protocol's sets beyond the classifier's: Dyck-1 with every test regime
                  (its ``stack`` set holds the ``far`` kind) and a validation set; a depth-bound
                  Dyck-3 with test lengths and depth of their own and ``local`` training negatives
``classifier``    one tiny Transformer run through ``run.run`` (data with hard, local, random
                  and stack test sets and a validation set, training, scoring, the stack-free
                  rules and the adversary beside it): data hashes, sizes, kinds, the training
                  loss, validation and test accuracies, margins, every rule's accuracy, the
                  hardness bins, the order-blind ceiling
``variants``      the same data and training, one option of the model or the training changed
                  at a time (every positional encoding, mask, readout, norm, activation,
                  objective, attention, schedule; bucketing, weight decay): loss and margins
``adversary``     ``adversary.attack_regime`` (every rule of ``baselines`` and ``adversary``,
                  fitted on one sample, scored on another) on the long-range sets of Dyck-1
                  (``far``) and Dyck-2 (``stack``), and ``baselines.attack_regime`` on Dyck-3's
                  hard sets
``completion``    ``completion.make_completion_splits`` (both regimes), an encoder–decoder
                  and a decoder-only model trained through ``run.run``: loss, validation,
                  exact match and per-position token accuracy, the cross-attention shares,
                  ``completion_scores.score_items``, and the chapter's order-blind references
``recurrent``     the LSTM and the stack RNN (``RecurrentConfig``) trained through ``run.run``
                  on the classifier's data: loss, accuracies, margins
``thesis``        a literal thesis experiment (its generator, split and ported model) trained
                  through ``run.run``, both generators of ``thesis.thesis_samples`` and the
                  thesis' permutation

A change that moves any of those numbers without bumping ``RESULTS_VERSION`` fails here,
naming the section; a refactor that moves none passes, and hours of published results stay
up to date. The tests at the end show that the check has power: one training constant (Adam's
betas), one constant of the negatives (the long-range windows' floor) and one of a rule
(``ends``' span) changed each move numbers beyond the tolerances.

After a deliberate change of numbers: bump ``RESULTS_VERSION``, then
``python tests/test_results_version.py --write`` rewrites the golden record.

Floating-point paths differ between CPUs (Intel and AMD, the C kernels and torch's): losses,
margins and other model floats are compared to 1e-3 (a change of recipe or training constant
moves them by far more, as the tests that change one show); the data (strings, their hashes,
sizes, counts) exactly; accuracies of the models and of each rule to one string in a hundred
(a string on a boundary may flip), those of rules trained with torch to 0.05.

Library modules are reached through the package face only (``from dyckbook import run``), so
that the test survives a move of modules into subpackages.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

GOLDEN = Path(__file__).with_name("golden_run.json")
FLOAT_TOL, RULE_TOL = 1e-3, 0.01
LEARNED_TOL = 0.05  # rules trained with torch (MLP, CNNs): BLAS paths differ between CPUs
LEARNED = {"height_mlp", "cnn", "cnn_dilated"}
#: keys whose values are accuracies (compared to RULE_TOL, as a string may flip)
ACCURACIES = {"accuracy", "train_accuracy", "val_accuracy", "exact_match", "token_accuracy",
              "items", "rules", "baseline_train", "attack"}
SEED = 3
_MAX_MESSAGES = 12  # per section


def _digest(items: Any) -> str:
    """16 hex digits of sha256 over the items' text, one a line."""
    return hashlib.sha256("\n".join(map(str, items)).encode()).hexdigest()[:16]


def _hashes(dataset: Any) -> list[int]:
    return [int(h) for h in np.sort(dataset.hashes())]


def _set_summary(dataset: Any) -> dict[str, Any]:
    """A data set exactly: its summary (sizes, members, distinct, lengths, kinds) and the digest
    of its sorted string hashes."""
    return {**json.loads(json.dumps(dataset.summary())), "digest": _digest(_hashes(dataset))}


def _floats(values: Any, n: int | None = None) -> list[float]:
    return [round(float(v), 6) for v in list(values)[:n]]


def _losses(record: Any) -> dict[str, list[float]]:
    out = {"loss": _floats(h["train_loss"] for h in record.history)}
    if any("val_accuracy" in h for h in record.history):
        out["val_accuracy"] = _floats(h["val_accuracy"] for h in record.history)
    return out


@contextlib.contextmanager
def _no_disk_caches() -> Iterator[None]:
    """Everything is computed here, never read from a data or run cache folder."""
    from dyckbook import cache

    saved = {name: os.environ.pop(name, None) for name in (cache.DATA_ENV, cache.RUN_ENV)}
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is not None:
                os.environ[name] = value


def clear_caches() -> None:
    """Empty every in-memory cache of the modules that make the numbers (the splits, the
    rules' fits, the negatives' availability probes...), whatever the functions are named:
    those of each module reached through the package face and of the modules that define
    what it holds."""
    from dyckbook import (
        adversary,
        baselines,
        cache,
        checkpoint,
        completion,
        languages,
        negatives,
        protocol,
        recurrent,
        seq2seq,
        train,
    )
    from dyckbook import run as run_module

    modules = {}
    for module in (run_module, negatives, languages, cache, protocol, baselines, adversary,
                   completion, seq2seq, recurrent, train, checkpoint):
        modules[module.__name__] = module
        for value in vars(module).values():
            name = getattr(value, "__module__", None)
            if callable(value) and isinstance(name, str) and name.startswith("dyckbook"):
                modules.setdefault(name, sys.modules.get(name))
    for module in modules.values():
        for value in vars(module).values() if module is not None else ():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def _home(fn: Callable) -> Any:
    """The module that defines ``fn``: where the constants it reads live (even if the package
    face re-exports it from elsewhere), so that a monkeypatched one is the one read."""
    return sys.modules[fn.__module__]


# ------------------------------------------------------------------------------ configurations
def golden_config():
    import dyckbook

    data = dyckbook.DataConfig(k=2, min_length=2, max_length=32, n_train=400, n_val=100,
                               n_test=200, test_sets=("hard", "local", "random", "stack"))
    model = dyckbook.ModelConfig(k=2, n_ctx=32, d_model=16, n_heads=2, d_mlp=32, n_layers=1,
                                 mask="causal", readout="end", pos_encoding="learned",
                                 dropout=0.1)
    return dyckbook.RunConfig(data=data, model=model, seed=SEED,
                              train=dyckbook.TrainConfig(max_steps=40, lr=3e-3, batch_size=16,
                                                         warmup_steps=5, schedule="cosine",
                                                         grad_clip=1.0, eval_every=10))


def variant_configs() -> dict[str, Any]:
    """The golden classifier with one option changed, for every value its config allows
    (a new positional encoding, mask, ... joins by itself); trained 20 steps, no rules."""
    from dyckbook import blocks, model, options, train

    base = golden_config()
    base = dataclasses.replace(base, baselines=(),
                               train=dataclasses.replace(base.train, max_steps=20))
    choices = {"pos_encoding": options.POS_ENCODINGS, "mask": model.MASKS,
               "readout": model.READOUTS, "norm": blocks.NORMS, "act_fn": blocks.ACTIVATIONS,
               "objective": model.OBJECTIVES, "attention": blocks.ATTENTION_WEIGHTS,
               "schedule": train.SCHEDULES, "bucket": (True,), "weight_decay": (0.01,)}
    out = {}
    for name, values in choices.items():
        for value in values:
            part = base.train if name in {f.name for f in dataclasses.fields(base.train)} \
                else base.model
            if getattr(part, name) == value:
                continue
            out[f"{name}={value}"] = base.override(**{name: value})
    return out


def recurrent_configs() -> dict[str, Any]:
    import dyckbook
    from dyckbook import recurrent

    base = golden_config()
    return {cell: dyckbook.RunConfig(base.data, recurrent.RecurrentConfig(
        k=2, n_ctx=32, cell=cell, d_hidden=16, d_embed=8, d_stack=4), base.train, SEED,
        baselines=()) for cell in recurrent.CELLS}


def completion_data():
    from dyckbook import completion

    return completion.CompletionDataConfig(k=3, min_length=4, max_length=16, test_min_length=18,
                                           test_max_length=24, n_train=400, n_val=100,
                                           n_test=100)


def completion_configs() -> dict[str, Any]:
    import dyckbook
    from dyckbook import seq2seq

    trained = dyckbook.TrainConfig(max_steps=40, lr=3e-3, batch_size=16, warmup_steps=5,
                                   schedule="cosine", grad_clip=1.0, eval_every=10)
    return {arch: dyckbook.RunConfig(completion_data(), seq2seq.Seq2SeqConfig(
        arch=arch, k=3, n_ctx=24, n_encoder_layers=int(arch == "encoder_decoder"),
        n_decoder_layers=1, d_model=16, n_heads=2, d_mlp=32, dropout=0.1), trained, SEED,
        baselines=()) for arch in seq2seq.ARCHS}


def thesis_run_config():
    from dyckbook import run as run_module

    config = run_module.thesis_config(3, literal=True, seed=0, n_train=300, n_test=100,
                                      d_model=16, d_mlp=32, n_layers=1, epochs=2, batch_size=16)
    return dataclasses.replace(config, baselines=("first_symbol", "counts", "window4"))


def dataset_configs() -> dict[str, Any]:
    import dyckbook
    from dyckbook import protocol

    return {"dyck1": dyckbook.DataConfig(k=1, min_length=2, max_length=34, n_train=200,
                                         n_val=100, n_test=100, test_sets=protocol.REGIMES),
            "dyck3_depth": dyckbook.DataConfig(k=3, max_depth=4, min_length=4, max_length=20,
                                               test_min_length=22, test_max_length=30,
                                               test_max_depth=6, n_train=200, n_val=60,
                                               n_test=100, train_negatives="local")}


def configs() -> dict[str, Any]:
    """Every run's configuration, as the golden record keeps them (for the reader)."""
    return {"classifier": golden_config().to_dict(),
            "variants": sorted(variant_configs()),
            "recurrent": {k: c.to_dict() for k, c in recurrent_configs().items()},
            "completion": {k: c.to_dict() for k, c in completion_configs().items()},
            "thesis": thesis_run_config().to_dict(),
            "datasets": {k: c.to_dict() for k, c in dataset_configs().items()}}


def _run(config: Any) -> Any:
    from dyckbook import run as run_module

    return run_module.run(config)


# ------------------------------------------------------------------------------ the sections
def sampling_numbers() -> dict[str, Any]:
    """Uniform words: the first word and a digest of 8 words per length (fixed seed), a batch
    of mixed lengths, and the counts of words."""
    from dyckbook import languages

    out = {}
    for language in (languages.Dyck(1), languages.Dyck(3), languages.Dyck(3, max_depth=3)):
        rng = np.random.default_rng([SEED, language.k, language.max_depth or 0])
        words = {}
        for length in (0, 2, 8, 16, 30, 64, 130):
            strings = language.sample(rng, [length] * 8)
            words[str(length)] = {"first": strings[0], "digest": _digest(strings)}
        mixed = language.sample(rng, [10, 4, 30, 0, 18, 4, 66])
        out[language.name] = {
            "words": words, "mixed": mixed,
            "count": {str(n): str(language.count(n)) for n in (10, 40)},
            "log_count": round(language.log_count(200), 6)}
    return out


def _languages() -> list[Any]:
    from dyckbook import languages

    return [languages.Dyck(1), languages.Dyck(2), languages.Dyck(3),
            languages.Dyck(3, max_depth=3)]


def _applies(kind: Any, language: Any) -> bool:
    return (language.k >= kind.min_k and (kind.max_k is None or language.k <= kind.max_k)
            and (language.max_depth is None or language.max_depth >= kind.min_depth))


def negatives_numbers() -> dict[str, Any]:
    """Every negative kind on every language it applies to: the lengths where it is available
    and a fixed-seed draw there (hard kinds in the non-local regime, window 4, and the local
    one; long-range kinds with matched members and minimal pairs), and the ``hard`` mixture."""
    from dyckbook import negatives

    short, long = (4, 6, 8, 12, 20, 32), (28, 30, 34, 40)
    out: dict[str, Any] = {}
    for index, (name, kind) in enumerate(negatives.NEGATIVE_KINDS.items()):
        entry = {}
        for language in _languages():
            if not _applies(kind, language):
                continue
            windows = (None,) if kind.long_range or not kind.hard \
                else (negatives.DEFAULT_WINDOW, None)
            for window in windows:
                rng = np.random.default_rng([SEED, index, language.k, language.max_depth or 0,
                                             window or 0])
                lengths = [n for n in (long if kind.long_range else short)
                           if negatives.available_kinds(language, n, name, window)]
                here: dict[str, Any] = {"available": lengths}
                if lengths:
                    decode = language.alphabet.decode
                    codes, got, kinds = negatives.sample_negatives(
                        language, rng, np.repeat(lengths, 3), name, window)
                    strings = decode(codes, got)
                    here.update(first=strings[0], digest=_digest(strings),
                                kinds=sorted(set(kinds.tolist())))
                    if kind.long_range:
                        codes, got = negatives.sample_matched_members(language, rng, lengths,
                                                                      name)
                        here["matched_members"] = _digest(decode(codes, got))
                        members, others, got = negatives.sample_minimal_pairs(language, rng,
                                                                              lengths, name)
                        here["minimal_pairs"] = _digest(decode(members, got)
                                                        + decode(others, got))
                entry[f"{language.name} window={window}"] = here
        out[name] = entry
    mixture = {}
    for language in _languages():
        rng = np.random.default_rng([SEED, language.k, language.max_depth or 0])
        codes, got, kinds = negatives.sample_negatives(language, rng, [12, 16, 20] * 4, "hard")
        mixture[language.name] = {"digest": _digest(language.alphabet.decode(codes, got)),
                                  "kinds": kinds.tolist()}
    out["hard mixture"] = mixture
    out["long_range_window"] = {str(n): negatives.long_range_window(n) for n in (10, 30, 50)}
    return out


def datasets_numbers() -> dict[str, Any]:
    """The protocol's splits of two more data configs, every set exactly."""
    from dyckbook import cache

    out = {}
    for label, data in dataset_configs().items():
        splits = cache.make_splits(data, SEED)
        sets = {"train": splits.train, "val": splits.val, **splits.tests}
        out[label] = {name: _set_summary(ds) for name, ds in sets.items()}
    return out


def classifier_numbers() -> dict[str, Any]:
    """The golden run's numbers: what the data are, what training did, what the model and the
    rules score."""
    from dyckbook import baselines, evaluate

    result = _run(golden_config())
    record, splits = result.record, result.splits
    sets = [("train", splits.train), ("val", splits.val), *splits.tests.items()]
    return {"data": {name: _hashes(ds)[:50] for name, ds in sets},
            "sizes": {name: len(ds) for name, ds in sets},
            "kinds": {name: ds.kind_counts() for name, ds in sets},
            **_losses(record), "train_accuracy": round(record.train_accuracy, 6),
            "accuracy": {name: round(s.accuracy, 6) for name, s in record.scores.items()},
            "bins": {name: {b: nc[0] for b, nc in s.per_bin.items()}
                     for name, s in record.scores.items()},
            "margins": {name: _floats(evaluate.margins(result.model, ds), 40)
                        for name, ds in splits.tests.items()},
            "rules": {name: {rule: round(s.accuracy, 4) for rule, s in rules.items()}
                      for name, rules in record.baselines.items()},
            "baseline_train": {rule: round(a, 4) for rule, a in record.baseline_train.items()},
            "order_blind": {name: round(baselines.order_blind_ceiling(ds.codes, ds.lengths,
                                                                      ds.labels), 6)
                            for name, ds in splits.tests.items()}}


def variants_numbers() -> dict[str, Any]:
    """Loss and margins of every variant of the golden classifier."""
    from dyckbook import evaluate

    out = {}
    for label, config in variant_configs().items():
        result = _run(config)
        out[label] = {**_losses(result.record),
                      "margins": _floats(evaluate.margins(result.model,
                                                          result.splits.tests["hard"]), 20)}
    return out


def adversary_numbers() -> dict[str, Any]:
    """Every rule (``baselines`` and ``adversary``) fitted on one sample of a regime, scored
    on another: balanced accuracy over all lengths."""
    from dyckbook import adversary, baselines, languages

    names = tuple(dict.fromkeys((*baselines.BASELINES, *adversary.RULES)))
    attacks = {"Dyck-1 stack (far)": (languages.Dyck(1), "stack", [30, 32, 34]),
               "Dyck-2 stack": (languages.Dyck(2), "stack", [28, 30, 32])}
    out = {}
    for label, (language, regime, lengths) in attacks.items():
        scores = adversary.attack_regime(language, regime, lengths, 200, seed=SEED, names=names)
        out[label] = {"attack": {rule: round(row["all"], 4) for rule, row in scores.items()}}
    scores = baselines.attack_regime(languages.Dyck(3), "hard", [8, 12, 16], 200, seed=SEED)
    out["Dyck-3 hard (baselines.attack)"] = {
        "attack": {rule: round(row["all"], 4) for rule, row in scores.items()}}
    return out


def completion_numbers() -> dict[str, Any]:
    """The completion data of both regimes, and an encoder–decoder and a decoder-only model
    trained and scored through ``run.run``."""
    from dyckbook import completion, completion_scores

    base = completion_data()
    data, made = {}, {}
    for regime in completion.REGIMES:  # bbh: BIG-Bench Hard's four pairs
        k = 4 if regime == "bbh" else 3
        made[regime] = splits = completion.make_completion_splits(
            dataclasses.replace(base, regime=regime, k=k), SEED)
        sets = {"train": splits.train, "val": splits.val, **splits.tests}
        data[f"{regime} k={k}"] = {
            name: {**s.summary(), "digest": _digest(np.sort(s.hashes()).tolist()),
                   "targets": _digest(completion.to_items(s))} for name, s in sets.items()}
    items = completion.to_items(made["bbh"].tests["in_distribution"])
    closers = ")]}>"
    references = {"order_blind_best": round(completion.order_blind_best(items), 6),
                  "order_blind_expected": round(completion.order_blind_expected(items), 6),
                  "close_by_counts": round(sum(completion.close_by_counts(p, closers) == t
                                               for p, t in items) / len(items), 6)}
    models = {}
    for arch, config in completion_configs().items():
        result = _run(config)
        record, test = result.record, result.splits.tests["in_distribution"]
        measures = record.to_dict().get("measures", {})
        entry = {**_losses(record), "train_accuracy": round(record.train_accuracy, 6),
                 "exact_match": {name: round(s.accuracy, 6)
                                 for name, s in record.scores.items()},
                 "token_accuracy": {name: {str(j): round(c / n, 6)
                                           for j, (n, c) in m["per_position"].items()}
                                    for name, m in measures.items()},
                 "positions": {name: {str(j): n for j, (n, _) in m["per_position"].items()}
                               for name, m in measures.items()},
                 "items": round(completion_scores.score_items(
                     result.model, completion.to_items(test)[:50], kind="suffix").accuracy, 6)}
        shares = {name: m["cross_attention"]["share"] for name, m in measures.items()
                  if "cross_attention" in m}
        if shares:
            entry["cross_attention"] = {name: [_floats(row) for row in share]
                                        for name, share in shares.items()}
        models[arch] = entry
    return {"data": data, "references": references, "models": models}


def recurrent_numbers() -> dict[str, Any]:
    """The LSTM and the stack RNN trained through ``run.run`` on the golden data."""
    from dyckbook import evaluate

    out = {}
    for cell, config in recurrent_configs().items():
        result = _run(config)
        record = result.record
        out[cell] = {**_losses(record), "train_accuracy": round(record.train_accuracy, 6),
                     "accuracy": {name: round(s.accuracy, 6)
                                  for name, s in record.scores.items()},
                     "margins": {name: _floats(evaluate.margins(result.model, ds), 40)
                                 for name, ds in result.splits.tests.items()}}
    return out


def thesis_numbers() -> dict[str, Any]:
    """A literal thesis run (its data, split and ported model), and its data generators."""
    from dyckbook import evaluate, thesis, thesis_model

    result = _run(thesis_run_config())
    record, splits = result.record, result.splits
    sets = {"train": splits.train, "val": splits.val, **splits.tests}
    return {"data": {name: _set_summary(ds) for name, ds in sets.items()},
            **_losses(record), "train_accuracy": round(record.train_accuracy, 6),
            "accuracy": {name: round(s.accuracy, 6) for name, s in record.scores.items()},
            "margins": _floats(evaluate.margins(result.model, splits.tests["thesis"]), 40),
            "rules": {name: {rule: round(s.accuracy, 4) for rule, s in rules.items()}
                      for name, rules in record.baselines.items()},
            "generators": {g: _digest(thesis.thesis_samples(200, 3, 0, 16, generator=g))
                           for g in thesis.THESIS_GENERATORS},
            "permutation": thesis_model.thesis_permutation(20).tolist()}


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "sampling": sampling_numbers, "negatives": negatives_numbers,
    "datasets": datasets_numbers, "classifier": classifier_numbers,
    "variants": variants_numbers, "adversary": adversary_numbers,
    "completion": completion_numbers, "recurrent": recurrent_numbers,
    "thesis": thesis_numbers}


def numbers(sections: tuple[str, ...] | None = None) -> dict[str, Any]:
    """The golden numbers of ``sections`` (default: all), as JSON would return them."""
    with _no_disk_caches():
        out = {name: SECTIONS[name]() for name in (sections or tuple(SECTIONS))}
    return json.loads(json.dumps(out))  # the golden file's types: str keys, lists


# ------------------------------------------------------------------------------ comparison
def _tolerance(path: tuple[str, ...]) -> tuple[float, float]:
    """(relative, absolute) tolerance of a float at ``path``."""
    if any(p in LEARNED for p in path):
        return 0.0, LEARNED_TOL
    if path[0] == "adversary" or any(p in ACCURACIES for p in path):
        return 0.0, RULE_TOL
    return FLOAT_TOL, FLOAT_TOL


def _compare(got: Any, want: Any, path: tuple[str, ...]) -> list[str]:
    where = "/".join(path)
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{where}: {str(got)[:80]} vs a mapping"]
        out = []
        if set(got) != set(want):
            out.append(f"{where}: keys {sorted(set(got) - set(want))[:8]} new, "
                       f"{sorted(set(want) - set(got))[:8]} gone")
        for key in want:
            if key in got:
                out += _compare(got[key], want[key], (*path, key))
        return out
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{where}: {str(got)[:80]} vs {str(want)[:80]}"]
        if want and all(isinstance(w, float) for w in want) and \
                all(isinstance(g, (int, float)) and not isinstance(g, bool) for g in got):
            rtol, atol = _tolerance(path)
            if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
                return [f"{where}: {str(got)[:80]} vs {str(want)[:80]}"]
            return []
        return [m for i, (g, w) in enumerate(zip(got, want))
                for m in _compare(g, w, (*path, str(i)))]
    if isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        rtol, atol = _tolerance(path)
        same = (math.isnan(want) and math.isnan(got)) or abs(got - want) <= atol + rtol * abs(want)
        return [] if same else [f"{where}: {got} vs {want}"]
    if got != want or type(got) is not type(want):
        return [f"{where}: {str(got)[:80]} vs {str(want)[:80]}"]
    return []


def differences(got: dict, want: dict, sections: tuple[str, ...] | None = None) -> list[str]:
    """Every number of ``got`` that differs from ``want`` beyond the tolerances, as
    ``"section/path: got vs want"`` (at most a dozen per section); ``sections``: those only
    (default: every section of ``want``)."""
    out = []
    for section in sections or tuple(want):
        if section not in got:
            out.append(f"{section}: not measured")
            continue
        if section not in want:
            out.append(f"{section}: not in the golden record")
            continue
        wrong = _compare(got[section], want[section], (section,))
        out += wrong[:_MAX_MESSAGES]
        if len(wrong) > _MAX_MESSAGES:
            out.append(f"{section}: and {len(wrong) - _MAX_MESSAGES} more")
    return out


# ------------------------------------------------------------------------------ the tests
@pytest.fixture(scope="module")
def measured():
    clear_caches()
    return numbers()


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


@pytest.fixture
def fresh_caches(monkeypatch):
    """Nothing cached before a test that changes a constant, nor after it (its numbers)."""
    clear_caches()
    yield
    clear_caches()


def test_the_golden_record_is_of_this_results_version(golden):
    from dyckbook import version

    assert golden["results_version"] == version.RESULTS_VERSION, (
        f"RESULTS_VERSION is {version.RESULTS_VERSION}, the golden record's "
        f"{golden['results_version']}: after a deliberate change of numbers, rewrite it "
        "(python tests/test_results_version.py --write)")
    assert set(golden["numbers"]) == set(SECTIONS), (
        "the golden record's sections are not the test's: rewrite it (python "
        "tests/test_results_version.py --write)")


@pytest.mark.parametrize("section", list(SECTIONS))
def test_the_numbers_are_the_golden_ones_or_the_results_version_moved(measured, golden,
                                                                      section):
    wrong = differences(measured, golden["numbers"], (section,))
    assert not wrong, (f"{section}: numbers changed without a RESULTS_VERSION bump (every "
                       f"published run would stay 'ok' with stale numbers): {wrong}")


def test_the_comparison_names_what_moved(measured):
    assert not differences(measured, measured)
    moved = json.loads(json.dumps(measured))
    moved["classifier"]["loss"][0] += 0.01
    moved["negatives"]["dip"]["Dyck-2 window=4"]["available"].append(2)
    moved["adversary"]["Dyck-2 stack"]["attack"]["cnn"] += 0.04  # within a learned rule's
    wrong = differences(moved, measured)
    assert [w.split("/")[0] for w in wrong] == ["negatives", "classifier"], wrong


def test_a_changed_training_constant_is_caught(measured, monkeypatch):
    """The check has power: Adam's betas, constants nobody sets, changed from (0.9, 0.999) to
    (0.8, 0.99) move the classifier's numbers beyond the tolerances."""
    import torch

    from dyckbook import train

    real = torch.optim.Adam

    def adam(params, **kwargs):
        return real(params, **{**kwargs, "betas": (0.8, 0.99)})

    monkeypatch.setattr(train.torch.optim, "Adam", adam)
    changed = numbers(("classifier",))
    assert differences(changed, measured, ("classifier",)), "changing Adam's betas moved no number"


def test_a_changed_negatives_constant_is_caught(measured, monkeypatch, fresh_caches):
    """The check has power: the floor of the long-range kinds' window W (8 symbols) raised to
    12 changes where they exist and what they are."""
    from dyckbook import negatives

    home = _home(negatives.sample_negatives)
    assert home.LONG_RANGE_MIN_WINDOW == 8
    monkeypatch.setattr(home, "LONG_RANGE_MIN_WINDOW", 12)
    changed = numbers(("negatives",))
    wrong = differences(changed, measured, ("negatives",))
    assert wrong, "raising the long-range window's floor moved no number"
    assert any(w.startswith(("negatives/stack", "negatives/far")) for w in wrong), wrong


def test_a_changed_rule_constant_is_caught(measured, monkeypatch, fresh_caches):
    """The check has power: the ``ends`` rule reading the first and last two symbols instead
    of three moves its scores beyond the tolerance."""
    from dyckbook import baselines

    ends = _home(baselines.make_baseline).Ends
    assert ends.span == 3
    monkeypatch.setattr(ends, "span", 2)
    changed = numbers(("adversary",))
    wrong = differences(changed, measured, ("adversary",))
    assert wrong, "changing the ends rule's span moved no number"
    assert all("/ends" in w for w in wrong), wrong


def test_staleness_follows_the_results_version_not_the_package_version(tmp_path, monkeypatch):
    """A run recorded under the current results version is up to date whatever the package
    version; under another results version it is stale, and says why."""
    from dyckbook import version
    from dyckbook.pipeline import runner

    current = version.RESULTS_VERSION
    record = {"results_version": current, "dyckbook": "0.0.0-other"}
    reasons = runner._results_changes(record)
    assert reasons == []
    assert runner._results_changes({**record, "results_version": current - 1}) == [
        f"the results version changed ({current - 1} -> {current})"]
    assert runner._results_changes({"dyckbook": "0.1"}) == [
        f"the results version changed (None -> {current})"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_results_version.py --write")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dyckbook import version

    GOLDEN.write_text(json.dumps({"results_version": version.RESULTS_VERSION,
                                  "configs": configs(), "numbers": numbers()}, indent=1)
                      + "\n")
    print(f"wrote {GOLDEN} (results version {version.RESULTS_VERSION})")
