"""Tests for dyckbook.data.protocol: disjoint pools, per-length balance, regimes, the thesis source,
and the headline check that a strictly 4-local recogniser is at chance on the hard test set."""

from dataclasses import replace

import numpy as np
import pytest
from reference_checker import is_locally_valid, is_member

from dyckbook.data import negatives as N
from dyckbook.data.dataset import MEMBER
from dyckbook.data.languages import locally_valid
from dyckbook.data.protocol import DataConfig, make_splits
from dyckbook.data.thesis import thesis_samples, thesis_split_sizes
from dyckbook.rules.baselines import LocalRecogniser

LONGEST = {1: 20, 3: 16}  # the protocol's default lengths: Dyck-1 4..20, Dyck-3 4..16


def _default(k):
    return DataConfig(k=k, min_length=4, max_length=LONGEST[k])


def _small(k):
    return DataConfig(k=k, min_length=4, max_length=LONGEST[k], n_train=600, n_val=200,
                      n_test=400)


@pytest.fixture(scope="module")
def default_splits():
    """The default protocol's splits of seed 0 for Dyck-1 and Dyck-3."""
    return {k: make_splits(_default(k), 0) for k in (1, 3)}


@pytest.fixture(scope="module")
def all_splits(default_splits):
    """(config, seed, splits): seed 0 at the default sizes, seeds 1 and 2 at small sizes."""
    out = [(_default(k), 0, default_splits[k]) for k in (1, 3)]
    out += [(_small(k), seed, make_splits(_small(k), seed)) for k in (1, 3) for seed in (1, 2)]
    return out


def _ids(splits):
    return [f"k{c.k}-seed{s}" for c, s, _ in splits]


def _counts_balanced(codes, lengths, k):
    """Per type, as many openers as closers (on the real symbols of each row)."""
    valid = np.arange(codes.shape[1]) < lengths[:, None]
    return np.all([((codes == 2 * t) & valid).sum(1) == ((codes == 2 * t + 1) & valid).sum(1)
                   for t in range(k)], axis=0)


def _hard_promises(ds, negatives):
    """Every hard promise, checked directly: kind, even length >= 4, counts per type, an opener
    first, a closer last, and the depth bound of the language."""
    codes, lengths = ds.codes[negatives], ds.lengths[negatives]
    assert set(ds.kinds[negatives]) <= set(N.HARD_KINDS)
    assert (lengths % 2 == 0).all() and (lengths >= 4).all()
    assert _counts_balanced(codes, lengths, ds.language.k).all()
    assert (codes[:, 0] % 2 == 0).all()
    assert (codes[np.arange(len(lengths)), lengths - 1] % 2 == 1).all()
    if ds.language.max_depth is not None:
        assert (ds.language.max_depths(codes, lengths) <= ds.language.max_depth).all()


def test_no_held_out_string_in_training_and_val_disjoint_from_tests(all_splits):
    for config, seed, sp in all_splits:
        train = set(sp.train.strings())
        val = set(sp.val.strings())
        assert len(val) > 0 and not val & train, (config.k, seed)
        for name, test in sp.tests.items():
            strings = set(test.strings())
            assert len(strings) > 0, (config.k, seed, name)
            assert not strings & train, (config.k, seed, name)
            assert not strings & val, (config.k, seed, name)


def test_val_and_tests_balanced_at_every_length_and_deduplicated(all_splits):
    for config, seed, sp in all_splits:
        sets = {"val": (sp.val, config.lengths(), "hard"),
                **{n: (d, config.lengths(test=True), n) for n, d in sp.tests.items()}}
        for name, (ds, (lo, hi), regime) in sets.items():
            where = (config.k, seed, name)
            strings = ds.strings()
            assert len(set(strings)) == len(strings), where  # each string once, one kind
            assert ((ds.labels == 1) == (ds.kinds == MEMBER)).all(), where
            assert ds.lengths.min() >= lo and ds.lengths.max() <= hi, where
            for length in np.unique(ds.lengths):
                at = ds.lengths == length
                members = int(ds.labels[at].sum())
                assert members == at.sum() - members > 0, (where, length)
                kinds, window = ("random", None) if regime == "random" else (
                    "hard", config.window if regime == "hard" else None)
                assert N.available_kinds(ds.language, int(length), kinds, window), (where, length)


