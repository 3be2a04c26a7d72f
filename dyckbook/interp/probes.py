"""Linear probes of the residual stream and head ablations of single classifiers."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import nn

from dyckbook.data.dataset import Dataset
from dyckbook.data.vocab import PAD
from dyckbook.experiment.evaluate import evaluating, predict
from dyckbook.nn import tokenizer
from dyckbook.nn.model import Classifier

__all__ = ["ABLATION_MODES", "PROBE_KINDS", "PROBE_TARGETS", "ProbeData", "ProbeResult",
           "ablate_heads", "ablated", "collect_residuals", "default_hooks", "fit_linear_probe",
           "head_ablation_effects", "head_means", "prefix_targets", "probe_all"]

PROBE_KINDS = ("regression", "classification")
ABLATION_MODES = ("zero", "mean")
#: target -> (level: a row per symbol or per string, probe kind)
PROBE_TARGETS = {"depth": ("token", "regression"), "balanced": ("token", "classification"),
                 "membership": ("string", "classification")}
_STEPS = 300  # gradient steps of the logistic probe (converged for d_model <= 256 here)


def _single(model: nn.Module) -> Classifier:
    if not isinstance(model, Classifier) or model.n_models != 1:
        raise ValueError(f"model must be a single-model Classifier, got {model!r:.80}")
    return model


def prefix_targets(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Height and "balanced so far" after every symbol.

    Returns:
        ``(depth, balanced)``, (batch, pos), 0 / False on pads: ``depth`` int64 openers minus
        closers of the prefix; ``balanced`` bool, the prefix begins some member (it never
        closed a bracket but the innermost open one, nor went deeper than the language's bound).
    """
    codes, n = dataset.codes.astype(np.int64), dataset.codes.shape[1]
    inside = np.arange(n)[None, :] < dataset.lengths[:, None]
    depth = np.where(inside, dataset.language.heights(dataset.codes, dataset.lengths), 0)
    stack = np.zeros((len(codes), n + 1), np.int64)  # open types; the innermost at height - 1
    rows, ok = np.arange(len(codes)), np.ones(len(codes), bool)
    balanced = np.zeros(codes.shape, bool)
    for i in range(n):  # one step over the whole batch per position
        c, h, opener = codes[:, i], depth[:, i], inside[:, i] & (codes[:, i] & 1 == 0)
        stack[rows[opener], h[opener] - 1] = c[opener] >> 1
        matched = (h >= 0) & (stack[rows, np.clip(h, 0, n)] == c >> 1)  # partner at height h
        ok &= (~inside[:, i] | opener | matched) & (h <= (dataset.language.max_depth or n))
        balanced[:, i] = ok & inside[:, i]
    return depth.astype(np.int64), balanced


def default_hooks(model: Classifier) -> list[str]:
    """The residual stream after the embedding and after every attention and MLP sub-block."""
    return ["blocks.0.hook_resid_pre", *(f"blocks.{l}.hook_resid_{part}"
                                         for l in range(model.config.n_layers)
                                         for part in ("mid", "post"))]


def _forward(model: Classifier, dataset: Dataset, names: Sequence[str],
             batch_size: int = 256) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Tokens (batch, pos + 2) and the named activations of the whole dataset (float32, CPU),
    ``batch_size`` strings at a time in eval mode; the model's mode is restored."""
    tokens = tokenizer.encode(dataset.codes, dataset.lengths, dataset.codes.shape[1])
    device = next(model.parameters()).device
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    with evaluating(model):
        for start in range(0, len(tokens), batch_size):
            _, cache = model.run_with_cache(tokens[start:start + batch_size].to(device),
                                            set(names))
            for name in names:
                if name not in cache:
                    raise ValueError(f"hook {name!r} is not recorded by the model")
                parts[name].append(cache[name].float().cpu())
    return tokens, {name: torch.cat(v) for name, v in parts.items()}


@dataclass
class ProbeData:
    """Residual vectors with their targets: ``token_features`` {hook: float32 (n_tokens,
    d_model)} at every symbol, with ``depth``, ``balanced`` (:func:`prefix_targets`) and
    ``string_index`` (int64, probes split by it), all (n_tokens,); ``string_features`` {hook:
    float32 (batch, d_model)}, the model's readout applied to that hook, with ``membership``."""

    hooks: list[str]
    token_features: dict[str, np.ndarray]
    depth: np.ndarray
    balanced: np.ndarray
    string_index: np.ndarray
    string_features: dict[str, np.ndarray]
    membership: np.ndarray


