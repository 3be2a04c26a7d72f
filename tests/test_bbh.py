"""The real BIG-Bench Hard ``dyck_languages`` items (issue 28 item 2): the stored file, the
package's reader on it, an independent check of every target, the order-blind references on the
same items (checked against brute force), and a scorer that can fail."""

import itertools
import json
import shutil
import statistics
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from dyckbook.data.completion import (
    BBH_DYCK_FILE,
    BIGBENCH_SENTENCE,
    CompletionDataConfig,
    check_items,
    close_by_counts,
    make_completion_splits,
    order_blind_best,
    order_blind_expected,
    parse_bigbench,
    to_items,
)
from dyckbook.data.languages import Dyck
from dyckbook.experiment.completion_scores import evaluate_completions, score_items
from dyckbook.experiment.results import read_bigbench
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn.seq2seq import (
    CompletionTask,
    EncoderDecoder,
    Seq2SeqConfig,
    build_seq2seq,
)

ROOT = Path(__file__).resolve().parent.parent
FILE = BBH_DYCK_FILE
PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}
CLOSERS = set(PAIRS.values())


def stack_completion(prefix: str) -> str:
    """The shortest completion by a plain stack (independent of the package)."""
    stack = []
    for c in prefix:
        if c in PAIRS:
            stack.append(c)
        else:
            assert stack and PAIRS[stack.pop()] == c, prefix
    return "".join(PAIRS[c] for c in reversed(stack))


@pytest.fixture(scope="module")
def raw():
    return json.loads(FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def items():
    return to_items(read_bigbench(FILE))


def test_the_file_its_licence_and_its_citation_are_stored_and_tracked():
    here = FILE.parent
    assert "MIT License" in (here / "LICENSE").read_text()
    readme = (here / "README.md").read_text()
    assert "Suzgun" in readme and "9ee07bd481feebf959a6b59d61ea57bdcf30964d" in readme
    if shutil.which("git") and (ROOT / ".git").exists():  # a "data/" folder would be ignored
        names = [str(here.relative_to(ROOT) / n) for n in ("dyck_languages.json", "LICENSE",
                                                           "README.md")]
        out = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True,
                             text=True)
        assert out.returncode == 1 and not out.stdout, out.stdout


def test_the_reader_gives_250_items_in_file_order(raw, items):
    examples = raw["examples"]
    assert len(examples) == len(items) == 250
    for example, (prefix, target) in zip(examples, items):
        head, _, tokens = example["input"].partition(" Input: ")
        assert head + " Input:" == BIGBENCH_SENTENCE
        assert prefix == "".join(tokens.split()) and target == "".join(example["target"].split())
        assert all(len(t) == 1 for t in tokens.split() + example["target"].split())
    assert len({p for p, _ in items}) == 250


def test_item_statistics(items):
    lengths = [len(p) for p, _ in items]
    assert (min(lengths), statistics.median(lengths), max(lengths)) == (2, 13, 99)
    assert sum(n > 50 for n in lengths) == 36  # 14.4%
    assert lengths.count(2) == 7
    assert sorted({len(t) for _, t in items}) == [1, 2, 3]


def test_every_target_is_the_shortest_completion_by_an_independent_check(raw):
    dyck = Dyck(4)
    prefixes = ["".join(e["input"].rpartition("Input:")[2].split()) for e in raw["examples"]]
    targets = ["".join(e["target"].split()) for e in raw["examples"]]
    # closers only and prefix + target a word: the completion is forced, hence the shortest
    assert all(t and set(t) <= CLOSERS for t in targets)
    assert dyck.is_member([p + t for p, t in zip(prefixes, targets)]).all()
    assert not dyck.is_member(prefixes).any()
    assert targets == [stack_completion(p) for p in prefixes]


@pytest.mark.parametrize("index, field, value, message", [
    (17, "target", "] ]", r"example 17: target"),
    (5, "input", f"{BIGBENCH_SENTENCE} ( a", r"example 5: .*'a'"),
    (9, "input", f"{BIGBENCH_SENTENCE} ( ]", r"example 9: .*not a prefix"),
    (3, "target", None, r"example 3: needs the string fields"),
])
def test_the_reader_names_a_malformed_item(raw, index, field, value, message):
    examples = [dict(e) for e in raw["examples"]]
    examples[index][field] = value
    with pytest.raises(ValueError, match=message):
        parse_bigbench(json.dumps({"examples": examples}), "bbh")


def brute_force_order_blind(items):
    """The best of every map from count vectors to the targets that occur, tried one by one."""
    key = [tuple(p.count(s) for s in "()[]{}<>") for p, _ in items]
    bags, targets = sorted(set(key)), sorted({t for _, t in items})
    best = 0
    for answer in itertools.product(targets, repeat=len(bags)):
        guess = dict(zip(bags, answer))
        best = max(best, sum(guess[k] == t for k, (_, t) in zip(key, items)))
    return best / len(items)


def test_order_blind_best_by_hand_and_by_brute_force():
    small = [("([", "])"), ("[(", ")]"), ("([", "])"),  # one bag: "])" twice, ")]" once
             ("((", "))"),                              # a bag alone
             ("(()", ")"), ("()(", ")"),                # one bag, one answer
             ("{<", ">}"), ("<{", "}>")]                # one bag, a tie
    assert order_blind_best(small) == pytest.approx(6 / 8) == brute_force_order_blind(small)
    assert order_blind_best([("([", "])"), ("((", "))")]) == 1.0  # every bag alone
    assert np.isnan(order_blind_best([]))
    # expected score of a random arrangement: 1/2 + 1/2 + 1/2 + 1 + 1 + 1 + 1/2 + 1/2
    assert order_blind_expected(small) == pytest.approx(5.5 / 8)


