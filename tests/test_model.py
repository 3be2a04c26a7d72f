"""Tests for dyckbook.model: fast path vs cache, attention properties, readouts, save/load, errors."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from dyckbook.model import (
    MASKS,
    NORMS,
    POS_ENCODINGS,
    READOUTS,
    ModelConfig,
    TransformerClassifier,
    load_model,
    save_model,
)

torch.set_num_threads(1)

START, PAD, END = 0, 1, 2  # the tokenizer's contract, restated as the oracle
VOCAB = 7  # specials + "()[]"


def make_tokens(seed: int, batch: int = 6, max_len: int = 8, fixed: int | None = None) -> torch.Tensor:
    """Random bracket strings (any symbols), laid out [start] s [end] [pad]..."""
    g = torch.Generator().manual_seed(seed)
    lengths = (
        torch.full((batch,), fixed) if fixed is not None else torch.randint(0, max_len + 1, (batch,), generator=g)
    )
    width = int(lengths.max()) + 2
    tokens = torch.full((batch, width), PAD, dtype=torch.long)
    for b, n in enumerate(lengths.tolist()):
        tokens[b, 0] = START
        tokens[b, 1 : n + 1] = torch.randint(3, VOCAB, (n,), generator=g)
        tokens[b, n + 1] = END
    return tokens


def tiny(seed: int = 0, **overrides) -> TransformerClassifier:
    fields = {"d_vocab": VOCAB, "n_ctx": 10, "d_model": 16, "n_heads": 2, "d_mlp": 32, "n_layers": 2,
              "dropout": 0.0}
    fields.update(overrides)
    model = TransformerClassifier(ModelConfig(**fields), generator=torch.Generator().manual_seed(seed))
    return model.eval()


def visible(tokens: torch.Tensor, mask: str) -> torch.Tensor:
    """Independent oracle of the attention mask: (batch, query, key) bool, by loops."""
    batch, n = tokens.shape
    out = torch.zeros(batch, n, n, dtype=torch.bool)
    for b in range(batch):
        for q in range(n):
            for k in range(n):
                out[b, q, k] = tokens[b, k] != PAD and (mask == "bidirectional" or k <= q)
    return out


@pytest.mark.parametrize(
    "mask,pos,readout,norm", list(itertools.product(MASKS, POS_ENCODINGS, READOUTS, NORMS))
)
def test_fast_path_equals_cached_path(mask, pos, readout, norm):
    model = tiny(mask=mask, pos_encoding=pos, readout=readout, norm=norm)
    for tokens in (make_tokens(1), make_tokens(2, fixed=5)):  # with pads, and a pad-free batch
        fast = model(tokens)
        cached, cache = model.run_with_cache(tokens)
        assert torch.allclose(fast, cached, atol=1e-5, rtol=1e-5)
        assert torch.equal(cache["hook_logits"], cached.detach())
        assert torch.isfinite(fast).all()


@pytest.mark.parametrize(
    "mask,readout,norm,n_layers",
    list(itertools.product(MASKS, ("start", "end"), NORMS, (1, 2))),
)
def test_single_query_last_block_equals_full_last_block(mask, readout, norm, n_layers):
    """The fast path computes the last block only at the read position: same logits and same
    gradients as running every position (train mode, dropout off so both draw nothing)."""
    model = tiny(mask=mask, readout=readout, norm=norm, n_layers=n_layers, pos_encoding="learned")
    model.train()
    batches = (make_tokens(4), make_tokens(5, fixed=6), make_tokens(6, batch=1, fixed=0))
    for tokens in batches:  # with pads, pad-free, and the empty string alone
        grads = []
        for single in (True, False):
            model.single_query_readout = single
            model.zero_grad()
            logits = model(tokens)
            (logits * torch.arange(1, 3)).sum().backward()
            grads.append((logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        (fast, fast_grads), (full, full_grads) = grads
        assert fast.shape == (tokens.shape[0], 2)
        assert torch.allclose(fast, full, atol=1e-5, rtol=1e-5)
        for name, grad in full_grads.items():
            assert torch.allclose(fast_grads[name], grad, atol=1e-5, rtol=1e-4), name
    model.single_query_readout = True


@pytest.mark.parametrize("residual", [True, False])
def test_fast_path_equals_cached_path_without_residual(residual):
    model = tiny(norm="none", residual=residual, pos_encoding="learned", readout="mean")
    tokens = make_tokens(3)
    assert torch.allclose(model(tokens), model.run_with_cache(tokens)[0], atol=1e-5)


@pytest.mark.parametrize("mask", MASKS)
def test_attention_rows_sum_to_one_and_pads_get_nothing(mask):
    model = tiny(mask=mask, pos_encoding="sinusoidal")
    tokens = make_tokens(4)
    _, cache = model.run_with_cache(tokens)
    allowed = visible(tokens, mask)[:, None]  # (batch, 1, query, key)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        assert pattern.shape == (tokens.shape[0], 2, tokens.shape[1], tokens.shape[1])
        assert torch.allclose(pattern.sum(-1), torch.ones(pattern.shape[:-1]), atol=1e-6)
        assert (pattern.masked_select(~allowed.expand_as(pattern)) == 0).all()
        if mask == "causal":
            assert torch.equal(pattern, pattern.tril())


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("mask", MASKS)
def test_cached_patterns_match_independent_attention(norm, mask):
    model = tiny(mask=mask, norm=norm, pos_encoding="learned")
    tokens = make_tokens(5)
    _, cache = model.run_with_cache(tokens)
    allowed = visible(tokens, mask)
    d, h = 16, 2
    for layer, block in enumerate(model.blocks):
        x = cache[f"blocks.{layer}.hook_resid_pre"]
        if norm == "pre":
            x = F.layer_norm(x, (d,), block.ln1.weight, block.ln1.bias)
        w, bias = block.attn.qkv.weight, block.attn.qkv.bias
        for head in range(h):
            rows = slice(head * d // h, (head + 1) * d // h)
            q = x @ w[:d][rows].T + bias[:d][rows]
            k = x @ w[d : 2 * d][rows].T + bias[d : 2 * d][rows]
            scores = q @ k.transpose(1, 2) / math.sqrt(d // h)
            scores = scores.masked_fill(~allowed, float("-inf"))
            expected = torch.softmax(scores, dim=-1)
            got = cache[f"blocks.{layer}.attn.hook_pattern"][:, head]
            assert torch.allclose(got, expected, atol=1e-6)
        if layer + 1 < len(model.blocks):
            # the next layer reads exactly this layer's output: one forward pass, not re-applied layers
            assert torch.equal(cache[f"blocks.{layer}.hook_resid_post"], cache[f"blocks.{layer + 1}.hook_resid_pre"])


def test_first_residual_is_embedding_plus_pe_added_once():
    model = tiny(pos_encoding="learned")
    tokens = make_tokens(6)
    _, cache = model.run_with_cache(tokens)
    expected = model.embed.weight[tokens] + model.pos_embed.weight[: tokens.shape[1]]
    assert torch.allclose(cache["blocks.0.hook_resid_pre"], expected)


def test_absolute_pe_is_i_over_own_length():
    model = tiny(pos_encoding="absolute")
    tokens = make_tokens(7)
    _, cache = model.run_with_cache(tokens)
    pe = cache["hook_pos_embed"]  # (batch, pos, d_model)
    n_real = (tokens != PAD).sum(1)
    for b in range(tokens.shape[0]):
        for i in range(int(n_real[b])):
            assert torch.allclose(pe[b, i], (i / n_real[b]) * model.pos_direction)


def test_start_readout_is_constant_under_causal_mask():
    """The thesis' artifact: [start] sees only itself, so every input gets the same logits."""
    for pos in POS_ENCODINGS:
        model = tiny(mask="causal", readout="start", pos_encoding=pos)
        logits = model(make_tokens(8, batch=12))
        assert torch.allclose(logits, logits[:1].expand_as(logits), atol=1e-6), pos
    other = tiny(mask="causal", readout="end")(make_tokens(8, batch=12))
    assert other.std(0).max() > 1e-4  # the [end] readout does depend on the input


