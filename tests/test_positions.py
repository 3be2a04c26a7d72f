"""RoPE, ALiBi, randomized positions and sigmoid attention weights (``blocks``): properties each
must have, checked against independent arithmetic, in the classifier and the completion models
alike."""

from __future__ import annotations

import math

import pytest
import torch

from dyckbook.data.vocab import BOS, EOS, N_SPECIAL
from dyckbook.nn import blocks, positions
from dyckbook.nn.model import Classifier, ModelConfig
from dyckbook.nn.seq2seq import Seq2SeqConfig, build_seq2seq, greedy_decode
from dyckbook.nn.tokenizer import encode

STRINGS = ["(())", "()()()", "((()))()", "()"]


def _tokens(strings, width=None):
    codes = [[{"(": 0, ")": 1}[c] for c in s] for s in strings]
    import numpy as np

    lengths = np.array([len(c) for c in codes])
    arr = np.zeros((len(codes), max(lengths)), np.uint8)
    for i, c in enumerate(codes):
        arr[i, :len(c)] = c
    return encode(arr, lengths, width or int(lengths.max()))


def _attention(relative, seed=0, d_model=16, n_heads=2):
    torch.manual_seed(seed)
    attn = blocks.Attention(1, d_model, n_heads, 0.0, [torch.Generator()], relative=relative)
    blocks.init_models(attn, [seed])
    return attn.eval()


def test_rope_scores_depend_on_the_distance_only():
    attn, x = _attention("rope"), torch.randn(1, 3, 7, 16)
    with torch.no_grad():
        base = attn(x, None, positions=torch.arange(7).expand(1, 3, 7))
        shifted = attn(x, None, positions=(torch.arange(7) + 40).expand(1, 3, 7))
        reversed_gaps = attn(x, None, positions=(torch.arange(7) * 2).expand(1, 3, 7))
    assert torch.allclose(base, shifted, atol=1e-4)
    assert not torch.allclose(base, reversed_gaps, atol=1e-3)


def test_rope_is_a_rotation_of_each_pair():
    x = torch.randn(2, 3, 5, 8)
    pos = torch.arange(5)[None].expand(2, 5)
    rotated = positions.rotate(x, pos)
    pairs = lambda t: t.view(*t.shape[:-1], 4, 2).norm(dim=-1)  # noqa: E731
    assert torch.allclose(pairs(rotated), pairs(x), atol=1e-5)
    assert torch.allclose(rotated[:, :, 0], x[:, :, 0])  # position 0: no rotation
    # pair 0 turns by exactly one radian per position (frequency 10000^0)
    angle = torch.atan2(rotated[..., 1], rotated[..., 0]) - torch.atan2(x[..., 1], x[..., 0])
    assert torch.allclose(torch.remainder(angle[:, :, 3] - 3.0 + math.pi, 2 * math.pi) - math.pi,
                          torch.zeros(2, 3), atol=1e-4)


def test_alibi_pattern_is_the_softmax_of_scores_minus_slope_times_distance():
    attn, x = _attention("alibi", n_heads=4), torch.randn(1, 2, 6, 16)
    record = blocks.Recorder()
    with torch.no_grad():
        attn(x, None, record=record, prefix="a")
        q = record.cache["a.hook_q"].transpose(1, 2)  # (batch, head, pos, d_head)
        k = record.cache["a.hook_k"].transpose(1, 2)
    slopes = torch.tensor([2 ** (-8 * (h + 1) / 4) for h in range(4)])
    distance = (torch.arange(6)[:, None] - torch.arange(6)[None]).abs()
    expected = (q @ k.transpose(-1, -2) / math.sqrt(4) - slopes[:, None, None] * distance
                ).softmax(-1)
    assert torch.allclose(record.cache["a.hook_pattern"], expected, atol=1e-5)
    with torch.no_grad():  # the fused path gives the same output as the recorded one
        assert torch.allclose(attn(x, None), attn(x, None, record=blocks.Recorder()), atol=1e-5)


