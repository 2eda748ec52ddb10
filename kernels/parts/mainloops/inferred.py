"""The Hopper mainloop with its shared tiles inferred: :class:`~kernels.parts.mainloops.tma_wgmma.Cooperative`
(TMA producer, two wgmma consumer warpgroups, a ``stages``-deep ring) whose every view of the shared
pool is an *open view*, ``Ax.view(pool, Ax.INFER, shape, base=..., name=role)``: no swizzle, panel or
row offset is written here.  Layout inference (:func:`axe.schedules.infer.open_view`) gives each
role one layout for all its views, from the operators that touch any of them:

- ``As``: a stage's ``bm``×``bk`` tile of A (at ``a_at + s·bm·bk``), written by TMA; each consumer
  reads its 64 rows as a box of it (``As[wg·64:(wg+1)·64, :]``), whose base the inferred layout moves;
- ``Bs``: a stage's tile of B as stored (K×N, or N×K read through ``permute``), written by TMA;
- ``Cs``: the epilogue's staging buffers, which the store epilogue carves through :meth:`tile`.

wgmma's proposal fixes ``As`` and ``Bs`` (the 128-byte-swizzled K- or MN-major tiles its descriptors
read, which TMA also writes), stmatrix's fixes ``Cs`` (its atom's 16-byte rows, which the TMA store
reads): the layouts :func:`kernels.parts.tiles.swizzled` writes by hand.  Contract and ring law:
the cooperative mainloop's (one GPU, B loaded whole; A without leading dims).
"""

import axe.lang as Ax
from kernels.parts.mainloops.tma_wgmma import HALF, Cooperative, WholeB


class InferredB(WholeB):
    """B's k-block loaded whole into the stage's open ``Bs`` view."""

    def load(self, main, pool, pipe, B, s, n_blk, kb, rank):
        Ax.copy(main.b_slot(pool, s), main.b_region(B, n_blk * main.bn, kb * main.bk), barrier=pipe.full, stage=s)


class Inferred(Cooperative):
    """:class:`Cooperative` (B whole) with the shared views ``As``, ``Bs`` and ``Cs`` inferred."""

    name = "TMA + wgmma, cooperative, inferred shared tiles"

    def __init__(self, dtype, b_major, bm, bn, bk, stages, k_iters, in_flight):
        super().__init__(dtype, b_major, bm, bn, bk, stages, k_iters, in_flight, InferredB())

    def tile(self, pool, at, shape, role="Cs"):
        """The open view ``role`` at element ``at`` of the pool (the epilogue's buffers by default)."""
        return Ax.view(pool, Ax.INFER, shape, base=at, name=role)

    def a_slot(self, pool, s):
        return self.tile(pool, self.a_at + s * (self.bm * self.bk), (self.bm, self.bk), "As")

    def b_slot(self, pool, s):
        return self.tile(pool, self.b_at + s * (self.bk * self.bn), self.b_tile, "Bs")

    def a_operand(self, pool, s, wg):
        """Warpgroup wg's 64 rows of slot s's A tile."""
        return self.a_slot(pool, s)[wg * HALF:(wg + 1) * HALF, :]

    def b_operand(self, pool, s, shape=None):
        Bs = self.b_slot(pool, s)
        return Bs if self.b_major == "row" else Ax.permute(Bs, (1, 0))      # the K×N view

    def load(self, pool, pipe, A, B, i, m_blk, n_blk, kb, rank, sched, mesh=None):
        """Producer: iteration i loads k-block kb of tile (m_blk, n_blk) into its slot."""
        s = pipe.slot(i)
        pipe.acquire(i)
        a_tile = self.a_slot(pool, s)
        sched.load_a(lambda src: Ax.copy(a_tile, src, barrier=pipe.full, stage=s), A, m_blk, kb, self.bm, self.bk, mesh)
        self.b.load(self, pool, pipe, B, s, n_blk, kb, rank)
