"""Design study for issue 50: can any layout of the ``stack`` exchange defeat a max-pooled CNN
whose receptive field is the span W, at the book's lengths? Idealised sets, not the book's.

Every layout starts from uniform Dyck-k words of the bin, picks a structural triple (pairs A
before B at one depth, a common ancestor X), then types every pair afresh: i.i.d. uniform, but
A = a, B = b != a, X = b. The negative exchanges A's and B's closers (``X( A(..] B[..) )``, as
``negatives._stack``); no counter, height tally or window of W sees it. Fresh types remove any
selection effect, so whatever a rule finds is the layout's own.

Layouts (W of a length n):

- ``retyped``, W = ceil(n / 3), A and B span >= W: the member is the word with B retyped to a
  (the book's sets). All near type relations match the negative's; the far ones do not: in the
  member the junction ``)(`` between A and B has A's type, in the negative X's.
- ``source``, W = ceil(n / 3): the member is the typed word itself. Per (height, symbol) counts
  match the negative's, but the junction shows two types in the member and one in the negative.
- ``spread``, W = ceil(n / 6): the member is the typed word, and A, the gap between A and B, B,
  and B's closer to X's closer each span >= W. Every relation that differs is then >= W apart,
  and the long closers' types form the same multiset in both classes. This needs about 4W
  symbols, so it cannot exist at W >= n / 3.

Rules: the CNN and the dilated CNN (``adversary.CNN``) with receptive field W of the bin's
shortest length, the MLP on (height, symbol) counts, the height statistics, skip-grams with gaps
up to W - 1 (a reach of W symbols, as the window's) and the exact window at W; for ``spread``
also skip-grams and the window at ceil(n / 3).

    python benchmarks/bench_stack_layouts.py [--n 3000] [--ks 2 3] [--out FILE]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np
import table

from dyckbook.data.languages import Dyck
from dyckbook.rules import adversary as A
from dyckbook.rules import baselines as B

LAYOUTS = {"retyped": 3, "source": 3, "spread": 6}  # layout -> W = ceil(n / this)
BIN = (30, 36)
TARGET = 0.55


def span(layout: str, n: int) -> int:
    return max(4, math.ceil(n / LAYOUTS[layout]))


def _triples(s: np.ndarray, partner: np.ndarray, depth: np.ndarray, w: int, spread: bool):
    """Every (A, B, [X...]) of one word: openers of A before B at one depth, both spanning >= w
    symbols, and the common ancestors X (``spread``: A's closer >= w before B, X's closer >= w
    after B's)."""
    openers = np.flatnonzero(s % 2 == 0)
    out = []
    for a in openers:
        if partner[a] - a < w:
            continue
        for b in openers[openers > partner[a]]:
            if depth[b] != depth[a] or partner[b] - b < w or (spread and b - partner[a] < w):
                continue
            xs = [x for x in openers[openers < a] if partner[x] > partner[b]
                  and (not spread or partner[x] - partner[b] >= w)]
            if xs:
                out.append((a, b, xs))
    return out


def sample(language: Dyck, layout: str, n_pairs: int, rng: np.random.Generator):
    """``(codes, lengths, labels)``: ``n_pairs`` members, then their negatives."""
    k, lo, hi = language.k, *BIN
    members, negatives, lengths = [], [], []
    while len(lengths) < n_pairs:
        drawn = rng.choice(np.arange(lo, hi + 1, 2), 2000)
        codes, _ = language.sample_codes(rng, drawn)
        partners, heights = language.matching(codes, drawn), language.heights(codes, drawn)
        for row, n in enumerate(drawn.tolist()):
            s, partner = codes[row, :n], partners[row, :n]
            found = _triples(s, partner, heights[row, :n] - 1, span(layout, n),
                             layout == "spread")
            if not found:
                continue
            a, b, xs = found[rng.integers(len(found))]
            x = xs[rng.integers(len(xs))]
            types = rng.integers(k, size=n)
            types[a] = rng.integers(k)
            types[b] = types[x] = (types[a] + 1 + rng.integers(k - 1)) % k
            word = s.copy()
            for o in np.flatnonzero(s % 2 == 0):
                word[o], word[partner[o]] = 2 * types[o], 2 * types[o] + 1
            negative = word.copy()
            negative[partner[a]], negative[partner[b]] = word[partner[b]], word[partner[a]]
            if layout == "retyped":
                word[b], word[partner[b]] = word[a], word[partner[a]]
            members.append(word)
            negatives.append(negative)
            lengths.append(n)
            if len(lengths) == n_pairs:
                break
    out = np.full((2 * n_pairs, hi), 255, dtype=np.uint8)
    for i, (m, neg) in enumerate(zip(members, negatives)):
        out[i, : m.size], out[n_pairs + i, : neg.size] = m, neg
    labels = np.r_[np.ones(n_pairs, bool), np.zeros(n_pairs, bool)]
    return out, np.r_[lengths, lengths].astype(np.int64), labels


def rules(language: Dyck, layout: str) -> dict[str, B.Baseline]:
    w = span(layout, BIN[0])
    # a reach of W symbols: windows of W, skip-gram gaps up to W - 1
    at_w = lambda n: span(layout, n)  # noqa: E731 - the rules take a length -> reach callable
    gap_w = lambda n: span(layout, n) - 1  # noqa: E731
    out = {"cnn": A.CNN(language, width=w), "cnn_dilated": A.CNN(language, width=w, dilated=True),
           "height_mlp": A.HeightCountsMLP(language), "height_stats": A.HeightStats(language),
           "skipgrams": A.SkipGrams(language, gap_w), "window_span": A.WindowSpan(language, at_w)}
    if layout == "spread":  # what a reach of n / 3 sees on it
        third = lambda n: max(4, math.ceil(n / 3))  # noqa: E731
        out["skipgrams_n/3"] = A.SkipGrams(language, lambda n: third(n) - 1)
        out["window_n/3"] = A.WindowSpan(language, third)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=3000, help="members (and negatives) per sample")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=table.RESULTS / "stack_layouts.json")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    raw: dict = {"n": args.n, "seed": args.seed, "bin": list(BIN), "target": TARGET,
                 "spans": {layout: f"ceil(n / {d})" for layout, d in LAYOUTS.items()},
                 "balanced_accuracy": {}}
    rows = []
    for k in args.ks:
        language = Dyck(k)
        for layout in LAYOUTS:
            rng = np.random.default_rng(args.seed)
            train, test = sample(language, layout, args.n, rng), sample(language, layout, args.n,
                                                                        rng)
            assert language.is_member((test[0][test[2]], test[1][test[2]])).all()
            assert not language.is_member((test[0][~test[2]], test[1][~test[2]])).any()
            scores = {}
            for name, rule in rules(language, layout).items():
                with A._threads():
                    rule.fit(*train)
                scores[name] = round(B.balanced_accuracy(rule.predict(test[0], test[1]),
                                                         test[2]), 4)
            raw["balanced_accuracy"][f"{language.name} {layout}"] = scores
            at_w = {name: v for name, v in scores.items() if not name.endswith("n/3")}
            worst = max((v, name) for name, v in at_w.items())
            rows.append(table.row("stack layouts (design study)",
                                  f"{language.name} {layout} (W = ceil(n / {LAYOUTS[layout]})): "
                                  f"strongest rule of reach W ({worst[1]})", worst[0],
                                  target=f"<= {TARGET}", lower_is_better=True))
            print(f"{language.name} {layout:8s} " + " ".join(f"{name} {v:.3f}"
                                                             for name, v in scores.items()),
                  flush=True)
    print(table.save_or_write(args.out, "stack_layouts", rows, raw, load, "full"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
