"""Tests of dyckbook.nn.seq2seq: masks, caches, decoding, order-blindness, learning, bad inputs."""

import numpy as np
import pytest
import torch

from dyckbook.data.completion import CompletionDataConfig, make_completion_splits
from dyckbook.data.vocab import BOS, EOS, SEQ_PAD
from dyckbook.experiment.completion_scores import evaluate_completions
from dyckbook.experiment.train import TrainConfig, train
from dyckbook.nn.seq2seq import (
    CompletionTask,
    DecoderOnly,
    EncoderDecoder,
    Seq2SeqConfig,
    build_seq2seq,
    greedy_decode,
    source_tokens,
    target_tokens,
)

ED = {"arch": "encoder_decoder", "k": 2, "n_ctx": 24, "n_encoder_layers": 2,
      "n_decoder_layers": 2, "d_model": 32, "n_heads": 4, "d_mlp": 64}
DO = {**ED, "arch": "decoder_only", "n_encoder_layers": 0, "n_decoder_layers": 3}
VARIANTS = [dict(ED, pos_encoding="none"), dict(ED, pos_encoding="learned", norm="pre"),
            dict(ED, pos_encoding="absolute", target_pos_encoding="sinusoidal"),
            dict(DO, pos_encoding="none"), dict(DO, pos_encoding="learned"),
            dict(DO, pos_encoding="absolute_ctx", norm="pre")]


@pytest.fixture(scope="module")
def data():
    config = CompletionDataConfig(k=2, min_length=3, max_length=20, test_min_length=21,
                                  test_max_length=24, n_train=64, n_val=64, n_test=64)
    return make_completion_splits(config, 0)


def batch_of(data, rows=16):
    task = CompletionTask()
    return task.batch(task.tensors(data.val, 24), torch.arange(rows)[None])


