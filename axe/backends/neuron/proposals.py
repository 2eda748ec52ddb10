"""What the neuron schedules propose to layout inference (:mod:`axe.schedules.infer`): the
layouts of SBUF/PSUM tiles declared with ``layout=Ax.INFER``.

An on-chip tile holds one of its two dims on the partitions, in blocks of at most 128 rows
(:mod:`.tiles`), the other contiguous on the free axis.  Every proposal lists those layouts of
the tile's shape and lets dispatch choose: a layout is accepted only where the call dispatches to
the proposal's schedules *and* every other call touching the tile, once its tiles are known,
still dispatches (``every_call``).  By priority:

- **nc_matmul** (``gemm``): TensorE's rules (:mod:`.tensore`) — the contraction dim K on the
  partitions of the stationary A and the moving B, the PSUM result with M on the partitions and N
  on the free axis; the first candidate that dispatches is K on P for A (its second dim).
- **DMA** (``copy`` between HBM and an on-chip tile, and on-chip copies): rows on the partitions
  first, 128 to a block (a tile gemm fixed earlier keeps its layout: the DMA transposes).
- **engines** (``reduce``, then ``elementwise``): the layout under which the call dispatches
  beside its fixed operands (a free-axis reduction's source with the reduced dim on F, its result
  one value a partition; the same dim on the partitions as the fixed operand; a ``(1, N)`` source
  on one partition, broadcast).
"""

from __future__ import annotations

from axe.layout import F, P, S
from axe.schedules.infer import add_proposal

from . import hardware as hw


def partition_layouts(shape, first: int = 0) -> list:
    """The on-chip tile layouts of a 2-D ``shape``: dim ``d`` on the partitions (in blocks of
    :data:`~.hardware.PMAX` rows when it exceeds them; a multiple of them), the other dim
    contiguous on F — dim ``first`` first.  Law: each layout's partition span is at most
    ``PMAX`` and it holds ``shape[0] * shape[1]`` elements once each."""
    if len(shape) != 2:
        return []
    out = []
    for d in (first, 1 - first):
        L = _rows_on_p(shape, d)
        if L is not None and L not in out:
            out.append(L)
    return out


def _rows_on_p(shape, d):
    """Dim ``d`` of ``shape`` on P (blocks of PMAX rows outermost on F), the other dim on F."""
    r, c = shape[d], shape[1 - d]
    if r <= hw.PMAX:
        return S[(r, c):(1 @ P, 1 @ F)] if d == 0 else S[(c, r):(1 @ F, 1 @ P)]
    if r % hw.PMAX:
        return None          # ragged blocks are not one layout: declare it
    if d == 0:
        return S[(r // hw.PMAX, hw.PMAX, c):(c @ F, 1 @ P, 1 @ F)]
    return S[(c, r // hw.PMAX, hw.PMAX):(1 @ F, c @ F, 1 @ P)]


def _onchip(mem) -> bool:
    return mem in ("sbuf", "psum")


def _gemm(call, key, shape, elem_bytes, mem):
    """nc_matmul: A (M, K) with K on P first; B (K, N) and C (M, N) with their first dim on P."""
    if not _onchip(mem):
        return []
    return partition_layouts(shape, 1 if key == "A" else 0)


def _rows_first(call, key, shape, elem_bytes, mem):
    """DMA, on-chip copies and the engines: rows on the partitions first, then columns."""
    return partition_layouts(shape, 0) if _onchip(mem) else []


def _label(plan, key):
    return plan.text


add_proposal("gemm", "neuron", ("nc_matmul",), _gemm, _label, priority=40, every_call=True)
add_proposal("copy", "neuron", ("dma_load", "dma_store", "engine_copy", "tensore_transpose"), _rows_first,
             _label, priority=30, every_call=True)
add_proposal("elementwise", "neuron", ("engine",), _rows_first, _label, priority=20, every_call=True)
add_proposal("reduce", "neuron", ("free_axis", "partitions_tensore"), _rows_first, _label, priority=25,
             every_call=True)
