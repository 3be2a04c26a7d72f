"""Tests for dyckbook.data.dataset: string hashes, deduplication, set algebra, labels, summaries."""

import numpy as np
import pytest
from reference_checker import dyck_words, is_member

from dyckbook.data.dataset import MEMBER, Dataset, string_hash
from dyckbook.data.languages import Dyck
from dyckbook.data.vocab import PAD_CODE

DYCK2 = Dyck(2)


@pytest.fixture(scope="module")
def words():
    """Every Dyck-2 word of length 0..10 (1,619 of them)."""
    return [w for n in range(0, 11, 2) for w in dyck_words(DYCK2.pairs, None, n)]


def test_hash_ignores_padding_width_and_pad_contents(words):
    codes, lengths = DYCK2.alphabet.encode(words)
    h = string_hash(codes, lengths)
    wider = np.full((len(words), codes.shape[1] + 7), PAD_CODE, np.uint8)
    wider[:, : codes.shape[1]] = codes
    assert (string_hash(wider, lengths) == h).all()
    junk = np.random.default_rng(0).integers(0, 4, wider.shape).astype(np.uint8)
    junk[np.arange(wider.shape[1]) < lengths[:, None]] = wider[np.arange(wider.shape[1])
                                                               < lengths[:, None]]
    assert (string_hash(junk, lengths) == h).all()  # only the first `length` symbols count
    alone = np.concatenate([string_hash(*DYCK2.alphabet.encode([w])) for w in words[:50]])
    assert (alone == h[:50]).all()


def test_hash_separates_distinct_strings_and_salts(words):
    codes, lengths = DYCK2.alphabet.encode(words)
    h = string_hash(codes, lengths)
    assert len(set(h.tolist())) == len(words) == 1619
    # a string and its prefix padded with the symbol code 0 differ by the length alone
    assert string_hash(codes[:1], np.array([0]))[0] != string_hash(codes[:1], np.array([1]))[0]
    assert (string_hash(codes, lengths, salt=1) != h).mean() > 0.99


def _set(strings, kinds=None):
    return Dataset.from_strings(DYCK2, strings, kinds)


def test_unique_keeps_first_copies_with_labels_and_kinds():
    ds = _set(["()", "([)]", "()", "[]", "([)]", "()"],
              [MEMBER, "swap", "other", MEMBER, "crossing", "again"])
    u = ds.unique()
    assert u.strings() == ["()", "([)]", "[]"]
    assert u.kinds.tolist() == [MEMBER, "swap", MEMBER]
    assert u.labels.tolist() == [1, 0, 1]
    assert ds.first_copies().tolist() == [0, 1, 3]


def test_without_removes_every_copy_of_the_other_strings():
    ds = _set(["()", "[]", "()", "(())", ")("])
    assert ds.without(_set(["()", ")(", "[[]]"])).strings() == ["[]", "(())"]
    assert len(ds.without(ds)) == 0
    assert ds.without(Dataset.empty(DYCK2)).strings() == ds.strings()


def test_concat_and_subset_by_mask_and_index():
    a, b = _set(["()", "(())[]"]), _set(["]", "[()]", ""])
    both = Dataset.concat([a, b])
    assert both.strings() == ["()", "(())[]", "]", "[()]", ""]
    assert both.labels.tolist() == [1, 1, 0, 1, 1]
    assert both.codes.shape == (5, 6)
    mask = np.array([False, True, False, True, False])
    by_mask, by_index = both.subset(mask), both.subset([1, 3])
    for part in (by_mask, by_index):
        assert part.strings() == ["(())[]", "[()]"]
        assert part.codes.shape == (2, 6)
    short = both.subset([0, 2])
    assert short.codes.shape == (2, 2)  # trimmed to its longest string
    assert short.strings() == ["()", "]"]
    with pytest.raises(ValueError, match="datasets"):
        Dataset.concat([])
    with pytest.raises(ValueError, match="Dyck-1"):
        Dataset.concat([a, Dataset.from_strings(Dyck(1), ["()"])])


def test_from_strings_labels_agree_with_the_reference_checker():
    rng = np.random.default_rng(1)
    strings = ["".join(rng.choice(list("()[]"), n)) for n in rng.integers(0, 9, 400)]
    strings += list(dyck_words(DYCK2.pairs, None, 8))[:150]
    ds = _set(strings)
    assert ds.labels.tolist() == [int(is_member(DYCK2, s)) for s in strings]
    assert ds.labels.sum() > 100 and (ds.labels == 0).sum() > 100
    assert set(ds.kinds[ds.labels == 1]) == {MEMBER}
    assert set(ds.kinds[ds.labels == 0]) == {"unlabelled"}
    bounded = Dataset.from_strings(Dyck(2, max_depth=2), ["([])", "([[]])"])
    assert bounded.labels.tolist() == [1, 0]


def test_depths_and_kind_counts():
    ds = _set(["(([]))", "()[]", ")(", ""], ["member", "member", "dip", "member"])
    assert ds.depths().tolist() == [3, 1, 0, 0]
    assert list(ds.kind_counts()) == [MEMBER, "dip"]  # members first
    assert ds.kind_counts() == {MEMBER: 3, "dip": 1}


def test_summary_of_a_set_and_of_an_empty_set():
    ds = _set(["()", "()", "[(", "(())"], [MEMBER, MEMBER, "random", MEMBER])
    assert ds.summary() == {"n": 4, "members": 3, "distinct": 3, "min_length": 2,
                            "max_length": 4, "kinds": {MEMBER: 3, "random": 1}}
    empty = Dataset.empty(DYCK2)
    assert empty.summary() == {"n": 0, "members": 0, "distinct": 0, "min_length": 0,
                               "max_length": 0, "kinds": {}}
    assert len(empty.unique()) == 0 and empty.strings() == []


def test_shape_errors_name_the_field():
    with pytest.raises(ValueError, match="labels"):
        Dataset(DYCK2, np.zeros((2, 2), np.uint8), np.array([2, 2]), np.zeros(3, np.int8),
                np.array(["a", "b"], dtype=object))
    with pytest.raises(ValueError, match="codes"):
        Dataset(DYCK2, np.zeros((3, 2), np.uint8), np.array([2, 2]), np.zeros(2, np.int8),
                np.array(["a", "b"], dtype=object))
