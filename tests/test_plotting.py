"""Tests for dyckbook.chapters.plotting: every figure is built, drawn and left out of pyplot."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.patches import Arc, Rectangle

from dyckbook.chapters import (
    ablation_grid,
    dyck_languages,
    mechanism,
    models_training,
    references_objectives,
)
from dyckbook.chapters import plotting as P
from dyckbook.data.dataset import Dataset
from dyckbook.data.hardness import BINS
from dyckbook.data.languages import Dyck
from dyckbook.experiment.evaluate import score
from dyckbook.interp import explain
from dyckbook.interp import explain as E
from dyckbook.interp.probes import ProbeResult

LANG = Dyck(2)


@pytest.fixture(autouse=True)
def pyplot_untouched():
    """No figure is ever registered with pyplot, and the global style never changes."""
    before = dict(matplotlib.rcParams)
    yield
    assert plt.get_fignums() == []
    assert dict(matplotlib.rcParams) == before


def drawn(fig: Figure, n_axes: int, draw: bool = True) -> Figure:
    """The figure has the expected number of axes (colour bars too) and, when ``draw``, lays
    out and draws (variants of a figure already drawn skip it: layout is slow)."""
    assert isinstance(fig, Figure) and len(fig.axes) == n_axes
    if draw:
        fig.draw_without_rendering()
    return fig


def random_patterns(rng, layers: int, heads: int, n: int, mask: str, length: int) -> np.ndarray:
    p = rng.random((layers, heads, n, n)) * E.visible_keys(np.array([length]), n, mask)[0]
    return p / np.maximum(p.sum(-1, keepdims=True), 1e-12)


# -------------------------------------------------------------------------------------------
# attention
# -------------------------------------------------------------------------------------------


def test_attention_grid_crops_pads_hatches_hidden_keys_and_marks_partners() -> None:
    data = Dataset.from_strings(LANG, ["([])()"])
    p = random_patterns(np.random.default_rng(0), 2, 2, 11, "causal", 6)  # 3 pad positions
    partner = E.partner_positions(data)[0]
    fig = drawn(P.plot_attention_grid(p, "([])()", "causal", marks=partner, title="t"), 5)
    ax = fig.axes[0]
    image = ax.images[0].get_array()
    assert image.shape == (8, 8)  # [start] + 6 symbols + [end]
    assert np.array_equal(np.ma.getmaskarray(image), np.triu(np.ones((8, 8), bool), 1))
    assert [t.get_text() for t in ax.get_xticklabels()] == ["[start]", *"([])()", "[end]"]
    outlined = {(int(r.get_y() + 0.5), int(r.get_x() + 0.5)) for r in ax.patches
                if isinstance(r, Rectangle)}
    assert outlined == {(q, int(partner[q])) for q in range(1, 7) if partner[q] < q}
    assert len(ax.texts) == 8 * 9 // 2  # every visible cell annotated


def test_attention_grid_values_are_legible_at_page_width_or_not_printed() -> None:
    """Issue 54: explainability's 2 x 2 grids of 20 tokens printed values at 6 pt in a figure
    11 inches wide, about 3.5 pt once the page shows it 7.5 inches wide."""
    from dyckbook.chapters.figure_style import MIN_TEXT, PAGE_WIDTH

    printed = {}
    for string in ("(()())()", "([]){}[]()((", "{{[([[]])]}}{{}}{}"):
        n = len(string) + 2
        p = random_patterns(np.random.default_rng(3), 2, 2, n + 1, "causal", len(string))
        fig = drawn(P.plot_attention_grid(p, string, "causal"), 5)
        shown = min(1.0, PAGE_WIDTH / fig.get_figwidth())
        texts = fig.axes[0].texts
        assert all(t.get_fontsize() * shown >= MIN_TEXT for t in texts), string
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        renderer = FigureCanvasAgg(fig).get_renderer()
        boxes = [t.get_window_extent(renderer) for t in texts]
        cell = fig.axes[0].get_window_extent(renderer).width / n
        assert all(b.width < 0.9 * cell for b in boxes), string  # apart, not run together
        printed[n] = len(texts)
    assert printed == {10: 10 * 11 // 2, 14: 14 * 15 // 2, 20: 0}


def test_attention_grid_minmax_and_long_inputs() -> None:
    p = random_patterns(np.random.default_rng(1), 1, 1, 10, "bidirectional", 8)
    fig = drawn(P.plot_attention_grid(p, "(((())))", scale="minmax"), 2)
    image = fig.axes[0].images[0].get_array()
    assert image.min() == pytest.approx(-1) and image.max() == pytest.approx(1)
    long = "()" * 40
    p = random_patterns(np.random.default_rng(2), 1, 2, 82, "bidirectional", 80)
    fig = drawn(P.plot_attention_grid(p, long), 3, draw=False)
    assert not fig.axes[0].texts and len(fig.axes[0].get_xticks()) <= 41
    with pytest.raises(ValueError, match="scale"):
        P.plot_attention_grid(p, long, scale="log")
    with pytest.raises(ValueError, match="patterns must be"):
        P.plot_attention_grid(p[0], long)


def test_attention_summary_of_a_long_string() -> None:
    language = Dyck(1)
    data = Dataset.from_codes(language, *language.sample_codes(np.random.default_rng(0), [120]))
    p = random_patterns(np.random.default_rng(3), 1, 1, 122, "causal", 120)[0, 0]
    summary = explain.long_input_summary(p, data, 0, "causal")
    fig = drawn(P.plot_attention_summary(summary), 5)
    assert fig.axes[1].patches and len(fig.axes[1].patches) == len(summary.offset_mass)


def test_matching_has_a_panel_per_model_and_four_bars_per_head() -> None:
    data = Dataset.from_strings(LANG, ["(()[])", "[()]()", "(("])
    n = data.codes.shape[1] + 2
    p = np.random.default_rng(4).random((2, len(data), 3, n, n))
    ms = E.matching_scores(p / p.sum(-1, keepdims=True), data)
    fig = drawn(P.plot_matching({"a": ms, "b": ms}, title="t"), 2)
    assert len(fig.axes[0].patches) == 4 * 6  # 2 layers x 3 heads
    drawn(P.plot_matching(ms), 1, draw=False)


def test_preview_roc_has_the_roc_and_a_histogram_per_model() -> None:
    rng = np.random.default_rng(5)
    labels = np.r_[np.zeros(30), np.ones(30)].astype(int)
    scores = {"a": (rng.random(60) + labels, labels), "b": (rng.random(60), labels)}
    fig = drawn(P.plot_preview_roc(scores), 3)
    assert "AUC 1.00" in fig.axes[0].get_legend().get_texts()[0].get_text()
    drawn(P.plot_preview_roc({"b": scores["b"]}), 2, draw=False)


# -------------------------------------------------------------------------------------------
# training and evaluation
# -------------------------------------------------------------------------------------------


def history(validated: bool, scale: float = 1.0) -> list[dict]:
    return [{"step": s, "epoch": s / 10, "lr": 1e-3, "train_loss": scale / s, "seconds": s,
             **({"val_accuracy": 1 - 0.5 / s} if validated else {})} for s in range(1, 6)]


def test_training_curves_with_and_without_validation() -> None:
    curves = {"seed 0": history(True), "seed 1": history(True, 2)}
    fig = drawn(models_training.plot_training_curves(curves), 2)
    assert len(fig.axes[0].lines) == 2 and len(fig.axes[1].lines) == 2
    fig = drawn(models_training.plot_training_curves(history(False)), 1, draw=False)
    assert fig.axes[0].lines[0].get_ydata().tolist() == [1 / s for s in range(1, 6)]
    with pytest.raises(ValueError, match="history"):
        models_training.plot_training_curves([])


def scores_of(seed: int, data: Dataset, flip: float):
    rng = np.random.default_rng(seed)
    pred = np.where(rng.random(len(data)) < flip, 1 - data.labels, data.labels)
    return score(pred.astype(np.int8), data)


@pytest.fixture(scope="module")
def test_set() -> Dataset:
    rng = np.random.default_rng(0)
    members = LANG.sample(rng, 2 * rng.integers(1, 9, 60))
    swapped = [s[::-1] for s in members[:30]]
    crossing = ["([)]" + s for s in members[30:]]
    return Dataset.from_strings(LANG, members + swapped + crossing,
                                ["member"] * 60 + ["mirror"] * 30 + ["crossing"] * 30)


def test_accuracy_by_length_bands_and_boundary(test_set: Dataset) -> None:
    s = scores_of(0, test_set, 0.2)
    table = {4: [10, 9], 8: [10, 5], 12: [0, 0]}
    fig = drawn(P.plot_accuracy_by_length({"model": s, "table": table}, train_max_length=8,
                                          min_strings=1), 1)
    ax = fig.axes[0]
    lines = [line for line in ax.lines if len(line.get_xdata()) > 1 and line.get_label() in
             ("model", "table")]
    assert lines[1].get_xdata().tolist() == [4, 8] and lines[1].get_ydata().tolist() == [0.9, 0.5]
    assert len(ax.collections) == 2 and len(ax.patches) == 1  # two bands, the shaded region
    assert any(np.allclose(line.get_xdata(), 8.5) for line in ax.lines)  # the boundary
    drawn(P.plot_accuracy_by_length({"model": s}, by="depth"), 1, draw=False)
    with pytest.raises(ValueError, match="by"):
        P.plot_accuracy_by_length({"model": s}, by="width")


def test_pooled_strata_reach_the_minimum_without_crossing_the_boundary() -> None:
    keys, n = np.arange(2, 22, 2), np.array([1, 2, 5, 20, 60, 90, 150, 40, 200, 30])
    correct = n // 2
    pos, pn, pc = P.pooled_strata(keys, n, correct, 100, split=14)
    assert pn.sum() == n.sum() and pc.sum() == correct.sum()  # nothing lost
    # within (<= 14): 1+2+5+20+60+90 = 178, then 150 (length 14); beyond: 40+200, 30 joins
    assert pn.tolist() == [178, 150, 270]
    assert pos[0] < pos[1] == 14 < pos[2] and (np.diff(pos) > 0).all()
    assert P.pooled_strata(keys, n, correct, 1)[1].tolist() == n.tolist()


def test_kinds_puts_members_first_then_kinds_and_bins_balanced(test_set: Dataset) -> None:
    seeds = [scores_of(i, test_set, 0.1 * i) for i in range(3)]
    baselines = {"local": scores_of(9, test_set, 0.5), "counts": seeds[:2]}
    fig = drawn(P.plot_kinds(seeds, baselines, title="t"), 1)
    ax = fig.axes[0]
    bins = [f"bin {b}" for b in BINS if seeds[0].per_bin.get(b)]
    assert bins and [t.get_text() for t in ax.get_yticklabels()] == [
        "members", "crossing", "mirror", *bins]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[:2] == ["local", "counts"] and len(labels) == 4
    mean = ax.collections[-1].get_offsets()[:, 0]
    np.testing.assert_allclose(mean[0], np.mean([s.accuracy_of("per_kind", "member")
                                                 for s in seeds]))
    np.testing.assert_allclose(mean[1], np.mean([s.balanced(kind="crossing") for s in seeds]))
    np.testing.assert_allclose(mean[3], np.mean([s.balanced(bin=bins[0][4:]) for s in seeds]))


def test_seeds_strip_with_bootstrap_interval_and_failed_seeds() -> None:
    rows = [{"config": "a", "accuracy": v} for v in (0.9, 0.95, 1.0)] + [
        {"config": "b", "accuracy": 0.7, "status": "ok"},
        {"config": "b", "accuracy": 0.5, "status": "failed"}]
    fig = drawn(P.plot_seeds(rows), 1)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    means = [line.get_xdata()[0] for line in ax.lines if line.get_marker() == "D"]
    assert means == pytest.approx([0.95, 0.6])  # the failed seed counts in the mean


def grid_rows() -> list[dict]:
    rows = []
    for k in (1, 3):
        for layers in (1, 2):
            for mask in ("bidirectional", "causal"):
                for pe in ("none", "learned"):
                    for readout in ("start", "mean"):
                        solved = (k + layers + len(pe)) % 6
                        rows.append({"k": k, "n_layers": layers, "mask": mask,
                                     "pos_encoding": pe, "readout": readout, "solved": solved,
                                     "seeds": 5, "failed": 0, "solved_share": solved / 5,
                                     "accuracy": 0.5 + solved / 10})
    rows[0].update(failed=5, solved=0, solved_share=np.nan, accuracy=np.nan)
    return rows[:-1]  # one cell not run


@pytest.mark.parametrize("value", ["solved_share", "accuracy"])
def test_grid_has_a_panel_per_k_and_depth(value: str) -> None:
    fig = drawn(ablation_grid.plot_grid(grid_rows(), value, title="t"), 4 + 1, value == "accuracy")
    texts = [t.get_text() for t in fig.axes[3].texts]
    assert len(texts) == 7  # 4 lines x 2 readouts, one cell not run
    assert all(("/5" in t) == (value == "solved_share") for t in texts)
    assert [t.get_text() for t in fig.axes[0].texts].count("all failed") == 1
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()][:2] == [
        "bidirectional, none", "bidirectional, learned"]
    with pytest.raises(ValueError, match="value"):
        ablation_grid.plot_grid(grid_rows(), "seeds")
    # a failed cell that has a value (a summary counts failed seeds at 0.5) is labelled once
    rows = grid_rows()
    rows[0].update(solved_share=0.0, accuracy=0.5)
    fig = drawn(ablation_grid.plot_grid(rows, value, title="t"), 4 + 1, value == "accuracy")
    assert [t.get_text() for t in fig.axes[0].texts].count("all failed") == 1


# -------------------------------------------------------------------------------------------
# probes, ablations, the Dyck chapter
# -------------------------------------------------------------------------------------------


def test_probes_panel_per_target_with_seeds() -> None:
    hooks = ["blocks.0.hook_resid_pre", "blocks.0.hook_resid_mid", "blocks.0.hook_resid_post"]

    def result(seed: int) -> dict:
        r = lambda kind, v: ProbeResult(kind, v, v - 0.1 * seed, 0.5, 10, 5)
        return {"depth": {h: r("regression", 0.3 * i) for i, h in enumerate(hooks)},
                "membership": {h: r("classification", 0.6) for h in hooks}}

    fig = drawn(mechanism.plot_probes([result(0), result(1)]), 2)
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["embed", "L0 attn",
                                                                     "L0 mlp"]
    np.testing.assert_allclose(fig.axes[0].lines[0].get_ydata(), [-0.05, 0.25, 0.55])
    drawn(mechanism.plot_probes(result(0)), 2, draw=False)


def test_ablation_heatmap_of_the_mean_drop() -> None:
    drops = [np.array([[0.1, 0.0], [0.3, -0.1]]), np.array([[0.3, 0.0], [0.1, -0.1]])]
    fig = drawn(mechanism.plot_ablation(drops), 2)
    assert fig.axes[0].texts[0].get_text() == "+0.200\n±0.100"
    drawn(mechanism.plot_ablation(drops[0]), 2, draw=False)
    with pytest.raises(ValueError, match="drops"):
        mechanism.plot_ablation(np.zeros(3))


def test_word_counts_and_depth_profiles() -> None:
    counts = {k: {n: Dyck(k).count(n) for n in range(0, 41, 2)} for k in (1, 2)}
    assert len(drawn(dyck_languages.plot_word_counts(counts), 1).axes[0].lines) == 2
    huge = {3: {n: Dyck(3).count(n) for n in (0, 1000, 2000)}}  # beyond float range
    assert drawn(dyck_languages.plot_word_counts(huge), 1, False).axes[0].get_yscale() == "linear"
    member = drawn(dyck_languages.plot_depth_profile("([]{})[]", Dyck(3)), 1).axes[0]
    assert sum(isinstance(p, Arc) for p in member.patches) == 4
    assert "member" in member.get_title() and "non" not in member.get_title()
    bad = drawn(dyck_languages.plot_depth_profile("(]()", Dyck(2)), 1, draw=False).axes[0]
    assert not any(isinstance(p, Arc) for p in bad.patches)
    cross = [line for line in bad.lines if line.get_marker() == "x"]
    assert len(cross) == 1 and cross[0].get_xdata()[0] == 1.5  # the first wrong symbol


def test_oracle_bars_rise_from_one_half_and_leave_gaps_for_missing_rules() -> None:
    tables = {"Dyck-1 hard": {"ngrams": {"all": 0.75}, "window8": {"all": 0.98}},
              "Dyck-3 stack": {"ngrams": {"all": 0.5}, "window8": {"all": 0.5},
                               "counter": {"all": 0.5}}}
    fig = drawn(dyck_languages.plot_oracle(tables, 0.55, title="t"), 1)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["ngrams", "window8", "counter"]
    heights = [p.get_height() for p in ax.patches]
    np.testing.assert_allclose(heights[:2], [0.25, 0.48])  # bars start at 0.5
    assert np.isnan(heights[2])  # Dyck-1 has no counter bar (a recogniser there)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["bar of the long-range sets (55%)", "Dyck-1 hard", "Dyck-3 stack"]


def test_padding_has_a_line_per_seed_and_a_mean_per_configuration_and_side() -> None:
    pads = [0, 8, 24]
    score = {c: {str(m): 0.5 + 0.01 * m for m in pads} for c in references_objectives.CONDITIONS}
    tasks = {"a": [{"seed": 1, "scores": score}, {"seed": 2, "scores": score}],
             "b": [{"seed": 1, "scores": score}]}
    fig = P.plot_padding(tasks, pads, 32, 16)
    left, right = fig.axes
    # per configuration and side: each seed, then the mean; plus the N marker
    assert len(left.lines) == 2 * (2 + 1) + 2 * (1 + 1) + 1
    mean = [ln for ln in left.lines if ln.get_label() == "b, padded before"][0]
    assert list(mean.get_xdata()) == [32, 40, 56] and mean.get_ydata()[-1] == pytest.approx(0.74)
    assert len(fig.legends) == 1 and len(fig.legends[0].get_texts()) == 4
    with pytest.raises(ValueError, match="tasks must map"):
        P.plot_padding({"a": []}, pads, 32)


def test_the_seed_figure_is_the_same_on_every_draw_and_leaves_numpy_alone():
    """`dyckbook verify` found fig_seeds.png differing between a run and its rerun: seaborn's
    jitter drew from numpy's global generator."""
    import io

    import numpy as np

    from dyckbook.chapters.plotting import plot_seeds

    rows = [{"config": c, "accuracy": a} for c in ("a", "b") for a in (0.5, 0.7, 0.9)]

    def png() -> bytes:
        buffer = io.BytesIO()
        plot_seeds(rows).savefig(buffer, format="png", metadata={"Software": None})
        return buffer.getvalue()

    np.random.seed(1)
    first, after = png(), np.random.random()
    np.random.seed(2)
    assert png() == first
    np.random.seed(1)
    assert np.random.random() == after  # the caller's draws are as they would have been


