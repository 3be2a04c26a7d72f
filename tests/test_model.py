"""Tests for blocks and model: masks, padding, hooks, and S models in one network
trained together equal S models trained alone."""

from dataclasses import replace

import numpy as np
import pytest
import torch

from dyckbook.data import negatives as N
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck, sample_lengths
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn import dropout, tokenizer
from dyckbook.nn.model import READOUTS, ClassificationTask, Classifier, ModelConfig, seed_for
from dyckbook.nn.options import POS_ENCODINGS

LANG = Dyck(2)


def _config(**changes):
    base = {"k": 2, "n_ctx": 12, "d_model": 16, "n_heads": 2, "d_mlp": 32, "n_layers": 2,
            "dropout": 0.0}
    return ModelConfig(**{**base, **changes})


def _tokens(strings, width=None):
    return tokenizer.encode(*LANG.alphabet.encode(strings), width)


STRINGS = ["([])", "()[]()", "[(])", "", "((((", "[][][][]"]


def _data(seed, n=64, language=LANG, shortest=2, longest=12):
    """``n`` strings of lengths ``shortest``..``longest``: half uniform members, half random
    non-members."""
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(rng, n // 2, shortest, longest)
    members = Dataset.from_codes(language, *language.sample_codes(rng, lengths))
    codes, lengths, kinds = N.sample_negatives(language, rng, lengths, "random")
    return Dataset.concat([members, Dataset.from_codes(language, codes, lengths, kinds)])


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_attention_rows_sum_to_one_and_masked_keys_get_nothing(mask):
    model = Classifier(_config(mask=mask, pos_encoding="learned"), [3]).eval()
    tokens = _tokens(STRINGS)
    _, cache = model.run_with_cache(tokens)
    n_tokens = torch.tensor([len(s) + 2 for s in STRINGS])
    keys = torch.arange(tokens.shape[1])
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]  # (batch, head, query, key)
        assert torch.allclose(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-6)
        if mask == "bidirectional":  # pad keys get zero weight from every query
            pad = keys[None, :] >= n_tokens[:, None]
            assert (pattern.permute(0, 3, 1, 2)[pad] == 0).all()
            assert (pattern.permute(0, 3, 1, 2)[~pad] > 0).all()
        else:  # no query sees a later key
            future = keys[None, :] > keys[:, None]
            assert (pattern[..., future] == 0).all()


@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_bidirectional_output_ignores_extra_padding(pos_encoding, readout):
    model = Classifier(_config(pos_encoding=pos_encoding, readout=readout), [1]).eval()
    tight, wide = _tokens(STRINGS), _tokens(STRINGS, width=12)
    assert wide.shape[1] > tight.shape[1]
    with torch.no_grad():
        assert torch.allclose(model(tight), model(wide), atol=1e-5)
        # a string alone gives what it gives among longer ones
        alone = torch.cat([model(_tokens([s])) for s in STRINGS])
        assert torch.allclose(alone, model(tight), atol=1e-5)


@pytest.mark.parametrize("pos_encoding", POS_ENCODINGS)
def test_causal_model_earlier_positions_ignore_later_tokens(pos_encoding):
    model = Classifier(_config(mask="causal", pos_encoding=pos_encoding), [2]).eval()
    a, b = _tokens(["(([]))[]"]), _tokens(["(([]))]]"])  # same length, differ from symbol 7
    changed = 7  # token position of the first difference ([start] is position 0)
    assert (a[0, :changed] == b[0, :changed]).all() and a[0, changed] != b[0, changed]
    _, ca = model.run_with_cache(a)
    _, cb = model.run_with_cache(b)
    for layer in range(2):
        name = f"blocks.{layer}.hook_resid_post"
        assert torch.allclose(ca[name][:, :changed], cb[name][:, :changed], atol=1e-6)
        assert not torch.allclose(ca[name][:, changed:], cb[name][:, changed:], atol=1e-3)


# randomized positions are drawn from a row's length: [start]'s position tells the length
@pytest.mark.parametrize("pos_encoding", [p for p in POS_ENCODINGS if p != "randomized"])
def test_causal_start_readout_is_constant_across_inputs(pos_encoding):
    model = Classifier(_config(mask="causal", readout="start", pos_encoding=pos_encoding), [4])
    with torch.no_grad():
        logits = model.eval()(_tokens(STRINGS + ["]]]]]]]]]]]]"]))
    assert torch.allclose(logits, logits[:1].expand_as(logits), atol=1e-6)
    readout = Classifier(_config(mask="causal", readout="end", pos_encoding=pos_encoding), [4])
    with torch.no_grad():
        logits = readout.eval()(_tokens(STRINGS))
    assert not torch.allclose(logits, logits[:1].expand_as(logits), atol=1e-4)


