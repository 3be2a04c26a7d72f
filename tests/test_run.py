"""Tests for run: RunConfig, the failure rules, run_seeds' records and summaries."""

import json
import os
import subprocess
import sys
from dataclasses import fields, replace

import numpy as np
import pytest

from dyckbook.chapters.page import summarise
from dyckbook.data.presets import thesis_experiment
from dyckbook.data.protocol import DataConfig
from dyckbook.experiment.evaluate import Score
from dyckbook.experiment.record import RunRecord
from dyckbook.experiment.run import (
    FAILURE_RULES,
    RunConfig,
    config_digest,
    judge,
    run_seeds,
    thesis_config,
)
from dyckbook.experiment.train import TrainConfig
from dyckbook.nn.model import ModelConfig
from dyckbook.nn.thesis_model import ThesisModelConfig
from dyckbook.rules import adversary as A

DATA = DataConfig(k=2, min_length=4, max_length=10, n_train=256, n_val=40, n_test=120)
MODEL = ModelConfig(k=2, n_ctx=10, d_model=8, n_heads=1, d_mlp=16, n_layers=1, dropout=0.0,
                    pos_encoding="learned")
TRAIN = TrainConfig(lr=1e-2, batch_size=32, max_steps=16, eval_every=8)
CONFIG = RunConfig(DATA, MODEL, TRAIN, seed=3)
THESIS = RunConfig(DataConfig(k=1, max_length=16, source="thesis", n_train=100),
                   ThesisModelConfig(k=1, n_ctx=16, d_model=8, d_mlp=16, pos_encoding="absolute"),
                   TRAIN, seed=1, baselines=("counts",))

# a valid other value for every field, to show that each one changes the digest
OTHER = {
    "data": {"k": 1, "max_depth": 3, "min_length": 2, "max_length": 8, "test_min_length": 2,
             "test_max_length": 8, "test_max_depth": 2, "n_train": 255,
             "positive_fraction": 0.4, "train_negatives": "hard", "window": 3, "n_val": 41,
             "n_test": 121, "test_sets": ("hard",), "held_out": 0.3, "source": "thesis",
             "thesis_generator": "pre-2024-09-03", "val_negatives": "hard",
             "test_pool": "beyond"},
    "model": {"k": 3, "n_ctx": 12, "d_model": 16, "n_heads": 2, "d_mlp": 17, "n_layers": 2,
              "dropout": 0.1, "mask": "causal", "pos_encoding": "none", "readout": "mean",
              "norm": "pre", "act_fn": "gelu", "attention": "sigmoid"},
    "train": {"lr": 2e-2, "batch_size": 16, "epochs": 3, "max_steps": 17, "warmup_steps": 2,
              "schedule": "cosine", "grad_clip": 1.0, "weight_decay": 0.1, "eval_every": 5,
              "target_accuracy": 0.9, "target_window": 2, "freeze": ("embed.weight",),
              "bucket": True,
              "matmul": "bfloat16"},
}
# thesis_split's other value needs other test lengths, objective's a causal mask: tested apart
NOT_IN_NUMBERS = {"thesis_split", "objective"}


@pytest.mark.parametrize("config", [CONFIG, THESIS], ids=["classifier", "thesis"])
def test_run_config_round_trip_through_json(config):
    back = RunConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert back == config and back.digest() == config.digest()
    assert type(back.model) is type(config.model)
    with pytest.raises(ValueError, match="unknown model kind 'rnn'"):
        RunConfig.from_dict({**config.to_dict(), "model": {"kind": "rnn"}})


