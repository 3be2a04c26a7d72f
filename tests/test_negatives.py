"""Tests for dyckbook.negatives: verified non-members that keep every promise of their kind."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from reference_checker import is_dyck, is_locally_valid

from dyckbook.baselines import LocalRecogniser
from dyckbook.languages import Dyck, locally_valid, sample_lengths
from dyckbook.negatives import HARD_KINDS, NEGATIVE_KINDS, available_kinds, sample_negatives

LANGUAGES = [Dyck(1), Dyck(2), Dyck(3), Dyck(2, 1), Dyck(2, 2), Dyck(1, 3), Dyck(3, 3)]
IDS = [lang.name for lang in LANGUAGES]


def heights(lang: Dyck, s: str) -> list[int]:
    return list(itertools.accumulate(1 if c in lang.alphabet.symbols[::2] else -1 for c in s))


def check_hard(lang: Dyck, s: str, window: int | None) -> None:
    """Every promise of a hard negative, checked independently of the package."""
    assert len(s) % 2 == 0 and len(s) >= 4
    assert s[0] in lang.alphabet.symbols[::2] and s[-1] in lang.alphabet.symbols[1::2]
    for opener, closer in lang.pairs:
        assert s.count(opener) == s.count(closer)
    assert not is_dyck(s, lang.pairs, lang.max_depth)
    if lang.max_depth is not None:
        assert max(heights(lang, s)) <= lang.max_depth
    if window is not None and (2 * lang.k) ** window <= 4096:
        assert is_locally_valid(s, lang.pairs, lang.max_depth, window)
    elif window is not None:  # the reference would enumerate >= 10^5 words: the tested tables
        assert locally_valid(lang, *lang.alphabet.encode([s]), window)[0]


def draw(lang, seed, lengths, kinds="hard", window=None):
    codes, out_lengths, names = sample_negatives(
        lang, np.random.default_rng(seed), lengths, kinds, window
    )
    assert codes.dtype == np.uint8 and out_lengths.tolist() == list(lengths)
    assert names.shape == (len(lengths),)
    return lang.alphabet.decode(codes, out_lengths), names.tolist()


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_every_hard_kind_keeps_its_promises(lang, window):
    lengths = [4, 6, 8, 10, 12, 16, 22, 30, 64]
    for kind in HARD_KINDS:
        usable = [n for n in lengths if kind in available_kinds(lang, n, window=window)]
        if not usable:
            continue
        strings, names = draw(lang, 1, usable * 4, kind, window)
        assert names == [kind] * len(strings)
        for s in strings:
            check_hard(lang, s, window)


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("lang", LANGUAGES, ids=IDS)
def test_hard_mixture_uses_every_available_kind(lang, window):
    rng = np.random.default_rng(2)
    lengths = sample_lengths(rng, 300, 20, 40).tolist()
    if not available_kinds(lang, 30, window=window):  # nothing is non-local under D = 1
        assert lang.max_depth == 1 and window is not None
        with pytest.raises(ValueError, match="length"):
            draw(lang, 2, lengths, window=window)
        return
    strings, names = draw(lang, 2, lengths, window=window)
    for s in strings[:100]:
        check_hard(lang, s, window)
    assert set(names) == set(available_kinds(lang, 30, window=window))


def unswap(s: str, lang: Dyck) -> tuple[str, list[tuple[int, int]]]:
    """The skeleton's pairs whose types differ, and the string with their closers exchanged."""
    stack, wrong = [], []
    for j, c in enumerate(s):
        if c in lang.alphabet.symbols[::2]:
            stack.append(j)
        else:
            i = stack.pop()
            if lang.alphabet.symbols.index(c) != lang.alphabet.symbols.index(s[i]) + 1:
                wrong.append((i, j))
    assert len(wrong) == 2
    chars = list(s)
    (_, b), (_, d) = wrong
    chars[b], chars[d] = chars[d], chars[b]
    return "".join(chars), sorted(wrong)


