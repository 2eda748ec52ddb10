"""The Hopper mainloop: a producer warpgroup issues TMA loads of A's and B's k-blocks into a
``stages``-deep ring of 128-byte-swizzled shared slots (``Ax.cuda.pipeline``: full barriers count
bytes, empty barriers count the consumers' releases); consumer warpgroups run ``Ax.gemm`` per slot,
which the layouts turn into wgmma (B's shared layout, MN- or K-major, sets the transpose bit).

Contract (every GPU mainloop offers it to the kernel skeleton): ``pipeline()``, ``setup()``,
``load(pool, pipe, A, B, i, m_blk, n_blk, kb, rank, mesh)`` (producer: pipeline iteration i holds
k-block kb of tile (m_blk, n_blk)), ``producer_warps(pool, pipe, cid, rank)``, ``trips(count, wg)``
and ``tile_index(j, wg)`` (which of the CTA's tiles consumer warpgroup wg runs),
``consume(pool, pipe, acc, wg, leader, it, count)`` (the accumulator of tile it complete in
registers), ``k_range(pool, pipe, acc, wg, leader, base, k0, k1)`` (k-blocks [k0, k1) only: stream-K
pieces), ``teardown()``, the accumulator geometry (``part``, ``acc_layout()``, ``row0``, ``col0``)
and ``smem`` (elements of the shared pool before the epilogue's buffers).

Law of the ring: iteration i lives in slot ``i mod stages`` with phase ``i div stages``; the
producer acquires a slot only after every consumer released its previous use, and a consumer reads
a slot only after its full barrier counted all bytes; with ``in_flight`` wgmma groups left running
a consumer releases iteration ``i − in_flight`` once its group has completed.  A tile's last
k-block waits in straight-line code (ptxas moved a read of the last registers above a
``wait_group 0`` placed after the loop), so the accumulator is complete before the epilogue.

:class:`Cooperative`: both consumers share one ``bm``×``bn`` tile, 64 rows each.
:class:`PingPong`: each consumer computes its own 64-row tiles (the CTA's tiles alternate between
the two), their main loops taking turns through two named barriers so that one's epilogue runs
under the other's main loop.  ``cluster=2`` (CTA pairs on vertically neighbouring tiles) loads B
through :class:`MulticastB`: each CTA loads half of the B tile with a TMA multicast to both.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.tiles import b_block, swizzled

HALF = 64               # rows per consumer warpgroup (a wgmma M of 64)
ORDER = 3               # ping-pong: named barriers ORDER + w, "warpgroup w's turn" (1, 2: the epilogues')


def when(cond, body):
    """``body()`` under the run-time condition ``cond``."""
    with Ax.guard(cond):
        body()


class WholeB:
    """B's k-block of a tile loaded whole by this CTA."""

    name = "B whole"
    cluster = 1

    def load(self, main, pool, pipe, B, s, n_blk, kb, rank):
        Ax.copy(main.tile(pool, main.b_at + s * (main.bk * main.bn), main.b_tile), main.b_region(B, n_blk * main.bn, kb * main.bk),
                barrier=pipe.full, stage=s)


