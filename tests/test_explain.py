"""Tests for dyckbook.explain: oracles on hand-built patterns, brute force, and a tiny real model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dyckbook import explain as E

PAIRS = "()[]{}"


# ------------------------------------------------------------------------------------------------
# helpers (independent of the code under test)
# ------------------------------------------------------------------------------------------------


def random_dyck(rng: np.random.Generator, n: int, k: int = 2) -> str:
    """A random balanced string of even length n (not uniform; fine for tests)."""
    out, stack = [], []
    for i in range(n):
        remaining = n - i
        if stack and (remaining == len(stack) or rng.random() < 0.5):
            out.append(PAIRS[2 * stack.pop() + 1])
        else:
            t = int(rng.integers(k))
            stack.append(t)
            out.append(PAIRS[2 * t])
    return "".join(out)


def stack_matching(s: str) -> list[int]:
    """Dyck matching by an explicit Python stack (greedy on non-members, as documented)."""
    m, stack = [-1] * len(s), []
    for i, ch in enumerate(s):
        a = PAIRS.index(ch)
        if a % 2 == 0:
            stack.append(i)
        elif stack and PAIRS.index(s[stack[-1]]) // 2 == a // 2:
            j = stack.pop()
            m[i], m[j] = j, i
    return m


def to_tokens(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([len(s) for s in strings], dtype=np.int64)
    tok = np.full((len(strings), int(lens.max()) + 2), E.PAD, dtype=np.int64)
    for b, s in enumerate(strings):
        tok[b, 0] = E.START
        tok[b, 1 : 1 + len(s)] = [3 + PAIRS.index(c) for c in s]
        tok[b, 1 + len(s)] = E.END
    return tok, lens


def random_patterns(rng, n_layers, batch, n_heads, lens, n_pos, causal=False):
    """Softmax-like rows over the allowed keys, zeros elsewhere."""
    masked = E.attention_mask(lens, n_pos, "causal" if causal else "bidirectional")
    p = rng.random((n_layers, batch, n_heads, n_pos, n_pos)) ** 3
    p = np.where(masked[None, :, None], 0.0, p)
    s = p.sum(-1, keepdims=True)
    return np.where(s > 0, p / np.where(s > 0, s, 1), 0.0)


# ------------------------------------------------------------------------------------------------
# bookkeeping
# ------------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=PAIRS, max_size=14), min_size=1, max_size=6))
def test_bracket_matching_equals_python_stack(strings):
    strings = [s for s in strings] or [""]
    if max(len(s) for s in strings) == 0:
        strings = strings + ["()"]
    tok, lens = to_tokens(strings)
    codes, lens2 = E.tokens_to_codes(tok, lens)
    assert np.array_equal(lens, lens2)
    m, depth = E.bracket_matching(codes, lens)
    for b, s in enumerate(strings):
        assert m[b, : len(s)].tolist() == stack_matching(s)
        assert np.all(m[b, len(s) :] == -1)
        # the pair's depth is the stack height after pushing its opener
        match = stack_matching(s)
        height, expect = 0, [0] * len(s)
        for i, ch in enumerate(s):
            if PAIRS.index(ch) % 2 == 0:
                height += 1
                expect[i] = height
            elif match[i] >= 0:
                height -= 1
                expect[i] = expect[match[i]]
        expect = [e if j >= 0 else 0 for e, j in zip(expect, match)]
        assert depth[b, : len(s)].tolist() == expect


def test_shuffle_matching_uses_one_stack_per_type():
    tok, lens = to_tokens(["([)]"])
    codes, _ = E.tokens_to_codes(tok, lens)
    m_dyck, _ = E.bracket_matching(codes, lens)
    m_shuf, _ = E.bracket_matching(codes, lens, shuffle=True)
    assert m_dyck[0].tolist() == [-1, 3, -1, 1]  # ")" cannot close "[" and stays unmatched
    assert m_shuf[0].tolist() == [2, 3, 0, 1]


def test_matching_agrees_with_languages_module():
    languages = pytest.importorskip("dyckbook.languages")
    rng = np.random.default_rng(3)
    lang = languages.Dyck(3)
    for s in lang.sample(rng, [2, 8, 14, 20]):
        tok, lens = to_tokens([s])
        codes, _ = E.tokens_to_codes(tok, lens)
        m, _ = E.bracket_matching(codes, lens)
        assert m[0].tolist() == list(lang.matching(s))


def test_tokens_to_codes_rejects_specials_inside_the_string():
    tok = np.array([[0, 3, 2, 4, 2]])
    with pytest.raises(ValueError, match="special"):
        E.tokens_to_codes(tok, np.array([3]))
    with pytest.raises(ValueError, match="tokens must be 2-D"):
        E.tokens_to_codes(np.array([0, 3, 4, 2]))


def test_to_token_positions_shifts_by_start():
    assert E.to_token_positions(np.array([1, 0, -1])).tolist() == [-1, 2, 1, -1, -1]


# ------------------------------------------------------------------------------------------------
# minmax_scale
# ------------------------------------------------------------------------------------------------


def test_minmax_scale_maps_unmasked_extremes_and_keeps_mask():
    rng = np.random.default_rng(0)
    p = rng.random((2, 3, 6, 6))
    mask = np.triu(np.ones((6, 6), dtype=bool), k=1)
    p_masked_big = np.where(mask, 10.0, p)  # masked cells must not influence the range
    out = E.minmax_scale(p_masked_big, mask=mask)
    assert isinstance(out, np.ma.MaskedArray)
    assert np.array_equal(np.ma.getmaskarray(out), np.broadcast_to(mask, p.shape))
    assert np.allclose(out.min(axis=(-2, -1)), -1.0)
    assert np.allclose(out.max(axis=(-2, -1)), 1.0)
    # affine per matrix: order of unmasked cells preserved
    a = p[0, 0][~mask]
    b = out[0, 0].compressed()
    assert np.array_equal(np.argsort(a, kind="stable"), np.argsort(b, kind="stable"))


def test_minmax_scale_constant_matrix_and_bad_mask():
    out = E.minmax_scale(np.full((3, 3), 0.2))
    assert np.all(out == 0.0)
    with pytest.raises(ValueError, match="mask"):
        E.minmax_scale(np.ones((3, 3)), mask=np.ones((2, 2), dtype=bool))


# ------------------------------------------------------------------------------------------------
# matching_attention
# ------------------------------------------------------------------------------------------------


def test_all_mass_on_partner_gives_one():
    strings = ["(())", "()[]", "([{}])"]
    tok, lens = to_tokens(strings)
    n_pos = tok.shape[1]
    p = np.zeros((2, len(strings), 1, n_pos, n_pos))
    for b, s in enumerate(strings):
        for i, j in enumerate(stack_matching(s)):
            p[:, b, :, i + 1, j + 1] = 1.0
    res = E.matching_attention(p, tok, lens)
    assert res.count.tolist() == [14, 7, 7]
    assert np.allclose(res.mean["matching"], 1.0)
    for c in E.KEY_CATEGORIES:
        if c != "matching":
            assert np.allclose(res.mean[c], 0.0)


def test_uniform_attention_gives_expected_fractions():
    s = "(()[])"  # n = 6: 8 real tokens
    tok, lens = to_tokens([s])
    p = np.full((1, 1, 1, 8, 8), 1 / 8)
    res = E.matching_attention(p, tok, lens)
    assert np.allclose(res.mean["matching"], 1 / 8)
    assert np.allclose(res.mean["self"], 1 / 8)
    assert np.allclose(res.mean["start"], 1 / 8)
    assert np.allclose(res.mean["end"], 1 / 8)
    assert np.allclose(res.mean["pad"], 0.0)
    # type 0 has 4 brackets, type 1 has 2: same_type excludes self and partner
    same = (4 * (4 - 2) + 2 * (2 - 2)) / 6 / 8
    other = (4 * 2 + 2 * 4) / 6 / 8
    assert np.allclose(res.mean["same_type"][0], same)
    assert np.allclose(res.mean["other_type"][0], other)
    assert np.allclose(res.chance, 1 / 8)
    total = sum(res.mean[c] for c in E.KEY_CATEGORIES)
    assert np.allclose(total, 1.0)


def test_random_patterns_against_a_loop_oracle():
    rng = np.random.default_rng(1)
    strings = [random_dyck(rng, int(n), k=3) for n in rng.choice([2, 4, 6, 8, 10, 12], size=20)]
    strings += ["))((", "(]"]  # non-members: only greedily matched brackets count
    tok, lens = to_tokens(strings)
    p = random_patterns(rng, 2, len(strings), 3, lens, tok.shape[1])
    res = E.matching_attention(p, tok, lens)
    got, cnt = np.zeros((3, 2, 3)), np.zeros(3)
    same_sum = np.zeros((2, 3))
    for b, s in enumerate(strings):
        for i, j in enumerate(stack_matching(s)):
            if j < 0:
                continue
            r = 1 if PAIRS.index(s[i]) % 2 == 0 else 2
            for rr in (0, r):
                got[rr] += p[:, b, :, i + 1, j + 1]
                cnt[rr] += 1
            t = PAIRS.index(s[i]) // 2
            for kk, ch in enumerate(s):
                if kk not in (i, j) and PAIRS.index(ch) // 2 == t:
                    same_sum += p[:, b, :, i + 1, kk + 1]
    assert np.array_equal(res.count, cnt)
    assert np.allclose(res.mean["matching"], got / cnt[:, None, None])
    assert np.allclose(res.mean["same_type"][0], same_sum / cnt[0])
    total = sum(res.mean[c] for c in E.KEY_CATEGORIES)
    assert np.allclose(total, 1.0)
    # groupings are consistent with the overall means
    for table in (res.by_depth, res.by_distance):
        c = table["count"]
        assert np.array_equal(c.sum(axis=1), res.count)
        w = np.nansum(table["matching"] * c[:, :, None, None], axis=1)
        assert np.allclose(w / res.count[:, None, None], res.mean["matching"])


def test_matching_given_explicitly_and_batched_inputs_agree():
    rng = np.random.default_rng(2)
    strings = [random_dyck(rng, 10), random_dyck(rng, 4), random_dyck(rng, 16)]
    tok, lens = to_tokens(strings)
    p = random_patterns(rng, 1, 3, 2, lens, tok.shape[1])
    whole = E.matching_attention(p, tok, lens)
    m = np.full((3, 16), -1)
    for b, s in enumerate(strings):
        m[b, : len(s)] = stack_matching(s)
    explicit = E.matching_attention(p, tok, lens, m)
    # the same data split into two batches of different widths
    t1, l1 = to_tokens(strings[:2])
    w = t1.shape[1]
    parts = E.matching_attention([p[:, :2, :, :w, :w], p[:, 2:]], [t1, tok[2:]], [l1, lens[2:]])
    for other in (explicit, parts):
        for c in E.KEY_CATEGORIES:
            assert np.allclose(other.mean[c], whole.mean[c])
        assert np.array_equal(other.by_depth["depth"], whole.by_depth["depth"])
        assert np.allclose(other.by_depth["matching"], whole.by_depth["matching"], equal_nan=True)


def test_causal_chance_and_distance_bins():
    s = "(())"
    tok, lens = to_tokens([s])
    p = random_patterns(np.random.default_rng(0), 1, 1, 1, lens, 6, causal=True)
    res = E.matching_attention(p, tok, lens, mask="causal", distance_bins=[1, 2, 4, 8])
    # openers cannot see their partner under a causal mask
    assert res.mean["matching"][res.role("opener")] == 0.0
    assert res.chance[res.role("opener")] == 0.0
    # closers at token positions 3 and 4 see 4 and 5 keys
    assert np.isclose(res.chance[res.role("closer")], (1 / 4 + 1 / 5) / 2)
    assert res.by_distance["edges"].tolist() == [1, 2, 4, 8]
    assert res.by_distance["count"][0].tolist() == [2, 2, 0]  # distances 1, 1, 3, 3
    d = res.to_dict()
    assert d["by_distance"]["matching"][0][2] == [[None]]


def test_matching_attention_rejects_bad_input():
    tok, lens = to_tokens(["()"])
    with pytest.raises(ValueError, match="patterns must be 5-D"):
        E.matching_attention(np.zeros((4, 4)), tok, lens)
    with pytest.raises(ValueError, match="mask"):
        E.matching_attention(np.zeros((1, 1, 1, 4, 4)), tok, lens, mask="future")
    with pytest.raises(ValueError, match="tokens shape"):
        E.matching_attention(np.zeros((1, 1, 1, 5, 5)), tok, lens)


# ------------------------------------------------------------------------------------------------
# end self-attention and ROC-AUC
# ------------------------------------------------------------------------------------------------


def test_end_self_attention_reads_the_end_diagonal():
    rng = np.random.default_rng(0)
    lens = np.array([0, 3, 5])
    p = rng.random((2, 3, 2, 7, 7))
    out = E.end_self_attention(p, lens)
    assert out.shape == (2, 3, 2)
    for b, n in enumerate(lens):
        assert np.array_equal(out[:, b], p[:, b, :, n + 1, n + 1])
    with pytest.raises(ValueError, match="beyond pos"):
        E.end_self_attention(p, np.array([0, 3, 6]))


def brute_auc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=40).filter(
        lambda xs: 0 < sum(y for _, y in xs) < len(xs)
    )
)
def test_roc_auc_equals_pairwise_count_with_ties(pairs):
    scores = np.array([s / 5 for s, _ in pairs])  # small integer range: many ties
    labels = np.array([int(y) for _, y in pairs])
    auc = E.roc_auc(scores, labels)
    assert auc == pytest.approx(brute_auc(scores, labels))
    fpr, tpr = E.roc_curve(scores, labels)
    assert np.trapezoid(tpr, fpr) == pytest.approx(auc)
    assert E.roc_auc(-scores, labels) == pytest.approx(1 - auc)


def test_roc_auc_errors():
    with pytest.raises(ValueError, match="both classes"):
        E.roc_auc([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="0/1"):
        E.roc_auc([0.1, 0.2], [1, 2])
    with pytest.raises(ValueError, match="NaN"):
        E.roc_auc([np.nan, 0.2], [1, 0])


def test_preview_auc_and_symmetric_auc():
    labels = np.array([1, 1, 0, 0, 1, 0])
    s = np.zeros((2, 6, 1))
    s[0, :, 0] = labels + 0.1  # perfectly predictive
    s[1, :, 0] = -labels  # perfectly predictive, reversed direction
    pv = E.preview_auc(s, labels)
    assert pv.auc[:, 0].tolist() == [1.0, 0.0]
    assert pv.auc_sym[:, 0].tolist() == [1.0, 1.0]
    assert pv.to_dict()["n_pos"] == 3


# ------------------------------------------------------------------------------------------------
# long inputs
# ------------------------------------------------------------------------------------------------


def test_long_input_summary_small_against_brute_force():
    rng = np.random.default_rng(4)
    n = 37
    p = rng.random((n + 3, n + 3))
    p[:, n:] = 0.0  # pads
    p = p / p.sum(1, keepdims=True)
    m = rng.permutation(n)
    summ = E.long_input_summary(p, length=n, matching=m, top_k=3, max_blocks=8)
    q_idx, k_idx = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    d = k_idx - q_idx
    pc = p[:n, :n]
    for j in range(len(summ.offset_edges) - 1):
        lo, hi = summ.offset_edges[j], summ.offset_edges[j + 1]
        nb = len(summ.offset_edges) - 1
        right = ((d >= lo) & (d < hi)).astype(float)
        left = ((-d >= lo) & (-d < hi)).astype(float)
        assert np.allclose(summ.offset_mass[:, nb + 1 + j], (pc * right).sum(1))
        assert np.allclose(summ.offset_mass[:, nb - 1 - j], (pc * left).sum(1))
    assert np.allclose(summ.offset_mass.sum(1), pc.sum(1))
    ent = -(pc * np.log(pc)).sum(1)
    assert np.allclose(summ.entropy, ent)
    assert np.array_equal(summ.top_keys[:, 0], pc.argmax(1))
    assert np.allclose(summ.top_weights, -np.sort(-pc, axis=1)[:, :3])
    assert np.allclose(summ.matching_mass, pc[np.arange(n), m])
    assert summ.block_mean.shape == (8, 8)


@pytest.mark.slow
def test_long_input_summary_4096_shapes_and_mass():
    rng = np.random.default_rng(5)
    n = 4096
    p = rng.random((n, n), dtype=np.float32)
    p /= p.sum(1, keepdims=True)
    summ = E.long_input_summary(p, top_k=4)
    n_bins = len(summ.offset_edges) - 1
    assert summ.offset_edges[-1] >= n
    assert summ.entropy.shape == (n,)
    assert summ.offset_mass.shape == (n, 2 * n_bins + 1)
    assert summ.top_keys.shape == (n, 4) and summ.top_weights.shape == (n, 4)
    assert summ.block_mean.shape == (256, 256) and summ.block_max.shape == (256, 256)
    widths = np.diff(summ.block_edges)
    total = (summ.block_mean * np.outer(widths, widths)).sum()
    assert total == pytest.approx(float(p.astype(np.float64).sum()), rel=1e-9)
    assert np.allclose(summ.offset_mass.sum(1), p.astype(np.float64).sum(1))
    assert summ.block_max.max() == pytest.approx(float(p.max()))
    assert np.all((summ.entropy_norm > 0.9) & (summ.entropy_norm <= 1.0 + 1e-9))


# ------------------------------------------------------------------------------------------------
# weight histograms
# ------------------------------------------------------------------------------------------------


def test_weight_histogram_counts_sum_to_n_values_and_match_numpy():
    rng = np.random.default_rng(6)
    snaps = rng.normal(size=(7, 513)) * np.linspace(0.5, 2, 7)[:, None]
    counts, edges = E.weight_histogram_over_time(snaps, bins=30)
    assert counts.shape == (30, 7) and edges.shape == (31,)
    assert np.all(counts.sum(0) == 513)
    for t in range(7):
        assert np.array_equal(counts[:, t], np.histogram(snaps[t], bins=edges)[0])
    counts2, _ = E.weight_histogram_over_time(np.zeros((3, 4)), bins=5)
    assert np.all(counts2.sum(0) == 4)
    with pytest.raises(ValueError, match="snapshots must be 2-D"):
        E.weight_histogram_over_time(np.zeros(4))


# ------------------------------------------------------------------------------------------------
# with a real (tiny) model
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_model():
    torch = pytest.importorskip("torch")
    model_mod = pytest.importorskip("dyckbook.model")
    torch.set_num_threads(1)
    cfg = model_mod.ModelConfig(
        d_vocab=9, n_ctx=16, d_model=16, n_heads=2, d_mlp=32, n_layers=2, pos_encoding="learned"
    )
    return model_mod.TransformerClassifier(cfg, generator=torch.Generator().manual_seed(0))


def test_attention_patterns_equal_the_cache(tiny_model):
    import torch

    rng = np.random.default_rng(7)
    strings = [random_dyck(rng, n, k=3) for n in (2, 8, 16, 6)]
    tok, lens = to_tokens(strings)
    tiny_model.train()
    pats = E.attention_patterns(tiny_model, torch.as_tensor(tok))
    assert tiny_model.training  # mode restored
    assert pats.shape == (2, 4, 2, 18, 18)
    tiny_model.eval()
    with torch.no_grad():
        _, cache = tiny_model.run_with_cache(torch.as_tensor(tok))
    for layer in range(2):
        assert np.array_equal(pats[layer], cache[f"blocks.{layer}.attn.hook_pattern"].numpy())
    masked = E.attention_mask(lens, 18)
    real_rows = ~masked.all(-1)  # (batch, query)
    sums = pats.sum(-1)  # (layer, batch, head, query)
    assert np.allclose(sums.transpose(0, 2, 1, 3)[:, :, real_rows], 1.0, atol=1e-5)
    assert np.all(np.where(masked[None, :, None] & real_rows[None, :, None, :, None], pats, 0) == 0)


def test_model_level_measures(tiny_model):
    import torch

    rng = np.random.default_rng(8)
    pos = [random_dyck(rng, n, k=3) for n in (4, 8, 12, 16)]
    neg = ["))((", "(]()", "((((((", ")(" * 8]
    batches = []
    for strings, label in ((pos, 1), (neg, 0)):
        tok, lens = to_tokens(strings)
        batches.append(
            {
                "tokens": torch.as_tensor(tok),
                "lengths": torch.as_tensor(lens),
                "labels": torch.full((4,), label),
            }
        )
    pv = E.preview_statistic(tiny_model, batches)
    assert pv.scores.shape == (2, 8, 2) and pv.auc.shape == (2, 2)
    assert np.all((pv.auc >= 0) & (pv.auc <= 1)) and np.all(pv.auc_sym >= 0.5)
    res = E.matching_attention_for_model(tiny_model, batches)
    assert res.mean["matching"].shape == (3, 2, 2)
    assert np.allclose(sum(res.mean[c] for c in E.KEY_CATEGORIES), 1.0, atol=1e-5)
