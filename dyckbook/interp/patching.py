"""Mechanism by intervention: activation patching on minimal pairs, with "loss recovered".

A minimal pair is a member and the long-range negative made from it
(``negatives.sample_minimal_pairs``): they differ only by the change a stack detects. A
*hypothesis* names components of a single classifier that carry that difference: heads
``(layer, head)``, MLPs ``(layer, "mlp")``, or the whole residual stream after a layer
``(layer, "resid")``. Patching runs the negative with the named components' outputs taken from
the member's own run; the hypothesis explains the model to the extent that the output moves to
the member's:

    loss recovered = (L(negative) - L(patched)) / (L(negative) - L(member)),

L the mean cross-entropy against the *member* label over the pairs: 1 when the components carry
all of the difference, 0 when none. :func:`complement_recovered` asks the converse question
(causal scrubbing's): run the member with every component *outside* the hypothesis taken from
the negative; if the hypothesis holds, the output stays the member's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np
import torch
import torch.nn.functional as F

from dyckbook.experiment.intervals import interval
from dyckbook.nn import tokenizer
from dyckbook.nn.blocks import Recorder
from dyckbook.nn.model import Classifier

__all__ = ["ChosenHeads", "Component", "Patcher", "all_components", "complement_recovered",
           "component_effects", "component_name", "judge_hypotheses", "loss_recovered",
           "pair_accuracy", "pair_tokens", "patched_logits"]

Component = tuple[int, Union[int, str]]  # (layer, head) | (layer, "mlp") | (layer, "resid")


def component_name(component: Component) -> str:
    """``L1H0``, ``L0 MLP``, ``L1 resid``."""
    layer, part = component
    return f"L{layer}H{part}" if isinstance(part, int) else f"L{layer} {part.replace('mlp', 'MLP')}"


def all_components(model: Classifier) -> list[Component]:
    """Every head and MLP, layer by layer."""
    c = model.config
    return [(layer, part) for layer in range(c.n_layers)
            for part in (*range(c.n_heads), "mlp")]


def _check(model: Classifier, components: Iterable[Component]) -> list[Component]:
    if not isinstance(model, Classifier) or model.n_models != 1:
        raise ValueError(f"model must be a single-model Classifier, got {type(model).__name__}"
                         + (f" of {model.n_models} models" if isinstance(model, Classifier)
                            else ""))
    c, out = model.config, []
    for component in components:
        ok = isinstance(component, tuple) and len(component) == 2
        layer, part = component if ok else (None, None)
        ok = ok and isinstance(layer, int) and 0 <= layer < c.n_layers and (
            (isinstance(part, int) and not isinstance(part, bool) and 0 <= part < c.n_heads)
            or part in ("mlp", "resid"))
        if not ok:
            raise ValueError(f"components: {component!r} is not (layer < {c.n_layers}, head < "
                             f"{c.n_heads} | 'mlp' | 'resid')")
        out.append((layer, part))
    return out


class Patcher(Recorder):
    """Runs a model with the named components' activations taken from a cache of another input
    of the same shape (``hook_z`` per head, ``hook_mlp_out``, ``hook_resid_post``)."""

    def __init__(self, source: dict[str, torch.Tensor], components: Sequence[Component]) -> None:
        super().__init__(lambda name: False)  # records nothing
        self.source = source
        self.heads: dict[str, list[int]] = {}
        self.whole: set[str] = set()
        for layer, part in components:
            if isinstance(part, int):
                self.heads.setdefault(f"blocks.{layer}.attn.hook_z", []).append(part)
            else:
                hook = "mlp_out" if part == "mlp" else "resid_post"
                self.whole.add(f"blocks.{layer}.hook_{hook}")

    @staticmethod
    def hooks(components: Sequence[Component]) -> set[str]:
        """The hook names a source run must record for ``components``."""
        return set(Patcher({}, components).heads) | Patcher({}, components).whole

    def replace(self, name: str, value: torch.Tensor) -> torch.Tensor:
        if name in self.whole:
            return self.source[name][None].to(value.dtype)
        if name in self.heads:  # (S = 1, batch, pos, head, d_head)
            value = value.clone()
            heads = self.heads[name]
            value[..., heads, :] = self.source[name][None][..., heads, :].to(value.dtype)
        return value


def pair_tokens(members: np.ndarray, negatives: np.ndarray,
                lengths: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """The classifier's tokens of both sides of every pair, at one width."""
    lengths = np.asarray(lengths, dtype=np.int64)
    width = int(lengths.max(initial=0))
    return tokenizer.encode(members, lengths, width), tokenizer.encode(negatives, lengths, width)


