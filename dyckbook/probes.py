"""Linear probes of the residual stream and attention-head ablations: causal and decodable structure."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from dyckbook.explain import tokens_to_codes
from dyckbook.languages import PAD_CODE
from dyckbook.tokenizer import PAD

__all__ = [
    "ABLATION_MODES",
    "PROBE_KINDS",
    "AblationEffects",
    "ProbeData",
    "ProbeResult",
    "ablate_heads",
    "ablation_hooks",
    "collect_residuals",
    "default_hooks",
    "fit_linear_probe",
    "head_ablation_effects",
    "head_means",
    "prefix_targets",
    "probe_all",
]

PROBE_KINDS = ("regression", "classification")
ABLATION_MODES = ("zero", "mean")


# ============================================================================================
# targets
# ============================================================================================


def prefix_targets(codes: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Stack height and "balanced so far" after every symbol, by an explicit stack.

    Args:
        codes: uint8 (batch, pos) language codes (opener of type t is 2t, its closer 2t + 1),
            padded with ``PAD_CODE``.
        lengths: int (batch,) string lengths.

    Returns:
        ``(depth, balanced)``, both (batch, pos) and 0 / False beyond each string's end:
        ``depth`` int64 is openers minus closers of the prefix ending at the symbol (types
        ignored, negative once closers outnumber openers); ``balanced`` bool is True while the
        prefix is a valid Dyck prefix: the count never fell below zero and every closer matched
        the type of the innermost open bracket. Once False it stays False.
    """
    codes = np.asarray(codes)
    lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
    if codes.ndim != 2 or codes.shape[0] != lengths.shape[0]:
        raise ValueError(
            f"codes must be (batch, pos) with one length per row, got codes {codes.shape}, "
            f"lengths {lengths.shape}"
        )
    if lengths.size and (lengths.min() < 0 or lengths.max() > codes.shape[1]):
        raise ValueError(f"lengths must lie in [0, {codes.shape[1]}], got {lengths.tolist()[:8]}")
    valid = np.arange(codes.shape[1])[None, :] < lengths[:, None]
    step = np.where(valid, 1 - 2 * (codes.astype(np.int64) & 1), 0)
    depth = np.where(valid, np.cumsum(step, axis=1), 0)
    balanced = np.zeros(codes.shape, dtype=bool)
    for b in range(codes.shape[0]):
        stack: list[int] = []
        for i, c in enumerate(codes[b, : lengths[b]].tolist()):
            if c == PAD_CODE:
                raise ValueError(f"codes row {b} holds PAD_CODE inside its length {lengths[b]}")
            if c & 1 == 0:
                stack.append(c >> 1)
            elif stack and stack[-1] == c >> 1:
                stack.pop()
            else:
                break  # first error: every later prefix is invalid too
            balanced[b, i] = True
    return depth, balanced


# ============================================================================================
# residual features
# ============================================================================================


def default_hooks(model: Any) -> list[str]:
    """Residual-stream hooks worth probing, in forward order.

    ``blocks.0.hook_resid_pre`` (embedding + positional encoding), then per layer ``l``
    ``blocks.{l}.hook_resid_mid`` (after attention) and ``blocks.{l}.hook_resid_post`` (after the
    MLP). ``blocks.{l+1}.hook_resid_pre`` is the same tensor as ``blocks.{l}.hook_resid_post``,
    so it is not repeated. With post-LN these are taken after the LayerNorm.
    """
    hooks = ["blocks.0.hook_resid_pre"]
    for layer in range(model.config.n_layers):
        hooks += [f"blocks.{layer}.hook_resid_mid", f"blocks.{layer}.hook_resid_post"]
    return hooks


