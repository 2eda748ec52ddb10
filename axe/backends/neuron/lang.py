"""Trainium constructs a kernel body uses (``Ax.neuron.<name>``): the NeuronCore scope and
SBUF/PSUM tiles.

A trn1 kernel is an ``@Ax.kernel`` TVMScript factory like a GPU one: parameters are HBM tensors
(``Ax.param``), loops are ``T.parallel`` (independent iterations: ``nl.affine_range``) or
``T.serial`` (carried state: ``nl.sequential_range``), and operators (``Ax.copy``, ``Ax.gemm``,
``Ax.elementwise``, ``Ax.reduce``) dispatch on their operands' layouts to the neuron schedules.
On-chip tiles come from :func:`sbuf` and :func:`psum` (``Ax.neuron.sbuf``); their layouts map the
logical shape to the axes ``P`` (partition) and ``F`` (free), e.g. ``S[(128, 512):(1@P, 1@F)]``.
The language checks that these are called in a trn1 build (:mod:`axe.lang.targets`): in a GPU
build ``Ax.neuron.sbuf`` is an error naming it and the target.
"""

from __future__ import annotations

from math import prod

from axe.layout import Layout, S, parse
from axe.ops.scope import ExecScope, enter_launch
from axe.ops.tensor import Tensor, register_memory_scope, register_tensor

from . import hardware as hw
from .emit_stmt import nki_stmt

__all__ = ["core", "hbm", "sbuf", "psum", "tile_layout", "keep_columns", "keep_lower"]

# SBUF and PSUM are memory scopes of their own (not GPU shared memory or registers).
register_memory_scope("sbuf", "psum")

_NL_DTYPE = {"float16": "nl.float16", "bfloat16": "nl.bfloat16", "float32": "nl.float32"}


def core():
    """Enter the NeuronCore scope (a trn1 kernel runs on one NeuronCore; no grid, no threads)."""
    enter_launch(ExecScope("kernel", None, 1))


