"""The gated MLP's activation fused into a GEMM's store: the weight's rows are interleaved in
periods of ``p`` rows, ``p/2`` gate rows then the matching ``p/2`` up rows
(:func:`kernels.tp_shapes.interleave` with ``bn=p``, TVM-free so that a machine without TVM
prepares the weight), so each period of a tile's accumulator columns holds gate then up, and the
tile stores ``silu(gate) · up`` — ``bn/2`` columns of C at ``n_blk · bn/2`` — through the chunked
store of :mod:`.store`.  ``p`` is the tile's width (``kernels/ag_gemm.py``) or a divisor of it that
is a multiple of 128 (``kernels/gemm.py``'s ``act``: one weight for every bucket's tile).

Law: C[m, n_blk·bn/2 + b·p/2 + c] = silu(acc[m, b·p + c]) · acc[m, b·p + p/2 + c] computed in fp32
(a split tile's partial added first) and rounded once, for the tile's rows, every period b < bn/p
and every c < p/2; C has half the GEMM's columns.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.epilogues.chunks import chunking
from kernels.parts.epilogues.store import ChunkedStore


def silu_mul(dtype):
    """``(g, u) -> cast(silu(g) · u)`` in fp32, rounded once to ``dtype``."""
    def f(g, u):
        return T.Cast(dtype, g / (T.float32(1) + T.exp(-g)) * u)
    return f


class SiluMulStore(ChunkedStore):
    """SiLU(gate) · up of each cooperative tile, then the chunked TMA store of the ``bn/2`` columns
    (``period``: the interleave's period, default the tile's width)."""

    name = "SiLU·up + stmatrix + TMA store"

    def __init__(self, main, sched, dtype, epilogue, epilogue_bufs=None, period=None):
        self.period = period or main.bn
        if main.split != "rows" or self.period % 128 or main.bn % self.period:
            raise ValueError(f"gemm: the SiLU·up store needs the cooperative tile (rows split) whose {main.bn} columns "
                             f"are whole interleave periods of a multiple of 128 (gate and up halves of 64-column "
                             f"blocks); got {main.name}, bn={main.bn}, period={self.period}")
        self.half = main.bn // 2
        super().__init__(main, sched, dtype, min(epilogue, self.half), epilogue_bufs)
        self.chunks, self.bufs = chunking(self.epilogue, self.half, epilogue_bufs)   # chunks of the stored half only
        self.smem = 2 * self.bufs * self.rows * self.epilogue

    def out_cols(self, N):
        if N % self.main.bn:
            raise ValueError(f"gemm: the SiLU·up store needs N={N} a multiple of the tile's {self.main.bn} columns")
        return N // 2

    @property
    def tile_cols(self):
        return self.half

    def convert(self, out, acc):
        p, h = self.period, self.period // 2
        for b in range(self.main.bn // p):
            Ax.elementwise(out[:, b * h:(b + 1) * h], silu_mul(self.dtype), acc[:, b * p:b * p + h], acc[:, b * p + h:(b + 1) * p])

    def out_part(self, out):
        return out[:, :self.half]

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        """The act needs the full sum: a split tile's fp32 partial is added before it."""
        if partial is not None:
            Ax.elementwise(acc, lambda a, q: a + q, acc, partial)
        super().tile(acc, out, pool, C, wg, leader, m_blk, n_blk, dest=dest, add_chunk=add_chunk)
