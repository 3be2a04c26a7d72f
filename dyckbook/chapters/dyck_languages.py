"""The page on Dyck languages (book/dyck_languages): how many words there are, their depth
profiles, and the adversary's tables: on the hard and long-range sets, and on the spread sets at
and beyond the stack sets' lengths."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Arc

from dyckbook.chapters.figure_style import PALETTE, new_panel, style_context
from dyckbook.chapters.page import pct
from dyckbook.data.dataset import Dataset
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import spread_window
from dyckbook.data.protocol import regime_lengths
from dyckbook.interp.probes import prefix_targets
from dyckbook.rules import adversary

Table = dict[str, dict[str, float]]  # the adversary on one set: {rule: {length bin or "all": acc}}
GROWING = "window_span"  # the rule whose window is ceil(n / 3) at every length: it grows with n


def plot_oracle(tables: Mapping[str, Mapping[str, Mapping[str, float]]], bar: float,
                title: str | None = None) -> Figure:
    """The oracle (``baselines.attack``): every stack-free rule's balanced accuracy on a fresh
    sample of each test set, a bar per set rising from one half, the bar the long-range sets
    must stay under dotted.

    Args:
        tables: ``{set: {rule: {"all": balanced accuracy, ...}}}``; a rule a set lacks (a
            recogniser of that language) leaves a gap.
        bar: the long-range sets' bar (``baselines.ORACLE_BAR``).

    Returns:
        A Figure with one panel, the rules along the x axis.
    """
    rules = list(dict.fromkeys(rule for table in tables.values() for rule in table))
    colours = [PALETTE[i] for i in (3, 1, 5, 0, 2, 4, 7)]
    with style_context():
        fig, ax = new_panel((10.0, 3.8), title)
        x, width = np.arange(len(rules)), 0.8 / max(len(tables), 1)
        for i, (label, table) in enumerate(tables.items()):
            acc = np.array([table[r]["all"] if r in table else np.nan for r in rules])
            ax.bar(x + (i - (len(tables) - 1) / 2) * width, acc - 0.5, width, bottom=0.5,
                   label=label, color=colours[i % len(colours)])
        ax.axhline(0.5, color="0.2", lw=1)
        ax.axhline(bar, color="0.4", lw=1, ls=":",
                   label=f"bar of the long-range sets ({100 * bar:.0f}%)")
        ax.set_xticks(x, rules, rotation=35, ha="right")
        ax.set(ylabel="balanced accuracy (fresh sample)", ylim=(0.4, 1.02))
        ax.legend(ncols=3, fontsize=8, loc="upper left")
    return fig


def plot_word_counts(counts_by_k: Mapping[int, Mapping[int, int]],
                     title: str | None = None) -> Figure:
    """Number of Dyck-k words of every length, log scale (integers of any size).

    Args:
        counts_by_k: ``{k: {length: count}}``, e.g. from ``Dyck(k).count``.

    Returns:
        A Figure with one panel.
    """
    if not counts_by_k:
        raise ValueError("counts_by_k must hold at least one k, got none")
    # log10 of Python ints: exact for counts far beyond float range
    logs = {k: sorted((n, math.log10(c)) for n, c in d.items() if c > 0)
            for k, d in counts_by_k.items()}
    exponent = max(v for d in logs.values() for _, v in d) > 300  # beyond float64
    with style_context():
        fig, ax = new_panel((6.5, 3.8), title)
        for k in sorted(logs):
            n, v = np.array(logs[k]).T
            ax.plot(n, v if exponent else 10.0 ** v, marker="o" if n.size <= 40 else None,
                    ms=3, label=f"Dyck-{k}")
        ax.set(xlabel="string length", ylabel="log10(number of words)" if exponent
               else "number of words (log scale)", yscale="linear" if exponent else "log")
        ax.grid(True)
        ax.legend()
    return fig


def plot_depth_profile(string: str, language: Dyck, title: str | None = None) -> Figure:
    """A string's height after every symbol as a mountain, each matched pair as an arc below
    (coloured by type); in a non-member, a red cross marks the first symbol after which no
    completion is a member.

    Returns:
        A Figure with one panel.
    """
    one = Dataset.from_strings(language, [string])
    n = len(string)
    height = np.r_[0, language.heights(one.codes, one.lengths)[0]].astype(int)
    partner = language.matching(one.codes, one.lengths)[0]
    _, balanced = prefix_targets(one)
    top, bottom = max(int(height.max()), 1), min(int(height.min()), 0)
    arc = 0.45 * top if (partner >= 0).any() else 0.0
    with style_context():
        fig, ax = new_panel((float(np.clip(0.3 * n + 1.5, 6, 16)), 3.0 + 0.1 * top),
                         title or (f"A {n}-symbol member of {language.name}" if one.labels[0]
                                   else f"A non-member of {language.name}"))
        ax.plot(np.arange(n + 1), height, color="0.2", marker="o", ms=3, zorder=3)
        ax.fill_between(np.arange(n + 1), height, 0, color=PALETTE[5], alpha=0.15, lw=0)
        ax.axhline(0, color="0.4", lw=0.8)
        widest = max(int((partner - np.arange(n)).max(initial=1)), 1)
        for i in np.flatnonzero(partner > np.arange(n)):
            width = float(partner[i] - i)
            ax.add_patch(Arc(((i + partner[i]) / 2 + 0.5, 0), width,
                             2 * arc * (0.25 + 0.75 * width / widest), theta1=180, theta2=360,
                             color=PALETTE[(one.codes[0, i] >> 1) % len(PALETTE)], lw=1.3))
        if not balanced.all():
            i = int(np.argmin(balanced[0]))
            ax.plot(i + 0.5, (height[i] + height[i + 1]) / 2, marker="x", color="red", ms=9,
                    mew=2.2, zorder=4)
        ax.set_xticks(np.arange(n) + 0.5, list(string), fontfamily="DejaVu Sans Mono",
                      fontsize=float(np.clip(260 / max(n, 1), 7, 12)))
        ax.tick_params(axis="x", length=0)
        ax.set(xlim=(-0.3, n + 0.3), ylim=(min(bottom, -arc) - 0.2, top + 0.4), ylabel="height",
               yticks=np.arange(bottom, top + 1, max(1, (top - bottom) // 6)))
        ax.spines["bottom"].set_visible(False)
    return fig


_LAYOUT_NAMES = {"retyped": "the book's (retyped member)", "source": "the word as member",
                 "spread": "spread"}


def layout_rows(layouts: Mapping[str, object]) -> list[dict[str, str]]:
    """The design study's table (``bench_stack_layouts.py``'s raw results): one row per
    language and layout, each rule's balanced accuracy ("—" where a rule was not run)."""
    spans, table = layouts["spans"], layouts["balanced_accuracy"]  # type: ignore[index]
    rules = list(dict.fromkeys(rule for scores in table.values() for rule in scores))
    rows = []
    for key, scores in table.items():
        language, layout = key.rsplit(" ", 1)
        rows.append({"set": language, "layout": _LAYOUT_NAMES.get(layout, layout),
                     "W": spans[layout].replace("ceil(", "⌈").replace(")", "⌉").replace(" ", ""),
                     **{rule.replace("_n/3", " at n/3").replace("window_span", "window W"):
                        f"{100 * scores[rule]:.1f}%" if rule in scores else "—"
                        for rule in rules}})
    return rows


