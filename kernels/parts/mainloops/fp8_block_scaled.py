"""The block-scaled FP8 mainloop (sm_90a, DeepSeek-V3's recipe, :mod:`kernels.gemm_fp8`): the
cooperative TMA producer + two wgmma consumer warpgroups of :mod:`.tma_wgmma` on e4m3 operands,
each k-block's product scaled and promoted into an fp32 accumulator.

A pipeline slot holds one scale block of K (``BK`` = 128): A's 128×128 tile, B's ``bn``×128 tile
(both K-major under the 128-byte swizzle, :func:`fp8_tile`; B whole or, in CTA pairs, each CTA's
half multicast to both: :class:`~.tma_wgmma.WholeB`, :class:`~.tma_wgmma.MulticastB`) and the A
tile's 128 row scales (a 512-byte TMA box of SA into the shared ``sa`` slots).  Per slot and per
128 columns of the tile a consumer warpgroup issues four ``wgmma.m64n128k32.e4m3`` into a fresh fp32
partial accumulator, loads its scale products ``SA[row, kb] · SB[n-block, kb]`` while the tensor
cores run, waits for the group and promotes ``acc += partial · factor`` (:func:`scale_accumulate`:
which scale goes with which element comes from the layouts).  ``bn`` = 256 issues its two 128-column
halves one after the other through one 64×128 partial (two would not fit the consumer's registers);
where the 128-column blocks of N are odd in number the last tile's second half lies past N and is
skipped.  ``bn`` = 64 (decode-sized M: twice the tiles over N) lies inside one SB block.  ``bn`` =
192 (``staged``) keeps one 64×192 partial: its tiles start at multiples of 64, so
the warpgroup's first threads stage ``SB[(n0 + 64 g) // 128, kb]`` per 64-column group ``g`` into
shared memory (two buffers by slot parity, one named barrier), read as a (1, 3) scale.

Contract (to :mod:`kernels.gemm_fp8`'s kernel): ``launch(sms, threads)`` (the CTA's index and
thread index; keeps its rank in a pair and its thread index), ``setup()`` (the scale slots),
``pipeline()``, ``load(pool, pipe, A, B, SA, i, m_blk, n_blk, kb)`` (producer),
``consume(pool, SB, pipe, acc, part, wg, it, m_blk, n_blk)`` and ``k_range(..., base, k0,
k1, m_blk, n_blk)`` (consumers: all k-blocks of the CTA's tile it, or k-blocks [k0, k1) of a stream-K piece),
``teardown()``; the geometry of :class:`~.tma_wgmma.Cooperative` (``part``, ``acc_layout()``,
``row0``) and of the partial accumulator (``part_n``, ``part_layout()``).  :class:`FP8StreamK` and
:class:`FP8SplitK` are the stream-K and split-K schedules in the form these loops take (their
consumers pass a piece's tile, which the scales' blocks need).  A split-K schedule iterates every
slice ``L`` k-blocks long, so a tile's last slice may run past K (``k_loaded`` > ``k_iters``): TMA
loads zeros for A, B and SA there, and SB, read from global memory, is read at its last k-block
instead (a finite scale times a zero partial adds nothing).

Law: after a tile's k-blocks [k0, k) the accumulator holds ``Σ SA[i, kb] · SB[j // 128, kb] ·
Σ_{k in kb} A[i, k] · B[j, k]`` over them in fp32 (the tensor cores' reduced precision confined to
one k-block's 128 terms); the ring is :mod:`.tma_wgmma`'s with every slot released as soon as its
group completed (no group left in flight).
"""

from math import gcd

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.lang.block_scale import scale_accumulate
from axe.layout import S, Swizzle, SwizzledLayout
from kernels.parts.mainloops.tma_wgmma import HALF, Cooperative
from kernels.parts.schedulers.split_k import SplitK
from kernels.parts.schedulers.stream_k import StreamKSchedule
from kernels.parts.tiles import block

FP8 = "float8_e4m3fn"
BM, BK = 128, 128
PART = 128                          # columns per partial accumulator (one wgmma N), and of an SB block
WARPS = 4                           # warps per consumer warpgroup
SA_PITCH = 32                       # floats per row-scale slot at least: 128 bytes, TMA's shared alignment


