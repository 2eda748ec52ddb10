"""The store epilogue of a mainloop whose shared pool is not of the output type (the block-scaled
FP8 one, :mod:`kernels.parts.mainloops.fp8_block_scaled`): :class:`~.store.ChunkedStore`'s cast +
stmatrix + TMA store, chunk by chunk, through one static buffer ``cbuf`` of the output type declared
beside the pool (``rows`` × ``width`` per consumer warpgroup, a chunk at its start) instead of views
after the mainloop's slots, one buffer per warpgroup.

What differs from :class:`~.store.ChunkedStore` + :class:`~.handover.Handover`, and why it is a
class of its own: the buffer (above), and a split tile is finished at **one** store site
(:class:`OneSiteHandover`): the tail publishes its partial (:func:`~.handover.publish`); any other
piece waits for the next CTA's partial where it is a head (:func:`~.handover.take` under ``k1 <
k_iters``) and stores, adding the partial under the same condition chunk by chunk — each chunk
loaded into the mainloop's partial accumulator (free once the main loop is done), added into the
accumulator, then cast.  One site because each site's hoisted epilogue addresses cost consumer
registers; chunk by chunk because a whole 64×256 fp32 partial read at once beside the accumulator
and its cast spilled.

Contract: :class:`~.store.ChunkedStore`'s, plus ``shared()`` (the buffer, declared once per CTA)
and ``declare_scratch(W_, F_)`` (the hand-over's workspace and flags; nothing for whole tiles).
Law: :mod:`.store`'s and :mod:`.handover`'s.
"""

from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from kernels.parts.epilogues.handover import Handover, publish, take
from kernels.parts.epilogues.store import ChunkedStore
from kernels.parts.tiles import swizzled


class StaticStore(ChunkedStore):
    """Cast + stmatrix + TMA store of each consumer warpgroup's part of the tile, ``epilogue``
    columns at a time through its ``rows`` × ``width`` region of the static buffer."""

    name = "cast + stmatrix + TMA store through a static buffer"

    def __init__(self, main, sched, dtype, epilogue, width):
        super().__init__(main, sched, dtype, epilogue, epilogue_bufs=1)
        self.width = width
        self.smem = 0               # nothing in the mainloop's pool

    def shared(self):
        """The static buffer: a ``rows`` × ``width`` region per consumer warpgroup."""
        return Ax.shared((2 * self.rows, self.width), self.dtype, swizzled(2 * self.rows, self.width), name="cbuf")

    def buffer(self, pool, wg, j):
        """Every chunk through the start of warpgroup wg's region (``pool``: the static buffer)."""
        e = self.epilogue
        return Ax.view(pool, swizzled(self.rows, e), (self.rows, e), base=wg * (self.rows * self.width))

    def declare_scratch(self, W_, F_):
        """Whole tiles: no workspace (its parameters leave the signature)."""


class OneSiteHandover(Handover):
    """:class:`StaticStore` finishing stream-K pieces at one store site (the module docstring)."""

    def declare_scratch(self, W_, F_):
        """The scratch partials (fp32, a 64-row block per CTA and warpgroup) and their flags."""
        self.W, self.F = Ax.param(W_, scratch=True), Ax.param(F_, scratch=True)

    def finish(self, acc, out, pool, C, cid, wg, leader, m_blk, n_blk, k0, k1, scratch):
        """After piece [k0, k1) of a tile: a tail (the CTA's first piece, k0 > 0) goes to workspace
        block ``cid·2 + wg``, published by a flag; a head (the CTA's last piece, k1 < k_iters) waits
        for CTA ``cid + 1``'s flag and adds that block, through ``scratch`` (a chunk's shape); a head
        or a whole tile is then stored."""
        W, F, e = self.W, self.F, self.epilogue
        with IRB.If(k0 > 0):
            with IRB.Then():
                publish(W, F, cid * 2 + wg, acc, leader, wg)
            with IRB.Else():
                partial = take(W, F, (cid + 1) * 2 + wg, leader, wg, pred=k1 < self.k_iters)

                def add(j, Cw, n0):
                    cols = slice(j * e, (j + 1) * e)
                    with Ax.guard(k1 < self.k_iters):
                        Ax.copy(scratch, partial[:, cols])
                        Ax.elementwise(acc[:, cols], lambda a, q: a + q, acc[:, cols], scratch)
                self.inner.tile(acc, out, pool, C, wg, leader, m_blk, n_blk, add_chunk=add)
