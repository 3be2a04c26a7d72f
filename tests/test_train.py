"""Tests for dyckbook.train: overfitting, determinism, resume, snapshots, early stopping, devices."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dyckbook.model import ModelConfig, TransformerClassifier
from dyckbook.train import TrainConfig, TrainResult, select_device, train

torch.set_num_threads(1)

START, PAD, END, OPEN, CLOSE = 0, 1, 2, 3, 4


def balanced(s: str) -> bool:
    """Independent Dyck-1 checker (a counter)."""
    depth = 0
    for c in s:
        depth += 1 if c == "(" else -1
        if depth < 0:
            return False
    return depth == 0


def make_examples(seed: int, n: int, max_len: int = 8) -> list[tuple[str, int]]:
    """Half balanced strings (random walks kept >= 0), half equal-count non-members."""
    rng = np.random.default_rng(seed)
    out: list[tuple[str, int]] = []
    while len(out) < n:
        length = int(rng.integers(1, max_len // 2 + 1)) * 2
        s = "".join(rng.permutation(list("(" * (length // 2) + ")" * (length // 2))))
        label = int(balanced(s))
        if sum(1 for _, lab in out if lab == label) < n / 2:  # keep the classes balanced
            out.append((s, label))
    return out


def collate(examples: list[tuple[str, int]]) -> dict:
    width = max(len(s) for s, _ in examples) + 2
    tokens = torch.full((len(examples), width), PAD, dtype=torch.long)
    for b, (s, _) in enumerate(examples):
        tokens[b, : len(s) + 2] = torch.tensor([START] + [OPEN if c == "(" else CLOSE for c in s] + [END])
    return {
        "tokens": tokens,
        "labels": torch.tensor([lab for _, lab in examples]),
        "lengths": torch.tensor([len(s) for s, _ in examples]),
        "kinds": ["positive" if lab else "equal_counts" for _, lab in examples],
    }


class Loader:
    """A minimal deterministic loader with the set_epoch protocol (shuffle from (seed, epoch))."""

    def __init__(self, examples, batch_size: int, shuffle: bool, seed: int = 0) -> None:
        self.examples, self.batch_size, self.shuffle, self.seed = examples, batch_size, shuffle, seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return math.ceil(len(self.examples) / self.batch_size)

    def __iter__(self):
        order = np.arange(len(self.examples))
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(order)
        for i in range(0, len(order), self.batch_size):
            yield collate([self.examples[j] for j in order[i : i + self.batch_size]])


def tiny_model(seed: int = 0, dropout: float = 0.1) -> TransformerClassifier:
    cfg = ModelConfig(
        d_vocab=5, n_ctx=8, d_model=32, n_heads=2, d_mlp=64, n_layers=2, dropout=dropout,
        pos_encoding="learned", readout="mean",
    )
    return TransformerClassifier(cfg, generator=torch.Generator().manual_seed(seed))


def strip_time(history: list[dict]) -> list[dict]:
    return [{k: v for k, v in rec.items() if k != "seconds"} for rec in history]


def quick(**overrides) -> TrainConfig:
    fields = {"lr": 3e-3, "epochs": 3, "device": "cpu", "progress": False, "seed": 1}
    fields.update(overrides)
    return TrainConfig(**fields)


def test_tiny_model_overfits_32_examples():
    data = make_examples(0, 32)
    loader = Loader(data, 8, shuffle=True)
    result = train(tiny_model(dropout=0.0), loader, Loader(data, 32, False), quick(epochs=60, target_val_accuracy=1.0))
    assert result.history[-1]["train_accuracy"] == 1.0
    assert result.history[-1]["val_accuracy"] == 1.0
    assert result.stopped_early


def test_same_seed_same_history_and_weights():
    data = make_examples(1, 48)
    runs = []
    for _ in range(2):
        model = tiny_model(seed=2)
        result = train(model, Loader(data, 8, True), Loader(data, 16, False), quick(schedule="cosine", warmup_steps=3))
        runs.append((strip_time(result.history), model.state_dict()))
    assert runs[0][0] == runs[1][0]
    for key in runs[0][1]:
        assert torch.equal(runs[0][1][key], runs[1][1][key]), key
    other = tiny_model(seed=2)
    result = train(other, Loader(data, 8, True), Loader(data, 16, False), quick(schedule="cosine", warmup_steps=3, seed=2))
    assert strip_time(result.history) != runs[0][0]  # the seed drives dropout


def test_train_leaves_global_rng_alone():
    state = torch.get_rng_state()
    data = make_examples(2, 16)
    train(tiny_model(), Loader(data, 8, True), None, quick(epochs=1, eval_train=False))
    assert torch.equal(torch.get_rng_state(), state)


class Interrupt(Exception):
    pass


def test_resume_equals_uninterrupted(tmp_path):
    data = make_examples(3, 40)
    test = make_examples(4, 16)
    config = {"epochs": 4, "schedule": "cosine", "warmup_steps": 2, "grad_clip": 1.0,
              "snapshot_params": ("classifier.weight", "blocks.0.attn.qkv.weight")}

    full_model = tiny_model(seed=5)
    full = train(full_model, Loader(data, 8, True), Loader(test, 8, False), quick(**config),
                 test_loader=Loader(test, 8, False))

    ckpt = tmp_path / "ckpt"
    def stop_after_two(record, model):
        if record["epoch"] == 2:
            raise Interrupt

    model = tiny_model(seed=5)
    with pytest.raises(Interrupt):
        train(model, Loader(data, 8, True), Loader(test, 8, False),
              quick(**config, checkpoint_dir=str(ckpt)), test_loader=Loader(test, 8, False),
              callbacks=[stop_after_two])
    # the interruption hit after epoch 2's record but before its checkpoint: epoch 1 is on disk
    resumed_model = tiny_model(seed=99)  # weights come from the checkpoint
    resumed = train(resumed_model, Loader(data, 8, True), Loader(test, 8, False),
                    quick(**config, checkpoint_dir=str(ckpt), resume=True),
                    test_loader=Loader(test, 8, False))
    assert strip_time(resumed.history) == strip_time(full.history)
    assert np.array_equal(resumed.snapshot_steps, full.snapshot_steps)
    for name in full.snapshots:
        assert np.array_equal(resumed.snapshots[name], full.snapshots[name])
    for key, value in full_model.state_dict().items():
        assert torch.equal(resumed_model.state_dict()[key], value), key


def test_snapshots_per_epoch_and_per_step():
    data = make_examples(5, 24)
    model = tiny_model()
    result = train(model, Loader(data, 8, True), None, quick(epochs=2, eval_train=False))
    assert isinstance(result, TrainResult)
    assert result.snapshot_steps.tolist() == [0, 3, 6]
    snaps = result.snapshots["classifier.weight"]
    assert snaps.shape == (3, 2 * 32)
    assert np.array_equal(snaps[-1], model.classifier.weight.detach().numpy().ravel())
    assert not np.array_equal(snaps[0], snaps[-1])
    result = train(tiny_model(), Loader(data, 8, True), None,
                   quick(epochs=2, eval_train=False, snapshot_every_steps=2, max_steps=5))
    assert result.snapshot_steps.tolist() == [0, 2, 4]
    assert result.steps == 5 and len(result.history) == 2


def test_history_fields_and_lr_schedule():
    data = make_examples(6, 16)
    result = train(tiny_model(), Loader(data, 8, True), Loader(data, 8, False),
                   quick(epochs=2, schedule="linear", warmup_steps=1), test_loader=Loader(data, 8, False))
    first = result.history[0]
    for key in ("epoch", "step", "train_loss", "train_accuracy", "train_loss_running",
                "val_loss", "val_accuracy", "test_loss", "test_accuracy", "lr", "seconds"):
        assert key in first, key
    assert result.history[-1]["lr"] == pytest.approx(0.0, abs=1e-12)  # linear decay reaches 0


def test_callbacks_and_loggers_receive_records():
    data = make_examples(7, 16)
    seen: list[tuple[int, int]] = []

    class Recorder:
        def log(self, metrics, step):
            seen.append((metrics["epoch"], step))

    result = train(tiny_model(), Loader(data, 8, True), None, quick(epochs=3, eval_train=False),
                   callbacks=[lambda record, model: record["epoch"] == 2], loggers=[Recorder()])
    assert seen == [(1, 2), (2, 4)]
    assert result.stopped_early and len(result.history) == 2


def test_select_device():
    assert select_device("cpu") == torch.device("cpu")
    assert select_device(torch.device("cpu")) == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else None
    if expected is None and getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        expected = "mps"
    assert select_device("auto").type == (expected or "cpu")
    with pytest.raises(ValueError, match="'warp-drive'"):
        select_device("warp-drive")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA"):
            select_device("cuda")


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"lr": 0}, "lr"),
        ({"epochs": 0}, "epochs"),
        ({"schedule": "step"}, "schedule.*'step'"),
        ({"target_val_accuracy": 1.5}, "target_val_accuracy"),
        ({"resume": True}, "checkpoint_dir"),
        ({"grad_clip": -1.0}, "grad_clip"),
    ],
)
def test_bad_train_configs(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        TrainConfig(**overrides)


def test_unknown_snapshot_param_is_named():
    data = make_examples(8, 8)
    with pytest.raises(ValueError, match="fc.weight"):
        train(tiny_model(), Loader(data, 8, True), None, quick(snapshot_params=("fc.weight",)))


def test_train_config_round_trip():
    cfg = TrainConfig(lr=1e-5, epochs=20, snapshot_params=("classifier.weight", "blocks.0.attn.qkv.weight"))
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