@pytest.mark.parametrize("kw", VARIANTS)
def test_decoder_is_causal_and_fast_equals_cached(data, kw):
    model = build_seq2seq(Seq2SeqConfig(**kw), [1]).eval()
    b = batch_of(data)
    source, target = b["source"][0], b["target"][0]
    logits = model(source, target)
    with torch.no_grad():
        cached, cache = model.run_with_cache(source, target)
    torch.testing.assert_close(cached, logits, atol=1e-5, rtol=1e-5)
    assert "blocks.0.attn.hook_pattern" in cache and "hook_logits" in cache
    changed = target.clone()
    changed[:, 3:] = torch.randint(3, 7, changed[:, 3:].shape)
    later = model(source, changed)
    torch.testing.assert_close(later[:, :3], logits[:, :3], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(later[:, 3:], logits[:, 3:])


def test_cross_attention_gives_no_weight_to_source_pads(data):
    model = EncoderDecoder(Seq2SeqConfig(**ED, pos_encoding="learned")).eval()
    b = batch_of(data)
    source, target = b["source"][0], b["target"][0]
    assert (source == SEQ_PAD).any()
    with torch.no_grad():
        logits, cache = model.run_with_cache(source, target)
        wider = model(torch.nn.functional.pad(source, (0, 3)), target)  # more pads change nothing
    torch.testing.assert_close(wider, logits, atol=1e-5, rtol=1e-5)
    pads = (source == SEQ_PAD)[:, None, None, :]  # (batch, 1, 1, source pos)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.cross_attn.hook_pattern"]  # (batch, head, tgt, src)
        assert pattern.shape == (*target.shape[:1], 4, target.shape[1], source.shape[1])
        assert float(pattern.masked_select(pads.expand_as(pattern)).abs().max()) == 0.0
        torch.testing.assert_close(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
        enc = cache[f"encoder.{layer}.attn.hook_pattern"]
        assert float(enc.masked_select((source == SEQ_PAD)[:, None, :, None].logical_not()
                                       & pads.expand_as(enc)).max()) == 0.0


@pytest.mark.parametrize("kw", VARIANTS)
def test_incremental_decoding_equals_recomputation(data, kw):
    model = build_seq2seq(Seq2SeqConfig(**kw), [2])
    b = batch_of(data, 32)
    source = b["source"][0]
    with torch.no_grad():  # margin by which <eos> loses, under teacher forcing
        logits = model(source, b["target"][0])
        others = torch.cat([logits[..., :EOS], logits[..., EOS + 1:]], -1).amax(-1)
        margin, bias = others - logits[..., EOS], model.unembed.bias[..., EOS].clone()
    for q in (0.1, 0.2, 0.3, 0.5, 0.7):  # raise <eos> until rows stop at different steps
        with torch.no_grad():
            model.unembed.bias[..., EOS] = bias + torch.quantile(margin, q)
        fast, slow = (greedy_decode(model, source, 25, use_cache=c) for c in (True, False))
        assert torch.equal(fast, slow)
        stopped = (fast == EOS).any(-1)
        ends = torch.where(stopped, (fast == EOS).int().argmax(-1), fast.shape[1])
        if len(set(ends.tolist())) > 1:
            break
    assert len(set(ends.tolist())) > 1
    assert model.training  # the caller's mode is restored
    for row in fast[stopped]:  # nothing but pads after a row's <eos>
        end = int((row == EOS).nonzero()[0])
        assert (row[end + 1:] == SEQ_PAD).all()


def test_order_blindness_of_the_encoder_decoder_without_positions(data):
    """Without positional encoding the memory is permutation-equivariant and cross-attention sums
    over it, so permuting a prefix changes nothing the decoder sees."""
    rng = np.random.default_rng(0)
    s = data.val
    shuffled = s.codes.copy()
    for i, n in enumerate(s.lengths):
        shuffled[i, :n] = rng.permutation(shuffled[i, :n])
    target = target_tokens(*s.targets(), 24)[0]
    for pe, blind in (("none", True), ("learned", False)):
        model = EncoderDecoder(Seq2SeqConfig(**ED, pos_encoding=pe, target_pos_encoding="learned"))
        a, b = (source_tokens(c, s.lengths, 24) for c in (s.codes, shuffled))
        with torch.no_grad():
            same = torch.allclose(model(a, target), model(b, target), atol=1e-5)
        assert same == blind
        if blind:
            assert torch.equal(greedy_decode(model, a, 25), greedy_decode(model, b, 25))


def test_tiny_seed_model_learns_dyck1_completion():
    """The seed's architecture (no positional encoding) only needs a count for Dyck-1."""
    config = CompletionDataConfig(k=1, min_length=3, max_length=10, test_min_length=11,
                                  test_max_length=12, n_train=2000, n_val=100, n_test=100)
    sp = make_completion_splits(config, 0)
    model = EncoderDecoder(Seq2SeqConfig(k=1, n_ctx=12, n_encoder_layers=1, n_decoder_layers=1,
                                         d_model=32, n_heads=2, d_mlp=64))
    result = train(model, CompletionTask(), [sp.train], [sp.val],
                   TrainConfig(lr=3e-3, batch_size=64, max_steps=300, eval_every=50,
                               target_accuracy=1.0, target_window=1))
    assert result.stopped_at[0] is not None
    score, measures = evaluate_completions(model, sp.tests["in_distribution"])
    assert score.accuracy >= 0.9 and score.n == len(sp.tests["in_distribution"])
    # teacher-forced "correct" is greedy exact match, row by row
    task = CompletionTask()
    test = sp.tests["in_distribution"]
    batch = task.batch(task.tensors(test, 12), torch.arange(len(test))[None])
    with torch.no_grad():
        correct = task.correct(model, batch)[0]
    assert int(correct.sum()) == score.correct
    fast, slow = (greedy_decode(model, batch["source"][0], 13, c) for c in (True, False))
    assert torch.equal(fast, slow) and len(set((fast == EOS).int().argmax(-1).tolist())) > 3
    depths = test.depths()
    for j, (n, _) in measures["per_position"].items():
        assert n == int((depths >= j).sum())  # output j exists iff the completion has >= j symbols
    assert sum(n for n, _ in score.per_length.values()) == score.n
    assert score.per_kind == {"suffix": [score.n, score.correct]}


def test_evaluation_measures_cross_attention_partners(data):
    model = EncoderDecoder(Seq2SeqConfig(**ED, pos_encoding="learned"))
    score, measures = evaluate_completions(model, data.val, batch_size=20)
    assert score.n == len(data.val) and 1 < measures["distinct_outputs"] <= len(data.val)
    share = measures["cross_attention"]
    assert np.array(share["share"]).shape == (2, 4)
    assert 0.0 < np.min(share["share"]) and np.max(share["share"]) < 1.0
    closers = int(data.val.depths().sum())
    assert sum(n for n, _ in share["by_depth"].values()) == closers
    assert sum(n for n, _ in share["by_distance"].values()) == closers
    assert min(share["by_distance"]) >= 1 and max(share["by_depth"]) == data.val.depths().max()
    _, measures = evaluate_completions(DecoderOnly(Seq2SeqConfig(**DO)), data.val)
    assert "cross_attention" not in measures


def test_determinism_batched_models_and_parameter_budgets(data):
    config = Seq2SeqConfig(**ED, pos_encoding="learned")
    two = EncoderDecoder(config, [4, 5])
    for single, seed in zip(two.split(), [4, 5]):
        for (name, p), q in zip(EncoderDecoder(config, [seed]).named_parameters(),
                                single.parameters()):
            assert torch.equal(p, q), name

    def trained():
        model = EncoderDecoder(config, [7])
        train(model, CompletionTask(), [data.train], None, TrainConfig(max_steps=5,
                                                                        batch_size=16))
        return model

    a, b = trained(), trained()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(a.unembed.weight, EncoderDecoder(config, [7]).unembed.weight)
    # the comparison architectures of the benchmark have comparable budgets
    base = {"k": 3, "d_model": 64, "n_heads": 4, "d_mlp": 256, "pos_encoding": "learned"}
    ed = EncoderDecoder(Seq2SeqConfig(**base)).n_params
    do = DecoderOnly(Seq2SeqConfig(**base, arch="decoder_only", n_encoder_layers=0,
                                   n_decoder_layers=4)).n_params
    assert 0.8 < do / ed < 1.0


def test_save_and_load_round_trip(tmp_path, data):
    from dyckbook.experiment.checkpoint import load_model, save_model

    for kw in (ED, DO):
        model = build_seq2seq(Seq2SeqConfig(**kw, pos_encoding="learned"), [3]).eval()
        back = load_model(save_model(tmp_path / f"{kw['arch']}.pt", model))
        assert type(back) is type(model) and back.config == model.config and back.seeds == [3]
        b = batch_of(data)
        torch.testing.assert_close(back(b["source"], b["target"]),
                                   model(b["source"], b["target"]))


def test_config_round_trip_and_bad_values():
    config = Seq2SeqConfig(**DO, pos_encoding="learned")
    assert config.to_dict()["kind"] == "seq2seq"
    assert Seq2SeqConfig.from_dict(config.to_dict()) == config
    assert (config.sep, config.d_vocab) == (7, 8) and Seq2SeqConfig(k=2).d_vocab == 7
    for kwargs, message in [({"arch": "rnn"}, "arch must be one of"),
                            ({"n_encoder_layers": 0}, "n_encoder_layers must be an int >= 1"),
                            ({"d_model": 30}, r"d_model \(30\) must be divisible by n_heads"),
                            ({"dropout": 1.0}, r"dropout must be in \[0, 1\)"),
                            ({"pos_encoding": "xpos"}, "pos_encoding must be one of"),
                            ({"target_pos_encoding": "absolute"}, "'absolute' .* decoding"),
                            ({"arch": "decoder_only"}, "set n_encoder_layers=0"),
                            ({"norm": "mid"}, "norm must be one of")]:
        with pytest.raises(ValueError, match=message):
            Seq2SeqConfig(**kwargs)
    with pytest.raises(ValueError, match=r"unknown keys \['n_layers'\]"):
        Seq2SeqConfig.from_dict({"n_layers": 2})
    with pytest.raises(ValueError, match="arch='encoder_decoder'"):
        EncoderDecoder(config)
    with pytest.raises(ValueError, match="config must be a Seq2SeqConfig"):
        build_seq2seq({"arch": "decoder_only"})


def test_bad_model_inputs_get_one_clear_error(data):
    model = EncoderDecoder(Seq2SeqConfig(**ED))
    b = batch_of(data)
    source, target = b["source"][0], b["target"][0]
    for args, message in [((source.float(), target), "source must be an int64 torch.Tensor"),
                          ((source, target + 10), r"target holds id 1\d, outside \[0, 7\)"),
                          ((source[:3], target), "must share"),
                          ((torch.ones(2, 30, dtype=torch.long), target[:2]),
                           "source has 30 positions, more than 26"),
                          ((source[None, None], target), r"source must be \(models=1")]:
        with pytest.raises(ValueError, match=message):
            model(*args)
    with pytest.raises(ValueError, match=r"max_new_tokens must be an int in 1..n_ctx \+ 1 = 25"):
        greedy_decode(model, source, 26)
    two = EncoderDecoder(Seq2SeqConfig(**ED), [0, 1])
    with pytest.raises(ValueError, match="needs a single model"):
        two.run_with_cache(source[None].expand(2, -1, -1), target[None].expand(2, -1, -1))
    with pytest.raises(ValueError, match="needs a single model"):
        evaluate_completions(two, data.val)
    with pytest.raises(ValueError, match="width must be >= the longest string"):
        source_tokens(data.val.codes, data.val.lengths, 5)
    assert source[0, 0] == BOS and (source == EOS).sum() == len(source)
