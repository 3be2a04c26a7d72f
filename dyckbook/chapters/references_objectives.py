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

**Inside the model** (stated 2026-11-26, before any patched number): if a seed breaks by
position because layer 0 dilutes the count, layer 0's output at the dip carries the loss. Take
a *before* negative at the largest m and replace layer 0's output (``blocks.0.hook_resid_post``,
what layer 1 reads) at its dip positions (core depth < 0) with the same positions' vectors from
the unpadded core's own run, where the dip is early (:func:`patch_scores`). Controls: the same
number of the core's other positions (depth >= 0) patched alike, and the matched members patched
at the negatives' dip positions from their own unpadded run (they must stay accepted); the whole
core span patched is shown beside. With r the share of negatives rejected and recovered(x) =
(r(x) - r(padded)) / (r(core) - r(padded)), :func:`patch_verdict` (:data:`PATCH_RULE`) says
``the dips carry it`` when recovered(dips) >= ``carries``, recovered(other positions) <=
``control`` and the members kept fall by at most ``members``; ``not specific`` when the dips
recover but a control fails; ``the core carries it`` when only the whole core recovers
(>= ``carries``); ``not in layer 0`` when even the whole core recovers <= ``control``;
``partial`` otherwise; ``nothing to recover`` when the padding cost under ``breaks``; ``does
not solve the cores`` as in :func:`verdict`.

**Positions matched** (stated 2026-11-27, before any number of it). Under randomized positions
the patched vectors above also carry the positions the core's own run gave them, so a patch that
does not recover says nothing. Rerun the core with the padded string's positional encodings
(``hook_pos_embed``: the start keeps its own, core token j >= 1 takes the padded string's token
m + j): its dip then sits at a late position index with no pad before it
(``move_positions=True`` in :func:`patch_scores`). Hypothesis: a randomized-position model,
trained on indices drawn up to ``n_positions``, is not broken by the indices but by the pad's
symbols before the dip. With s = (r(core) - r(core, positions moved)) / (r(core) - r(padded)),
the share of the break that moving the positions alone reproduces, :func:`moved_verdict`
(:data:`MOVED_RULE`) says ``the positions break it`` when s >= ``positions``, ``the pad's
symbols break it`` when s <= ``symbols``, ``both`` otherwise (``nothing to recover`` and ``does
not solve the cores`` as above); :func:`patch_verdict` then judges the patches taken from the
moved run. Predicted for the randomized-position seeds that break by position: the pad's symbols
break it, and the dips carry it. A model with no positional vectors (NoPE, RoPE, ALiBi) has
nothing to move: its moved scores equal the plain ones (a check).

**Members and negatives together** (stated 2026-11-27 after seeds 100-107's numbers, which it
was computed on; fresh seeds 108-110 are its test). The rule above reads the negatives only, and
moving the positions alone made four of those eight seeds reject their members: "the pad's
symbols break it" then hid a model that rejects everything at late indices. ``moved_verdict(...,
read="balanced")`` applies the same thresholds to the balanced accuracy b (members kept and
negatives rejected averaged): s = (b(core) - b(core, positions moved)) / (b(core) - b(padded))
(``nothing to recover`` also when that denominator is not positive). On seeds 100-107 it gives 2
the positions, 3 both, 2 the pad's symbols, 1 does not solve. Predicted for the fresh seeds: the
positions or both in at least 2 of 3.

**The mean readout** (stated 2026-11-27 after the positions-matched numbers of seeds 100-102,
before any number of it; fresh seeds are its test). A mean-readout model averages its last layer
over every token, the pad's too, so a flag written at the core's tokens is diluted by the pad's
length. Score the padded *before* strings with the average over the core's tokens only (core
symbols and ``[end]``) and, as a control, over as many of the start and pad tokens (they come
before the dip and never see it) (:func:`readout_scores`). :func:`readout_verdict`
(:data:`READOUT_RULE`): ``the average carries it`` when recovered(core tokens) >= ``carries``,
recovered(pad tokens) <= ``control`` and the members kept over the core tokens fall by at most
``members``; ``not specific`` when the core tokens recover but a control fails; ``not the
readout`` when recovered(core tokens) <= ``control``; ``partial`` otherwise (``nothing to
recover`` and ``does not solve the cores`` as above). Predicted: in the mean-readout seeds that
the pad's symbols break outside layer 0, the average carries it.

