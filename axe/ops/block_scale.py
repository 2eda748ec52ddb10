"""Block scales: ``D (+)= P ⊙ ∏_k up(S_k)``, the promotion of a block-scaled GEMM's partial
product P (fp8 A·B, itself the ``gemm`` operator of :mod:`axe.ops.gemm`).

A scale tensor ``S`` of shape ``(m / b0, n / b1)`` holds one value per ``b0 × b1`` block of the
``(m, n)`` tile: element ``(i, j)`` of D is scaled by ``S[i // b0, j // b1]`` (``up`` repeats each
scale over its block).  Block-scaled FP8 GEMM (DeepSeek's recipe) promotes each 128-wide k-block's
partial product this way: activations carry one scale per row and k-block (blocks ``1 × n``),
weights one per 128 columns and k-block.  The block shape is read off the shapes; which scale
belongs to which element of D is the layouts' business (the schedule pairs them).
"""

from __future__ import annotations

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["scale_accumulate"]


def scale_accumulate(D, P, scales, accumulate: bool = True, scope: ExecScope = None, **config) -> OpCall:
    """The call record of ``D = (D if accumulate else 0) + P ⊙ ∏ up(S)`` over ``scales``: each
    scale's shape divides D's dimension by dimension (the quotient is its block)."""
    d, p = as_operand(D, "scale_accumulate D"), as_operand(P, "scale_accumulate P")
    ss = [as_operand(s, f"scale_accumulate S{i}") for i, s in enumerate(scales)]
    if d.shape != p.shape:
        raise OpError(f"scale_accumulate: P {list(p.shape)} differs from D {list(d.shape)}")
    if not ss:
        raise OpError("scale_accumulate: no scale tensors (use elementwise for D += P)")
    blocks = []
    for i, s in enumerate(ss):
        if s.rank != d.rank or any(e % x for e, x in zip(d.shape, s.shape)):
            raise OpError(f"scale_accumulate: S{i} shape {list(s.shape)} does not divide D's {list(d.shape)} "
                          "dimension by dimension (one scale per block)")
        blocks.append(tuple(e // x for e, x in zip(d.shape, s.shape)))
    for name, t in (("D", d), ("P", p)):
        if t.dtype != "float32":
            raise OpError(f"scale_accumulate: {name} ({t.describe()}) must be float32")
    if not isinstance(accumulate, bool):
        raise OpError(f"scale_accumulate: accumulate must be a Python bool, got {accumulate!r}")
    operands = {"D": d, "P": p, **{f"S{i}": s for i, s in enumerate(ss)}}
    return OpCall("scale_accumulate", operands, scope, attrs={"accumulate": accumulate, "blocks": tuple(blocks)},
                  config=config)

