"""ARCHITECTURE.md's "Where to add ..." as a checklist that runs: each entry's test makes the
addition the entry describes, in the one place it names, and finds it everywhere the entry
promises."""

import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from dyckbook.chapters import ablation_grid, generalisation
from dyckbook.data import negatives, protocol
from dyckbook.data.languages import Dyck
from dyckbook.experiment import grid, recipe
from dyckbook.nn import options, seq2seq
from dyckbook.nn.model import ModelConfig
from dyckbook.rules import adversary, baselines

ROOT = Path(__file__).resolve().parents[1]


def sphinx_ext():
    """The book's Sphinx extension, whose directive tabulates the declarations."""
    spec = importlib.util.spec_from_file_location("dyckbook_sphinx",
                                                  ROOT / "book" / "_ext" / "dyckbook_sphinx.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def golden():
    """``tests/test_results_version.py``, whose golden records iterate the declarations."""
    spec = importlib.util.spec_from_file_location("golden", ROOT / "tests" /
                                                  "test_results_version.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_entry_names_a_test_here():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Where to add")[1]
    named = re.findall(r"^- \*\*[^*]+\*\* \(`(test_\w+)`\)", section, re.M)
    assert len(named) >= 5
    here = set(re.findall(r"^def (test_\w+)", Path(__file__).read_text(), re.M))
    assert set(named) <= here, set(named) - here


def test_a_positional_encoding(monkeypatch):
    """One entry in ``options.POSITIONS`` (and nothing else) reaches the full and reduced
    grids and their keys, 07's ``positions`` list, 10's decodable choices, the model configs,
    the command line's choices, the docs' table and the golden records' variants."""
    xpos = options.Position("xpos", "a dummy encoding", extends=True)
    monkeypatch.setitem(options.POSITIONS, "xpos", xpos)
    full = ablation_grid.cells_named("full")
    assert {c for c in full if c.pos_encoding == "xpos"} == {
        grid.Cell(k, n, m, "xpos", r) for k in grid.KS
        for n in grid.LAYERS for m in options.MASKS for r in options.READOUTS}
    assert any(c.pos_encoding == "xpos" for c in ablation_grid.cells_named("reduced"))
    assert "k1-L1-causal-xpos-end" in recipe.expanded({"cells": "reduced"})["cells="]
    assert ablation_grid.Cell.from_name("k1-L2-causal-xpos-end").pos_encoding == "xpos"
    assert "causal-xpos-end" in grid.expand_configs("positions,lstm")
    assert generalisation.fields("causal-xpos-end")["pos_encoding"] == "xpos"
    assert "xpos" in seq2seq.decodable()
    assert ModelConfig(pos_encoding="xpos").pos_encoding == "xpos"
    assert "xpos" in options.EXTENDING
    assert ["`xpos`", "a dummy encoding", "yes", "no", "no", "yes"] in sphinx_ext().declared_rows(
        "positions")
    assert "pos_encoding=xpos" in golden().variant_configs()
    # one made for length generalisation stays out of the reduced grid, as rope does
    monkeypatch.setitem(options.POSITIONS, "xpos",
                        options.Position("xpos", "a dummy", extends=True, for_length=True))
    assert not any(c.pos_encoding == "xpos" for c in ablation_grid.cells_named("reduced"))
    assert any(c.pos_encoding == "xpos" for c in ablation_grid.cells_named("full"))


def test_a_mask_or_readout_is_read_the_same_way(monkeypatch):
    monkeypatch.setitem(options.READOUT_DECLARATION, "max", "the maximum over the real tokens")
    assert any(c.readout == "max" for c in ablation_grid.cells_named("full"))
    assert generalisation.fields("causal-none-max")["readout"] == "max"
    assert ["`max`", "the maximum over the real tokens"] in sphinx_ext().declared_rows("readouts")


def test_a_language():
    """A language with ``Dyck``'s interface goes through the data protocol and the negatives:
    here Dyck-2 over other brackets, a subclass with its own name."""

    class Angles(Dyck):
        def __init__(self) -> None:
            super().__init__(2, pairs=("<>", "{}"))

    language = Angles()
    rng = np.random.default_rng(0)
    codes, lengths = language.sample_codes(rng, [10, 12])
    assert language.is_member((codes, lengths)).all() and language.count(10) > 0
    neg, _, kinds = negatives.sample_negatives(language, rng, [10, 12])
    assert not language.is_member((neg, lengths)).any() and set(kinds) <= set(negatives.HARD_KINDS)
    data = protocol.balanced_sample(language, "hard", np.array([8, 10]), 4, rng)
    assert data.language is language and data.labels.tolist() == [1, 1, 0, 0]


def test_a_negative_kind(monkeypatch):
    """One ``NegativeKind`` in ``negatives.NEGATIVE_KINDS`` (its construction and guarantees
    declared with it, nothing else edited) joins every ``hard`` set: the mixture the test sets,
    the validation set and the training mix draw from; the docs' table and the golden
    records' negatives section."""
    kind = negatives.NegativeKind("swap_again", "Two symbols of a word exchanged, again.", 1, True,
                                  guarantees="the promises only", build=negatives._swap)
    monkeypatch.setitem(negatives.NEGATIVE_KINDS, kind.name, kind)
    negatives._probe.cache_clear()
    try:
        assert kind.name in negatives.HARD_KINDS
        rng = np.random.default_rng(1)
        _, _, kinds = negatives.sample_negatives(Dyck(2), rng, [12] * 200, kinds="hard")
        assert kind.name in set(kinds)
        data = protocol.balanced_sample(Dyck(2), "hard", np.full(200, 12), 4, rng)
        assert kind.name in set(data.kinds.astype(str))
        rows = sphinx_ext().declared_rows("negative-kinds")
        assert ["`swap_again`", kind.description, "1", "4", "no", "the promises only"] in rows
        assert golden().negatives_numbers()["swap_again"]
    finally:
        negatives._probe.cache_clear()


def test_a_stack_free_rule(monkeypatch):
    """A ``Baseline`` subclass named among the stack-free rules is fitted and scored by the
    attack on a regime (and so beside every run's models)."""

    class EvenLength(baselines.Baseline):
        """Member iff the length is even: blind to order, so it recognises no Dyck language."""

        name = "even_length"

        def _predict(self, codes, lengths):
            return lengths % 2 == 0

    monkeypatch.setitem(adversary.RULES, EvenLength.name,
                        lambda language, seed: EvenLength(language))
    monkeypatch.setattr(adversary, "ADVERSARY", (*adversary.ADVERSARY[:2], EvenLength.name))
    out = adversary.attack_regime(Dyck(2), "hard", [8, 10], n=50, seed=0,
                                  names=adversary.ADVERSARY)
    assert out[EvenLength.name]["all"] == pytest.approx(0.5)


def test_an_experiment():
    """Every notebook is named alike in the manifest and the table of contents (by its runs'
    pages), and the smoke profile gives every notebook that trains sizes of its own."""
    manifest = yaml.safe_load((ROOT / "notebooks" / "experiments.yml").read_text())
    toc = (ROOT / "_toc.yml").read_text()
    runs = manifest["runs"]
    smoke = manifest["profiles"]["smoke"]
    for path in sorted(ROOT.glob("notebooks/[0-9]*.ipynb")):
        stem = path.stem
        assert stem in manifest["notebooks"], f"{stem} is not in notebooks/experiments.yml"
        assert manifest["notebooks"][stem]["path"] == path.name
        mine = [name for name, spec in runs.items() if spec["notebook"] == stem]
        assert mine, f"{stem} has no run"
        shown = [name for name in mine if f"book/pages/{stem}/{name}" in toc
                 or f"book/pages/{stem}/*" in toc]
        assert shown, f"no page of {stem} is in _toc.yml"
        code = "\n".join("".join(c["source"]) for c in json.loads(path.read_text())["cells"]
                         if c["cell_type"] == "code")
        trains = re.search(r"run_all|run_grid|run_records|run_seeds", code)
        if trains:
            assert stem in smoke["notebooks"], f"{stem} trains but the smoke profile sizes it not"
    for key, spec in manifest["chapters"].items():
        assert f"book/pages/chapters/{key}" in toc, f"chapter {key} is not in _toc.yml"
        assert (ROOT / "notebooks" / spec["path"]).resolve().is_file()
