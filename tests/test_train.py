"""Tests for train: the loop's steps, schedule, data order, freezing, stopping, errors."""

import math
import threading
from dataclasses import replace
from itertools import pairwise

import numpy as np
import pytest
import torch

from dyckbook.data import negatives as N
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck, sample_lengths
from dyckbook.experiment.evaluate import predict
from dyckbook.experiment.train import TrainConfig, first_reach, train
from dyckbook.nn import blocks
from dyckbook.nn.model import ClassificationTask, Classifier, ModelConfig

LANG = Dyck(1)
CONFIG = ModelConfig(k=1, n_ctx=16, d_model=16, n_heads=2, d_mlp=32, n_layers=1, dropout=0.0,
                     pos_encoding="learned")


def _data(seed, n=50, shortest=2):
    rng = np.random.default_rng(seed)
    lengths = sample_lengths(rng, n - n // 2, shortest, 16)
    members = Dataset.from_codes(LANG, *LANG.sample_codes(rng, lengths))
    codes, lengths, kinds = N.sample_negatives(LANG, rng, lengths[: n // 2], "random")
    return Dataset.concat([members, Dataset.from_codes(LANG, codes, lengths, kinds)])


class Recording(ClassificationTask):
    """The classification task, remembering the rows of every training batch."""

    def __init__(self):
        super().__init__()
        self.rows = []

    def batch(self, data, rows):  # rows of the concatenated sets -> rows of each model's set
        n = len(data["labels"]) // len(rows)  # (every model is training in these tests)
        self.rows.append([r.clone() for r in rows % n])
        return super().batch(data, rows)


def test_a_tiny_model_overfits_a_tiny_set():
    data = _data(0, n=16, shortest=6)
    model = Classifier(CONFIG, [0])
    result = train(model, ClassificationTask(), [data], [data],
                   TrainConfig(lr=1e-2, batch_size=16, max_steps=150, eval_every=10,
                               target_accuracy=1.0))
    assert result.stopped_at[0] is not None and result.steps == result.stopped_at[0]
    assert not model.training
    assert (predict(model, data) == data.labels).all()
    assert result.history[-1]["val_accuracy"] == [1.0]
    assert result.history[-1]["train_loss"][0] < result.history[0]["train_loss"][0]
    # it stops on the mean of its last target_window validations, never on one lucky pass
    accs = [h["val_accuracy"][0] for h in result.history]
    assert len(accs) >= 3 and sum(accs[-3:]) / 3 >= 1.0
    assert all(sum(accs[i - 2:i + 1]) / 3 < 1.0 for i in range(2, len(accs) - 1))


@pytest.mark.parametrize("settings, steps, evals", [
    ({"epochs": 3}, 12, [4, 8, 12]),
    ({"epochs": 2, "eval_every": 3}, 8, [3, 6, 8]),
    ({"max_steps": 7}, 7, [4, 7]),
    ({"max_steps": 7, "epochs": 100, "eval_every": 2}, 7, [2, 4, 6, 7]),
])
def test_epoch_and_step_mode_step_counts(settings, steps, evals):
    task = Recording()
    model = Classifier(CONFIG, [1])
    result = train(model, task, [_data(1)], None, TrainConfig(batch_size=16, **settings))
    assert result.steps == steps == len(task.rows)  # 50 strings, 16 a batch: 4 steps an epoch
    assert [h["step"] for h in result.history] == evals
    assert [h["epoch"] for h in result.history] == [s / 4 for s in evals]
    assert [len(r[0]) for r in task.rows[:4]] == [16, 16, 16, 2]
    assert all("val_accuracy" not in h for h in result.history)


def _epochs(rows, per_epoch):
    return [torch.cat([r[0] for r in rows[i:i + per_epoch]])
            for i in range(0, len(rows), per_epoch)]


@pytest.mark.parametrize("bucket", [False, True])
def test_epoch_order_is_a_permutation_and_bucket_groups_similar_lengths(bucket):
    data = _data(2, n=100)
    task = Recording()
    train(Classifier(CONFIG, [2]), task, [data], None,
          TrainConfig(batch_size=16, epochs=3, bucket=bucket))
    epochs = _epochs(task.rows, 7)
    for order in epochs:
        assert sorted(order.tolist()) == list(range(100))
    assert not torch.equal(epochs[0], epochs[1])
    lengths = torch.from_numpy(data.lengths)
    # with bucketing the full batches cover disjoint length ranges (the epoch fits one window)
    spans = sorted((int(lengths[r[0]].min()), int(lengths[r[0]].max()))
                   for r in task.rows[:6])
    disjoint = all(a[1] <= b[0] for a, b in pairwise(spans))
    assert disjoint == bucket
    if bucket:  # the batches are shuffled, not served in length order
        firsts = [int(lengths[r[0]].min()) for r in task.rows[:6]]
        assert firsts != sorted(firsts)


def test_models_draw_their_own_order():
    task = Recording()
    data = _data(3)
    train(Classifier(CONFIG, [5, 6]), task, [data, data], None,
          TrainConfig(batch_size=16, max_steps=4))
    alone = Recording()
    train(Classifier(CONFIG, [6]), alone, [data], None, TrainConfig(batch_size=16, max_steps=4))
    assert all(torch.equal(a[1], b[0]) for a, b in zip(task.rows, alone.rows))
    assert not all(torch.equal(r[0], r[1]) for r in task.rows)


def _factor(schedule, step, warmup, total):
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    return {"constant": 1.0, "linear": 1.0 - progress,
            "cosine": 0.5 * (1 + math.cos(math.pi * progress))}[schedule]


@pytest.mark.parametrize("schedule", ["constant", "linear", "cosine"])
def test_learning_rate_schedule(schedule):
    total, warmup = 12, 4
    result = train(Classifier(CONFIG, [0]), ClassificationTask(), [_data(0, n=16)], None,
                   TrainConfig(lr=0.01, batch_size=8, max_steps=total, warmup_steps=warmup,
                               schedule=schedule, eval_every=1))
    lrs = [h["lr"] for h in result.history]  # the rate of the next step, after each step
    expected = [0.01 * _factor(schedule, s, warmup, total) for s in range(1, total + 1)]
    assert lrs == pytest.approx(expected, abs=1e-12)
    assert lrs[:3] == pytest.approx([0.005, 0.0075, 0.01])
    if schedule == "cosine":
        assert lrs[7] == pytest.approx(0.005) and lrs[-1] == pytest.approx(0.0, abs=1e-12)


def test_freeze_keeps_named_parameters_and_leaves_them_trainable():
    model = Classifier(CONFIG, [4])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    frozen = ("embed.weight", "blocks.0.attn.qkv.weight")
    train(model, ClassificationTask(), [_data(4)], None,
          TrainConfig(batch_size=16, max_steps=5, freeze=frozen))
    after = model.state_dict()
    for name, value in before.items():
        assert torch.equal(value, after[name]) == (name in frozen), name
    assert all(p.requires_grad for p in model.parameters())


def test_training_is_deterministic_and_leaves_global_random_state_alone():
    torch.manual_seed(123)
    np.random.seed(123)
    torch_state, numpy_state = torch.get_rng_state(), np.random.get_state()[1].copy()
    weights = []
    for _ in range(2):
        model = Classifier(replace(CONFIG, dropout=0.3), [8])
        train(model, ClassificationTask(), [_data(8)], None,
              TrainConfig(batch_size=16, max_steps=6, grad_clip=0.1))
        weights.append(model.state_dict())
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert torch.equal(torch.get_rng_state(), torch_state)
    assert (np.random.get_state()[1] == numpy_state).all()


def test_a_stopped_model_reports_none_while_the_others_train_on():
    data = _data(9, n=16)
    x = data.subset([0])
    both = Dataset.concat([x, Dataset(LANG, x.codes, x.lengths, 1 - x.labels, x.kinds)])
    easy = Dataset.concat([x, x])  # accuracy 0 or 1: stops once its one string is right
    model = Classifier(CONFIG, [9, 10])
    result = train(model, ClassificationTask(), [data, data], [both, easy],
                   TrainConfig(lr=1e-2, batch_size=8, max_steps=40, eval_every=2,
                               target_accuracy=1.0))
    stop = result.stopped_at[1]
    assert result.stopped_at[0] is None and stop is not None and stop < 40
    assert result.steps == 40 and model.n_models == 2 and model.seeds == [9, 10]
    later = [h for h in result.history if h["step"] > stop]
    assert later and all(h["val_accuracy"][1] is None and h["train_loss"][1] is None
                         for h in later)
    assert all(h["val_accuracy"][0] == 0.5 for h in result.history)


@pytest.mark.parametrize("changes, message", [
    ({"lr": 0}, "TrainConfig.lr must be > 0, got 0"),
    ({"batch_size": 0}, "TrainConfig.batch_size must be an int >= 1, got 0"),
    ({"epochs": 2.0}, "TrainConfig.epochs must be an int >= 1, got 2.0"),
    ({"max_steps": 0}, "TrainConfig.max_steps must be an int >= 1, got 0"),
    ({"warmup_steps": -1}, "TrainConfig.warmup_steps must be an int >= 0, got -1"),
    ({"schedule": "step"}, "TrainConfig.schedule must be one of .*'step'"),
    ({"grad_clip": 0.0}, "TrainConfig.grad_clip must be > 0 or None, got 0.0"),
    ({"weight_decay": -0.1}, "TrainConfig.weight_decay must be >= 0, got -0.1"),
    ({"target_window": 0}, "TrainConfig.target_window must be an int >= 1, got 0"),
    ({"target_accuracy": 1.5}, "TrainConfig.target_accuracy must be in \\(0, 1\\], got 1.5"),
    ({"bucket": "yes"}, "TrainConfig.bucket must be True or False, got 'yes'"),
    ({"matmul": "float16"}, "TrainConfig.matmul must be one of .*'float16'"),
])
def test_train_config_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**changes)


def test_train_config_round_trip():
    config = TrainConfig(max_steps=9, freeze=["embed.weight"], grad_clip=1.0, schedule="cosine")
    assert config.freeze == ("embed.weight",)
    assert TrainConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown keys \\['steps'\\]"):
        TrainConfig.from_dict({"steps": 3})


def test_train_errors():
    a, b = _data(0), _data(1, n=40)
    task, config = ClassificationTask(), TrainConfig(max_steps=1)
    with pytest.raises(ValueError, match="one dataset per model \\(2\\), got 1 and None"):
        train(Classifier(CONFIG, [0, 1]), task, [a], None, config)
    with pytest.raises(ValueError, match="one dataset per model \\(1\\), got 1 and 2"):
        train(Classifier(CONFIG, [0]), task, [a], [a, a], config)
    with pytest.raises(ValueError, match="one size, got sizes \\[40, 50\\]"):
        train(Classifier(CONFIG, [0, 1]), task, [a, b], None, config)
    with pytest.raises(ValueError, match="non-empty"):
        train(Classifier(CONFIG, [0]), task, [Dataset.empty(LANG)], None, config)
    with pytest.raises(ValueError, match="unknown parameter 'embed.bias'"):
        train(Classifier(CONFIG, [0]), task, [a], None,
              TrainConfig(max_steps=1, freeze=("embed.bias",)))


def test_ids_are_checked_at_the_data_boundary_before_any_step():
    """The steps read no ids back from a device (``tokenizer.check_ids`` reads host tensors
    only): ``train`` checks every dataset's tokens on the host first, training and validation,
    so a set the model cannot read fails before its first step, naming the id."""
    from dyckbook.nn import tokenizer

    dyck2 = Dyck(2)
    rng = np.random.default_rng(0)
    wide = Dataset.from_codes(dyck2, *dyck2.sample_codes(rng, np.full(50, 8)))
    for sets in (([wide], None), ([_data(0)], [wide])):
        model = Classifier(CONFIG, [0])
        before = [p.clone() for p in model.parameters()]
        with pytest.raises(ValueError, match=r"tokens holds id [67], outside \[0, 5\)"):
            train(model, ClassificationTask(), *sets, TrainConfig(max_steps=1))
        assert all(torch.equal(p, q) for p, q in zip(before, model.parameters()))
    tokens = torch.tensor([[0, 9, 2]])
    assert tokenizer.to_device(tokens, "cpu") is tokens and tokenizer.to_device(tokens, None) \
        is tokens
    if not torch.cuda.is_available():
        assert tokenizer.check_ids(tokens.to("meta"), 5) is None  # a device's: not read back


def test_bfloat16_products_round_inputs_and_outputs_and_stay_in_their_thread():
    torch.manual_seed(0)
    bias, x, w = torch.randn(2, 1, 8), torch.randn(2, 5, 16), torch.randn(2, 16, 8)
    exact = torch.baddbmm(bias, x, w)
    rounded = torch.baddbmm(bias.bfloat16(), x.bfloat16(), w.bfloat16()).float()
    assert blocks.MATMUL.get() == "float32" and torch.equal(blocks.affine(bias, x, w), exact)
    seen = {}

    def other_thread():  # another thread keeps float32 while this one computes in bfloat16
        seen["other"] = blocks.affine(bias, x, w)

    token = blocks.MATMUL.set("bfloat16")
    try:
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        assert torch.equal(blocks.affine(bias, x, w), rounded)
        assert not torch.allclose(rounded, exact, atol=1e-3)
        assert torch.allclose(rounded, exact, rtol=0.02, atol=0.05)
        x.requires_grad_(True)
        w.requires_grad_(True)
        grad = torch.randn(2, 5, 8)
        gx, gw = torch.autograd.grad(blocks.affine(bias, x, w), (x, w), grad)
        assert torch.equal(gx, torch.bmm(grad.bfloat16(), w.bfloat16().transpose(1, 2)).float())
        assert torch.equal(gw, torch.bmm(x.bfloat16().transpose(1, 2), grad.bfloat16()).float())
        # a bfloat16 output's bias gradient: the bfloat16 gradient summed, rounded like gw
        b = bias.clone().requires_grad_(True)
        (gb,) = torch.autograd.grad(blocks.affine(b, x, w, torch.bfloat16), b, grad.bfloat16())
        assert gb.dtype == torch.float32
        assert torch.equal(gb, grad.bfloat16().sum(1, keepdim=True).float())
        assert torch.allclose(gb, grad.bfloat16().float().sum(1, keepdim=True), rtol=2 ** -8)
    finally:
        blocks.MATMUL.reset(token)
    assert torch.equal(seen["other"], exact.detach())
    # train sets it for its own products only, and leaves it as it found it
    model = Classifier(CONFIG, [0])
    calls = []
    original = blocks.affine

    def spy(*args):
        calls.append(blocks.MATMUL.get())
        return original(*args)

    blocks.affine, before = spy, blocks.affine
    try:
        train(model, ClassificationTask(), [_data(0)], None,
              TrainConfig(max_steps=2, matmul="bfloat16"))
        during, calls = set(calls), []
        model(torch.tensor([[0, 3, 4, 2]]))
    finally:
        blocks.affine = before
    assert during == {"bfloat16"} and set(calls) == {"float32"}
    assert blocks.MATMUL.get() == "float32"


@pytest.mark.parametrize("act_fn", ["relu", "gelu"])
def test_mlp_in_bfloat16_is_the_float32_mlp_with_products_rounded(act_fn):
    # the hidden layer stays in bfloat16 between the products: the same numbers as a float32
    # hidden layer rounded on its way into fc_out
    torch.manual_seed(1)
    mlp = blocks.MLP(2, 16, 32, act_fn)
    blocks.init_models(mlp, [3, 4])
    x = torch.randn(2, 3, 5, 16, requires_grad=True)
    token = blocks.MATMUL.set("bfloat16")
    try:
        out = mlp(x, None, "mlp")
        grads = torch.autograd.grad(out.square().sum(), (x, *mlp.parameters()))
    finally:
        blocks.MATMUL.reset(token)

    def rounded(bias, h, w):  # a bfloat16 product, its output back in float32
        return torch.baddbmm(bias.bfloat16(), h.bfloat16(), w.bfloat16()).float()

    def by_hand(x):
        hidden = rounded(mlp.fc_in.bias, x.reshape(2, -1, 16), mlp.fc_in.weight)
        hidden = torch.relu(hidden) if act_fn == "relu" else torch.nn.functional.gelu(hidden)
        return rounded(mlp.fc_out.bias, hidden, mlp.fc_out.weight).view(x.shape)

    with torch.no_grad():
        assert out.shape == x.shape and torch.equal(out, by_hand(x))
    expected = torch.autograd.grad(by_hand(x).square().sum(), (x, *mlp.parameters()))
    for got, want in zip(grads, expected):  # the backward's products are rounded as well
        assert got.dtype == torch.float32 and torch.allclose(got, want, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("accuracies, window, expected", [
    ([0.9, 1.0, 1.0, 0.98], 3, 3),  # (0.9 + 1 + 1) / 3 = 0.967 < 0.99; then 0.993
    ([0.99, 1.0, 1.0], 3, 2),
    ([1.0], 3, None),
    ([1.0, 0.5], 1, 0),
    ([0.99, None, 1.0, 1.0, 1.0], 3, None)])  # a stopped model's None ends the search
def test_first_reach_is_the_early_stop_rule(accuracies, window, expected):
    assert first_reach(accuracies, 0.99, window) == expected
