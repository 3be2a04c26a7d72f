"""Hand-set weights: the package's own Classifier recognising Dyck-1 and Dyck-(k, D) exactly.

Two constructions show what an architecture can *represent* (not what training finds):
:func:`dyck1_counter`, one causal layer that counts (Bhattamishra, Ahuja & Goyal 2020), and
:func:`dyck_kd`, two causal layers that count, then match every closer with its opener (after Yao,
Peng, Papadimitriou & Narasimhan 2021). Both return an ordinary
:class:`~dyckbook.nn.model.Classifier`
(pre-LN, ReLU, one head, causal mask, ``readout="mean"``, no dropout), so
``checkpoint.save_model`` / ``load_model`` and ``evaluate.predict`` / ``score`` take them.
Exact in float32 products (``blocks.MATMUL``'s default), not under bfloat16.

LayerNorm (the classifier has no norm-free path). The stream holds m features f written twice,
``x = [f, -f]`` (d_model = 2m), so its mean is 0 and ``LN(x) = s x`` with one s > 0 per position;
every weight reads a feature as ``(x_i - x_{i+m}) / 2``, in which LN's computed mean cancels.
Bias-free ReLU MLPs are positively homogeneous: s never flips a sign. Where a scale matters (the
matching keys) every position has the same |f| up to O(ALPHA^2).

Layer 1 counts. Values +alpha (openers), -alpha (closers), +alpha (``[start]``, its own
coordinate); ``[start]`` gets ``anchor`` times the attention weight of any other key (1: uniform),
so at position t ``D = alpha depth_t / (anchor + t)``, ``E = alpha anchor / (anchor + t)``,
depth_t the height after symbol t. The MLP tests ``D - x E / anchor`` (x a depth and a half: a
margin of half a step) to flag ``depth < 0`` anywhere, ``depth != 0`` at ``[end]`` and, for
Dyck-(k, D), ``depth > D``; it writes the one-hot ``lvl[L] = [depth_t = L]``, L = 0..D, as
trapezoids of ``K (D - L E / anchor)``. :func:`dyck_kd` takes anchor = n_ctx + 2, which keeps
those terms of order depth at every t (uniform attention: of order n / t, whose rounding broke
the matching at n = 16000).

Layer 2 matches. A query at depth d scores key j with ``tau [lvl_j = d + 1] + tau [j opens] +
rho sin(theta_j)``, theta_j rising with j (a hand-set ``learned`` table of cos, sin): a closer's
best key is the nearest earlier opener one level up, its partner, by >= 8 logits over every other
key (hard attention, weight > 0.999). The value is the opener's type; the MLP flags a mismatch.

Readout. A flag adds ``beta * flag`` to ``bad``, so large that the final LN maps a flagged
position to ``bad ~ sqrt(d / 2)``. ``readout="mean"`` averages positions; ``[start]``'s own
feature is worth one position's share, so ``logit[member] - logit[non-member] =
gain (mean(start) / 2 - mean(bad))`` is positive iff no position is flagged, at any length. After
one layer the last position cannot see that an earlier prefix went negative, so ``end`` could not
give Dyck-1 this way; ``mean`` can.

Where it stops. :func:`dyck_kd` *rejects* strings deeper than D (Dyck-k words included);
``dyck_kd(k, max_length // 2, max_length)`` recognises all of Dyck-k up to max_length. Longer
strings do not fit ``n_ctx``. Float32: :func:`counting_error` measures the rounding of the count.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from dyckbook.data.languages import check_int
from dyckbook.data.vocab import END, N_SPECIAL, PAD_CODE, START
from dyckbook.nn import blocks, tokenizer
from dyckbook.nn.model import Classifier, ModelConfig

__all__ = ["ALPHA", "all_strings", "counting_error", "dyck1_counter", "dyck_kd", "feature_index"]

ALPHA = 1e-3  # scale of the depth features D, E in Dyck-(k, D): keeps |f| constant to 1e-6
_EPS = 1e-5  # LayerNorm's eps (blocks.LayerNorm, torch's default)
_GAP = 8.0  # attention logits between adjacent candidate openers (weight lost: ~e^-8)


def feature_index(k: int, depth: int | None, positions: bool) -> dict[str, int]:
    """Index of each named feature in the positive half of the residual stream.

    ``tok{v}`` for every token id v, then ``pos_c``/``pos_s`` (with ``positions``), ``D``,
    ``E``, ``lvl{L}`` for L = 0..depth and ``typ{t}`` (with a ``depth``), and ``bad``.
    """
    names = [f"tok{v}" for v in range(N_SPECIAL + 2 * k)]
    names += ["pos_c", "pos_s"] if positions else []
    names += ["D", "E"]
    if depth is not None:
        names += [f"lvl{L}" for L in range(depth + 1)] + [f"typ{t}" for t in range(k)]
    return {name: i for i, name in enumerate(names + ["bad"])}


class _Writer:
    """Sets one model's weights by feature name: reads ``(x_i - x_{i+m}) / 2``, writes ``±``."""

    def __init__(self, model: Classifier, index: dict[str, int]) -> None:
        self.model, self.f = model, index
        self.m = model.config.d_model // 2
        with torch.no_grad():  # everything 0 but the LayerNorms (weight 1, bias 0)
            for module in model.modules():
                if not isinstance(module, blocks.LayerNorm):
                    for p in module.parameters(recurse=False):
                        p.zero_()

    def read(self, weight: torch.Tensor, feature: str, col: int, value: float) -> None:
        """Column ``col`` of ``weight`` (d_in = d_model rows) reads ``value * f[feature]``."""
        i = self.f[feature]
        weight[0, i, col] += value / 2
        weight[0, i + self.m, col] -= value / 2

    def write(self, weight: torch.Tensor, row: int, feature: str, value: float) -> None:
        """Row ``row`` of ``weight`` (d_out = d_model columns) adds ``value`` to f[feature]."""
        i = self.f[feature]
        weight[0, row, i] += value
        weight[0, row, i + self.m] -= value