@dataclass
class ProbeData:
    """Residual vectors with their targets, per bracket position and per string.

    Attributes:
        hooks: the hook names, in forward order.
        token_features: hook -> float32 (n_tokens, d_model), one row per bracket position of
            every string (``[start]``, ``[end]`` and pads excluded).
        depth: int64 (n_tokens,) openers minus closers of the prefix ending at the position.
        balanced: bool (n_tokens,) the prefix is a valid Dyck prefix (see ``prefix_targets``).
        position: int64 (n_tokens,) string position of the symbol (0-based).
        string_index: int64 (n_tokens,) which string the row comes from (a split group).
        string_features: hook -> float32 (n_strings, d_model), the model's readout applied to
            that hook's residual stream (``[start]``, ``[end]`` or the mean of real tokens).
        membership: int64 (n_strings,) the string's label (1 = member).
        lengths: int64 (n_strings,) string lengths.
        kinds: the string's kind ("positive" or a negative kind), (n_strings,).
    """

    hooks: list[str]
    token_features: dict[str, np.ndarray]
    depth: np.ndarray
    balanced: np.ndarray
    position: np.ndarray
    string_index: np.ndarray
    string_features: dict[str, np.ndarray]
    membership: np.ndarray
    lengths: np.ndarray
    kinds: list[str] = field(default_factory=list)

    @property
    def n_tokens(self) -> int:
        """Number of bracket positions."""
        return int(self.depth.shape[0])

    @property
    def n_strings(self) -> int:
        """Number of strings."""
        return int(self.membership.shape[0])


def _readout_rows(x: torch.Tensor, real: torch.Tensor, readout: str) -> torch.Tensor:
    """(batch, pos, d_model) -> (batch, d_model), as ``TransformerClassifier._readout``."""
    if readout == "start":
        return x[:, 0]
    if readout == "end":
        last = real.sum(dim=1) - 1
        return x[torch.arange(x.shape[0]), last.clamp(min=0)]
    w = real.to(x.dtype)
    return (x * w[..., None]).sum(dim=1) / w.sum(dim=1, keepdim=True).clamp(min=1)


def collect_residuals(
    model: Any, batches: Iterable[Mapping[str, Any]], hooks: Sequence[str] | None = None
) -> ProbeData:
    """Run the model (eval mode, no gradients) and gather residual vectors with their targets.

    Args:
        model: a ``TransformerClassifier``.
        batches: batch dicts with ``tokens`` (batch, pos), ``lengths`` (batch,), ``labels``
            (batch,) and optionally ``kinds``.
        hooks: residual hook names (each (batch, pos, d_model)); default ``default_hooks(model)``.

    Returns:
        A :class:`ProbeData`; targets come from the tokens alone (``prefix_targets``).
    """
    hooks = list(default_hooks(model) if hooks is None else hooks)
    if not hooks:
        raise ValueError("hooks must name at least one residual hook, got []")
    device = next(model.parameters()).device
    readout = model.config.readout
    tok_feats: dict[str, list[np.ndarray]] = {h: [] for h in hooks}
    str_feats: dict[str, list[np.ndarray]] = {h: [] for h in hooks}
    depth, balanced, position, string_index = [], [], [], []
    membership, lengths, kinds = [], [], []
    offset = 0
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                tokens = batch["tokens"]
                _, cache = model.run_with_cache(tokens.to(device), names=set(hooks))
                missing = [h for h in hooks if h not in cache]
                if missing:
                    raise ValueError(f"hooks {missing} are not recorded by the model")
                lens = np.asarray(batch["lengths"], dtype=np.int64)
                codes, lens = tokens_to_codes(tokens, lens)
                d, bal = prefix_targets(codes, lens)
                b_idx, s_idx = np.nonzero(np.arange(codes.shape[1])[None, :] < lens[:, None])
                real = (tokens != PAD).cpu()
                for h in hooks:
                    x = cache[h].float().cpu()  # (batch, pos, d_model)
                    tok_feats[h].append(x[b_idx, s_idx + 1].numpy())
                    str_feats[h].append(_readout_rows(x, real, readout).numpy())
                depth.append(d[b_idx, s_idx])
                balanced.append(bal[b_idx, s_idx])
                position.append(s_idx.astype(np.int64))
                string_index.append(b_idx.astype(np.int64) + offset)
                membership.append(np.asarray(batch["labels"], dtype=np.int64))
                lengths.append(lens)
                kinds.extend(batch.get("kinds", ["?"] * len(lens)))
                offset += len(lens)
    finally:
        model.train(was_training)
    if offset == 0:
        raise ValueError("batches is empty")
    return ProbeData(
        hooks=hooks,
        token_features={h: np.concatenate(v) for h, v in tok_feats.items()},
        depth=np.concatenate(depth).astype(np.int64),
        balanced=np.concatenate(balanced),
        position=np.concatenate(position),
        string_index=np.concatenate(string_index),
        string_features={h: np.concatenate(v) for h, v in str_feats.items()},
        membership=np.concatenate(membership),
        lengths=np.concatenate(lengths),
        kinds=kinds,
    )


