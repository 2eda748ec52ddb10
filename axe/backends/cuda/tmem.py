"""Tensor memory (TMEM, sm_100a): allocation, release and addressing of tensors on ``TLane``/``TCol``.

TMEM is 128 lanes × 512 columns of 32-bit cells per CTA.  A TMEM tensor is an axe
:class:`~axe.ops.tensor.Tensor` with memory scope ``"tmem"`` whose layout names only the axes
``TLane`` and ``TCol``; ``TCol`` counts elements of the tensor's dtype inside a lane (a 32-bit
column holds one fp32 or two 16-bit elements), so the address of element x is

    base + (f(x)[TLane] << 16) + f(x)[TCol] · bits / 32

with ``base`` the allocation's address (``tcgen05.alloc`` writes it into a shared 32-bit slot,
which is the tensor's ``buffer``).  The tcgen05.mma accumulator of an M=128 instruction is
``S[(128,N):(1@TLane,1@TCol)]`` (PTX data-path layout D: row i in lane i, column j in column j).

Allocation (:func:`alloc`): one warp runs ``tcgen05.alloc`` for a power-of-two number of
columns, at least 32, derived from the layout's ``TCol`` span (:func:`columns_for`), then
``tcgen05.relinquish_alloc_permit``; the CTA synchronises between ``tcgen05.fence::before_thread_sync``
and ``::after_thread_sync`` so every thread reads the address.  :func:`free` orders the
tensor's last uses before ``tcgen05.dealloc`` the same way.  ``cta_group=2``: the allocation of
a CTA pair (each CTA's warp runs the ``.cta_group::2`` form).
"""

from __future__ import annotations

from axe.layout import Layout, S
from axe.layout.coord import TCol, TLane  # noqa: F401  (registers the axes)

__all__ = ["LANES", "COLUMNS", "columns_for", "check_layout", "alloc", "free", "allocation", "default_layout", "tmem",
           "tmem_free", "fence_before", "fence_after"]

LANES, COLUMNS = 128, 512
TMEM_AXES = ("TLane", "TCol")


def _bits(dtype) -> int:
    import tvm
    return tvm.DataType(str(dtype)).bits


def default_layout(shape) -> Layout:
    """Row i in lane i, column j in column j: ``S[(rows,cols):(1@TLane,1@TCol)]``."""
    rows, cols = shape
    return S[(rows, cols):(1 @ TLane, 1 @ TCol)]


def _span(L: Layout, axis: str) -> int:
    """Highest coordinate + 1 the layout reaches on ``axis`` (span plus a non-negative offset)."""
    return L.span(axis) + max(L.offset[axis], 0)


def check_layout(L, shape, dtype) -> str | None:
    """None when ``L`` is a TMEM layout for ``shape`` of ``dtype``, else the reason: only
    ``TLane``/``TCol``, no replica, non-negative strides and offsets, within 128 lanes × 512
    32-bit columns, 16- or 32-bit elements."""
    if not isinstance(L, Layout):
        return f"TMEM layout {L} is swizzled (tensor memory has no swizzle)"
    other = [a for a in L.axes() if a not in TMEM_AXES]
    if other:
        return f"TMEM layout {L} names axes {other}; tensor memory has only TLane and TCol"
    if L.replica:
        return f"TMEM layout {L} has a replica part"
    if any(s < 0 for _, s, _ in L.shard) or any(L.offset[a] < 0 for a in TMEM_AXES):
        return f"TMEM layout {L} has a negative stride or offset"
    bits = _bits(dtype)
    if bits not in (16, 32):
        return f"TMEM holds 16- or 32-bit elements, not {dtype}"
    if _span(L, "TLane") > LANES:
        return f"TMEM layout {L} reaches lane {_span(L, 'TLane') - 1}; TMEM has {LANES} lanes"
    if columns_used(L, dtype) > COLUMNS:
        return f"TMEM layout {L} needs {columns_used(L, dtype)} columns; TMEM has {COLUMNS}"
    return None