@torch.no_grad()
def patched_logits(model: Classifier, target: torch.Tensor, source: torch.Tensor,
                   components: Sequence[Component]) -> torch.Tensor:
    """Logits (batch, 2) of ``target`` tokens with ``components`` taken from ``source``'s run."""
    components = _check(model, components)
    if target.shape != source.shape:
        raise ValueError(f"target and source must have one shape, got {tuple(target.shape)} "
                         f"and {tuple(source.shape)}")
    was = model.training
    model.eval()
    try:
        _, cache = model.run_with_cache(source, Patcher.hooks(components))
        return model.run_with_cache(target, Patcher(cache, components))[0]
    finally:
        model.train(was)


def _loss(logits: torch.Tensor, label: int) -> float:
    return float(F.cross_entropy(logits, torch.full((logits.shape[0],), label)).item())


def loss_recovered(model: Classifier, members: torch.Tensor, negatives: torch.Tensor,
                   components: Sequence[Component]) -> float:
    """How much of the member/negative loss gap patching ``components`` from the members into
    the negatives' run closes (module docstring); NaN where the model does not tell the pairs
    apart (a gap under 1e-6)."""
    clean = _loss(patched_logits(model, members, members, []), 1)
    corrupt = _loss(patched_logits(model, negatives, negatives, []), 1)
    patched = _loss(patched_logits(model, negatives, members, components), 1)
    gap = corrupt - clean
    return (corrupt - patched) / gap if abs(gap) > 1e-6 else math.nan


def complement_recovered(model: Classifier, members: torch.Tensor, negatives: torch.Tensor,
                         components: Sequence[Component]) -> float:
    """Run the members with every head and MLP *outside* ``components`` taken from the
    negatives: the share of the loss gap kept, ``(L(all from negatives) - L(complement)) /
    (L(all from negatives) - L(member))``; 1 when the components alone carry the difference.
    NaN where patching every component leaves no gap."""
    keep = set(_check(model, components))
    rest = [c for c in all_components(model) if c not in keep]
    clean = _loss(patched_logits(model, members, members, []), 1)
    everything = _loss(patched_logits(model, members, negatives, all_components(model)), 1)
    scrubbed = _loss(patched_logits(model, members, negatives, rest), 1)
    gap = everything - clean
    return (everything - scrubbed) / gap if abs(gap) > 1e-6 else math.nan


def component_effects(models: Sequence[Classifier], members: torch.Tensor,
                      negatives: torch.Tensor, separates: float = 0.9) -> dict[str, list[float]]:
    """``{component name: [loss recovered by patching it alone, per model]}`` over every head
    and MLP (NaN for a model that classifies under ``separates`` of the pairs' strings right)."""
    out: dict[str, list[float]] = {}
    for model in models:
        ok = pair_accuracy(model, members, negatives) >= separates
        for component in all_components(model):
            out.setdefault(component_name(component), []).append(
                loss_recovered(model, members, negatives, [component]) if ok else math.nan)
    return out


@torch.no_grad()
def pair_accuracy(model: Classifier, members: torch.Tensor, negatives: torch.Tensor) -> float:
    """The share of the pairs' strings (members and negatives) the model classifies right."""
    was = model.training
    model.eval()
    try:
        right = (model(members).argmax(-1) == 1).sum() + (model(negatives).argmax(-1) == 0).sum()
    finally:
        model.train(was)
    return float(right) / (2 * members.shape[0])