# ============================================================================================
# linear probes
# ============================================================================================


@dataclass
class ProbeResult:
    """Scores of one linear probe and of the trivial predictor it must beat.

    ``train_score``/``test_score`` are R^2 (regression) or accuracy (classification);
    ``baseline_train``/``baseline_test`` the same score of the mean (regression) or majority
    (classification) predictor fitted on the training part.
    """

    kind: str
    train_score: float
    test_score: float
    baseline_train: float
    baseline_test: float
    n_train: int
    n_test: int
    n_features: int
    l2: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in self.__dict__.items()}


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    ss_tot = float(((y - y.mean()) ** 2).sum())
    ss_res = float(((y - pred) ** 2).sum())
    if ss_tot == 0.0:
        return 1.0 if ss_res == 0.0 else -math.inf
    return 1.0 - ss_res / ss_tot


def _split(n: int, test_fraction: float, rng: np.random.Generator,
           groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Train/test row indices; with ``groups`` no group is on both sides."""
    if groups is None:
        order = rng.permutation(n)
        n_test = round(test_fraction * n)
        return np.sort(order[n_test:]), np.sort(order[:n_test])
    groups = np.asarray(groups).reshape(-1)
    if groups.shape[0] != n:
        raise ValueError(f"groups has {groups.shape[0]} entries for {n} rows")
    unique = np.unique(groups)
    chosen = rng.permutation(unique)[: round(test_fraction * len(unique))]
    is_test = np.isin(groups, chosen)
    return np.flatnonzero(~is_test), np.flatnonzero(is_test)


def _ridge(X: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """Closed-form ridge on centred data (the intercept is not penalised)."""
    mx, my = X.mean(axis=0), y.mean()
    Xc = X - mx
    A = Xc.T @ Xc + l2 * X.shape[0] * np.eye(X.shape[1])
    w = np.linalg.solve(A, Xc.T @ (y - my)) if X.shape[1] else np.zeros(0)
    return w, float(my - mx @ w)


def _logistic(X: np.ndarray, y: np.ndarray, n_classes: int, l2: float,
              steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression by Nesterov-accelerated full-batch gradient descent.

    The step is 1 / L with L = ||X||_2^2 / (2 n) + l2, an upper bound of the loss' smoothness
    constant (the softmax Hessian is bounded by 1/2 I), so the iteration is monotone-safe and,
    like everything here, deterministic (starts from zero).
    """
    n, d = X.shape
    Y = np.eye(n_classes)[y]
    Xb = np.hstack([X, np.ones((n, 1))])
    lip = (np.linalg.norm(Xb, 2) ** 2) / (2 * n) + l2
    lr = 1.0 / lip
    W = np.zeros((d + 1, n_classes))
    V = W.copy()
    reg = np.ones((d + 1, 1))
    reg[-1] = 0.0  # no penalty on the bias row
    t = 1.0
    for _ in range(steps):
        Z = Xb @ V
        Z -= Z.max(axis=1, keepdims=True)
        P = np.exp(Z)
        P /= P.sum(axis=1, keepdims=True)
        grad = Xb.T @ (P - Y) / n + l2 * reg * V
        W_next = V - lr * grad
        t_next = (1 + math.sqrt(1 + 4 * t * t)) / 2
        V = W_next + ((t - 1) / t_next) * (W_next - W)
        W, t = W_next, t_next
    return W[:-1], W[-1]


def fit_linear_probe(
    X: Any,
    y: Any,
    kind: str = "regression",
    *,
    l2: float = 1e-3,
    seed: int = 0,
    test_fraction: float = 0.25,
    groups: Any | None = None,
    steps: int = 300,
) -> ProbeResult:
    """Fit a linear probe on a random train part and score it on the held-out part.

    Features are standardised with the training part's mean and standard deviation. Regression
    is closed-form ridge, ``min ||y - Xw - b||^2 / n + l2 ||w||^2``; classification is
    multinomial logistic regression with the same penalty, ``steps`` iterations of accelerated
    gradient descent from zero. Both are deterministic given ``seed`` (which only draws the split).

    Args:
        X: float array (n, d_model) of features.
        y: (n,) targets: real numbers (regression) or integer / bool classes (classification).
        kind: ``"regression"`` (scored by R^2) or ``"classification"`` (accuracy).
        l2: ridge penalty (>= 0).
        seed: seeds the train/test split.
        test_fraction: share of rows (or of groups) held out, in (0, 1).
        groups: optional (n,) group ids (e.g. ``ProbeData.string_index``): a group is entirely on
            one side, so positions of one string never leak between train and test.
        steps: gradient steps of the logistic regression.

    Returns:
        A :class:`ProbeResult` with the mean / majority baseline.
    """
    if kind not in PROBE_KINDS:
        raise ValueError(f"kind must be one of {PROBE_KINDS}, got {kind!r}")
    if not (isinstance(l2, (int, float)) and l2 >= 0):
        raise ValueError(f"l2 must be a number >= 0, got {l2!r}")
    if not (0.0 < test_fraction < 1.0):
        raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y).reshape(-1)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise ValueError(f"X must be (n, d) with n = len(y) = {y.shape[0]}, got {X.shape}")
    if not np.all(np.isfinite(X)):
        raise ValueError("X holds NaN or infinite values")
    rng = np.random.default_rng(seed)
    tr, te = _split(X.shape[0], test_fraction, rng, groups)
    if len(tr) < 2 or len(te) < 1:
        raise ValueError(f"too few rows to split: {len(tr)} train, {len(te)} test")
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    sd = np.where(sd > 1e-12, sd, 1.0)  # constant features carry nothing; keep them at 0
    Z = (X - mu) / sd
    if kind == "regression":
        yf = y.astype(np.float64)
        w, b = _ridge(Z[tr], yf[tr], float(l2))
        pred = Z @ w + b
        mean = yf[tr].mean()
        scores = (_r2(yf[tr], pred[tr]), _r2(yf[te], pred[te]))
        base = (_r2(yf[tr], np.full(len(tr), mean)), _r2(yf[te], np.full(len(te), mean)))
    else:
        classes, yi = np.unique(y, return_inverse=True)
        if len(classes) < 2:
            raise ValueError(f"classification needs at least 2 classes in y, got {classes.tolist()}")
        W, b = _logistic(Z[tr], yi[tr], len(classes), float(l2), steps)
        pred = (Z @ W + b).argmax(axis=1)
        majority = np.bincount(yi[tr], minlength=len(classes)).argmax()
        scores = (float((pred[tr] == yi[tr]).mean()), float((pred[te] == yi[te]).mean()))
        base = (float((yi[tr] == majority).mean()), float((yi[te] == majority).mean()))
    return ProbeResult(kind=kind, train_score=float(scores[0]), test_score=float(scores[1]),
                       baseline_train=float(base[0]), baseline_test=float(base[1]),
                       n_train=len(tr), n_test=len(te), n_features=int(X.shape[1]),
                       l2=float(l2))


