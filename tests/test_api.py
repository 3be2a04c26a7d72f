"""The public entry points (issue 29 item 7): arguments checked up front (a wrong type or an
out-of-range value is a ValueError naming the field), docstrings with a working example, and
the flat parameters of the completion notebook reaching its configs (issue 28)."""

import doctest
import pydoc
import subprocess
import sys

import numpy as np
import pytest

from dyckbook.chapters import completion
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import sample_negatives
from dyckbook.data.protocol import DataConfig
from dyckbook.experiment.checkpoint import build_model, load_model
from dyckbook.experiment.run import RunConfig, config_fields, run, run_seeds
from dyckbook.experiment.train import TrainConfig
from dyckbook.nn.model import ModelConfig

ENTRY_POINTS = [RunConfig, run, run_seeds, load_model, sample_negatives]
CONFIG = RunConfig(DataConfig(k=2, min_length=4, max_length=10, n_train=128, n_val=32, n_test=64),
                   ModelConfig(k=2, n_ctx=10, d_model=8, d_mlp=16, n_layers=1),
                   TrainConfig(max_steps=4), seed=3, baselines=("counts",))
STORED = CONFIG.to_dict()
LANG = Dyck(2)


def rng():
    return np.random.default_rng(0)


@pytest.mark.parametrize("obj", ENTRY_POINTS, ids=lambda o: o.__name__)
def test_docstring_examples_run(obj):
    assert "Example:" in obj.__doc__ and "Raises:" in obj.__doc__
    # no globals: every example imports what it uses, as a reader would
    tests = doctest.DocTestFinder(recurse=False).find(obj, obj.__name__, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test)
    outcome = runner.summarize(verbose=False)
    assert outcome.attempted >= 4 and outcome.failed == 0, outcome


@pytest.mark.parametrize("obj", ENTRY_POINTS, ids=lambda o: o.__name__)
def test_help_is_more_than_a_line(obj):
    assert len(pydoc.render_doc(obj).splitlines()) > 10