class MulticastB:
    """CTA pairs (vertically neighbouring tiles need the same B tile): each CTA loads half of it
    (``bn/2`` of its columns) with a TMA multicast into the same offset of both CTAs, so each slot
    receives the whole tile and B's L2→SM traffic halves.  A slot is then filled by both producers
    and freed only when the consumers of both CTAs released it (the pipeline counts the peer's
    releases through remote arrivals; every wait on them is bounded)."""

    name = "B multicast to CTA pairs"
    cluster = 2

    def load(self, main, pool, pipe, B, s, n_blk, kb, rank):
        # half r of the tile (columns / rows r*128..) lies contiguously at r * 8192 elements
        Ax.copy(main.tile(pool, main.b_at + s * (main.bk * main.bn) + rank * (main.bk * main.bn // 2), main.b_half),
                main.b_region(B, n_blk * main.bn + rank * (main.bn // 2), kb * main.bk, main.bn // 2),
                barrier=pipe.full, stage=s, multicast=0b11)


class Cooperative:
    """TMA producer + two wgmma consumer warpgroups on one ``bm``×``bn`` tile (64 rows each).
    ``b``: how B reaches the slots (:class:`WholeB`, :class:`MulticastB`); ``in_flight``: wgmma
    groups left running per k-block (0: a consumer waits for its group and frees the slot at once,
    so it holds one slot and the producer runs ``stages − 1`` ahead).  ``bn``: a multiple of 64, or
    with column-major B loaded whole any multiple of 8 (the N×K tile's rows: wgmma's N, TMA's box)."""

    name = "TMA + wgmma, cooperative"
    mma = "wgmma"
    releases = 2                # consumer warpgroups that free a slot
    split = "rows"              # how the consumers split the tile

    def __init__(self, dtype, b_major, bm, bn, bk, stages, k_iters, in_flight, b):
        if bn % 64 and (b_major != "col" or bn % 8):
            raise ValueError(f"gemm: a B tile {bn} columns wide (not a multiple of 64) is built with column-major B "
                             f"(b_major='col', N×K: its 128-byte swizzle runs along K), in rows of 8 (wgmma's N step); "
                             f"got b_major={b_major!r}, {b.name}")
        if b.cluster > 1 and (bn // 2) % (8 if b_major == "col" else 64):
            raise ValueError(f"gemm: CTA pairs ({b.name}) load half of B's tile each: with row-major B whole 64-column "
                             f"swizzle blocks (a tile 128 or 256 wide), with column-major B rows of 8 (a width that is "
                             f"a multiple of 16); got {bn} columns with b_major={b_major!r}")
        self.dtype, self.b_major, self.bm, self.bn, self.bk, self.stages = dtype, b_major, bm, bn, bk, stages
        self.k_iters, self.b = k_iters, b
        self.cluster = b.cluster
        self.wait = in_flight if k_iters > 1 else 0           # wgmma groups left running per k-block
        self.b_tile = (bk, bn) if b_major == "row" else (bn, bk)
        self.b_half = (bk, bn // 2) if b_major == "row" else (bn // 2, bk)     # one CTA's multicast share
        self.a_at, self.b_at = 0, stages * bm * bk             # element offsets in the shared pool
        self.smem = self.b_at + stages * bk * bn
        self.part = (HALF, bn)      # a consumer warpgroup's accumulator: rows, columns

    # -- geometry the epilogue reads
    def acc_layout(self):
        """wgmma's D fragment over the warpgroup's 64×bn accumulator."""
        return Ax.cuda.wgmma_fragment(self.part[1], "tx")

    def row0(self, wg):
        """The first row of warpgroup wg's part within its tile."""
        return wg * HALF

    def col0(self, wg):
        return 0

    # -- shared-memory views
    def tile(self, pool, at, shape):
        return Ax.view(pool, swizzled(*shape), shape, base=at)

    def b_region(self, B, n0, k0, cols=None):
        return b_block(B, self.b_major, n0, k0, cols or self.bn, self.bk)

    def b_operand(self, pool, s, shape=None):
        Bs = self.tile(pool, self.b_at + s * (self.bk * self.bn), shape or self.b_tile)
        return Bs if self.b_major == "row" else Ax.permute(Bs, (1, 0))      # the K×N view

    def a_offset(self, wg):
        """Elements from a slot's A tile to this warpgroup's rows, inside each 64-column panel."""
        return wg * (HALF * 64)

    def a_operand(self, pool, s, wg):
        """Warpgroup wg's 64 rows of slot s's A tile: a row range of the ``bm``-row tile, whose
        64-column panels lie ``bm · 64`` elements apart."""
        at = self.a_at + s * (self.bm * self.bk) + self.a_offset(wg)
        return Ax.view(pool, swizzled(HALF, self.bk, panel=self.bm * 64), (HALF, self.bk), base=at)

    # -- the kernel skeleton's hooks
    def pipeline(self):
        return Ax.cuda.pipeline(self.stages, producers=2, consumers=self.releases, cluster=self.cluster,
                                remote=self.cluster > 1)

    def setup(self):
        """Nothing beyond the ring."""

    def producer_warps(self, pool, pipe, sched, cid, rank):
        """No producer warps beyond the loading one."""

    def teardown(self):
        """A pair: no CTA leaves while its peer may still arrive on its barriers."""
        if self.cluster > 1:
            Ax.cuda.cluster_sync()

    def load(self, pool, pipe, A, B, i, m_blk, n_blk, kb, rank, sched, mesh=None):
        """Producer: iteration i loads k-block kb of tile (m_blk, n_blk) into its slot."""
        s = pipe.slot(i)
        pipe.acquire(i)
        lead = sched.a_lead
        a_tile = Ax.view(pool, swizzled(self.bm, self.bk, lead), lead + (self.bm, self.bk), base=self.a_at + s * (self.bm * self.bk))
        sched.load_a(lambda src: Ax.copy(a_tile, src, barrier=pipe.full, stage=s), A, m_blk, kb, self.bm, self.bk, mesh)
        self.b.load(self, pool, pipe, B, s, n_blk, kb, rank)

    def mma_step(self, pool, pipe, acc, wg, i, accumulate, leader, wait):
        """Wait for iteration i's slot, wgmma this warpgroup's 64 rows leaving ``wait`` groups in
        flight, then release the slot whose group has completed: i - wait."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = self.a_operand(pool, s, wg)
        Ax.gemm(acc, a, self.b_operand(pool, s), accumulate=accumulate, wait=wait)
        if accumulate or not wait:
            pipe.release(i - wait, pred=leader)

    def k_range(self, pool, pipe, acc, wg, leader, base, k0, k1, before_last=None):
        """k-blocks k0 .. k1-1 of a tile (``base`` is the pipeline iteration of k-block 0; at least
        two k-blocks unless the tile has one), the last one waited for in straight-line code;
        ``before_last`` runs before the last k-block is issued."""
        wait = self.wait
        self.mma_step(pool, pipe, acc, wg, base + k0, False, leader, wait)
        with T.serial(k0 + 1, k1 - 1) as kb:
            self.mma_step(pool, pipe, acc, wg, base + kb, True, leader, wait)
        if before_last:
            before_last()
        if self.k_iters == 1:        # that first k-block was the last (wait is 0 then)
            return
        self.mma_step(pool, pipe, acc, wg, base + k1 - 1, True, leader, 0)
        if wait > 0:    # the previous k-block's group completed at this wait
            pipe.release(base + k1 - 2, pred=leader)

    def trips(self, count, wg):
        return count

    def tile_index(self, j, wg):
        return j

    def consume(self, pool, pipe, acc, wg, leader, it, count):
        """Tile it's accumulator, all k-blocks."""
        self.k_range(pool, pipe, acc, wg, leader, it * self.k_iters, 0, self.k_iters)


class PingPong(Cooperative):
    """Each consumer warpgroup on its own 64-row tiles (warpgroup wg takes the CTA's tiles wg, wg + 2,
    ...); their main loops take turns through two named barriers — wait for the turn with
    ``bar.sync``, pass it with ``bar.arrive`` once all but the last k-block are issued, which also
    keeps a consumer from waiting on a slot two fills ahead — and one consumer frees each slot."""

    name = "TMA + wgmma, ping-pong"
    releases = 1
    split = "tiles"

    def __init__(self, dtype, b_major, bn, bk, stages, k_iters, in_flight, b):
        if b.cluster != 1:
            raise ValueError("gemm: the ping-pong mainloop is built without CTA pairs")
        super().__init__(dtype, b_major, HALF, bn, bk, stages, k_iters, in_flight, b)

    def row0(self, wg):
        return 0

    def a_offset(self, wg):
        return 0

    def trips(self, count, wg):
        return (count - wg + 1) // 2

    def tile_index(self, j, wg):
        return 2 * j + wg

    def consume(self, pool, pipe, acc, wg, leader, it, count):
        """My turn once the other warpgroup has issued the previous tile's main loop; the turn passes
        once every k-block but the last has been waited for."""
        when(it > 0, lambda: Ax.cuda.named_barrier(ORDER + wg, 256))
        self.k_range(pool, pipe, acc, wg, leader, it * self.k_iters, 0, self.k_iters, before_last=(
            lambda: when(it + 1 < count, lambda: Ax.cuda.named_barrier_arrive(ORDER + 1 - wg, 256))))
