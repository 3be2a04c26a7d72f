"""Why a model breaks beyond its training lengths: the padded sets keep the one dip where the
intervention says, the rule gives every verdict it names, and the hand-set counter holds."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from dyckbook.chapters import references_objectives as length_break
from dyckbook.interp import constructions
from dyckbook.nn import tokenizer
from dyckbook.nn.model import Classifier, ModelConfig


def _first_dip(codes: np.ndarray, length: int) -> int:
    """The oracle: the first index where a left-to-right count of ( minus ) goes negative."""
    depth = 0
    for i, c in enumerate(codes[:length]):
        depth += 1 if c == 0 else -1
        if depth < 0:
            return i
    return -1


def test_padding_moves_the_dip_only_before_and_keeps_membership():
    pads = [0, 8, 20]
    sets = length_break.padded_sets(12, 32, pads, seed=3)
    assert set(sets) == set(length_break.CONDITIONS)
    cores = sets["negatives after"][0]
    for m in pads:
        for condition, (codes, lengths, label) in ((c, sets[c][m]) for c in sets):
            assert (lengths == 32 + m).all() and codes.shape == (12, 32 + m)
            dips = [_first_dip(codes[i], 32 + m) for i in range(12)]
            if label == 1:
                assert dips == [-1] * 12, condition  # members never dip
                assert all(codes[i, :32 + m].sum() == (32 + m) // 2 for i in range(12))
            else:
                core_dips = [_first_dip(cores[0][i], 32) for i in range(12)]
                shift = m if condition.endswith("before") else 0
                assert dips == [d + shift for d in core_dips], (condition, m)
        # the same core under both paddings, and a fresh pad per item
        after, before = sets["negatives after"][m][0], sets["negatives before"][m][0]
        assert (after[:, :32] == cores[0]).all() and (before[:, m:] == cores[0]).all()


def test_the_hand_set_counter_holds_on_every_padded_set():
    pads = [0, 16, 64]
    scores = length_break.scores(constructions.dyck1_counter(96),
                                 length_break.padded_sets(30, 32, pads, seed=1), 96)
    assert all(v == 1.0 for by_pad in scores.values() for v in by_pad.values())
    assert length_break.verdict(scores, pads) == "holds"


def _scores(neg_after, neg_before, mem_after, mem_before, base=(1.0, 1.0)):
    return {"negatives after": {"0": base[0], "9": neg_after},
            "negatives before": {"0": base[0], "9": neg_before},
            "members after": {"0": base[1], "9": mem_after},
            "members before": {"0": base[1], "9": mem_before}}


@pytest.mark.parametrize("scores, expected", [
    (_scores(1.0, 0.0, 1.0, 1.0), "position"),  # a later dip is accepted
    (_scores(1.0, 1.0, 0.0, 0.0), "length"),  # long members are rejected wherever the dip is
    (_scores(0.0, 0.0, 1.0, 1.0), "length"),
    (_scores(0.95, 0.95, 1.0, 0.95), "holds"),
    (_scores(1.0, 0.5, 0.7, 1.0), "mixed"),  # before drops 0.25, after 0.15
    (_scores(1.0, 1.0, 1.0, 1.0, base=(1.0, 0.5)), "does not solve the cores"),
    (_scores(1.0, 1.0, 1.0, 1.0, base=(0.0, 1.0)), "does not solve the cores"),  # accepts all
])
def test_the_rule_gives_each_verdict(scores, expected):
    assert length_break.verdict(scores, [0, 9]) == expected


def test_rows_and_sentence_count_every_seed():
    tasks = {"causal-none-end": [{"seed": 1, "scores": _scores(1.0, 0.0, 1.0, 1.0)},
                                 {"seed": 2, "scores": _scores(1.0, 1.0, 1.0, 1.0,
                                                               base=(0.0, 1.0))}]}
    rows = length_break.rows(tasks, [0, 9])
    assert [r["verdict"] for r in rows] == ["position", "does not solve the cores"]
    assert rows[0]["balanced, padded before"] == "0.50"
    assert rows[0]["members kept / negatives rejected, before"] == "1.00 / 0.00"
    assert length_break.sentence(tasks, [0, 9]) == (
        "By the rule stated beforehand: `causal-none-end`: 1 position, 1 does not solve the "
        "cores (of 2 seeds).")
    tasks["causal-none-end"] += [{"seed": 3, "scores": _scores(1.0, 1.0, 0.0, 0.0)},
                                 {"seed": 4, "scores": _scores(0.0, 0.0, 1.0, 1.0)}]
    assert length_break.sentence(tasks, [0, 9]).endswith(
        "1 position, 2 length, 1 does not solve the cores (of 4 seeds). Of the 2 seeds that "
        "break with the length, 1 does so by rejecting the padded members on both sides (they "
        "keep rejecting more of the negatives than they accept of the members).")


@pytest.mark.parametrize("pads", [[], [8], [0, 3], [0, 8, 4], [0, 8, 8]])
def test_bad_pads_are_named(pads):
    with pytest.raises(ValueError, match="pads must be"):
        length_break.padded_sets(4, 32, pads, seed=0)
    with pytest.raises(ValueError, match="n_items must be"):
        length_break.padded_sets(0, 32, [0], seed=0)


def _before(m=16, n=10, seed=2):
    sets = length_break.padded_sets(n, 32, [0, m], seed=seed)
    return sets, {name: (tokenizer.encode(*sets[name][m][:2], 32 + m),
                         tokenizer.encode(*sets[name][0][:2], 32 + m))
                  for name in ("negatives before", "members before")}


def test_aligned_patch_lands_on_the_same_symbols():
    # the oracle: a NoPE model's embedding depends on the token only, so patching it at the
    # core's symbols from the core's own run changes nothing, and a shift by one changes logits
    counter, m = constructions.dyck1_counter(48), 16
    sets, tokens = _before(m)
    padded, core = tokens["negatives before"]
    rows, t = np.nonzero(np.ones((10, 32), bool))
    plain = counter(padded)
    same = length_break.aligned_logits(counter, padded, core, rows, m + t + 1, t + 1,
                                       "blocks.0.hook_resid_pre")
    shifted = length_break.aligned_logits(counter, padded, core, rows, m + t, t + 1,
                                          "blocks.0.hook_resid_pre")
    assert torch.allclose(same, plain, atol=1e-5)
    counter.train()  # the mode is restored
    length_break.aligned_logits(counter, padded, core, rows, m + t + 1, t + 1)
    assert counter.training
    counter.eval()
    assert (shifted - plain).abs().max() > 0.1


def test_the_counters_flag_travels_with_layer_0s_output_at_the_dip():
    # in the hand-set counter layer 0 flags every negative prefix, so a member takes the
    # negative core's verdict exactly when it receives the dip positions' vectors
    counter, m = constructions.dyck1_counter(48), 16
    sets, tokens = _before(m)
    members = tokens["members before"][0]
    negative_core = tokens["negatives before"][1]
    masks = length_break._patch_masks(*sets["negatives before"][0][:2], seed=0)
    assert masks["dips"].any(1).all() and not (masks["dips"] & masks["other positions"]).any()
    assert (masks["dips"].sum(1) == masks["other positions"].sum(1)).all()
    for patch, rejected in (("dips", True), ("other positions", False)):
        rows, t = np.nonzero(masks[patch])
        logits = length_break.aligned_logits(counter, members, negative_core, rows, m + t + 1,
                                             t + 1)
        assert ((logits.argmax(-1) == 0) == rejected).all(), patch


def test_patch_scores_on_the_counter_have_nothing_to_recover():
    sets = length_break.padded_sets(20, 32, [0, 16, 48], seed=4)
    p = length_break.patch_scores(constructions.dyck1_counter(80), sets, 48, 80, seed=0)
    assert all(v == 1.0 for side in p.values() for v in side.values())
    assert set(p["negatives rejected"]) == {"core", "padded", *length_break.PATCHES}
    assert length_break.patch_verdict(p) == "nothing to recover"
    with pytest.raises(ValueError, match="m must be a nonzero pad length"):
        length_break.patch_scores(constructions.dyck1_counter(80), sets, 0, 80, seed=0)
    with pytest.raises(ValueError, match="hook 'nope'"):
        length_break.patch_scores(constructions.dyck1_counter(80), sets, 16, 80, 0, hook="nope")


def _patch(dips, other, whole, kept_dips=1.0, core=1.0, padded=0.0):
    return {"negatives rejected": {"core": core, "padded": padded, "dips": dips,
                                   "other positions": other, "whole core": whole},
            "members kept": {"core": 1.0, "padded": 1.0, "dips": kept_dips,
                             "other positions": 1.0, "whole core": 1.0}}


@pytest.mark.parametrize("patch, expected", [
    (_patch(0.9, 0.1, 1.0), "the dips carry it"),
    (_patch(0.9, 0.5, 1.0), "not specific"),  # the control positions recover too
    (_patch(0.9, 0.1, 1.0, kept_dips=0.5), "not specific"),  # the patch rejects members
    (_patch(0.5, 0.0, 0.9), "the core carries it"),
    (_patch(0.5, 0.0, 0.5), "partial"),
    (_patch(0.1, 0.0, 0.1), "not in layer 0"),
    (_patch(0.5, 0.5, 0.5, padded=0.9), "nothing to recover"),
    (_patch(0.65, 0.0, 0.6, core=0.8, padded=0.4), "partial"),  # recovered 0.625 and 0.5
    (_patch(1.0, 1.0, 1.0, core=0.5, padded=0.0), "does not solve the cores"),  # balanced 0.75
])
def test_the_patch_rule_gives_each_verdict(patch, expected):
    assert length_break.patch_verdict(patch) == expected


def test_patch_rows_and_sentence_count_patched_seeds_only():
    tasks = {"a": [{"seed": 1, "patch": _patch(0.9, 0.1, 1.0)}, {"seed": 2},
                   {"seed": 3, "patch": _patch(0.1, 0.0, 0.1)}]}
    rows = length_break.patch_rows(tasks)
    assert [(r["seed"], r["verdict"]) for r in rows] == [(1, "the dips carry it"),
                                                         (3, "not in layer 0")]
    assert rows[0]["patched dips"] == "0.90"
    assert length_break.patch_sentence(tasks) == (
        "Patching layer 0's output, by the rule stated beforehand: `a`: 1 the dips carry it, "
        "1 not in layer 0 (of 2 seeds).")
    assert length_break.patch_sentence({"a": [{"seed": 1}]}) == "No model was patched."


def test_moving_positions_is_a_shifted_position_table():
    # the oracle: with learned positions, the core run at the padded string's positions is the
    # core run of a copy whose table is read m later (start kept); read m - 1 later it differs
    config = ModelConfig(k=1, n_ctx=48, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                         mask="causal", readout="end", pos_encoding="learned", dropout=0.0)
    m, model = 16, Classifier(config, [5]).eval()
    torch.manual_seed(0)
    with torch.no_grad():  # an untrained readout is near constant: make every part matter
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    _, tokens = _before(m)
    padded, core = tokens["negatives before"]
    moved = length_break._moved_positions(model, core, padded, m, length_break.LAYER0)
    got, cache = model.run_with_cache(core, moved)
    for shift, equal in ((m, True), (m - 1, False)):
        shifted = copy.deepcopy(model)
        with torch.no_grad():
            shifted.pos.table[0, 1:34] = model.pos.table[0, 1 + shift:34 + shift]
        want, want_cache = shifted.run_with_cache(core, {length_break.LAYER0})
        assert torch.allclose(got, want, atol=1e-5) == equal, shift
        assert torch.allclose(cache[length_break.LAYER0][:, :34],
                              want_cache[length_break.LAYER0][:, :34], atol=1e-5) == equal


def test_moving_positions_changes_nothing_without_positional_vectors():
    sets = length_break.padded_sets(20, 32, [0, 48], seed=4)
    counter = constructions.dyck1_counter(80)
    plain = length_break.patch_scores(counter, sets, 48, 80, seed=0)
    moved = length_break.patch_scores(counter, sets, 48, 80, seed=0, move_positions=True)
    for side in plain:
        assert moved[side] == {**plain[side], length_break.MOVED: plain[side]["core"]}


def _moved(moved, **patch):
    p = _patch(**{"dips": 1.0, "other": 0.0, "whole": 1.0, **patch})
    p["negatives rejected"][length_break.MOVED] = moved
    p["members kept"][length_break.MOVED] = 1.0
    return p


@pytest.mark.parametrize("patch, expected", [
    (_moved(0.1), "the positions break it"),  # moving alone reproduces 90% of the break
    (_moved(0.9), "the pad's symbols break it"),
    (_moved(0.5), "both"),
    (_moved(0.9, padded=0.9), "nothing to recover"),
    (_moved(1.0, core=0.5), "does not solve the cores"),
])
def test_the_moved_rule_gives_each_verdict(patch, expected):
    assert length_break.moved_verdict(patch) == expected


def test_moved_rows_and_sentence_name_both_verdicts():
    tasks = {"r": [{"seed": 1, "patch_moved": _moved(0.95)}, {"seed": 2, "patch": _moved(0.0)}]}
    tasks["r"][0]["patch_moved"]["members kept"][length_break.MOVED] = 0.7  # a drop of 0.3
    rows = length_break.patch_rows(tasks, "patch_moved")
    assert [(r["seed"], r["positions moved"], r["verdict"]) for r in rows] == [
        (1, "the pad's symbols break it", "the dips carry it")]
    assert rows[0]["negatives rejected, core / moved / padded"] == "1.00 / 0.95 / 0.00"
    assert rows[0]["members kept, core / moved / padded / dips patched"] == (
        "1.00 / 0.70 / 1.00 / 1.00")
    plain = _patch(1.0, 0.0, 1.0)
    nope = {"seed": 3, "patch": plain, "patch_moved": _moved(1.0)}  # the core's own score
    tasks["n"] = [nope]
    assert [r["configuration"] for r in length_break.patch_rows(tasks, "patch_moved")] == ["r"]
    assert length_break.patch_sentence(tasks, "patch_moved") == (
        "Moving the core to the padded string's positions, then patching from that run, by the "
        "rule stated beforehand: `r`: 1 the pad's symbols break it; patched, 1 the dips carry "
        "it (of 1 seed); moving the positions alone drops the members kept by 0.2 or more in 1 "
        "of 1; read on members and negatives together (a rule stated later), 1 both; `n`: no "
        "positional vectors, nothing moved (every score equals the "
        "plain patch's, as it must; 1 seed).")
    nope["patch_moved"]["members kept"]["dips"] = 0.5  # a moved score that differs: shown
    assert len(length_break.patch_rows(tasks, "patch_moved")) == 2


def _mean_model(norm):
    config = ModelConfig(k=1, n_ctx=48, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                         mask="causal", readout="mean", pos_encoding="none", norm=norm,
                         dropout=0.0)
    model = Classifier(config, [7]).eval()
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    return model


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_readout_over_every_real_token_is_the_models_own(norm):
    model = _mean_model(norm)
    _, tokens = _before(16)
    padded = tokens["negatives before"][0]
    real = padded != tokenizer.PAD
    # the readout's run records activations (torch's ops), the model's own may take the C
    # kernels: test_kernels.py's tolerance for the two paths (logits here reach 16)
    assert torch.allclose(length_break.readout_logits(model, padded, real), model(padded),
                          rtol=1e-4, atol=2e-5)
    fewer = real.clone()
    fewer[:, 0] = False  # the start token left out: the average moves
    assert (length_break.readout_logits(model, padded, fewer) - model(padded)).abs().max() > 1e-3
    with pytest.raises(ValueError, match="keep a token in every row"):
        length_break.readout_logits(model, padded, torch.zeros_like(real))
    end = Classifier(ModelConfig(k=1, n_ctx=48, d_model=16, n_heads=2, d_mlp=32, n_layers=2,
                                 mask="causal", readout="end"), [0])
    with pytest.raises(ValueError, match="readout 'end'"):
        length_break.readout_logits(end, padded, real)


def test_the_readout_masks_are_the_core_and_the_tokens_before_it():
    m = 16
    sets, tokens = _before(m)
    padded = tokens["negatives before"][0]
    lengths = sets["negatives before"][m][1]
    masks = length_break._readout_masks(padded, lengths, m, np.random.default_rng(0))
    real = (padded != tokenizer.PAD).numpy()
    for i in range(len(lengths)):
        last = np.flatnonzero(real[i])[-33:]  # the oracle: the core's 32 symbols and [end]
        assert np.flatnonzero(masks["core tokens"][i].numpy()).tolist() == last.tolist()
        drawn = np.flatnonzero(masks["pad tokens"][i].numpy())
        assert len(drawn) == min(33, m + 1) and drawn.max() <= m


def test_readout_scores_keys_and_errors():
    sets = length_break.padded_sets(10, 32, [0, 16], seed=4)
    p = length_break.readout_scores(_mean_model("pre"), sets, 16, 48, seed=0)
    assert set(p) == {"negatives rejected", "members kept"}
    assert set(p["members kept"]) == {"core", "padded", *length_break.READOUTS}
    with pytest.raises(ValueError, match="m must be a nonzero pad length"):
        length_break.readout_scores(_mean_model("pre"), sets, 0, 48, seed=0)
    # the hand-set counter reads the mean and holds at every length: nothing to recover
    counter = length_break.readout_scores(constructions.dyck1_counter(48), sets, 16, 48, seed=0)
    assert counter["negatives rejected"]["padded"] == 1.0
    assert length_break.readout_verdict(counter) == "nothing to recover"


def _read(core_tokens, pad_tokens, kept=1.0, core=1.0, padded=0.0):
    return {"negatives rejected": {"core": core, "padded": padded, "core tokens": core_tokens,
                                   "pad tokens": pad_tokens},
            "members kept": {"core": 1.0, "padded": 1.0, "core tokens": kept,
                             "pad tokens": 1.0}}


@pytest.mark.parametrize("scores, expected", [
    (_read(0.9, 0.0), "the average carries it"),
    (_read(0.9, 0.5), "not specific"),
    (_read(0.9, 0.0, kept=0.8), "not specific"),
    (_read(0.5, 0.0), "partial"),
    (_read(0.1, 0.0), "not the readout"),
    (_read(0.5, 0.0, padded=0.9), "nothing to recover"),
    (_read(1.0, 0.0, core=0.5), "does not solve the cores"),
])
def test_the_readout_rule_gives_each_verdict(scores, expected):
    assert length_break.readout_verdict(scores) == expected


def test_readout_rows_and_sentence_count_the_prediction():
    moved_not_l0 = _moved(1.0, dips=0.0, other=0.0, whole=0.0)  # pad's symbols, not in layer 0
    tasks = {"r": [{"seed": 1, "readout": _read(0.9, 0.0), "patch_moved": moved_not_l0},
                   {"seed": 2, "readout": _read(0.1, 0.0), "patch_moved": _moved(1.0)},
                   {"seed": 3}]}
    rows = length_break.readout_rows(tasks)
    assert [(r["seed"], r["verdict"]) for r in rows] == [(1, "the average carries it"),
                                                         (2, "not the readout")]
    assert rows[0]["positions moved; patched"] == "the pad's symbols break it; not in layer 0"
    assert length_break.readout_sentence(tasks) == (
        "Reading the mean over the core's tokens, by the rule stated beforehand: `r`: 1 the "
        "average carries it, 1 not the readout (of 2 seeds); of the 1 the pad's symbols break "
        "outside layer 0, the average carries it in 1.")
    assert length_break.readout_sentence({"r": [{"seed": 3}]}) == (
        "No mean-readout model was read.")


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_last_layer_patch_is_the_average_with_the_cores_vectors_swapped_in(norm):
    # the oracle, computed apart: the padded run's last-layer vectors with the core's symbols
    # replaced by the core run's, then the final norm, the mean over real tokens, the classifier
    model, m = _mean_model(norm), 16
    sets, tokens = _before(m)
    padded, core = tokens["negatives before"]
    last = length_break.last_layer(model)
    assert last == "blocks.1.hook_resid_post"
    rows, t = np.nonzero(np.ones((len(padded), 32), dtype=bool))
    got = length_break.aligned_logits(model, padded, core, rows, m + t + 1, t + 1, hook=last)
    with torch.no_grad():
        x = model.run_with_cache(padded, {last})[1][last].clone()
        x[rows, m + t + 1] = model.run_with_cache(core, {last})[1][last][rows, t + 1]
        x = x[None] if model.ln_final is None else model.ln_final(x[None])
        real = (padded != tokenizer.PAD).to(x.dtype)[None, ..., None]
        expected = model.classifier((x * real).sum(2) / real.sum(2))[0]
    assert torch.allclose(got, expected, atol=1e-5)
    assert (got - model(padded)).abs().max() > 1e-3  # the patch changed something
    p = length_break.patch_scores(model, sets, m, 32 + m, seed=0, hook=last)
    assert set(p["negatives rejected"]) == {"core", "padded", *length_break.PATCHES}


def _last(whole, kept_whole=1.0, core=1.0, padded=0.0):
    p = _patch(0.0, 0.0, whole, core=core, padded=padded)
    p["members kept"]["whole core"] = kept_whole
    return p


@pytest.mark.parametrize("scores, expected", [
    (_last(0.9), "the core's tokens carry it"),
    (_last(0.9, kept_whole=0.8), "not specific"),  # the members patched alike are rejected
    (_last(0.5), "partial"),
    (_last(0.1), "the pad's tokens in the average"),
    (_last(0.5, padded=0.9), "nothing to recover"),
    (_last(1.0, core=0.5), "does not solve the cores"),
])
def test_the_last_layer_rule_gives_each_verdict(scores, expected):
    assert length_break.last_verdict(scores) == expected


def test_last_rows_and_sentence_count_the_prediction_and_the_fresh_seeds():
    symbols = _moved(1.0)  # the pad's symbols break it
    tasks = {"r": [{"seed": 1, "patch_moved": symbols, "patch_last": _last(0.9),
                    "patch_last_moved": _last(0.1)},
                   {"seed": 8, "patch_moved": symbols, "patch_last": _last(0.1),
                    "patch_last_moved": _last(0.9)},
                   {"seed": 9, "patch_moved": _moved(0.1), "patch_last": _last(0.1),
                    "patch_last_moved": _last(0.1)},
                   {"seed": 3}]}
    rows = length_break.last_rows(tasks)
    assert [(r["seed"], r["positions moved"], r["last layer patched from the core"],
             r["from the moved core"]) for r in rows] == [
        (1, "the pad's symbols break it", "the core's tokens carry it",
         "the pad's tokens in the average"),
        (8, "the pad's symbols break it", "the pad's tokens in the average",
         "the core's tokens carry it"),
        (9, "the positions break it", "the pad's tokens in the average",
         "the pad's tokens in the average")]
    assert rows[0]["negatives rejected, core / padded / patched / from moved"] == (
        "1.00 / 0.00 / 0.90 / 0.10")
    assert length_break.last_sentence(tasks, fresh=[8, 9]) == (
        "Patching the last layer at the core's symbols, by the rule stated beforehand: `r`: "
        "patched from the core, 1 the core's tokens carry it, 2 the pad's tokens in the "
        "average; from the moved core, 1 the core's tokens carry it, 2 the pad's tokens in the "
        "average (of 3 seeds); of the 2 the pad's symbols break, the pad's tokens in the "
        "average in 1 (fresh seeds: 0 of 1).")
    assert length_break.last_sentence({"r": [{"seed": 3}]}) == (
        "No model was patched at its last layer.")


def _moved_members(moved, kept_moved, kept_padded=1.0, padded=0.0):
    p = _moved(moved, padded=padded)
    p["members kept"][length_break.MOVED] = kept_moved
    p["members kept"]["padded"] = kept_padded
    return p


def _low_core_members():
    # the padding costs negatives (1.0 -> 0.7) but keeps more members (0.6 -> 1.0): the
    # balanced accuracy does not fall, so there is no balanced break to share out
    p = _moved_members(1.0, 1.0, padded=0.7)
    p["members kept"]["core"] = 0.6
    return p


@pytest.mark.parametrize("patch, negatives, balanced", [
    # the rule on the negatives alone says the pad's symbols; the members say otherwise
    (_moved_members(1.0, 0.0, kept_padded=0.0), "the pad's symbols break it",
     "both"),  # b: core 1.0, moved 0.5, padded 0.0: half the break
    (_moved_members(1.0, 0.0), "the pad's symbols break it",
     "the positions break it"),  # b: 1.0, 0.5, 0.5: all of it
    (_moved_members(0.1, 1.0), "the positions break it", "the positions break it"),
    (_moved_members(1.0, 1.0), "the pad's symbols break it", "the pad's symbols break it"),
    (_low_core_members(), "the pad's symbols break it", "nothing to recover"),
])
def test_the_moved_rule_read_on_members_and_negatives(patch, negatives, balanced):
    assert length_break.moved_verdict(patch) == negatives
    assert length_break.moved_verdict(patch, read="balanced") == balanced
    with pytest.raises(ValueError, match="read must be one of"):
        length_break.moved_verdict(patch, read="members")
