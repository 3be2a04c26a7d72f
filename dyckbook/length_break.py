"""Why a Dyck-1 model breaks beyond its training lengths: the violation's position, or the
string's length? An intervention on the input tells the two apart.

Take a far negative of length 2N (a *core*: its running count dips below zero far from both
ends) and a uniform Dyck-1 word of length m (a *pad*), and concatenate:

- ``core + pad`` (*after*): the dip stays where it was, the string grows by m;
- ``pad + core`` (*before*): the dip moves m symbols later, the string grows alike.

Both are non-members with the core's one dip; the core's matched member, padded the same ways, is
the member control (:func:`padded_sets` checks every string against the language). Hypotheses:

- **position** (the running count is diluted): a causal model reads the count as a share of the
  prefix (as the hand-set counter does, depth / (t + 1)), so a dip at a late position t moves it
  by 1 / (t + 1), below what training at lengths <= N calibrated. *Before* breaks as m grows,
  *after* does not.
- **length**: the model fails with the string's length whatever the dip's position (the flag is
  lost on its way to the readout, or long members are rejected): *after* and *before* break alike.

:func:`verdict` applies the rule (:data:`RULE`) to one model on the balanced accuracy b (the mean
of the share of members kept and of negatives rejected; 0.5 is chance), b0 that of the unpadded
cores: a model whose b0 < ``solves`` does not solve the cores; otherwise, at the largest m,
``position`` when b0 - b(before) >= ``breaks`` and b0 - b(after) <= ``holds``, ``length`` when
both drops are >= ``breaks``, ``holds`` when both are <= ``holds``, else ``mixed``.
``benchmarks/bench_length_break.py`` trains the models and writes the results this module's
rows and sentence display.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dyckbook import tokenizer
from dyckbook.languages import Dyck
from dyckbook.negatives import sample_minimal_pairs

__all__ = ["CONDITIONS", "RULE", "VERDICTS", "balanced", "padded_sets", "rows", "scores",
           "sentence", "verdict"]

RULE = {"solves": 0.8, "breaks": 0.2, "holds": 0.1}  # stated before any model was scored
VERDICTS = ("position", "length", "holds", "mixed", "does not solve the cores")
CONDITIONS = ("negatives after", "negatives before", "members after", "members before")
Sets = dict[str, dict[int, tuple[np.ndarray, np.ndarray, int]]]


def padded_sets(n_items: int, core_length: int, pads: Sequence[int], seed: int) -> Sets:
    """``{condition: {m: (codes, lengths, label)}}`` (:data:`CONDITIONS`): ``n_items`` far
    negatives of ``core_length`` and their matched members, each padded after and before with a
    fresh uniform word of every length m in ``pads`` (m = 0: the cores themselves).

    Raises:
        ValueError: ``pads`` not increasing even lengths from 0, or ``n_items`` < 1.
        AssertionError: a padded string whose membership is not its label's (a bug).
    """
    pads = list(pads)
    if not pads or pads[0] != 0 or pads != sorted(set(pads)) or any(p % 2 for p in pads):
        raise ValueError(f"pads must be increasing even lengths from 0, got {pads!r}")
    if n_items < 1:
        raise ValueError(f"n_items must be >= 1, got {n_items!r}")
    rng, dyck = np.random.default_rng(seed), Dyck(1)
    members, negatives, _ = sample_minimal_pairs(dyck, rng, [core_length] * n_items, "far")
    out: Sets = {c: {} for c in CONDITIONS}
    for m in pads:
        pad, _ = dyck.sample_codes(rng, [m] * n_items)
        total = np.full(n_items, core_length + m)
        for core, label, name in ((negatives, 0, "negatives"), (members, 1, "members")):
            for side, parts in (("after", (core, pad)), ("before", (pad, core))):
                codes = np.concatenate(parts, axis=1)
                if not (dyck.is_member((codes, total)) == bool(label)).all():
                    raise AssertionError(f"{name} {side} m={m}: membership changed")
                out[f"{name} {side}"][m] = (codes, total, label)
    return out


@torch.no_grad()
def scores(model: Any, sets: Sets, width: int, batch: int = 100) -> dict[str, dict[str, float]]:
    """``{condition: {str(m): accuracy}}`` of a single-model classifier on :func:`padded_sets`
    (strings encoded at ``width``, the model's ``n_ctx``)."""
    model.eval()
    out: dict[str, dict[str, float]] = {}
    for condition, by_pad in sets.items():
        for m, (codes, lengths, label) in by_pad.items():
            right = 0
            for i in range(0, len(lengths), batch):
                tokens = tokenizer.encode(codes[i:i + batch], lengths[i:i + batch], width)
                right += int((model(tokens).argmax(-1) == label).sum())
            out.setdefault(condition, {})[str(m)] = round(right / len(lengths), 4)
    return out


def balanced(scores: Mapping[str, Mapping[str, float]], side: str, m: int) -> float:
    """The balanced accuracy of one side (``after`` / ``before``) at pad length m."""
    return (scores[f"members {side}"][str(m)] + scores[f"negatives {side}"][str(m)]) / 2


def verdict(scores: Mapping[str, Mapping[str, float]], pads: Sequence[int]) -> str:
    """The module docstring's rule (:data:`RULE`) on one model's :func:`scores`."""
    b0 = balanced(scores, "after", pads[0])
    if b0 < RULE["solves"]:
        return "does not solve the cores"
    after = b0 - balanced(scores, "after", pads[-1])
    before = b0 - balanced(scores, "before", pads[-1])
    if before >= RULE["breaks"] and after <= RULE["holds"]:
        return "position"
    if before >= RULE["breaks"] and after >= RULE["breaks"]:
        return "length"
    if before <= RULE["holds"] and after <= RULE["holds"]:
        return "holds"
    return "mixed"


def rows(tasks: Mapping[str, Sequence[Mapping[str, Any]]], pads: Sequence[int]
         ) -> list[dict[str, Any]]:
    """One display row per configuration and seed (``tasks``: ``{configuration: [{"seed",
    "scores"}, ...]}``): the verdict, the balanced accuracy unpadded and at the largest pad on
    each side, and members kept / negatives rejected apart."""
    top = pads[-1]
    out = []
    for label, per_seed in tasks.items():
        for t in per_seed:
            s = t["scores"]
            row = {"configuration": label, "seed": t["seed"], "verdict": verdict(s, pads),
                   "balanced, unpadded": f"{balanced(s, 'after', 0):.2f}"}
            for side in ("after", "before"):
                row[f"balanced, padded {side}"] = f"{balanced(s, side, top):.2f}"
                row[f"members kept / negatives rejected, {side}"] = (
                    f"{s[f'members {side}'][str(top)]:.2f} / "
                    f"{s[f'negatives {side}'][str(top)]:.2f}")
            out.append(row)
    return out


def sentence(tasks: Mapping[str, Sequence[Mapping[str, Any]]], pads: Sequence[int]) -> str:
    """The verdicts counted per configuration, every seed counted."""
    parts, members_side, n_length = [], 0, 0
    top = str(pads[-1])
    for label, per_seed in tasks.items():
        found = [verdict(t["scores"], pads) for t in per_seed]
        counts = ", ".join(f"{found.count(v)} {v}" for v in VERDICTS if found.count(v))
        parts.append(f"`{label}`: {counts} (of {len(found)} seeds)")
        for t, v in zip(per_seed, found):
            if v == "length":
                s = t["scores"]
                n_length += 1
                members_side += all(s[f"members {side}"][top] < s[f"negatives {side}"][top]
                                    for side in ("after", "before"))
    text = "By the rule stated beforehand: " + "; ".join(parts) + "."
    if n_length:
        verb = "does" if members_side == 1 else "do"
        text += (f" Of the {n_length} seeds that break with the length, {members_side} {verb} so "
                 f"by rejecting the padded members on both sides (they keep rejecting more of "
                 f"the negatives than they accept of the members).")
    return text