def layout_sentence(layouts: Mapping[str, object]) -> str:
    """What the study says: the strongest rule of reach W per layout."""
    worst: dict[str, float] = {}
    for key, scores in layouts["balanced_accuracy"].items():  # type: ignore[index]
        layout = key.rsplit(" ", 1)[1]
        at_w = [v for rule, v in scores.items() if not rule.endswith("n/3")]
        worst[layout] = max(worst.get(layout, 0.0), max(at_w))
    third = [v for scores in layouts["balanced_accuracy"].values()  # type: ignore[index]
             for rule, v in scores.items() if rule.endswith("n/3")]
    book, source = (100 * worst.get(name, math.nan) for name in ("retyped", "source"))
    text = (f"The strongest rule of reach $W$ scores up to {book:.1f}% "
            f"on the book's layout and {source:.1f}% with the word as "
            f"member, both at $W = \\lceil n/3 \\rceil$; on the spread layout no rule of reach $W$ "
            f"passes {100 * worst.get('spread', math.nan):.1f}%")
    if third:
        text += (f", but rules that read $n/3$ symbols reach {100 * max(third):.1f}% on it, as its "
                 f"$W$ is only about $n/6$")
    return (text + ". So at these lengths a set can defeat every rule of reach $W$ only with "
            "$W$ well below $n/3$; with $W = n/3$ it holds against the exact checks, the tallies "
            "and the counted models, not against a pooled CNN.")


# --- the adversary's tables ---------------------------------------------------------------------

def length_bins(lengths: Sequence[int], n_bins: int) -> list[tuple[int, int]]:
    """``lengths`` (sorted) cut into ``n_bins`` runs of near-equal size, each as its (shortest,
    longest); fewer where there are fewer lengths than bins."""
    return [(int(b[0]), int(b[-1])) for b in np.array_split(np.array(lengths), n_bins) if b.size]


