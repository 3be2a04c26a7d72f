"""Tests for explain: hand-built patterns, brute-force loops and tiny real models."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.interp import explain as E
from dyckbook.nn import tokenizer
from dyckbook.nn.model import ClassificationTask, Classifier, ModelConfig
from dyckbook.nn.thesis_model import ThesisClassifier, ThesisModelConfig

LANG = Dyck(2)


def stack_partners(s: str, symbols: str) -> list[int]:
    """Partner of every symbol of a member by an explicit Python stack (independent oracle)."""
    out, stack = [-1] * len(s), []
    for i, ch in enumerate(s):
        if symbols.index(ch) % 2 == 0:
            stack.append(i)
        else:
            j = stack.pop()
            out[i], out[j] = j, i
    return out


def make_dataset(seed: int = 0, n_members: int = 12, n_random: int = 8, longest: int = 12,
                 language: Dyck = LANG) -> Dataset:
    """Members of varied lengths plus random strings (mostly non-members): pads everywhere."""
    rng = np.random.default_rng(seed)
    members = language.sample(rng, 2 * rng.integers(1, longest // 2 + 1, n_members))
    symbols = list(language.alphabet.symbols)
    randoms = ["".join(rng.choice(symbols, int(n))) for n in rng.integers(1, longest, n_random)]
    return Dataset.from_strings(language, members + randoms)


def tiny(mask: str = "bidirectional", readout: str = "start", **kw) -> Classifier:
    config = ModelConfig(k=2, n_ctx=16, d_model=16, d_mlp=32, n_heads=2, n_layers=2, dropout=0.0,
                         mask=mask, readout=readout, pos_encoding="learned", **kw)
    return Classifier(config, [3])


@pytest.fixture(scope="module")
def data() -> Dataset:
    return make_dataset()


# -------------------------------------------------------------------------------------------
# patterns from the model
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_patterns_are_distributions_over_visible_keys(data: Dataset, mask: str) -> None:
    p = E.attention_patterns(tiny(mask), data)
    n_pos = data.codes.shape[1] + 2
    assert p.shape == (2, len(data), 2, n_pos, n_pos) and p.dtype == np.float32
    visible = E.visible_keys(data.lengths, n_pos, mask)
    real = np.arange(n_pos)[None, :] < data.lengths[:, None] + 2  # (batch, query)
    rows = p.sum(-1)  # (layer, batch, head, query)
    np.testing.assert_allclose(rows.transpose(0, 2, 1, 3)[:, :, real], 1.0, atol=1e-5)
    hidden = np.broadcast_to((~visible & real[:, :, None])[None, :, None], p.shape)
    assert np.all(p[hidden] == 0.0)
    assert np.all(p[np.broadcast_to(visible[None, :, None], p.shape)] > 0.0)  # softmax: > 0
    assert mask == "bidirectional" or np.all(np.triu(p, 1) == 0.0)  # no future key, ever


def test_patterns_equal_run_with_cache_in_any_chunking(data: Dataset) -> None:
    model = tiny("causal")
    tokens = tokenizer.encode(data.codes, data.lengths, data.codes.shape[1])
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    want = np.stack([cache[f"blocks.{l}.attn.hook_pattern"].numpy() for l in range(2)])
    model.train()
    np.testing.assert_allclose(E.attention_patterns(model, data, batch_size=3), want, atol=1e-6)
    np.testing.assert_allclose(E.attention_patterns(model, tokens), want, atol=1e-6)
    assert model.training  # the caller's mode comes back


def test_patterns_are_eval_mode_even_with_dropout(data: Dataset) -> None:
    config = ModelConfig(k=2, n_ctx=16, d_model=16, d_mlp=32, n_heads=2, dropout=0.5)
    model = Classifier(config, [1]).train()
    np.testing.assert_array_equal(E.attention_patterns(model, data),
                                  E.attention_patterns(model, data))


def test_the_thesis_port_is_read_through_its_own_forward_pass(data: Dataset) -> None:
    config = ThesisModelConfig(k=2, n_ctx=16, d_model=16, d_mlp=32, n_heads=2,
                               pos_encoding="sinusoidal")
    model = ThesisClassifier(config, seed=4)
    tokens = tokenizer.encode(data.codes, data.lengths, data.codes.shape[1])
    want = np.stack([p.numpy() for p in model.attention_patterns(tokens)])
    got = E.attention_patterns(model, data, batch_size=7)
    np.testing.assert_allclose(got, want, atol=1e-6)
    wrong = np.stack([p.numpy() for p in model.thesis_attention_patterns(tokens)])
    assert not np.allclose(got[1], wrong[1], atol=1e-3)  # the library's read-out differs
    assert E.head_movement(model) == 0.0
    with torch.no_grad():
        model.classifier.bias.copy_(torch.tensor([-50.0, 50.0]))  # "member" for everything
    assert E.head_movement(model) > 0
    assert E.head_reset_accuracy(model, data) == E.head_reset_accuracy(
        ThesisClassifier(config, seed=4), data)
    assert model.classifier.bias[1] == 50.0  # the model itself is untouched
    with pytest.raises(ValueError, match="model must be"):
        E.attention_patterns(nn.Linear(2, 2), data)
    with pytest.raises(ValueError, match="data must be"):
        E.attention_patterns(model, data.codes)


# -------------------------------------------------------------------------------------------
# structure: partners and heuristics
# -------------------------------------------------------------------------------------------


def test_partner_positions_match_a_python_stack(data: Dataset) -> None:
    partner = E.partner_positions(data)
    symbols = LANG.alphabet.symbols
    assert partner.shape == (len(data), data.codes.shape[1] + 2)
    for row, (s, label) in enumerate(zip(data.strings(), data.labels)):
        want = [-1] * partner.shape[1]
        if label:
            want[1:len(s) + 1] = [j + 1 for j in stack_partners(s, symbols)]
        assert partner[row].tolist() == want


def test_recent_openers_by_brute_force(data: Dataset) -> None:
    recent = E.recent_openers(data)
    symbols = LANG.alphabet.symbols
    for row, s in enumerate(data.strings()):
        for i, ch in enumerate(s):
            want = -1
            if symbols.index(ch) % 2:
                earlier = [j for j in range(i) if s[j] == symbols[symbols.index(ch) - 1]]
                want = earlier[-1] + 1 if earlier else -1
            assert recent[row, i + 1] == want, (s, i)
        assert np.all(recent[row, len(s) + 1:] == -1) and recent[row, 0] == -1


def hand_pattern(data: Dataset, key: np.ndarray) -> np.ndarray:
    """(1, batch, 1, pos, pos): every query puts all its mass on ``key[b, q]`` (itself if -1)."""
    n = key.shape[1]
    p = np.zeros((1, len(data), 1, n, n))
    b, q = np.indices(key.shape)
    p[0, b, 0, q, np.where(key >= 0, key, q)] = 1.0
    return p


def test_all_mass_on_the_partner_or_the_previous_token(data: Dataset) -> None:
    partner = E.partner_positions(data)
    ms = E.matching_scores(hand_pattern(data, partner), data)
    assert ms.partner[0, 0] == 1.0 and ms.partner_hard[0, 0] == 1.0
    assert ms.previous[0, 0] == pytest.approx(ms.previous_share)  # the previous IS the partner
    assert ms.recent_opener[0, 0] == pytest.approx(ms.recent_share)
    previous = np.broadcast_to(np.arange(partner.shape[1]) - 1, partner.shape)
    ms = E.matching_scores(hand_pattern(data, previous), data)
    assert ms.previous[0, 0] == 1.0
    assert ms.partner[0, 0] == pytest.approx(ms.previous_share)
    assert ms.partner_hard[0, 0] == 0.0


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_matching_scores_against_loops(mask: str) -> None:
    data = make_dataset(seed=5, n_members=30, longest=14)
    rng = np.random.default_rng(0)
    n = data.codes.shape[1] + 2
    p = rng.random((2, len(data), 3, n, n)) * E.visible_keys(data.lengths, n, mask)[:, None]
    p /= np.maximum(p.sum(-1, keepdims=True), 1e-12)
    ms = E.matching_scores(p, data, mask)
    symbols = LANG.alphabet.symbols
    rows = {"partner": [], "previous": [], "recent": [], "hard": [], "uniform": []}
    for b, (s, label) in enumerate(zip(data.strings(), data.labels)):
        if not label:
            continue
        m = stack_partners(s, symbols)
        for i, ch in enumerate(s):
            if symbols.index(ch) % 2 == 0:
                continue
            recent = max(j for j in range(i) if s[j] == symbols[symbols.index(ch) - 1])
            q = i + 1
            rows["partner"].append(p[:, b, :, q, m[i] + 1])
            rows["previous"].append((p[:, b, :, q, q - 1], m[i] == i - 1))
            rows["recent"].append((p[:, b, :, q, recent + 1], m[i] == recent))
            rows["hard"].append(m[i] != i - 1 and m[i] != recent)
            rows["uniform"].append(1 / (q + 1 if mask == "causal" else len(s) + 2))
    hard = np.array(rows["hard"])
    partner = np.array(rows["partner"])
    assert ms.n_closers == len(hard) and ms.n_hard == hard.sum() > 0
    np.testing.assert_allclose(ms.partner, partner.mean(0))
    np.testing.assert_allclose(ms.partner_hard, partner[hard].mean(0))
    np.testing.assert_allclose(ms.previous, np.mean([v for v, _ in rows["previous"]], 0))
    np.testing.assert_allclose(ms.recent_opener, np.mean([v for v, _ in rows["recent"]], 0))
    assert ms.previous_share == pytest.approx(np.mean([ok for _, ok in rows["previous"]]))
    assert ms.recent_share == pytest.approx(np.mean([ok for _, ok in rows["recent"]]))
    assert ms.uniform == pytest.approx(np.mean(rows["uniform"]))
    assert ms.uniform_hard == pytest.approx(np.mean(np.array(rows["uniform"])[hard]))
    assert ms.to_dict()["n_closers"] == ms.n_closers
    assert np.array(ms.to_dict()["partner"]).shape == (2, 3)


def test_matching_scores_reject_bad_input(data: Dataset) -> None:
    p = np.zeros((1, len(data), 1, data.codes.shape[1] + 2, data.codes.shape[1] + 2))
    with pytest.raises(ValueError, match="mask"):
        E.matching_scores(p, data, "sideways")
    with pytest.raises(ValueError, match="patterns must be"):
        E.matching_scores(p[:, :3], data)
    non_members = data.subset(data.labels == 0)
    with pytest.raises(ValueError, match="no member"):
        E.matching_scores(p[:, data.labels == 0], non_members)


def test_a_dyck1_string_with_only_adjacent_pairs_has_no_hard_closer() -> None:
    data = Dataset.from_strings(Dyck(1), ["()()()", "(())"])
    ms = E.matching_scores(hand_pattern(data, E.partner_positions(data)), data)
    assert ms.previous_share == pytest.approx(4 / 5) and ms.n_hard == 1
    only_adjacent = data.subset([0])
    ms = E.matching_scores(hand_pattern(only_adjacent, E.partner_positions(only_adjacent)),
                           only_adjacent)
    assert ms.n_hard == 0 and np.isnan(ms.partner_hard).all() and np.isnan(ms.uniform_hard)


# -------------------------------------------------------------------------------------------
# scaling, preview, ROC
# -------------------------------------------------------------------------------------------


def test_minmax_scale_maps_visible_extremes_and_keeps_the_mask() -> None:
    rng = np.random.default_rng(1)
    p = rng.random((2, 3, 5, 5))
    hidden = np.triu(np.ones((5, 5), bool), 1)
    out = E.minmax_scale(p, hidden)
    assert np.array_equal(out.mask, np.broadcast_to(hidden, p.shape))
    assert np.allclose(out.min(axis=(-2, -1)), -1) and np.allclose(out.max(axis=(-2, -1)), 1)
    assert np.all(E.minmax_scale(np.full((4, 4), 0.25)) == 0)
    with pytest.raises(ValueError, match="pattern"):
        E.minmax_scale(np.ones(3))


def test_end_self_attention_reads_the_end_diagonal(data: Dataset) -> None:
    rng = np.random.default_rng(2)
    n = data.codes.shape[1] + 2
    p = rng.random((2, len(data), 3, n, n))
    out = E.end_self_attention(p, data.lengths)
    for b, length in enumerate(data.lengths):
        np.testing.assert_array_equal(out[:, b], p[:, b, :, length + 1, length + 1])


def pairwise_auc(s: np.ndarray, y: np.ndarray) -> float:
    pos, neg = s[y == 1], s[y == 0]
    return float(((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum())
                 / (pos.size * neg.size))


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_is_the_pairwise_definition_with_ties(seed: int) -> None:
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, 60)
    y[:2] = [0, 1]
    s = rng.integers(0, 6, 60).astype(float)  # many ties
    assert E.roc_auc(s, y) == pytest.approx(pairwise_auc(s, y))
    fpr, tpr = E.roc_curve(s, y)
    assert (fpr[0], tpr[0], fpr[-1], tpr[-1]) == (0, 0, 1, 1)
    assert np.all(np.diff(fpr) >= 0) and np.all(np.diff(tpr) >= 0)
    # the trapezoids under the tie-step curve count ties one half, as the AUC does
    assert np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2) == pytest.approx(E.roc_auc(s, y))


def test_roc_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="both classes"):
        E.roc_auc([1.0, 2.0], [1, 1])
    with pytest.raises(ValueError, match="0/1"):
        E.roc_auc([1.0, 2.0], [0, 2])
    with pytest.raises(ValueError, match="NaN"):
        E.roc_curve([np.nan, 2.0], [0, 1])


def test_preview_auc_is_the_auc_of_the_last_layers_end_self_attention(data: Dataset) -> None:
    model = tiny()
    p = E.attention_patterns(model, data)
    score = np.array([p[-1, b, :, n + 1, n + 1].mean() for b, n in enumerate(data.lengths)])
    np.testing.assert_allclose(E.preview_scores(model, data), score, rtol=1e-6)
    assert E.preview_auc(model, data) == pytest.approx(pairwise_auc(score, data.labels))


# -------------------------------------------------------------------------------------------
# the classifier head
# -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trained() -> tuple[Classifier, Dataset]:
    data = make_dataset(seed=9, n_members=40, n_random=40)
    model = tiny("causal", "end")
    train(model, ClassificationTask(), [data], None, TrainConfig(lr=1e-2, max_steps=30))
    return model, data


def test_head_reset_accuracy_leaves_the_model_and_matches_a_copied_head(trained) -> None:
    model, data = trained
    before = {k: v.clone() for k, v in model.state_dict().items()}
    accuracy = E.head_reset_accuracy(model, data)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    initial = Classifier(model.config, model.seeds)
    copy = Classifier(model.config, model.seeds)
    copy.load_state_dict(before)
    with torch.no_grad():
        copy.classifier.weight.copy_(initial.classifier.weight)
        copy.classifier.bias.copy_(initial.classifier.bias)
    copy.eval()
    with torch.no_grad():
        logits = copy(tokenizer.encode(data.codes, data.lengths))
    want = float(((logits[:, 1] > logits[:, 0]).numpy() == data.labels).mean())
    assert accuracy == pytest.approx(want)
    with torch.no_grad():  # a trained bias that says "member" to everything is reset too
        copy.load_state_dict(before)
        copy.classifier.bias.copy_(torch.tensor([[-50.0, 50.0]]))
    assert E.head_reset_accuracy(copy, data) == pytest.approx(accuracy)


def test_head_movement_is_the_relative_norm_change(trained) -> None:
    model, _ = trained
    assert E.head_movement(tiny("causal", "end")) == 0.0
    initial = Classifier(model.config, model.seeds)
    w0, w = (torch.cat([m.classifier.weight.flatten(), m.classifier.bias.flatten()]).detach()
             for m in (initial, model))
    want = float((w - w0).norm() / w0.norm())
    assert want > 0 and E.head_movement(model) == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="single-model Classifier"):
        E.head_movement(Classifier(model.config, [0, 1]))


# -------------------------------------------------------------------------------------------
# long inputs
# -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_long_input_summary_against_brute_force(mask: str) -> None:
    data = make_dataset(seed=3, n_members=3, n_random=1, longest=40)
    i = int(np.argmax(data.lengths * data.labels))
    n = int(data.lengths[i]) + 2
    rng = np.random.default_rng(4)
    full = rng.random((n + 3, n + 3)) * E.visible_keys(data.lengths[[i]], n + 3, mask)[0]
    full /= np.maximum(full.sum(-1, keepdims=True), 1e-12)
    s = E.long_input_summary(full, data, i, mask, max_blocks=7)
    p = full[:n, :n]
    n_bins = int(np.ceil(np.log2(n)))
    mass, uniform = np.zeros(2 * n_bins + 1), np.zeros(2 * n_bins + 1)
    for q in range(n):
        for k in range(n):
            d = k - q
            j = n_bins if d == 0 else n_bins + int(np.sign(d)) * (1 + int(np.log2(abs(d))))
            mass[j] += p[q, k] / n
            if mask == "bidirectional" or k <= q:
                uniform[j] += 1 / (n if mask == "bidirectional" else q + 1) / n
    np.testing.assert_allclose(s.offset_mass, mass, atol=1e-12)
    np.testing.assert_allclose(s.uniform_mass, uniform, atol=1e-12)
    assert s.uniform_mass.sum() == pytest.approx(1.0) and s.offset_mass.sum() == pytest.approx(1)
    string = data.strings()[i]
    m = stack_partners(string, LANG.alphabet.symbols)
    closers = [j for j, ch in enumerate(string) if ch in ")]"]
    want = np.full(n, np.nan)
    want[[j + 1 for j in closers]] = [p[j + 1, m[j] + 1] for j in closers]
    np.testing.assert_array_equal(s.partner_mass, want)
    levels = [0] + [string[:j + 1].count("(") + string[:j + 1].count("[")
                    - string[:j].count(")") - string[:j].count("]") for j in range(n - 2)] + [0]
    assert s.levels.tolist() == levels
    for level, value in enumerate(s.partner_by_level, start=1):
        rows = [j + 1 for j in closers if levels[j + 1] == level]
        assert value == pytest.approx(np.mean([p[q, m[q - 1] + 1] for q in rows]))
    assert len(s.block_edges) == 8 and s.block_edges[-1] == n
    e = s.block_edges
    assert s.block_max[2, 3] == p[e[2]:e[3], e[3]:e[4]].max()
    np.testing.assert_array_equal(1.0 / s.visible, [1 / n] * n if mask == "bidirectional"
                                  else 1.0 / np.arange(1, n + 1))


def test_long_input_summary_at_a_thousand_tokens_is_cheap() -> None:
    language = Dyck(1)
    data = Dataset.from_codes(language, *language.sample_codes(np.random.default_rng(0), [1000]))
    p = np.tril(np.ones((1002, 1002))) / np.arange(1, 1003)[:, None]  # uniform causal
    s = E.long_input_summary(p, data, 0, "causal")
    np.testing.assert_allclose(s.offset_mass, s.uniform_mass, atol=1e-12)
    assert s.block_max.shape == (256, 256) and s.offset_edges[-1] >= 1002
    with pytest.raises(ValueError, match="pattern must be"):
        E.long_input_summary(p[:10], data, 0)


def test_a_measures_interval_is_the_same_on_the_explainability_page_and_in_the_verdicts():
    """Issue 64: the head-reset drop read "-0.001 [0.000, 0.001]" on one page (clipped to an
    accuracy's [0, 1]) and another interval in the verdict chapter. Both now use the measure's
    own bounds (``verdicts.MEASURE_BOUNDS``)."""
    from dyckbook.chapters import explainability
    from dyckbook.claims import verdicts

    drops = [-0.002, -0.0005, 0.0, 0.001, -0.001]
    evidence = {"head_reset_drop": drops, "partner_attention": [0.4, 0.5, 0.45, 0.52, 0.48],
                "preview_auc": [0.7, 0.8, 0.75, 0.9, 0.85]}
    said = explainability.explain_sentences(evidence)
    judged = verdicts.gather(explain=evidence)["head_reset_drop"]
    lo, hi = judged.interval
    assert lo < 0 < hi and lo <= judged.mean <= hi
    assert f"{judged.mean:.3f} [{lo:.3f}, {hi:.3f}] over 5 models" in said
    row = explainability.measure_rows({"m": [{**{n: 0.5 for n in (
        "accuracy", "partner_attention", "uniform_hard", "previous_share", "recent_share",
        "preview_auc", "head_movement")}, "head_reset_drop": d} for d in drops]})[0]
    assert row["head reset drop"] == f"{judged.mean:.3f} [{lo:.3f}, {hi:.3f}]"


def test_the_attention_verdict_reads_each_language_and_says_when_none_of_its_models_learned():
    """Issue 64: the pooled rule kept Dyck-1's models only (no Dyck-3 model reached the bar)
    and still spoke for both. Each language is judged on its own models that learned; a
    language with none is "not testable", its models' attention shown."""
    from dyckbook.chapters.explainability import explain_evidence
    from dyckbook.claims.verdicts import NOT_TESTABLE, gather, verdicts

    def m(accuracy, partner):
        return {"accuracy": accuracy, "partner_attention": partner, "preview_auc": 0.8,
                "head_reset_drop": 0.0, "previous_share": 0.5, "recent_share": 0.5,
                "uniform_hard": 0.04}

    measures = {"Dyck-1": [m(0.99, 0.12), m(0.98, 0.13), m(0.97, 0.14), m(0.6, 0.9)],
                "Dyck-3": [m(0.6, 0.55), m(0.7, 0.5)]}
    evidence = json.loads(json.dumps(explain_evidence(measures)))  # as evidence.json holds it
    assert evidence["by_k"]["1"]["learned"] == 3 and evidence["by_k"]["3"]["learned"] == 0
    found = gather(explain=evidence)
    assert found["partner_attention_k1"].values == (0.12, 0.13, 0.14)  # those that learned
    assert found["partner_attention_k3"].values == (0.55, 0.5)  # none learned: every model
    assert found["learned_share_k3"].values == (0.0,) and found["uniform_partner_k1"].reference
    labels = {v.rule.claim: v.label for v in verdicts(found)}
    assert labels["attention_k1"] == "refuted" and labels["attention_k3"] == NOT_TESTABLE
