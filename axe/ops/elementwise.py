"""Elementwise operators: ``dst = fn(src0, src1, …)`` per element, several ops fused in one pass.

``fn`` receives TIR expressions (one per source, already in its dtype) and returns one
expression, so ``lambda x, r: T.cast(x, "float32") * r`` fuses a cast and a product.  A source
may broadcast by numpy's rule: right-aligned to dst's rank, each of its dimensions equals dst's
or is 1.  A source of lower rank marks the call ``attrs["broadcast"]`` (only schedules that
declare ``broadcasts`` align ranks).
"""

from __future__ import annotations

from .call import OpCall, OpError
from .copy import broadcasts_to
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["elementwise", "unary", "binary", "cast", "UNARY", "BINARY"]

UNARY = {
    "neg": lambda x: -x,
    "exp": lambda x: _tir().exp(x),
    "rsqrt": lambda x: _tir().rsqrt(x),
    "sqrt": lambda x: _tir().sqrt(x),
    "abs": lambda x: _tir().abs(x),
}
BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: _tir().max(a, b),
    "min": lambda a, b: _tir().min(a, b),
}


def _tir():
    import tvm
    return tvm.tirx


def elementwise(dst, fn, *srcs, scope: ExecScope, **config) -> OpCall:
    """The call record of ``dst = fn(*srcs)``; sources broadcast to dst's shape."""
    d = as_operand(dst, "elementwise dst")
    ss = [as_operand(x, f"elementwise src{i}") for i, x in enumerate(srcs)]
    for i, s in enumerate(ss):
        if not broadcasts_to(s.shape, d.shape):
            raise OpError(f"elementwise: src{i} shape {list(s.shape)} does not broadcast to dst shape "
                          f"{list(d.shape)} (numpy's rule: right-aligned, each src extent dst's or 1)")
    if not callable(fn):
        raise OpError(f"elementwise: fn {fn!r} is not callable")
    operands = {"dst": d, **{f"src{i}": s for i, s in enumerate(ss)}}
    attrs = {"fn": fn, **({"broadcast": True} if any(s.rank < d.rank for s in ss) else {})}
    return OpCall("elementwise", operands, scope, attrs=attrs, config=config)


def unary(dst, src, name: str, scope: ExecScope, **config) -> OpCall:
    """The elementwise call ``dst = name(src)``; ``name`` must be a key of :data:`UNARY` (else OpError)."""
    if name not in UNARY:
        raise OpError(f"unary: {name!r} is not one of {sorted(UNARY)}")
    call = elementwise(dst, UNARY[name], src, scope=scope, **config)
    call.attrs["name"] = name
    return call


def binary(dst, a, b, name: str, scope: ExecScope, **config) -> OpCall:
    """The elementwise call ``dst = name(a, b)``; ``name`` must be a key of :data:`BINARY` (else OpError)."""
    if name not in BINARY:
        raise OpError(f"binary: {name!r} is not one of {sorted(BINARY)}")
    call = elementwise(dst, BINARY[name], a, b, scope=scope, **config)
    call.attrs["name"] = name
    return call


def cast(dst, src, scope: ExecScope, **config) -> OpCall:
    """The elementwise call ``dst = src`` converted to ``dst``'s dtype."""
    d = as_operand(dst, "cast dst")
    call = elementwise(dst, lambda x: _tir().Cast(d.dtype, x), src, scope=scope, **config)
    call.attrs["name"] = f"cast to {d.dtype}"
    return call