@dataclass(frozen=True)
class ChosenHeads:
    """A hypothesis whose heads are chosen model by model: the ``fixed`` components, plus in
    each of ``layers`` the ``per_layer`` heads whose patching alone recovers the most loss on
    *selection* pairs (``members``, ``negatives``), drawn apart from the pairs it is then judged
    on, so the choice does not see the test. States "in each of these layers, that many heads
    carry the difference and the others carry none"."""

    fixed: tuple[Component, ...]
    layers: tuple[int, ...]
    members: torch.Tensor
    negatives: torch.Tensor
    per_layer: int = 1

    def __post_init__(self) -> None:
        if not self.layers or any(not isinstance(x, int) or isinstance(x, bool) or x < 0
                                  for x in self.layers):
            raise ValueError(f"layers must be non-empty layer numbers >= 0, got {self.layers!r}")
        if not isinstance(self.per_layer, int) or self.per_layer < 1:
            raise ValueError(f"per_layer must be an int >= 1, got {self.per_layer!r}")
        if self.members.shape != self.negatives.shape or self.members.shape[0] == 0:
            raise ValueError(f"members and negatives (the selection pairs) must have one "
                             f"non-empty shape, got {tuple(self.members.shape)} and "
                             f"{tuple(self.negatives.shape)}")

    def components(self, model: Classifier) -> list[Component]:
        """``fixed`` and the heads chosen for ``model`` (each layer's strongest, ties to the
        lower head), in the order of :func:`all_components`."""
        c = model.config
        if max(self.layers) >= c.n_layers or self.per_layer > c.n_heads:
            raise ValueError(f"layers {self.layers} / per_layer {self.per_layer}: the model has "
                             f"{c.n_layers} layers of {c.n_heads} heads")
        chosen = set(_check(model, self.fixed))
        for layer in self.layers:
            effect = [loss_recovered(model, self.members, self.negatives, [(layer, h)])
                      for h in range(c.n_heads)]
            ranked = sorted(range(c.n_heads),
                            key=lambda h: (-(effect[h] if math.isfinite(effect[h]) else -math.inf),
                                           h))
            chosen |= {(layer, h) for h in ranked[:self.per_layer]}
        return [x for x in [*all_components(model), *((x, "resid") for x in range(c.n_layers))]
                if x in chosen]

    def describe(self) -> str:
        heads = (f"the strongest head of layer {self.layers[0]}" if len(self.layers) == 1
                 else "the strongest head of each of layers "
                 + ", ".join(map(str, self.layers)))
        if self.per_layer > 1:
            heads = heads.replace("the strongest head", f"the {self.per_layer} strongest heads")
        return ", ".join([*map(component_name, self.fixed),
                          f"{heads} (chosen per model on separate pairs)"])


def judge_hypotheses(models: Sequence[Classifier], members: torch.Tensor, negatives: torch.Tensor,
                    hypotheses: dict[str, Sequence[Component] | ChosenHeads],
                    accept: float = 0.8,
                    floor: float = 0.6, separates: float = 0.9) -> list[dict[str, object]]:
    """Each hypothesis (a name and the components it says carry the difference) against every
    model: loss recovered by patching its components, and by its complement (scrubbing), each
    the mean over the models with its 95% interval. *Accepted* when both means are >= ``accept``
    and both intervals' lower ends >= ``floor``, else *rejected*. A model that does not separate
    the pairs (classifies under ``separates`` of their strings right) has no mechanism to
    explain: it counts as 0, a failure, not as missing. A :class:`ChosenHeads` hypothesis picks
    its components per model (on its own selection pairs); they are listed per model."""
    solved = [pair_accuracy(m, members, negatives) >= separates for m in models]
    rows = []
    for name, hypothesis in hypotheses.items():
        chosen = isinstance(hypothesis, ChosenHeads)
        per_model = [(hypothesis.components(m) if chosen else list(hypothesis)) if ok else None
                     for m, ok in zip(models, solved)]
        row: dict[str, object] = {
            "hypothesis": name, "components": (hypothesis.describe() if chosen else
                                               ", ".join(map(component_name, hypothesis))),
            "models separating the pairs": sum(solved)}
        if chosen:
            row["per model, components"] = [None if c is None else
                                            ", ".join(map(component_name, c)) for c in per_model]
        verdict = True
        for label, fn in (("patched in", loss_recovered), ("kept by scrubbing",
                                                            complement_recovered)):
            values = [fn(m, members, negatives, c) if c is not None else math.nan
                      for m, c in zip(models, per_model)]
            scored = [0.0 if math.isnan(v) else v for v in values]  # nothing explained
            mean = float(np.mean(scored)) if scored else math.nan
            low, high = interval(scored, bounds=(-math.inf, math.inf))
            row[f"loss recovered, {label}"] = mean
            row[f"interval, {label}"] = (low, high)
            row[f"per model, {label}"] = values
            verdict &= bool(mean >= accept and (len(scored) < 2 or low >= floor))
        row["verdict"] = "accepted" if verdict else "rejected"
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------ display rows