@pytest.mark.parametrize("pos_encoding", ["rope", "alibi", "randomized"])
@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_classifier_patterns_are_distributions_and_batched_equals_alone(pos_encoding, mask):
    config = ModelConfig(k=1, n_ctx=24, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                         mask=mask, pos_encoding=pos_encoding, readout="end", dropout=0.1)
    tokens = _tokens(STRINGS)
    _, cache = Classifier(config, [3]).eval().run_with_cache(tokens)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        assert torch.allclose(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-5)
    both = Classifier(config, [3, 4]).train()
    alone = both.split()
    stacked = tokens[None].expand(2, *tokens.shape)
    torch.manual_seed(0)
    together = both(stacked)
    for s, single in enumerate(alone):  # training mode: dropout and position draws per model
        assert torch.allclose(together[s], single.train()(tokens), atol=1e-5)
    with torch.no_grad():  # the readout-only last block equals the full computation
        assert torch.allclose(both.eval()(stacked)[0],
                              alone[0].eval().run_with_cache(tokens)[0], atol=1e-5)


def test_randomized_positions_are_sorted_subsets_that_ignore_the_padding():
    gens = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    n_tokens = torch.tensor([[3, 7, 10], [10, 1, 5]])
    pos = positions.random_positions(n_tokens, 10, 64, gens)
    assert pos.shape == (2, 3, 10) and int(pos.max()) < 64
    for s in range(2):
        for b in range(3):
            row = pos[s, b, :int(n_tokens[s, b])]
            assert (row[1:] > row[:-1]).all()  # strictly increasing: order kept
    wider = positions.random_positions(n_tokens, 14, 64, [torch.Generator().manual_seed(1),
                                                        torch.Generator().manual_seed(2)])
    assert torch.equal(wider[..., :10], pos)  # padding wider changes nothing
    spread = positions.random_positions(torch.full((1, 500), 4), 4, 64,
                                     [torch.Generator().manual_seed(0)])
    assert int(spread.max()) > 50  # a short row reaches the far positions
    evaluation = positions.random_positions(n_tokens, 10, 64, None)
    assert torch.equal(evaluation[0, 2], evaluation[1, 0])  # same length, same positions
    with pytest.raises(ValueError, match="more than the 8 positions"):
        positions.random_positions(n_tokens, 10, 8, gens)


