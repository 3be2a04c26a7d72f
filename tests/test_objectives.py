"""Auxiliary objectives (FLaRe): the next-symbol sets against every word of the language, the
language-model targets, and training through the package's one loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.interp.constructions import all_strings
from dyckbook.nn.model import ClassificationTask, Classifier, ModelConfig


@pytest.mark.parametrize("language", [Dyck(2), Dyck(2, max_depth=2)], ids=["k2", "k2-D2"])
def test_next_symbols_are_the_continuations_of_some_word(language):
    """Oracle: the prefixes of every word of length <= 10 (a prefix of <= 5 symbols that can be
    completed at all can be completed within 10)."""
    codes, lengths = all_strings(2, 10)
    words = language.is_member((codes, lengths))
    prefixes = {bytes(codes[i, :n]) for i in np.flatnonzero(words) for n in range(lengths[i] + 1)}
    members = {bytes(codes[i, :lengths[i]]) for i in np.flatnonzero(words)}
    short = lengths <= 4
    codes, lengths = codes[short][:, :4], lengths[short]
    allowed = language.next_symbols(codes, lengths)
    for b in range(len(lengths)):
        for i in range(int(lengths[b]) + 1):
            p = bytes(codes[b, :i])
            valid = p in prefixes and all(bytes(codes[b, :j]) in prefixes for j in range(i))
            want = [valid and p + bytes([c]) in prefixes for c in range(4)] + [valid
                                                                               and p in members]
            assert allowed[b, i].tolist() == want, (codes[b, :lengths[b]].tolist(), i)


def _dataset(strings, labels):
    language = Dyck(2)
    codes, lengths = language.alphabet.encode(strings)
    return Dataset(language, codes, lengths, np.array(labels, np.int8),
                   np.array(["member" if y else "random" for y in labels]))


def test_language_model_targets_are_the_members_next_symbols():
    data = _dataset(["([])", "(]"], [1, 0])
    t = ClassificationTask("language_model").tensors(data, 4)
    assert t["aux"].shape == (2, 6, 5)
    assert t["aux"][0, :5].argmax(-1).tolist() == [0, 2, 3, 1, 4]  # ( [ ] ) then the end
    assert t["aux_mask"][0].tolist() == [True] * 5 + [False]
    assert not t["aux_mask"][1].any()  # a negative teaches no continuation
    sets = ClassificationTask("next_symbols").tensors(data, 4)
    assert sets["aux"][1, 1].tolist() == [1, 1, 1, 0, 0] and not sets["aux_mask"][1, 2:].any()


@pytest.mark.parametrize("objective", ["next_symbols", "language_model"])
def test_an_auxiliary_objective_trains_through_run_and_batched_equals_alone(objective):
    from dyckbook.data.protocol import DataConfig
    from dyckbook.experiment.run import RunConfig, run_seeds
    from dyckbook.experiment.train import TrainConfig

    model = ModelConfig(k=2, n_ctx=12, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                        dropout=0.0, mask="causal", readout="end", pos_encoding="learned",
                        objective=objective)
    both = Classifier(model, [1, 2])
    tokens = torch.randint(3, 7, (2, 5, 9))
    logits, aux = both.with_auxiliary(tokens)
    for s, single in enumerate(both.split()):
        one, one_aux = single.with_auxiliary(tokens[s:s + 1])
        assert torch.allclose(one[0], logits[s], atol=1e-5)
        assert torch.allclose(one_aux[0], aux[s], atol=1e-5)
    config = RunConfig(DataConfig(k=2, min_length=2, max_length=12, n_train=400, n_val=50,
                                  n_test=100), model,
                       TrainConfig(lr=3e-3, batch_size=32, max_steps=20), baselines=())
    (result,) = run_seeds(config, [0])
    assert result.record.config["model"]["objective"] == objective
    losses = [h["train_loss"] for h in result.record.history]
    assert all(np.isfinite(losses))


def test_objectives_need_a_causal_mask_and_a_model_with_the_head():
    with pytest.raises(ValueError, match="needs mask='causal'"):
        ModelConfig(objective="next_symbols")
    with pytest.raises(ValueError, match="objective must be one of"):
        ClassificationTask("lm")
    with pytest.raises(ValueError, match="objective='membership'"):
        Classifier(ModelConfig(d_model=8, n_heads=1, d_mlp=8)).with_auxiliary(
            torch.zeros(1, 1, 4, dtype=torch.long))