def collect_residuals(model: nn.Module, dataset: Dataset,
                      hooks: Sequence[str] | None = None) -> ProbeData:
    """Run a single-model ``Classifier`` over ``dataset`` (non-members included: they carry
    the ``balanced`` negatives) and gather the residual vectors of ``hooks`` (default
    :func:`default_hooks`, each (batch, pos, d_model)) with their targets."""
    model = _single(model)
    hooks = list(default_hooks(model) if hooks is None else hooks)
    if not hooks or len(dataset) == 0:
        raise ValueError(f"hooks and dataset must be non-empty, got {hooks} and {dataset!r}")
    tokens, cache = _forward(model, dataset, hooks)
    depth, balanced = prefix_targets(dataset)
    b, s = np.nonzero(np.arange(dataset.codes.shape[1])[None, :] < dataset.lengths[:, None])
    real, pos = (tokens != PAD).float(), torch.arange(tokens.shape[1])[None]  # (batch, pos)
    weight = {"start": (pos == 0).float().expand_as(real), "mean": real / real.sum(1, True),
              "end": (pos == real.sum(1, True) - 1).float()}[model.config.readout]
    return ProbeData(hooks, {h: cache[h][b, s + 1].numpy() for h in hooks}, depth[b, s],
                     balanced[b, s], b.astype(np.int64),
                     {h: torch.einsum("bp,bpd->bd", weight, cache[h]).numpy() for h in hooks},
                     dataset.labels.astype(np.int64))


@dataclass
class ProbeResult:
    """A probe's scores, R^2 (regression) or accuracy (classification); ``baseline`` is the
    held-out score of the training mean (R^2 near 0) or of the training majority class."""

    kind: str
    train_score: float
    test_score: float
    baseline: float
    n_train: int
    n_test: int

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    total, residual = float(((y - y.mean()) ** 2).sum()), float(((y - pred) ** 2).sum())
    return 1.0 - residual / total if total else (1.0 if residual == 0 else -math.inf)


def _ridge(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """Closed-form ridge on centred data (the intercept is not penalised)."""
    mx, my = x.mean(0), y.mean()
    w = np.linalg.solve((x - mx).T @ (x - mx) + l2 * len(x) * np.eye(x.shape[1]),
                        (x - mx).T @ (y - my))
    return w, float(my - mx @ w)


def _logistic(x: np.ndarray, y: np.ndarray, n_classes: int, l2: float) -> np.ndarray:
    """Multinomial logistic regression, Nesterov-accelerated gradient descent from zero with
    step 1 / L, L = ||x||^2 / (2n) + l2 bounding the loss' smoothness. Returns (d + 1,
    n_classes) weights, the (unpenalised) bias last."""
    xb = np.hstack([x, np.ones((len(x), 1))])
    penalty = np.r_[np.full(x.shape[1], l2), 0.0][:, None]
    step = 1.0 / (np.linalg.norm(xb, 2) ** 2 / (2 * len(x)) + l2)
    w = v = np.zeros((xb.shape[1], n_classes))
    t = 1.0
    for _ in range(_STEPS):
        z = xb @ v
        error = np.exp(z - z.max(1, keepdims=True))
        error = error / error.sum(1, keepdims=True) - np.eye(n_classes)[y]
        w_next = v - step * (xb.T @ error / len(x) + penalty * v)
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        v, w, t = w_next + (t - 1) / t_next * (w_next - w), w_next, t_next
    return w


def fit_linear_probe(x: np.ndarray, y: np.ndarray, kind: str, rng: np.random.Generator, *,
                     l2: float = 1e-3, test_fraction: float = 0.25,
                     groups: np.ndarray | None = None) -> ProbeResult:
    """Fit a linear probe of ``y`` (n,) on ``x`` (n, d_model) on some rows, score it on the rest.

    ``kind``: ``regression`` is ridge, ``min ||y - xw - b||^2 / n + l2 ||w||^2``, scored by R^2;
    ``classification`` multinomial logistic regression with the same penalty, scored by
    accuracy. Features are standardised with the training part's statistics. ``rng`` draws the
    held-out ``test_fraction`` of the rows, or of the ``groups`` (n,) when given (e.g.
    ``ProbeData.string_index``: a string's symbols then never straddle the split).
    """
    if kind not in PROBE_KINDS or not l2 >= 0 or not 0 < test_fraction < 1:
        raise ValueError(f"kind must be one of {PROBE_KINDS}, l2 >= 0 and test_fraction in "
                         f"(0, 1); got {kind!r}, {l2!r}, {test_fraction!r}")
    x, y = np.asarray(x, np.float64), np.asarray(y).reshape(-1)
    ids = np.arange(len(y)) if groups is None else np.asarray(groups).reshape(-1)
    if x.ndim != 2 or len(x) != len(y) or ids.shape != y.shape or not np.isfinite(x).all():
        raise ValueError(f"x must be finite (n={len(y)}, d) and groups (n,), got x {x.shape}, "
                         f"groups {ids.shape}")
    unique = np.unique(ids)
    test = np.isin(ids, rng.permutation(unique)[:round(test_fraction * len(unique))])
    if (~test).sum() < 2 or not test.any():
        raise ValueError(f"too few rows to split: {(~test).sum()} train, {test.sum()} test")
    mean, sd = x[~test].mean(0), x[~test].std(0)
    z = (x - mean) / np.where(sd > 1e-12, sd, 1.0)  # a constant feature stays at 0
    if kind == "regression":
        w, b = _ridge(z[~test], y[~test].astype(np.float64), l2)
        score = [_r2(y[part], z[part] @ w + b) for part in (~test, test)]
        baseline = _r2(y[test], np.full(test.sum(), y[~test].mean()))
    else:
        classes, yi = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"y must hold at least 2 classes, got {classes.tolist()}")
        w = _logistic(z[~test], yi[~test], len(classes), l2)
        hit = (z @ w[:-1] + w[-1]).argmax(1) == yi
        score = [float(hit[~test].mean()), float(hit[test].mean())]
        baseline = float((yi[test] == np.bincount(yi[~test]).argmax()).mean())
    return ProbeResult(kind, score[0], score[1], baseline, int((~test).sum()), int(test.sum()))