def _scale(norm2: float, d_model: int) -> float:
    """LayerNorm's factor s for a stream whose features have squared norm ``norm2``."""
    return 1.0 / math.sqrt(2.0 * norm2 / d_model + _EPS)


def _config(k: int, max_length: int, n_features: int, d_mlp: int, n_layers: int,
            positions: bool) -> ModelConfig:
    d_model = 8 * math.ceil(2 * n_features / 8)  # multiples of 8 take the C kernels' path
    return ModelConfig(k=k, n_ctx=max_length, d_model=d_model, n_heads=1, d_mlp=d_mlp,
                       n_layers=n_layers, dropout=0.0, mask="causal",
                       pos_encoding="learned" if positions else "none", readout="mean",
                       norm="pre", act_fn="relu")


def _openers_closers(k: int) -> tuple[list[int], list[int]]:
    return [N_SPECIAL + 2 * t for t in range(k)], [N_SPECIAL + 2 * t + 1 for t in range(k)]


def _layer1(w: _Writer, k: int, alpha: float, depth: int | None, beta: float,
            norm2: float, anchor: float) -> None:
    """Causal attention -> D, E; MLP -> flags into ``bad``, trapezoids into ``lvl``.

    ``[start]`` gets ``anchor`` times the attention weight of any other key (1: uniform), so
    ``D = alpha depth / (anchor + t)`` and ``E = alpha anchor / (anchor + t)``; depth is
    ``anchor D / E`` and every test below reads ``D - x E / anchor`` (x: a depth and a half).
    """
    c, block = w.model.config, w.model.blocks[0]
    qkv, out, d = block.attn.qkv.weight, block.attn.out.weight, c.d_model
    s0 = _scale(norm2, d)  # LN scale of the embeddings (+ positions): one value at every position
    opens, closes = _openers_closers(k)
    tokens = [f"tok{v}" for v in range(c.d_vocab)]
    if anchor != 1.0:  # query dim 0: every token asks for [start] with logit log(anchor)
        for t in tokens:
            w.read(qkv, t, 0, math.log(anchor) * math.sqrt(d) / s0 ** 2)
        w.read(qkv, f"tok{START}", d + 0, 1.0)
    for v in opens:
        w.read(qkv, f"tok{v}", 2 * d + 0, alpha)  # value dim 0: +alpha per opener
    for v in closes:
        w.read(qkv, f"tok{v}", 2 * d + 0, -alpha)
    w.read(qkv, f"tok{START}", 2 * d + 1, alpha)  # value dim 1: the [start] beacon
    w.write(out, 0, "D", 1.0 / s0)
    w.write(out, 1, "E", 1.0 / s0)
    fc_in, fc_out = block.mlp.fc_in.weight, block.mlp.fc_out.weight
    units = [{"D": -1.0, "E": -0.5 / anchor}]  # depth < 0
    units.append({"D": 1.0, "E": -0.5 / anchor,  # depth != 0 at [end] (> 0; < 0 is above)
                  **{t: -2.0 for t in tokens if t != f"tok{END}"}})
    if depth is not None:
        units.append({"D": 1.0, "E": -(depth + 0.5) / anchor})  # depth > D
    for h, unit in enumerate(units):
        for feature, value in unit.items():
            w.read(fc_in, feature, h, value)
        w.write(fc_out, h, "bad", beta)
    if depth is None:
        return
    # z = K (D - L E / anchor) = K alpha (depth - L) / (anchor + t): a depth one off gives
    # |z| >= 2; with anchor ~ n the terms of z stay O(depth) at every t (rounding stays small)
    K = 2.0 * (anchor + c.n_positions) / alpha
    h = len(units)
    for L in range(depth + 1):  # trapezoid: u on |z| <= u/2, 0 on |z| >= u (u = sum of tok = 1)
        for shift, gain in ((1.0, 1.0), (0.5, -1.0), (-0.5, -1.0), (-1.0, 1.0)):
            w.read(fc_in, "D", h, K)
            w.read(fc_in, "E", h, -K * L / anchor)
            for t in tokens:
                w.read(fc_in, t, h, shift)
            w.write(fc_out, h, f"lvl{L}", 2.0 * gain / s0)
            h += 1