@pytest.mark.parametrize("arch", ["encoder_decoder", "decoder_only"])
@pytest.mark.parametrize("pos_encoding", ["none", "rope", "alibi"])
def test_decoding_with_the_cache_equals_recomputing(arch, pos_encoding):
    layers = {"n_encoder_layers": 0, "n_decoder_layers": 2} if arch == "decoder_only" else {}
    config = Seq2SeqConfig(arch=arch, k=2, n_ctx=20, d_model=16, n_heads=2, d_mlp=32,
                           pos_encoding=pos_encoding, **layers)
    model = build_seq2seq(config, [5])
    prefixes = [[0, 2, 3, 0], [2, 0], [0, 1, 2, 0, 2, 0], [2, 2, 2]]
    width = max(map(len, prefixes))
    source = torch.zeros(len(prefixes), width + 2, dtype=torch.long)
    for i, p in enumerate(prefixes):
        source[i, :len(p) + 2] = torch.tensor([BOS, *(c + N_SPECIAL for c in p), EOS])
    target = torch.full((len(prefixes), 7), BOS)
    target[:, 1:] = torch.randint(N_SPECIAL, N_SPECIAL + 4, (len(prefixes), 6),
                                  generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model.eval()
        full = model(source, target)  # teacher forcing: every position at once
        state = model._begin(source[None], True)
        for t in range(target.shape[1]):  # one position at a time through the cache
            step = model._next(state, target[None, :, :t + 1])[0]
            assert torch.allclose(step, full[:, t], atol=1e-4), t
    assert torch.equal(greedy_decode(model, source, 12, use_cache=True),
                       greedy_decode(model, source, 12, use_cache=False))


def test_configs_reject_what_the_positions_cannot_do():
    with pytest.raises(ValueError, match="decoder cannot read 'randomized'"):
        Seq2SeqConfig(pos_encoding="randomized")
    assert Seq2SeqConfig(pos_encoding="randomized", target_pos_encoding="rope").decoder_pe == "rope"
    with pytest.raises(ValueError, match="must be even"):
        Classifier(ModelConfig(d_model=6, n_heads=2, pos_encoding="rope"))


# ------------------------------------------------------------------ sigmoid attention weights
def _sigmoid_attention(seed=0, d_model=16, n_heads=2):
    torch.manual_seed(seed)
    attn = blocks.Attention(1, d_model, n_heads, 0.0, [torch.Generator()], weights="sigmoid")
    blocks.init_models(attn, [seed])
    return attn.eval()


def test_sigmoid_pattern_weighs_each_visible_key_on_its_own():
    attn, x = _sigmoid_attention(), torch.randn(1, 2, 6, 16)
    record = blocks.Recorder()
    with torch.no_grad():
        recorded = attn(x, None, causal=True, record=record, prefix="a")
        q = record.cache["a.hook_q"].transpose(1, 2)  # (batch, head, pos, d_head)
        k = record.cache["a.hook_k"].transpose(1, 2)
        plain = attn(x, None, causal=True)
    visible = torch.ones(6, 6).tril().bool()
    expected = (q @ k.transpose(-1, -2) / math.sqrt(8)).sigmoid() * visible
    assert torch.allclose(record.cache["a.hook_pattern"], expected, atol=1e-6)
    assert torch.allclose(plain, recorded, atol=1e-5)  # the unrecorded path is the same


def test_sigmoid_attention_sums_where_softmax_averages():
    """With every query weight zero, each visible key weighs sigmoid(0) = 1/2: over a run of
    one repeated token, the output grows with the prefix under sigmoid and is constant under
    softmax (the count a long prefix dilutes)."""
    x = torch.randn(1, 1, 1, 16).expand(1, 1, 9, 16)
    grows = {}
    for weights in blocks.ATTENTION_WEIGHTS:
        attn = _sigmoid_attention() if weights == "sigmoid" else _attention(None)
        with torch.no_grad():
            attn.qkv.weight[..., :16] = 0
            attn.qkv.bias[..., :16] = 0
            z = attn(x, None, causal=True)[0, 0] - attn.out.bias[0, 0]  # (pos, d_model)
        grows[weights] = z / z[0]
    positions = torch.arange(1, 10, dtype=torch.float32)[:, None].expand(9, 16)
    assert torch.allclose(grows["sigmoid"], positions, rtol=1e-4)
    assert torch.allclose(grows["softmax"], torch.ones(9, 16), rtol=1e-4)


@pytest.mark.parametrize("mask", ["bidirectional", "causal"])
def test_a_sigmoid_classifier_batches_reads_out_and_keeps_the_softmax_digests(mask):
    config = ModelConfig(k=1, n_ctx=24, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                         mask=mask, readout="end", attention="sigmoid", dropout=0.1)
    tokens = _tokens(STRINGS)
    both = Classifier(config, [3, 4])
    alone = both.split()
    stacked = tokens[None].expand(2, *tokens.shape)
    together = both.train()(stacked)
    for s, single in enumerate(alone):
        assert torch.allclose(together[s], single.train()(tokens), atol=1e-5)
    with torch.no_grad():  # the readout-only last block equals the full computation
        assert torch.allclose(both.eval()(stacked)[0],
                              alone[0].eval().run_with_cache(tokens)[0], atol=1e-5)
    softmax = ModelConfig(k=1, mask=mask)
    assert "attention" not in softmax.to_dict()  # records made before the field match still
    assert config.to_dict()["attention"] == "sigmoid"
    assert ModelConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match=r"ModelConfig.attention must be one of .*'relu'"):
        ModelConfig(attention="relu")
    with pytest.raises(ValueError, match="weights must be one of"):
        blocks.Attention(1, 16, 2, 0.0, [torch.Generator()], weights="hard")