**The last layer** (stated 2026-11-27 after the readout test's numbers, before any number of
this one; fresh seeds 108-110 are its test). The readout test changed what the classifier reads
(an average over fewer tokens than it was fitted to), so its "not specific" says nothing. This
test keeps the whole-string average: patch the last layer's output (:func:`last_layer`, what the
mean readout averages) at every core symbol of the padded *before* string with the vectors of
the core's own run, plain and with the positions moved (:func:`patch_scores` with ``hook``).
The mask is causal, so the start and pad tokens never see the core: their vectors are what any
string beginning with that pad gives. :func:`last_verdict` (:data:`LAST_RULE`): ``the core's
tokens carry it`` when recovered(whole core) >= ``carries`` and the members kept (patched
alike from their own run) fall by at most ``members`` (``not specific`` if they fall more): the
pad breaks the model through what the core's tokens compute (attention to the pad); ``the pad's
tokens in the average`` when recovered(whole core) <= ``control``: with the core's tokens as
unpadded, the pad's own vectors in the average still flip the verdict (dilution); ``partial``
otherwise (``nothing to recover`` and ``does not solve the cores`` as above). Predicted: in the
seeds the pad's symbols break (:func:`moved_verdict`), the patch from the positions-moved run
gives ``the pad's tokens in the average`` in most.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from dyckbook.chapters.page import plural
from dyckbook.data.languages import Dyck
from dyckbook.data.negatives import sample_minimal_pairs
from dyckbook.data.vocab import PAD
from dyckbook.nn import tokenizer
from dyckbook.nn.blocks import Recorder, evaluating

__all__ = ["CONDITIONS", "LAST_RULE", "LAST_VERDICTS", "LAYER0", "MOVED", "MOVED_READS",
           "MOVED_RULE",
           "MOVED_VERDICTS", "PATCHES", "PATCH_RULE", "PATCH_VERDICTS", "POSITIONS",
           "READOUT_RULE", "READOUT_VERDICTS", "RULE", "VERDICTS", "aligned_logits", "balanced",
           "last_layer", "last_rows", "last_sentence", "last_verdict", "moved_verdict",
           "padded_sets", "patch_rows", "patch_scores", "patch_sentence", "patch_verdict",
           "readout_logits", "readout_rows", "readout_scores", "readout_sentence",
           "readout_verdict", "rows", "scores", "sentence", "verdict"]

RULE = {"solves": 0.8, "breaks": 0.2, "holds": 0.1}  # stated before any model was scored
VERDICTS = ("position", "length", "holds", "mixed", "does not solve the cores")
CONDITIONS = ("negatives after", "negatives before", "members after", "members before")
PATCH_RULE = {"carries": 0.8, "control": 0.2, "members": 0.1}  # stated before any patch ran
PATCHES = ("dips", "other positions", "whole core")
PATCH_VERDICTS = ("the dips carry it", "not specific", "the core carries it", "partial",
                  "not in layer 0", "nothing to recover", "does not solve the cores")
LAYER0 = "blocks.0.hook_resid_post"  # layer 0's output: what layer 1 reads
MOVED_RULE = {"positions": 0.8, "symbols": 0.2}  # stated 2026-11-27 before any moved number
MOVED_VERDICTS = ("the positions break it", "the pad's symbols break it", "both",
                  "nothing to recover", "does not solve the cores")