def probe_all(data: ProbeData, rng: np.random.Generator,
              l2: float = 1e-3) -> dict[str, dict[str, ProbeResult]]:
    """Probe every hook for every target of ``PROBE_TARGETS``, with one split per target for
    all hooks (symbol-level targets split by string); a target with one class is left out.

    Returns:
        ``{target: {hook: ProbeResult}}``.
    """
    targets = {"depth": data.depth, "balanced": data.balanced, "membership": data.membership}
    out = {}
    for name, (level, kind) in PROBE_TARGETS.items():
        split = int(rng.integers(2**63))  # the same held-out rows for every hook
        if kind == "classification" and np.unique(targets[name]).size < 2:
            continue
        features = data.token_features if level == "token" else data.string_features
        out[name] = {h: fit_linear_probe(features[h], targets[name], kind,
                                         np.random.default_rng(split), l2=l2,
                                         groups=data.string_index if level == "token" else None)
                     for h in data.hooks}
    return out


def head_means(model: nn.Module, dataset: Dataset) -> np.ndarray:
    """Mean output ``z`` of every head over the real tokens of ``dataset``: float64 (layer,
    head, d_head), what a mean ablation puts in place of a head."""
    names = [f"blocks.{l}.attn.hook_z" for l in range(_single(model).config.n_layers)]
    tokens, cache = _forward(model, dataset, names)
    return torch.stack([cache[n][tokens != PAD].double().mean(0) for n in names]).numpy()


@contextlib.contextmanager
def ablated(model: nn.Module, heads: Sequence[tuple[int, int]], mode: str = "zero",
            means: np.ndarray | None = None) -> Iterator[None]:
    """Within the block, a single-model ``Classifier`` runs with the (layer, head) pairs
    ``heads`` removed; everything is restored on exit.

    ``zero``: the head's output is 0 (``Attention.head_scale``). ``mean``: its output is its
    mean over the real tokens, ``means`` (layer, head, d_head) from :func:`head_means`: head
    scale 0 plus the constant ``means[l, h] @ W_out[h]`` added to the attention output by a
    forward hook on ``attn.out``.
    """
    c, handles = _single(model).config, []
    if mode not in ABLATION_MODES or (mode == "mean") != (means is not None):
        raise ValueError(f"mode must be one of {ABLATION_MODES}, with means exactly for 'mean'; "
                         f"got {mode!r} and means {None if means is None else 'given'}")
    for item in heads:
        if len(item) != 2 or not (0 <= item[0] < c.n_layers and 0 <= item[1] < c.n_heads):
            raise ValueError(f"heads must hold (layer, head) pairs within {c.n_layers} layers "
                             f"x {c.n_heads} heads, got {item!r}")
    try:
        for layer in sorted({l for l, _ in heads}):
            attn, mine = model.blocks[layer].attn, [h for l, h in heads if l == layer]
            attn.head_scale = torch.ones(1, c.n_heads, device=attn.out.weight.device)
            attn.head_scale[0, mine] = 0.0
            if means is not None:
                w = attn.out.weight[0].detach().view(c.n_heads, c.d_model // c.n_heads, -1)
                z = torch.as_tensor(means[layer, mine], dtype=w.dtype, device=w.device)
                shift = torch.einsum("hd,hdm->m", z, w[mine])
                handles.append(attn.out.register_forward_hook(
                    lambda module, args, out, shift=shift: out + shift))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for block in model.blocks:
            block.attn.head_scale = None


def ablate_heads(model: nn.Module, dataset: Dataset, heads: Sequence[tuple[int, int]],
                 mode: str = "zero", means: np.ndarray | None = None) -> float:
    """Accuracy on ``dataset`` with ``heads`` removed (see :func:`ablated`); in ``mean`` mode
    the means default to those over ``dataset``."""
    if mode == "mean" and means is None:
        means = head_means(model, dataset)
    with ablated(model, heads, mode, means):
        return float((predict(model, dataset) == dataset.labels).mean())


def head_ablation_effects(model: nn.Module, dataset: Dataset, mode: str = "zero") -> np.ndarray:
    """Accuracy drop from removing each head alone: float64 (layer, head), intact accuracy
    minus ablated accuracy (negative where removing the head helps)."""
    means = head_means(model, dataset) if mode == "mean" else None
    base = ablate_heads(model, dataset, [], mode, means)
    return np.array([[base - ablate_heads(model, dataset, [(l, h)], mode, means)
                      for h in range(model.config.n_heads)] for l in range(model.config.n_layers)])