@pytest.mark.parametrize("readout", ["start", "mean", "end"])
def test_bidirectional_without_pe_is_order_blind(readout):
    model = tiny(mask="bidirectional", pos_encoding="none", readout=readout)
    tokens = make_tokens(9, batch=1, fixed=8)
    g = torch.Generator().manual_seed(0)
    perms = [tokens]
    for _ in range(4):
        shuffled = tokens.clone()
        shuffled[0, 1:9] = tokens[0, 1:9][torch.randperm(8, generator=g)]
        perms.append(shuffled)
    _, cache0 = model.run_with_cache(tokens)
    for shuffled in perms[1:]:
        _, cache = model.run_with_cache(shuffled)
        assert torch.allclose(cache["hook_readout"], cache0["hook_readout"], atol=1e-5)
    # a positional encoding breaks the symmetry
    positional = tiny(mask="bidirectional", pos_encoding="learned", readout=readout)
    outs = torch.stack([positional.run_with_cache(t)[1]["hook_readout"] for t in perms])
    assert (outs - outs[:1]).abs().max() > 1e-4


def test_leftmost_hard_attention_is_one_hot_in_eval_only():
    model = tiny(eval_attention="leftmost_hard")
    tokens = make_tokens(10)
    _, cache = model.run_with_cache(tokens)
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        assert torch.equal(pattern.sum(-1), torch.ones(pattern.shape[:-1]))
        assert set(pattern.unique().tolist()) <= {0.0, 1.0}
        # the chosen key is the first maximal score
        chosen = pattern.argmax(-1)
        first_max = (scores == scores.amax(-1, keepdim=True)).float().argmax(-1)
        assert torch.equal(chosen, first_max)
    assert torch.allclose(model(tokens), model.run_with_cache(tokens)[0])
    model.train()
    _, cache = model.run_with_cache(tokens)
    assert not set(cache["blocks.0.attn.hook_pattern"].unique().tolist()) <= {0.0, 1.0}