def test_top_level_names_resolve_in_a_fresh_interpreter():
    code = ("import dyckbook; from dyckbook import run as r; "
            "assert dyckbook.experiment.run.run_seeds is r.run_seeds is dyckbook.run_seeds; "
            "assert dyckbook.RunConfig is r.RunConfig and callable(dyckbook.load_model); "
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


# (id, call, pattern): every call raises a ValueError whose message matches the pattern (the
# field, and for a type error what it expects and the value given with its type)
BAD = [
    ("seed str", lambda: RunConfig(seed="1"),
     r"^RunConfig\.seed must be an int >= 0, got '1' \(str\)$"),
    ("seed bool", lambda: RunConfig(seed=True), r"RunConfig\.seed must be an int .*True \(bool\)"),
    ("seed float", lambda: RunConfig(seed=1.0), r"RunConfig\.seed must be an int .*1\.0 \(float\)"),
    ("seed negative", lambda: RunConfig(seed=-1), r"RunConfig\.seed must be an int >= 0, got -1"),
    ("data dict", lambda: RunConfig(data={"k": 2}),
     r"RunConfig\.data must be a DataConfig or CompletionDataConfig, got \{'k': 2\} \(dict\)"),
    ("model str", lambda: RunConfig(model="classifier"),
     r"RunConfig\.model must be a ModelConfig or ThesisModelConfig or Seq2SeqConfig"),
    ("train None", lambda: RunConfig(train=None), r"RunConfig\.train must be a TrainConfig"),
    ("baselines str", lambda: RunConfig(baselines="counts"),
     r"RunConfig\.baselines must be a sequence of baseline names, got 'counts' \(str\)"),
    ("baselines None", lambda: RunConfig(baselines=None), r"RunConfig\.baselines must be"),
    ("baselines unknown", lambda: RunConfig(baselines=["oracle"]),
     r"RunConfig\.baselines holds 'oracle'"),
    ("override n_layers str", lambda: CONFIG.override(n_layers="2"),
     r"ModelConfig\.n_layers must be a positive int, got '2'"),
    ("override n_layers bool", lambda: CONFIG.override(n_layers=True), r"ModelConfig\.n_layers"),
    ("override lr str", lambda: CONFIG.override(lr="fast"), r"TrainConfig\.lr must be a number"),
    ("override unknown", lambda: CONFIG.override(n_layer=2), r"unknown field\(s\) \['n_layer'\]"),
    ("with_seed str", lambda: CONFIG.with_seed("3"), r"RunConfig\.seed"),
    ("from_dict list", lambda: RunConfig.from_dict([1]),
     r"RunConfig\.from_dict must be a mapping .*got \[1\] \(list\)"),
    ("from_dict unknown key", lambda: RunConfig.from_dict({**STORED, "colour": 1}),
     r"RunConfig\.from_dict got unknown keys \['colour'\]"),
    ("from_dict missing key", lambda: RunConfig.from_dict({"data": {}, "model": {}}),
     r"RunConfig\.from_dict is missing keys \['train', 'seed'\]"),
    ("from_dict model str", lambda: RunConfig.from_dict({**STORED, "model": "classifier"}),
     r"RunConfig\.from_dict: model must be a mapping \(a dict\), got 'classifier' \(str\)"),
    ("from_dict seed str", lambda: RunConfig.from_dict({**STORED, "seed": "0"}),
     r"RunConfig\.seed must be an int >= 0, got '0' \(str\)"),
    ("from_dict nested unknown", lambda: RunConfig.from_dict(
        {**STORED, "model": {**STORED["model"], "width": 3}}),
     r"ModelConfig\.from_dict got unknown keys \['width'\]"),
    ("from_dict nested list", lambda: RunConfig.from_dict({**STORED, "train": [("lr", 1)]}),
     r"RunConfig\.from_dict: train must be a mapping"),
    ("from_flat list", lambda: RunConfig.from_flat([("k", 2)]),
     r"from_flat: params must be a mapping"),
    ("from_flat seq2seq n_layers", lambda: RunConfig.from_flat({"n_layers": 3}, model="seq2seq"),
     r"\['n_layers'\] are not fields of a model='seq2seq' run"),
    ("from_flat classifier encoder", lambda: RunConfig.from_flat({"n_encoder_layers": 3}),
     r"\['n_encoder_layers'\] are not fields of a model='classifier' run"),
    ("config_fields list", lambda: config_fields(["k"]), r"config_fields: params must be"),
    ("run dict", lambda: run(STORED), r"^run: config must be a RunConfig, got .*\(dict\)$"),
    ("run_seeds config dict", lambda: run_seeds(STORED, [0]), r"run_seeds: config must be a"),
    ("run_seeds int", lambda: run_seeds(CONFIG, 3),
     r"^run_seeds: seeds must be a non-empty sequence of ints >= 0, got 3 \(int\)$"),
    ("run_seeds empty", lambda: run_seeds(CONFIG, []), r"run_seeds: seeds must be a non-empty"),
    ("run_seeds str", lambda: run_seeds(CONFIG, "01"), r"run_seeds: seeds .*got '01' \(str\)"),
    ("run_seeds str item", lambda: run_seeds(CONFIG, [0, "1"]), r"run_seeds: seeds .*\[0, '1'\]"),
    ("run_seeds bool item", lambda: run_seeds(CONFIG, [True]), r"run_seeds: seeds .*\[True\]"),
    ("run_seeds float item", lambda: run_seeds(CONFIG, [0.5]), r"run_seeds: seeds .*\[0\.5\]"),
    ("run_seeds negative", lambda: run_seeds(CONFIG, [-1]), r"run_seeds: seeds .*\[-1\]"),
    ("run_seeds batched", lambda: run_seeds(CONFIG, [0], batched="yes"),
     r"run_seeds: batched must be True or False, got 'yes' \(str\)"),
    ("run_seeds progress", lambda: run_seeds(CONFIG, [0], progress=1),
     r"run_seeds: progress must be True or False, got 1 \(int\)"),
    ("load_model int", lambda: load_model(7),
     r"load_model: path must be a str or os\.PathLike, got 7 \(int\)"),
    ("load_model None", lambda: load_model(None), r"load_model: path must be .*None"),
    ("negatives language", lambda: sample_negatives("Dyck-2", rng(), [8]),
     r"language must be a dyckbook\.data\.languages\.Dyck, got 'Dyck-2' \(str\)"),
    ("negatives rng", lambda: sample_negatives(LANG, 0, [8]), r"rng must be a numpy"),
    ("negatives lengths str", lambda: sample_negatives(LANG, rng(), "8"), r"lengths must be"),
    ("negatives lengths float", lambda: sample_negatives(LANG, rng(), [8.0]), r"lengths must be"),
    ("negatives kinds int", lambda: sample_negatives(LANG, rng(), [8], kinds=3),
     r"kinds must be .*got 3 \(int\)"),
    ("negatives kinds nested", lambda: sample_negatives(LANG, rng(), [8], kinds=[["dip"]]),
     r"kinds must be"),
    ("negatives kinds array", lambda: sample_negatives(LANG, rng(), [8], kinds=np.array([1])),
     r"kinds must be"),
    ("negatives window str", lambda: sample_negatives(LANG, rng(), [8], window="4"),
     r"window must be None or an int >= 2, got '4' \(str\)"),
    ("negatives window bool", lambda: sample_negatives(LANG, rng(), [8], window=True),
     r"window must be None or an int >= 2, got True \(bool\)"),
    ("negatives window 1", lambda: sample_negatives(LANG, rng(), [8], window=1),
     r"window must be None or an int >= 2, got 1 \(int\)"),
]


def test_the_table_is_large():
    assert len(BAD) >= 15 and len({name for name, _, _ in BAD}) == len(BAD)


@pytest.mark.parametrize("call, pattern", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_wrong_arguments_raise_a_value_error_naming_the_field(call, pattern):
    with pytest.raises(ValueError, match=pattern):
        call()


def test_valid_arguments_behave_as_before():
    assert RunConfig(seed=np.int64(3)).seed == 3 and type(RunConfig(seed=np.int64(3)).seed) is int
    assert RunConfig(baselines=["counts"]).baselines == ("counts",)
    assert RunConfig.from_dict(STORED) == CONFIG
    stored = {k: v for k, v in STORED.items() if k != "baselines"}  # records before baselines
    assert RunConfig.from_dict(stored).baselines == RunConfig().baselines
    codes, lengths, _ = sample_negatives(LANG, rng(), np.array([8, 10]), window=np.int64(4))
    assert lengths.tolist() == [8, 10] and not LANG.is_member((codes, lengths)).any()


def test_completion_layers_reach_the_built_model():
    """Issue 28: ``config_fields`` knew no completion field, so the completion notebook's
    ``n_encoder_layers`` / ``n_decoder_layers`` never reached its configs (always 2 / 2)."""
    params = {"ks": "1", "pos_encodings": "none", "n_seeds": 1, "run_name": "x",
              "n_train": 50, "n_val": 10, "n_test": 10, "min_length": 4, "max_length": 12,
              "test_min_length": 14, "test_max_length": 20, "n_encoder_layers": 3,
              "n_decoder_layers": 1, "d_model": 16, "n_heads": 2, "d_mlp": 32, "max_steps": 2}
    flat = config_fields(params)
    assert (flat["n_encoder_layers"], flat["n_decoder_layers"], flat["n_ctx"]) == (3, 1, 20)
    assert "ks" not in flat and "run_name" not in flat
    direct = RunConfig.from_flat(flat, model="seq2seq")
    assert (direct.model.n_encoder_layers, direct.model.n_decoder_layers) == (3, 1)
    configs = completion.chapter_configs(  # the notebook's path
        flat, "1", "none", "rope", 30, (2, 20), {"norm": "pre", "max_steps": 5},
        budgets={"lengths": 0, "bbh": 7})
    encoder_decoder = build_model(configs["main"]["Dyck-1, encoder-decoder, none"].model, [0])
    assert (len(encoder_decoder.encoder), len(encoder_decoder.blocks)) == (3, 1)
    assert encoder_decoder.config.norm == "post"  # the seed's Add & Norm by default
    for family, label in (("main", "Dyck-1, decoder-only, learned"),
                          ("lengths", "Dyck-1, decoder-only, rope"),
                          ("bbh", "BBH Dyck-4, decoder-only, learned")):
        config = configs[family][label]
        decoder_only = build_model(config.model, [0])
        assert len(decoder_only.blocks) == 3 + 1 and not hasattr(decoder_only, "encoder")
        assert (config.model.norm, config.train.max_steps) == ("pre", 7 if family == "bbh" else 5)
    study = configs["lengths"]["Dyck-1, decoder-only, rope"]
    assert (study.data.test_max_length, study.model.n_ctx, study.model.pos_encoding) == (
        30, 30, "rope")
    bbh = configs["bbh"]["BBH Dyck-4, encoder-decoder, learned"]
    assert (bbh.data.k, bbh.data.regime, bbh.data.min_length, bbh.data.max_length) == (
        4, "bbh", 2, 20)
    assert bbh.model.n_ctx >= bbh.data.test_max_length and bbh.train.max_steps == 7
    # the notebook's target_accuracy 0: train to the end; its bucket reaches every config
    to_the_end = completion.chapter_configs(
        config_fields({**params, "target_accuracy": 0, "bucket": True}), "1", "none")
    assert all(c.train.target_accuracy is None and c.train.bucket
               for c in to_the_end["main"].values())