def test_labels_agree_with_the_reference_checker(all_splits):
    for config, seed, sp in all_splits:
        for name, ds in {"train": sp.train, "val": sp.val, **sp.tests}.items():
            expected = [int(is_member(ds.language, s)) for s in ds.strings()]
            assert ds.labels.tolist() == expected, (config.k, seed, name)


def test_hard_and_validation_negatives_are_non_local_and_keep_every_promise(all_splits):
    for config, seed, sp in all_splits:
        for name, ds in (("val", sp.val), ("hard", sp.tests["hard"])):
            negatives = ds.labels == 0
            _hard_promises(ds, negatives)
            lang = ds.language
            assert locally_valid(lang, ds.codes[negatives], ds.lengths[negatives],
                                 config.window).all(), (config.k, seed, name)
            assert all(is_locally_valid(s, lang.pairs, lang.max_depth, config.window)
                       for s in ds.subset(negatives).strings()), (config.k, seed, name)


def test_local_negatives_are_hard_but_not_all_locally_valid(all_splits):
    for config, seed, sp in all_splits:
        ds = sp.tests["local"]
        negatives = ds.labels == 0
        _hard_promises(ds, negatives)
        valid = locally_valid(ds.language, ds.codes[negatives], ds.lengths[negatives],
                              config.window)
        assert not valid.all(), (config.k, seed)  # the regime differs from "hard"


def test_random_negatives_are_non_members_of_even_length(all_splits):
    for *_, sp in all_splits:
        ds = sp.tests["random"]
        negatives = ds.subset(ds.labels == 0)
        assert set(negatives.kinds) == {"random"}
        assert (negatives.lengths % 2 == 0).all()
        assert not any(is_member(ds.language, s) for s in negatives.strings())


def test_same_seed_same_bytes_other_seed_other_sets(all_splits):
    config, seed, sp = all_splits[2]  # Dyck-1, small, seed 1
    again = make_splits(config, seed)
    for name in ("train", "val", *sp.tests):
        a, b = ({"train": s.train, "val": s.val, **s.tests}[name] for s in (sp, again))
        assert a.codes.tobytes() == b.codes.tobytes() and a.codes.shape == b.codes.shape
        assert (a.lengths == b.lengths).all() and (a.labels == b.labels).all()
        assert a.kinds.tolist() == b.kinds.tolist()
    other = all_splits[3][2]  # same config, seed 2
    assert set(sp.train.strings()) != set(other.train.strings())
    assert set(sp.tests["hard"].strings()) != set(other.tests["hard"].strings())


def test_realised_sizes_in_the_summary(all_splits):
    for _, _, sp in all_splits:
        summary = sp.summary()
        assert list(summary) == ["train", "val", *sp.tests]
        for name, ds in {"train": sp.train, "val": sp.val, **sp.tests}.items():
            row = summary[name]
            assert row["n"] == len(ds) and row["members"] == int(ds.labels.sum())
            assert row["distinct"] == len(set(ds.strings()))
            assert (row["min_length"], row["max_length"]) == (ds.lengths.min(), ds.lengths.max())
            assert sum(row["kinds"].values()) == len(ds)
            assert row["kinds"][MEMBER] == row["members"]


def _cheap(**changes):
    base = {"k": 3, "min_length": 4, "max_length": 12, "n_train": 300, "n_val": 0, "n_test": 1,
            "test_sets": ("random",)}
    return DataConfig(**{**base, **changes})


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.75])
def test_positive_fraction_of_the_training_set(fraction):
    sp = make_splits(_cheap(k=1, n_train=301, positive_fraction=fraction), 0)
    assert len(sp.train) == 301
    assert int(sp.train.labels.sum()) == round(301 * fraction)
    assert sp.train.lengths.min() >= 4 and sp.train.lengths.max() <= 12


