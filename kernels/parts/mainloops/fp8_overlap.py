"""The block-scaled FP8 mainloop with two partial accumulators (:class:`BlockScaledOverlap`): k-block
j's wgmma runs while k-block j − 1's partial is scaled and promoted, so a consumer warpgroup never
waits on its own tensor-core work before it issues the next.

:class:`~.fp8_block_scaled.BlockScaled` keeps one partial: per k-block a warpgroup issues its wgmma,
waits for it, promotes, and only then issues the next (28% of the warp-stall samples at M = 8192 sit
on that wait: docs/gemm_fp8.md, "Where the time goes at M = 8192").  Two partials cost 2 × 64
registers beside the 64 of a 64×128 accumulator, so this part is the 128-column tile's (``bn`` 128;
256 would need 256 of the 232 a consumer gets).

Order per warpgroup over k-blocks k0 … k1 − 1 (a static count, the persistent schedule's whole tile):
issue k0 into P0; issue k0 + 1 into P1, wait until one group is pending (k0's is done), promote P0,
free k0's slot; then alternately issue the next k-block into the partial just promoted and promote
the other; finally wait for the last group and promote it.  A slot is freed once its partial is
promoted (its row scales are read by the promotion), so the ring holds one slot more per consumer
than the single-partial loop does.

Law: the single-partial loop's (:mod:`.fp8_block_scaled`): after the tile's k-blocks the accumulator
holds ``Σ_kb SA[i, kb] · SB[j // 128, kb] · Σ_{k in kb} A[i, k] · B[j, k]`` in fp32, each k-block's
product from the tensor cores promoted once, in k order.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.lang.block_scale import scale_accumulate
from kernels.parts.mainloops.fp8_block_scaled import BK, BM, PART, BlockScaled
from kernels.parts.mainloops.tma_wgmma import HALF


class BlockScaledOverlap(BlockScaled):
    """:class:`~.fp8_block_scaled.BlockScaled` on a 128×128 tile with two partial accumulators
    (``consume`` takes them as a pair); the persistent schedule only (its tiles' k-block counts are
    static: the alternation of the partials is unrolled at build time)."""

    name = "TMA + fp8 wgmma, block-scaled, two partials"
    partials = 2

    def __init__(self, bn, stages, k_iters, n_blocks, b, k_loaded=None):
        if bn != PART:
            raise ValueError(f"gemm_fp8: two partial accumulators are built for bn={PART} (2 x 64 registers beside "
                             f"the accumulator's 64 of a consumer's 232), got bn={bn}")
        super().__init__(bn, stages, k_iters, n_blocks, b, k_loaded)

    def issue(self, pool, pipe, part, wg, i):
        """Wait for slot i's operands and issue its wgmma into ``part`` (a committed group, not waited for)."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = self.tile(pool, self.a_at + s * (BM * BK) + wg * (HALF * BK), (HALF, BK))
        b = self.tile(pool, self.b_at + s * (self.bn * BK), (self.bn, BK))
        Ax.gemm(part, a, Ax.permute(b, (1, 0)), accumulate=False, wait=False)

    def promote(self, SB, pipe, acc, part, wg, i, kb, m_blk, n_blk, first, pending):
        """Once at most ``pending`` groups are in flight (k-block kb's is done), add ``part`` scaled by
        k-block kb's scales into ``acc`` (start it where ``first``) and free slot i."""
        s = pipe.slot(i)
        nb = self.sb_block(m_blk, n_blk, 0)
        kc = self.sb_k(kb)

        def ready():
            Ax.cuda.wgmma_wait(pending)
            Ax.cuda.fence_registers(part)
        scale_accumulate(acc, part, self.sa_view(s, wg), SB[nb:nb + 1, kc:kc + 1], accumulate=not first,
                         before_apply=ready)
        self.release(pipe, i)

    def k_range(self, pool, SB, pipe, acc, part, wg, base, k0, k1, m_blk, n_blk):
        """k-blocks k0 .. k1 − 1 (static) of tile (m_blk, n_blk), ``part`` the two partials (P0, P1)."""
        if not (isinstance(k0, int) and isinstance(k1, int)):
            raise ValueError("gemm_fp8: two partial accumulators alternate over a static k-block range "
                             "(the persistent schedule's whole tiles)")
        p0, p1 = part
        issue, promote = self.issue, self.promote
        rest = max(k1 - k0 - 2, 0)          # k-blocks after the first two

        @T.macro
        def one():
            issue(pool, pipe, p0, wg, base + k0)
            promote(SB, pipe, acc, p0, wg, base + k0, k0, m_blk, n_blk, True, 0)

        @T.macro
        def head():
            issue(pool, pipe, p0, wg, base + k0)
            issue(pool, pipe, p1, wg, base + k0 + 1)
            promote(SB, pipe, acc, p0, wg, base + k0, k0, m_blk, n_blk, True, 1)
            for q in T.serial(rest // 2):
                j = k0 + 2 + 2 * q
                issue(pool, pipe, p0, wg, base + j)
                promote(SB, pipe, acc, p1, wg, base + j - 1, j - 1, m_blk, n_blk, False, 1)
                issue(pool, pipe, p1, wg, base + j + 1)
                promote(SB, pipe, acc, p0, wg, base + j, j, m_blk, n_blk, False, 1)

        @T.macro
        def odd_tail():         # one k-block left to issue, into P0
            issue(pool, pipe, p0, wg, base + k1 - 1)
            promote(SB, pipe, acc, p1, wg, base + k1 - 2, k1 - 2, m_blk, n_blk, False, 1)
            promote(SB, pipe, acc, p0, wg, base + k1 - 1, k1 - 1, m_blk, n_blk, False, 0)

        @T.macro
        def even_tail():        # the last k-block is in flight in P1
            promote(SB, pipe, acc, p1, wg, base + k1 - 1, k1 - 1, m_blk, n_blk, False, 0)

        if k1 - k0 == 1:
            one()
        else:
            head()
            if rest % 2:
                odd_tail()
            else:
                even_tail()