def test_order_blind_references_on_the_real_items(items):
    best, expected = order_blind_best(items), order_blind_expected(items)
    assert 0.0 <= expected <= best <= 1.0
    assert best == pytest.approx(245 / 250)  # 244 distinct count vectors: near-memorisation
    assert expected == pytest.approx(167.5 / 250)  # the "67%"
    # the expectation recomputed by enumerating each item's arrangements
    again = sum(1 / len(set(itertools.permutations(t))) for _, t in items) / len(items)
    assert expected == pytest.approx(again)
    fixed = {"".join(o): sum(close_by_counts(p, "".join(o)) == t for p, t in items)
             for o in itertools.permutations(")]}>")}
    assert (fixed[")]}>"], min(fixed.values()), max(fixed.values())) == (173, 160, 178)
    assert max(fixed.values()) <= best * len(items)


def test_close_by_counts():
    assert close_by_counts("([") == ")]" and close_by_counts("[[") == "]]"
    assert close_by_counts("([", order="]})>") == "])" and close_by_counts("()") == ""
    assert close_by_counts("(<{[", order=">)]}") == ">)]}"
    with pytest.raises(ValueError, match="order must arrange"):
        close_by_counts("(", order="))")


def test_a_stack_oracle_scores_250_and_a_wrong_one_less(items):
    perfect = score_items(lambda ps: [stack_completion(p) for p in ps], items)
    assert (perfect.score.n, perfect.score.correct, perfect.missed) == (250, 250, [])
    assert perfect.accuracy == 1.0 and perfect.interval[1] == 1.0
    assert 0.98 < perfect.interval[0] < 1.0
    assert sum(n for n, _ in perfect.score.per_length.values()) == 250
    assert perfect.score.per_kind == {"bbh": [250, 250]}
    # spaces are ignored: BIG-bench's own target text scores too
    assert score_items(lambda ps: [" ".join(stack_completion(p)) for p in ps], items).accuracy == 1

    rule = score_items(lambda ps: [close_by_counts(p) for p in ps], items)
    assert rule.score.correct == 173 and len(rule.missed) == 77
    assert all(rule.predictions[i] != items[i][1] for i in rule.missed)
    low, high = rule.interval
    assert low < 173 / 250 < high < 1.0
    # one wrong answer is enough to be caught, and named
    off = score_items(lambda ps: [stack_completion(p) if i != 42 else ")" for i, p in
                                  enumerate(ps)], items)
    assert off.score.correct == 249 and off.missed == [42]


def test_score_items_rejects_bad_input(items):
    oracle = lambda ps: [stack_completion(p) for p in ps]  # noqa: E731
    with pytest.raises(ValueError, match="item 2: expected a"):
        score_items(oracle, [items[0], items[1], ("((",)])
    with pytest.raises(ValueError, match=r"item 1: prefix '\(a'"):
        check_items([items[0], ("(a", ")")])
    with pytest.raises(ValueError, match="gave 1 completions for 2"):
        score_items(lambda ps: [")"], items[:2])
    with pytest.raises(ValueError, match="item 0: the model's completion must be a str"):
        score_items(lambda ps: [None, ")"], items[:2])
    with pytest.raises(ValueError, match="sequence model or a function"):
        score_items(3, items)
    model = EncoderDecoder(Seq2SeqConfig(k=4, n_ctx=50, d_model=16, n_heads=2, d_mlp=32))
    with pytest.raises(ValueError, match="longer than the model's n_ctx"):
        score_items(model, items)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
def test_a_model_is_scored_as_evaluate_completions_scores_it(arch):
    """A briefly trained model (right on some items, wrong on others): the same exact matches,
    item by item, as the teacher-forced check and :func:`evaluate_completions`."""
    config = CompletionDataConfig(k=2, regime="bbh", min_length=3, max_length=12,
                                  test_min_length=13, test_max_length=14, n_train=2000,
                                  n_val=200, n_test=10)
    sp = make_completion_splits(config, 0)
    layers = (1, 1) if arch == "encoder_decoder" else (0, 2)
    model = build_seq2seq(Seq2SeqConfig(arch=arch, k=2, n_ctx=14, n_encoder_layers=layers[0],
                                        n_decoder_layers=layers[1], d_model=32, n_heads=2,
                                        d_mlp=64), [0])
    train(model, CompletionTask(), [sp.train], None,
          TrainConfig(lr=3e-3, batch_size=64, max_steps=60))
    data, items = sp.val, to_items(sp.val)
    expected, _ = evaluate_completions(model, data, batch_size=50)
    got = score_items(model, items, batch_size=64)
    assert 0 < got.score.correct < len(data)  # the check can tell right from wrong
    assert got.score.correct == expected.correct and got.score.n == expected.n == len(data)
    assert got.score.per_length == expected.per_length
    assert got.score.per_depth == expected.per_depth
    task = CompletionTask()
    batch = task.batch(task.tensors(data, 12), torch.arange(len(data))[None])
    with torch.no_grad():
        forced = task.correct(model, batch)[0].numpy()
    np.testing.assert_array_equal(got.correct, forced)
    for ok, text, (_, target) in zip(got.correct, got.predictions, items):
        assert ok == (text == target)
