"""Tests for dyckbook.nn.kernels: the C kernels compute what torch computes (values and gradients),
step aside where they do not apply, and a machine without a compiler falls back to torch."""

import os
import subprocess
import sys

import pytest
import torch

from dyckbook.nn import blocks, kernels
from dyckbook.nn.model import Classifier, ModelConfig
from dyckbook.nn.seq2seq import Seq2SeqConfig, build_seq2seq

pytestmark = pytest.mark.skipif(not kernels.available(), reason="no C compiler")


def _both(fn):
    """``fn()`` with the kernels, then with torch only; each is (outputs, gradients). Checks
    that the first went through the kernels and the second did not."""
    calls = []
    real = kernels._load

    def counting():
        calls.append(real() is not None)
        return real()

    kernels._load = counting
    try:
        fused = fn()
        assert any(calls), "the kernels were not used"
        calls.clear()
        with kernels.torch_only():
            plain = fn()
        assert not any(calls)
    finally:
        kernels._load = real
    return fused, plain


def _close(a, b, atol=2e-5):
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape
        assert torch.allclose(x, y, atol=atol, rtol=1e-4), (x - y).abs().max()


def _attention_case(n_heads, d_head, n_pos, mask, causal, query, memory, dropout):
    """Outputs and gradients (input, memory, every parameter) of one Attention layer."""
    torch.manual_seed(0)
    n, batch, d = 2, 5, n_heads * d_head
    streams = [torch.Generator().manual_seed(s) for s in (1, 2)]
    layer = blocks.Attention(n, d, n_heads, dropout, streams, n_positions=n_pos + 3)
    blocks.init_models(layer, [5, 6])
    layer.train(dropout > 0)
    x = torch.randn(n, batch, n_pos, d, requires_grad=True)
    mem = torch.randn(n, batch, n_pos + 3, d, requires_grad=True) if memory else None
    n_keys = n_pos + 3 if memory else n_pos
    keys = None
    if mask:  # rows of 0..n_keys visible keys, one of them with none (it then sees every key)
        lengths = torch.tensor([0, 1, n_keys, 2, n_keys - 1] * n)
        keys = (torch.arange(n_keys) < lengths[:, None])[:, None, None, :]
    at = torch.tensor([[0, 1, n_pos - 1, 2, 3]] * n) if query else None
    for g in streams:  # every call draws the same dropout masks
        g.manual_seed(7)
    out = layer(x, keys, causal, memory=mem, query=at)
    wrt = [x, *([mem] if memory else []), *layer.parameters()]
    grads = torch.autograd.grad((out * torch.randn_like(out)).sum(), wrt)
    return [out, *grads]


@pytest.mark.parametrize("n_heads, d_head", [(1, 8), (2, 16), (3, 32), (1, 24)])
@pytest.mark.parametrize("mask, causal, query, memory", [
    (False, False, False, False), (True, False, False, False), (False, True, False, False),
    (True, True, False, False), (False, True, True, False), (True, False, True, False),
    (True, False, False, True), (False, False, False, True),
])
def test_attention_kernel_equals_torch(n_heads, d_head, mask, causal, query, memory):
    fused, plain = _both(lambda: _attention_case(n_heads, d_head, 7, mask, causal, query,
                                                 memory, 0.0))
    _close(fused, plain)


@pytest.mark.parametrize("n_pos", [1, 9, 17, 64])
def test_attention_kernel_with_dropout_draws_the_same_masks(n_pos):
    fused, plain = _both(lambda: _attention_case(2, 8, n_pos, True, False, False, False, 0.3))
    _close(fused, plain)


def test_attention_kernel_steps_aside_where_it_does_not_apply():
    q = torch.randn(3, 5, 3 * 16)
    assert kernels.attention(q, None, 2) is not None
    assert kernels.attention(q.double(), None, 2) is None  # float64
    assert kernels.attention(q[..., :36], None, 2) is None  # head width 6
    long = torch.randn(1, kernels.MAX_KEYS + 1, 3 * 16)
    assert kernels.attention(long, None, 2) is None
    # a mask that is not one row of keys per query row goes to torch, with the same result
    layer = blocks.Attention(1, 16, 2, 0.0, [torch.Generator()])
    blocks.init_models(layer, [0])
    x = torch.randn(1, 3, 4, 16)
    full = torch.rand(3, 1, 4, 4) > 0.3
    with kernels.torch_only():
        expected = layer(x, full)
    assert torch.equal(layer(x, full), expected)


def test_an_attention_kernel_that_steps_aside_leaves_the_dropout_draws_to_torch():
    # heads 6 wide: the kernel declines after the layer has asked it, and torch's path must
    # then draw the masks a torch-only run draws (not a second set after the kernel's); the
    # same holds for a model on a GPU, where the kernel always declines
    config = ModelConfig(k=2, n_ctx=10, d_model=12, n_heads=2, d_mlp=16, n_layers=2,
                         dropout=0.3, mask="causal", pos_encoding="learned", readout="mean")
    tokens = torch.randint(3, 7, (1, 4, 12))
    tokens[..., 0], tokens[..., 11] = 0, 2

    def twice():
        model = Classifier(config, [5]).train()
        return [model(tokens), model(tokens)]

    fused = twice()
    with kernels.torch_only():
        plain = twice()
    assert all(torch.equal(a, b) for a, b in zip(fused, plain))