def test_train_negatives_regimes():
    window = 4
    seen = {}
    for regime in ("hard", "local", "random", "mix"):
        sp = make_splits(_cheap(train_negatives=regime), 3)
        ds = sp.train
        neg = ds.subset(ds.labels == 0)
        lang = neg.language
        hard = np.isin(neg.kinds, N.HARD_KINDS)
        valid = locally_valid(lang, neg.codes, neg.lengths, window)
        seen[regime] = (hard, valid, neg)
        for length in np.unique(neg.lengths).tolist():
            at = neg.lengths == length
            if regime == "random":
                assert set(neg.kinds[at]) == {"random"}
            elif regime == "hard" and N.available_kinds(lang, length, "hard", window):
                assert hard[at].all() and valid[at].all(), length
            elif regime in ("hard", "local") and N.available_kinds(lang, length, "hard", None):
                assert hard[at].all(), (regime, length)  # local: the hard kinds, no window
            elif regime in ("hard", "local"):
                assert set(neg.kinds[at]) == {"random"}, (regime, length)  # the fallback
    hard, valid, neg = seen["local"]
    assert (hard & ~valid).sum() > 20  # local negatives include locally detectable ones
    hard, valid, neg = seen["mix"]
    share = (neg.kinds == "random").mean()
    assert 0.2 < share < 0.5 and (hard & valid).sum() > 20 and (hard & ~valid).sum() > 20
    assert not any(is_member(neg.language, s) for s in neg.strings())


def test_test_max_depth_bounds_the_test_sets_only():
    config = DataConfig(k=3, min_length=4, max_length=12, n_train=300, n_val=50, n_test=200,
                        test_max_depth=2)
    sp = make_splits(config, 0)
    assert sp.train.language.max_depth is None and sp.val.language.max_depth is None
    assert sp.train.depths().max() > 2  # training strings are not bounded
    for name, ds in sp.tests.items():
        assert ds.language.max_depth == 2
        members = ds.labels == 1
        assert ds.depths()[members].max() <= 2
        assert [int(is_member(ds.language, s)) for s in ds.strings()] == ds.labels.tolist()
        if name != "random":
            _hard_promises(ds, ~members)


@pytest.mark.parametrize("changes, field, value", [
    ({"k": 0}, "k", "0"), ({"n_train": True}, "n_train", "True"),
    ({"min_length": -2}, "min_length", "-2"), ({"n_test": 0}, "n_test", "0"),
    ({"max_depth": -1}, "max_depth", "-1"), ({"test_max_length": "20"}, "test_max_length", "'20'"),
    ({"min_length": 5, "max_length": 5}, "min_length", "5..5"),
    ({"test_min_length": 20, "test_max_length": 10}, "test_min", "20..10"),
    ({"train_negatives": "easy"}, "train_negatives", "'easy'"),
    ({"source": "paper"}, "source", "'paper'"),
    ({"thesis_generator": "0.2"}, "thesis_generator", "'0.2'"),
    ({"thesis_split": "50/50"}, "thesis_split", "'50/50'"),
    ({"test_sets": ("hard", "easy")}, "test_sets", "'easy'"),
    ({"window": 1}, "window", "1"), ({"positive_fraction": 1.0}, "positive_fraction", "1.0"),
    ({"held_out": 0.0}, "held_out", "0.0"),
])
def test_data_config_errors_name_the_field_and_value(changes, field, value):
    with pytest.raises(ValueError) as error:
        DataConfig(**changes)
    assert field in str(error.value) and value in str(error.value)


def test_data_config_round_trip_and_bad_seed():
    config = DataConfig(k=2, max_depth=3, test_sets=["hard"], test_max_length=20)
    assert config.test_sets == ("hard",)
    assert DataConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown keys.*'colour'"):
        DataConfig.from_dict({**config.to_dict(), "colour": 1})
    for seed in (-1, True, 1.0):
        with pytest.raises(ValueError, match=f"seed.*{seed!r}"):
            make_splits(config, seed)


def _thesis(split, n=200):
    return DataConfig(k=1, min_length=0, max_length=16, n_train=n, n_test=100,
                      test_sets=("hard", "random"), source="thesis", thesis_split=split)


def test_thesis_source_splits_the_thesis_dataset():
    n = 200
    permutation = np.random.default_rng(5).permutation(n)
    sp = make_splits(_thesis("thesis"), 0, permutation)
    samples = thesis_samples(n, 1, 0, 16, 0.5)
    sizes = thesis_split_sizes(n)
    assert sizes == (160, 24, 16)
    assert (len(sp.train), len(sp.val), len(sp.tests["thesis"])) == sizes
    ends = np.cumsum(sizes)[:2]
    for ds, rows in zip((sp.train, sp.val, sp.tests["thesis"]), np.split(permutation, ends)):
        assert ds.strings() == [samples[i] for i in rows]
        assert ds.labels.tolist() == [int(is_member(ds.language, samples[i])) for i in rows]
    seen = set(sp.train.strings())
    for name in ("hard", "random"):
        assert len(sp.tests[name]) > 0 and not set(sp.tests[name].strings()) & seen


