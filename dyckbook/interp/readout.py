"""Where a mean readout's decision comes from: every position's own logit margin.

Under the ``mean`` readout the classifier is affine and applied to the average of the final
(normalised) residual stream, so the decision's margin is exactly the average of the margins
each position alone would give. On a minimal pair (a member and the negative made from it, one
long-range change apart) the difference of the two margins splits into per-position parts. Its
*total* says how much evidence against the negative the model writes anywhere in the string; its
*mean* is what the decision reads. If at longer lengths the total holds while the mean shrinks
by the length, the evidence is there and the average dilutes it: the failure is dilution. If the
total shrinks too, the model no longer detects the violation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from dyckbook.nn.model import Classifier
from dyckbook.nn.tokenizer import PAD

__all__ = ["evidence_rows", "pair_evidence", "position_margins"]


@torch.no_grad()
def position_margins(model: Classifier, tokens: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Every position's margin (member logit minus non-member logit) as if the readout read it
    alone, and the mask of real tokens: float64 and bool ``(batch, pos)``.

    Raises:
        ValueError: a model whose readout is not ``mean`` (its decision is not an average of
            positions), or not a single model.
    """
    if model.config.readout != "mean":
        raise ValueError(f"position_margins needs a mean readout, the model has "
                         f"{model.config.readout!r}")
    last = f"blocks.{model.config.n_layers - 1}.hook_resid_post"
    was = model.training
    model.eval()
    try:
        logits, cache = model.run_with_cache(tokens, [last])
        x = cache[last][None]  # (1, batch, pos, d_model)
        if model.ln_final is not None:
            x = model.ln_final(x)
        per = model.classifier(x)[0].double()  # (batch, pos, 2)
    finally:
        model.train(was)
    real = (tokens != PAD).numpy()
    margins = (per[..., 1] - per[..., 0]).numpy()
    check = (margins * real).sum(1) / real.sum(1)
    decided = (logits[:, 1] - logits[:, 0]).double().numpy()
    if not np.allclose(check, decided, atol=1e-3 * (1 + np.abs(decided).max(initial=0))):
        raise RuntimeError("the per-position margins do not average to the model's margin")
    return np.where(real, margins, 0.0), real


def pair_evidence(model: Classifier, members: torch.Tensor, negatives: torch.Tensor
                  ) -> dict[str, Any]:
    """On minimal pairs: the mean over pairs of the *total* per-position margin difference
    (member minus negative, summed over positions), of the *mean* one (what the decision
    reads), the share of pairs whose negative is classified a non-member and of members
    classified members, and the mean length in tokens."""
    m_member, real = position_margins(model, members)
    m_negative, _ = position_margins(model, negatives)
    diff = (m_member - m_negative).sum(1)
    n = real.sum(1)
    return {"total": float(diff.mean()), "mean": float((diff / n).mean()),
            "negatives_right": float(((m_negative.sum(1) / n) < 0).mean()),
            "members_right": float(((m_member.sum(1) / n) > 0).mean()),
            "tokens": float(n.mean())}


def evidence_rows(label: str, by_length: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per length bin of :func:`pair_evidence`'s measures for one model."""
    return [{"model": label, "lengths": m, "tokens": f"{e['tokens']:.0f}",
             "total evidence": f"{e['total']:.2f}", "mean (the decision)": f"{e['mean']:.3f}",
             "members right": f"{100 * e['members_right']:.0f}%",
             "negatives right": f"{100 * e['negatives_right']:.0f}%"}
            for m, e in by_length.items()]