def test_run_with_cache_matches_forward_and_hook_shapes():
    c = _config(pos_encoding="absolute", readout="mean", n_heads=4, d_mlp=24)
    model = Classifier(c, [0]).eval()
    tokens = _tokens(STRINGS)
    batch, pos = tokens.shape
    logits, cache = model.run_with_cache(tokens)
    with torch.no_grad():
        assert torch.allclose(logits, model(tokens), atol=1e-5)
    assert torch.allclose(logits, cache["hook_logits"])
    d, h, dh = c.d_model, c.n_heads, c.d_model // c.n_heads
    shapes = {"hook_embed": (batch, pos, d), "hook_pos_embed": (batch, pos, d),
              "hook_readout": (batch, d), "hook_logits": (batch, 2)}
    for layer in range(c.n_layers):
        p = f"blocks.{layer}"
        for name in ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out",
                     "hook_mlp_out"):
            shapes[f"{p}.{name}"] = (batch, pos, d)
        for name in ("q", "k", "v", "z"):
            shapes[f"{p}.attn.hook_{name}"] = (batch, pos, h, dh)
        shapes[f"{p}.attn.hook_attn_scores"] = shapes[f"{p}.attn.hook_pattern"] = (batch, h, pos,
                                                                                   pos)
        shapes[f"{p}.mlp.hook_post"] = (batch, pos, c.d_mlp)
    assert {k: tuple(v.shape) for k, v in cache.items()} == shapes
    # the residual stream's last state feeds the readout: mean over real tokens
    real = (tokens != 1).float()[..., None]
    mean = (cache["blocks.1.hook_resid_post"] * real).sum(1) / real.sum(1)
    assert torch.allclose(mean, cache["hook_readout"], atol=1e-5)
    only = model.run_with_cache(tokens, names=["hook_logits"])[1]
    assert list(only) == ["hook_logits"]
    picked = model.run_with_cache(tokens, names=lambda n: n.endswith("hook_pattern"))[1]
    assert sorted(picked) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]
    with pytest.raises(ValueError, match="single model"):
        Classifier(c, [0, 1]).run_with_cache(tokens)


def test_same_seed_same_weights_and_model_s_is_the_single_model_of_seed_s():
    c = _config(pos_encoding="learned")
    a, b = Classifier(c, [5]).state_dict(), Classifier(c, [5]).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    other = Classifier(c, [6]).state_dict()
    assert not torch.equal(a["embed.weight"], other["embed.weight"])
    many = Classifier(c, [6, 5]).state_dict()
    assert all(torch.equal(many[k][1:2], a[k]) and torch.equal(many[k][:1], other[k]) for k in a)


def test_split_copies_the_models():
    c = _config(dropout=0.2)
    model = Classifier(c, [1, 2]).train()
    singles = model.split()
    assert [s.seeds for s in singles] == [[1], [2]] and all(s.training for s in singles)
    tokens = _tokens(STRINGS)
    with torch.no_grad():
        many = model.eval()(tokens[None].expand(2, -1, -1))
        for s, single in enumerate(singles):
            assert torch.allclose(single.eval()(tokens), many[s], atol=1e-6)
        singles[0].classifier.weight.add_(1.0)  # changing a copy leaves the network alone
    with torch.no_grad():
        assert torch.equal(model(tokens[None].expand(2, -1, -1)), many)
    assert model.n_params == singles[1].n_params


def test_head_scale_zeroes_a_head():
    c = _config(n_heads=2, n_layers=1)
    model = Classifier(c, [7]).eval()
    oracle = Classifier(c, [7]).eval()
    tokens = _tokens(STRINGS)
    with torch.no_grad():
        before = model(tokens)
        model.blocks[0].attn.head_scale = torch.tensor([[0.0, 1.0]])
        dh = c.d_model // c.n_heads
        oracle.blocks[0].attn.out.weight[:, :dh] = 0.0  # head 0's rows of W_O
        after = model(tokens)
        assert torch.allclose(after, oracle(tokens), atol=1e-5)
        assert not torch.allclose(after, before, atol=1e-4)
        logits, _ = model.run_with_cache(tokens)  # the explicit path honours it too
        assert torch.allclose(logits, after, atol=1e-5)