def test_thesis_80_20_split_has_a_test_set_of_its_own():
    n = 200
    permutation = np.random.default_rng(5).permutation(n)
    config = replace(_thesis("thesis"), thesis_split="80/20", test_min_length=18,
                     test_max_length=24, n_test=50)
    sp = make_splits(config, 0, permutation)
    samples = thesis_samples(n, 1, 0, 16, 0.5)
    assert (len(sp.train), len(sp.val)) == (160, 40)
    assert sp.train.strings() == [samples[i] for i in permutation[:160]]
    assert sp.tests["thesis"].strings() == thesis_samples(50, 1, 18, 24, 0.5)
    with pytest.raises(ValueError, match="80/20.*test"):
        _thesis("80/20")


def test_thesis_source_needs_a_permutation_of_the_right_size():
    for bad in (None, np.arange(199), np.arange(1, 201), np.zeros(200, int)):
        with pytest.raises(ValueError, match="permutation.*range\\(200\\)"):
            make_splits(_thesis("thesis"), 0, bad)


def _local_scores(splits, test):
    """Balanced accuracy of a 4-local recogniser fitted on the training set: per negative kind,
    and per length where both classes have >= 20 strings."""
    lr = LocalRecogniser(splits.train.language, 4).fit(splits.train.codes, splits.train.lengths,
                                                       splits.train.labels)
    ds = splits.tests[test]
    ok = lr.predict(ds.codes, ds.lengths) == ds.labels
    members = ds.labels == 1
    per_kind = {kind: 0.5 * (ok[members].mean() + ok[ds.kinds == kind].mean())
                for kind in set(ds.kinds) - {MEMBER}}
    per_length = {}
    for length in np.unique(ds.lengths).tolist():
        m, o = members & (ds.lengths == length), ~members & (ds.lengths == length)
        if m.sum() >= 20 and o.sum() >= 20:
            per_length[length] = 0.5 * (ok[m].mean() + ok[o].mean())
    return per_kind, per_length


@pytest.mark.parametrize("k", [1, 3])
def test_a_strictly_local_recogniser_is_at_chance_on_the_hard_test_set(default_splits, k):
    per_kind, per_length = _local_scores(default_splits[k], "hard")
    assert len(per_kind) >= 3 and len(per_length) >= 2
    assert max(per_kind.values()) <= 0.55, per_kind
    assert max(per_length.values()) <= 0.55, per_length
    # the same recogniser on the "local" set, whose negatives keep the hard promises but not
    # the window condition: it catches some kind, so the bound above is not vacuous
    per_kind, _ = _local_scores(default_splits[k], "local")
    assert max(per_kind.values()) > 0.6, per_kind


@pytest.fixture(scope="module")
def long_splits():
    """Splits with a stack test set, at lengths where long-range negatives exist."""
    out = {}
    for k in (1, 3):
        config = DataConfig(k=k, min_length=4, max_length=40, n_train=2000, n_val=300,
                            n_test=600, test_sets=("hard", "stack"))
        out[k] = (config, make_splits(config, 4))
    return out


@pytest.mark.parametrize("k", [1, 3])
def test_stack_sets_pair_long_range_negatives_with_matched_members(long_splits, k):
    _, splits = long_splits[k]
    ds = splits.tests["stack"]
    kind = N.stack_kind(ds.language)
    assert set(ds.kinds.astype(str)) == {MEMBER, kind}
    assert ds.lengths.min() >= N.NEGATIVE_KINDS[kind].min_length and len(ds) >= 500
    for L in np.unique(ds.lengths):  # per-length balanced
        at = ds.lengths == L
        assert ds.labels[at].sum() * 2 == at.sum()
    strings = ds.strings()
    assert [is_member(ds.language, s) for s in strings] == ds.labels.astype(bool).tolist()
    assert len(set(strings)) == len(strings)
    assert not set(strings) & set(splits.train.strings())  # the test pool is its own
    # the members are not the hard set's members: they are drawn like the negatives' words
    assert not set(strings) & set(splits.tests["hard"].strings())
    # training and validation both hold stack negatives; validation also hard ones
    assert (splits.train.kinds == kind).sum() > 0.05 * (splits.train.labels == 0).sum()
    val_kinds = set(splits.val.kinds.astype(str))
    assert kind in val_kinds and len(val_kinds - {MEMBER, kind}) >= 2


