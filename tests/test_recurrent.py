"""The recurrent references: the LSTM against torch's own, the stack cell's arithmetic, the
model dimension, padding, and training through the package's one loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dyckbook.data.vocab import PAD
from dyckbook.nn.recurrent import RecurrentClassifier, RecurrentConfig
from dyckbook.nn.tokenizer import encode

STRINGS = ["(())", "()()()", "((()))()", "()", ")("]


def _tokens(strings, width=None):
    codes = [[{"(": 0, ")": 1}[c] for c in s] for s in strings]
    lengths = np.array([len(c) for c in codes])
    arr = np.full((len(codes), max(lengths)), 255, np.uint8)
    for i, c in enumerate(codes):
        arr[i, :len(c)] = c
    return encode(arr, lengths, width or int(lengths.max()))


def test_lstm_equals_torchs_lstm_on_padded_rows():
    model = RecurrentClassifier(RecurrentConfig(n_ctx=12, d_hidden=6, d_embed=5), [3])
    lstm = torch.nn.LSTM(5, 6, batch_first=True)
    with torch.no_grad():
        lstm.weight_ih_l0.copy_(model.input.weight[0].T)
        lstm.bias_ih_l0.copy_(model.input.bias[0, 0])
        lstm.weight_hh_l0.copy_(model.recur.weight[0].T)
        lstm.bias_hh_l0.copy_(model.recur.bias[0, 0])
        tokens = _tokens(STRINGS)
        lengths = (tokens != PAD).sum(1)
        packed = torch.nn.utils.rnn.pack_padded_sequence(model.embed(tokens[None])[0], lengths,
                                                         batch_first=True, enforce_sorted=False)
        _, (h, _) = lstm(packed)
        assert torch.allclose(model.states(tokens[None])["hidden"][0], h[0], atol=1e-5)


def _forced(action_bias):
    model = RecurrentClassifier(RecurrentConfig(n_ctx=12, cell="stack", d_hidden=8,
                                                d_stack=3), [1])
    with torch.no_grad():
        model.action.weight.zero_()
        model.action.bias.copy_(torch.tensor(action_bias, dtype=torch.float32))
    return model


def test_stack_cell_pushes_pops_and_ignores_pads():
    tokens = _tokens(STRINGS, width=12)[None]
    real = (tokens != PAD).sum(-1)[0]
    with torch.no_grad():
        pushing = _forced([40.0, -40.0, -40.0]).states(tokens)
        popping = _forced([-40.0, 40.0, -40.0]).states(tokens)
        model = _forced([0.3, -0.2, 0.1])
        mixed = model.states(tokens)
        tight = model.states(_tokens(STRINGS)[None])
    stack = pushing["stack"][0]  # (batch, depth, d_stack)
    filled = (stack.abs().sum(-1) > 0).sum(-1)
    assert torch.equal(filled, real)  # one element pushed per real token, the rest empty
    top = torch.sigmoid(_forced([40.0, -40.0, -40.0]).push(pushing["hidden"]))[0]
    assert torch.allclose(stack[:, 0], top, atol=1e-5)  # the last push is on top
    assert popping["stack"].abs().max() < 1e-30  # softmax leaves e^-80 of a push
    actions = mixed["actions"][0]  # (batch, pos, 3)
    on = torch.arange(tokens.shape[2])[None] < real[:, None]
    assert torch.allclose(actions.sum(-1)[on], torch.ones(int(on.sum())), atol=1e-6)
    assert (actions[~on] == 0).all()
    assert torch.allclose(mixed["hidden"], tight["hidden"], atol=1e-6)  # pads change nothing
    assert torch.allclose(mixed["stack"], tight["stack"], atol=1e-6)


@pytest.mark.parametrize("cell", ["lstm", "stack"])
def test_batched_equals_alone(cell):
    both = RecurrentClassifier(RecurrentConfig(n_ctx=12, cell=cell), [4, 5])
    tokens = _tokens(STRINGS)
    together = both(tokens[None].expand(2, *tokens.shape))
    for s, single in enumerate(both.split()):
        assert torch.allclose(together[s], single(tokens), atol=1e-5)
    assert not torch.allclose(together[0], together[1])


@pytest.mark.parametrize("cell", ["lstm", "stack"])
def test_a_model_stopping_early_leaves_the_others_and_comes_back(cell):
    """train() drops a model that reached its target from the batch and puts it back at the
    end; a recurrent network (no dropout generators) must survive both."""
    from dyckbook.experiment import train

    config = RecurrentConfig(n_ctx=12, cell=cell)
    model, alone = RecurrentClassifier(config, [0, 1, 2]), RecurrentClassifier(config, [2])
    tokens = _tokens(STRINGS)
    optimizer = torch.optim.Adam(model.parameters())
    stopped = train._weights(model, 0)
    train._keep_models(model, optimizer, [1, 2])
    assert model.seeds == [1, 2] and model.n_models == 2
    assert torch.allclose(model(tokens[None].expand(2, *tokens.shape))[1], alone(tokens),
                          atol=1e-5)
    train._restore_models(model, [stopped, train._weights(model, 0), train._weights(model, 1)],
                          [0, 1, 2], [])
    assert model.seeds == [0, 1, 2]
    assert torch.allclose(model.split()[2](tokens), alone(tokens), atol=1e-5)
    train._keep_models(model, optimizer, [2])  # down to one model: it keeps its model axis
    assert train._weights(model, 0)["classifier.weight"].shape == (config.d_hidden, 2)


@pytest.mark.parametrize("cell", ["lstm", "stack"])
def test_a_recurrent_reference_learns_dyck1_through_run(cell):
    from dyckbook.data.protocol import DataConfig
    from dyckbook.experiment.run import RunConfig, run_seeds
    from dyckbook.experiment.train import TrainConfig

    config = RunConfig(DataConfig(k=1, min_length=2, max_length=12, n_train=1000, n_val=100,
                                  n_test=200),
                       RecurrentConfig(k=1, n_ctx=12, cell=cell, d_hidden=32, d_embed=16),
                       TrainConfig(lr=1e-2, batch_size=32, max_steps=300), baselines=())
    results = run_seeds(config, [0, 1])
    assert [r.record.config["model"]["kind"] for r in results] == ["recurrent"] * 2
    assert all(r.record.train_accuracy > 0.9 for r in results), [
        r.record.train_accuracy for r in results]


@pytest.mark.parametrize(("changes", "message"), [
    ({"cell": "gru"}, "cell must be one of"), ({"d_hidden": 0}, "d_hidden must be a positive"),
    ({"k": True}, "k must be a positive int"),
])
def test_config_errors_name_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        RecurrentConfig(**changes)
