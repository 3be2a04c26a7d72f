"""Tests for dyckbook.plotting: figures, axes, labels, cropping, masks; never plt.show()."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported anywhere in this module

import matplotlib.pyplot as plt
import numpy as np
import pytest
from matplotlib.figure import Figure

from dyckbook import explain as E
from dyckbook import plotting as P


@pytest.fixture(autouse=True)
def no_show(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("plotting must never call show()")

    monkeypatch.setattr(plt, "show", boom)
    monkeypatch.setattr(Figure, "show", boom)
    n_before = len(plt.get_fignums())
    yield
    # figures are built without pyplot, so none is left registered with it
    assert len(plt.get_fignums()) == n_before


def save(fig: Figure, tmp_path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 1000


def data_axes(fig: Figure) -> list:
    """Axes that are not colour bars."""
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def softmax_rows(rng, shape):
    x = rng.random(shape)
    return x / x.sum(-1, keepdims=True)


LABELS = ["[start]", "(", "(", ")", "[", "]", ")", "[end]"]


def test_token_labels_crop_pads_and_reject_unknown_ids():
    tok = np.array([0, 3, 3, 4, 5, 6, 4, 2, 1, 1])
    assert P.token_labels(tok, "()[]", length=6) == LABELS
    assert P.token_labels(tok, "()[]")[-1] == "[pad]"
    with pytest.raises(ValueError, match="vocabulary"):
        P.token_labels(np.array([0, 9, 2]), "()")


def test_attention_grid_layout_labels_crop_and_colorbar(tmp_path):
    rng = np.random.default_rng(0)
    p = softmax_rows(rng, (2, 3, 11, 11))  # 8 real tokens + 3 pads
    fig = P.plot_attention_grid(p, LABELS)
    assert isinstance(fig, Figure)
    axes = data_axes(fig)
    assert len(axes) == 2 * 3
    assert len(fig.axes) == 2 * 3 + 1  # exactly one colour bar
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == LABELS
        assert [t.get_text() for t in ax.get_yticklabels()] == LABELS
        img = ax.get_images()[0]
        assert img.get_array().shape == (8, 8)  # pads cropped
        assert img.get_clim() == (0.0, 1.0)
    # 8 tokens: annotated by default (64 values per panel)
    assert len(axes[0].texts) == 64
    assert axes[1].get_title() == "layer 0, head 1"
    save(fig, tmp_path, "grid")


def test_attention_grid_masks_causal_cells_and_minmax(tmp_path):
    rng = np.random.default_rng(1)
    p = softmax_rows(rng, (1, 1, 8, 8))
    fig = P.plot_attention_grid(p, LABELS, mask="causal", scale="minmax")
    ax = data_axes(fig)[0]
    arr = ax.get_images()[0].get_array()
    future = np.triu(np.ones((8, 8), dtype=bool), k=1)
    assert np.array_equal(np.ma.getmaskarray(arr), future)
    assert arr.min() == pytest.approx(-1.0) and arr.max() == pytest.approx(1.0)
    assert ax.get_images()[0].get_clim() == (-1.0, 1.0)
    assert len(ax.texts) == int((~future).sum())  # masked cells carry no value
    save(fig, tmp_path, "grid_minmax")


def test_attention_grid_long_input_thins_ticks_and_skips_annotation():
    rng = np.random.default_rng(2)
    n = 130
    p = softmax_rows(rng, (1, 1, n, n))
    labels = ["[start]"] + ["(", ")"] * 64 + ["[end]"]
    fig = P.plot_attention_grid(p, labels, mask=np.zeros((n, n), dtype=bool))
    ax = data_axes(fig)[0]
    ticks = ax.get_xticks()
    assert len(ticks) <= 48
    assert [t.get_text() for t in ax.get_xticklabels()] == [labels[int(i)] for i in ticks]
    assert len(ax.texts) == 0


def test_attention_grid_errors():
    p = np.ones((1, 1, 4, 4)) / 4
    with pytest.raises(ValueError, match="scale"):
        P.plot_attention_grid(p, ["a"] * 4, scale="log")
    with pytest.raises(ValueError, match="token_labels"):
        P.plot_attention_grid(p, ["a"] * 5)


def test_attention_summary_from_pattern_and_summary(tmp_path):
    rng = np.random.default_rng(3)
    n = 600
    p = softmax_rows(rng, (n, n)) ** 2
    p /= p.sum(1, keepdims=True)
    fig = P.plot_attention_summary(p, matching=rng.permutation(n))
    assert len(data_axes(fig)) == 4
    s = E.long_input_summary(p)
    fig2 = P.plot_attention_summary(s, map="mean")
    assert len(data_axes(fig2)) == 4
    assert data_axes(fig2)[0].get_images()[0].get_array().shape == s.block_mean.shape
    save(fig, tmp_path, "summary")


def test_matching_attention_and_preview_figures(tmp_path):
    rng = np.random.default_rng(4)
    strings = ["(())", "()[]", "([{}])", "[]"]
    lens = np.array([len(s) for s in strings])
    tok = np.full((4, 8), E.PAD)
    for b, s in enumerate(strings):
        tok[b, 0], tok[b, len(s) + 1] = E.START, E.END
        tok[b, 1 : len(s) + 1] = [3 + "()[]{}".index(c) for c in s]
    mask = E.attention_mask(lens, 8)
    p = np.where(mask[None, :, None], 0, rng.random((2, 4, 2, 8, 8)))
    p = p / np.maximum(p.sum(-1, keepdims=True), 1e-12)
    meas = E.matching_attention(p, tok, lens)
    fig = P.plot_matching_attention(meas)
    assert len(data_axes(fig)) == 3
    save(fig, tmp_path, "matching")
    labels = np.r_[np.ones(30), np.zeros(30)]
    scores = rng.random((2, 60, 2)) + labels[None, :, None] * 0.3
    fig = P.plot_preview_roc(scores, labels)
    assert len(data_axes(fig)) == 2
    assert len(data_axes(fig)[0].get_lines()) == 2 * 2 + 1  # one ROC per head + chance
    save(fig, tmp_path, "roc")
    assert len(data_axes(P.plot_preview_roc(scores[0, :, 0], labels))) == 2


def test_training_curves_accept_records_and_columns(tmp_path):
    records = [
        {
            "epoch": e,
            "step": 10 * e,
            "train_loss": 1 / e,
            "val_loss": 1.1 / e,
            "train_accuracy": 1 - 1 / (e + 1),
            "val_accuracy": None if e == 1 else 0.8,
        }
        for e in range(1, 6)
    ]
    fig = P.plot_training_curves(records)
    loss_ax, acc_ax = data_axes(fig)
    assert [ln.get_label() for ln in loss_ax.get_lines()] == ["train", "val"]
    assert len(acc_ax.get_lines()[1].get_xdata()) == 4  # the None epoch is skipped
    save(fig, tmp_path, "curves")
    nested = {"train": {"loss": [1, 0.5], "acc": [0.5, 0.9]}, "test": {"loss": [1, 0.6]}}
    assert len(data_axes(P.plot_training_curves(nested))) == 2
    with pytest.raises(ValueError, match="history"):
        P.plot_training_curves({"epoch": [1, 2], "lr": [0.1, 0.1]})


def test_weight_histograms(tmp_path):
    rng = np.random.default_rng(5)
    snaps = rng.normal(size=(12, 300))
    fig = P.plot_weight_histograms(snaps, steps=np.arange(12) * 50)
    assert len(data_axes(fig)) == 1 and len(fig.axes) == 2
    fig2 = P.plot_weight_histograms({"a": snaps, "b": snaps * 3}, bins=20)
    assert len(data_axes(fig2)) == 2
    save(fig2, tmp_path, "weights")
    with pytest.raises(ValueError, match="steps"):
        P.plot_weight_histograms(snaps, steps=np.arange(3))


def test_accuracy_by_length_marks_training_boundary(tmp_path):
    one = {L: {"n": 50, "accuracy": 1.0 if L <= 16 else 0.7} for L in range(2, 41, 2)}
    fig = P.plot_accuracy_by_length(one, train_max_length=16, label="bidirectional")
    ax = data_axes(fig)[0]
    assert len(data_axes(fig)) == 1
    assert any(list(ln.get_xdata()) == [16, 16] for ln in ax.get_lines())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "bidirectional" in labels and any("out of distribution" in t for t in labels)
    save(fig, tmp_path, "by_length")
    two = P.plot_accuracy_by_length(
        [{2: 1.0, 4: 0.9}, {"length": [2, 4], "accuracy": [1, 1]}], label=["a", "b"]
    )
    labels = [t.get_text() for t in data_axes(two)[0].get_legend().get_texts()]
    assert labels == ["a", "b"]
    named = P.plot_accuracy_by_length({"x": {2: 1.0}, "y": {"2": 0.5}})
    assert len(data_axes(named)[0].get_lines()) == 3  # two runs + chance line


def test_confusion_by_kind_and_matrix(tmp_path):
    per_kind = {
        "positive": {"n": 100, "accuracy": 0.99},
        "random": {"n": 40, "accuracy": 1.0},
        "equal_counts": {"n": 60, "accuracy": 0.3},
    }
    fig = P.plot_confusion_by_kind(per_kind)
    ax = data_axes(fig)[0]
    assert len(data_axes(fig)) == 1
    assert ax.get_yticklabels()[0].get_text() == "positive"
    assert any("n=60" in t.get_text() for t in ax.texts)
    fig2 = P.plot_confusion_by_kind(per_kind, confusion=[[70, 30], [1, 99]])
    assert len(data_axes(fig2)) == 2
    save(fig2, tmp_path, "kinds")
    fig3 = P.plot_confusion_matrix([[70, 30], [1, 99]])
    assert len(data_axes(fig3)) == 1
    with pytest.raises(ValueError, match="2x2"):
        P.plot_confusion_matrix([[1, 2, 3]])


def test_word_counts_and_depth_profile(tmp_path):
    catalan = {0: 1, 2: 1, 4: 2, 6: 5, 8: 14}
    fig = P.plot_word_counts({1: catalan, 2: {n: c * 2 ** (n // 2) for n, c in catalan.items()}})
    ax = data_axes(fig)[0]
    assert ax.get_yscale() == "log" and len(ax.get_lines()) == 2
    huge = P.plot_word_counts({1: {4000: 10**1200, 4002: 10**1201}})
    assert "log10" in data_axes(huge)[0].get_ylabel()
    save(fig, tmp_path, "counts")
    fig = P.plot_depth_profile("([]{()})()", "()[]{}")
    ax = data_axes(fig)[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("([]{()})()")
    assert len(ax.patches) == 5  # one arc per matched pair
    assert np.array_equal(ax.get_lines()[0].get_ydata(), [0, 1, 2, 1, 2, 3, 2, 1, 0, 1, 0])
    save(fig, tmp_path, "depth")
    bad = P.plot_depth_profile("(]()", "()[]")
    assert len(data_axes(bad)[0].patches) == 1
    with pytest.raises(ValueError, match="alphabet"):
        P.plot_depth_profile("(x)", "()")


def test_style_does_not_leak():
    before = dict(matplotlib.rcParams)
    P.plot_depth_profile("()", "()")
    assert dict(matplotlib.rcParams) == before
