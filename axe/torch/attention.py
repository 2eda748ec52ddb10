"""``torch.ops.axe.attention(q, k, v, causal=False, scale=None)``: the flash-attention forward of
``kernels/attention.py`` as a ``torch.library`` op.

``q`` is ``(batch, seq_q, q_heads, head_dim)``, ``k`` and ``v`` ``(batch, seq_kv, kv_heads,
head_dim)`` — torch's ``[B, S, H, D]``, not SDPA's ``[B, H, S, D]`` — fp16 or bf16, head_dim 64 or
128, ``kv_heads`` dividing ``q_heads`` (grouped-query attention: query head h reads kv head
``h // (q_heads // kv_heads)``); the result has ``q``'s shape and dtype.  ``causal``: query row i sees
keys ``0..i`` (torch's ``is_causal``, top-left aligned); ``scale`` defaults to ``1/sqrt(head_dim)``.
Equals ``F.scaled_dot_product_attention(q.transpose(1, 2), k', v', is_causal=causal,
scale=scale).transpose(1, 2)`` with k', v' the kv heads repeated, up to the dtype's rounding.

One artifact per (batch, sequence lengths, heads, head_dim, dtype, causal, scale): the kernel is
built for static sizes (on the first call of a shape, cached on disk; a machine without TVM loads
it from the cache or a shipped folder).  The fake implementation checks the arguments and gives the
output's shape, so ``torch.compile(fullgraph=True)`` traces through the op; it launches on the
current stream (CUDA graphs capture it after a first call).  Inputs that are not contiguous are
copied first.
"""

from __future__ import annotations

import torch

from .jit import JitKernel
from .ops import ROOT, _ready, _same

__all__ = ["attention", "KERNEL", "spec"]

_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
HEAD_DIMS = (64, 128)

#: the jit kernel behind the op (its ``loader``, ``cache`` and ``target`` may be replaced)
KERNEL = JitKernel("kernels.attention:make", lambda *a: spec(*a[:3]), path=ROOT)


def _check(q, k, v, scale):
    """The op's conditions, each error naming the argument and what failed."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"axe::attention: {name} must be (batch, seq, heads, head_dim), got shape {tuple(t.shape)}")
    if q.dtype not in _DTYPES:
        raise TypeError(f"axe::attention: q has dtype {q.dtype}, expected float16 or bfloat16")
    _same("attention", "k", k, q, "q", shape=False)
    _same("attention", "v", v, k, "k")
    B, _, Hq, D = q.shape
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"axe::attention: k has shape {tuple(k.shape)}; its batch and head_dim must be q's "
                         f"{tuple(q.shape)} ({B} and {D})")
    if D not in HEAD_DIMS:
        raise ValueError(f"axe::attention: head_dim {D}; the kernel is built for {HEAD_DIMS}")
    if k.shape[2] < 1 or Hq % k.shape[2]:
        raise ValueError(f"axe::attention: k has {k.shape[2]} heads, which must divide q's {Hq} (grouped-query heads)")
    if min(B, q.shape[1], k.shape[1]) < 1:
        raise ValueError(f"axe::attention: empty batch or sequence (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if scale is not None and not scale > 0:
        raise ValueError(f"axe::attention: scale must be positive, got {scale}")


def spec(q, k, causal=False, scale=None) -> dict:
    """The keyword arguments of ``kernels.attention.make`` for this call (a scale other than the default
    as its exact decimal text: cache keys hold ints, bools and strings)."""
    out = {"batch": int(q.shape[0]), "seq_q": int(q.shape[1]), "seq_kv": int(k.shape[1]), "q_heads": int(q.shape[2]),
           "kv_heads": int(k.shape[2]), "head_dim": int(q.shape[3]), "dtype": _DTYPES[q.dtype], "causal": bool(causal)}
    if scale is not None:
        out["scale"] = repr(float(scale))
    return out


def _attention(q, k, v, causal=False, scale=None):
    _check(q, k, v, scale)
    q, k, v = _ready(q), _ready(k), _ready(v)
    o = torch.empty_like(q)
    KERNEL.load(q.device, spec(q, k, causal, scale))(q, k, v, o)
    return o


def _attention_fake(q, k, v, causal=False, scale=None):
    _check(q, k, v, scale)
    return q.new_empty(q.shape)


#: ops.py owns the ``axe`` namespace's definition library; this module adds a fragment to it
_LIB = torch.library.Library("axe", "FRAGMENT")
_LIB.define("attention(Tensor q, Tensor k, Tensor v, bool causal=False, float? scale=None) -> Tensor")
for _key in ("CPU", "CUDA"):
    _LIB.impl("attention", _attention, _key)
torch.library.register_fake("axe::attention", _attention_fake, lib=_LIB)
attention = torch.ops.axe.attention
