"""Tests for probes: planted signals, independent checkers and forward passes by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.experiment.evaluate import margins
from dyckbook.interp import probes as P
from dyckbook.nn import tokenizer
from dyckbook.nn.model import Classifier, ModelConfig

LANG = Dyck(2)


def dataset(seed: int = 0, language: Dyck = LANG, n: int = 40, longest: int = 12) -> Dataset:
    """Members and random strings over the alphabet, half each."""
    rng = np.random.default_rng(seed)
    members = language.sample(rng, 2 * rng.integers(1, longest // 2 + 1, n // 2))
    symbols = list(language.alphabet.symbols)
    randoms = ["".join(rng.choice(symbols, int(k))) for k in rng.integers(1, longest, n // 2)]
    return Dataset.from_strings(language, members + randoms)


def tiny(readout: str = "start", mask: str = "bidirectional", seed: int = 0) -> Classifier:
    config = ModelConfig(k=2, n_ctx=16, d_model=16, d_mlp=32, n_heads=2, n_layers=2,
                         dropout=0.0, readout=readout, mask=mask, pos_encoding="learned")
    return Classifier(config, [seed])


# -------------------------------------------------------------------------------------------
# targets
# -------------------------------------------------------------------------------------------


def balanced_so_far(s: str, symbols: str, bound: int | None) -> list[bool]:
    """A Python stack: is every prefix the beginning of some member?"""
    out, stack, ok = [], [], True
    for ch in s:
        t, closer = divmod(symbols.index(ch), 2)
        if not closer:
            stack.append(t)
        elif stack and stack[-1] == t:
            stack.pop()
        else:
            ok = False
        ok = ok and (bound is None or len(stack) <= bound)
        out.append(ok)
    return out


@pytest.mark.parametrize("language", [Dyck(1), Dyck(2), Dyck(3, max_depth=2)],
                         ids=lambda d: d.name)
def test_prefix_targets_agree_with_a_python_stack(language: Dyck) -> None:
    data = dataset(1, language, n=80)
    depth, balanced = P.prefix_targets(data)
    symbols = language.alphabet.symbols
    for row, s in enumerate(data.strings()):
        heights = np.cumsum([1 - 2 * (symbols.index(c) % 2) for c in s]).tolist()
        assert depth[row, :len(s)].tolist() == heights
        assert balanced[row, :len(s)].tolist() == balanced_so_far(s, symbols, language.max_depth)
        assert not balanced[row, len(s):].any() and not depth[row, len(s):].any()
    members = data.labels == 1
    assert np.all(balanced[members] == (np.arange(depth.shape[1]) < data.lengths[members, None]))


# -------------------------------------------------------------------------------------------
# linear probes
# -------------------------------------------------------------------------------------------


def planted(seed: int, n: int = 600, d: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)) * rng.uniform(0.1, 5.0, d)  # scales the probe must undo
    return x, x @ rng.normal(size=d)


def test_ridge_recovers_a_planted_linear_signal_and_not_noise() -> None:
    x, y = planted(0)
    fit = P.fit_linear_probe(x, y + 0.01 * np.random.default_rng(1).normal(size=len(y)),
                             "regression", np.random.default_rng(2))
    assert fit.test_score > 0.99 and abs(fit.baseline) < 0.05
    assert (fit.n_train, fit.n_test) == (450, 150)
    noise = P.fit_linear_probe(x, np.random.default_rng(3).normal(size=len(y)), "regression",
                               np.random.default_rng(2))
    assert noise.test_score < 0.1


def test_logistic_recovers_a_planted_boundary_and_not_noise() -> None:
    x, y = planted(4)
    fit = P.fit_linear_probe(x, y > 0, "classification", np.random.default_rng(0))
    assert fit.test_score > 0.95 and fit.train_score > 0.95 and fit.baseline < 0.7
    three = P.fit_linear_probe(x, np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])),
                               "classification", np.random.default_rng(0))
    assert three.test_score > 0.85  # more than two classes
    coin = np.random.default_rng(5).integers(0, 2, len(y))
    assert P.fit_linear_probe(x, coin, "classification", np.random.default_rng(0)).test_score < 0.62


def test_probes_are_deterministic_and_groups_stay_whole() -> None:
    x, y = planted(6, n=300)
    a, b = (P.fit_linear_probe(x, y > 0, "classification", np.random.default_rng(7))
            for _ in range(2))
    assert a == b
    groups = np.repeat(np.arange(100), 3)
    for seed in range(5):  # whole groups of 3 on each side
        fit = P.fit_linear_probe(x, y, "regression", np.random.default_rng(seed), groups=groups)
        assert fit.n_test == 75 and fit.n_train == 225


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "cluster"}, "kind"), ({"l2": -1.0}, "l2"), ({"test_fraction": 1.0}, "test_fraction"),
    ({"x": np.ones((5, 2))}, "x must be"), ({"groups": np.zeros(3)}, "groups"),
    ({"y": np.zeros(40), "kind": "classification"}, "2 classes"),
    ({"test_fraction": 0.001}, "too few rows"),
])
def test_probe_rejects_bad_arguments(kwargs: dict, message: str) -> None:
    args = {"x": np.random.default_rng(0).normal(size=(40, 3)), "y": np.arange(40.0),
            "kind": "regression", **kwargs}
    with pytest.raises(ValueError, match=message):
        P.fit_linear_probe(args.pop("x"), args.pop("y"), args.pop("kind"),
                           np.random.default_rng(0), **args)


@pytest.mark.parametrize("readout", ["start", "end", "mean"])
def test_collect_residuals_reads_the_cache_and_the_readout(readout: str) -> None:
    data = dataset(2)
    model = tiny(readout)
    probe = P.collect_residuals(model, data)
    assert probe.hooks == P.default_hooks(model) and len(probe.hooks) == 5
    n_tokens = int(data.lengths.sum())
    depth, balanced = P.prefix_targets(data)
    inside = np.arange(data.codes.shape[1])[None, :] < data.lengths[:, None]
    np.testing.assert_array_equal(probe.depth, depth[inside])
    np.testing.assert_array_equal(probe.balanced, balanced[inside])
    assert probe.string_index.tolist() == np.repeat(np.arange(len(data)), data.lengths).tolist()
    tokens = tokenizer.encode(data.codes, data.lengths)
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    for hook in probe.hooks:
        assert probe.token_features[hook].shape == (n_tokens, 16)
        x = cache[hook].numpy()
        np.testing.assert_allclose(probe.token_features[hook][3], x[0, 4], atol=1e-6)
    # the readout applied to the last residual stream is the model's own readout
    np.testing.assert_allclose(probe.string_features[probe.hooks[-1]],
                               cache["hook_readout"].numpy(), atol=1e-5)
    np.testing.assert_array_equal(probe.membership, data.labels)


def test_probe_all_uses_one_split_per_target_and_skips_one_class_targets() -> None:
    data = dataset(3)
    probe = P.collect_residuals(tiny("mean"), data)
    results = P.probe_all(probe, np.random.default_rng(0))
    assert set(results) == set(P.PROBE_TARGETS)
    for by_hook in results.values():
        assert list(by_hook) == probe.hooks
        assert len({(r.n_train, r.n_test, r.baseline) for r in by_hook.values()}) == 1
    assert results["depth"]["blocks.0.hook_resid_pre"].kind == "regression"
    members = P.collect_residuals(tiny("mean"), data.subset(data.labels == 1))
    assert set(P.probe_all(members, np.random.default_rng(0))) == {"depth"}


# -------------------------------------------------------------------------------------------
# ablations
# -------------------------------------------------------------------------------------------


def replacing_z(model: Classifier, layer: int, head: int, value: torch.Tensor):
    """An independent ablation: overwrite the head's columns of the concatenated z before the
    output projection (a pre-hook on ``attn.out``)."""
    d_head = model.config.d_model // model.config.n_heads

    def hook(module, args):
        z = args[0].clone()
        z[..., head * d_head:(head + 1) * d_head] = value
        return (z, *args[1:])

    return model.blocks[layer].attn.out.register_forward_pre_hook(hook)


@pytest.mark.parametrize("layer, head", [(0, 0), (1, 1)])
def test_zero_ablation_equals_zeroing_the_heads_z(layer: int, head: int) -> None:
    data, model = dataset(4), tiny("end", "causal")
    with P.ablated(model, [(layer, head)]):
        got = margins(model, data)
    handle = replacing_z(model, layer, head, torch.tensor(0.0))
    want = margins(model, data)
    handle.remove()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert not np.allclose(got, margins(model, data), atol=1e-4)  # the head mattered
    assert all(block.attn.head_scale is None for block in model.blocks)


def test_mean_ablation_equals_substituting_the_mean_z() -> None:
    data, model = dataset(5), tiny("mean")
    tokens = tokenizer.encode(data.codes, data.lengths)
    model.eval()
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
    real = (tokens != 1).numpy()
    z = cache["blocks.1.attn.hook_z"].numpy()[real]  # (n_real, head, d_head)
    means = P.head_means(model, data)
    np.testing.assert_allclose(means[1], z.mean(0), atol=1e-6)
    with P.ablated(model, [(1, 0)], "mean", means):
        got = margins(model, data)
    handle = replacing_z(model, 1, 0, torch.as_tensor(z.mean(0)[0], dtype=torch.float32))
    want = margins(model, data)
    handle.remove()
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert P.ablate_heads(model, data, [(1, 0)], "mean") == float(((want > 0) == data.labels)
                                                                  .mean())


def test_ablations_leave_the_model_as_it_was_and_reject_bad_input() -> None:
    data, model = dataset(6), tiny()
    before = margins(model, data)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    base = float(((before > 0) == data.labels).mean())
    assert P.ablate_heads(model, data, []) == base
    with pytest.raises(RuntimeError), P.ablated(model, [(0, 1)], "mean",
                                                 P.head_means(model, data)):
        raise RuntimeError("inside")
    np.testing.assert_array_equal(margins(model, data), before)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert not model.blocks[0].attn.out._forward_hooks
    for heads, mode, message in (([(2, 0)], "zero", "heads"), ([(0, 2)], "zero", "heads"),
                                 ([(0, 0)], "random", "mode")):
        with pytest.raises(ValueError, match=message):
            P.ablate_heads(model, data, heads, mode)
    with pytest.raises(ValueError, match="single-model"):
        P.head_ablation_effects(Classifier(model.config, [0, 1]), data)


@pytest.mark.parametrize("mode", ["zero", "mean"])
def test_head_ablation_effects_are_base_minus_each_ablation(mode: str) -> None:
    data, model = dataset(7), tiny("end", "causal", seed=2)
    drops = P.head_ablation_effects(model, data, mode)
    base = float(((margins(model, data) > 0) == data.labels).mean())
    assert drops.shape == (2, 2)
    for layer in range(2):
        for head in range(2):
            want = base - P.ablate_heads(model, data, [(layer, head)], mode)
            assert drops[layer, head] == pytest.approx(want)
