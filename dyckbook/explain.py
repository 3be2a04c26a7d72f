"""Attention analysis for Dyck classifiers: functions take and return numpy arrays."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Token ids fixed by the tokenizer contract: [start]=0, [pad]=1, [end]=2, bracket = 3 + alphabet
# index, and the alphabet interleaves pairs, so opener of type t is alphabet index 2t, closer 2t+1.
START, PAD, END = 0, 1, 2
N_SPECIAL = 3
PAD_CODE = 255

#: Names of the key categories that ``matching_attention`` splits each query row into. For every
#: counted query they partition the row, so the masses of one query sum to the row sum (1).
KEY_CATEGORIES: tuple[str, ...] = (
    "matching",  # the query bracket's partner
    "self",  # the query position itself
    "same_type",  # other brackets of the query's type (partner and self excluded)
    "other_type",  # brackets of any other type
    "start",  # the [start] token (position 0)
    "end",  # the [end] token (position length + 1)
    "pad",  # pad keys (zero whenever the pad mask works)
)
ROLES: tuple[str, ...] = ("all", "opener", "closer")


# --------------------------------------------------------------------------------------------
# Token and bracket bookkeeping
# --------------------------------------------------------------------------------------------


def _as_numpy(x: Any) -> np.ndarray:
    """Return ``x`` as a numpy array (detaching torch tensors without importing torch)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def tokens_to_codes(tokens: Any, lengths: Any | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Convert token ids ``[start] s [end] [pad]...`` to language codes.

    Args:
        tokens: int array (batch, pos) laid out as in the tokenizer contract.
        lengths: string lengths (batch,), specials excluded. When omitted they are read off the
            tokens (the number of bracket tokens per row).

    Returns:
        ``(codes, lengths)``: uint8 codes (batch, pos - 2) padded with 255, int64 lengths (batch,).

    Raises:
        ValueError: if ``tokens`` is not 2-D or a length does not fit.
    """
    tok = _as_numpy(tokens)
    if tok.ndim != 2:
        raise ValueError(f"tokens must be 2-D (batch, pos), got shape {tok.shape}")
    tok = tok.astype(np.int64)
    if lengths is None:
        lens = (tok >= N_SPECIAL).sum(axis=1).astype(np.int64)
    else:
        lens = _as_numpy(lengths).astype(np.int64).reshape(-1)
        if lens.shape[0] != tok.shape[0]:
            raise ValueError(f"lengths has {lens.shape[0]} entries, tokens has {tok.shape[0]} rows")
    n_str = max(tok.shape[1] - 2, 0)
    if lens.size and (lens.min() < 0 or lens.max() > n_str):
        raise ValueError(f"lengths must lie in [0, {n_str}] for tokens of width {tok.shape[1]}")
    body = tok[:, 1 : 1 + n_str] - N_SPECIAL
    valid = np.arange(n_str)[None, :] < lens[:, None]
    if np.any(body[valid] < 0) or np.any(body[valid] > 254):
        raise ValueError("tokens hold a special or out-of-range id inside a string's span")
    codes = np.where(valid, body, PAD_CODE).astype(np.uint8)
    return codes, lens


def bracket_matching(
    codes: Any, lengths: Any, *, shuffle: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Partner index and nesting depth of every bracket, vectorised over the batch.

    Dyck-k (``shuffle=False``) uses one stack: a closer is matched to the top opener when their
    types agree; otherwise (wrong type or empty stack) the closer stays unmatched and the stack is
    left as it is. Shuffle-Dyck-k uses one stack per type. For members of the language this is
    the unique matching; for non-members it is a documented, greedy choice.

    Args:
        codes: uint8/int codes (batch, n) with opener ``2t`` and closer ``2t+1``; pads ignored.
        lengths: string lengths (batch,).
        shuffle: use one stack per bracket type (Shuffle-Dyck) instead of one shared stack.

    Returns:
        ``(matching, depth)``, both int64 (batch, n) in string positions: ``matching[b, i]`` is
        the partner's index or -1; ``depth[b, i]`` is the nesting level of the pair: the stack
        height just after its opener was pushed (1 for an outermost pair in a member; the opener
        and closer of a pair share it; for Shuffle-Dyck the number of open brackets of any
        type), 0 for unmatched brackets and pads.
    """
    c = _as_numpy(codes).astype(np.int64)
    lens = _as_numpy(lengths).astype(np.int64).reshape(-1)
    if c.ndim != 2:
        raise ValueError(f"codes must be 2-D (batch, n), got shape {c.shape}")
    batch, n = c.shape
    matching = np.full((batch, n), -1, dtype=np.int64)
    depth = np.zeros((batch, n), dtype=np.int64)
    if batch == 0 or n == 0:
        return matching, depth
    rows = np.arange(batch)
    valid_all = np.arange(n)[None, :] < lens[:, None]
    types = np.where(valid_all, c // 2, -1)
    n_types = int(types.max()) + 1 if valid_all.any() else 1
    n_stacks = n_types if shuffle else 1
    stack = np.zeros((batch, n_stacks, n + 1), dtype=np.int64)
    sp = np.zeros((batch, n_stacks), dtype=np.int64)
    for i in range(n):
        valid = valid_all[:, i]
        ci = c[:, i]
        t = np.where(valid, ci // 2, 0)
        s = t if shuffle else np.zeros(batch, dtype=np.int64)
        opener = valid & (ci % 2 == 0)
        closer = valid & (ci % 2 == 1)
        # push openers
        b = rows[opener]
        stack[b, s[b], sp[b, s[b]]] = i
        sp[b, s[b]] += 1
        depth[b, i] = sp[b].sum(axis=1) if shuffle else sp[b, 0]
        # pop closers whose stack top has the same type
        b = rows[closer & (sp[rows, s] > 0)]
        top = stack[b, s[b], sp[b, s[b]] - 1]
        ok = types[b, top] == t[b]
        b, top = b[ok], top[ok]
        matching[b, i] = top
        matching[b, top] = i
        depth[b, i] = depth[b, top]
        sp[b, s[b]] -= 1
    depth[matching < 0] = 0  # openers never closed
    return matching, depth


def to_token_positions(matching: Any) -> np.ndarray:
    """Shift string-position partners to token positions (``[start]`` occupies position 0).

    Args:
        matching: int array (..., n) of partner indices in string positions, -1 for none.

    Returns:
        int64 array (..., n + 2) indexed by token position: partner token position, or -1 for
        unmatched brackets and for the ``[start]``/``[end]`` slots.
    """
    m = _as_numpy(matching).astype(np.int64)
    out = np.full(m.shape[:-1] + (m.shape[-1] + 2,), -1, dtype=np.int64)
    out[..., 1:-1] = np.where(m >= 0, m + 1, -1)
    return out


def attention_mask(lengths: Any, n_pos: int, mask: str = "bidirectional") -> np.ndarray:
    """Cells a model may not attend to, in token positions (True = masked, numpy.ma convention).

    Args:
        lengths: string lengths (batch,), specials excluded; the real tokens are
            ``0 .. length + 1``.
        n_pos: width of the token matrix (pos).
        mask: ``"bidirectional"`` (pad keys masked) or ``"causal"`` (pad and future keys masked).

    Returns:
        bool array (batch, query, key). Pad query rows are masked entirely.
    """
    if mask not in ("bidirectional", "causal"):
        raise ValueError(f"mask must be 'bidirectional' or 'causal', got {mask!r}")
    lens = _as_numpy(lengths).astype(np.int64).reshape(-1)
    pos = np.arange(n_pos)
    real = pos[None, :] < (lens[:, None] + 2)  # (batch, pos)
    out = ~(real[:, :, None] & real[:, None, :])
    if mask == "causal":
        out |= pos[None, None, :] > pos[None, :, None]
    return out


# --------------------------------------------------------------------------------------------
# Extraction from a model (the only torch-dependent part)
# --------------------------------------------------------------------------------------------


def _n_layers_in_cache(cache: Mapping[str, Any]) -> int:
    n = 0
    while f"blocks.{n}.attn.hook_pattern" in cache:
        n += 1
    if n == 0:
        raise ValueError("cache holds no 'blocks.{l}.attn.hook_pattern' entries")
    return n


def attention_patterns(model: Any, tokens: Any) -> np.ndarray:
    """Attention patterns of every layer from ONE real forward pass.

    The patterns are read from ``model.run_with_cache``, so layer ``l`` sees exactly the residual
    stream that layer ``l - 1`` produced (with positional encoding added once). The thesis instead
    re-applied every layer to the raw embedding, which is wrong beyond layer 0. The model is put
    in eval mode for the pass (dropout off) and its previous mode restored.

    Args:
        model: a ``TransformerClassifier`` (anything with ``run_with_cache``).
        tokens: LongTensor or int array (batch, pos).

    Returns:
        float32 array (layer, batch, head, query, key); rows of real query positions sum to 1.
    """
    import torch

    if not isinstance(tokens, torch.Tensor):
        tokens = torch.as_tensor(np.asarray(tokens), dtype=torch.long)
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be 2-D (batch, pos), got shape {tuple(tokens.shape)}")
    try:
        device = next(model.parameters()).device
    except (AttributeError, StopIteration):
        device = tokens.device
    was_training = bool(getattr(model, "training", False))
    model.eval()
    try:
        with torch.no_grad():
            # record only the patterns when the model supports a names filter (memory at 4096)
            if "names" in inspect.signature(model.run_with_cache).parameters:
                _, cache = model.run_with_cache(
                    tokens.to(device), names=lambda name: name.endswith("attn.hook_pattern")
                )
            else:
                _, cache = model.run_with_cache(tokens.to(device))
    finally:
        if was_training:
            model.train()
    n_layers = _n_layers_in_cache(cache)
    return np.stack(
        [
            cache[f"blocks.{l}.attn.hook_pattern"].detach().float().cpu().numpy()
            for l in range(n_layers)
        ]
    )


# --------------------------------------------------------------------------------------------
# Display scaling
# --------------------------------------------------------------------------------------------


def minmax_scale(pattern: Any, mask: Any | None = None) -> np.ma.MaskedArray:
    """The thesis' min-max scaling of each (query, key) matrix to [-1, 1]; a DISPLAY option only.

    Each matrix is mapped affinely so that its smallest unmasked cell becomes -1 and its largest
    +1. The result is no longer a probability (a cell at -1 may hold 45% of a row's attention),
    so every quantitative measure in this module works on raw patterns instead. A constant matrix
    maps to 0.

    Args:
        pattern: array (..., query, key); a ``numpy.ma.MaskedArray`` keeps its mask.
        mask: optional bool array broadcastable to ``pattern``, True = masked (excluded from the
            min and max and left masked in the output).

    Returns:
        float64 masked array of the same shape with values in [-1, 1] on unmasked cells.
    """
    p = np.ma.asarray(pattern).astype(np.float64)
    if p.ndim < 2:
        raise ValueError(f"pattern must have at least 2 dims (query, key), got shape {p.shape}")
    m = np.ma.getmaskarray(p)
    if mask is not None:
        mk = np.asarray(_as_numpy(mask), dtype=bool)
        try:
            m = m | np.broadcast_to(mk, p.shape)
        except ValueError as err:
            raise ValueError(f"mask of shape {mk.shape} does not broadcast to {p.shape}") from err
    data = np.ma.getdata(p)
    lo = np.where(m, np.inf, data).min(axis=(-2, -1), keepdims=True)
    hi = np.where(m, -np.inf, data).max(axis=(-2, -1), keepdims=True)
    span = hi - lo
    with np.errstate(invalid="ignore", divide="ignore"):
        scaled = np.where(span > 0, 2.0 * (data - lo) / np.where(span > 0, span, 1.0) - 1.0, 0.0)
    return np.ma.MaskedArray(scaled, mask=m.copy())


# --------------------------------------------------------------------------------------------
# Matching-bracket attention
# --------------------------------------------------------------------------------------------


@dataclass
class MatchingAttention:
    """Per-head attention masses of bracket queries, split by key category.

    All means are over *counted queries*: bracket positions that have a partner (see
    ``matching_attention``), split by role (``ROLES``: all, opener, closer).

    Attributes:
        roles: ``ROLES``.
        categories: ``KEY_CATEGORIES``; for one query they partition the row.
        mean: category -> float64 array (role, layer, head), mean mass.
        count: int64 array (role,), number of counted queries.
        chance: float64 array (role,), mean matching mass of uniform attention over the keys the
            mask allows (the baseline a head must beat).
        by_depth: ``{"depth": (n_depth,), "count": (role, n_depth), category: (role, n_depth,
            layer, head)}``; depth is the pair's nesting level (1 = outermost, see
            ``bracket_matching``; always computed from the brackets).
        by_distance: ``{"distance": (n_dist,) or "edges": (n_dist + 1,), "count": (role, n_dist),
            category: (role, n_dist, layer, head)}``; distance is ``|partner - position|``
            (1 for ``()``); cells without queries are NaN.
        n_layers, n_heads: shape of the model.
        mask: the mask name used for ``chance``.
    """

    roles: tuple[str, ...]
    categories: tuple[str, ...]
    mean: dict[str, np.ndarray]
    count: np.ndarray
    chance: np.ndarray
    by_depth: dict[str, np.ndarray]
    by_distance: dict[str, np.ndarray]
    n_layers: int
    n_heads: int
    mask: str = "bidirectional"

    def role(self, name: str) -> int:
        """Index of a role name in the role axis."""
        if name not in self.roles:
            raise ValueError(f"role must be one of {self.roles}, got {name!r}")
        return self.roles.index(name)

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly nested lists."""

        def conv(v: Any) -> Any:
            if isinstance(v, np.ndarray):
                return (
                    np.where(np.isnan(v), None, v).tolist() if v.dtype.kind == "f" else v.tolist()
                )
            if isinstance(v, dict):
                return {k: conv(x) for k, x in v.items()}
            return v

        return {
            "roles": list(self.roles),
            "categories": list(self.categories),
            "mean": conv(self.mean),
            "count": conv(self.count),
            "chance": conv(self.chance),
            "by_depth": conv(self.by_depth),
            "by_distance": conv(self.by_distance),
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "mask": self.mask,
        }


@dataclass
class _Accumulator:
    """Sums per (role, group, layer, head) that merge across batches of different widths."""

    n_layers: int
    n_heads: int
    sums: dict[tuple[str, str, int], np.ndarray] = field(default_factory=dict)
    counts: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)

    def add(
        self, kind: str, keys: np.ndarray, role_idx: np.ndarray, values: dict[str, np.ndarray]
    ) -> None:
        # keys: (q,) group value per query; role_idx: (q,) 1 = opener, 2 = closer.
        # values: category -> (layer, q, head)
        for g in np.unique(keys):
            sel_g = keys == g
            for r in (0, 1, 2):
                sel = sel_g if r == 0 else sel_g & (role_idx == r)
                cnt = int(sel.sum())
                ck = (kind, int(g))
                if ck not in self.counts:
                    self.counts[ck] = np.zeros(3, dtype=np.int64)
                self.counts[ck][r] += cnt
                for cat, v in values.items():
                    sk = (kind, cat, int(g))
                    if sk not in self.sums:
                        self.sums[sk] = np.zeros((3, self.n_layers, self.n_heads))
                    if cnt:
                        self.sums[sk][r] += v[:, sel, :].sum(axis=1)

    def table(
        self, kind: str, cats: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        groups = np.array(sorted(g for (k, g) in self.counts if k == kind), dtype=np.int64)
        count = np.zeros((3, len(groups)), dtype=np.int64)
        means = {c: np.full((3, len(groups), self.n_layers, self.n_heads), np.nan) for c in cats}
        for j, g in enumerate(groups):
            count[:, j] = self.counts[(kind, int(g))]
            with np.errstate(invalid="ignore", divide="ignore"):
                for c in cats:
                    means[c][:, j] = (
                        self.sums[(kind, c, int(g))]
                        / np.where(count[:, j] > 0, count[:, j], np.nan)[:, None, None]
                    )
        return groups, count, means


def _check_patterns(patterns: Any) -> np.ndarray:
    p = _as_numpy(patterns)
    if p.ndim != 5:
        raise ValueError(
            f"patterns must be 5-D (layer, batch, head, query, key), got shape {p.shape}"
        )
    if p.shape[-1] != p.shape[-2]:
        raise ValueError(f"patterns must be square in (query, key), got shape {p.shape}")
    return p


def matching_attention(
    patterns: Any,
    tokens: Any,
    lengths: Any | None = None,
    matching: Any | None = None,
    *,
    mask: str = "bidirectional",
    shuffle: bool = False,
    distance_bins: Sequence[int] | None = None,
) -> MatchingAttention:
    """How much attention each head puts on the matching bracket, over a dataset.

    Which queries count: every bracket position that has a partner (``matching >= 0``); openers
    and closers are also reported separately (``ROLES``), since under a causal mask an opener
    cannot see its partner. ``[start]``, ``[end]``, pads and unmatched brackets (only in
    non-members) are not counted. String position ``i`` is token position ``i + 1`` because
    ``[start]`` occupies position 0; the ``[end]`` token sits at ``length + 1``. For each counted
    query the row is split into ``KEY_CATEGORIES`` (matching, self, same_type, other_type, start,
    end, pad), which partition the keys, so the masses sum to the row sum.

    Args:
        patterns: array (layer, batch, head, query, key), or a sequence of such arrays (one per
            batch, widths may differ) with matching sequences for ``tokens``/``lengths``/
            ``matching``.
        tokens: token ids (batch, pos) in the tokenizer layout (bracket type and role are read
            from them: token ``3 + 2t`` opens type ``t``, ``4 + 2t`` closes it).
        lengths: string lengths (batch,); read off the tokens when omitted.
        matching: partner indices (batch, n) in STRING positions (-1 for none), e.g. from
            ``Dyck.matching``; computed with ``bracket_matching`` when omitted.
        mask: ``"bidirectional"`` or ``"causal"``; used only for the uniform ``chance`` baseline.
        shuffle: compute the matching per type (Shuffle-Dyck) when ``matching`` is omitted.
        distance_bins: optional increasing bin edges for ``by_distance`` (e.g. powers of two for
            long inputs); default: one group per exact distance.

    Returns:
        A ``MatchingAttention``.
    """
    if mask not in ("bidirectional", "causal"):
        raise ValueError(f"mask must be 'bidirectional' or 'causal', got {mask!r}")
    if isinstance(patterns, (list, tuple)):
        n_items = len(patterns)
        toks = list(tokens)
        lens_list = list(lengths) if lengths is not None else [None] * n_items
        match_list = list(matching) if matching is not None else [None] * n_items
        if not (len(toks) == len(lens_list) == len(match_list) == n_items):
            raise ValueError("patterns, tokens, lengths and matching sequences differ in length")
        items = list(zip(patterns, toks, lens_list, match_list))
    else:
        items = [(patterns, tokens, lengths, matching)]
    if not items:
        raise ValueError("patterns is empty")
    edges = None
    if distance_bins is not None:
        edges = np.asarray(distance_bins, dtype=np.int64)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError(f"distance_bins must be increasing edges, got {distance_bins!r}")

    first = _check_patterns(items[0][0])
    n_layers, n_heads = first.shape[0], first.shape[2]
    acc = _Accumulator(n_layers, n_heads)
    total = {c: np.zeros((3, n_layers, n_heads)) for c in KEY_CATEGORIES}
    count = np.zeros(3, dtype=np.int64)
    chance_sum = np.zeros(3)

    for pat, tok, lens, mt in items:
        p = _check_patterns(pat)
        if p.shape[0] != n_layers or p.shape[2] != n_heads:
            raise ValueError(f"patterns shape {p.shape} disagrees with the first batch")
        tok_np = _as_numpy(tok).astype(np.int64)
        batch, n_pos = p.shape[1], p.shape[-1]
        if tok_np.shape != (batch, n_pos):
            raise ValueError(f"tokens shape {tok_np.shape} != (batch, pos) = {(batch, n_pos)}")
        codes, lens_np = tokens_to_codes(tok_np, lens)
        if mt is None:
            match_np, depth = bracket_matching(codes, lens_np, shuffle=shuffle)
        else:
            match_np = _as_numpy(mt).astype(np.int64)
            if match_np.shape[0] != batch or match_np.shape[1] < int(lens_np.max(initial=0)):
                raise ValueError(f"matching shape {match_np.shape} does not fit lengths/batch")
            match_np = match_np[:, : codes.shape[1]]
            if match_np.shape[1] < codes.shape[1]:
                match_np = np.pad(
                    match_np, ((0, 0), (0, codes.shape[1] - match_np.shape[1])), constant_values=-1
                )
            _, depth = bracket_matching(codes, lens_np, shuffle=shuffle)
            depth = np.where(match_np >= 0, depth, 0)
        b_idx, s_idx = np.nonzero(match_np >= 0)  # counted queries, string positions
        if b_idx.size == 0:
            continue
        q_tok = s_idx + 1
        partner_tok = match_np[b_idx, s_idx] + 1
        is_open = codes[b_idx, s_idx] % 2 == 0
        role_idx = np.where(is_open, 1, 2)
        q_type = codes[b_idx, s_idx] // 2
        rows = p[:, b_idx, :, q_tok, :]  # (q, layer, head, key) after advanced indexing
        rows = np.moveaxis(rows, 0, 1).astype(np.float64)  # (layer, q, head, key)
        key_pos = np.arange(n_pos)
        key_code = np.full((batch, n_pos), -1, dtype=np.int64)
        c64 = codes.astype(np.int64)  # uint8 cannot hold the -1 marker
        key_code[:, 1 : 1 + codes.shape[1]] = np.where(c64 == PAD_CODE, -1, c64)
        kc = key_code[b_idx]  # (q, key)
        is_bracket = kc >= 0
        same = is_bracket & (kc // 2 == q_type[:, None])
        end_pos = lens_np[b_idx] + 1
        is_pad = key_pos[None, :] > end_pos[:, None]
        qi = np.arange(b_idx.size)
        values = {
            "matching": rows[:, qi, :, partner_tok],
            "self": rows[:, qi, :, q_tok],
            "start": rows[..., 0],
            "end": rows[:, qi, :, end_pos],
            "pad": np.einsum("lqhk,qk->lqh", rows, is_pad.astype(np.float64)),
        }
        # advanced indexing with qi moved the query axis first; restore (layer, q, head)
        for k in ("matching", "self", "end"):
            values[k] = np.moveaxis(values[k], 0, 1)
        same_all = np.einsum("lqhk,qk->lqh", rows, same.astype(np.float64))
        brackets_all = np.einsum("lqhk,qk->lqh", rows, is_bracket.astype(np.float64))
        values["same_type"] = same_all - values["matching"] - values["self"]
        values["other_type"] = brackets_all - same_all
        # uniform attention over allowed keys: 1/(n+2) bidirectional; causal sees keys <= query
        n_allowed = np.where(mask == "causal", q_tok + 1, lens_np[b_idx] + 2)
        visible = (partner_tok <= q_tok) if mask == "causal" else np.ones_like(is_open)
        chance_q = visible / n_allowed
        for r in (0, 1, 2):
            sel = np.ones_like(is_open) if r == 0 else (role_idx == r)
            count[r] += int(sel.sum())
            chance_sum[r] += chance_q[sel].sum()
            for c in KEY_CATEGORIES:
                total[c][r] += values[c][:, sel, :].sum(axis=1)
        acc.add("depth", depth[b_idx, s_idx], role_idx, values)
        dist = np.abs(match_np[b_idx, s_idx] - s_idx)
        if edges is not None:
            grp = np.searchsorted(edges, dist, side="right") - 1
            keep = (grp >= 0) & (grp < edges.size - 1)
            acc.add(
                "distance", grp[keep], role_idx[keep], {c: v[:, keep, :] for c, v in values.items()}
            )
        else:
            acc.add("distance", dist, role_idx, values)

    with np.errstate(invalid="ignore", divide="ignore"):
        denom = np.where(count > 0, count, np.nan)
        mean = {c: total[c] / denom[:, None, None] for c in KEY_CATEGORIES}
        chance = chance_sum / denom
    depths, dcount, dmeans = acc.table("depth", KEY_CATEGORIES)
    groups, gcount, gmeans = acc.table("distance", KEY_CATEGORIES)
    by_depth: dict[str, np.ndarray] = {"depth": depths, "count": dcount, **dmeans}
    if edges is not None:
        full = np.arange(edges.size - 1)
        gc = np.zeros((3, full.size), dtype=np.int64)
        gm = {c: np.full((3, full.size, n_layers, n_heads), np.nan) for c in KEY_CATEGORIES}
        gc[:, groups] = gcount
        for c in KEY_CATEGORIES:
            gm[c][:, groups] = gmeans[c]
        by_distance: dict[str, np.ndarray] = {"edges": edges, "count": gc, **gm}
    else:
        by_distance = {"distance": groups, "count": gcount, **gmeans}
    return MatchingAttention(
        roles=ROLES,
        categories=KEY_CATEGORIES,
        mean=mean,
        count=count,
        chance=chance,
        by_depth=by_depth,
        by_distance=by_distance,
        n_layers=n_layers,
        n_heads=n_heads,
        mask=mask,
    )


def matching_attention_for_model(
    model: Any,
    batches: Iterable[Mapping[str, Any]],
    *,
    mask: str | None = None,
    shuffle: bool = False,
    distance_bins: Sequence[int] | None = None,
) -> MatchingAttention:
    """``matching_attention`` over batches (dicts with ``tokens`` and ``lengths``) for a model.

    Args:
        model: a ``TransformerClassifier``.
        batches: iterable of batch dicts (see the batch contract); positives are the meaningful
            input (non-members are matched greedily, see ``bracket_matching``).
        mask: baseline mask; defaults to ``model.config.mask`` when present.
        shuffle, distance_bins: as in ``matching_attention``.
    """
    if mask is None:
        mask = getattr(getattr(model, "config", None), "mask", "bidirectional")
    pats, toks, lens = [], [], []
    for batch in batches:
        pats.append(attention_patterns(model, batch["tokens"]))
        toks.append(_as_numpy(batch["tokens"]))
        lens.append(_as_numpy(batch["lengths"]) if "lengths" in batch else None)
    return matching_attention(
        pats, toks, lens, mask=mask, shuffle=shuffle, distance_bins=distance_bins
    )


# --------------------------------------------------------------------------------------------
# The [end] token "preview" and ROC-AUC
# --------------------------------------------------------------------------------------------


def end_self_attention(patterns: Any, lengths: Any) -> np.ndarray:
    """The ``[end]`` token's attention to itself, per layer, example and head.

    Args:
        patterns: array (layer, batch, head, query, key).
        lengths: string lengths (batch,); ``[end]`` sits at token position ``length + 1``.

    Returns:
        float64 array (layer, batch, head).
    """
    p = _check_patterns(patterns)
    lens = _as_numpy(lengths).astype(np.int64).reshape(-1)
    if lens.shape[0] != p.shape[1]:
        raise ValueError(f"lengths has {lens.shape[0]} entries, patterns hold batch {p.shape[1]}")
    end = lens + 1
    if end.size and end.max() >= p.shape[-1]:
        raise ValueError(f"a length {int(lens.max())} puts [end] beyond pos {p.shape[-1]}")
    b = np.arange(p.shape[1])
    out = p[:, b, :, end, end]  # (batch, layer, head)
    return np.moveaxis(out, 0, 1).astype(np.float64)


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks with ties given their average rank (as in the Mann-Whitney U test)."""
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    _, first, counts = np.unique(sorted_x, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0  # average of ranks first+1 .. first+count
    ranks = np.empty(x.size)
    ranks[order] = np.repeat(avg, counts)
    return ranks


def roc_auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic; ties count one half.

    AUC = P(score of a random positive > score of a random negative) + 0.5 P(equal).

    Args:
        scores: float array (batch,); higher means "more likely positive".
        labels: array (batch,) of 0/1 or bool; 1 = positive (member).

    Returns:
        The AUC in [0, 1].

    Raises:
        ValueError: on shape mismatch, non-binary labels, NaN scores, or a missing class.
    """
    s = _as_numpy(scores).astype(np.float64).reshape(-1)
    y = _as_numpy(labels).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries, labels has {y.size}")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    uy = np.unique(y)
    if not np.all(np.isin(uy, [0, 1])):
        raise ValueError(f"labels must be 0/1, got values {uy[:5].tolist()}")
    pos = y.astype(bool)
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"labels need both classes, got {n_pos} positives and {n_neg} negatives")
    ranks = _average_ranks(s)
    u = ranks[pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def roc_curve(scores: Any, labels: Any) -> tuple[np.ndarray, np.ndarray]:
    """False- and true-positive rates at every distinct threshold (ties form one step).

    Returns:
        ``(fpr, tpr)``, float64 arrays starting at (0, 0) and ending at (1, 1).
    """
    s = _as_numpy(scores).astype(np.float64).reshape(-1)
    y = _as_numpy(labels).reshape(-1).astype(bool)
    if s.shape != y.shape:
        raise ValueError(f"scores has {s.size} entries, labels has {y.size}")
    order = np.argsort(-s, kind="mergesort")
    s, y = s[order], y[order]
    last = np.r_[np.nonzero(np.diff(s))[0], s.size - 1]  # end of each tie group
    tp = np.cumsum(y)[last]
    fp = np.cumsum(~y)[last]
    n_pos, n_neg = max(int(y.sum()), 1), max(int((~y).sum()), 1)
    return np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos]


@dataclass
class Preview:
    """Is the ``[end]`` token's self-attention predictive of the label? (the thesis' "preview").

    Attributes:
        scores: float64 (layer, batch, head), the end self-attention per example.
        labels: int64 (batch,), 1 = member.
        auc: float64 (layer, head), ROC-AUC of the score as a "member" predictor.
        auc_sym: ``max(auc, 1 - auc)``: AUC is direction-dependent; a head whose end
            self-attention is LOWER for members is just as informative, so report both.
        mean_pos, mean_neg: float64 (layer, head), class means of the score.
    """

    scores: np.ndarray
    labels: np.ndarray
    auc: np.ndarray
    auc_sym: np.ndarray
    mean_pos: np.ndarray
    mean_neg: np.ndarray

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly summary (without the per-example scores)."""
        return {
            "auc": self.auc.tolist(),
            "auc_sym": self.auc_sym.tolist(),
            "mean_pos": self.mean_pos.tolist(),
            "mean_neg": self.mean_neg.tolist(),
            "n_pos": int(self.labels.sum()),
            "n_neg": int((1 - self.labels).sum()),
        }


def preview_auc(scores: Any, labels: Any) -> Preview:
    """ROC-AUC per (layer, head) of per-example scores (layer, batch, head) against labels."""
    s = _as_numpy(scores).astype(np.float64)
    y = _as_numpy(labels).astype(np.int64).reshape(-1)
    if s.ndim != 3 or s.shape[1] != y.size:
        raise ValueError(f"scores must be (layer, batch, head) with batch {y.size}, got {s.shape}")
    n_layers, _, n_heads = s.shape
    auc = np.empty((n_layers, n_heads))
    for l in range(n_layers):
        for h in range(n_heads):
            auc[l, h] = roc_auc(s[l, :, h], y)
    pos = y == 1
    return Preview(
        scores=s,
        labels=y,
        auc=auc,
        auc_sym=np.maximum(auc, 1.0 - auc),
        mean_pos=s[:, pos, :].mean(axis=1),
        mean_neg=s[:, ~pos, :].mean(axis=1),
    )


def preview_statistic(model: Any, batches: Iterable[Mapping[str, Any]]) -> Preview:
    """The thesis' "preview" claim tested over data: AUC of ``[end]`` self-attention per head.

    Args:
        model: a ``TransformerClassifier``.
        batches: iterable of batch dicts with ``tokens``, ``labels`` and ``lengths``.

    Returns:
        A ``Preview`` over all examples of all batches.
    """
    scores, labels = [], []
    for batch in batches:
        pats = attention_patterns(model, batch["tokens"])
        scores.append(end_self_attention(pats, batch["lengths"]))
        labels.append(_as_numpy(batch["labels"]).reshape(-1))
    if not scores:
        raise ValueError("batches is empty")
    return preview_auc(np.concatenate(scores, axis=1), np.concatenate(labels))


# --------------------------------------------------------------------------------------------
# Long inputs
# --------------------------------------------------------------------------------------------


@dataclass
class LongInputSummary:
    """A compact description of one (query, key) attention matrix that stays readable at 4096.

    Attributes:
        n: number of positions summarised (the real tokens, pads cropped).
        entropy: float64 (query,), row entropy in nats.
        entropy_norm: float64 (query,), entropy / log(number of keys with nonzero weight
            allowed, i.e. the row's support under its mask); 1 = uniform, 0 = one key.
        offset_edges: int64 (n_bins + 1,), edges ``1, 2, 4, ..`` of |key - query| bins (the last
            edge exceeds n); bin j holds distances in ``[edges[j], edges[j+1])``.
        offset_mass: float64 (query, 2 * n_bins + 1): mass per signed offset bin, ordered
            far-left .. -1, 0 (self), +1 .. far-right; rows sum to the row sums of the pattern.
        offset_centers: float64 (2 * n_bins + 1,), signed geometric bin centres, for plotting.
        matching_mass: float64 (query,) mass on the partner, NaN where there is none (None when
            no matching was given).
        top_keys: int64 (query, top_k), the most-attended keys per query, strongest first.
        top_weights: float64 (query, top_k), their weights.
        block_edges: int64 (n_blocks + 1,), position edges of the downsampled map.
        block_mean: float64 (n_blocks, n_blocks), mean weight per block (mass-preserving:
            ``block_mean * area`` sums to the pattern's total).
        block_max: float64 (n_blocks, n_blocks), max weight per block (keeps thin diagonals
            such as matching-bracket attention visible).
    """

    n: int
    entropy: np.ndarray
    entropy_norm: np.ndarray
    offset_edges: np.ndarray
    offset_mass: np.ndarray
    offset_centers: np.ndarray
    matching_mass: np.ndarray | None
    top_keys: np.ndarray
    top_weights: np.ndarray
    block_edges: np.ndarray
    block_mean: np.ndarray
    block_max: np.ndarray

    @property
    def mean_offset_mass(self) -> np.ndarray:
        """(2 * n_bins + 1,) offset profile averaged over queries."""
        return self.offset_mass.mean(axis=0)


def _span(cs: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row sums over keys ``a .. b-1`` (clipped to the matrix) from prefix sums ``cs``."""
    n = cs.shape[1] - 1
    a = np.clip(a, 0, n)
    b = np.clip(b, 0, n)
    r = np.arange(cs.shape[0])
    return np.where(b > a, cs[r, b] - cs[r, a], 0.0)


def long_input_summary(
    pattern: Any,
    *,
    length: int | None = None,
    matching: Any | None = None,
    top_k: int = 5,
    max_blocks: int = 256,
    chunk: int = 512,
) -> LongInputSummary:
    """Summarise a long (query, key) attention matrix for display and comparison.

    Args:
        pattern: float array (query, key) for ONE head and example (e.g. ``patterns[l, b, h]``).
        length: number of real token positions to keep (``string length + 2``); pads beyond it
            are cropped. Default: the whole matrix.
        matching: optional partner per TOKEN position (query,), -1 for none (see
            ``to_token_positions``).
        top_k: number of strongest keys kept per query.
        max_blocks: the downsampled maps have at most ``max_blocks`` blocks per side.
        chunk: query rows processed at a time (bounds temporary memory to ~chunk * n floats).

    Returns:
        A ``LongInputSummary``.
    """
    p = _as_numpy(pattern)
    if p.ndim != 2 or p.shape[0] != p.shape[1]:
        raise ValueError(f"pattern must be a square (query, key) matrix, got shape {p.shape}")
    n = p.shape[0] if length is None else int(length)
    if not 1 <= n <= p.shape[0]:
        raise ValueError(f"length must lie in [1, {p.shape[0]}], got {length}")
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if max_blocks < 1:
        raise ValueError(f"max_blocks must be >= 1, got {max_blocks}")
    p = p[:n, :n]
    k = min(top_k, n)
    # |offset| bins 1, 2, 4, ... up to a power of two > n - 1
    n_bins = max(1, math.ceil(math.log2(max(n, 2))))
    edges = (2 ** np.arange(n_bins + 1)).astype(np.int64)
    n_signed = 2 * n_bins + 1
    entropy = np.empty(n)
    support = np.empty(n)
    offset_mass = np.zeros((n, n_signed))
    top_keys = np.empty((n, k), dtype=np.int64)
    top_weights = np.empty((n, k))
    pos = np.arange(n)
    for lo in range(0, n, chunk):
        hi = min(lo + chunk, n)
        rows = p[lo:hi].astype(np.float64)  # (c, key)
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(rows > 0, rows * np.log(rows), 0.0)
        entropy[lo:hi] = -plogp.sum(axis=1)
        support[lo:hi] = (rows > 0).sum(axis=1)
        # prefix sums turn each bin's mass into two lookups per query
        cs = np.zeros((hi - lo, n + 1))
        np.cumsum(rows, axis=1, out=cs[:, 1:])
        q = pos[lo:hi]
        r = np.arange(hi - lo)

        offset_mass[lo:hi, n_bins] = rows[r, q]
        for j in range(n_bins):
            d0, d1 = edges[j], edges[j + 1]
            offset_mass[lo:hi, n_bins - 1 - j] = _span(
                cs, q - d1 + 1, q - d0 + 1
            )  # keys q-d1+1..q-d0
            offset_mass[lo:hi, n_bins + 1 + j] = _span(cs, q + d0, q + d1)  # keys q+d0..q+d1-1
        part = np.argpartition(-rows, k - 1, axis=1)[:, :k]
        w = np.take_along_axis(rows, part, axis=1)
        order = np.argsort(-w, axis=1, kind="stable")
        top_keys[lo:hi] = np.take_along_axis(part, order, axis=1)
        top_weights[lo:hi] = np.take_along_axis(w, order, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy_norm = np.where(support > 1, entropy / np.log(np.maximum(support, 2)), 0.0)
    centers_abs = np.sqrt(edges[:-1] * np.maximum(edges[1:] - 1, edges[:-1]))
    centers = np.r_[-centers_abs[::-1], 0.0, centers_abs]
    m_mass = None
    if matching is not None:
        m = _as_numpy(matching).astype(np.int64).reshape(-1)
        if m.size < n:
            raise ValueError(f"matching has {m.size} entries, need at least {n}")
        m = m[:n]
        ok = (m >= 0) & (m < n)
        m_mass = np.full(n, np.nan)
        m_mass[ok] = p[pos[ok], m[ok]]
    n_blocks = min(max_blocks, n)
    block_edges = np.unique(np.linspace(0, n, n_blocks + 1).round().astype(np.int64))
    starts = block_edges[:-1]
    pf = p.astype(np.float64, copy=False)
    row_sum = np.add.reduceat(pf, starts, axis=0)
    block_sum = np.add.reduceat(row_sum, starts, axis=1)
    widths = np.diff(block_edges)
    block_mean = block_sum / np.outer(widths, widths)
    block_max = np.maximum.reduceat(np.maximum.reduceat(p, starts, axis=0), starts, axis=1)
    return LongInputSummary(
        n=n,
        entropy=entropy,
        entropy_norm=entropy_norm,
        offset_edges=edges,
        offset_mass=offset_mass,
        offset_centers=centers,
        matching_mass=m_mass,
        top_keys=top_keys,
        top_weights=top_weights,
        block_edges=block_edges,
        block_mean=block_mean,
        block_max=block_max.astype(np.float64),
    )


# --------------------------------------------------------------------------------------------
# Weights over training
# --------------------------------------------------------------------------------------------


def weight_histogram_over_time(
    snapshots: Any,
    bins: int | Sequence[float] = 50,
    value_range: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Histogram of weight values at every snapshot, with one set of edges for all of them.

    This is the data behind the thesis' figures 4.6/4.7 (a top-down view of histograms over
    training): column ``t`` is the histogram at snapshot ``t``.

    Args:
        snapshots: float array (n_snapshots, n_values), e.g. the flattened final linear layer at
            each logged step (as the trainer records them).
        bins: number of equal-width bins, or explicit increasing edges.
        value_range: ``(lo, hi)`` for the bins; default: min and max over all snapshots.

    Returns:
        ``(counts, edges)``: int64 (bins, n_snapshots), columns summing to ``n_values`` (values
        outside an explicit range are dropped); float64 edges (bins + 1,).
    """
    s = _as_numpy(snapshots).astype(np.float64)
    if s.ndim != 2:
        raise ValueError(f"snapshots must be 2-D (n_snapshots, n_values), got shape {s.shape}")
    if s.size == 0:
        raise ValueError(f"snapshots is empty (shape {s.shape})")
    if not np.isfinite(s).all():
        raise ValueError("snapshots contain NaN or inf")
    if isinstance(bins, (int, np.integer)):
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got {bins}")
        lo, hi = (float(s.min()), float(s.max())) if value_range is None else value_range
        if not hi > lo:
            lo, hi = lo - 0.5, hi + 0.5  # all values equal: one centred unit-wide range
        edges = np.linspace(lo, hi, int(bins) + 1)
    else:
        edges = np.asarray(bins, dtype=np.float64)
        if edges.ndim != 1 or edges.size < 2 or np.any(np.diff(edges) <= 0):
            raise ValueError(f"bins must be an int or increasing edges, got {bins!r}")
    n_bins = edges.size - 1
    # searchsorted with the last edge closed, as np.histogram does
    idx = np.searchsorted(edges, s, side="right") - 1
    idx[s == edges[-1]] = n_bins - 1
    inside = (idx >= 0) & (idx < n_bins)
    n_snap = s.shape[0]
    t = np.broadcast_to(np.arange(n_snap)[:, None], s.shape)
    flat = idx[inside] * n_snap + t[inside]
    counts = np.bincount(flat, minlength=n_bins * n_snap).reshape(n_bins, n_snap)
    return counts.astype(np.int64), edges
