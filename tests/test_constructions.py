"""Tests for constructions: hand-set classifiers judged by the languages' own checker,
exhaustively on short strings and on the hard and long-range (stack / far) test sets."""

import numpy as np
import pytest
import torch

from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.data.protocol import balanced_sample, regime_lengths
from dyckbook.experiment import checkpoint, evaluate
from dyckbook.interp import constructions as C
from dyckbook.nn import kernels, tokenizer
from dyckbook.nn.model import Classifier, ModelConfig


def _balanced_skeletons(k: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every string of length n whose brackets, types ignored, are balanced (types all k^n)."""
    shapes, lengths = C.all_strings(1, n)
    shapes = shapes[lengths == n]
    heights = np.cumsum(np.where(shapes == 0, 1, -1), axis=1)
    shapes = shapes[(heights.min(1) >= 0) & (heights[:, -1] == 0)]
    types = np.indices((k,) * n).reshape(n, -1).T  # every assignment of k types to n symbols
    codes = (2 * types[None] + shapes[:, None]).reshape(-1, n).astype(np.uint8)
    return codes, np.full(len(codes), n)


def _accuracy(model: Classifier, language: Dyck, codes, lengths) -> float:
    data = Dataset.from_codes(language, codes, lengths)  # labels: the independent checker
    return float((evaluate.predict(model, data) == data.labels).mean())


def test_dyck1_counter_is_exact_on_every_string_up_to_14() -> None:
    model = C.dyck1_counter(14)
    assert model.config.n_layers == 1 and model.config.mask == "causal" and not model.training
    codes, lengths = C.all_strings(1, 14)
    assert len(lengths) == 2 ** 15 - 1
    assert _accuracy(model, Dyck(1), codes, lengths) == 1.0
    with kernels.torch_only():  # torch's attention and LayerNorm give the same decisions
        assert _accuracy(model, Dyck(1), codes, lengths) == 1.0


@pytest.mark.parametrize(("k", "depth", "every", "skeletons"),
                         [(2, 2, 8, 10), (3, 3, 6, 8), (1, 3, 12, 14)])
def test_dyck_kd_is_exact_on_every_short_string(k, depth, every, skeletons) -> None:
    """Every string up to ``every`` symbols, and every string of length ``skeletons`` whose
    skeleton is balanced (only types and depth decide those)."""
    model = C.dyck_kd(k, depth, skeletons)
    language = Dyck(k, depth)
    codes, lengths = C.all_strings(k, every)
    assert _accuracy(model, language, codes, lengths) == 1.0
    codes, lengths = _balanced_skeletons(k, skeletons)
    data = Dataset.from_codes(language, codes, lengths)
    assert 0 < data.labels.mean() < 1  # members, too deep and mismatched strings
    assert (evaluate.predict(model, data) == data.labels).all()


@pytest.mark.parametrize("regime", ["hard", "stack"])
def test_constructions_are_exact_on_the_hard_and_long_range_sets(regime) -> None:
    rng = np.random.default_rng(0)
    cases = [(Dyck(1), C.dyck1_counter(96)), (Dyck(3), C.dyck_kd(3, 48, 96)),
             (Dyck(3, 4), C.dyck_kd(3, 4, 96))]
    for language, model in cases:
        lengths = regime_lengths(language, regime, 2, 96 if regime == "stack" else 48)
        if not lengths:
            continue
        data = balanced_sample(language, regime, np.repeat(lengths, 3), 4, rng)
        assert (language.is_member((data.codes, data.lengths)) == data.labels).all()
        scored = evaluate.score(evaluate.predict(model, data), data)
        assert scored.correct == scored.n, (language.name, regime, scored.per_length)


def test_dyck_kd_rejects_words_deeper_than_its_bound() -> None:
    """Where it stops: Dyck-2 words deeper than D = 2 are rejected (they are not in Dyck-(2, 2));
    so as a Dyck-2 recogniser it fails exactly there. Longer strings than n_ctx do not fit."""
    model = C.dyck_kd(2, 2, 10)
    codes, lengths = C.all_strings(2, 10)
    deep = Dyck(2).is_member((codes, lengths)) & (Dyck(2).max_depths(codes, lengths) > 2)
    assert deep.sum() > 100
    data = Dataset.from_codes(Dyck(2), codes[deep], lengths[deep])
    assert data.labels.all() and not evaluate.predict(model, data).any()
    with pytest.raises(ValueError, match="n_ctx"):
        model(tokenizer.encode(*Dyck(2).alphabet.encode(["()" * 6])))


def test_a_perturbed_weight_breaks_exactness() -> None:
    """The tests can fail: one hand-set weight changed, 100% is lost."""
    counter = C.dyck1_counter(14)
    i, m = C.feature_index(1, None, positions=False)["tok4"], counter.config.d_model // 2
    with torch.no_grad():  # the closer's value -1 -> -0.9 (both halves of the stream it reads)
        counter.blocks[0].attn.qkv.weight[0, [i, i + m], 2 * counter.config.d_model] *= 0.9
    codes, lengths = C.all_strings(1, 14)
    assert _accuracy(counter, Dyck(1), codes, lengths) < 1.0
    matcher = C.dyck_kd(2, 2, 8)
    with torch.no_grad():  # query dim D + 2 (recency) off: a closer averages the types of all
        matcher.blocks[1].attn.qkv.weight[0, :, 2 + 2] = 0.0  # the openers one level up
    codes, lengths = _balanced_skeletons(2, 8)
    assert _accuracy(matcher, Dyck(2, 2), codes, lengths) < 1.0


def test_a_construction_is_an_ordinary_classifier(tmp_path) -> None:
    model = C.dyck_kd(2, 3, 16)
    assert isinstance(model, Classifier) and isinstance(model.config, ModelConfig)
    assert ModelConfig.from_dict(model.config.to_dict()) == model.config
    loaded = checkpoint.load_model(checkpoint.save_model(tmp_path / "model.pt", model))
    data = Dataset.from_strings(Dyck(2, 3), ["([])", "([)]", "[[[]]]", "(((())))", ""])
    assert evaluate.margins(loaded, data).tolist() == evaluate.margins(model, data).tolist()
    assert evaluate.predict(loaded, data).tolist() == [1, 0, 1, 0, 1]


def test_attention_finds_the_partner_and_counting_stays_below_half_a_step() -> None:
    language = Dyck(3, 3)
    model = C.dyck_kd(3, 3, 256)
    codes, lengths = language.sample_codes(np.random.default_rng(1), [256])
    _, cache = model.run_with_cache(tokenizer.encode(codes, lengths),
                                    names=["blocks.1.attn.hook_pattern"])
    pattern = cache["blocks.1.attn.hook_pattern"][0, 0]  # (query, key)
    closers = np.flatnonzero(codes[0, :256] % 2 == 1)
    partners = language.matching(codes, lengths)[0, closers]
    assert pattern[closers + 1, partners + 1].min() > 0.999
    mountain = Dyck(1).alphabet.encode(["(" * 512 + ")" * 512])
    assert C.counting_error(C.dyck1_counter(1024), *mountain)[0] < 0.01
    assert C.counting_error(C.dyck_kd(1, 2, 1024), *mountain)[0] < 0.01


def test_all_strings_enumerates_every_string_once() -> None:
    codes, lengths = C.all_strings(2, 3)
    words = Dyck(2).alphabet.decode(codes, lengths)
    assert len(words) == len(set(words)) == 1 + 4 + 16 + 64 and words[0] == ""
    assert Dyck(2).is_member((codes, lengths)).sum() == 1 + 2  # "", "()", "[]"


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="max_length"):
        C.dyck1_counter(0)
    with pytest.raises(ValueError, match="depth"):
        C.dyck_kd(2, 0, 8)
    with pytest.raises(ValueError, match="exceed"):
        C.all_strings(3, 12)