def test_training_stack_negatives_come_with_matched_members(monkeypatch):
    """Issue 50: training paired stack negatives with uniform members while the test set pairs
    them with matched members, a shortcut the test withdraws. Now each training stack negative
    has a matched member of its length."""
    asked = []
    real = N.sample_matched_members

    def spy(language, rng, lengths, kind):
        out = real(language, rng, lengths, kind)
        asked.append(out)
        return out

    monkeypatch.setattr(N, "sample_matched_members", spy)
    config = DataConfig(k=2, min_length=4, max_length=36, n_train=800, test_sets=("hard",))
    train = make_splits(config, 0).train
    kind = N.stack_kind(train.language)
    stack = train.kinds.astype(str) == kind
    assert stack.sum() >= 20
    members = {s for s, y in zip(train.strings(), train.labels) if y == 1}
    made = {s for codes, lengths in asked for s in train.language.alphabet.decode(codes, lengths)}
    found = members & made
    assert len(found) >= stack.sum()  # one matched member (at least) per stack negative
    have = np.bincount([len(s) for s in found], minlength=64)
    need = np.bincount(train.lengths[stack], minlength=64)
    assert (have >= need).all()


def test_stack_regime_needs_long_enough_strings():
    with pytest.raises(ValueError, match="shortest length that has them is 28"):
        DataConfig(k=3, max_length=16, test_sets=("hard", "stack"))
    with pytest.raises(ValueError, match="train_negatives asks for stack negatives"):
        DataConfig(k=1, max_length=20, train_negatives="stack")
    # a depth bound can leave none at any length: the search stops, and says where
    with pytest.raises(ValueError, match=r"Dyck-\(2, 3\) has none at lengths 0\.\.32; none has "
                                         r"them up to length 256 either"):
        DataConfig(k=2, max_length=10, test_max_length=32, test_max_depth=3,
                   test_sets=("hard", "stack"))
    short = make_splits(_small(3), 0)  # no stack lengths: the mix is a third each, as before
    kinds = set(short.train.kinds.astype(str))
    assert "stack" not in kinds and "random" in kinds
    assert set(short.val.kinds.astype(str)) - {MEMBER} <= set(N.HARD_KINDS)


