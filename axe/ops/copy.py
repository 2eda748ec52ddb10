"""``copy(dst, src)``: move a tile between memory scopes (global, shared, registers)."""

from __future__ import annotations

from math import prod

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["copy", "same_extents"]


def same_extents(a, b) -> bool:
    """Shapes match after dropping extent-1 dimensions (a row of a 2-D tile is a 1-D tile)."""
    return tuple(e for e in a if e != 1) == tuple(e for e in b if e != 1)


def copy(dst, src, scope: ExecScope, **config) -> OpCall:
    """The call record of ``dst[...] = src[...]``; shapes and dtypes must agree."""
    d, s = as_operand(dst, "copy dst"), as_operand(src, "copy src")
    if not same_extents(d.shape, s.shape):
        raise OpError(f"copy: dst shape {list(d.shape)} differs from src shape {list(s.shape)}")
    if d.dtype != s.dtype:
        raise OpError(f"copy: dst dtype {d.dtype} differs from src dtype {s.dtype} (use cast)")
    if prod(d.shape) == 0:
        raise OpError("copy: empty tile")
    return OpCall("copy", {"dst": d, "src": s}, scope, config=config)
