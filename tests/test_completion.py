"""Tests of dyckbook.data.completion: completion pairs against an independent stack checker, pools,
determinism, the BIG-bench format and every bad input."""

import json

import numpy as np
import pytest

from dyckbook.data.completion import (
    BIGBENCH_SENTENCE,
    CompletionDataConfig,
    CompletionSet,
    closing_codes,
    completion_target,
    make_completion_splits,
    open_positions,
    parse_bigbench,
    to_bigbench_json,
)
from dyckbook.data.dataset import string_hash
from dyckbook.data.languages import Dyck

PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}


def stack_of(prefix: str) -> list[tuple[str, int]] | None:
    """Unmatched (opener, position) of a prefix, by a plain stack; None if it is no prefix."""
    stack = []
    for i, c in enumerate(prefix):
        if c in PAIRS:
            stack.append((c, i))
        elif not stack or PAIRS[stack.pop()[0]] != c:
            return None
    return stack


def is_word(s: str) -> bool:
    return stack_of(s) == []


SMALL = {"n_train": 600, "n_val": 200, "n_test": 300}


@pytest.fixture(scope="module", params=[(3, "suffix"), (4, "bbh"), (1, "suffix")])
def splits(request):
    k, regime = request.param
    return CompletionDataConfig(k=k, regime=regime, **SMALL), make_completion_splits(
        CompletionDataConfig(k=k, regime=regime, **SMALL), seed=3)


def test_pairs_pass_an_independent_stack_checker(splits):
    config, sp = splits
    for name, s in {"train": sp.train, "val": sp.val, **sp.tests}.items():
        targets = s.language.alphabet.decode(*s.targets())
        for prefix, target in zip(s.strings(), targets):
            stack = stack_of(prefix)
            assert stack, f"{name}: {prefix!r} is not an unbalanced prefix"
            assert set(target) <= set(PAIRS.values())  # closers only
            assert target == "".join(PAIRS[c] for c, _ in reversed(stack))  # the shortest
            assert is_word(prefix + target) and not is_word(prefix + target[:-1])
        lo, hi = config.lengths(test=name == "ood")
        assert lo <= s.lengths.min() and s.lengths.max() <= hi
        assert set(np.unique(s.codes)) <= set(range(2 * config.k)) | {255}
        np.testing.assert_array_equal(s.depths(), s.targets()[1])
        if config.regime == "bbh":
            assert set(s.depths().tolist()) == {1, 2, 3}


def test_sizes_cover_the_lengths_and_pools_are_disjoint(splits):
    config, sp = splits
    assert (len(sp.train), len(sp.val)) == (config.n_train, config.n_val)
    assert all(len(t) == config.n_test for t in sp.tests.values())
    assert len(set(sp.train.lengths.tolist())) > (config.max_length - config.min_length) * 0.8
    pools = [set(sp.train.hashes().tolist()), set(sp.val.hashes().tolist()),
             set(sp.tests["in_distribution"].hashes().tolist())
             | set(sp.tests["ood"].hashes().tolist())]
    assert not (pools[0] & pools[1]) and not (pools[0] & pools[2]) and not (pools[1] & pools[2])
    for held in (sp.val, *sp.tests.values()):
        assert len(np.unique(held.hashes())) == len(held)


def test_same_seed_same_bytes_other_seed_other_sets():
    config = CompletionDataConfig(k=2, **SMALL)
    a, b, c = (make_completion_splits(config, s) for s in (5, 5, 6))
    for x, y in ((a.train, b.train), (a.val, b.val), (a.tests["ood"], b.tests["ood"])):
        assert x.codes.tobytes() == y.codes.tobytes() and np.array_equal(x.lengths, y.lengths)
    assert not np.array_equal(a.train.hashes(), c.train.hashes())


def test_closing_codes_and_open_positions_match_the_stack_on_random_strings():
    rng = np.random.default_rng(0)
    language = Dyck(3)
    strings = ["".join(rng.choice(list("()[]{}"), p=[.3, .2, .15, .1, .15, .1], size=n))
               for n in rng.integers(0, 14, 400)]
    prefixes = [s for s in strings if stack_of(s) is not None]
    assert 40 < len(prefixes) < len(strings)
    codes, lengths = language.alphabet.encode(prefixes)
    targets = language.alphabet.decode(*closing_codes(language, codes, lengths))
    opened = open_positions(language, codes, lengths)
    for i, (prefix, target) in enumerate(zip(prefixes, targets)):
        stack = stack_of(prefix)
        assert target == "".join(PAIRS[c] for c, _ in reversed(stack))
        assert opened[i][opened[i] >= 0].tolist() == [p for _, p in reversed(stack)]
    for s in strings:
        if stack_of(s) is None:
            with pytest.raises(ValueError, match="is not a prefix of a Dyck-3 word"):
                closing_codes(language, *language.alphabet.encode([s]))


