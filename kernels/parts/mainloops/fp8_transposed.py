"""The block-scaled FP8 mainloop computed transposed — the decode tile (``Cᵀ = B·Aᵀ``): a
:class:`~.fp8_block_scaled.BlockScaled` whose 128-row MMA side holds 128 rows of the weights B and
whose narrow side (``tile_m`` = 16, 32 or 64: the wgmma's N) holds ``tile_m`` rows of the
activations A, so that a problem of few rows M streams the weights through every tensor core
instead of padding A to a 128-row tile.

A pipeline slot holds B's 128×128 k-block (the wgmma's A operand, two 64-row halves for the two
consumer warpgroups), A's ``tile_m``×128 k-block (its B operand, K-major) and A's ``tile_m`` row
scales of that k-block (a ``tile_m``-wide TMA box of SA).  Each consumer issues four
``wgmma.m64n{tile_m}k32.e4m3`` into a fresh 64×``tile_m`` fp32 partial and promotes it with the
k-block's scales, which trade sides with the operands: SB's one scale per 128 weight rows is now
one per tile (its block-row, the tile's M side), SA's per-row scales run along the accumulator's
columns (a (1, ``tile_m``) scale: column j takes row j's).

Contract: :class:`~.fp8_block_scaled.BlockScaled`'s with the scheduler's tile grid transposed —
``m_blk`` counts 128-row blocks of B (C's columns), ``n_blk`` ``tile_m``-row blocks of A (C's
rows); the producer's ``load(pool, pipe, A, B, SA, ...)`` takes the kernel's A and B as they are.

Law: after a tile's k-blocks [k0, k) the accumulator element (r, c) of warpgroup wg holds
``Σ SB[m_blk, kb] · SA[i, kb] · Σ_{k in kb} B[j, k] · A[i, k]`` with ``j = 128·m_blk + 64·wg + r``,
``i = tile_m·n_blk + c``: ``Cᵀ[j, i]`` over those k-blocks, promoted in fp32 per k-block.
"""

import axe.lang as Ax
from kernels.parts.mainloops.fp8_block_scaled import BlockScaled
from kernels.parts.mainloops.tma_wgmma import WholeB

#: the decode tile's heights: the wgmma N of the narrow side (multiples of 16 whose row scales make a
#: 16-byte TMA box) up to 64 (a larger one is the 128-row tile's regime)
TILE_M = (16, 32, 64)


class TransposedBlockScaled(BlockScaled):
    """The block-scaled FP8 mainloop of a 128 × ``tile_m`` tile of ``Cᵀ`` over ``k_iters`` k-blocks;
    ``n_blocks``: SB's rows; ``k_loaded``: as :class:`~.fp8_block_scaled.BlockScaled`'s."""

    name = "TMA + fp8 wgmma, block-scaled, transposed (decode tile)"

    def __init__(self, tile_m, stages, k_iters, n_blocks, k_loaded=None):
        if tile_m not in TILE_M:
            raise ValueError(f"gemm_fp8: tile_m must be one of {TILE_M} for the transposed decode tile, got {tile_m!r}")
        super().__init__(tile_m, stages, k_iters, n_blocks, WholeB(), k_loaded)
        self.sa_width = tile_m      # one row scale per row of A in the tile

    def load(self, pool, pipe, A, B, SA, i, m_blk, n_blk, kb):
        """Producer: B's k-block of weight block m_blk fills the 128-row side, A's of row block n_blk
        the narrow one."""
        super().load(pool, pipe, B, A, SA, i, m_blk, n_blk, kb)

    def sa_block(self, m_blk, n_blk):
        """A's rows are the tile's columns: block n_blk."""
        return n_blk

    def sa_view(self, s, wg):
        """Slot s's row scales as a (1, tile_m) scale: accumulator column c takes row c's."""
        return self.sa[s:s + 1, :self.sa_width]

    def sb_block(self, m_blk, n_blk, h):
        """The tile's 128 weight rows are SB's block m_blk."""
        return m_blk
