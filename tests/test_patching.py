"""Activation patching: identities that must hold, and the hand-set Dyck-1 counter, whose
mechanism is known, as the oracle a patching result is checked against."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dyckbook.chapters import intervention
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import sample_minimal_pairs
from dyckbook.interp import constructions, patching
from dyckbook.nn.model import Classifier, ModelConfig


def _pairs(k, kind, lengths, seed=0):
    members, negatives, lengths = sample_minimal_pairs(Dyck(k), np.random.default_rng(seed),
                                                       lengths, kind)
    return patching.pair_tokens(members, negatives, lengths)


def test_minimal_pairs_differ_only_by_the_change():
    members, negatives, lengths = sample_minimal_pairs(Dyck(3), np.random.default_rng(1),
                                                       [40] * 6 + [44] * 4, "stack")
    assert Dyck(3).is_member((members, lengths)).all()
    assert not Dyck(3).is_member((negatives, lengths)).any()
    assert ((members != negatives).sum(1) == 2).all()  # two closers exchanged
    with pytest.raises(ValueError, match="no stack negative exists at length 6"):
        sample_minimal_pairs(Dyck(3), np.random.default_rng(1), [6], "stack")


def test_patching_nothing_or_everything_is_the_identity():
    model = Classifier(ModelConfig(k=3, n_ctx=48, d_model=16, n_heads=2, d_mlp=32,
                                   n_layers=2, mask="causal", readout="mean",
                                   pos_encoding="learned", dropout=0.0), [2]).eval()
    members, negatives = _pairs(3, "stack", [40] * 8)

    def same_function(a, b):
        # a patched run records activations, so it takes torch's ops; the plain run takes the
        # C kernels where they apply: two float32 summation orders, which differ by a few ulps
        # of the activations (4.5e-8 here, 6e-8 on an AMD EPYC, where logits near 0 failed
        # allclose's default atol of 1e-8). test_kernels.py's tolerance for the two paths:
        return torch.allclose(a, b, rtol=1e-4, atol=2e-5)

    with torch.no_grad():
        plain = model(negatives)
        assert same_function(patching.patched_logits(model, negatives, members, []), plain)
        # every head and MLP from the negatives' own run: the same run
        same = patching.patched_logits(model, negatives, negatives,
                                       patching.all_components(model))
        assert same_function(same, plain)
        # the residual stream after the last layer carries everything to the readout
        assert same_function(patching.patched_logits(model, negatives, members, [(1, "resid")]),
                             model(members))
        # and the tolerance still tells a patch that moves the output from one that does not
        assert not same_function(patching.patched_logits(model, negatives, members,
                                                         [(1, "resid")]), plain)
    assert patching.loss_recovered(model, members, negatives, []) == 0.0
    assert patching.loss_recovered(model, members, negatives, [(1, "resid")]) == pytest.approx(
        1.0, abs=1e-4)
    assert patching.component_name((1, 0)) == "L1H0"
    assert patching.component_name((0, "mlp")) == "L0 MLP"


def test_the_counters_mechanism_is_found_where_it_is_built():
    """The hand-set Dyck-1 counter: its one head computes the running count, its MLP flags a
    position where the count goes negative. Patching either from the members recovers the
    whole gap."""
    model = constructions.dyck1_counter(48)
    members, negatives = _pairs(1, "far", [40] * 10)
    with torch.no_grad():
        assert (model(members).argmax(-1) == 1).all() and (model(negatives).argmax(-1) == 0).all()
    for component in [(0, 0), (0, "mlp")]:
        assert patching.loss_recovered(model, members, negatives, [component]) > 0.95
    # scrubbing: the circuit is serial (head -> MLP), so a hypothesis naming one of the two
    # keeps nothing once the other comes from the negative; naming both keeps everything
    for kept in [(0, 0), (0, "mlp")]:
        assert patching.complement_recovered(model, members, negatives, [kept]) < 0.05
    assert patching.complement_recovered(model, members, negatives, [(0, 0), (0, "mlp")]) == (
        pytest.approx(1.0))


def test_an_untrained_model_has_no_gap_to_recover_and_bad_components_are_named():
    model = Classifier(ModelConfig(k=1, n_ctx=48, d_model=8, n_heads=1, d_mlp=8, n_layers=1,
                                   dropout=0.0), [0])
    with torch.no_grad():
        model.classifier.weight.zero_()  # a constant output: nothing to recover
    members, negatives = _pairs(1, "far", [40] * 4)
    assert math.isnan(patching.loss_recovered(model, members, negatives, [(0, 0)]))
    for bad in [(1, 0), (0, 1), (0, "attn"), (0,), "L0H0", (0, True)]:
        with pytest.raises(ValueError, match="components: "):
            patching.loss_recovered(model, members, negatives, [bad])
    with pytest.raises(ValueError, match="single-model Classifier"):
        patching.patched_logits(Classifier(model.config, [0, 1]), members, members, [])


def test_a_hypothesis_is_accepted_only_when_patching_and_scrubbing_agree():
    model = constructions.dyck1_counter(48)
    members, negatives = _pairs(1, "far", [40] * 10)
    rows = patching.judge_hypotheses([model, model], members, negatives,
                                     {"count then flag": [(0, 0), (0, "mlp")],
                                      "the count alone": [(0, 0)]})
    assert [r["verdict"] for r in rows] == ["accepted", "rejected"]
    assert rows[1]["loss recovered, patched in"] > 0.95  # patching alone would have accepted it
    assert rows[1]["loss recovered, kept by scrubbing"] < 0.05
    assert rows[0]["components"] == "L0H0, L0 MLP"
    effects = patching.component_effects([model], members, negatives)
    assert set(effects) == {"L0H0", "L0 MLP"} and min(v[0] for v in effects.values()) > 0.95
    blind = {"L0H0": [math.nan], "L0H1": [math.nan], "L0 MLP": [math.nan]}
    rows = intervention.effect_rows({"counter": effects, "two heads": blind})
    assert [r["component"] for r in rows] == ["L0H0", "L0 MLP", "L0H1"]
    assert rows[2]["counter"] == "no such component"  # the counter has one head
    assert rows[0]["two heads"] == "no model separates the pairs"


def test_a_model_that_does_not_separate_the_pairs_counts_as_unexplained():
    control = constructions.dyck1_counter(48)
    blind = Classifier(ModelConfig(k=1, n_ctx=48, d_model=8, n_heads=1, d_mlp=8, n_layers=1,
                                   dropout=0.0, mask="causal"), [0])
    members, negatives = _pairs(1, "far", [40] * 10)
    assert patching.pair_accuracy(control, members, negatives) == 1.0
    assert patching.pair_accuracy(blind, members, negatives) <= 0.6
    (row,) = patching.judge_hypotheses([control, blind], members, negatives,
                                       {"count then flag": [(0, 0), (0, "mlp")]})
    assert row["models separating the pairs"] == 1 and row["verdict"] == "rejected"
    assert math.isnan(row["per model, patched in"][1])
    assert row["loss recovered, patched in"] == pytest.approx(0.5)  # (1 + 0) / 2


def test_per_model_rows_show_each_model_and_mark_one_that_does_not_separate():
    control = constructions.dyck1_counter(48)
    blind = Classifier(ModelConfig(k=1, n_ctx=48, d_model=8, n_heads=1, d_mlp=8, n_layers=1,
                                   dropout=0.0, mask="causal"), [0])
    members, negatives = _pairs(1, "far", [40] * 10)
    results = patching.judge_hypotheses([control, blind], members, negatives,
                                        {"H1, count then flag": [(0, 0), (0, "mlp")],
                                         "H2, the count alone": [(0, 0)]})
    effects = patching.component_effects([control, blind], members, negatives)
    rows = intervention.per_model_rows(["counter", "blind"], [1.0, 0.5], results, effects)
    assert rows[0]["H1: patched in / kept"] == "1.00 / 1.00"
    assert rows[0]["H2: patched in / kept"].endswith("/ 0.00")  # serial: scrubbing keeps none
    assert rows[1]["H1: patched in / kept"] == "does not separate the pairs"
    assert rows[0]["L0 MLP"] == "1.00" and rows[1]["L0H0"] == "–"
    assert rows[1]["stack-set accuracy"] == "0.5000"
    with pytest.raises(ValueError, match="2 names but"):
        intervention.per_model_rows(["counter", "blind"], [1.0], results, effects)


def _two_head_model(seed):
    torch.manual_seed(seed)
    return Classifier(ModelConfig(k=3, n_ctx=48, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                                  mask="causal", readout="mean", pos_encoding="learned",
                                  dropout=0.0), [seed]).eval()


def test_chosen_heads_pick_each_layers_strongest_head_on_the_selection_pairs_only():
    select = _pairs(3, "stack", [40] * 12, seed=5)
    test = _pairs(3, "stack", [40] * 12, seed=6)
    hypothesis = patching.ChosenHeads(((1, "mlp"),), (0, 1), *select)
    picked_head_1 = False
    for seed in range(6):
        model = _two_head_model(seed)
        components = hypothesis.components(model)
        for layer in (0, 1):  # the oracle: each head's effect alone, on the selection pairs
            effects = [patching.loss_recovered(model, *select, [(layer, h)]) for h in (0, 1)]
            best = int(np.argmax(effects))
            assert (layer, best) in components and (layer, 1 - best) not in components
            picked_head_1 |= best == 1
        assert components == [c for c in patching.all_components(model)
                              if c in components] and (1, "mlp") in components
        # judged on the test pairs exactly as the same components named by hand
        (chosen,) = patching.judge_hypotheses([model], *test, {"H": hypothesis}, separates=0.0)
        (named,) = patching.judge_hypotheses([model], *test, {"H": components}, separates=0.0)
        for key in ("per model, patched in", "per model, kept by scrubbing"):
            assert chosen[key] == named[key]
        assert chosen["per model, components"] == [named["components"]]
        assert chosen["components"] == ("L1 MLP, the strongest head of each of layers 0, 1 "
                                        "(chosen per model on separate pairs)")
    assert picked_head_1  # the choice was not always the first head


def test_chosen_heads_find_the_constructions_circuit_and_name_bad_arguments():
    control = constructions.dyck_kd(3, 24, 48)
    members, negatives = _pairs(3, "stack", [40] * 10, seed=1)
    hypothesis = patching.ChosenHeads(((1, "mlp"),), (1,), *_pairs(3, "stack", [44] * 10, 2))
    (row,) = patching.judge_hypotheses([control, control], members, negatives,
                                       {"H, the matching head and the comparison": hypothesis})
    assert row["verdict"] == "accepted" and row["per model, components"] == ["L1H0, L1 MLP"] * 2
    rows = intervention.per_model_rows(["a", "b"], [1.0, 1.0], [row], {})
    assert rows[0]["H: heads chosen"] == "L1H0"
    model = _two_head_model(0)
    for bad, match in [(dict(layers=()), "layers must be"), (dict(layers=(0, -1)), "layers must"),
                       (dict(per_layer=0), "per_layer must"), (dict(layers=(2,)), "2 layers"),
                       (dict(per_layer=3), "per_layer 3")]:
        with pytest.raises(ValueError, match=match):
            patching.ChosenHeads(**{"fixed": (), "layers": (0,), "members": members,
                                    "negatives": negatives, **bad}).components(model)
    with pytest.raises(ValueError, match="selection pairs"):
        patching.ChosenHeads((), (0,), members, negatives[:3])
