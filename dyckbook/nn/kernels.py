"""Fused CPU kernels for short rows (``kernels.c``), compiled on first use with the C compiler.

``attention`` and ``layer_norm`` compute what ``dyckbook.nn.blocks`` computes with torch ops, in
one pass over each row, with their own backward passes; they return None where they do not
apply (no C compiler, a GPU tensor, float64, rows longer than :data:`MAX_KEYS`, head widths
not a multiple of 8), and the caller then uses torch. The library is compiled once per
machine into the cache folder (``$DYCKBOOK_CACHE``, else ``~/.cache/dyckbook``) under a name
that hashes the source, the compiler and the CPU, so a folder shared by several machines
holds one build each. ``DYCKBOOK_KERNELS=0`` turns the kernels off; :func:`torch_only` does
so for a block of code (the tests compare both paths).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import platform
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
import torch.nn.functional as F

__all__ = ["MAX_KEYS", "attention", "available", "cache_dir", "fits", "layer_norm", "torch_only"]

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("kernels.c")
MAX_KEYS = 64  # longer rows go to torch's flash attention (measured: even at 64 keys, ahead at 256)
_FLAGS = (["-O3", "-march=native"], ["-O3"])  # the second if the compiler rejects the first
_SIGNATURES = {  # argument types of kernels.c's functions: p pointer, i int64, c int, f float
    "attention_forward": "pippippcpppiiiiifc", "attention_backward": "pippippppppiiiiifc",
    "layer_norm_forward": "pppppppiiif", "layer_norm_backward": "pppppppiii"}
_lock = threading.Lock()
_state: dict = {"lib": None, "tried": False, "off": os.environ.get("DYCKBOOK_KERNELS") == "0"}


def cache_dir() -> Path:
    """Where the compiled library is kept."""
    root = os.environ.get("DYCKBOOK_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "dyckbook")
    return Path(root)


def _compile(compiler: str) -> Path:
    """Build the library (or find it built) and return its path."""
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[0]
    info = Path("/proc/cpuinfo")  # its flags: what -march=native builds for
    cpu = [line for line in (info.read_text().splitlines() if info.exists() else [])
           if line.split(":")[0].strip() in ("flags", "Features")][:1]
    errors = []
    for flags in _FLAGS:
        key = hashlib.sha256("\0".join([SOURCE.read_text(), *flags, version, *cpu,
                                        platform.processor(), platform.machine()]).encode())
        target = cache_dir() / f"kernels-{key.hexdigest()[:16]}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        built = subprocess.run([compiler, *flags, "-fPIC", "-shared", "-o", tmp, str(SOURCE),
                                "-lm"], capture_output=True, text=True, check=False)
        if built.returncode == 0:
            os.replace(tmp, target)  # atomic: processes building at once each write a whole file
            return target
        os.unlink(tmp)
        errors.append(built.stderr.strip()[-500:])
    raise RuntimeError("; ".join(errors))


def _load():
    """The ctypes library, or None (off, or it could not be built: logged once)."""
    if _state["off"]:
        return None
    if _state["tried"]:
        return _state["lib"]
    with _lock:
        if not _state["tried"]:
            try:
                lib = ctypes.CDLL(str(_compile(os.environ.get("CC", "cc"))))
            except (OSError, RuntimeError, subprocess.SubprocessError, IndexError) as error:
                log.warning("dyckbook's C kernels are not available, using torch: %s", error)
                lib = None
            else:  # p: pointer, i: int64, c: int, f: float
                types = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "c": ctypes.c_int,
                         "f": ctypes.c_float}
                for name, args in _SIGNATURES.items():
                    getattr(lib, name).argtypes = [types[a] for a in args]
            _state["lib"], _state["tried"] = lib, True
    return _state["lib"]


def available() -> bool:
    """Whether the kernels are on and built."""
    return _load() is not None


@contextmanager
def torch_only() -> Iterator[None]:
    """Inside this block every model computes with torch ops only."""
    before = _state["off"]
    _state["off"] = True
    try:
        yield
    finally:
        _state["off"] = before


def _ptr(t: torch.Tensor | None, offset: int = 0) -> int | None:
    """Address of ``t`` plus ``offset`` elements (None for None)."""
    return None if t is None else t.data_ptr() + offset * t.element_size()


def _padded(n_keys: int) -> int:
    """Keys rounded up to whole vectors of 8: the last dimension of the probabilities."""
    return -(-n_keys // 8) * 8


def _wants_grad(*tensors: torch.Tensor | None) -> bool:
    """Whether autograd will ask for a backward pass through these inputs."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _call(name: str, *args) -> None:
    """Call ``name`` of the library (the Python side checks shapes first, so a refusal is a
    bug, not an input error)."""
    if getattr(_state["lib"], name)(*args):
        raise RuntimeError(f"kernels.{name} rejected its arguments")


