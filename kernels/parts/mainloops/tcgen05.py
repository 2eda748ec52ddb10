"""The Blackwell (sm_100a) mainloop: the accumulator lives in tensor memory (one ``bm``×``bn`` fp32
TMEM tile), so the MMAs need no consumer registers and are issued by one elected thread of the
producer warpgroup's warp 1: per k-block it waits for the slot, runs ``Ax.gemm`` (the layouts pick
``tcgen05.mma.cta_group::1``) and commits to the slot's *empty* barrier (the tensor core's completion
frees it, one arrival); after a tile's last k-block it commits to the accumulator's *full* barrier
(a one-slot ``Ax.cuda.pipeline``).  The consumer warpgroups are the epilogue: warp w of a warpgroup
reaches only TMEM lanes 32·(w mod 4), so each warpgroup reads all ``bm`` rows of its ``bn/2``
columns (``Ax.copy`` TMEM → registers: ``tcgen05.ld.16x256b``, whose 8×8 blocks are stmatrix's),
then frees the accumulator for the next tile's MMAs (all 256 threads arrive on its *empty* barrier).

CTA pairs (:class:`PairB`): each CTA loads its rows of A and its half of B at the same shared
offsets — no multicast, the pair MMA reads both CTAs' shared memory — the odd CTA's warp 1 relays
each landed slot to the even CTA (a remote arrival on a *relay* barrier), and the even CTA's thread
issues ``cta_group::2`` instructions (M = 2·bm) on ``Ax.cuda.cta_pair`` views, committing by
multicast to both CTAs' *empty* and accumulator barriers; all 512 epilogue threads free the even
CTA's accumulator.  The contract is :mod:`.tma_wgmma`'s.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.mainloops.tma_wgmma import Cooperative, WholeB


class PairB:
    """A CTA pair's B: each CTA loads its half (``bn/2`` columns) at the same shared offset; the pair
    MMA reads both."""

    name = "B halves of a tcgen05 CTA pair"
    cluster = 2

    def load(self, main, pool, pipe, B, s, n_blk, kb, rank):
        Ax.copy(main.tile(pool, main.b_at + s * (main.bk * main.bn), main.b_half),
                main.b_region(B, n_blk * main.bn + rank * (main.bn // 2), kb * main.bk, main.bn // 2),
                barrier=pipe.full, stage=s)


class Tcgen05(Cooperative):
    """TMA producer + one MMA thread accumulating in TMEM + two epilogue warpgroups that read it."""

    name = "TMA + tcgen05 (TMEM accumulator)"
    mma = "tcgen05"
    releases = 1                # the MMA's commit frees a slot
    split = "columns"

    def __init__(self, dtype, b_major, bm, bn, bk, stages, k_iters, in_flight, cluster):
        super().__init__(dtype, b_major, bm, bn, bk, stages, k_iters, in_flight, PairB() if cluster > 1 else WholeB())
        self.part = (bm, bn // 2)
        self.state = {}

    def acc_layout(self):
        """The tcgen05.ld 16x256b fragment (whose 8×8 blocks are stmatrix's) over the part's rows."""
        return Ax.cuda.tcgen05_fragment("16x256b", self.part[1] // 8, self.part[0])

    def row0(self, wg):
        return 0

    def col0(self, wg):
        return wg * self.part[1]

    def pipeline(self):
        return Ax.cuda.pipeline(self.stages, producers=2, consumers=self.releases, cluster=1, remote=self.cluster > 1)

    def setup(self):
        """The TMEM accumulator and its one-slot pipeline: full <- the MMA thread's commit, empty <-
        the epilogues' 256 threads (a pair: of both CTAs, on the even CTA's barrier); a pair's relay
        barriers (the odd CTA's slot landed -> the even CTA)."""
        bm, bn, cluster, stages, keep = self.bm, self.bn, self.cluster, self.stages, self.state.update

        @T.macro
        def setup():
            acc_t = Ax.cuda.tmem((bm, bn), "float32", name="acc_tmem", cta_group=cluster)
            accp = Ax.cuda.pipeline(1, producers=1, consumers=2 * 128, name="accp", cluster=cluster, remote=cluster > 1)
            keep(acc_t=acc_t, accp=accp)
            if cluster > 1:
                keep(relay=Ax.cuda.mbarrier(1, stages, name="relay"))
                Ax.cuda.fence_mbarrier_init()
                Ax.cuda.cluster_sync()
        setup()

    def mma_step(self, pool, pipe, acc, wg, i, accumulate, leader, wait):
        """Wait for iteration i's slot; one elected thread runs tcgen05.mma over the whole bm×bk slab
        into the TMEM accumulator and commits to the slot's empty barrier (``wg``, ``leader``,
        ``wait``: unused).  A pair: the even CTA's thread also waits for the odd CTA's relay of its
        own slot and issues ``cta_group::2`` on the pair's views, its commit multicast to both."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = self.tile(pool, self.a_at + s * (self.bm * self.bk), (self.bm, self.bk))
        if self.cluster == 1:
            with Ax.cuda.elect_one():
                Ax.gemm(acc, a, self.b_operand(pool, s), accumulate=accumulate, barrier=pipe.empty[s])
            return
        Ax.cuda.mbarrier_wait(self.state["relay"], pipe.phase(i), s, remote=True)
        with Ax.cuda.elect_one():
            Ax.gemm(Ax.cuda.cta_pair(acc, 0), Ax.cuda.cta_pair(a, 0), Ax.cuda.cta_pair(self.b_operand(pool, s, self.b_half), 1),
                    accumulate=accumulate, barrier=pipe.empty[s], multicast=0b11)

    def relay_slots(self, pipe, sched, cid):
        """A pair, warp 1 of the odd CTA: for every k-block, once its own slot has landed, one
        arrival on the even CTA's relay barrier of that slot (the pair MMA reads both)."""
        with T.serial(sched.count(cid) * self.k_iters) as i:
            pipe.wait(i)
            with Ax.cuda.elect_one():
                Ax.cuda.arrive_remote(self.state["relay"].ptr(pipe.slot(i)), 0)

    def issue_tiles(self, pool, pipe, sched, cid):
        """Warp 1 of the producer warpgroup: every tile's MMAs, each tile once the epilogue has read
        the previous one out of TMEM; its completion committed to ``accp.full``."""
        acc_t, accp = self.state["acc_t"], self.state["accp"]
        with T.serial(sched.count(cid)) as it:
            accp.acquire(it)
            Ax.cuda.tcgen05_fence_after()
            self.k_range(pool, pipe, acc_t, 0, None, it * self.k_iters, 0, self.k_iters)
            with Ax.cuda.elect_one():        # arrives when every MMA this thread issued has completed
                Ax.cuda.tcgen05_commit((accp.full,), self.cluster, 0b11 if self.cluster > 1 else None)

    def producer_warps(self, pool, pipe, sched, cid, rank):
        """Warp 1: the MMA thread (a pair: the even CTA's; the odd CTA's relays its slots)."""
        with Ax.warps(1, 2):
            if self.cluster == 1:
                self.issue_tiles(pool, pipe, sched, cid)
            else:
                with Ax.guard(rank == 0):
                    self.issue_tiles(pool, pipe, sched, cid)
                with Ax.guard(rank == 1):
                    self.relay_slots(pipe, sched, cid)

    def consume(self, pool, pipe, acc, wg, leader, it, count):
        """Epilogue warpgroup wg: wait for tile it's accumulator, read its columns of TMEM into
        registers (tcgen05.ld), then free the accumulator (all its threads arrive)."""
        acc_t, accp, cols = self.state["acc_t"], self.state["accp"], self.part[1]
        accp.wait(it)
        for w in range(2):          # TMEM views have static columns: one branch per warpgroup
            with Ax.guard(wg == w):
                Ax.copy(acc, acc_t[:, w * cols:(w + 1) * cols])
        Ax.cuda.tcgen05_fence_before()
        accp.release(it)

    def teardown(self):
        if self.cluster > 1:     # PTX ISA: no access from the peer may run into the pair's dealloc
            Ax.cuda.cluster_sync()
        Ax.cuda.tmem_free(self.state["acc_t"])
        super().teardown()
