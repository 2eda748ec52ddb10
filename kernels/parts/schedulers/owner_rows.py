"""The owners' order reading A as one matrix: the rank's K slice of every owner's rows, ``world · M``
rows of ``K``, loaded with the 2-D boxes of the one-GPU GEMM instead of one 3-D box per owner.

Law: when the owner's row count ``M`` is a whole number of ``bm``-row blocks, row block ``j`` of
owner ``o`` in the (owner, rows, K) tensor is rows ``o·M + j·bm … o·M + (j+1)·bm − 1`` of the same
memory read as a (``world · M``, K) matrix, so :meth:`OwnerRows.a_region` names exactly the
elements :meth:`OwnerOrder.a_region <kernels.parts.schedulers.owners.OwnerOrder.a_region>` names,
for every scheduled block-row; the loads are then the plain GEMM's (a 2-D tensor map, a 2-D box per
k-block).  With a ragged ``M`` a 2-D box would run into the next owner's rows, so it is refused.
"""

from kernels.parts import CompositionError

from .owners import OwnerOrder


class OwnerRows(OwnerOrder):
    """:class:`OwnerOrder` over A as the (``world · M``, K) matrix it is in memory; ``M`` (one owner's
    rows) must be a multiple of ``bm``."""

    a_lead = ()

    def __init__(self, M, N, bm, bn, ctas, group, world, stack=1, order="owners"):
        if M % bm:
            raise CompositionError(f"{self.name} scheduler reading A by rows: each owner's {M} rows must be a "
                                   f"multiple of the {bm}-row tile (else a 2-D box runs into the next owner's rows)")
        super().__init__(M, N, bm, bn, ctas, group, world, stack, order)

    def a_region(self, A, m_blk, kb, rows, depth, mesh=None):
        """A's k-block ``kb`` of the owner's row block that scheduled block-row ``m_blk`` names: the
        rows ``owner · M + j · rows …`` of the (``world · M``, K) matrix."""
        seg, j = self.segment(m_blk)
        row = (self.owner(mesh.rank, seg) * self.m_tiles + j) * rows
        return A[row:row + rows, kb * depth:(kb + 1) * depth]