def test_average_hard_attention_is_uniform_over_maxima():
    model = tiny(eval_attention="average_hard", pos_encoding="none")
    tokens = torch.tensor([[START, 3, 3, 3, 4, 4, END, PAD]])  # equal tokens give tied scores
    _, cache = model.run_with_cache(tokens)
    found_tie = False
    for layer in range(2):
        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"]
        ties = scores == scores.amax(-1, keepdim=True)
        expected = ties.float() / ties.sum(-1, keepdim=True)
        assert torch.allclose(pattern, expected)
        found_tie |= bool((ties.sum(-1) > 1).any())
    assert found_tie
    assert torch.allclose(model(tokens), model.run_with_cache(tokens)[0])


def test_all_pad_row_and_pad_queries_are_finite():
    for mask in MASKS:
        model = tiny(mask=mask)
        tokens = make_tokens(11)
        tokens[0] = PAD  # a degenerate all-pad row must not poison the batch with NaN
        logits, cache = model.run_with_cache(tokens)
        assert torch.isfinite(logits).all() and torch.isfinite(model(tokens)).all()
        assert torch.isfinite(cache["blocks.1.hook_resid_post"]).all()


def test_readouts_pick_the_right_positions():
    tokens = make_tokens(12)
    n_real = (tokens != PAD).sum(1)
    for readout in READOUTS:
        _, cache = tiny(readout=readout).run_with_cache(tokens)
        final = cache["blocks.1.hook_resid_post"]
        if readout == "start":
            expected = final[:, 0]
        elif readout == "end":
            expected = final[torch.arange(len(tokens)), n_real - 1]
            assert (tokens[torch.arange(len(tokens)), n_real - 1] == END).all()
        else:
            expected = torch.stack([final[b, : n_real[b]].mean(0) for b in range(len(tokens))])
        assert torch.allclose(cache["hook_readout"], expected, atol=1e-6)


def test_default_config_matches_thesis_parameter_count():
    model = TransformerClassifier(ModelConfig(d_vocab=5, n_ctx=16))
    assert model.n_params == 1_056_002  # the thesis library's experiment-1 count