#: The probe targets of :func:`probe_all`: name -> (ProbeData level, probe kind).
PROBE_TARGETS = {"depth": ("token", "regression"), "balanced": ("token", "classification"),
                 "membership": ("string", "classification")}


def probe_all(data: ProbeData, *, l2: float = 1e-3, seed: int = 0, test_fraction: float = 0.25,
              steps: int = 300) -> dict[str, dict[str, ProbeResult]]:
    """Probe every hook for depth, "balanced so far" (per position) and membership (per string).

    Position-level probes split by string (``groups=string_index``), so the held-out strings are
    unseen as wholes.

    Returns:
        ``{target: {hook: ProbeResult}}`` for targets ``depth``, ``balanced``, ``membership``
        (a target whose labels hold one class only is left out).
    """
    out: dict[str, dict[str, ProbeResult]] = {}
    targets = {"depth": data.depth, "balanced": data.balanced.astype(np.int64),
               "membership": data.membership}
    for name, (level, kind) in PROBE_TARGETS.items():
        y = targets[name]
        if kind == "classification" and len(np.unique(y)) < 2:
            continue
        out[name] = {}
        for hook in data.hooks:
            X = data.token_features[hook] if level == "token" else data.string_features[hook]
            groups = data.string_index if level == "token" else None
            out[name][hook] = fit_linear_probe(X, y, kind, l2=l2, seed=seed,
                                               test_fraction=test_fraction, groups=groups,
                                               steps=steps)
    return out


# ============================================================================================
# head ablations
# ============================================================================================


