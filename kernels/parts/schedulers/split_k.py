"""Split-K: for problems with too few output tiles to fill the GPU (decode-sized M), K is cut into
``slices`` slices and each (tile, slice) is a work unit of its own, so ``tiles × slices`` units keep
every persistent CTA busy; the fp32 partials of a tile are reduced in a fixed order by the CTA that
computes its last slice (:class:`~kernels.parts.epilogues.handover.SplitKHandover`).

Law (brute-force tested, :meth:`SplitK.units_of`): unit ``u`` is slice ``u mod S`` of tile
``u div S``; CTA ``c`` runs units ``c, c + ctas, …`` in increasing order; slice s covers k-blocks
``[s·L, (s+1)·L)`` with ``L = ceil(k_iters / S)`` (k-blocks past K are loaded as zeros by TMA and add
nothing), so every k-block of every tile is computed exactly once.  Every slice is ``L`` long, so a
CTA's j-th unit occupies pipeline iterations ``[j·L, (j+1)·L)`` on both the producer's and the
consumers' side.  Deadlock freedom: a tile's reducing unit (slice S−1) is its largest; it waits only
for smaller units, each run by a co-resident CTA before any larger unit of that CTA, so by induction
on the unit index every wait ends.
"""

from tvm.script import tirx as T

from .persistent import Persistent


class SplitK(Persistent):
    """Tiles of ``bm``×``bn`` over ``ctas`` persistent CTAs, each tile's ``k_iters`` k-blocks cut into
    ``slices`` slices of ``L = ceil(k_iters / slices) >= 2`` k-blocks (a slice of one k-block would
    not fit the mainloop's straight-line last k-block).  A build-time row count."""

    name = "split-K"
    hands_over = True

    def __init__(self, M, N, bm, bn, ctas, group, k_iters, slices, rows_per_piece):
        super().__init__(M, N, bm, bn, ctas, group)
        if self.runtime:
            raise ValueError("split_k: the workspace is sized by the tile count, so it needs a build-time M")
        self.slices, self.k_iters = slices, k_iters
        self.L = -(-k_iters // slices)
        if slices < 2 or self.L < 2 or (slices - 1) * self.L >= k_iters:
            raise ValueError(f"split_k: {slices} slices of {k_iters} k-blocks need at least 2 slices, at least 2 "
                             f"k-blocks per slice and every slice inside K (got slices of {self.L})")
        self.units = self.tiles * slices
        # fp32 partials: one per (tile, slice but the last, consumer warpgroup), rows_per_piece rows each
        self.workspace = (self.tiles * (slices - 1) * 2 * rows_per_piece, bn)

    def flags(self, sms):
        return (self.tiles * (self.slices - 1) * 2,)

    def count(self, cid):
        """The units CTA ``cid`` runs: ``ceil((units - cid) / ctas)``."""
        return (self.units - cid + self.ctas - 1) // self.ctas

    def trips(self, count):
        return 0            # no whole tiles: every unit is a slice

    def unit(self, cid, j):
        """``(tile, slice)`` of CTA ``cid``'s ``j``-th unit."""
        u = cid + j * self.ctas
        return u // self.slices, u % self.slices

    def units_of(self, cid):
        """The CPU model: CTA ``cid``'s units ``[(tile, slice, k0, k1)]`` in the order it runs them."""
        return [(t, s, s * self.L, (s + 1) * self.L) for t, s in (self.unit(cid, j) for j in range(self.count(cid)))]

    def walk(self, cid, body):
        """CTA ``cid``'s units in order: ``body(j, t, s, m_blk, n_blk)`` (a ``T.macro``) for its j-th
        unit, slice s of tile t at block (m_blk, n_blk)."""
        grid, unit, count = self.grid, self.unit, self.count

        @T.macro
        def units():
            for j in T.serial(count(cid)):
                t, s = unit(cid, j)
                m_blk, n_blk = grid.coords(t)
                body(j, t, s, m_blk, n_blk)
        units()

    def produce_rest(self, cid, load):
        """Each unit's L k-blocks, pipeline iterations ``j·L + kb``."""
        L = self.L

        @T.macro
        def slice_loads(j, t, s, m_blk, n_blk):
            for kb in T.serial(L):
                load(j * L + kb, m_blk, n_blk, s * L + kb)
        self.walk(cid, slice_loads)

    def consume_rest(self, cid, k_range, finish):
        """Each unit: its slice's k-blocks, then ``finish(m_blk, n_blk, tile, slice)``."""
        L = self.L

        @T.macro
        def slice_mma(j, t, s, m_blk, n_blk):
            k_range(j * L - s * L, s * L, s * L + L)
            finish(m_blk, n_blk, t, s)
        self.walk(cid, slice_mma)