MOVED_READS = ("negatives", "balanced")  # what moved_verdict reads (balanced: stated later)
POSITIONS = "hook_pos_embed"  # the positional vectors added to the embedding
READOUT_RULE = {"carries": 0.8, "control": 0.2, "members": 0.1}  # stated before any number
READOUT_VERDICTS = ("the average carries it", "not specific", "partial", "not the readout",
                    "nothing to recover", "does not solve the cores")
READOUTS = ("core tokens", "pad tokens")
LAST_RULE = {"carries": 0.8, "control": 0.2, "members": 0.1}  # stated before any number
LAST_VERDICTS = ("the core's tokens carry it", "not specific", "partial",
                 "the pad's tokens in the average", "nothing to recover",
                 "does not solve the cores")
MOVED = "core, positions moved"
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
        parts.append(f"`{label}`: {counts} (of {plural(len(found), 'seed')})")
        for t, v in zip(per_seed, found):
            if v == "length":
                s = t["scores"]
                n_length += 1
                members_side += all(s[f"members {side}"][top] < s[f"negatives {side}"][top]
                                    for side in ("after", "before"))
    text = "By the rule stated beforehand: " + "; ".join(parts) + "."
    if n_length:
        verb = "does" if members_side == 1 else "do"
        text += (f" Of the {plural(n_length, 'seed')} that break with the length, "
                 f"{members_side} {verb} so by rejecting the padded members on both sides (they "
                 f"keep rejecting more of the negatives than they accept of the members).")
    return text