def fp8_tile(rows, cols=BK):
    """A (rows, cols) fp8 tile, K-major, under TMA's 128-byte swizzle (``Swizzle(3, 4, 3)`` in
    1-byte elements): one 128-byte row per row of the tile, the wgmma K-major atom's width."""
    if cols != 128:
        raise ValueError(f"gemm_fp8: fp8 tiles are 128 elements of K wide, got {cols}")
    return SwizzledLayout(S[(rows, cols)], Swizzle(3, 4, 3))


def _d_fragment(n):
    return Ax.cuda.wgmma_fragment(n, "tx")


def _wait_for(part):
    """The partial accumulator is complete: wait for the wgmma group and pin its registers after
    the wait (the compiler cannot see wgmma's asynchronous writes)."""
    Ax.cuda.wgmma_wait(0)
    Ax.cuda.fence_registers(part)


class BlockScaled(Cooperative):
    """The block-scaled FP8 mainloop of a 128×``bn`` tile (``bn`` 64, 128, 192 or 256) over ``k_iters``
    k-blocks; ``n_blocks``: SB's rows (128-column blocks of N); ``b``: how B reaches the slots;
    ``k_loaded``: the k-blocks the scheduler walks per tile (more than ``k_iters`` where split-K's
    equal slices run past K)."""

    name = "TMA + fp8 wgmma, block-scaled"

    def __init__(self, bn, stages, k_iters, n_blocks, b, k_loaded=None):
        super().__init__(FP8, "col", BM, bn, BK, stages, k_iters, 0, b)
        self.n_blocks = n_blocks
        self.past_k = (k_loaded or k_iters) > k_iters
        # a tile width that is a multiple of 128 keeps one SB block per 128-column partial, a divisor of
        # 128 (64) lies inside one block; otherwise one partial spans the tile and SB is staged per
        # column group (the gcd: no group crosses a block)
        self.staged = bn % PART != 0 and PART % bn != 0
        self.part_n = PART if bn % PART == 0 else bn
        self.group_n = gcd(bn, PART)
        self.halves = bn // self.part_n
        # the last tile's second half lies past N when the 128-column blocks are odd in number
        self.ragged_half = self.halves > 1 and n_blocks % self.halves != 0
        self.rank = 0               # the CTA's rank in its pair and its thread index, set at launch
        self.sa_width = BM          # SA's row scales per slot: the tile's rows of A

    def part_layout(self):
        return _d_fragment(self.part_n)

    def tile(self, pool, at, shape):
        return Ax.view(pool, fp8_tile(*shape), shape, base=at)

    def launch(self, sms, threads):
        """``(CTA index, thread index)``: a plain persistent launch, or one in CTA pairs."""
        if self.cluster == 1:
            cid, self.tx = Ax.launch(sms, threads)
        else:
            cid, self.rank, _, self.tx = Ax.cuda.cluster_launch(sms, threads, self.cluster)
        return cid, self.tx

    def setup(self):
        """The A tiles' row scales per slot; ``staged``: the shared buffer of SB per column group,
        rows (warpgroup, slot parity)."""
        # a slot's row is at least 32 floats: TMA writes shared memory at 128-byte aligned addresses
        self.sa = Ax.shared((self.stages, max(self.sa_width, SA_PITCH)), "float32", name="sa")
        if self.staged:
            self.sbg = Ax.shared((4, self.bn // self.group_n), "float32", name="sbg")

    def pipeline(self):
        """full: the A, B and SA copies; empty: every warp of both consumer warpgroups of every CTA
        of the pair (:meth:`release`).  In a pair the peer completes both (its multicast half of B,
        its releases), so every wait is bounded (``remote``): a peer that never arrives ends the
        launch with a report instead of hanging it."""
        return Ax.cuda.pipeline(self.stages, producers=3, consumers=2 * WARPS, cluster=self.cluster,
                                remote=self.cluster > 1)

    def release(self, pipe, i):
        """Free slot ``slot(i)``: each warp's threads read the slot's row scales ``sa`` with their own
        shared loads, so every warp arrives once its lanes are done (a warp barrier, then lane 0).
        One arrival per warpgroup would let the producer refill ``sa`` while a slower warp of the
        group still reads it; the wgmma operands alone would not need this (the warpgroup's MMA
        completes for all its warps at once)."""
        Ax.cuda.warp_sync()
        pipe.release(i, pred=self.tx % 32 == 0)

    def load(self, pool, pipe, A, B, SA, i, m_blk, n_blk, kb):
        """Producer: iteration i loads k-block kb of tile (m_blk, n_blk) — A, B and A's row scales —
        into its slot."""
        fill = self.fill

        @T.macro
        def slot():
            s = pipe.slot(i)
            fill(pool, pipe, A, B, SA, i, s, m_blk, n_blk, kb)
        slot()

    def fill(self, pool, pipe, A, B, SA, i, s, m_blk, n_blk, kb):
        pipe.acquire(i)
        Ax.copy(self.tile(pool, self.a_at + s * (BM * BK), (BM, BK)), block(A, m_blk, kb, BM, BK),
                barrier=pipe.full, stage=s)
        self.b.load(self, pool, pipe, B, s, n_blk, kb, self.rank)
        r0 = self.sa_block(m_blk, n_blk) * self.sa_width
        Ax.copy(self.sa[s:s + 1, :self.sa_width], SA[kb:kb + 1, r0:r0 + self.sa_width], barrier=pipe.full, stage=s)

    def sa_block(self, m_blk, n_blk):
        """Which ``sa_width``-wide block of A's rows tile (m_blk, n_blk) reads: its block-row."""
        return m_blk

    def sa_view(self, s, wg):
        """Slot s's row scales as the (rows, k-blocks) tensor they are: warpgroup wg's 64 rows, one
        k-block (a (64, 1) scale of its 64×part_n partial)."""
        return Ax.permute(self.sa[s:s + 1, wg * HALF:(wg + 1) * HALF], (1, 0))

    def sb_scales(self, SB, wg, i, kb, n_blk):
        """This slot's SB as a (1, bn / group_n) scale of the tile, one per column group: thread g
        of the warpgroup stages ``SB[(n0 + g·group_n) // 128, kb]`` (the block clamped to SB's last
        row: groups past N only feed columns the store clips), buffers alternating by slot so a
        thread still reading the previous slot's scales is never overwritten (the barrier of the
        slot in between orders it)."""
        groups = self.bn // self.group_n
        row, lane = wg * 2 + i % 2, self.tx % 128
        with Ax.guard(lane < groups):
            nb = T.min((n_blk * self.bn + lane * self.group_n) // PART, self.n_blocks - 1)
            IRB.buffer_store(self.sbg.flat(), SB.flat()[nb * self.k_iters + self.sb_k(kb)], [row * groups + lane])
        Ax.cuda.named_barrier(1 + wg, 128)
        return self.sbg[row:row + 1, :]

    def sb_block(self, m_blk, n_blk, h):
        """SB's row for half h of tile (m_blk, n_blk) (not ``staged``): a tile narrower than a block lies
        inside one, a wider one has a block per 128-column half."""
        return n_blk * self.bn // PART if self.bn < PART else n_blk * self.halves + h

    def sb_k(self, kb):
        """SB's column for k-block kb: kb, or past K (a split-K slice's zero-filled k-blocks) the last."""
        return T.min(kb, self.k_iters - 1) if self.past_k else kb

    def k_block(self, pool, SB, pipe, acc, part, wg, i, kb, m_blk, n_blk, first):
        """Slot of iteration i (k-block kb): wgmma each 128-column half (or, ``staged``, the whole
        tile) into the partial accumulator, scale it by its k-block's scales and add it into acc."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = self.tile(pool, self.a_at + s * (BM * BK) + wg * (HALF * BK), (HALF, BK))
        sa_rows = self.sa_view(s, wg)
        part_n = self.part_n
        for h in range(self.halves):
            nb = self.sb_block(m_blk, n_blk, h)

            def half():
                b = self.tile(pool, self.b_at + s * (self.bn * BK) + h * (part_n * BK), (part_n, BK))
                Ax.gemm(part, a, Ax.permute(b, (1, 0)), accumulate=False, wait=False)
                kc = self.sb_k(kb)
                sb = self.sb_scales(SB, wg, i, kb, n_blk) if self.staged else SB[nb:nb + 1, kc:kc + 1]
                scale_accumulate(acc[:, h * part_n:(h + 1) * part_n], part, sa_rows, sb,
                                 accumulate=not first, before_apply=lambda: _wait_for(part))
            if self.ragged_half and h == self.halves - 1:
                with Ax.guard(nb < self.n_blocks):
                    half()
            else:
                half()
        self.release(pipe, i)

    def k_range(self, pool, SB, pipe, acc, part, wg, base, k0, k1, m_blk, n_blk):
        """k-blocks k0 .. k1-1 of tile (m_blk, n_blk) (``base``: the pipeline iteration of its k-block
        0), the first one starting the accumulator."""
        step = self.k_block

        @T.macro
        def blocks():
            step(pool, SB, pipe, acc, part, wg, base + k0, k0, m_blk, n_blk, True)
            for kb in T.serial(k0 + 1, k1):
                step(pool, SB, pipe, acc, part, wg, base + kb, kb, m_blk, n_blk, False)
        blocks()

    def consume(self, pool, SB, pipe, acc, part, wg, it, m_blk, n_blk):
        """The CTA's tile it, all k-blocks."""
        self.k_range(pool, SB, pipe, acc, part, wg, it * self.k_iters, 0, self.k_iters, m_blk, n_blk)


class FP8StreamK(StreamKSchedule):
    """:class:`~kernels.parts.schedulers.stream_k.StreamKSchedule`'s split and order, its loops in the
    form the FP8 kernel emits: the producer binds the CTA's range ``b0, b1`` and each iteration ``i``;
    the consumers bind the range's tiles ``t0, t1`` and each piece's iteration of k-block 0
    (``base``), and pass the piece's tile to ``k_range(base, k0, k1, m_blk, n_blk)`` (the scales' blocks)."""

    def produce_rest(self, cid, load):
        sk, k_iters, grid, bound = self.split, self.k_iters, self.grid, self._bound

        @T.macro
        def rest():
            b0, b1 = bound(cid), bound(cid + 1)
            for u in T.serial(b0, b1):
                m_blk, n_blk = grid.coords(sk.dp_tiles + u // k_iters)
                i = sk.dp_waves * k_iters + u - b0
                load(i, m_blk, n_blk, u % k_iters)
        rest()

    def consume_rest(self, cid, k_range, finish):
        sk, k_iters, grid, bound = self.split, self.k_iters, self.grid, self._bound

        @T.macro
        def rest():
            b0, b1 = bound(cid), bound(cid + 1)
            t0, t1 = sk.tiles(b0, b1)
            for t in T.serial(t0, t1):
                k0, k1 = sk.piece(t, b0, b1, T.max, T.min)
                m_blk, n_blk = grid.coords(sk.dp_tiles + t)
                base = sk.dp_waves * k_iters + t * k_iters - b0     # the iteration of k-block 0
                k_range(base, k0, k1, m_blk, n_blk)
                finish(m_blk, n_blk, k0, k1)
        rest()


class FP8SplitK(SplitK):
    """:class:`~kernels.parts.schedulers.split_k.SplitK`'s units and order, its consumers' loop in the
    form the FP8 kernel emits: each unit's slice through ``k_range(base, k0, k1, m_blk, n_blk)`` (the
    scales' blocks need the tile), then ``finish(m_blk, n_blk, tile, slice)``."""

    def consume_rest(self, cid, k_range, finish):
        L = self.L

        @T.macro
        def slice_mma(j, t, s, m_blk, n_blk):
            k_range(j * L - s * L, s * L, s * L + L, m_blk, n_blk)
            finish(m_blk, n_blk, t, s)
        self.walk(cid, slice_mma)