def _train_alone(config, seed, data, val, train_config):
    model = Classifier(config, [seed])
    result = train(model, ClassificationTask(), [data], None if val is None else [val],
                   train_config)
    return model, result


def _batched_and_alone(c, tc, seeds, data, vals, probe):
    """Logits of a probe set from the S-model network trained on ``data`` and from each model
    trained alone, with the stopping steps of both."""
    batched = Classifier(c, seeds)
    result = train(batched, ClassificationTask(), data, None if vals[0] is None else vals, tc)
    tokens = _tokens(probe.strings())
    with torch.no_grad():
        together = batched(tokens[None].expand(len(seeds), -1, -1))
    alone, stops = [], []
    for s, seed in enumerate(seeds):
        model, res = _train_alone(c, seed, data[s], vals[s], tc)
        stops.append(res.stopped_at[0])
        with torch.no_grad():
            alone.append(model(tokens))
            assert not torch.allclose(Classifier(c, [seed])(tokens), together[s], atol=1e-3)
    return together, torch.stack(alone), result, stops


@pytest.mark.parametrize("shape", [
    {"dropout": 0.0},
    {"dropout": 0.2},
    {"dropout": 0.1, "norm": "pre", "act_fn": "gelu", "pos_encoding": "learned",
     "readout": "mean", "mask": "causal"},
])
def test_batched_training_equals_training_alone(shape):
    c = _config(**shape)
    seeds = [11, 12, 13]
    shortest = 2
    data = [_data(s, shortest=shortest) for s in seeds]
    # target_window=1: a model stops at the first validation at the target (what is tested
    # here is that stopping one model leaves the others as they would be alone)
    tc = TrainConfig(lr=3e-3, batch_size=16, max_steps=20, eval_every=5, grad_clip=0.5,
                     target_accuracy=1.0, warmup_steps=3, target_window=1)
    probe = _data(99, n=8)
    x = probe.subset([0])
    # model 0 validates on one string labelled as it will classify it after 10 steps (so it
    # stops at step 5 or 10); models 1 and 2 on a string labelled both ways (never 100%)
    early, _ = _train_alone(c, seeds[0], data[0], Dataset.concat([x, x]),
                            TrainConfig(**{**tc.to_dict(), "max_steps": 10}))
    with torch.no_grad():
        guess = int(early(_tokens(x.strings()))[0].argmax())
    stop = Dataset(LANG, x.codes, x.lengths, np.array([guess], np.int8), x.kinds)
    both = Dataset.concat([x, Dataset(LANG, x.codes, x.lengths, 1 - x.labels, x.kinds)])
    vals = [stop, both, both]
    together, alone, result, stops = _batched_and_alone(c, tc, seeds, data, vals, probe)
    assert result.stopped_at[0] in (5, 10) and result.stopped_at[1:] == [None, None]
    assert result.steps == 20 and stops == result.stopped_at
    assert torch.allclose(alone, together, atol=1e-5)


def test_batched_training_with_bfloat16_products_equals_training_alone():
    c = _config(pos_encoding="learned", readout="mean", mask="causal")
    seeds = [11, 12, 13]
    tc = TrainConfig(lr=3e-3, batch_size=16, max_steps=15, grad_clip=0.5, matmul="bfloat16")
    data = [_data(s) for s in seeds]
    together, alone, _, _ = _batched_and_alone(c, tc, seeds, data, [None] * 3, _data(99, n=8))
    exact = Classifier(c, seeds)  # the same training with float32 products
    train(exact, ClassificationTask(), data, None, replace(tc, matmul="float32"))
    with torch.no_grad():
        logits = exact(_tokens(_data(99, n=8).strings())[None].expand(3, -1, -1))
    gap = (logits - together).abs().max()  # bfloat16 products did change the training
    assert 1e-3 < gap < 0.1
    assert torch.allclose(alone, together, atol=1e-5)


def test_batched_training_with_dropout_and_unequal_batch_widths_equals_training_alone():
    # dropout masks are indexed at n_positions: a batch padded wider for another model keeps
    # this one's mask bits
    c = _config(dropout=0.2)
    seeds = [11, 12, 13]
    data = [_data(11, shortest=12), _data(12, longest=6), _data(13)]  # model 1's batches: narrow
    tc = TrainConfig(lr=3e-3, batch_size=16, max_steps=10)
    together, alone, _, _ = _batched_and_alone(c, tc, seeds, data, [None] * 3, _data(99, n=8))
    assert torch.allclose(alone, together, atol=1e-5)


