"""The store of a tile computed transposed (``Cᵀ = B·Aᵀ``, :class:`~kernels.parts.Problem`'s
``swap``): the mainloop's rows are C's columns and its columns C's rows, so that a problem with few
rows M (decode) puts the weights' rows on the MMA's M side and the M rows on its narrow N side
(8 to 64) instead of padding a 128-row tile.

Each consumer warpgroup casts its ``64 × tile_m`` accumulator (C's columns × C's rows), writes it
transposed into a ``tile_m × 64`` shared buffer laid out for TMA (128-byte swizzle) and its leader
stores the buffer into ``C[rows, cols]`` with one TMA store, clipped at M and N.

Law: for every (m, n) inside C, ``C[m, n] = cast(acc[n − n0, m − m0])`` of the tile at (n0, m0), written
once; a split tile's fp32 partial is added before the cast.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.epilogues.store import ChunkedStore


class TransposedStore(ChunkedStore):
    """Cast + transposed store through one ``tile_m × 64`` buffer per consumer warpgroup (``main``:
    a mainloop whose tile is (C's columns, C's rows))."""

    name = "cast + transposed TMA store"

    def __init__(self, main, sched, dtype):
        self.main, self.sched, self.dtype = main, sched, dtype
        self.rows, self.cols = main.part                  # C's columns (64 per warpgroup), C's rows
        self.epilogue, self.chunks, self.bufs = self.cols, 1, 1
        self.c_at = main.smem
        self.smem = 2 * self.rows * self.cols

    def buffer(self, pool, wg, j=0):
        """Warpgroup wg's buffer: ``cols × rows`` (C's orientation)."""
        return self.main.tile(pool, self.c_at + wg * (self.rows * self.cols), (self.cols, self.rows))

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        if dest is not None or add_chunk is not None:
            raise ValueError("gemm: the transposed store has no remote destination or added chunks")
        main, dtype = self.main, self.dtype
        if partial is None:
            Ax.cast(out, acc)
        else:
            Ax.elementwise(out, lambda a, p: T.cast(a + p, dtype), acc, partial)
        col = m_blk * main.bm + main.row0(wg)         # the mainloop's rows are C's columns
        row = n_blk * main.bn
        buf = self.buffer(pool, wg)

        def write(j, Cw):
            Ax.copy(C[row:row + self.cols, col:col + self.rows], buf, fence=False, wait=False)
        Ax.cuda.staged_store(out, self.cols, lambda j: Ax.permute(buf, (1, 0)), write, 1 + wg, leader, 1)
