"""The owners' order of a distributed epilogue (GEMM + reduce-scatter on ``world`` GPUs): the output
rows are cut by owner, and each rank walks the owners in order ``r+1, r+2, …, r`` — its own rows
last, so the peers' partial tiles for them arrive while it still computes.

Law: the scheduled block-rows are ``world`` segments of ``m_tiles`` (the persistent grouped order
over ``world · m_tiles`` block-rows); block-row ``p`` is row block ``p mod m_tiles`` of segment
``p div m_tiles``, owned by rank ``(r + 1 + segment) mod world``; every (owner, row block, column)
is visited exactly once per rank, and segment ``world − 1`` is the rank's own.  With
``order="raster"`` (a measurement aid: the plain GEMM's order of the rows, the same on every rank)
segment ``s`` is owner ``s``'s rows and the rank's own segment is segment ``r``; the visits are the
same, only their order differs.  On either order a tile is a peer's exactly where
:meth:`OwnerOrder.peer` says so, i.e. where its owner is not the rank.
"""

from tvm import tirx

from .persistent import Persistent

#: the orders of the owners' segments: each rank's own rows last, or every rank in row order
ORDERS = ("owners", "raster")


class OwnerOrder(Persistent):
    """:class:`Persistent` over ``world`` segments of the per-owner block-rows (``M`` is one owner's
    rows), in the order ``order`` (:data:`ORDERS`).  A is this rank's K slice of every owner's
    rows: an (owner, rows, K) tensor."""

    name = "owners' order"
    a_lead = (1,)

    def __init__(self, M, N, bm, bn, ctas, group, world, stack=1, order="owners"):
        if order not in ORDERS:
            raise ValueError(f"gemm_rs: rs_order must be one of {list(ORDERS)}, got {order!r} (the owners' segments: "
                             "each rank's own rows last, or in row order)")
        super().__init__(M, N, bm, bn, ctas, group, stack=stack, segments=world)
        self.world, self.order = world, order

    def segment(self, p):
        """``(segment, row block)`` of scheduled block-row ``p``."""
        return p // self.m_tiles, p % self.m_tiles

    def owner(self, rank, seg):
        """The rank that owns the rows of segment ``seg`` as seen from ``rank``."""
        return seg if self.order == "raster" else (rank + 1 + seg) % self.world

    def peer(self, rank, seg):
        """Whether segment ``seg``'s rows belong to another rank than ``rank`` (a condition: a
        ``bool`` for ints, TIR for expressions)."""
        if self.order == "owners":
            return seg < self.world - 1
        return seg != rank if isinstance(seg, int) and isinstance(rank, int) else tirx.NE(seg, rank)

    def a_region(self, A, m_blk, kb, rows, depth, mesh=None):
        """A's k-block ``kb`` of the owner's row block that scheduled block-row ``m_blk`` names."""
        owner = self.owner(mesh.rank, m_blk // self.m_tiles)
        j = m_blk % self.m_tiles
        return A[owner, j * rows:(j + 1) * rows, kb * depth:(kb + 1) * depth]