@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("d", [8, 32, 256])
def test_layer_norm_kernel_equals_torch(residual, d):
    torch.manual_seed(1)
    norm = blocks.LayerNorm(3, d)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(3, 4, 5, d, requires_grad=True)
    y = torch.randn(3, 4, 5, d, requires_grad=True) if residual else None

    def case():
        out = norm(x, y)
        wrt = [x, *([y] if residual else []), norm.weight, norm.bias]
        return [out, *torch.autograd.grad((out * torch.randn_like(out)).sum(), wrt)]

    torch.manual_seed(2)
    fused = case()
    torch.manual_seed(2)
    with kernels.torch_only():
        plain = case()
    _close(fused, plain, atol=5e-5)
    assert kernels.layer_norm(x.double(), None, norm.weight.double(), norm.bias.double()) is None
    assert kernels.layer_norm(x[..., :6], None, norm.weight[:, :6], norm.bias[:, :6]) is None


@pytest.mark.parametrize("mask, readout, norm", [
    ("bidirectional", "start", "post"), ("causal", "end", "post"), ("causal", "mean", "pre"),
    ("bidirectional", "mean", "pre")])
def test_classifier_training_step_equals_torch(mask, readout, norm):
    config = ModelConfig(k=2, n_ctx=10, d_model=32, n_heads=2, d_mlp=64, n_layers=2,
                         dropout=0.1, mask=mask, pos_encoding="learned", readout=readout,
                         norm=norm)
    tokens = torch.randint(3, 7, (2, 6, 12))
    tokens[..., 0], tokens[:, :3, 9:] = 0, 1
    tokens[:, :3, 8], tokens[:, 3:, 11] = 2, 2

    def case():
        model = Classifier(config, [3, 4]).train()
        logits = model(tokens)
        return [logits, *torch.autograd.grad(logits.square().sum(), list(model.parameters()))]

    fused, plain = _both(case)
    _close(fused, plain)


def test_seq2seq_models_equal_torch():
    config = Seq2SeqConfig(k=2, n_ctx=12, d_model=32, n_heads=2, d_mlp=64, n_encoder_layers=1,
                           n_decoder_layers=2, dropout=0.0)
    source = torch.randint(3, 7, (2, 4, 9))
    source[..., 0], source[:, :2, 7:] = 1, 0
    source[:, :2, 6], source[:, 2:, 8] = 2, 2
    target = torch.randint(3, 7, (2, 4, 5))
    target[..., 0] = 1

    def case():
        model = build_seq2seq(config, [1, 2]).train()
        logits = model(source, target)
        return [logits, *torch.autograd.grad(logits.square().sum(), list(model.parameters()))]

    fused, plain = _both(case)
    _close(fused, plain)


def test_without_a_compiler_models_fall_back_to_torch(tmp_path):
    code = ("import logging; logging.basicConfig(); from dyckbook import kernels, model;"
            "print(kernels.available());"
            "m = model.Classifier(model.ModelConfig(d_model=16, n_heads=2));"
            "import torch; print(tuple(m(torch.tensor([[0, 3, 4, 2]])).shape))")
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc"), "DYCKBOOK_CACHE": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.split() == ["False", "(1,", "2)"]
    assert "C kernels are not available, using torch" in out.stderr
    env = {**os.environ, "DYCKBOOK_KERNELS": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True)
    assert out.stdout.split()[0] == "False" and not out.stderr


def test_the_library_is_built_once_per_machine(tmp_path):
    code = "from dyckbook import kernels; print(kernels.available())"
    env = {**os.environ, "DYCKBOOK_CACHE": str(tmp_path)}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, check=True)
        assert out.stdout.strip() == "True"
        assert len(list(tmp_path.glob("kernels-*.so"))) == 1


@pytest.mark.parametrize("causal", [True, False])
def test_bfloat16_attention_is_the_float32_arithmetic_rounded(causal):
    torch.manual_seed(3)
    q = torch.randn(6, 9, 3 * 32).bfloat16().requires_grad_(True)
    mask = torch.arange(9) < torch.tensor([9, 4, 9, 1, 7, 9])[:, None]
    dz = torch.randn(6, 9, 32).bfloat16()
    out = kernels.attention(q, None, 2, mask, causal)
    (grad,) = torch.autograd.grad(out, q, dz)
    wide = q.detach().float().requires_grad_(True)
    expected = kernels.attention(wide, None, 2, mask, causal)
    (expected_grad,) = torch.autograd.grad(expected, wide, dz.float())
    assert out.dtype == grad.dtype == torch.bfloat16
    assert torch.equal(out, expected.bfloat16()) and torch.equal(grad, expected_grad.bfloat16())
