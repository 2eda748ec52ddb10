"""The grouped GEMM's mainloop (the MoE layer's expert GEMMs: :mod:`kernels.moe_gemm`,
:mod:`kernels.moe_experts`): :mod:`.tma_wgmma`'s cooperative Hopper design over a tile whose A rows
are a row range of the padded, expert-grouped matrix — loaded by TMA (a tensor map encoded off the
tensor at launch) or, with ``gather_rows``, gathered through the index ``sorted_ids`` by the
producer warpgroup itself (``cp.async`` of x's rows into the swizzled stage, zeros where the index
is negative, each thread arriving on the stage's barrier with ``cp.async.mbarrier.arrive.noinc``) —
and whose B tile is the expert's rows of a 3-D weight tensor (box ``(1, rows, bk)`` at the tile's
expert).  With ``paired`` (GEMM 1's SiLU·up) the B tile is ``bn/2`` gate rows then the matching
``bn/2`` up rows (two TMA boxes), so accumulator columns c and c + bn/2 pair up in one thread.
Tiles need not divide n or k: a tile has ``ceil(k / bk)`` k-blocks, and boxes reaching past the
weights' (or A's) extents read zeros, which TMA fills (a gathered A: only where ``bk`` divides k).

Contract (to the grouped kernels): ``a_operands(A_, S_, A_map)`` (the A parameter and the index),
``load(pool, pipe, A, B, SRT, i, r0, n_blk, e, kb, one)`` (producer: pipeline iteration i holds
k-block kb of rows [r0, r0 + bm) and column block n_blk of expert e; ``load_a``/``load_b``/``arrive``
its parts), ``mma(pool, pipe, acc, wg, i, accumulate, leader)`` (one k-block of a consumer warpgroup's
64 rows, its slot released at once), ``mainloop(...)`` (a whole tile, the last k-block in straight-line
code), ``k_blocks(...)`` (k-blocks [k0, k1) of a stream-K piece), the accumulator geometry of
:class:`~.tma_wgmma.Cooperative` (``part``, ``acc_layout()``, ``row0``) and ``copies`` (the arrivals
each stage's full barrier expects).  :class:`Ring` is the shared-memory plan of one or more of them.

Law: :mod:`.tma_wgmma`'s ring with no wgmma group left in flight; a stage is full once every TMA
copy announced its bytes and every gathering thread's cp.async landed (one arrival per thread:
``copies`` = TMA copies + 128 gathering threads); a ring shared by GEMMs whose loads arrive a
different number of times evens the count with plain arrivals (:meth:`Ring.arrivals`).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.lang.gather import gather
from axe.layout import S
from kernels.parts.mainloops.tma_wgmma import HALF, Cooperative, WholeB
from kernels.parts.tiles import static_rows, swizzled

GATHER_WARPS = 4         # the producer warpgroup's four warps gather (8 chunks each at bm=128)


class GatheredRows(Cooperative):
    """The mainloop of a ``bm``×``bn`` tile (``bm`` 64 or 128: one or two consumer warpgroups) of a
    grouped GEMM with K = ``k`` in ``bk``-deep stages; B holds ``n`` rows per expert (``paired``:
    gate rows [0, n/2) then up rows [n/2, n)); ``gather_rows``: A's rows gathered through the index."""

    name = "TMA + wgmma, gathered rows"

    def __init__(self, n, k, dtype, bm, bn, bk, paired, gather_rows):
        # a gathered A is only composed where bk divides k (kernels.moe_gemm.check_gather)
        super().__init__(dtype, "col", bm, bn, bk, 1, -(-k // bk), 0, WholeB())
        self.n, self.k, self.paired, self.gather_rows = n, k, paired, gather_rows
        self.consumers = bm // HALF
        # arrivals per slot: one per TMA copy (expect_tx), or one per producer thread for the gather
        self.copies = (2 if paired else 1) + (32 * GATHER_WARPS if gather_rows else 1)
        self.ring = None                          # the Ring this GEMM's tiles live in (it sets this)

    def tile(self, pool, at, shape, lead=()):
        return Ax.view(pool, swizzled(*shape, lead), tuple(lead) + tuple(shape), base=at)

    def a_operands(self, A_, S_, A_map):
        """``(A, sorted_ids)`` as the kernel's parameters: A's rows through TMA (``A_map``), or
        with ``gather_rows`` x by index, sorted_ids then read (without, A stands in for it and
        sorted_ids stays unused, so TVM drops the parameter)."""
        if not self.gather_rows:
            A = Ax.param(static_rows(A_, self.bm, self.k), tensormap=A_map, name="A")
            return A, A
        return (Ax.param(static_rows(A_, 2, self.k), name="x"),
                Ax.param(static_rows(S_, self.bm), name="sorted_ids"))

    def pipeline(self, stages):
        """The ring's barriers: full counts every copy's arrival, empty every consumer's release."""
        return Ax.cuda.pipeline(stages, producers=self.ring.copies, consumers=self.consumers)

    def load(self, pool, pipe, A, B, SRT, i, r0, n_blk, e, kb, one=None):
        """Producer: pipeline iteration i loads k-block kb of the tile of rows [r0, r0 + bm),
        column block n_blk, expert e (``gather_rows``: rows ``SRT[r0:r0 + bm]`` of A); then the
        plain arrivals a ring shared with another GEMM expects of this one (:meth:`Ring.arrivals`;
        ``one``: the predicate of the producer thread that adds the odd ones)."""
        pipe.acquire(i)
        self.load_a(pool, pipe, A, SRT, i, r0, kb)
        self.load_b(pool, pipe, B, i, n_blk, e, kb)
        self.arrive(pipe, i, one)

    def load_a(self, pool, pipe, A, SRT, i, r0, kb):
        """The A part of :meth:`load` (its slot acquired)."""
        bm, bk = self.bm, self.bk
        s, k0 = pipe.slot(i), kb * bk
        a = self.tile(pool, self.ring.a_at + s * self.ring.a_slot, (bm, bk))
        if self.gather_rows:
            gather(a, A[:, k0:k0 + bk], Ax.view(SRT, S[bm], (bm,), base=r0), barrier=pipe.full, stage=s)
        else:
            Ax.copy(a, A[r0:r0 + bm, k0:k0 + bk], barrier=pipe.full, stage=s)

    def load_b(self, pool, pipe, B, i, n_blk, e, kb):
        """The B part of :meth:`load` (its slot acquired): the weights, which depend on no other tile."""
        bn, bk = self.bn, self.bk
        s, k0 = pipe.slot(i), kb * bk
        at = self.ring.b_at + s * self.ring.b_slot
        if self.paired:     # gate rows then the matching up rows (rows [h·bn/2, (h+1)·bn/2) of every column
            # block of the (bn, bk) tile): accumulator columns c and c + bn/2 pair up
            half = bn // 2
            for h in range(2):
                w0 = h * (self.n // 2) + n_blk * half
                Ax.copy(Ax.view(pool, swizzled(half, bk, (1,), panel=bn * 64), (1, half, bk), base=at + h * half * 64),
                        B[e:e + 1, w0:w0 + half, k0:k0 + bk], barrier=pipe.full, stage=s)
        else:
            Ax.copy(self.tile(pool, at, (bn, bk), (1,)), B[e:e + 1, n_blk * bn:(n_blk + 1) * bn, k0:k0 + bk],
                    barrier=pipe.full, stage=s)

    def arrive(self, pipe, i, one):
        """The plain arrivals a ring shared with another GEMM expects of this one's loads of
        iteration i (:meth:`Ring.arrivals`), after them: a slot's phase cannot complete before
        every copy has announced its bytes."""
        s = pipe.slot(i)
        per_thread, extra = self.ring.arrivals(self)
        if per_thread:      # every producer thread, as the other GEMM's gathering threads do
            T.evaluate(T.ptx.mbarrier.arrive.shared.b64(pipe.full.ptr(s), T.uint32(1)))
        if extra:
            with Ax.guard(one):
                T.evaluate(T.ptx.mbarrier.arrive.shared.b64(pipe.full.ptr(s), T.uint32(extra)))

    def mma(self, pool, pipe, acc, wg, i, accumulate, leader):
        """Consumer: wait for iteration i's slot, wgmma this warpgroup's 64 rows, release it."""
        ring = self.ring
        s = pipe.slot(i)
        pipe.wait(i)
        if self.gather_rows:    # cp.async wrote A through the generic proxy; wgmma reads it through the async one
            Ax.cuda.fence_proxy_async()
        a = self.tile(pool, ring.a_at + s * ring.a_slot, (self.bm, self.bk))[wg * HALF:(wg + 1) * HALF, :]
        b = Ax.permute(self.tile(pool, ring.b_at + s * ring.b_slot, (self.bn, self.bk)), (1, 0))   # the K×N view
        Ax.gemm(acc, a, b, accumulate=accumulate, wait=0)
        pipe.release(i, pred=leader)

    def mainloop(self, pool, pipe, acc, wg, base, leader):
        """A consumer warpgroup's k-loop over one tile, pipeline iterations ``base ..``: the first
        k-block overwrites the accumulator, the last one is waited for in straight-line code (so
        the accumulator is complete for the epilogue).  (:mod:`kernels.moe_gemm` spells the same
        loop in its TVMScript, which binds ``base`` to a local.)"""
        from tvm.script.ir_builder import tirx as IRB
        self.mma(pool, pipe, acc, wg, base, False, leader)
        with IRB.serial(1, self.k_iters - 1) as kb:
            self.mma(pool, pipe, acc, wg, base + kb, True, leader)
        self.mma(pool, pipe, acc, wg, base + self.k_iters - 1, True, leader)

    def k_blocks(self, pool, pipe, acc, wg, leader, base, k0, k1):
        """k-blocks [k0, k1) of a tile whose k-block 0 is pipeline iteration ``base`` (a stream-K
        piece), the first one starting the accumulator."""
        from tvm.script.ir_builder import tirx as IRB
        self.mma(pool, pipe, acc, wg, base + k0, False, leader)
        with IRB.serial(k0 + 1, k1) as kb:
            self.mma(pool, pipe, acc, wg, base + kb, True, leader)


class Ring:
    """The shared-memory plan of a kernel running one or more grouped GEMMs, each a
    ``(mainloop, epilogue)`` pair: ``stages`` pipeline slots, each an A tile and a B tile as large
    as the largest GEMM's, then one staging buffer per consumer warpgroup as large as the largest
    epilogue chunk.  Each part reads its offsets from the ring (``.ring``), which the ring sets."""

    def __init__(self, gemms, stages):
        self.a_slot = max(m.bm * m.bk for m, _ in gemms)
        self.b_slot = max(m.bn * m.bk for m, _ in gemms)
        self.c_slot = max(HALF * e.chunk for _, e in gemms)
        self.a_at, self.b_at = 0, stages * self.a_slot
        self.c_at = self.b_at + stages * self.b_slot
        self.consumers = max(m.consumers for m, _ in gemms)
        self.elems = self.c_at + self.consumers * self.c_slot
        if self.elems * 2 > 227 * 1024:
            raise ValueError(f"moe_gemm: {stages} stages of {self.a_slot} + {self.b_slot} elements and the epilogue "
                             f"need {self.elems * 2 // 1024} KiB of shared memory, more than 227 KiB")
        self.copies = max(m.copies for m, _ in gemms)   # the arrivals each slot's full barrier expects
        for m, e in gemms:
            m.ring = e.ring = self

    def arrivals(self, main):
        """``(per producer thread, by one thread)``: the plain arrivals ``main``'s loads add so that
        every slot's barrier sees :attr:`copies` — one per producer thread where another GEMM of
        the ring gathers and ``main`` does not, and the rest of the difference by one thread."""
        missing = self.copies - main.copies
        per_thread = 1 if missing >= 32 * GATHER_WARPS else 0
        return per_thread, missing - per_thread * 32 * GATHER_WARPS