def test_completion_target_examples_and_errors():
    assert completion_target("([") == "])"
    assert completion_target("{[<()>]}<[", k=4) == "]>"
    assert completion_target("") == "" and completion_target("()") == ""
    with pytest.raises(ValueError, match=r"'\(\)\)' \(row 0\) is not a prefix of a Dyck-4 word"):
        completion_target("())")
    with pytest.raises(ValueError, match=r"'\(\]' \(row 0\) is not a prefix"):
        completion_target("(]")
    with pytest.raises(ValueError, match=r"prefix '\(a' holds 'a', which is not one of"):
        completion_target("(a")
    with pytest.raises(ValueError, match="holds '<'"):
        completion_target("(<", k=2)
    with pytest.raises(ValueError, match="prefix must be a str"):
        completion_target(["("])


def test_subset_summary_and_from_strings():
    s = make_completion_splits(CompletionDataConfig(k=2, **SMALL), 0).val
    part = s.subset(s.lengths < 10)
    assert part.lengths.max() < 10 and part.codes.shape[1] == part.lengths.max()
    assert part.strings() == [x for x, n in zip(s.strings(), s.lengths) if n < 10]
    summary = s.summary()
    assert summary["n"] == summary["distinct"] == len(s)
    assert summary["target_lengths"] == [int(s.depths().min()), int(s.depths().max())]
    np.testing.assert_array_equal(s.hashes(), string_hash(s.codes, s.lengths))


def test_bigbench_round_trip_and_format():
    s = make_completion_splits(CompletionDataConfig(k=4, regime="bbh", **SMALL), 1).val
    text = to_bigbench_json(s)
    data = json.loads(text)
    example = data["examples"][0]
    assert example["input"].startswith(BIGBENCH_SENTENCE + " ")
    tokens = example["input"][len(BIGBENCH_SENTENCE):].split()
    assert "".join(tokens) == s.strings()[0] and all(len(t) == 1 for t in tokens)
    assert example["target"] == " ".join(completion_target(s.strings()[0]))
    back = parse_bigbench(text, "file.json")
    assert back.strings() == s.strings() and back.regime == "bigbench"
    bare = json.dumps({"examples": [{"input": "[ { [", "target": "] } ]"}]})
    assert parse_bigbench(bare, "bare").strings() == ["[{["]


@pytest.mark.parametrize("text, message", [
    ("{not json", r"f\.json: not JSON"),
    ('{"examples": []}', r"f\.json: expected an object with a non-empty 'examples' list"),
    ('[1, 2]', "expected an object"),
    ('{"examples": [{"input": "( ["}]}', r"f\.json, example 0: needs the string fields"),
    ('{"examples": [{"input": "(", "target": ")"}, {"input": "( a", "target": ")"}]}',
     r"f\.json, example 1: prefix '\(a' holds 'a'"),
    ('{"examples": [{"input": "(( [", "target": "] )"}]}',
     r"example 0: the input token '\(\(' is not one symbol"),
    ('{"examples": [{"input": "( ] (", "target": ")"}]}',
     r"example 0: '\(\]\(' \(row 0\) is not a prefix of a Dyck-4 word"),
    ('{"examples": [{"input": "( [", "target": ") ]"}]}',
     r"example 0: target '\) \]' is not the shortest completion of '\( \[', which is '\] \)'"),
    ('{"examples": [{"input": "( [", "target": "])"}]}', "is not the shortest completion"),
])
def test_malformed_bigbench_files_get_one_clear_error(text, message):
    with pytest.raises(ValueError, match=message):
        parse_bigbench(text, "f.json")


def test_config_round_trip_and_bad_values():
    config = CompletionDataConfig(k=4, regime="bbh", n_train=10)
    data = config.to_dict()
    assert data["kind"] == "completion" and CompletionDataConfig.from_dict(data) == config
    assert config.lengths() == (4, 50) and config.lengths(test=True) == (52, 100)
    for kwargs, message in [({"k": 0}, "k must be an int >= 1"),
                            ({"regime": "prefix"}, "regime must be one of"),
                            ({"min_length": 2}, "min_length must be an int >= 3"),
                            ({"min_length": 50}, "min_length must be < max_length"),
                            ({"test_max_length": 52}, "test_min_length must be < test_max"),
                            ({"n_train": 0}, "n_train must be an int >= 1"),
                            ({"n_test": 1.5}, "n_test must be an int"),
                            ({"held_out": 1.0}, r"held_out must be in \(0, 1\)")]:
        with pytest.raises(ValueError, match=message):
            CompletionDataConfig(**kwargs)
    with pytest.raises(ValueError, match=r"unknown keys \['pairs'\]"):
        CompletionDataConfig.from_dict({**data, "pairs": "()"})
    with pytest.raises(ValueError, match="seed must be an int >= 0"):
        make_completion_splits(config, -1)
    with pytest.raises(ValueError, match="config must be a CompletionDataConfig"):
        make_completion_splits({"k": 3}, 0)
    with pytest.raises(ValueError, match="codes must be"):
        CompletionSet(Dyck(1), np.zeros((2, 3), np.uint8), np.zeros(3, np.int64), "suffix")
