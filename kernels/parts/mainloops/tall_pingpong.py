"""The ping-pong mainloop on 128-row tiles with skewed wgmma groups (sm_90a): each consumer warpgroup
computes whole 128-row tiles (the CTA's tiles alternate between the two, taking turns as
:class:`~kernels.parts.mainloops.tma_wgmma.PingPong` does), its accumulator two 64-row wgmma
fragments, and its k-loop is skewed: k-block j's first 64 rows are issued before the wait for the
group that holds k-block j − 1's last 64 rows, so a wgmma group is always queued behind the one the
tensor pipe is running (each half its own group, the wait leaving the newest in flight).  This is the structure of cuBLAS's narrow ``nvjet_sm90_tst`` kernels read
from their SASS (docs/gemm.md, "The narrow tile's ring and its k-block depth").

Law of the ring (as :mod:`~kernels.parts.mainloops.tma_wgmma`): iteration i's slot is released once
the group holding both its halves has completed (at the next k-block's wait, or the tile's last wait).
Up to 128 columns: the accumulator and the cast output (1.5 × tile_n registers per thread) fit a
consumer's registers.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, tile
from kernels.parts.mainloops.tma_wgmma import HALF, Cooperative, PingPong

#: the widest tile whose 128-row accumulator and output fit a consumer warpgroup's registers
MAX_COLS = 128


class TallPingPong(PingPong):
    """Each consumer warpgroup on its own 128 × ``bn`` tiles, its k-loop skewed by half a k-block."""

    name = "TMA + wgmma, ping-pong on 128-row tiles, skewed groups"

    def __init__(self, dtype, b_major, bn, bk, stages, k_iters, b):
        if b.cluster != 1:
            raise ValueError("gemm: the tall ping-pong mainloop is built without CTA pairs")
        if bn > MAX_COLS:
            raise ValueError(f"gemm: the tall ping-pong tile holds 128 rows × tile_n fp32 per warpgroup: tile_n at "
                             f"most {MAX_COLS}, got {bn}")
        Cooperative.__init__(self, dtype, b_major, 2 * HALF, bn, bk, stages, k_iters, 0, b)
        self.part = (2 * HALF, bn)

    def acc_layout(self):
        """Two wgmma D fragments stacked: rows 0–63, then 64–127 (``bn / 2`` registers further)."""
        return tile(S[(2, 1):(1, 1)], (2, 1), Ax.cuda.wgmma_fragment(self.bn, "tx"), (HALF, self.bn))

    def a_offset(self, half):
        """Elements from a slot's A tile to its 64-row half ``half`` (inside each 64-column panel)."""
        return half * (HALF * 64)

    def issue(self, pool, acc, half, s, accumulate, fence, commit):
        rows = slice(half * HALF, (half + 1) * HALF)
        Ax.gemm(acc[rows, :], self.a_operand(pool, s, half), self.b_operand(pool, s), accumulate=accumulate,
                fence=fence, commit=commit, wait=False)

    def k_range(self, pool, pipe, acc, wg, leader, base, k0, k1, before_last=None):
        """k-blocks k0 .. k1-1 of a tile (at least one), each half of a k-block its own wgmma group,
        skewed: per k-block after the first, its first half, a wait leaving only that group in flight
        (so k-block i − 1 is complete and its slot released), its second half; the last k-block in
        straight-line code, then the final wait.  (One group per k-block with the first half left
        uncommitted over the wait does not survive ptxas: it closes the group at the first half.)"""
        first = base + k0
        pipe.wait(first)
        self.issue(pool, acc, 0, pipe.slot(first), False, True, True)
        self.issue(pool, acc, 1, pipe.slot(first), False, False, True)

        def step(i):
            s = pipe.slot(i)
            pipe.wait(i)
            self.issue(pool, acc, 0, s, True, True, True)
            Ax.cuda.wgmma_wait(1)               # all but this half's group: k-block i - 1 is complete
            pipe.release(i - 1, pred=leader)
            self.issue(pool, acc, 1, s, True, False, True)
        if self.k_iters > 2:
            with T.serial(k0 + 1, k1 - 1) as kb:
                step(base + kb)
        if before_last:
            before_last()
        if self.k_iters > 1:
            step(base + k1 - 1)
        Ax.cuda.wgmma_wait(0)
        Ax.cuda.fence_registers(acc)
        pipe.release(base + k1 - 1, pred=leader)