def attack_sets(sets: Mapping[str, tuple[Dyck, str, Sequence[int]]], rules: Sequence[str],
                n: int, seed: int, n_bins: int, window: int
                ) -> tuple[dict[str, Table], dict[str, list[str]]]:
    """The adversary (``adversary.attack_regime``, ``n`` strings a class, from ``seed``) on each
    set ``{label: (language, regime, lengths)}``: its table and its cells (the length bins as
    "lo-hi", then "all"). ``edit_knn`` is left out of a set with strings longer than it reads
    (``adversary.EDIT_KNN_LONGEST``)."""
    tables, cells = {}, {}
    for label, (language, regime, lengths) in sets.items():
        bins = length_bins(lengths, n_bins)
        names = [r for r in rules if r != "edit_knn" or max(lengths) <= adversary.EDIT_KNN_LONGEST]
        tables[label] = adversary.attack_regime(language, regime, lengths, n, seed, bins, window,
                                                names=names)
        cells[label] = [f"{lo}-{hi}" for lo, hi in bins] + ["all"]
    return tables, cells


def shown(cell: str) -> str:
    """A bin "lo-hi" as "lo–hi" (or "lo" when lo = hi); "all" as is."""
    lo, _, hi = cell.partition("-")
    return cell if not hi else lo if lo == hi else f"{lo}–{hi}"


def oracle_rows(tables: Mapping[str, Table], cells: Mapping[str, Sequence[str]],
                rules: Sequence[str]) -> list[dict[str, str]]:
    """One row per set and length bin (then its pool): every rule's balanced accuracy, "—"
    where the rule was not run on that set."""
    return [{"set": label, "lengths": shown(cell),
             **{rule: pct(tables[label][rule][cell]) if rule in tables[label] else "—"
                for rule in rules}}
            for label in tables for cell in cells[label]]


def spread_sets(ks: Sequence[int], multiples: Sequence[int], shortest: int, longest: int
                ) -> dict[str, tuple[Dyck, str, list[int]]]:
    """The spread sets: for each k and multiple m of the stack sets' lengths, Dyck-k's spread
    lengths in [``shortest``, ``longest``] (m = 1) or in ((m/2)·longest, m·longest] (m > 1)."""
    sets = {}
    for k in ks:
        for m in multiples:
            lo, hi = (shortest, longest) if m == 1 else ((m // 2) * longest + 2, m * longest)
            sets[f"Dyck-{k} spread {m}×"] = (Dyck(k), "spread",
                                            regime_lengths(Dyck(k), "spread", lo, hi))
    return sets


def spread_sentence(label: str, table: Table, lengths: Sequence[int], bar: float) -> str:
    """The strongest rule other than the growing window on one spread set, and every rule above
    the long-range sets' ``bar`` there."""
    fixed = {r: row for r, row in table.items() if r != GROWING}
    rule, row = max(fixed.items(), key=lambda kv: max(kv[1].values()))
    above = sorted(r for r, row in fixed.items() if max(row.values()) > bar)
    return (f"on {label} (lengths {min(lengths)}–{max(lengths)}, W = "
            f"{spread_window(min(lengths))}–{spread_window(max(lengths))}) the strongest rule "
            f"other than `{GROWING}` is `{rule}`, {pct(max(row.values()))} in its best bin "
            f"({pct(row['all'])} pooled); "
            + (f"above the bar ({pct(bar, 0)}): " + ", ".join(f"`{r}`" for r in above)
               if above else f"no other rule is above the bar ({pct(bar, 0)})"))


def spread_summary(tables: Mapping[str, Table], sets: Mapping[str, tuple[Dyck, str, Sequence[int]]],
                   bar: float) -> str:
    """What the spread sets resist: a :func:`spread_sentence` per set, why the growing window
    is no test of them, and which fixed-reach rules stay above ``bar`` beyond the 1× lengths."""
    beyond = [label for label in tables if not label.endswith(" 1×")]
    beyond_above = sorted({r for label in beyond for r, row in tables[label].items()
                           if r != GROWING and max(row.values()) > bar})
    text = ("Measured: " + "; ".join(spread_sentence(label, tables[label], sets[label][2], bar)
                                     for label in tables) + ". "
            f"`{GROWING}` checks every window of $\\lceil n/3 \\rceil$ symbols, twice the spread "
            "set's $W$: its reach grows with the string, so it holds both ends of each exchanged "
            "pair, and the spread sets are no test against a rule whose reach scales with the "
            "length. A rule of fixed reach can see a spread negative only where the set's $W$ is "
            "below its reach")
    if not beyond:
        return text + "."
    return text + (". Beyond the stack sets' lengths, where $W$ outgrows every fixed reach, "
                   + (f"no rule other than `{GROWING}` is above the bar." if not beyond_above else
                      "these rules are still above the bar: "
                      + ", ".join(f"`{r}`" for r in beyond_above) + "."))