def _layer2(w: _Writer, k: int, depth: int, beta: float) -> None:
    """Closers attend to their partner (nearest earlier opener one level up) and compare types."""
    c, block = w.model.config, w.model.blocks[1]
    qkv, out, d, n = block.attn.qkv.weight, block.attn.out.weight, c.d_model, c.n_positions
    s2 = _scale(3.0, d)  # |f|^2 = 1 (token) + 1 (position) + 1 (level) at every valid position
    step = math.pi / 4 / (n - 1)  # theta_j = j step in [0, pi/4]: sin rises by >= step / sqrt 2
    rho = _GAP * math.sqrt(2.0) / step
    tau = rho / math.sqrt(2.0) + math.log(n) + _GAP
    cq = math.sqrt(d) / s2 ** 2  # undo the 1/sqrt(d_head) of attention and the LN scales
    opens, closes = _openers_closers(k)
    tokens = [f"tok{v}" for v in range(c.d_vocab)]
    for L in range(depth):  # query at depth L wants keys at depth L + 1 (dims 1..depth)
        w.read(qkv, f"lvl{L}", L + 1, tau * cq)
        w.read(qkv, f"lvl{L + 1}", d + L + 1, 1.0)
    for t in tokens:
        w.read(qkv, t, depth + 1, tau * cq)  # dim depth+1: keys that are openers
        w.read(qkv, t, depth + 2, rho * cq)  # dim depth+2: recency
    for v in opens:
        w.read(qkv, f"tok{v}", d + depth + 1, 1.0)
    w.read(qkv, "pos_s", d + depth + 2, 1.0)
    for t, v in enumerate(opens):
        w.read(qkv, f"tok{v}", 2 * d + t, 1.0)  # value: the opener's type
        w.write(out, t, f"typ{t}", 1.0 / s2)
    fc_in, fc_out = block.mlp.fc_in.weight, block.mlp.fc_out.weight
    for t in range(k):  # typ_t > 1/2 at a closer of another type
        w.read(fc_in, f"typ{t}", t, 1.0)
        w.read(fc_in, f"tok{closes[t]}", t, -1.0)
        for name in tokens:
            w.read(fc_in, name, t, -1.5)
        for v in closes:
            w.read(fc_in, f"tok{v}", t, 1.0)
        w.write(fc_out, t, "bad", beta)
    theta = torch.arange(n, dtype=torch.float64) * step
    table = w.model.pos.table
    for name, wave in (("pos_c", theta.cos()), ("pos_s", theta.sin())):
        table[0, :, w.f[name]] = wave.float()
        table[0, :, w.f[name] + w.m] = -wave.float()


