"""Tests of dyckbook.probes: probe oracles, prefix targets against a reduction checker, ablations by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dyckbook.data import DatasetSpec, generate_dataset, make_loader
from dyckbook.languages import Dyck
from dyckbook.model import ModelConfig, TransformerClassifier
from dyckbook.probes import (
    ablate_heads,
    ablation_hooks,
    collect_residuals,
    default_hooks,
    fit_linear_probe,
    head_ablation_effects,
    head_means,
    prefix_targets,
    probe_all,
)
from dyckbook.tokenizer import DyckTokenizer

torch.set_num_threads(1)


# ------------------------------------------------------------------------------ probes


def test_ridge_recovers_a_planted_linear_signal() -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 12))
    y = X @ rng.normal(size=12) + 3.0
    res = fit_linear_probe(X, y, "regression", l2=1e-8, seed=1)
    assert res.test_score == pytest.approx(1.0, abs=1e-6)
    assert res.train_score == pytest.approx(1.0, abs=1e-6)
    assert abs(res.baseline_test) < 0.05  # the mean predictor explains nothing
    assert res.n_train + res.n_test == 600 and res.n_features == 12


def test_ridge_on_noise_is_near_the_baseline() -> None:
    rng = np.random.default_rng(1)
    X, y = rng.normal(size=(800, 10)), rng.normal(size=800)
    res = fit_linear_probe(X, y, "regression", l2=1e-3, seed=0)
    assert res.test_score < 0.05
    assert res.test_score - res.baseline_test < 0.05


def test_logistic_recovers_a_planted_boundary_and_not_noise() -> None:
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1000, 8))
    y = (X @ rng.normal(size=8) > 0.3).astype(int)
    res = fit_linear_probe(X, y, "classification", l2=1e-4, seed=0, steps=400)
    assert res.test_score > 0.97
    noise = fit_linear_probe(X, rng.integers(0, 2, 1000), "classification", seed=0)
    assert abs(noise.test_score - 0.5) < 0.08
    assert 0.4 < noise.baseline_test < 0.6  # the majority class of balanced noise


def test_probe_is_deterministic_and_groups_never_straddle() -> None:
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(300, 5)), rng.integers(0, 3, 300)
    groups = np.repeat(np.arange(30), 10)
    a = fit_linear_probe(X, y, "classification", seed=7, groups=groups)
    b = fit_linear_probe(X, y, "classification", seed=7, groups=groups)
    assert a == b
    assert a.n_test % 10 == 0 and a.n_train % 10 == 0  # whole groups only


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "ordinal"}, "kind"), ({"l2": -1.0}, "l2"), ({"test_fraction": 1.0}, "test_fraction"),
    ({"steps": 0}, "steps"),
])
def test_probe_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    X, y = np.zeros((10, 2)), np.arange(10) % 2
    with pytest.raises(ValueError, match=message):
        fit_linear_probe(X, y, **{"kind": "classification", **kwargs})


# ------------------------------------------------------------------------------ targets


def _reduce_valid_prefix(s: str, pairs: str) -> bool:
    """Independent oracle: delete adjacent matched pairs until none is left; a valid prefix
    leaves openers only."""
    matched = [pairs[i:i + 2] for i in range(0, len(pairs), 2)]
    changed = True
    while changed:
        changed = False
        for m in matched:
            if m in s:
                s = s.replace(m, "")
                changed = True
    openers = set(pairs[0::2])
    return all(c in openers for c in s)


def test_prefix_targets_agree_with_independent_checkers() -> None:
    lang = Dyck(3)
    rng = np.random.default_rng(4)
    strings = lang.sample(rng, [0, 2, 6, 10, 14])
    strings += ["".join(rng.choice(list(lang.alphabet), n)) for n in (1, 3, 7, 12, 16)]
    strings += ["([)]", "(()", ")(", "[]]["]
    codes, lengths = lang.encode(strings)
    depth, balanced = prefix_targets(codes, lengths)
    for b, s in enumerate(strings):
        n = len(s)
        expected_depth = np.cumsum([1 if c in lang.alphabet[0::2] else -1 for c in s])
        assert depth[b, :n].tolist() == list(expected_depth)
        assert balanced[b, :n].tolist() == [_reduce_valid_prefix(s[:i + 1], lang.alphabet)
                                            for i in range(n)]
        assert not depth[b, n:].any() and not balanced[b, n:].any()
        if n:  # a member is exactly a valid prefix ending at depth 0
            assert (balanced[b, n - 1] and depth[b, n - 1] == 0) == lang.is_member(s)


# ------------------------------------------------------------------------------ models


def _model(n_heads: int = 2, n_layers: int = 2, mask: str = "bidirectional",
           readout: str = "start", seed: int = 0) -> TransformerClassifier:
    cfg = ModelConfig(d_vocab=9, n_ctx=16, d_model=16, n_heads=n_heads, d_mlp=32,
                      n_layers=n_layers, dropout=0.0, mask=mask, pos_encoding="learned",
                      readout=readout)
    return TransformerClassifier(cfg, generator=torch.Generator().manual_seed(seed)).eval()


def _batches(n: int = 64, k: int = 3, seed: int = 0, batch_size: int = 32) -> list[dict]:
    ds = generate_dataset(DatasetSpec(k=k, n=n, min_length=4, max_length=16, seed=seed))
    return list(make_loader(ds, batch_size, tokenizer=DyckTokenizer(ds.alphabet)))


def test_collect_residuals_shapes_targets_and_readout() -> None:
    model = _model(readout="end")
    batches = _batches()
    data = collect_residuals(model, batches)
    assert data.hooks == default_hooks(model)
    n_tokens = int(sum(b["lengths"].sum() for b in batches))
    assert data.n_tokens == n_tokens and data.n_strings == 64
    for h in data.hooks:
        assert data.token_features[h].shape == (n_tokens, 16)
        assert data.string_features[h].shape == (64, 16)
    # the last hook read out at [end] is what the classifier sees
    readout = torch.cat([model.run_with_cache(b["tokens"])[1]["hook_readout"] for b in batches])
    np.testing.assert_allclose(data.string_features[data.hooks[-1]], readout.numpy(), atol=1e-6)
    # per-string membership equals "balanced at the last position and depth 0"
    last = np.flatnonzero(np.diff(np.append(data.string_index, -1)) != 0)
    member = data.balanced[last] & (data.depth[last] == 0)
    assert member.astype(int).tolist() == data.membership.tolist()
    results = probe_all(data, seed=0)
    assert set(results) == {"depth", "balanced", "membership"}
    assert all(set(r) == set(data.hooks) for r in results.values())


def _forward_by_hand(model: TransformerClassifier, tokens: torch.Tensor, layer: int,
                     head: int, replacement: torch.Tensor | None) -> torch.Tensor:
    """Recompute the logits with head ``head`` of ``layer`` set to ``replacement`` (None: 0),
    using the cache for everything before that layer's output projection (no pads, eval)."""
    _, cache = model.run_with_cache(tokens)
    x = cache[f"blocks.{layer}.hook_resid_pre"]
    z = cache[f"blocks.{layer}.attn.hook_z"].clone()  # (batch, pos, head, d_head)
    z[:, :, head] = 0.0 if replacement is None else replacement
    block = model.blocks[layer]
    attn_out = block.attn.out(z.flatten(2))
    mid = block.ln1(x + attn_out)  # post-LN
    post = block.ln2(mid + block.mlp(mid, None, ""))
    for later in range(layer + 1, model.config.n_layers):
        post = model.blocks[later](post, None, model.config.mask == "causal", None, later, None)
    return model.classifier(post[:, 0])