@pytest.mark.parametrize("window", [None, 4])
def test_kind_shapes(window):
    lang = Dyck(3)
    for s in draw(lang, 3, [24] * 60, "crossing", window)[0]:
        word, [(a, _), (c, _)] = unswap(s, lang)
        assert is_dyck(word, lang.pairs) and c == a + 1  # a pair and its first child
    for s in draw(lang, 4, [24] * 60, "deep_mismatch", window)[0]:
        word, pairs = unswap(s, lang)
        assert is_dyck(word, lang.pairs)
        h = heights(lang, word)
        depth = {i: h[i] for i, c in enumerate(word) if c in "([{"}
        # parents: openers whose partner is not adjacent; the exchanged one is a deepest parent
        parents = [i for i, j in ((i, j) for i, j in pairs) if j > i + 1]
        all_parents = [i for i in depth if word[i + 1] in "([{"]
        assert any(depth[i] == max(depth[p] for p in all_parents) for i in parents)
    for s in draw(lang, 5, [24] * 60, "dip", window)[0]:
        assert min(heights(lang, s)) == -1
    for s in draw(lang, 6, [24] * 60, "rotation", window)[0]:
        assert any(is_dyck(s[r:] + s[:r], lang.pairs) for r in range(len(s)))
        assert min(heights(lang, s)) < 0


def test_random_kind():
    lang = Dyck(2, 2)
    lengths = list(range(1, 30)) * 5
    strings, names = draw(lang, 7, lengths, "random", window=4)  # window applies to hard kinds
    assert set(names) == {"random"} and not any(is_dyck(s, lang.pairs, 2) for s in strings)
    assert len(set(strings)) > len(strings) // 2
    with pytest.raises(ValueError, match="length 0"):
        draw(lang, 7, [0], "random")


def test_structural_availability():
    assert available_kinds(Dyck(1), 4) == ()
    assert available_kinds(Dyck(1), 6) == ("dip", "rotation", "swap")
    assert available_kinds(Dyck(2), 4) == ("swap", "crossing", "deep_mismatch")
    assert available_kinds(Dyck(2), 6) == HARD_KINDS
    assert available_kinds(Dyck(2, 1), 6) == ("dip", "swap")
    assert available_kinds(Dyck(3), 7) == () and available_kinds(Dyck(3), 2) == ()
    assert available_kinds(Dyck(3), 3, ["random", "dip"]) == ("random",)
    assert available_kinds(Dyck(3), 10**6, window=4) == HARD_KINDS  # beyond the probes


def test_dyck1_non_local_availability_matches_brute_force_existence():
    # brute force (tests/test_languages.py): non-local Dyck-1 negatives exist from length 10
    available = [n for n in range(4, 42, 2) if available_kinds(Dyck(1), n, window=4)]
    assert available == list(range(10, 42, 2))


