"""The persistent data-parallel tile scheduler: one CTA per SM walks the output tiles in grouped
order (bands of ``group`` block-rows, each band column by column, so that neighbouring CTAs share
A's and B's slabs in L2).

Contract (every scheduler offers it; the kernel skeleton calls nothing else):

- ``launch_grid(sms)``: the grid to launch (on single CTAs an expression of a run-time tile count:
  no more CTAs than tiles; in clusters every SM, as a cluster launch's grid is fixed at build time);
- ``count(cid)``: the tiles CTA ``cid`` is given; ``trips(count)``: how many of them it runs whole
  (tile by tile, all k-blocks); ``coords(cid, it, rank)``: ``(m block, n block)`` of its ``it``-th;
- ``before_tile(m_blk, mesh)``: what the producer does before loading a tile's k-blocks (nothing
  here; the gather order waits for a peer's rows); ``load_a(copy, A, m_blk, kb, rows, depth, mesh)``:
  ``copy(region)`` of A's k-block (:meth:`a_region` here; the gather order picks the source);
- ``produce_rest(cid, load)`` / ``consume_rest(cid, k_range, finish)``: what the CTA runs after its
  whole tiles (nothing here; stream-K's pieces);
- ``workspace``: the fp32 scratch shape its hand-overs need (``(1, 1)``: none); ``flags(sms)``: the
  int32 flags beside it.

Law: over CTAs ``0 .. ctas-1`` the tiles ``cid + i·ctas`` for ``i < count(cid)`` cover every tile of
the grid exactly once; ``coords`` is a bijection of ``[0, tiles)`` onto the ``(m, n)`` grid
(:class:`axe.lang.TileSchedule`, brute-force tested).  With ``stack`` CTAs per cluster a scheduled
block-row is ``stack`` neighbouring block-rows, one per CTA (``rank``); the last cluster's rows may
lie past M (``past_rows``).  A run-time M keeps the law with the tile count an expression of M: in
clusters the grid is every SM, so a cluster numbered past the tiles is given none (``count`` 0).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.tiles import block


class Persistent:
    """Tiles of ``bm`` rows × ``bn`` columns of an ``M``×``N`` output over ``ctas`` persistent CTAs in
    clusters of ``stack``; ``M`` may be a TIR variable (a run-time row count).  ``segments``: the
    block-rows repeat that many times (one segment per owner of the rows, :mod:`.owners`)."""

    name = "persistent"
    hands_over = False          # whether its tiles are split, so an epilogue must hand partials over
    workspace = (1, 1)

    def __init__(self, M, N, bm, bn, ctas, group, stack=1, segments=1):
        self.runtime = not isinstance(M, int)
        self.m_tiles = (M + bm - 1) // bm            # ceil-div written so that it stays readable as TIR
        self.n_tiles = -(-N // bn)
        self.stack = stack
        rows = (self.m_tiles + stack - 1) // stack * segments
        self.grid = Ax.TileSchedule(rows, self.n_tiles, ctas, group, stack)
        self.ctas = ctas

    @property
    def tiles(self):
        return self.grid.tiles

    @property
    def past_rows(self):
        """Whether the last cluster's block-rows can lie past M (clusters of tiles over an odd count;
        with a run-time M, any clusters: the count is known at launch only)."""
        if self.runtime:
            return self.stack > 1
        return self.stack > 1 and self.m_tiles % self.stack != 0

    def flags(self, sms):
        """The scratch flags its hand-overs need: one per CTA and consumer warpgroup."""
        return (2 * sms,)

    def launch_grid(self, sms):
        """The persistent grid: ``sms`` CTAs, or on single CTAs with a run-time tile count no more than
        tiles.  Clusters launch ``sms`` CTAs at any M (``Ax.cuda.cluster_launch`` takes a whole number
        of clusters fixed at build time); those past the tiles are given none."""
        return [T.min(sms, self.grid.tiles)] if self.runtime and self.stack == 1 else sms

    def count(self, cid):
        return self.grid.count(cid)

    def trips(self, count):
        return count

    def coords(self, cid, it, rank=0):
        return self.grid.coords(self.grid.tile(cid, it), rank)

    #: extent-1 dims in front of an A tile (A is a plain matrix here)
    a_lead = ()

    def a_region(self, A, m_blk, kb, rows, depth, mesh=None):
        """A's k-block ``kb`` (``depth`` deep) of scheduled block-row ``m_blk`` (``rows`` high)."""
        return block(A, m_blk, kb, rows, depth)

    def before_tile(self, m_blk, mesh=None):
        """Nothing to wait for."""

    def load_a(self, copy, A, m_blk, kb, rows, depth, mesh=None):
        """``copy`` A's k-block ``kb`` of scheduled block-row ``m_blk`` into its slot."""
        copy(self.a_region(A, m_blk, kb, rows, depth, mesh))

    def produce_rest(self, cid, load):
        """Nothing after the whole tiles."""

    def consume_rest(self, cid, k_range, finish):
        """Nothing after the whole tiles."""