class _Attention(torch.autograd.Function):
    """q: the fused (rows, pos, 3d) of self-attention when kv is None, else (rows, tq, d) with
    kv (rows, tk, 2d); drop: (rows, heads, tq, tk) padded like the probabilities, which are
    saved (rows, heads, tq, tk rounded up to a multiple of 8) for the backward pass."""

    @staticmethod
    def forward(ctx, q, kv, heads, mask, causal, qpos, drop, keep):
        rows, tq = q.shape[:2]
        d = q.shape[2] // 3 if kv is None else q.shape[2]
        k_src, k_at = (q, d) if kv is None else (kv, 0)
        tk, kv_row = k_src.shape[1], k_src.shape[2]
        z = q.new_empty(rows, tq, d)
        p = q.new_empty(rows, heads, tq, _padded(tk), dtype=torch.float32) if keep else None
        _call("attention_forward", _ptr(q), q.shape[2], _ptr(k_src, k_at),
              _ptr(k_src, k_at + d), kv_row, _ptr(mask), _ptr(qpos), int(causal), _ptr(drop),
              _ptr(z), _ptr(p), rows, tq, tk, heads, d // heads, 1.0 / math.sqrt(d // heads),
              int(q.dtype == torch.bfloat16))
        ctx.heads, ctx.fused = heads, kv is None
        ctx.save_for_backward(q, kv, p, drop)
        return z

    @staticmethod
    def backward(ctx, dz):
        q, kv, p, drop = ctx.saved_tensors
        heads, rows, tq = ctx.heads, *q.shape[:2]
        d = dz.shape[2]
        k_src, k_at = (q, d) if ctx.fused else (kv, 0)
        dq = torch.empty_like(q)
        dk_src = dq if ctx.fused else torch.empty_like(kv)
        _call("attention_backward", _ptr(q), q.shape[2], _ptr(k_src, k_at),
              _ptr(k_src, k_at + d), k_src.shape[2], _ptr(p), _ptr(drop),
              _ptr(dz.to(q.dtype).contiguous()), _ptr(dq), _ptr(dk_src, k_at),
              _ptr(dk_src, k_at + d), rows, tq, k_src.shape[1], heads, d // heads,
              1.0 / math.sqrt(d // heads), int(q.dtype == torch.bfloat16))
        return dq, None if ctx.fused else dk_src, None, None, None, None, None, None


def attention(q: torch.Tensor, kv: torch.Tensor | None, n_heads: int,
              mask: torch.Tensor | None = None, causal: bool = False,
              qpos: torch.Tensor | None = None,
              drop: torch.Tensor | None = None) -> torch.Tensor | None:
    """Multi-head attention in row layout, or None where the kernels do not apply.

    Args:
        q: float32 or bfloat16 (rows, pos, 3 d_model), the fused queries, keys and values of
            self-attention, when ``kv`` is None; else the queries (rows, q_pos, d_model).
        kv: keys and values (rows, k_pos, 2 d_model), or None.
        n_heads: heads; head h owns columns [h d_head, (h + 1) d_head) of each part.
        mask: bool (rows, k_pos), True where a key may be seen; None: every key.
        causal: query i sees keys j <= i + k_pos - q_pos only (or j <= ``qpos``).
        qpos: int64 (rows,): the position of each row's one query (q_pos = 1), or None.
        drop: dropout multipliers (rows, head, q_pos, k_pos) on the probabilities, or None.

    Returns:
        (rows, q_pos, d_model) of q's type; a query that sees no key sees every key, as in
        ``blocks``. The arithmetic is float32's for either type.
    """
    if (any(t is not None and t.device.type != "cpu" for t in (q, kv, drop))
            or q.dtype not in (torch.float32, torch.bfloat16)
            or (kv is not None and kv.dtype != q.dtype)
            or (drop is not None and drop.dtype != torch.float32)):
        return None
    d = q.shape[2] // 3 if kv is None else q.shape[2]
    k_pos = q.shape[1] if kv is None else kv.shape[1]
    if not fits(d, n_heads, q.shape[1], k_pos) or _load() is None:
        return None
    if mask is not None:
        mask = mask.contiguous().view(torch.uint8)
    if qpos is not None:
        qpos = qpos.to(torch.int64).contiguous()
    if drop is not None:
        drop = F.pad(drop, (0, _padded(k_pos) - k_pos))
    keep = _wants_grad(q, kv)  # keep the probabilities for a backward pass
    return _Attention.apply(q.contiguous(), None if kv is None else kv.contiguous(), n_heads,
                            mask, causal, qpos, drop, keep)


def fits(d_model: int, n_heads: int, q_pos: int, k_pos: int) -> bool:
    """Whether :func:`attention` takes this shape: heads a multiple of 8 and at most 256 wide,
    at most ``MAX_KEYS`` queries and keys (callers ask before they prepare its inputs)."""
    d_head, rest = divmod(d_model, n_heads)
    return not rest and d_head % 8 == 0 and d_head <= 256 and max(q_pos, k_pos) <= MAX_KEYS


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, weight, bias, eps, keep):
        models, d = weight.shape
        rows = x.numel() // (models * d)
        out = torch.empty_like(x)
        xhat = torch.empty_like(x) if keep else None
        rstd = x.new_empty(models * rows) if keep else None
        _call("layer_norm_forward", _ptr(x), _ptr(y), _ptr(weight), _ptr(bias), _ptr(out),
              _ptr(xhat), _ptr(rstd), models, rows, d, eps)
        ctx.residual = y is not None
        ctx.save_for_backward(xhat, rstd, weight)
        return out

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd, weight = ctx.saved_tensors
        models, d = weight.shape
        grad_in = torch.empty_like(xhat)
        grad_weight, grad_bias = torch.empty_like(weight), torch.empty_like(weight)
        _call("layer_norm_backward", _ptr(grad.contiguous()), _ptr(xhat), _ptr(rstd),
              _ptr(weight), _ptr(grad_in), _ptr(grad_weight), _ptr(grad_bias), models,
              xhat.numel() // (models * d), d)
        return grad_in, grad_in if ctx.residual else None, grad_weight, grad_bias, None, None


def layer_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
               bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor | None:
    """``LayerNorm(x + residual)`` with model s's affine map on ``x[s]``, or None where the
    kernels do not apply.

    Args:
        x: float32 (S, ..., d_model).
        residual: the same shape, or None.
        weight, bias: (S, d_model).
        eps: added to the variance.
    """
    tensors = (x, residual, weight, bias)
    d = weight.shape[-1]
    if (any(t is not None and (t.device.type != "cpu" or t.dtype != torch.float32)
            for t in tensors) or weight.dim() != 2 or x.shape[0] != weight.shape[0]
            or x.shape[-1] != d or d % 8 or d > 256
            or (residual is not None and residual.shape != x.shape) or _load() is None):
        return None
    return _LayerNorm.apply(x.contiguous(), None if residual is None else residual.contiguous(),
                            weight.contiguous(), bias.contiguous(), float(eps),
                            _wants_grad(*tensors))