@pytest.mark.parametrize("window", [4, 6])
@pytest.mark.parametrize("max_depth", [None, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_sampling_succeeds_exactly_where_available(k, max_depth, window):
    lang = Dyck(k, max_depth)
    lengths, kinds = [], []
    for n in range(4, 42, 2):
        avail = available_kinds(lang, n, window=window)
        if not avail:
            with pytest.raises(ValueError, match=f"length {n} "):
                sample_negatives(lang, np.random.default_rng(0), [n], window=window)
        lengths += [n] * len(avail)
        kinds += avail
        for kind in set(HARD_KINDS) - set(avail):
            with pytest.raises(ValueError, match=f"length {n} "):
                sample_negatives(lang, np.random.default_rng(0), [n], kind, window)
    for kind in set(kinds):
        chosen = [n for n, name in zip(lengths, kinds) if name == kind]
        strings, _ = draw(lang, 8, chosen, kind, window)
        for s in strings:
            check_hard(lang, s, window)


def balanced_accuracy_by_kind_and_length(lang, recogniser, lengths, window, rng):
    """{(kind, length): (accepted share of fresh members + rejected share of negatives) / 2}."""
    out = {}
    for n in lengths:
        kinds = available_kinds(lang, n, window=window)
        if not kinds:
            continue
        accepted = recogniser.predict(*lang.sample_codes(rng, [n] * 300)).mean()
        codes, lens, names = sample_negatives(lang, rng, [n] * (300 * len(kinds)), window=window)
        rejected = 1 - recogniser.predict(codes, lens)
        for kind in kinds:
            assert (names == kind).sum() >= 200
            out[kind, n] = (accepted + rejected[names == kind].mean()) / 2
    return out


@pytest.mark.parametrize(("k", "lo", "hi"), [(1, 10, 20), (3, 4, 16)])
def test_key_non_local_hard_set_defeats_a_4_local_recogniser(k, lo, hi):
    lang = Dyck(k)
    rng = np.random.default_rng(k)
    train = lang.sample_codes(rng, sample_lengths(rng, 8000, lo, hi))
    local = LocalRecogniser(lang, 4).fit(*train, np.ones(8000, dtype=np.int64))
    lengths = range(lo, hi + 1, 2)
    non_local = balanced_accuracy_by_kind_and_length(lang, local, lengths, 4, rng)
    assert {kind for kind, _ in non_local} == set(available_kinds(lang, hi, window=4))
    assert max(non_local.values()) <= 0.55, non_local
    # without the window the same recogniser sees through a clear majority of some kind
    local_regime = balanced_accuracy_by_kind_and_length(lang, local, lengths, None, rng)
    assert max(local_regime.values()) >= 0.75, local_regime


def test_determinism():
    lang = Dyck(3)
    lengths = [4, 10, 10, 16, 64, 200]
    for window in (None, 4):
        lengths_w = lengths if window is None else lengths[1:]
        a = sample_negatives(lang, np.random.default_rng(5), lengths_w, window=window)
        b = sample_negatives(lang, np.random.default_rng(5), lengths_w, window=window)
        c = sample_negatives(lang, np.random.default_rng(6), lengths_w, window=window)
        assert a[0].tobytes() == b[0].tobytes() and a[2].tolist() == b[2].tolist()
        assert a[0].tobytes() != c[0].tobytes()


@pytest.mark.parametrize("window", [None, 4])
def test_long_lengths(window):
    lang = Dyck(3)
    strings, names = draw(lang, 9, [1024] * 6 + [4094] * 2, window=window)
    for s in strings:
        check_hard(lang, s, window)
    assert len(set(names)) >= 3


def test_registry():
    assert HARD_KINDS == ("dip", "rotation", "swap", "crossing", "deep_mismatch")
    assert list(NEGATIVE_KINDS) == ["random", *HARD_KINDS]
    for name, kind in NEGATIVE_KINDS.items():
        assert kind.name == name and kind.description.endswith(".")
        assert kind.hard == (name != "random")
        assert kind.min_k == (2 if name in ("crossing", "deep_mismatch") else 1)


def test_empty_request():
    codes, lengths, names = sample_negatives(Dyck(2), np.random.default_rng(0), [])
    assert codes.shape == (0, 0) and lengths.shape == names.shape == (0,)


def test_bad_arguments():
    lang, rng = Dyck(2), np.random.default_rng(0)
    for kwargs, match in [
        ({"kinds": "easy"}, "kinds"),
        ({"kinds": ["dip", "nope"]}, "kinds"),
        ({"kinds": []}, "kinds"),
        ({"window": 1}, "window"),
        ({"window": 4.0}, "window"),
        ({"window": True}, "window"),
    ]:
        with pytest.raises(ValueError, match=match):
            sample_negatives(lang, rng, [8], **kwargs)
    with pytest.raises(ValueError, match="rng"):
        sample_negatives(lang, 0, [4])
    with pytest.raises(ValueError, match="language"):
        sample_negatives("Dyck-2", rng, [4])
    with pytest.raises(ValueError, match=r"lengths\[1\] = -4"):
        sample_negatives(lang, rng, [4, -4])
    with pytest.raises(ValueError, match="length 7 "):
        sample_negatives(lang, rng, [7])
    with pytest.raises(ValueError, match="length"):
        available_kinds(lang, -1)
    with pytest.raises(ValueError, match="k=8 and width=9"):
        sample_negatives(Dyck(8), rng, [20], window=9)
