"""Declaring tensors in a kernel: parameters, shared and register allocations, per-thread views."""

from __future__ import annotations

from math import prod

from axe.layout import Layout, S, SwizzledLayout, parse
from axe.ops.tensor import Tensor, register_tensor
from axe.schedules.context import current_context
from axe.schedules.infer import INFER, NeedsInference, open_tile, open_view, register_open

__all__ = ["param", "shared", "registers", "view", "as_layout", "INFER", "NeedsInference"]

def _infers(layout, mem) -> bool:
    return (isinstance(layout, str) and layout == INFER) or (layout is None and mem == "local")


def as_layout(layout, shape):
    """``layout`` as a layout value: None is the row-major ``S[shape]``, text is parsed, a Layout or
    SwizzledLayout is itself; anything else is a TypeError naming its type."""
    if layout is None:
        return S[tuple(shape)]
    if isinstance(layout, str):
        return parse(layout)
    if not isinstance(layout, (Layout, SwizzledLayout)):
        raise TypeError(f"layout must be an Axe Layout, SwizzledLayout or its text, got {type(layout).__name__}")
    return layout


def _inner(L):
    return L.inner if isinstance(L, SwizzledLayout) else L


def _storage(L) -> int:
    """Elements of storage the layout touches on memory (span; the swizzle stays inside it)."""
    inner = _inner(L)
    lo = inner.offset["m"]
    n = inner.span("m") + max(lo, 0)
    if isinstance(L, SwizzledLayout):
        n = -(-n // L.swizzle.period) * L.swizzle.period + max(L.base["m"], 0)
    return n


def param(buf, layout=None, tensormap=None, name=None, scratch=False) -> Tensor:
    """A kernel parameter buffer seen through ``layout`` (default row-major over its shape).

    ``tensormap``: the kernel's CUtensorMap parameter (``T.handle("tensormap")``) for TMA.
    ``scratch``: the runtime supplies this buffer (zero-filled once per device, then reused): a
    workspace or flags the kernel leaves zero again.  Scratch parameters come last and callers
    leave them out.
    """
    shape = tuple(int(s) for s in buf.shape)
    if scratch:
        current_context(f"Ax.param({buf.name}, scratch=True)").scratch.append(str(buf.name))
    L = as_layout(layout, shape)
    t = Tensor(buf, L, shape, str(buf.dtype), "global", tensormap=tensormap, name=name or buf.name)
    return register_tensor(t)


def shared(shape, dtype, layout=None, name="smem") -> Tensor:
    """A shared-memory tile; storage is flat, sized by the layout's memory span.  ``layout=None``
    is row-major; ``layout=INFER`` takes the layout with the fewest bank conflicts for the copies
    that write and read it (:mod:`axe.schedules.infer`)."""
    from tvm.script import tirx as T
    shape = tuple(shape)
    record = None
    if _infers(layout, "shared"):
        L, record = open_tile(shape, dtype, "shared", name)
    else:
        L = as_layout(layout, shape)
    align = 1024 if isinstance(L, SwizzledLayout) else 128
    buf = T.alloc_buffer((_storage(L),), dtype, scope="shared", align=align)
    return register_open(Tensor(buf, L, shape, dtype, "shared", name=name), record)


def registers(shape, dtype, layout=None, name="reg") -> Tensor:
    """A register tile.  Its layout may name thread axes (CTA-collective, e.g.
    ``S[(16,8,8):(8@tx,1@tx,1@reg)]``) or only registers (a per-thread tile); each thread
    allocates the layout's span on the register axis.  ``layout=None`` (or ``INFER``): inferred
    from the operators that touch the tile (:mod:`axe.schedules.infer`)."""
    from tvm.script import tirx as T
    shape = tuple(shape)
    record = None
    if _infers(layout, "local"):
        L, record = open_tile(shape, dtype, "local", name)
    else:
        L = as_layout(layout, shape)
    if prod(shape) != _inner(L).size:
        raise ValueError(f"registers {name}: shape {shape} does not match layout {L}")
    buf = T.alloc_buffer((_storage(L),), dtype, scope="local")
    return register_open(Tensor(buf, L, shape, dtype, "local", name=name), record)


def view(t: Tensor, layout, shape=None, base=0, name=None) -> Tensor:
    """``t``'s storage through another layout plus a symbolic offset on memory.

    Example 7's per-thread form: ``view(A, "S[(2,4):(4,1)]", base=(tx//8)*128 + (tx%8)*8 + 2112)``.

    ``layout=INFER`` (an *open view*, e.g. a pipeline stage's tile carved out of a shared pool):
    the layout is inferred from the operators that touch it, and ``name`` (required) is its role:
    all open views of ``t`` with one name share one inferred layout, whatever their bases
    (:func:`axe.schedules.infer.open_view`).
    """
    if isinstance(layout, str) and layout == INFER:
        if shape is None or not name:
            raise ValueError(f"Ax.view({t.name}, INFER): an open view needs its shape and name= (its role: "
                             "the open views of one name share one inferred layout)")
        L, buf = open_view(t, shape, name)
        return Tensor(buf, L, tuple(shape), t.dtype, t.mem, base=base, root=None, tensormap=t.tensormap, name=name)
    L = as_layout(layout, shape or ())
    shape = tuple(shape) if shape is not None else _inner(L).shape
    return Tensor(t.buffer, L, shape, t.dtype, t.mem, base=base, root=None, tensormap=t.tensormap,
                  name=name or f"{t.name}.view")


def permute(t: Tensor, dims) -> Tensor:
    """``t`` with its dimensions reordered (a transpose is ``permute(t, (1, 0))``): the layout
    grouped by the shape, blocks taken in the new order.  Same storage, no data moves."""
    from axe.layout import group
    from axe.layout.layout import Layout
    inner = _inner(t.layout)
    g = group(inner, t.shape)
    shard = tuple(i for d in dims for i in (g.blocks[d] or ((1, 1, "m"),)))
    L = Layout(shard, inner.replica, inner.offset)
    if isinstance(t.layout, SwizzledLayout):
        L = t.layout.with_inner(L)
    shape = tuple(t.shape[d] for d in dims)
    return Tensor(t.buffer, L, shape, t.dtype, t.mem, base=t.base, root=None, tensormap=None,
                  name=f"{t.name}.T" if tuple(dims) == (1, 0) else f"{t.name}.perm")