def test_a_spread_test_set_pairs_spread_negatives_with_their_matched_members():
    """Issue 63: ``spread`` is a test regime (never in the training mixture): its negatives are
    the ``spread`` kind, its members the words they were made from, as many of each at every
    length; a Dyck-1 config asking for it is refused, naming the regime."""
    from dyckbook.data.negatives import spread_window
    from dyckbook.data.protocol import REGIMES, TEST_REGIMES

    assert "spread" in TEST_REGIMES and "spread" not in REGIMES
    config = DataConfig(k=2, min_length=4, max_length=16, test_min_length=30, test_max_length=36,
                        n_train=200, n_val=0, n_test=120, test_sets=("spread",))
    splits = make_splits(config, 1)
    test = splits.tests["spread"]
    kinds = test.kinds.astype(str)
    assert set(kinds) == {"member", "spread"} and (test.labels == (kinds == "member")).all()
    for n in np.unique(test.lengths):
        at = test.lengths == n
        assert (kinds[at] == "member").sum() == (kinds[at] == "spread").sum() > 0
        assert spread_window(int(n)) == max(4, -(-int(n) // 6))
    assert config.language().is_member((test.codes, test.lengths))[kinds == "member"].all()
    assert "spread" not in set(splits.train.kinds.astype(str))
    with pytest.raises(ValueError, match="asks for spread negatives \\(spread\\), but Dyck-1"):
        DataConfig(k=1, max_length=16, test_min_length=30, test_max_length=36,
                   test_sets=("spread",))


# ------------------------------------------------------- the deep test set and val_negatives
def _depth(language, s):
    """Maximum running count of openers minus closers, by a plain loop."""
    h = top = 0
    for c in s:
        h += 1 if language.alphabet.symbols.index(c) % 2 == 0 else -1
        top = max(top, h)
    return top


@pytest.fixture(scope="module")
def deep_splits():
    config = DataConfig(k=2, min_length=2, max_length=12, test_min_length=4, test_max_length=40,
                        n_train=300, n_val=40, n_test=160, test_sets=("deep", "hard"))
    return config, make_splits(config, 0)


def test_the_deep_set_is_deeper_than_every_training_member(deep_splits):
    config, splits = deep_splits
    language, depth = config.language(test=True), splits.deep_depth
    train_members = [s for s, y in zip(splits.train.strings(), splits.train.labels) if y == 1]
    assert depth == 1 + max(_depth(language, s) for s in train_members)
    deep = splits.tests["deep"]
    assert list(splits.tests) == ["deep", "hard"] and deep.language == language  # plain Dyck-2
    strings, labels = deep.strings(), deep.labels.astype(bool)
    kinds = deep.kinds.astype(str)
    assert (labels == (kinds == MEMBER)).all() and 0 < labels.sum() < len(deep)
    assert [is_member(language, s) for s in strings] == labels.tolist()
    assert all(_depth(language, s) >= depth for s, y in zip(strings, labels) if y)
    # lengths: the test range from 2D on, balanced per length; strings distinct, none trained on
    assert deep.lengths.min() >= max(4, 2 * depth) and deep.lengths.max() <= 40
    assert (deep.lengths % 2 == 0).all()
    for n in np.unique(deep.lengths):
        at = deep.lengths == n
        assert 2 * deep.labels[at].sum() == at.sum()
    assert len(set(strings)) == len(strings)
    assert not set(strings) & set(splits.train.strings())
    # negatives: hard (every promise, non-local at the window), made from deep words
    negatives = ~labels
    _hard_promises(deep, negatives)
    assert all(is_locally_valid(s, language.pairs, None, config.window)
               for s in np.asarray(strings, dtype=object)[negatives])
    assert set(kinds[negatives]) >= {"crossing", "deep_mismatch"}
    heights_kept = np.isin(kinds, ["crossing", "deep_mismatch"])  # their words' heights
    kept = np.asarray(strings, dtype=object)[heights_kept]
    assert all(_depth(language, s) >= depth for s in kept)


def test_the_deep_set_changes_no_other_draw(deep_splits):
    config, splits = deep_splits
    plain = make_splits(replace(config, test_sets=("hard",)), 0)
    assert plain.deep_depth is None and list(plain.tests) == ["hard"]
    for a, b in ((plain.train, splits.train), (plain.val, splits.val),
                 (plain.tests["hard"], splits.tests["hard"])):
        assert a.codes.shape == b.codes.shape and (a.codes == b.codes).all()
        assert (a.kinds == b.kinds).all()


def test_deep_set_errors_and_regime_lengths():
    from dyckbook.data.languages import DeepDyck, Dyck
    from dyckbook.data.protocol import TEST_REGIMES, TRAIN_NEGATIVES, regime_lengths

    assert "deep" in TEST_REGIMES and "deep" not in TRAIN_NEGATIVES
    short = DataConfig(k=2, min_length=2, max_length=12, n_train=300, n_val=0, n_test=40,
                       test_sets=("deep",))
    with pytest.raises(ValueError, match=r"test_sets asks for a deep set, of depth >= 7 .*test "
                                         r"lengths 2\.\.12 hold no length >= 14"):
        make_splits(short, 0)
    with pytest.raises(ValueError, match=r"test_sets holds 'deep'.*depth 3"):
        DataConfig(k=2, max_depth=3, test_sets=("deep",))
    with pytest.raises(ValueError, match=r"regime 'deep'.*DeepDyck.*got Dyck-2"):
        regime_lengths(Dyck(2), "deep", 4, 20)
    deep = DeepDyck(2, 5)
    lengths = regime_lengths(deep, "deep", 4, 30)
    assert lengths == regime_lengths(deep, "hard", 4, 30) and lengths and min(lengths) >= 10


def test_val_negatives_and_test_pool_are_later_fields_that_keep_every_digest():
    from dyckbook.experiment.run import RunConfig, config_digest

    old_keys = ["held_out", "k", "max_depth", "max_length", "min_length", "n_test", "n_train",
                "n_val", "positive_fraction", "source", "test_max_depth", "test_max_length",
                "test_min_length", "test_sets", "thesis_generator", "thesis_split",
                "train_negatives", "window"]
    assert DataConfig.LATER_FIELDS == ("val_negatives", "test_pool")
    assert sorted(DataConfig().to_dict()) == old_keys
    assert not {"val_negatives", "test_pool"} & set(RunConfig().to_dict()["data"])
    # digests of the configurations before the field existed
    assert config_digest(DataConfig().to_dict()) == "b3fb3a2aad8f07e7"
    assert config_digest(DataConfig(k=3, max_length=48, test_sets=("hard", "stack")).to_dict()) \
        == "b20f1ce91a1f2d8a"
    hard = DataConfig(val_negatives="hard")
    assert hard.to_dict()["val_negatives"] == "hard"
    assert DataConfig.from_dict(hard.to_dict()) == hard
    assert config_digest(hard.to_dict()) != config_digest(DataConfig().to_dict())
    with pytest.raises(ValueError, match=r"DataConfig\.val_negatives must be one of .*'stack'"):
        DataConfig(val_negatives="stack")
    beyond = DataConfig(test_pool="beyond")
    assert DataConfig.from_dict(beyond.to_dict()) == beyond
    with pytest.raises(ValueError, match=r"DataConfig\.test_pool must be one of .*'open'"):
        DataConfig(test_pool="open")


def test_test_pool_beyond_takes_every_longer_string_and_keeps_the_rest_pooled():
    """Test strings longer than every training string are drawn whatever their pool (none can be
    a training or validation string); shorter ones still come from the test pool only."""
    from dyckbook.data.dataset import string_hash  # noqa: F401  (the pool's hash)

    base = DataConfig(k=2, max_length=16, test_max_length=32, n_train=600, n_val=40,
                      n_test=400, test_sets=("hard",))
    hashed, beyond = make_splits(base, 3), make_splits(replace(base, test_pool="beyond"), 3)
    for splits in (hashed, beyond):
        test = splits.tests["hard"]
        assert len(set(test.hashes().tolist())) == len(test)  # distinct
        assert not set(test.hashes().tolist()) & set(splits.train.hashes().tolist())
        assert not set(test.hashes().tolist()) & set(splits.val.hashes().tolist())
        assert set(range(18, 33, 2)) <= set(np.unique(test.lengths).tolist())
    # within the training lengths both draw from the same test pool: the strings a hashed split
    # may hold there are those its pool accepts, and the beyond split's short strings pass the
    # same check (the pool is a function of the seed's salt and the hash alone)
    short = beyond.tests["hard"].subset(np.flatnonzero(beyond.tests["hard"].lengths <= 16))
    pooled = hashed.tests["hard"].subset(np.flatnonzero(hashed.tests["hard"].lengths <= 16))
    assert len(short) and len(pooled)
    assert _in_test_pool(base, 3, short).all() and _in_test_pool(base, 3, pooled).all()
    longer = beyond.tests["hard"].subset(np.flatnonzero(beyond.tests["hard"].lengths > 16))
    assert not _in_test_pool(base, 3, longer).all()  # ~10% of them would be: many are not


def _in_test_pool(config, seed, data):
    from dyckbook.data import protocol as P

    streams = np.random.SeedSequence([seed, 0x5EED]).spawn(8)
    salt = int(streams[7].generate_state(1)[0])
    return P._pool_test(salt, config.held_out)(data.hashes(), P._TEST)


def test_val_negatives_hard_leaves_the_stack_set_out_of_validation():
    base = {"k": 3, "min_length": 30, "max_length": 48, "n_train": 100, "n_val": 80,
            "n_test": 1, "test_sets": ("random",)}
    auto = make_splits(DataConfig(**base), 0).val
    hard = make_splits(DataConfig(**base, val_negatives="hard"), 0).val
    assert "stack" in set(auto.kinds.astype(str))
    kinds = set(hard.kinds.astype(str))
    assert "stack" not in kinds and kinds - {MEMBER} <= set(N.HARD_KINDS)
    assert len(kinds - {MEMBER}) >= 2