def columns_used(L: Layout, dtype) -> int:
    """32-bit columns the layout reaches (its ``TCol`` extent in elements, packed)."""
    return -(-_span(L, "TCol") * _bits(dtype) // 32)


def columns_for(L: Layout, dtype) -> int:
    """The allocation for a TMEM tensor: its columns rounded up to a power of two, at least 32
    (``tcgen05.alloc``'s rule)."""
    n = max(columns_used(L, dtype), 32)
    return 1 << (n - 1).bit_length()


def fence_before():
    """``tcgen05.fence::before_thread_sync``: this thread's tcgen05 operations (an ld whose wait
    has returned) are ordered before its next thread synchronisation (a barrier arrive)."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["tcgen05.fence::before_thread_sync"]())


def fence_after():
    """``tcgen05.fence::after_thread_sync``: this thread's later tcgen05 operations are ordered
    after the thread synchronisation it just passed (a barrier wait)."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["tcgen05.fence::after_thread_sync"]())


def _sync_threads():
    from tvm.script import tirx as T
    fence_before()
    T.evaluate(T.tvm_storage_sync("shared"))
    fence_after()


def alloc(scope, shape, dtype="float32", layout=None, cta_group: int = 1, name: str = "tmem", warp: int = 0,
          last: bool = True):
    """Allocate a TMEM tensor of ``shape`` and ``layout`` (default :func:`default_layout`;
    ``Ax.INFER``: the one layout inference gives it from the tcgen05 calls that touch it) in the
    CTA ``scope``: warp ``warp`` allocates :func:`columns_for` columns (``last``: then gives up the
    CTA's permit to allocate more, so a co-resident CTA's allocation need not wait), the CTA
    synchronises.  Returns the tensor (memory ``"tmem"``)."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    from axe.ops.tensor import Tensor
    from axe.layout import parse
    from axe.schedules.infer import INFER, open_tile, register_open
    shape = tuple(int(s) for s in shape)
    record = None
    if isinstance(layout, str) and layout == INFER:       # inferred: the data path until it is fixed
        L, record = open_tile(shape, dtype, "tmem", name)
        if record is not None:
            L = default_layout(shape)
    else:
        L = default_layout(shape) if layout is None else (parse(layout) if isinstance(layout, str) else layout)
    why = check_layout(L, shape, dtype)
    if why:
        raise ValueError(f"tmem {name}: {why}")
    if cta_group not in (1, 2):
        raise ValueError(f"tmem {name}: cta_group must be 1 or 2, got {cta_group!r}")
    ncols = columns_for(L, dtype)
    slot = T.alloc_buffer((1,), "uint32", scope="shared", align=16)
    g = f"cta_group::{cta_group}"
    with IRB.If(scope.tx // 32 == warp):
        with IRB.Then():
            T.evaluate(T.ptx[f"tcgen05.alloc.{g}.sync.aligned.shared::cta.b32"](slot.ptr_to([0]), T.uint32(ncols)))
            if last:
                T.evaluate(T.ptx[f"tcgen05.relinquish_alloc_permit.{g}.sync.aligned"]())
    _sync_threads()
    t = Tensor(slot, L, shape, str(dtype), "tmem", name=name)
    object.__setattr__(t, "_tmem", (ncols, cta_group))   # frozen dataclass: the allocation's size
    return register_open(t, record)


def allocation(t):
    """``(columns, cta_group)`` of TMEM tensor ``t``'s allocation (a view's is its root's)."""
    src = t.origin
    return getattr(src, "_tmem", None) or getattr(t, "_tmem", None)


def free(scope, t, warp: int = 0):
    """Release ``t``'s allocation: the CTA's last TMEM uses are ordered before
    ``tcgen05.dealloc`` (fence, barrier, fence), which warp ``warp`` runs."""
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    if t.mem != "tmem":
        raise ValueError(f"tmem free: {t.describe()} is not a TMEM tensor")
    ncols, group = allocation(t)
    _sync_threads()
    with IRB.If(scope.tx // 32 == warp):
        with IRB.Then():
            T.evaluate(T.ptx[f"tcgen05.dealloc.cta_group::{group}.sync.aligned.b32"](t.buffer[0], T.uint32(ncols)))


def _cta_scope():
    from axe.ops.scope import scope_or_cta
    return scope_or_cta("tmem")


def tmem(shape, dtype="float32", layout=None, cta_group: int = 1, name: str = "tmem", last: bool = True):
    """Kernel language: allocate a TMEM tensor in the current (CTA-wide) scope; see :func:`alloc`."""
    return alloc(_cta_scope(), shape, dtype, layout, cta_group, name, last=last)


def tmem_free(t):
    """Kernel language: release ``t``'s TMEM (every thread of the CTA reaches it); see :func:`free`."""
    free(_cta_scope(), t)