def _check_heads(model: Any, heads: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    cfg = model.config
    out = []
    for item in heads:
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(f"heads must hold (layer, head) pairs, got {item!r}")
        layer, head = (int(v) for v in item)
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ValueError(f"head (layer={layer}, head={head}) outside the model's "
                             f"{cfg.n_layers} layers x {cfg.n_heads} heads")
        out.append((layer, head))
    return out


def head_means(model: Any, batches: Iterable[Mapping[str, Any]]) -> np.ndarray:
    """Mean output ``z`` of every head over the real (non-pad) positions of ``batches``.

    Returns:
        float32 (layer, head, d_head): the values a mean ablation substitutes.
    """
    cfg = model.config
    device = next(model.parameters()).device
    total = torch.zeros(cfg.n_layers, cfg.n_heads, cfg.d_head, dtype=torch.float64)
    count = 0
    names = {f"blocks.{layer}.attn.hook_z" for layer in range(cfg.n_layers)}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for batch in batches:
                tokens = batch["tokens"].to(device)
                _, cache = model.run_with_cache(tokens, names=names)
                real = (tokens != PAD).cpu()
                for layer in range(cfg.n_layers):
                    z = cache[f"blocks.{layer}.attn.hook_z"].double().cpu()  # (batch, pos, head, d_head)
                    total[layer] += z[real].sum(dim=0)
                count += int(real.sum())
    finally:
        model.train(was_training)
    if count == 0:
        raise ValueError("batches hold no real token")
    return (total / count).float().numpy()


@contextlib.contextmanager
def ablation_hooks(model: Any, heads: Iterable[tuple[int, int]], mode: str = "zero",
                   means: Any | None = None) -> Iterator[None]:
    """Within the context, the listed heads' outputs ``z`` are replaced in every forward pass.

    Mechanism: ``Attention`` concatenates the heads' ``z`` (batch, pos, head * d_head, heads in
    contiguous blocks of d_head) and feeds it to its output projection ``attn.out``; a forward
    pre-hook on ``blocks[l].attn.out`` overwrites head ``h``'s block before the projection. This
    works for the fused (``scaled_dot_product_attention``) and the explicit (cached) path alike
    and needs no change to ``model.py``. The hooks are removed on exit, even after an error.

    Args:
        model: a ``TransformerClassifier``.
        heads: (layer, head) pairs.
        mode: ``"zero"`` (z := 0) or ``"mean"`` (z := ``means[layer, head]`` at every position).
        means: (layer, head, d_head) array, e.g. from :func:`head_means`; required for "mean".
    """
    if mode not in ABLATION_MODES:
        raise ValueError(f"mode must be one of {ABLATION_MODES}, got {mode!r}")
    heads = _check_heads(model, heads)
    cfg = model.config
    mean_t = None
    if mode == "mean":
        if means is None:
            raise ValueError("mode='mean' needs means (layer, head, d_head), e.g. head_means()")
        mean_t = torch.as_tensor(np.asarray(means), dtype=torch.float32)
        if tuple(mean_t.shape) != (cfg.n_layers, cfg.n_heads, cfg.d_head):
            raise ValueError(f"means must have shape {(cfg.n_layers, cfg.n_heads, cfg.d_head)}, "
                             f"got {tuple(mean_t.shape)}")
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    handles = []

    def make_hook(layer: int, layer_heads: list[int]) -> Any:
        def hook(module: Any, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            z = args[0].clone()  # (batch, pos, d_model) = heads' z side by side
            for h in layer_heads:
                cols = slice(h * cfg.d_head, (h + 1) * cfg.d_head)
                if mean_t is None:
                    z[..., cols] = 0.0
                else:
                    z[..., cols] = mean_t[layer, h].to(z.device, z.dtype)
            return (z, *args[1:])

        return hook

    try:
        for layer, layer_heads in by_layer.items():
            module = model.blocks[layer].attn.out
            handles.append(module.register_forward_pre_hook(make_hook(layer, layer_heads)))
        yield
    finally:
        for handle in handles:
            handle.remove()


def ablate_heads(model: Any, tokens: torch.Tensor, heads: Iterable[tuple[int, int]],
                 mode: str = "zero", means: Any | None = None) -> torch.Tensor:
    """Logits with the listed heads' outputs zeroed or mean-replaced (eval mode, no gradients).

    Args:
        model: a ``TransformerClassifier``.
        tokens: LongTensor (batch, pos).
        heads: (layer, head) pairs; empty means no ablation (the plain forward pass).
        mode: ``"zero"`` or ``"mean"`` (see :func:`ablation_hooks`).
        means: (layer, head, d_head) replacement values for ``"mean"``; if None they are computed
            from ``tokens`` themselves (:func:`head_means` over this batch).

    Returns:
        logits (batch, n_classes), on the model's device.
    """
    device = next(model.parameters()).device
    tokens = tokens.to(device)
    if mode == "mean" and means is None:
        means = head_means(model, [{"tokens": tokens}])
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad(), ablation_hooks(model, heads, mode, means):
            return model(tokens)
    finally:
        model.train(was_training)


@dataclass
class AblationEffects:
    """Accuracy with each head (and each layer's attention) ablated, by group of strings.

    Attributes:
        groups: group names: ``"all"``, ``"positive"``, ``"negative"``, then each kind present.
        counts: int64 (group,) strings per group.
        base: float64 (group,) accuracy of the intact model.
        labels: one name per ablation, e.g. ``"L0H1"`` or ``"L1 all heads"``.
        heads: the (layer, head) pairs each ablation removes.
        accuracy: float64 (ablation, group) accuracy with the ablation.
        mode: ``"zero"`` or ``"mean"``.
    """

    groups: list[str]
    counts: np.ndarray
    base: np.ndarray
    labels: list[str]
    heads: list[list[tuple[int, int]]]
    accuracy: np.ndarray
    mode: str

    @property
    def drop(self) -> np.ndarray:
        """float64 (ablation, group): base accuracy minus ablated accuracy."""
        return self.base[None, :] - self.accuracy

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict."""
        return {"groups": self.groups, "counts": self.counts.tolist(), "base": self.base.tolist(),
                "labels": self.labels, "heads": [[list(h) for h in hs] for hs in self.heads],
                "accuracy": self.accuracy.tolist(), "drop": self.drop.tolist(), "mode": self.mode}


def head_ablation_effects(
    model: Any,
    batches: Iterable[Mapping[str, Any]],
    *,
    mode: str = "zero",
    means: Any | None = None,
    include_layers: bool = True,
) -> AblationEffects:
    """Accuracy drop from ablating each head alone (and each layer's heads together).

    Args:
        model: a ``TransformerClassifier``.
        batches: batch dicts with ``tokens``, ``labels`` and ``kinds`` (iterated several times,
            so pass a list or a re-iterable loader).
        mode: ``"zero"`` or ``"mean"``.
        means: (layer, head, d_head) values for ``"mean"``; default :func:`head_means` over
            ``batches``.
        include_layers: also ablate all heads of each layer at once (only when n_heads > 1).

    Returns:
        An :class:`AblationEffects`.
    """
    batches = list(batches)
    if not batches:
        raise ValueError("batches is empty")
    cfg = model.config
    if mode == "mean" and means is None:
        means = head_means(model, batches)
    ablations: list[tuple[str, list[tuple[int, int]]]] = [("none", [])]
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            ablations.append((f"L{layer}H{head}", [(layer, head)]))
        if include_layers and cfg.n_heads > 1:
            ablations.append((f"L{layer} all heads", [(layer, h) for h in range(cfg.n_heads)]))
    labels = np.concatenate([np.asarray(b["labels"], dtype=np.int64) for b in batches])
    kinds = [k for b in batches for k in b["kinds"]]
    kind_names = sorted(set(kinds) - {"positive"})
    groups = ["all", "positive", "negative", *kind_names]
    kinds_arr = np.asarray(kinds)
    masks = [np.ones(len(labels), bool), labels == 1, labels == 0,
             *[kinds_arr == k for k in kind_names]]
    counts = np.array([int(m.sum()) for m in masks], dtype=np.int64)
    acc = np.zeros((len(ablations), len(groups)))
    for a, (_, heads) in enumerate(ablations):
        preds = np.concatenate([
            ablate_heads(model, b["tokens"], heads, mode, means).argmax(dim=-1).cpu().numpy()
            for b in batches])
        hit = preds == labels
        acc[a] = [hit[m].mean() if m.any() else np.nan for m in masks]
    return AblationEffects(groups=groups, counts=counts, base=acc[0], labels=[n for n, _ in
                           ablations[1:]], heads=[h for _, h in ablations[1:]], accuracy=acc[1:],
                           mode=mode)