def _finish(w: _Writer) -> Classifier:
    """Embeddings and the readout: member iff mean(start) / 2 > mean(bad)."""
    c, model = w.model.config, w.model
    for v in range(c.d_vocab):
        model.embed.weight[0, v, w.f[f"tok{v}"]] = 1.0
        model.embed.weight[0, v, w.f[f"tok{v}"] + w.m] = -1.0
    gain = 4.0 * c.n_positions  # logits of a few units, not a few thousandths
    head = model.classifier.weight
    for col, sign in ((1, 0.5), (0, -0.5)):
        w.read(head, f"tok{START}", col, sign * 0.5 * gain)
        w.read(head, "bad", col, -sign * gain)
    return model.eval()


def _beta(config: ModelConfig, alpha: float, norm2: float, most: float, anchor: float) -> float:
    """Gain of the flags: the smallest, s alpha / (2 (anchor + n)) (s: LN's scale where the MLP
    reads features of squared norm ``norm2`` + D^2 + E^2), becomes >= 32 sqrt(``most``),
    ``most`` bounding |f|^2 of the other features: the final LN then saturates ``bad``."""
    s_min = _scale(norm2 + 2.0 * alpha ** 2, config.d_model)
    return 64.0 * (anchor + config.n_positions) * math.sqrt(most) / (alpha * s_min)


def dyck1_counter(max_length: int) -> Classifier:
    """One causal layer recognising Dyck-1 exactly for every string up to ``max_length``.

    Layer 1 of the module docstring with alpha = 1 and no positional encoding: uniform causal
    attention gives ``depth_t / (t + 1)`` and ``1 / (t + 1)`` at every position, the MLP flags a
    negative prefix (any position) and a nonzero final depth (``[end]``), and the ``mean``
    readout rejects a string iff some position is flagged.

    Args:
        max_length: longest string (``n_ctx``), >= 1.

    Returns:
        A single-model ``Classifier`` (eval mode), k = 1, one layer, d_model 16.
    """
    max_length = check_int("max_length", max_length, 1)
    index = feature_index(1, None, positions=False)
    config = _config(1, max_length, len(index), 8, 1, positions=False)
    w = _Writer(Classifier(config), index)
    with torch.no_grad():
        _layer1(w, 1, 1.0, None, _beta(config, 1.0, 1.0, 3.0, 1.0), 1.0, anchor=1.0)
        return _finish(w)