def test_digest_is_stable_across_processes():
    code = ("from dyckbook.experiment.run import RunConfig, DataConfig, ModelConfig, TrainConfig;"
            "print(RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=256, n_val=40,"
            " n_test=120), ModelConfig(k=2, n_ctx=10, d_model=8, n_heads=1, d_mlp=16, n_layers=1,"
            " dropout=0.0, pos_encoding='learned'), TrainConfig(lr=1e-2, batch_size=32,"
            " max_steps=16, eval_every=8), seed=3).digest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}, check=True)
    assert out.stdout.strip() == CONFIG.digest()
    assert len(CONFIG.digest()) == 16 and int(CONFIG.digest(), 16) >= 0


def test_a_later_field_at_its_default_keeps_the_digest_of_records_written_before_it():
    stored = CONFIG.to_dict()
    assert "objective" not in stored["model"]  # as the grid's records were written
    assert config_digest(stored) == CONFIG.digest()
    causal = CONFIG.override(mask="causal")
    other = causal.override(objective="next_symbols")
    assert other.to_dict()["model"]["objective"] == "next_symbols"
    assert other.digest() != causal.digest()
    assert RunConfig.from_dict(other.to_dict()) == other
    assert RunConfig.from_dict(causal.to_dict()).model.objective == "membership"


def test_every_field_changes_the_digest():
    digests = {CONFIG.digest()}
    for part, others in OTHER.items():
        config = getattr(CONFIG, part)
        names = {f.name for f in fields(config)} - NOT_IN_NUMBERS
        assert names == set(others), part  # every field has an alternative here
        for name, value in others.items():
            changed = replace(CONFIG, **{part: replace(config, **{name: value})})
            digests.add(changed.digest())
    digests.add(CONFIG.with_seed(4).digest())
    digests.add(replace(CONFIG, baselines=("counts",)).digest())
    assert len(digests) == 2 + sum(map(len, OTHER.values())) + 1
    assert CONFIG.with_seed(4).digest(with_seed=False) == CONFIG.digest(with_seed=False)
    ood = CONFIG.override(source="thesis", test_min_length=12, test_max_length=16, n_ctx=16)
    assert ood.override(thesis_split="80/20").digest() != ood.digest()


def test_from_flat_and_override():
    params = {"k": 2, "min_length": 4, "max_length": 10, "n_train": 256, "n_val": 40,
              "n_test": 120, "n_ctx": 10, "d_model": 8, "n_heads": 1, "d_mlp": 16,
              "n_layers": 1, "dropout": 0.0, "pos_encoding": "learned", "lr": 1e-2,
              "batch_size": 32, "max_steps": 16, "eval_every": 8, "seed": 3,
              "run_name": "ignored", "n_seeds": 5}
    assert RunConfig.from_flat(params) == CONFIG
    thesis = RunConfig.from_flat({"k": 1, "n_ctx": 16, "embed_twice": False}, model="thesis")
    assert isinstance(thesis.model, ThesisModelConfig) and not thesis.model.embed_twice
    with pytest.raises(ValueError, match="model must be one of .*'rnn'"):
        RunConfig.from_flat({}, model="rnn")
    changed = CONFIG.override(k=1, readout="mean", max_steps=4, seed=9)
    assert (changed.data.k, changed.model.k, changed.model.readout) == (1, 1, "mean")
    assert (changed.train.max_steps, changed.seed) == (4, 9)
    assert changed.data.n_train == CONFIG.data.n_train and CONFIG.model.readout == "start"
    with pytest.raises(ValueError, match="unknown field\\(s\\) \\['colour', 'size'\\]"):
        CONFIG.override(size=3, colour="red", lr=0.1)


@pytest.mark.parametrize("changes, message", [
    ({"seed": -1}, "RunConfig.seed must be an int >= 0, got -1"),
    ({"baselines": ("oracle",)}, "RunConfig.baselines holds 'oracle'"),
    ({"model": replace(MODEL, k=1)}, "model.k=1 cannot read the data's k=2"),
    ({"model": replace(MODEL, n_ctx=8)}, "model.n_ctx=8 is shorter than .* \\(10\\)"),
    ({"data": replace(DATA, test_max_length=12)}, "n_ctx=10 is shorter .*\\(12\\)"),
])
def test_run_config_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        replace(CONFIG, **changes)


@pytest.mark.parametrize("experiment", range(1, 8))
def test_thesis_configs_are_valid(experiment):
    e = thesis_experiment(experiment)
    literal, sound = thesis_config(experiment), thesis_config(experiment, literal=False, seed=2)
    assert literal.data.source == "thesis" and isinstance(literal.model, ThesisModelConfig)
    assert (literal.data.k, literal.data.n_train, literal.model.k) == (e.data.k, e.data.n, e.k)
    assert sound.data.source == "sound" and isinstance(sound.model, ModelConfig)
    assert sound.seed == 2 and sound.data.k == sound.model.k == e.k
    if sound.data.k == 1:
        assert sound.data.max_length >= 20
    for config in (literal, sound):
        assert RunConfig.from_dict(config.to_dict()) == config
        assert config.model.n_ctx >= max(config.data.lengths()[1],
                                         config.data.lengths(test=True)[1])
    small = thesis_config(experiment, literal=False, epochs=1, d_model=16)
    assert (small.train.epochs, small.model.d_model) == (1, 16)


def test_judge_gives_each_failure_label():
    assert judge(0.99, 0.5, 0.5) is None
    assert judge(0.99, 1e-6, 0.5) == "constant"  # first rule wins
    assert judge(0.59, 0.5, 0.5) == "chance"
    assert judge(0.80, 0.5, 0.78) == "below_baseline"
    assert judge(0.84, 0.5, 0.78) is None
    assert set(FAILURE_RULES) == {"constant", "chance", "below_baseline"}


@pytest.fixture(scope="module")
def results():
    return run_seeds(CONFIG, [0, 1])


def test_run_seeds_records(results):
    assert [r.record.seed for r in results] == [0, 1]
    for r in results:
        record = r.record
        assert RunConfig.from_dict(record.config) == CONFIG.with_seed(record.seed)
        assert set(record.scores) == set(DATA.test_sets) == set(record.baselines)
        for name, s in record.scores.items():
            assert s.n == len(r.splits.tests[name]) > 0
            # the adversary's rules are scored on long-range sets only (none here: length <= 10)
            assert set(record.baselines[name]) == set(CONFIG.baselines) - set(A.RULES)
            assert all(b.n == s.n for b in record.baselines[name].values())
        assert record.data == r.splits.summary()
        assert record.data["train"]["n"] == 256
        sample = r.splits.train.labels
        majority = max(sample.mean(), 1 - sample.mean())
        assert record.failure == judge(record.train_accuracy, record.margin_std, majority)
        assert record.status == ("failed" if record.failure else "ok")
        assert record.steps == 16 and [h["step"] for h in record.history] == [8, 16]
        assert all(isinstance(h["train_loss"], float) for h in record.history)
        assert record.n_params == r.model.n_params
    assert results[0].record.scores != results[1].record.scores
    assert results[0].splits.train.strings() != results[1].splits.train.strings()


def test_run_seeds_says_its_device_and_rejects_a_bad_one(results):
    import torch

    assert all(r.record.versions["device"] == "cpu" for r in results)
    assert all(next(r.model.parameters()).device.type == "cpu" for r in results)
    with pytest.raises(ValueError, match="device must be .* got 'gpu0'"):
        run_seeds(CONFIG, [0], device="gpu0")
    with pytest.raises(ValueError, match="device must be .* got 3"):
        run_seeds(CONFIG, [0], device=3)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device is 'cuda', but this machine has no CUDA"):
            run_seeds(CONFIG, [0], device="cuda")


def test_batching_changes_nothing_but_the_speed(results):
    alone = run_seeds(CONFIG, [1], batched=False)[0].record
    together = results[1].record
    assert alone.scores == together.scores and alone.baselines == together.baselines
    assert alone.train_accuracy == together.train_accuracy
    assert alone.margin_std == pytest.approx(together.margin_std, rel=1e-4)


def test_a_causal_start_model_is_flagged_constant():
    config = CONFIG.override(mask="causal", readout="start", max_steps=2)
    record = run_seeds(config, [0])[0].record
    assert record.margin_std < 1e-5
    assert (record.status, record.failure) == ("failed", "constant")


def test_run_record_round_trip_through_json(results):
    record = results[0].record
    back = RunRecord.from_dict(json.loads(json.dumps(record.to_dict())))
    assert back.scores == record.scores and back.baselines == record.baselines
    assert back.to_dict() == json.loads(json.dumps(record.to_dict()))
    assert back.accuracy("hard") == record.scores["hard"].accuracy


def _record(seed, accuracy, status="ok", failure=None, n=100, baseline=0.5):
    score = Score(n, round(accuracy * n), {}, {"member": [n // 2, n // 2],
                                               "dip": [n // 2, round(accuracy * n) - n // 2]}, {})
    return RunRecord(config={"seed": seed}, status=status, failure=failure, train_accuracy=1.0,
                     margin_std=1.0, scores={"hard": score},
                     baselines={"hard": {"counts": Score(n, round(baseline * n), {}, {}, {})}},
                     baseline_train={}, data={}, steps=1, stopped_at=None, seconds=0.0,
                     n_params=1, history=[])


def test_summarise_synthetic_records():
    good = [_record(s, a) for s, a in enumerate([0.9, 0.95, 1.0, 0.99])]
    bad = [_record(9, 0.5, "failed", "chance"), _record(8, 0.55, "failed", "constant")]
    rows = summarise({"a": good + bad, "b": bad})
    a, b = rows
    assert (a["label"], a["seeds"], a["failed"]) == ("a", 6, 2)
    assert a["failures"] == ["chance", "constant"]
    # every seed counts, failed ones too (shown as failed, never dropped)
    everything = [0.9, 0.95, 1.0, 0.99, 0.5, 0.55]
    assert a["accuracy"] == pytest.approx(np.mean(everything))
    assert 0.0 < a["low"] <= a["accuracy"] <= a["high"] <= 1.0
    assert a["solved"] == 2 and a["n_test"] == 100
    assert a["members"] == 1.0 and "member" not in a["per_kind"]
    # balanced against the members (all right): (1 + true-negative rate) / 2
    assert a["per_kind"]["dip"] == pytest.approx(np.mean(everything))
    assert a["baselines"] == {"counts": 0.5} and a["strongest"] == ("counts", 0.5)
    assert b["failed"] == 2 and b["accuracy"] == pytest.approx(0.525) and b["solved"] == 0
    assert 0.0 <= b["low"] <= 0.5 and 0.55 <= b["high"] <= 1.0  # two seeds: a wide interval


# ------------------------------------------------------------------------------- devices
CUDA = pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                          reason="needs a CUDA device (the GPU session runs it)")


def _numbers(record: RunRecord) -> dict:
    """A record's fields, wall-clock ones aside."""
    out = record.to_dict()
    out.pop("seconds")
    out["history"] = [{k: v for k, v in h.items() if k != "seconds"} for h in out["history"]]
    return out


def test_the_device_path_on_the_cpu_is_the_default_path(results):
    import torch

    on_cpu = run_seeds(CONFIG, [0, 1], device="cpu")
    ways = [on_cpu] + ([] if torch.cuda.is_available() else [run_seeds(CONFIG, [0, 1],
                                                                       device="auto")])
    for other in ways:
        for a, b in zip(results, other):
            assert _numbers(a.record) == _numbers(b.record)
            assert all(torch.equal(p, q) for p, q in zip(a.model.parameters(),
                                                         b.model.parameters()))
    from dyckbook.chapters.page import run_all

    config = CONFIG.override(max_steps=4)  # the notebooks' path: page.run_all(..., device=)
    with __import__("tempfile").TemporaryDirectory() as a, \
            __import__("tempfile").TemporaryDirectory() as b:
        plain = run_all({"x": config}, [0], a)["x"][0].record
        given = run_all({"x": config}, [0], b, device="cpu")["x"][0].record
    assert _numbers(plain) == _numbers(given)


def test_a_group_scored_together_is_scored_as_each_alone():
    """On a device a trained group's classifiers are scored as one network (``_scored``); here
    that path is taken on the CPU (the guard reads only the device's type) and compared."""
    import torch

    from dyckbook.experiment import run as R
    from dyckbook.experiment.checkpoint import build_model
    from dyckbook.experiment.evaluate import margins
    from dyckbook.experiment.train import train
    from dyckbook.nn.model import ClassificationTask

    for model_config in (MODEL, replace(MODEL, mask="causal", pos_encoding="randomized",
                                        readout="end")):
        configs = [CONFIG.with_seed(s) for s in (0, 1)]
        splits = [R.data_splits(c.data, c.seed) for c in configs]
        network = build_model(model_config, [0, 1])
        train(network, ClassificationTask(), [s.train for s in splits], None, TRAIN)
        assert R._scored(network, splits, torch.device("cpu")) == [None, None]
        together = R._scored(network, splits, torch.device("cuda"))
        for single, sp, got in zip(network.split(), splits, together):
            alone = {"train": margins(single, R._sample(sp)),
                     "tests": {n: margins(single, ds) for n, ds in sp.tests.items()}}
            assert set(got["tests"]) == set(alone["tests"])
            for want, have in [(alone["train"], got["train"]),
                               *((alone["tests"][n], got["tests"][n]) for n in alone["tests"])]:
                assert have.shape == want.shape
                np.testing.assert_allclose(have, want, rtol=1e-4, atol=1e-5)


def test_a_card_trains_as_many_seeds_together_as_fit(monkeypatch):
    """On a CUDA device run_seeds trains as many seeds as one network as fit in its memory
    (a fake card here: checkpoint.MEMORY_ENV), an evaluation batch holds fewer long rows."""
    import torch

    from dyckbook.experiment import checkpoint
    from dyckbook.experiment import run as R
    from dyckbook.nn import tokenizer

    each = checkpoint.training_bytes(CONFIG, 1) - checkpoint.CONTEXT_BYTES
    assert checkpoint.training_bytes(CONFIG, 4) == checkpoint.CONTEXT_BYTES + 4 * each
    card = torch.device("cuda")
    monkeypatch.setenv(checkpoint.MEMORY_ENV, str(checkpoint.CONTEXT_BYTES + 3 * each + 1))
    assert [R._group_size(CONFIG, n, card) for n in (10, 3, 2)] == [3, 3, 2]
    assert R._group_size(CONFIG, 10, torch.device("cpu")) == 10  # the CPU: all together
    monkeypatch.setenv(checkpoint.MEMORY_ENV, "0")
    assert R._group_size(CONFIG, 10, card) == 1  # too small a card: one at a time, still
    assert tokenizer.eval_rows(10, 50, 32, "cpu") == 1024  # the CPU: 1,024 wherever it fits
    assert tokenizer.eval_rows(10, 4098, 384, card) == 8  # 2**27 activations at most
    assert tokenizer.eval_rows(10, 50, 32, card) == 1024
    assert tokenizer.eval_rows(1000, 4098, 4096, card) == 1


@CUDA
def test_a_run_on_cuda_is_the_cpu_run_to_rounding(results):
    on_gpu = run_seeds(CONFIG, [0, 1], device="cuda")
    for a, b in zip(results, on_gpu):
        assert b.record.versions["device"].startswith("cuda (")
        assert next(b.model.parameters()).device.type == "cpu"  # returned on the CPU
        assert a.record.steps == b.record.steps and a.record.config == b.record.config
        for h, g in zip(a.record.history, b.record.history):
            assert g["train_loss"] == pytest.approx(h["train_loss"], rel=1e-3)
        for name, s in a.record.scores.items():  # a margin near 0 may flip: a string or two
            assert abs(b.record.scores[name].correct - s.correct) <= max(2, s.n // 100)
        diff = sum(float((p - q).double().pow(2).sum())
                   for p, q in zip(a.model.parameters(), b.model.parameters()))
        norm = sum(float(p.double().pow(2).sum()) for p in a.model.parameters())
        assert (diff / norm) ** 0.5 < 1e-2  # bench_gpu's check: about 1e-3 after 20 steps
    thesis = run_seeds(THESIS, [1], device="cuda")[0]  # the literal port trains there too
    assert thesis.record.versions["device"].startswith("cuda (")
    completion = run_seeds(_completion_config(), [0], device="cuda")[0]
    assert completion.record.versions["device"].startswith("cuda (")


def _completion_config() -> RunConfig:
    from dyckbook.data.completion import CompletionDataConfig
    from dyckbook.nn.seq2seq import Seq2SeqConfig

    return RunConfig(CompletionDataConfig(k=2, min_length=4, max_length=10, test_min_length=12,
                                          test_max_length=14, n_train=128, n_val=16, n_test=16),
                     Seq2SeqConfig(k=2, n_ctx=14, d_model=16, n_heads=2, d_mlp=32),
                     TrainConfig(max_steps=4), baselines=())


@CUDA
def test_a_training_step_on_cuda_never_waits_for_the_card():
    """No host synchronisation inside the step: over 24 steps with dropout, randomized
    positions and a bidirectional mask (each of which once read the card back), torch's sync
    debug mode sees only the loss read-back at the end of the epoch."""
    import warnings

    import torch

    from dyckbook.data.protocol import make_splits
    from dyckbook.experiment.checkpoint import build_model
    from dyckbook.experiment.train import train
    from dyckbook.nn.model import ClassificationTask

    for model_config in (replace(MODEL, dropout=0.1, pos_encoding="randomized"),
                         replace(MODEL, mask="causal", readout="end", dropout=0.1),
                         THESIS.model):
        thesis = isinstance(model_config, ThesisModelConfig)
        data = make_splits(replace(DATA, k=1 if thesis else 2, n_train=768), seed=0).train
        seeds = [0] if thesis else [0, 1]
        model = build_model(model_config, seeds).cuda()
        config = TrainConfig(lr=1e-3, batch_size=32, grad_clip=1.0, epochs=1)  # 24 steps
        train(model, ClassificationTask(), [data] * len(seeds), None,
              replace(config, epochs=1))  # warm up: allocators, pinned memory
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                train(model, ClassificationTask(), [data] * len(seeds), None, config)
            finally:
                torch.cuda.set_sync_debug_mode("default")
        syncs = [w for w in caught if "synchroniz" in str(w.message)]
        assert len(syncs) <= 3, (type(model).__name__, [str(w.message) for w in syncs])


def test_the_adversary_is_scored_beside_a_model_on_its_long_range_sets_only():
    """Issue 50: every run shows the strongest stack-free rule beside its model, the adversary's
    included, on the test sets it was assembled against (those with long-range negatives)."""
    from dyckbook.rules import baselines as B

    data = DataConfig(k=2, min_length=2, max_length=32, n_train=300, n_val=0, n_test=120,
                      test_sets=("hard", "stack"))
    model = replace(MODEL, n_ctx=32)
    record = run_seeds(RunConfig(data, model, replace(TRAIN, max_steps=4), seed=1), [1])[0].record
    assert set(record.baselines["stack"]) == set(B.STACK_FREE) | set(A.ADVERSARY)
    assert set(record.baselines["hard"]) == set(B.STACK_FREE)
    assert all(s.n == record.scores["stack"].n for s in record.baselines["stack"].values())


def test_a_rule_that_cannot_read_the_longest_strings_is_left_out_there():
    """The length study tests to 8N = 128 symbols; edit_knn reads strings of one machine word
    (64) and failed the cpu profile's 07 run. Where a stack set holds longer strings every
    other rule is still scored."""
    from dyckbook.experiment.run import _rules_for
    from dyckbook.rules import baselines as B

    rules = (*B.STACK_FREE, *A.ADVERSARY)
    assert "edit_knn" in _rules_for(rules, ("member", "stack"), 64)
    assert set(_rules_for(rules, ("member", "stack"), 65)) == set(rules) - {"edit_knn"}
    assert set(_rules_for(rules, ("dip", "member"), 128)) == set(B.STACK_FREE)
    data = DataConfig(k=1, min_length=2, max_length=8, test_min_length=66, test_max_length=70,
                      n_train=200, n_val=0, n_test=40, test_sets=("stack",))
    record = run_seeds(RunConfig(data, replace(MODEL, k=1, n_ctx=70),
                                 replace(TRAIN, max_steps=2), seed=1), [1])[0].record
    scored = set(record.baselines["stack"])
    assert "edit_knn" not in scored and {"cnn", "skipgrams", "height_stats"} <= scored


def test_the_cpu_scores_long_strings_of_many_models_in_fewer_rows(monkeypatch):
    """Issue 64's long-context rerun at 10 seeds was killed for memory (1,024 rows of ten
    models at 514 positions: 22 GB): on the CPU a batch keeps its activations and attention
    scores within CPU_EVAL_ACTIVATIONS, and fewer rows give the same margins."""
    import numpy as np

    from dyckbook.experiment import evaluate
    from dyckbook.nn import tokenizer
    from dyckbook.nn.model import ModelConfig
    from dyckbook.nn.recurrent import RecurrentConfig

    config = ModelConfig(k=3, n_ctx=512, d_model=384, n_heads=1)
    scores = tokenizer.attention_scores(config, 514)
    assert scores == 514 and tokenizer.attention_scores(RecurrentConfig(k=3, n_ctx=8), 514) == 0
    rows = tokenizer.eval_rows(10, 514, 384, "cpu", 1024, scores)
    assert rows == tokenizer.CPU_EVAL_ACTIVATIONS // (10 * 514 * (384 + 514)) == 232
    assert 10 * rows * 514 * (384 + 514) <= tokenizer.CPU_EVAL_ACTIVATIONS
    assert tokenizer.eval_rows(10, 130, 256, "cpu", 1024, 130) == 1024  # experiment 6: as before
    assert tokenizer.eval_rows(10, 4098, 384, "cpu") == 68
    assert tokenizer.eval_rows(10**6, 4098, 4096, "cpu") == 1  # at least one row
    # the rows per batch move no margin
    result = run_seeds(CONFIG, [0])[0]
    test = result.splits.tests["hard"]
    whole = evaluate.margins(result.model, test)
    monkeypatch.setattr(tokenizer, "CPU_EVAL_ACTIVATIONS", 7 * (test.lengths.max() + 2) * (
        CONFIG.model.d_model + CONFIG.model.n_heads * (test.lengths.max() + 2)))
    assert tokenizer.eval_rows(1, int(test.lengths.max()) + 2, CONFIG.model.d_model, "cpu",
                               1024, tokenizer.attention_scores(CONFIG.model,
                                                                int(test.lengths.max()) + 2)) == 7
    assert np.allclose(evaluate.margins(result.model, test), whole, atol=1e-5)
