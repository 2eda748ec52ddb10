"""``copy(dst, src)``: move a tile between memory scopes (global, shared, registers).

Shapes agree after dropping extent-1 dims (a row of a 2-D tile is a 1-D tile), or src
broadcasts to dst by numpy's rule (right-aligned, each extent dst's or 1): every dst element
u receives src's element b(u) (:func:`axe.layout.broadcast.broadcast_index`).  A broadcasting
copy is marked ``attrs["broadcast"]``; only schedules that declare ``broadcasts`` serve it.
"""

from __future__ import annotations

from math import prod

from axe.layout import LayoutError
from axe.layout.broadcast import broadcast_shape

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["copy", "same_extents", "broadcasts_to"]


def same_extents(a, b) -> bool:
    """Shapes match after dropping extent-1 dimensions (a row of a 2-D tile is a 1-D tile)."""
    return tuple(e for e in a if e != 1) == tuple(e for e in b if e != 1)


def copy(dst, src, scope: ExecScope, **config) -> OpCall:
    """The call record of ``dst[...] = src[...]``; shapes agree or src broadcasts, dtypes agree."""
    d, s = as_operand(dst, "copy dst"), as_operand(src, "copy src")
    attrs = {}
    if not same_extents(d.shape, s.shape):
        if not broadcasts_to(s.shape, d.shape):
            raise OpError(f"copy: src shape {list(s.shape)} neither matches nor broadcasts to dst shape "
                          f"{list(d.shape)} (numpy's rule: right-aligned, each src extent dst's or 1)")
        attrs["broadcast"] = True
    if d.dtype != s.dtype:
        raise OpError(f"copy: dst dtype {d.dtype} differs from src dtype {s.dtype} (use cast)")
    if prod(d.shape) == 0:
        raise OpError("copy: empty tile")
    return OpCall("copy", {"dst": d, "src": s}, scope, attrs=attrs, config=config)


def broadcasts_to(src_shape, dst_shape) -> bool:
    """Whether ``src_shape`` broadcasts to ``dst_shape`` exactly (numpy's rule, dst unchanged)."""
    try:
        return len(src_shape) <= len(dst_shape) and broadcast_shape(src_shape, dst_shape) == tuple(dst_shape)
    except LayoutError:
        return False