def dyck_kd(k: int, depth: int, max_length: int) -> Classifier:
    """Two causal layers recognising Dyck-(k, D) exactly for every string up to ``max_length``.

    Layer 1 counts (as :func:`dyck1_counter`, alpha = :data:`ALPHA`) and writes the depth
    one-hot; layer 2 matches every closer with its opener and compares types (module docstring).
    Strings deeper than ``depth`` are rejected, so it recognises Dyck-(k, D), not Dyck-k; with
    ``depth >= max_length // 2`` the two agree on every string up to ``max_length``.

    Args:
        k: bracket types, >= 1.
        depth: the depth bound D, >= 1.
        max_length: longest string (``n_ctx``), >= 1.

    Returns:
        A single-model ``Classifier`` (eval mode), two layers, a hand-set ``learned`` position
        table; d_model 2 (9 + 3k + D) rounded up to a multiple of 8, d_mlp 4 (D + 1) + 3.
    """
    k = check_int("k", k, 1)
    depth = check_int("depth", depth, 1)
    max_length = check_int("max_length", max_length, 1)
    index = feature_index(k, depth, positions=True)
    config = _config(k, max_length, len(index), max(4 * (depth + 1) + 3, k), 2, positions=True)
    w = _Writer(Classifier(config), index)
    anchor = float(config.n_positions)
    beta = _beta(config, ALPHA, 2.0, 4.0, anchor)
    with torch.no_grad():
        _layer1(w, k, ALPHA, depth, beta, 2.0, anchor)
        _layer2(w, k, depth, beta)
        return _finish(w)


def counting_error(model: Classifier, codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """How far layer 1's depth is from the true height: fails (a wrong flag) at 1/2.

    Args:
        model: a construction of this module (its layer 1 counts).
        codes: uint8 (batch, pos); lengths: int (batch,).

    Returns:
        float64 (batch,): the largest ``|anchor D / E - height|`` over the positions of a string
        (``[start]`` at height 0 through ``[end]`` at the final height), in units of one bracket.
    """
    index = feature_index(model.config.k, None, model.config.pos_encoding != "none")
    m, got = model.config.d_model // 2, {}
    hook = model.blocks[0].attn.register_forward_hook(lambda mod, args, out: got.update(a=out))
    anchor = 1.0 if model.config.pos_encoding == "none" else float(model.config.n_positions)
    out = np.zeros(len(lengths))
    try:
        for i, n in enumerate(np.asarray(lengths).tolist()):
            with torch.inference_mode():
                model(tokenizer.encode(codes[i:i + 1], lengths[i:i + 1]))
            a = got["a"][0, 0, : n + 2].double()
            depth_of = [(a[:, index[f]] - a[:, index[f] + m]) / 2 for f in ("D", "E")]
            steps = np.where(codes[i, :n] % 2 == 0, 1, -1)
            height = np.concatenate([[0], np.cumsum(steps), [steps.sum()]])
            est = (anchor * depth_of[0] / depth_of[1]).numpy()
            out[i] = np.abs(est - height).max()
    finally:
        hook.remove()
    return out


def all_strings(k: int, max_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Every string over the 2k symbols of length 0..``max_length`` (to check exhaustively).

    Returns:
        ``(codes, lengths)``: uint8 (batch, max_length) padded with ``PAD_CODE``, int64 (batch,),
        shortest first; batch = sum of (2k)^n.
    """
    k, max_length = check_int("k", k, 1), check_int("max_length", max_length, 0)
    if (2 * k) ** max_length > 1 << 24:
        raise ValueError(f"all_strings: (2k)^max_length = {(2 * k) ** max_length} strings "
                         f"exceed 2^24 (k={k}, max_length={max_length})")
    blocks_, lengths = [], []
    for n in range(max_length + 1):
        digits = np.arange((2 * k) ** n)[:, None] // (2 * k) ** np.arange(n)[None, :]
        block = np.full((digits.shape[0], max_length), PAD_CODE, np.uint8)
        block[:, :n] = digits % (2 * k)
        blocks_.append(block)
        lengths.append(np.full(digits.shape[0], n, np.int64))
    return np.concatenate(blocks_), np.concatenate(lengths)