def hbm(buf, pad_to=None, name=None) -> Tensor:
    """Kernel parameter ``buf`` (an HBM tensor) seen with each dim rounded up to a multiple of
    ``pad_to`` (same strides: the padding is never read or written, the DMA masks it), so whole
    tiles can be sliced at ragged edges.  Law: element x (inside the parameter) is at the same
    address as in the row-major parameter."""
    shape = tuple(int(s) for s in buf.shape)
    pad = tuple(pad_to) if pad_to is not None else (1,) * len(shape)
    padded = tuple(-(-e // p) * p for e, p in zip(shape, pad))
    from .tiles import row_major_strides
    L = S[padded:row_major_strides(shape)]
    return register_tensor(Tensor(buf, L, padded, str(buf.dtype), "global", name=name or buf.name))


def tile_layout(shape, partition_dim: int = 0) -> Layout:
    """The plain tile layout: ``partition_dim`` on P (stride 1), the other dim contiguous on F."""
    r, c = shape
    return S[(r, c):(1 @ _ax("P"), 1 @ _ax("F"))] if partition_dim == 0 else S[(r, c):(1 @ _ax("F"), 1 @ _ax("P"))]


def _ax(name):
    from axe.layout.coord import axis
    return axis(name)


def _alloc(kind, shape, dtype, layout, name, init):
    import tvm
    from axe.schedules.infer import INFER, open_tile, register_open
    shape = tuple(shape)
    record = None
    if isinstance(layout, str) and layout == INFER:
        # inferred from the operators that touch the tile (axe.backends.neuron.proposals)
        L, record = open_tile(shape, dtype, kind, name)
        if record is not None:       # the recording parse: a provisional tile, nothing to emit
            buf = tvm.tirx.decl_buffer((prod(shape),), dtype, name, scope=f"trn.{kind}")
            return register_open(Tensor(buf, L, shape, dtype, kind, name=name), record)
    else:
        L = tile_layout(shape) if layout is None else (parse(layout) if isinstance(layout, str) else layout)
    if prod(shape) != L.size:
        raise ValueError(f"{kind} {name}: shape {shape} has {prod(shape)} elements, layout {L} has {L.size}")
    pspan, fspan = L.span("P"), L.span("F")
    if pspan > hw.PMAX:
        raise ValueError(f"{kind} {name}: layout {L} spans {pspan} partitions > {hw.PMAX}")
    if dtype not in _NL_DTYPE:
        raise ValueError(f"{kind} {name}: dtype {dtype} is not one of {sorted(_NL_DTYPE)}")
    buf = tvm.tirx.decl_buffer((pspan * fspan,), dtype, name, scope=f"trn.{kind}")
    fill = "nl.zeros" if init == 0 else "nl.ndarray"
    nki_stmt(f"{name} = {fill}(({pspan}, {fspan}), dtype={_NL_DTYPE[dtype]}, buffer=nl.{kind}, name=\"{name}\")")
    return register_tensor(Tensor(buf, L, shape, dtype, kind, name=name))


def sbuf(shape, dtype, layout=None, name="sb", zero=True) -> Tensor:
    """An SBUF tile (``nl.zeros`` where written: allocate it inside a loop for a fresh tile each
    iteration, which masked loads of ragged edges rely on); ``zero=False``: ``nl.ndarray``.
    ``layout=None`` is :func:`tile_layout` (the first dim on the partitions); ``layout=Ax.INFER``
    (``"infer"``) takes the layout the operators touching the tile dispatch under
    (:mod:`axe.schedules.infer`, :mod:`.proposals`)."""
    return _alloc("sbuf", shape, dtype, layout, name, 0 if zero else None)


def psum(shape, dtype="float32", layout=None, name="ps", zero=True) -> Tensor:
    """A PSUM tile (float32 accumulators; a bank holds 512 per partition); ``layout`` as in :func:`sbuf`."""
    return _alloc("psum", shape, dtype, layout, name, 0 if zero else None)


def keep_columns(t: Tensor, start, limit: int, fill: float = -30000.0) -> None:
    """Set the columns of tile ``t`` whose global index ``start + c`` is ``>= limit`` to ``fill``
    (``nisa.affine_select``), e.g. scores of keys past a ragged sequence end.  Emits nothing when
    no column can be past the end (``limit`` a multiple of the tile width and ``start`` too)."""
    from .tiles import py_expr
    cols = t.shape[1]
    if isinstance(start, int) and start + cols <= limit or (not isinstance(start, int) and limit % cols == 0):
        return
    _select(t, "keep_columns", lambda b: f"{py_expr(start)} + i_f < {limit}", fill)


def keep_lower(t: Tensor, row0, col0, fill: float = -30000.0) -> None:
    """Set ``t[r, c]`` to ``fill`` where ``col0 + c > row0 + r``: the causal mask of a score tile whose
    row r is query ``row0 + r`` and whose column c is key ``col0 + c`` (a query sees the keys up to
    its own index).  Its predicate ``row0 + r >= col0 + c`` is affine in the partition and free
    indices; ``row0`` and ``col0`` may be loop expressions."""
    from .tiles import py_expr

    def pred(b):
        rows = f"{py_expr(row0)} + {b.lo}" if b.lo else py_expr(row0)
        return f"{rows} + i_p >= {py_expr(col0)} + i_f"
    _select(t, "keep_lower", pred, fill)


def _select(t: Tensor, what: str, pred, fill: float) -> None:
    """One ``nisa.affine_select`` per row block ``b`` of tile ``t`` (rows on the partitions): the
    elements where ``pred(b)`` (text over the block's ``i_p``, ``i_f``) is false become ``fill``."""
    from .tiles import blocks, nki_name
    for b in blocks(t):
        if b.dp != 0:
            raise ValueError(f"{what}({t.describe()}): rows must lie on the partitions, columns on the free axis")
        p = f"{b.p0} + i_p" if b.p0 else "i_p"
        f = f"{b.f0} + i_f" if b.f0 else "i_f"
        box = f"{nki_name(t)}[{p}, {f}]"
        nki_stmt(f"i_p, i_f = nl.mgrid[0:{b.n}, 0:{b.cols}]")
        nki_stmt(f"{box} = nisa.affine_select(({pred(b)}), {box}, {float(fill)!r})")