@pytest.mark.parametrize("length", [8, 20, 40, 80])
def test_attention_token_labels_are_legible_on_the_page_and_never_overlap(length: int) -> None:
    """Issue 65: the explainability heat maps' token labels were about 6 px. As the page shows
    the figure (scaled to the page's width), every label is TICK_POINTS tall, and labels are
    thinned so that neighbours never overlap."""
    from dyckbook.chapters import attention_plots as A
    from dyckbook.chapters.figure_style import PAGE_WIDTH

    string = "()" * (length // 2)
    n = length + 2
    p = random_patterns(np.random.default_rng(3), 2, 2, n, "causal", length)
    fig = P.plot_attention_grid(p, string, "causal")
    shown = min(1.0, PAGE_WIDTH / fig.get_figwidth())
    ax = fig.axes[0]
    labels = ax.get_xticklabels()
    assert labels and all(t.get_fontsize() * shown == pytest.approx(A.TICK_POINTS)
                          for t in labels)
    ticks = ax.get_xticks()
    if len(ticks) > 1:  # the distance between two labels, in points on the page, holds one
        width = ax.get_position().width * fig.get_figwidth() * 72 * shown
        gap = width / n * (ticks[1] - ticks[0])
        assert gap >= A.TICK_POINTS
    plt.close(fig)


def test_the_headline_figure_draws_every_claim_its_verdict_and_its_comparators():
    """Issue 64: one figure with every claim as a row, ours with its interval coloured by the
    verdict, the thesis' value and the strongest stack-free rule on the same strings."""
    from matplotlib.colors import to_rgba

    from dyckbook.chapters import plotting
    from dyckbook.chapters.re_examining_thesis import headline_rows
    from dyckbook.claims.verdicts import RULE_OF, Evidence, Verdict

    def v(claim, label, *evidence, shown=()):
        return Verdict(RULE_OF[claim], label, evidence, shown)

    judged = [
        v("bidirectional_k1", "refuted", Evidence("bidirectional k1", (0.5, 0.51, 0.49)),
          shown=(Evidence("order-blind ceiling k1", (0.5,), reference=True),)),
        v("layers_k3", "not testable", Evidence("one layer k3", (0.58, 0.6, 0.59)),
          Evidence("two layers k3", (0.6, 0.62, 0.63)),
          Evidence("strongest stack-free rule k3", (0.745,), reference=True)),
        v("attention_k1", "refuted", Evidence("partner attention k1", (0.1, 0.15, 0.12)),
          Evidence("models that learned k1", (1.0,), reference=True),
          Evidence("uniform attention on the partner k1", (0.05,), reference=True))]
    rows = headline_rows(judged)
    assert [r["claim"] for r in rows] == ["bidirectional_k1", "layers_k3", "attention_k1"]
    assert rows[0]["thesis"] == 1.0 and rows[0]["rule"] == 0.5  # Table 5.2's exp. 1
    assert rows[1]["thesis"] is None and rows[1]["rule"] == 0.745
    assert rows[1]["title"] == "Two layers are needed (Dyck-3)"
    assert rows[1]["name"] == "one layer k3"
    assert rows[2]["rule"] == 0.05 and rows[2]["low"] <= rows[2]["mean"] <= rows[2]["high"]
    fig = plotting.plot_headline(rows)
    ax = fig.axes[0]
    words = [t.get_text() for t in ax.texts]
    assert len(words) == 3 and words[1].startswith("Two layers are needed (Dyck-3): not")
    colours = {to_rgba(line.get_color()) for line in ax.lines if line.get_marker() == "D"}
    assert to_rgba(plotting.VERDICT_COLOURS["not testable"]) in colours
    assert to_rgba(plotting.VERDICT_COLOURS["refuted"]) in colours
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "thesis (Table 5.2)" in legend and "not testable" in legend
    with pytest.raises(ValueError, match="rows must hold"):
        plotting.plot_headline([])
