"""The gated MLP's activation fused into a GEMM's store: each tile's accumulator columns
``[0, bn/2)`` are gate columns and ``[bn/2, bn)`` the matching up columns (the weight's rows are
interleaved by tile: :func:`kernels.tp_shapes.interleave`, TVM-free so that a machine without TVM
prepares the weight), and the tile stores ``silu(gate) · up`` — ``bn/2``
columns of C at ``n_blk · bn/2`` — through the chunked store of :mod:`.store`.

Law: C[m, n_blk·bn/2 + c] = silu(acc[m, c]) · acc[m, bn/2 + c] computed in fp32 and rounded once,
for the tile's rows and every c < bn/2; C has half the GEMM's columns.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.epilogues.store import ChunkedStore


class SiluMulStore(ChunkedStore):
    """SiLU(gate) · up of each cooperative tile, then the chunked TMA store of the ``bn/2`` columns."""

    name = "SiLU·up + stmatrix + TMA store"

    def __init__(self, main, sched, dtype, epilogue, epilogue_bufs=None):
        if main.split != "rows" or main.bn % 128:
            raise ValueError(f"gemm: the SiLU·up store needs the cooperative tile (rows split) with a multiple of "
                             f"128 columns (gate and up halves of 64-column blocks); got {main.name}, bn={main.bn}")
        self.half = main.bn // 2
        super().__init__(main, sched, dtype, min(epilogue, self.half), epilogue_bufs)
        # chunks of the stored half only
        from kernels.parts.epilogues.store import chunking
        self.chunks, self.bufs = chunking(self.epilogue, self.half, epilogue_bufs)
        self.smem = 2 * self.bufs * self.rows * self.epilogue

    def out_cols(self, N):
        if N % self.main.bn:
            raise ValueError(f"gemm: the SiLU·up store needs N={N} a multiple of the tile's {self.main.bn} columns")
        return N // 2

    @property
    def tile_cols(self):
        return self.half

    def convert(self, out, acc):
        h, dtype = self.half, self.dtype

        def silu_mul(g, u):
            return T.Cast(dtype, g / (T.float32(1) + T.exp(-g)) * u)
        Ax.elementwise(out[:, :h], silu_mul, acc[:, :h], acc[:, h:])

    def out_part(self, out):
        return out[:, :self.half]