def test_generator_init_is_deterministic_and_leaves_global_rng():
    state = torch.get_rng_state()
    a = tiny(seed=3, pos_encoding="absolute")
    b = tiny(seed=3, pos_encoding="absolute")
    assert torch.equal(torch.get_rng_state(), state)
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), name


def test_names_filter():
    model = tiny()
    _, cache = model.run_with_cache(make_tokens(13), names=["blocks.1.attn.hook_pattern"])
    assert list(cache) == ["blocks.1.attn.hook_pattern"]
    _, cache = model.run_with_cache(make_tokens(13), names=lambda n: n.endswith("hook_pattern"))
    assert sorted(cache) == ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"]


def test_config_round_trip_and_derived_values():
    cfg = ModelConfig(d_vocab=9, n_ctx=32, d_model=64, n_heads=4, mask="causal", readout="end")
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.d_head == 16 and cfg.n_positions == 34
    with pytest.raises(ValueError, match="unknown keys"):
        ModelConfig.from_dict({**cfg.to_dict(), "n_head": 2})


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"mask": "sideways"}, "mask.*'sideways'"),
        ({"pos_encoding": "rope"}, "pos_encoding.*'rope'"),
        ({"readout": "cls"}, "readout.*'cls'"),
        ({"norm": "batch"}, "norm.*'batch'"),
        ({"eval_attention": "hard"}, "eval_attention.*'hard'"),
        ({"d_model": 30, "n_heads": 4}, r"d_model \(30\).*n_heads \(4\)"),
        ({"n_layers": 0}, "n_layers.*0"),
        ({"d_model": -8}, "d_model.*-8"),
        ({"dropout": 1.0}, "dropout.*1.0"),
        ({"dropout": -0.1}, "dropout.*-0.1"),
        ({"residual": "yes"}, "residual"),
    ],
)
def test_bad_configs_raise_clear_errors(overrides, pattern):
    fields = {"d_vocab": VOCAB, "n_ctx": 10}
    fields.update(overrides)
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(**fields)


def test_bad_tokens_raise_clear_errors():
    model = tiny()
    with pytest.raises(ValueError, match=r"n_ctx=10.*12|12.*n_ctx=10"):
        model(make_tokens(0, batch=2, fixed=11))
    with pytest.raises(ValueError, match="int64"):
        model(make_tokens(0).float())
    with pytest.raises(ValueError, match="2-D"):
        model(make_tokens(0)[0])
    with pytest.raises(ValueError, match="id 7"):
        model(torch.tensor([[START, 7, END]]))
    with pytest.raises(ValueError, match="id -1"):
        model.run_with_cache(torch.tensor([[START, -1, END]]))
    model(make_tokens(0, batch=2, fixed=10))  # exactly n_ctx is fine


def test_save_load_round_trip(tmp_path):
    model = tiny(pos_encoding="sinusoidal", readout="mean", norm="pre")
    path = tmp_path / "m.pt"
    save_model(model, path)
    loaded = load_model(path)
    assert loaded.config == model.config
    tokens = make_tokens(14)
    assert torch.equal(loaded(tokens), model(tokens))
    assert not loaded.training


def test_load_reports_mismatches(tmp_path):
    model = tiny()
    path = tmp_path / "m.pt"
    save_model(model, path)
    payload = torch.load(path, weights_only=True)
    payload["state_dict"].pop("classifier.bias")
    payload["state_dict"]["blocks.0.attn.qkv.weight"] = torch.zeros(3, 3)
    payload["state_dict"]["extra.weight"] = torch.zeros(1)
    torch.save(payload, path)
    with pytest.raises(ValueError) as info:
        load_model(path)
    message = str(info.value)
    assert "classifier.bias" in message and "extra.weight" in message
    assert "blocks.0.attn.qkv.weight" in message and "(3, 3)" in message
    torch.save({"not": "a model"}, path)
    with pytest.raises(ValueError, match="not a dyckbook model"):
        load_model(path)
