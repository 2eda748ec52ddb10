"""The gather order of an all-gather + GEMM on ``world`` GPUs: A's rows are sharded by owner, each
rank computes every row of its column slice of C, and walks the owners ``r, r+1, …, r−1`` — its own
rows first, from its own shard, while the peers' rows cross NVLink into its gathered buffer.

Law: the scheduled block-rows are ``world`` segments of ``m_tiles`` (the persistent grouped order
over ``world · m_tiles`` block-rows); block-row ``p`` is row block ``p mod m_tiles`` of segment
``p div m_tiles``, owned by rank ``(r + segment) mod world``; every (owner, row block, column) is
visited exactly once per rank, and segment 0 is the rank's own.  A peer's row block ``j`` is read
only after all ``pieces`` of it have been signalled (flag :meth:`flag` ``(owner, j, piece)``; with
``pieces=0`` one signal per owner covers all its rows, the copy engine's staging), from
the gathered buffer's slot of that owner in this launch's half (:meth:`slot_row`: launches alternate
between two halves, so a peer that starts the next launch early never overwrites rows still read).
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from kernels.parts.tiles import block

from .persistent import Persistent


class GatherOrder(Persistent):
    """:class:`Persistent` over ``world`` segments of one owner's block-rows (``M`` is one owner's
    rows, a multiple of ``bm``), own rows first; ``pieces``: signals per row block."""

    name = "gather order"

    def __init__(self, M, N, bm, bn, ctas, group, world, pieces, stack=1):
        if M % bm:
            raise ValueError(f"gather order: the rows per rank ({M}) must be a multiple of the tile's {bm} rows")
        super().__init__(M, N, bm, bn, ctas, group, stack=stack, segments=world)
        self.M, self.world, self.pieces, self.bm = M, world, pieces, bm
        self.per_owner = self.m_tiles * pieces if pieces else 1       # signals per owner
        self.nsig = world * self.per_owner
        self.gathered = None     # the gathered buffer's tensor-mapped view (the all-gather declares it)

    def segment(self, p):
        """``(segment, row block)`` of scheduled block-row ``p``."""
        return p // self.m_tiles, p % self.m_tiles

    def owner(self, rank, seg):
        """The rank whose rows segment ``seg`` holds, as seen from ``rank``."""
        return (rank + seg) % self.world

    def flag(self, src, j, piece):
        """The signal on a receiver that piece ``piece`` of row block ``j`` of ``src``'s rows arrived."""
        return src * self.per_owner + (j * self.pieces + piece if self.pieces else 0)

    def slot_row(self, epoch, owner):
        """The first row of ``owner``'s slot in the gathered buffer's half of launch ``epoch``."""
        return (epoch % 2 * self.world + owner) * self.M

    def before_tile(self, m_blk, mesh=None):
        """A peer's row block: one lane waits (bounded) for each of its pieces; then the async proxy
        (TMA) may read what the peer's stores wrote."""
        seg, j = self.segment(m_blk)
        owner = self.owner(mesh.rank, seg)
        with Ax.guard(seg > 0):
            with Ax.cuda.elect_one():
                for piece in range(max(self.pieces, 1)):
                    Ax.wait(self.flag(owner, j, piece), owner)
            T.evaluate(T.cuda.warp_sync())
            Ax.cuda.fence_proxy_async("global")

    def load_a(self, copy, A, m_blk, kb, rows, depth, mesh=None):
        """Own rows from this rank's shard ``A``; a peer's from its slot of the gathered buffer."""
        seg, j = self.segment(m_blk)
        with IRB.If(seg == 0):
            with IRB.Then():
                copy(block(A, j, kb, rows, depth))
            with IRB.Else():
                r0 = self.slot_row(mesh.epoch, self.owner(mesh.rank, seg)) + j * rows
                copy(self.gathered[r0:r0 + rows, kb * depth:(kb + 1) * depth])