@pytest.mark.parametrize("layer, head", [(0, 0), (0, 1), (1, 1)])
def test_zero_ablation_equals_the_forward_pass_by_hand(layer: int, head: int) -> None:
    model = _model()
    tokens = DyckTokenizer(Dyck(3)).encode(["([]{})", "(((]]]", "[][][]", ")()()("])
    got = ablate_heads(model, tokens, [(layer, head)])
    with torch.no_grad():
        want = _forward_by_hand(model, tokens, layer, head, None)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert not torch.allclose(got, model(tokens), atol=1e-6)  # the head does something


def test_mean_ablation_equals_the_forward_pass_by_hand() -> None:
    model = _model()
    tokens = DyckTokenizer(Dyck(3)).encode(["([]{})", "(((]]]", "[][][]", ")()()("])
    means = head_means(model, [{"tokens": tokens}])
    _, cache = model.run_with_cache(tokens)
    z = cache["blocks.0.attn.hook_z"]  # no pads: every position is real
    np.testing.assert_allclose(means[0], z.mean(dim=(0, 1)).numpy(), atol=1e-6)
    got = ablate_heads(model, tokens, [(0, 1)], mode="mean", means=means)
    with torch.no_grad():
        want = _forward_by_hand(model, tokens, 0, 1, torch.from_numpy(means[0, 1]))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ablate_heads(model, tokens, [(0, 1)], mode="mean"), got)


def test_ablating_nothing_changes_nothing_and_hooks_are_removed() -> None:
    model = _model(mask="causal", readout="mean")
    batch = _batches(32, batch_size=32)[0]  # padded rows
    plain = model(batch["tokens"])
    torch.testing.assert_close(ablate_heads(model, batch["tokens"], []), plain, rtol=0, atol=0)
    ablated = ablate_heads(model, batch["tokens"], [(1, 0), (1, 1)])
    assert not torch.allclose(ablated, plain)
    with pytest.raises(RuntimeError), ablation_hooks(model, [(0, 0)]):
        raise RuntimeError("boom")
    torch.testing.assert_close(model(batch["tokens"]), plain, rtol=0, atol=0)  # hooks gone
    with pytest.raises(ValueError, match="head"):
        ablate_heads(model, batch["tokens"], [(2, 0)])
    with pytest.raises(ValueError, match="mode"):
        ablate_heads(model, batch["tokens"], [(0, 0)], mode="resample")


def test_head_ablation_effects_are_consistent_and_deterministic() -> None:
    model = _model()
    batches = _batches(96, seed=1)
    eff = head_ablation_effects(model, batches)
    assert eff.labels == ["L0H0", "L0H1", "L0 all heads", "L1H0", "L1H1", "L1 all heads"]
    assert eff.groups[:3] == ["all", "positive", "negative"]
    assert eff.counts[0] == 96 and eff.counts[1] + eff.counts[2] == 96
    base = np.mean([(model(b["tokens"]).argmax(-1) == b["labels"]).float().mean().item()
                    for b in batches])
    assert eff.base[0] == pytest.approx(base)
    # "all" is the count-weighted mean of positives and negatives
    np.testing.assert_allclose(
        eff.accuracy[:, 0] * 96, eff.accuracy[:, 1] * eff.counts[1] + eff.accuracy[:, 2] * eff.counts[2])
    again = head_ablation_effects(model, batches)
    np.testing.assert_array_equal(eff.accuracy, again.accuracy)
    np.testing.assert_allclose(eff.drop, eff.base[None] - eff.accuracy)