class _AlignedPatch(Recorder):
    """Replaces one hook's vectors at ``(rows, positions)`` (token indices) with ``values``;
    records the hooks named in ``record``."""

    def __init__(self, hook: str, rows: np.ndarray, positions: np.ndarray,
                 values: torch.Tensor, record: Iterable[str] = ()) -> None:
        super().__init__(set(record))
        self.hook, self.rows, self.positions, self.values = hook, rows, positions, values
        self.done = False

    def replace(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if name != self.hook:
            return value
        value = value.clone()  # (S = 1, batch, pos, d_model)
        value[0, self.rows, self.positions] = self.values.to(value.dtype)
        self.done = True
        return value


def aligned_logits(model: Any, target: torch.Tensor, source: torch.Tensor, rows: np.ndarray,
                   target_positions: np.ndarray, source_positions: np.ndarray,
                   hook: str = LAYER0, source_patch: _AlignedPatch | None = None
                   ) -> torch.Tensor:
    """Logits (batch, 2) of ``target`` tokens with ``hook``'s vectors at ``(rows,
    target_positions)`` taken from ``source``'s run at ``(rows, source_positions)`` (token
    indices; the two token tensors may differ in their strings, not in their batch), in eval
    mode; the model's mode is restored. ``source_patch`` patches the source run (it must record
    ``hook``: :func:`_moved_positions`).

    Raises:
        ValueError: ``hook`` is not one the model records, or unequal index arrays.
    """
    if not len(rows) == len(target_positions) == len(source_positions):
        raise ValueError(f"rows, target_positions and source_positions must have one length, "
                         f"got {len(rows)}, {len(target_positions)}, {len(source_positions)}")
    with evaluating(model):
        _, cache = model.run_with_cache(source, source_patch or Recorder({hook}))
        if hook not in cache:
            raise ValueError(f"hook {hook!r} is not recorded by the model")
        patch = _AlignedPatch(hook, rows, target_positions, cache[hook][rows, source_positions])
        logits = model.run_with_cache(target, patch)[0]
    if not patch.done:
        raise ValueError(f"hook {hook!r} is not patchable in this model")
    return logits


def _patch_masks(codes: np.ndarray, lengths: np.ndarray, seed: int) -> dict[str, np.ndarray]:
    """:data:`PATCHES` as bool (batch, core length) masks over the negative cores' symbols."""
    depth = Dyck(1).heights(codes, lengths).astype(np.int64)
    inside = np.arange(codes.shape[1])[None, :] < lengths[:, None]
    dips = (depth < 0) & inside
    other = np.zeros_like(dips)
    rng = np.random.default_rng(seed)
    for i in range(len(codes)):
        candidates = np.flatnonzero(~dips[i] & inside[i])
        other[i, rng.choice(candidates, min(int(dips[i].sum()), len(candidates)),
                            replace=False)] = True
    return {"dips": dips, "other positions": other, "whole core": inside}


def _moved_positions(model: Any, core: torch.Tensor, padded: torch.Tensor, m: int, hook: str
                     ) -> _AlignedPatch | None:
    """A patch giving the core's tokens the padded string's positional vectors (start: its
    own; core token j >= 1: padded token m + j), recording ``hook``; None when the model adds
    no positional vectors (nothing to move)."""
    with evaluating(model):
        _, cache = model.run_with_cache(padded, {POSITIONS})
    if POSITIONS not in cache:
        return None
    rows, j = np.nonzero((core != PAD).numpy())
    source = np.where(j == 0, 0, j + m)
    return _AlignedPatch(POSITIONS, rows, j, cache[POSITIONS][rows, source], record={hook})


def patch_scores(model: Any, sets: Sets, m: int, width: int, seed: int, hook: str = LAYER0,
                 move_positions: bool = False) -> dict[str, dict[str, float]]:
    """The intervention of the module docstring on one model at pad length ``m``: ``{"negatives
    rejected" | "members kept": {"core" | "padded" | patch: share}}`` (:data:`PATCHES`), the
    *before* sets encoded at ``width`` (the model's ``n_ctx``); ``seed`` picks the control
    positions. Every patch takes ``hook``'s vectors at core symbol t from the unpadded core's
    run (token t + 1) into the padded string's (token m + t + 1). ``move_positions``: that run
    has the padded string's positions (:data:`MOVED` is then its own score too)."""
    if m not in sets["negatives before"] or m == 0:
        raise ValueError(f"m must be a nonzero pad length of the sets "
                         f"({sorted(sets['negatives before'])}), got {m!r}")
    core_codes, core_lengths, _ = sets["negatives before"][0]
    masks = _patch_masks(core_codes, core_lengths, seed)
    out: dict[str, dict[str, float]] = {}
    for name, label in (("negatives", 0), ("members", 1)):
        core, padded = sets[f"{name} before"][0], sets[f"{name} before"][m]
        core_tokens = tokenizer.encode(core[0], core[1], width)
        padded_tokens = tokenizer.encode(padded[0], padded[1], width)
        key = "negatives rejected" if label == 0 else "members kept"
        with evaluating(model):
            got = {"core": model(core_tokens), "padded": model(padded_tokens)}
        moved = (_moved_positions(model, core_tokens, padded_tokens, m, hook) if move_positions
                 else None)
        if move_positions:
            with evaluating(model):
                got[MOVED] = (got["core"] if moved is None
                              else model.run_with_cache(core_tokens, moved)[0])
        for patch, mask in masks.items():
            rows, t = np.nonzero(mask)
            got[patch] = aligned_logits(model, padded_tokens, core_tokens, rows, m + t + 1,
                                        t + 1, hook, moved)
        out[key] = {k: round(float((v.argmax(-1) == label).float().mean()), 4)
                    for k, v in got.items()}
    return out


def _recovered(patch: Mapping[str, Mapping[str, float]], which: str) -> float:
    r = patch["negatives rejected"]
    return (r[which] - r["padded"]) / (r["core"] - r["padded"])


def _untestable(scores: Mapping[str, Mapping[str, float]]) -> str | None:
    """The verdicts every rule gives first: the model does not solve the unpadded cores, or
    the padding cost it too little to recover; else None."""
    r, kept = scores["negatives rejected"], scores["members kept"]
    if (r["core"] + kept["core"]) / 2 < RULE["solves"]:
        return "does not solve the cores"
    return "nothing to recover" if r["core"] - r["padded"] < RULE["breaks"] else None


def _carries(scores: Mapping[str, Mapping[str, float]], tested: str, control: str,
             rule: Mapping[str, float]) -> bool | None:
    """None when ``tested`` recovers less than ``rule["carries"]``; else whether it does so
    specifically: ``control`` recovers at most ``rule["control"]`` and the members kept fall by
    at most ``rule["members"]``."""
    if _recovered(scores, tested) < rule["carries"]:
        return None
    kept = scores["members kept"]
    return (_recovered(scores, control) <= rule["control"]
            and kept["padded"] - kept[tested] <= rule["members"])


def patch_verdict(patch: Mapping[str, Mapping[str, float]]) -> str:
    """The module docstring's rule (:data:`PATCH_RULE`) on one model's :func:`patch_scores`."""
    if (early := _untestable(patch)) is not None:
        return early
    specific = _carries(patch, "dips", "other positions", PATCH_RULE)
    if specific is not None:
        return "the dips carry it" if specific else "not specific"
    whole = _recovered(patch, "whole core")
    if whole >= PATCH_RULE["carries"]:
        return "the core carries it"
    return "not in layer 0" if whole <= PATCH_RULE["control"] else "partial"


def moved_verdict(patch: Mapping[str, Mapping[str, float]], read: str = "negatives") -> str:
    """The module docstring's rule (:data:`MOVED_RULE`) on one model's :func:`patch_scores`
    with ``move_positions``, on the negatives rejected or (``read="balanced"``) the balanced
    accuracy."""
    if read not in MOVED_READS:
        raise ValueError(f"read must be one of {MOVED_READS}, got {read!r}")
    if (early := _untestable(patch)) is not None:
        return early
    r = patch["negatives rejected"]
    if read == "balanced":
        kept = patch["members kept"]
        r = {k: (r[k] + kept[k]) / 2 for k in ("core", MOVED, "padded")}
        if r["core"] - r["padded"] <= 0:
            return "nothing to recover"
    share = (r["core"] - r[MOVED]) / (r["core"] - r["padded"])  # the break moving reproduces
    if share >= MOVED_RULE["positions"]:
        return "the positions break it"
    return "the pad's symbols break it" if share <= MOVED_RULE["symbols"] else "both"


def _unmoved(per_seed: Sequence[Mapping[str, Any]]) -> bool:
    """Every seed's positions-moved scores are its plain patch's (the core's own at
    :data:`MOVED`): a configuration with no positional vectors, where nothing moves."""
    return all("patch" in t and t["patch_moved"][side] == {**t["patch"][side],
                                                           MOVED: t["patch"][side]["core"]}
               for t in per_seed for side in t["patch_moved"])


def patch_rows(tasks: Mapping[str, Sequence[Mapping[str, Any]]], key: str = "patch"
               ) -> list[dict[str, Any]]:
    """One display row per configuration and seed that has ``key`` (:func:`patch_scores`;
    ``patch_moved`` with ``move_positions``, where a configuration in which nothing moved has
    no rows): the verdict(s), the negatives rejected core / padded (/ the core at moved
    positions) / per patch, and the members kept."""
    out = []
    for label, per_seed in tasks.items():
        patched = [t for t in per_seed if key in t]
        if key == "patch_moved" and patched and _unmoved(patched):
            continue
        for t in patched:
            p = t[key]
            r, kept = p["negatives rejected"], p["members kept"]
            row = {"configuration": label, "seed": t["seed"], "verdict": patch_verdict(p)}
            if MOVED in r:
                row["positions moved"] = moved_verdict(p)
                row["positions moved, members too"] = moved_verdict(p, "balanced")
                row["negatives rejected, core / moved / padded"] = (
                    f"{r['core']:.2f} / {r[MOVED]:.2f} / {r['padded']:.2f}")
            else:
                row["negatives rejected, core / padded"] = f"{r['core']:.2f} / {r['padded']:.2f}"
            for patch in PATCHES:
                row[f"patched {patch}"] = f"{r[patch]:.2f}"
            if MOVED in kept:
                row["members kept, core / moved / padded / dips patched"] = " / ".join(
                    f"{kept[k]:.2f}" for k in ("core", MOVED, "padded", "dips"))
            else:
                row["members kept, padded / dips patched"] = (f"{kept['padded']:.2f} / "
                                                             f"{kept['dips']:.2f}")
            out.append(row)
    return out


def _counted(found: list[str], verdicts: Sequence[str]) -> str:
    return ", ".join(f"{found.count(v)} {v}" for v in verdicts if found.count(v))


def patch_sentence(tasks: Mapping[str, Sequence[Mapping[str, Any]]], key: str = "patch") -> str:
    """The patch verdicts counted per configuration, every patched seed counted (``key``
    ``patch_moved``: the positions-moved verdicts too)."""
    parts = []
    for label, per_seed in tasks.items():
        patched = [t[key] for t in per_seed if key in t]
        if not patched:
            continue
        if key == "patch_moved" and _unmoved([t for t in per_seed if key in t]):
            parts.append(f"`{label}`: no positional vectors, nothing moved (every score equals "
                         f"the plain patch's, as it must; {plural(len(patched), 'seed')})")
            continue
        text = f"`{label}`: "
        if key != "patch":
            text += _counted([moved_verdict(p) for p in patched], MOVED_VERDICTS) + "; patched, "
        text += _counted([patch_verdict(p) for p in patched], PATCH_VERDICTS)
        text += f" (of {plural(len(patched), 'seed')})"
        if key != "patch":  # an observation beside the rule, which reads the negatives only
            drop = sum(p["members kept"]["core"] - p["members kept"][MOVED] >= RULE["breaks"]
                       for p in patched)
            text += (f"; moving the positions alone drops the members kept by "
                     f"{RULE['breaks']} or more in {drop} of {len(patched)}; read on members "
                     f"and negatives together (a rule stated later), "
                     + _counted([moved_verdict(p, "balanced") for p in patched], MOVED_VERDICTS))
        parts.append(text)
    if not parts:
        return "No model was patched."
    what = ("Patching layer 0's output" if key == "patch" else
            "Moving the core to the padded string's positions, then patching from that run")
    return f"{what}, by the rule stated beforehand: " + "; ".join(parts) + "."


def readout_logits(model: Any, tokens: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Logits (batch, 2) of a single mean-readout classifier whose average runs over the
    tokens ``keep`` (bool, like ``tokens``) marks instead of every real token, in eval mode (the
    model's mode restored).

    Raises:
        ValueError: a model that does not read the mean, or a row that keeps no token.
    """
    if model.config.readout != "mean":
        raise ValueError(f"readout_logits needs a mean-readout model, got readout "
                         f"{model.config.readout!r}")
    if keep.shape != tokens.shape or not bool(keep.any(-1).all()):
        raise ValueError("keep must be shaped like tokens and keep a token in every row")
    last = f"blocks.{model.config.n_layers - 1}.hook_resid_post"
    with evaluating(model):
        _, cache = model.run_with_cache(tokens, {last})
        x = cache[last][None]  # (S = 1, batch, pos, d_model)
        if model.ln_final is not None:
            x = model.ln_final(x)
        w = keep.to(x.dtype)[None, ..., None]
        return model.classifier((x * w).sum(2) / w.sum(2))[0]


def _readout_masks(tokens: torch.Tensor, lengths: np.ndarray, m: int,
                   rng: np.random.Generator) -> dict[str, torch.Tensor]:
    """:data:`READOUTS` as bool masks over padded *before* tokens: the core's symbols and
    ``[end]`` (token indices m + 1 .. length + 1), and as many of the start and pad tokens
    (indices 0 .. m), drawn."""
    index = torch.arange(tokens.shape[1])[None, :]
    core = (index > m) & (index <= torch.as_tensor(lengths)[:, None] + 1)
    pad = torch.zeros_like(core)
    for i, n in enumerate(core.sum(1).tolist()):
        pad[i, rng.choice(m + 1, min(n, m + 1), replace=False)] = True
    return {"core tokens": core, "pad tokens": pad}


def readout_scores(model: Any, sets: Sets, m: int, width: int, seed: int
                   ) -> dict[str, dict[str, float]]:
    """The readout test of the module docstring at pad length ``m``: ``{"negatives rejected" |
    "members kept": {"core" | "padded" | "core tokens" | "pad tokens": share}}``, the *before*
    sets encoded at ``width``; ``seed`` picks the control tokens."""
    if m not in sets["negatives before"] or m == 0:
        raise ValueError(f"m must be a nonzero pad length of the sets "
                         f"({sorted(sets['negatives before'])}), got {m!r}")
    rng, out = np.random.default_rng(seed), {}
    for name, label in (("negatives", 0), ("members", 1)):
        (core, lengths, _), padded = sets[f"{name} before"][0], sets[f"{name} before"][m]
        core_tokens = tokenizer.encode(core, lengths, width)
        padded_tokens = tokenizer.encode(padded[0], padded[1], width)
        keep = _readout_masks(padded_tokens, padded[1], m, rng)
        with evaluating(model):
            got = {"core": model(core_tokens), "padded": model(padded_tokens)}
        for which, mask in keep.items():
            got[which] = readout_logits(model, padded_tokens, mask)
        key = "negatives rejected" if label == 0 else "members kept"
        out[key] = {k: round(float((v.argmax(-1) == label).float().mean()), 4)
                    for k, v in got.items()}
    return out


def readout_verdict(scores: Mapping[str, Mapping[str, float]]) -> str:
    """The module docstring's rule (:data:`READOUT_RULE`) on one model's
    :func:`readout_scores`."""
    if (early := _untestable(scores)) is not None:
        return early
    specific = _carries(scores, "core tokens", "pad tokens", READOUT_RULE)
    if specific is not None:
        return "the average carries it" if specific else "not specific"
    core = _recovered(scores, "core tokens")
    return "not the readout" if core <= READOUT_RULE["control"] else "partial"


def readout_rows(tasks: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One display row per seed that has a ``readout`` (:func:`readout_scores`), with its
    earlier verdicts beside."""
    out = []
    for label, per_seed in tasks.items():
        for t in per_seed:
            if "readout" not in t:
                continue
            r, kept = t["readout"]["negatives rejected"], t["readout"]["members kept"]
            row = {"configuration": label, "seed": t["seed"],
                   "verdict": readout_verdict(t["readout"])}
            if "patch_moved" in t:
                row["positions moved; patched"] = (f"{moved_verdict(t['patch_moved'])}; "
                                                   f"{patch_verdict(t['patch_moved'])}")
            row["negatives rejected, core / padded"] = f"{r['core']:.2f} / {r['padded']:.2f}"
            for which in READOUTS:
                row[f"read over {which}"] = f"{r[which]:.2f}"
            row["members kept, padded / core tokens"] = (f"{kept['padded']:.2f} / "
                                                        f"{kept['core tokens']:.2f}")
            out.append(row)
    return out


def readout_sentence(tasks: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The readout verdicts per configuration, and the prediction's count: of the seeds the
    pad's symbols break outside layer 0, how many the average carries."""
    parts = []
    for label, per_seed in tasks.items():
        done = [t for t in per_seed if "readout" in t]
        if not done:
            continue
        found = [readout_verdict(t["readout"]) for t in done]
        named = [readout_verdict(t["readout"]) for t in done if "patch_moved" in t
                 and moved_verdict(t["patch_moved"]) == "the pad's symbols break it"
                 and patch_verdict(t["patch_moved"]) == "not in layer 0"]
        carried = named.count("the average carries it")
        parts.append(f"`{label}`: {_counted(found, READOUT_VERDICTS)} (of "
                     f"{plural(len(done), 'seed')}); of the {len(named)} the pad's symbols break "
                     f"outside layer 0, the average carries it in {carried}")
    if not parts:
        return "No mean-readout model was read."
    return "Reading the mean over the core's tokens, by the rule stated beforehand: " + "; ".join(
        parts) + "."


def last_layer(model: Any) -> str:
    """The hook of the last block's output: what the readout (mean or ``[end]``) reads."""
    return f"blocks.{model.config.n_layers - 1}.hook_resid_post"


def last_verdict(scores: Mapping[str, Mapping[str, float]]) -> str:
    """The module docstring's rule (:data:`LAST_RULE`) on one model's :func:`patch_scores` at
    :func:`last_layer`."""
    if (early := _untestable(scores)) is not None:
        return early
    whole = _recovered(scores, "whole core")
    if whole >= LAST_RULE["carries"]:
        kept = scores["members kept"]
        return ("the core's tokens carry it" if kept["padded"] - kept["whole core"]
                <= LAST_RULE["members"] else "not specific")
    return "the pad's tokens in the average" if whole <= LAST_RULE["control"] else "partial"


def _last_named(t: Mapping[str, Any]) -> bool:
    """A seed the prediction names: moving the positions says the pad's symbols break it."""
    return "patch_moved" in t and moved_verdict(t["patch_moved"]) == "the pad's symbols break it"


def last_rows(tasks: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """One display row per seed patched at the last layer (``patch_last``, and
    ``patch_last_moved`` from the positions-moved run): both verdicts beside the earlier
    positions-moved one, negatives rejected and members kept."""
    out = []
    for label, per_seed in tasks.items():
        for t in (t for t in per_seed if "patch_last" in t):
            plain, moved = t["patch_last"], t["patch_last_moved"]
            r, kept = plain["negatives rejected"], plain["members kept"]
            out.append({
                "configuration": label, "seed": t["seed"],
                "positions moved": moved_verdict(t["patch_moved"]) if "patch_moved" in t else "-",
                "last layer patched from the core": last_verdict(plain),
                "from the moved core": last_verdict(moved),
                "negatives rejected, core / padded / patched / from moved": " / ".join(
                    f"{x:.2f}" for x in (r["core"], r["padded"], r["whole core"],
                                         moved["negatives rejected"]["whole core"])),
                "members kept, padded / patched / from moved": " / ".join(
                    f"{x:.2f}" for x in (kept["padded"], kept["whole core"],
                                         moved["members kept"]["whole core"]))})
    return out


def last_sentence(tasks: Mapping[str, Sequence[Mapping[str, Any]]],
                  fresh: Iterable[int] = ()) -> str:
    """The last-layer verdicts per configuration, and the prediction's count: of the seeds the
    pad's symbols break, how many the patch from the moved run calls ``the pad's tokens in the
    average`` (``fresh``: the seeds that test it, counted apart)."""
    fresh, parts = set(fresh), []
    for label, per_seed in tasks.items():
        done = [t for t in per_seed if "patch_last" in t]
        if not done:
            continue
        named = [t for t in done if _last_named(t)]
        hits = [t["seed"] for t in named
                if last_verdict(t["patch_last_moved"]) == "the pad's tokens in the average"]
        text = (f"`{label}`: patched from the core, "
                f"{_counted([last_verdict(t['patch_last']) for t in done], LAST_VERDICTS)}; "
                f"from the moved core, "
                f"{_counted([last_verdict(t['patch_last_moved']) for t in done], LAST_VERDICTS)}"
                f" (of {plural(len(done), 'seed')}); of the {len(named)} the pad's symbols "
                f"break, the pad's tokens in the average in {len(hits)}")
        if fresh:
            fresh_named = [t["seed"] for t in named if t["seed"] in fresh]
            text += (f" (fresh seeds: {sum(s in fresh for s in hits)} of "
                     f"{len(fresh_named)})")
        parts.append(text)
    if not parts:
        return "No model was patched at its last layer."
    return ("Patching the last layer at the core's symbols, by the rule stated beforehand: "
            + "; ".join(parts) + ".")


