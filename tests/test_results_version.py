"""Staleness that cannot be fooled (issue 51): a published run is up to date while its recipe,
notebook, inputs and ``version.RESULTS_VERSION`` are unchanged, and no longer needs the
package version. What keeps that honest is this test: a tiny fixed run through the one path
(data with hard, random and stack test sets, a classifier, training, scoring, the stack-free
rules and the adversary beside it) compared number by number with ``tests/golden_run.json``.
A change that moves any of those numbers without bumping ``RESULTS_VERSION`` fails here; a
refactor that moves none passes, and hours of published results stay up to date.

After a deliberate change of numbers: bump ``RESULTS_VERSION``, then
``python tests/test_results_version.py --write`` rewrites the golden record.

Floating-point paths differ between CPUs (Intel and AMD, the C kernels and torch's): the
margins and the loss are compared to 1e-3 (a change of recipe or training constant moves them
by far more, as the test that changes one shows); the data (strings' hashes) exactly; each
rule's accuracy to one string in a hundred (a string on a rule's boundary may flip).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).with_name("golden_run.json")
FLOAT_TOL, RULE_TOL = 1e-3, 0.01
LEARNED_TOL = 0.05  # rules trained with torch (MLP, CNNs): BLAS paths differ between CPUs
LEARNED = {"height_mlp", "cnn", "cnn_dilated"}


def golden_config():
    from dyckbook.model import ModelConfig
    from dyckbook.protocol import DataConfig
    from dyckbook.run import RunConfig
    from dyckbook.train import TrainConfig

    data = DataConfig(k=2, min_length=2, max_length=32, n_train=400, n_val=0, n_test=200,
                      test_sets=("hard", "random", "stack"))
    model = ModelConfig(k=2, n_ctx=32, d_model=16, n_heads=2, d_mlp=32, n_layers=1,
                        mask="causal", readout="end", pos_encoding="learned", dropout=0.1)
    return RunConfig(data=data, model=model, seed=3,
                     train=TrainConfig(max_steps=40, lr=3e-3, batch_size=16, warmup_steps=5,
                                       schedule="cosine", grad_clip=1.0))


def numbers() -> dict:
    """The golden run's numbers: what the data are, what training did, what the model and the
    rules score."""
    from dyckbook import cache
    from dyckbook.evaluate import margins
    from dyckbook.run import run

    saved = os.environ.pop(cache.RUN_ENV, None)  # trained here, never read from a run cache
    try:
        result = run(golden_config())
    finally:
        if saved is not None:
            os.environ[cache.RUN_ENV] = saved
    record, splits = result.record, result.splits
    out = {"data": {name: [int(h) for h in np.sort(ds.hashes())[:50]]
                    for name, ds in [("train", splits.train), *splits.tests.items()]},
           "sizes": {name: len(ds) for name, ds in [("train", splits.train),
                                                     *splits.tests.items()]},
           "loss": [h["train_loss"] for h in record.history],
           "margins": {name: [round(float(m), 6) for m in margins(result.model, ds)[:40]]
                       for name, ds in splits.tests.items()},
           "rules": {name: {rule: round(s.accuracy, 4) for rule, s in rules.items()}
                     for name, rules in record.baselines.items()}}
    return out


def differences(got: dict, want: dict) -> list[str]:
    """Every number of ``got`` that differs from ``want`` beyond the tolerances."""
    out = []
    if got["data"] != want["data"] or got["sizes"] != want["sizes"]:
        out.append("the data differ (strings or sizes)")
    if len(got["loss"]) != len(want["loss"]) or not np.allclose(
            got["loss"], want["loss"], rtol=FLOAT_TOL, atol=FLOAT_TOL):
        out.append(f"the training loss differs: {got['loss']} vs {want['loss']}")
    for name, m in want["margins"].items():
        if name not in got["margins"] or not np.allclose(got["margins"][name], m,
                                                          rtol=FLOAT_TOL, atol=FLOAT_TOL):
            out.append(f"the margins on {name} differ")
    for name, rules in want["rules"].items():
        for rule, acc in rules.items():
            have = got["rules"].get(name, {}).get(rule)
            if have is None or abs(have - acc) > (LEARNED_TOL if rule in LEARNED else RULE_TOL):
                out.append(f"{rule} on {name}: {have} vs {acc}")
    if set(got["rules"]) != set(want["rules"]) or any(
            set(got["rules"][n]) != set(want["rules"][n]) for n in want["rules"]):
        out.append("the rules scored differ")
    return out


@pytest.fixture(scope="module")
def measured():
    return numbers()


def test_the_numbers_are_the_golden_ones_or_the_results_version_moved(measured):
    from dyckbook.version import RESULTS_VERSION

    golden = json.loads(GOLDEN.read_text())
    assert golden["results_version"] == RESULTS_VERSION, (
        f"RESULTS_VERSION is {RESULTS_VERSION}, the golden record's {golden['results_version']}: "
        "after a deliberate change of numbers, rewrite it (python tests/test_results_version.py "
        "--write)")
    wrong = differences(measured, golden["numbers"])
    assert not wrong, ("numbers changed without a RESULTS_VERSION bump (every published run "
                       f"would stay 'ok' with stale numbers): {wrong}")


def test_a_changed_training_constant_is_caught(measured, monkeypatch):
    """The check has power: Adam's epsilon, a constant nobody sets, changed from 1e-8 to 1e-6
    (or the dropout rate's default) moves the numbers beyond the tolerances."""
    import torch

    from dyckbook import train

    real = torch.optim.Adam

    def adam(params, **kwargs):
        return real(params, **{**kwargs, "betas": (0.8, 0.99)})

    monkeypatch.setattr(train.torch.optim, "Adam", adam)
    from dyckbook.run import _fitted

    _fitted.cache_clear()
    changed = numbers()
    assert differences(changed, measured), "changing Adam's betas moved no number"
    assert not differences(measured, measured)


def test_staleness_follows_the_results_version_not_the_package_version(tmp_path, monkeypatch):
    """A run recorded under the current results version is up to date whatever the package
    version; under another results version it is stale, and says why."""
    from dyckbook.pipeline import runner
    from dyckbook.version import RESULTS_VERSION

    record = {"results_version": RESULTS_VERSION, "dyckbook": "0.0.0-other"}
    reasons = runner._results_changes(record)
    assert reasons == []
    assert runner._results_changes({**record, "results_version": RESULTS_VERSION - 1}) == [
        f"the results version changed ({RESULTS_VERSION - 1} -> {RESULTS_VERSION})"]
    assert runner._results_changes({"dyckbook": "0.1"}) == [
        f"the results version changed (None -> {RESULTS_VERSION})"]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/test_results_version.py --write")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from dyckbook.version import RESULTS_VERSION

    GOLDEN.write_text(json.dumps({"results_version": RESULTS_VERSION, "config":
                                  golden_config().to_dict(), "numbers": numbers()}, indent=1)
                      + "\n")
    print(f"wrote {GOLDEN} (results version {RESULTS_VERSION})")