def _masks(shape, p, seeds, full=None):
    return dropout.keep(shape, p, [torch.Generator().manual_seed(s) for s in seeds], full)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_masks_keep_one_minus_p_independently(p):
    masks = _masks((2, 400, 500), p, [0, 1])  # 200,000 bits a model
    n = masks[0].numel()
    bound = 5 * (p * (1 - p) / n) ** 0.5  # five standard errors of a binomial proportion
    assert masks.shape == (2, 400, 500) and set(masks.unique().tolist()) <= {0.0, 1.0}
    for m in masks:
        assert abs(m.mean().item() - (1 - p)) < bound
        # neighbours along either axis are independent: P(both kept) = (1 - p)^2
        assert abs((m[:, 1:] * m[:, :-1]).mean().item() - (1 - p) ** 2) < 2 * bound
        assert abs((m[1:] * m[:-1]).mean().item() - (1 - p) ** 2) < 2 * bound
    assert abs((masks[0] * masks[1]).mean().item() - (1 - p) ** 2) < 2 * bound  # models too


def test_dropout_masks_follow_the_generator_and_ignore_the_padding():
    g = torch.Generator().manual_seed(7)
    first, second = (dropout.keep((1, 30, 40), 0.3, [g], (50, 60)) for _ in range(2))
    assert not torch.equal(first, second)  # each call draws a new key
    again = _masks((1, 30, 40), 0.3, [7], (50, 60))
    assert torch.equal(first, again)  # the same generator state: the same masks
    wider = _masks((1, 50, 60), 0.3, [7], (50, 60))
    assert torch.equal(wider[:, :30, :40], first)
    assert not torch.equal(_masks((1, 30, 40), 0.3, [7]), first)  # indexed in ``full``
    with pytest.raises(ValueError, match="full shape must cover the activations' \\(30, 40\\)"):
        _masks((1, 30, 40), 0.3, [7], (20, 60))
    # a full shape of 2**32 elements and more: the index's high half is folded in
    wide = _masks((1, 8, 600), 0.1, [7], (2**22, 1024))
    assert torch.equal(_masks((1, 4, 300), 0.1, [7], (2**22, 1024)), wide[:, :4, :300])
    assert abs(wide.mean().item() - 0.9) < 0.02


@pytest.mark.parametrize("changes, message", [
    ({"k": 0}, "ModelConfig.k must be a positive int, got 0"),
    ({"d_model": 16.0}, "ModelConfig.d_model must be a positive int, got 16.0"),
    ({"n_layers": True}, "ModelConfig.n_layers must be a positive int, got True"),
    ({"d_model": 10, "n_heads": 3}, "d_model \\(10\\) must be divisible by n_heads \\(3\\)"),
    ({"dropout": 1.0}, "ModelConfig.dropout must be in \\[0, 1\\), got 1.0"),
    ({"mask": "left"}, "ModelConfig.mask must be one of .*'left'"),
    ({"pos_encoding": "xpos"}, "ModelConfig.pos_encoding must be one of .*'xpos'"),
    ({"readout": "max"}, "ModelConfig.readout must be one of .*'max'"),
    ({"norm": "mid"}, "ModelConfig.norm must be one of .*'mid'"),
    ({"act_fn": "tanh"}, "ModelConfig.act_fn must be one of .*'tanh'"),
])
def test_model_config_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        _config(**changes)


def test_model_config_round_trip_and_input_errors():
    c = _config(mask="causal", pos_encoding="sinusoidal")
    assert ModelConfig.from_dict(c.to_dict()) == c and c.to_dict()["kind"] == "classifier"
    with pytest.raises(ValueError, match="unknown keys \\['width'\\]"):
        ModelConfig.from_dict({**c.to_dict(), "width": 3})
    model = Classifier(c, [0])
    with pytest.raises(ValueError, match="int64"):
        model(_tokens(["()"]).int())
    with pytest.raises(ValueError, match="more than n_ctx \\+ 2 = 14"):
        model(_tokens(["()" * 7]))
    with pytest.raises(ValueError, match="outside \\[0, 7\\)"):
        model(torch.tensor([[0, 7, 2]]))
    with pytest.raises(ValueError, match="models=2"):
        Classifier(c, [0, 1])(_tokens(["()"]))
    with pytest.raises(ValueError, match="seeds"):
        Classifier(c, [])
    assert seed_for(3, "init") != seed_for(3, "order") != seed_for(4, "order")
