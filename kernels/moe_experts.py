"""The MoE layer's two grouped GEMMs in one persistent launch (sm_90a), GEMM 2 pipelined behind
GEMM 1 tile by tile: ``h = SiLU(A·gateᵀ)·(A·upᵀ)`` then ``y = h · w2[e]ᵀ`` for every m-tile, where
a GEMM 2 tile of m-tile ``m`` starts as soon as the GEMM 1 tiles of ``m`` have stored their rows of
h — while other CTAs still compute GEMM 1's last tiles — instead of after the whole first GEMM.

A composition of the grouped GEMM's parts (:mod:`kernels.moe_gemm`): one
:class:`~kernels.parts.schedulers.grouped.TwoGemms` order over both GEMMs' tiles, a
:class:`~kernels.parts.mainloops.gathered_rows.GatheredRows` mainloop and a
:class:`~kernels.parts.epilogues.fused.FusedStore` epilogue per GEMM, both GEMMs in one
:class:`~kernels.parts.mainloops.gathered_rows.Ring` (its slots fit the larger tiles; the GEMM whose
loads arrive fewer times on a slot's barrier adds plain arrivals), plus the readiness counters
(:class:`Readiness`) between them.

Law (the protocol): a consumer warpgroup that stored its rows of an h tile waits until they are
written (``Ax.cuda.bulk_wait``) and counts them in ``ready[0, m]``; the producer of a GEMM 2 tile
waits until the count is complete — GEMM 1's ``n1`` tiles × consumer warpgroups — before its TMA
loads of h (bounded), and the last of m's ``n2`` GEMM 2 tiles resets the count.  No CTA waits on a
GEMM 1 tile that is not ahead of it in some CTA's order, so the wait always ends.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.moe_gemm import BK, GROUP, SMS, check_dtype, gemm_parts, role_registers
from kernels.moe_host import E, HIDDEN, INTER
from kernels.parts import compose
from kernels.parts.mainloops.gathered_rows import GATHER_WARPS, Ring
from kernels.parts.tiles import static_rows
from kernels.parts.schedulers.grouped import TwoGemms
from kernels.parts.tiles import unbake_rows


class Readiness:
    """The counts of h's rows written per m-tile (``ready``: a zero-filled ``(2, MT)`` int32
    workspace the launch leaves zero-filled: ``[0, MT)`` h parts written, ``[MT, 2 MT)`` readers):
    ``writers`` parts complete an m-tile, which ``readers`` GEMM 2 tiles read."""

    def __init__(self, writers, readers):
        self.writers, self.readers = writers, readers
        self.ready = self.tiles = None

    def declare(self, R_, MT):
        self.ready, self.tiles = Ax.param(static_rows(R_, 2), name="ready"), MT

    def wait(self, m, pred):
        """Producer of a GEMM 2 tile of m-tile ``m``: h's rows of it are all written (bounded)."""
        Ax.cuda.wait_count(self.ready, m, self.writers, self.tiles, self.readers, pred)

    def announce(self, m, leader):
        """Consumer: this warpgroup's stores of an h tile of m-tile ``m`` are written, not only read."""
        Ax.cuda.bulk_wait(0, pred=leader)
        Ax.cuda.count_done(self.ready, m, leader)


def parts(dtype, bm, bn, bn1, stages, pad, gather_rows, sms, bk):
    """``((scheduler, mainloop, epilogue) of GEMM 1, of GEMM 2)`` over one :class:`Ring` (new
    objects: they keep a build's state)."""
    g1 = gemm_parts(2 * INTER, HIDDEN, dtype, bm, bn1 or bn, bk, "silu_mul", pad, gather_rows)
    g2 = gemm_parts(HIDDEN, INTER, dtype, bm, bn, bk, None, pad, False)
    Ring([g1, g2], stages)
    sched = TwoGemms(INTER // g1[1].half, HIDDEN // g2[1].half, sms, GROUP)
    return compose(sched, *g1), compose(sched, *g2)


def kernel(dtype, experts, stages, sms, gemm1, gemm2):
    """The ``tvm.tirx`` PrimFunc ``moe_experts`` of the composition."""
    (sched, main1, epi1), (_, main2, epi2) = gemm1, gemm2
    bm, bn, gather_rows, ring, consumers = main1.bm, main2.bn, main1.gather_rows, main1.ring, main1.consumers
    n1, n2, k1, k2 = sched.n1, sched.n2, main1.k_iters, main2.k_iters
    threads = 128 * (1 + consumers)
    producer_regs, consumer_regs = role_registers(gather_rows, consumers)
    ahead = min(stages, k2)                 # GEMM 2 weight loads issued before the wait for h
    shared_acc = main1.bn == main2.bn       # one accumulator serves both GEMMs' tiles
    ready = Readiness(n1 * consumers, n2)

    @T.prim_func
    def moe_experts(a_: T.handle, W1_: T.Buffer((experts, 2 * INTER, HIDDEN), dtype), h_: T.handle,
                    W2_: T.Buffer((experts, HIDDEN, INTER), dtype), y_: T.handle, srt_: T.handle,
                    tiles_: T.handle, trows_: T.handle, meta: T.Buffer((4,), "int32"), ready_: T.handle,
                    A_map: T.handle("tensormap"), W1_map: T.handle("tensormap"), H_map: T.handle("tensormap"),
                    HA_map: T.handle("tensormap"), W2_map: T.handle("tensormap"), Y_map: T.handle("tensormap")):
        P = T.int32()
        MT = T.int32()
        NS = T.int32()
        RA = T.int32()      # A's rows: P (the permuted rows), or T (x itself, with gather_rows)
        A_ = T.match_buffer(a_, (RA, HIDDEN), dtype, align=16)
        H_ = T.match_buffer(h_, (P, INTER), dtype, align=16)
        Y_ = T.match_buffer(y_, (P, HIDDEN), dtype, align=16)
        S_ = T.match_buffer(srt_, (NS,), "int32")
        tiles = T.match_buffer(tiles_, (MT,), "int32")
        trows = T.match_buffer(trows_, (MT, 2), "int32")
        R_ = T.match_buffer(ready_, (2, MT), "int32")
        Ax.cuda.min_blocks_per_sm(1)
        Ax.cuda.programmatic_launch()
        bx, tx = Ax.launch(sched.launch_grid(MT), threads)
        A, SRT = main1.a_operands(A_, S_, A_map)
        W1 = Ax.param(W1_, tensormap=W1_map)
        W2 = Ax.param(W2_, tensormap=W2_map)
        H = Ax.param(static_rows(H_, bm, INTER), tensormap=H_map, name="h")          # GEMM 1 stores it
        HA = Ax.param(static_rows(H_, bm, INTER), tensormap=HA_map, name="h_rows")   # GEMM 2 loads it
        Y = Ax.param(static_rows(Y_, bm, HIDDEN), tensormap=Y_map, name="y")
        ready.declare(R_, MT)
        pool = Ax.cuda.dynamic_shared(ring.elems, dtype)
        pipe = main1.pipeline(stages)
        Ax.cuda.grid_wait()     # set-up above overlaps the previous kernel; its outputs are read below
        grid = sched.size(MT)
        tiles1 = sched.first_tiles(meta)
        count = sched.count(meta, bx, grid)     # this CTA's tiles of both GEMMs
        first = sched.first(tiles1, bx, grid)   # this CTA's GEMM 1 tiles come first
        sched.over(meta, grid, tiles1)
        with Ax.cuda.role(0, 1, regs=producer_regs):
            with Ax.warps(0, GATHER_WARPS if gather_rows else 1):
                for it in T.serial(count):
                    if it < first:
                        m_blk, n_blk = sched.coords1(bx, it)
                        for kb in T.serial(k1):
                            main1.load(pool, pipe, A, W1, SRT, it * k1 + kb, trows[m_blk, 0], n_blk, tiles[m_blk],
                                       kb, one=tx == 0)
                    else:
                        m2, n2_blk = sched.coords2(bx, it)
                        base2 = first * k1 + (it - first) * k2
                        # the weights need no other tile: the first slots' loads go out now
                        for kb in range(ahead):
                            pipe.acquire(base2 + kb)
                            main2.load_b(pool, pipe, W2, base2 + kb, n2_blk, tiles[m2], kb)
                        ready.wait(m2, tx == 0)     # h's rows of m-tile m2 are all written
                        for kb in range(ahead):
                            main2.load_a(pool, pipe, HA, SRT, base2 + kb, trows[m2, 0], kb)
                            main2.arrive(pipe, base2 + kb, tx == 0)
                        for kb in T.serial(ahead, k2):
                            main2.load(pool, pipe, HA, W2, SRT, base2 + kb, trows[m2, 0], n2_blk, tiles[m2], kb,
                                       one=tx == 0)
            Ax.cuda.launch_dependents()
        with Ax.cuda.role(1, 1 + consumers, regs=consumer_regs, each=True):
            wg = Ax.cuda.warpgroup_index()
            leader = tx % 128 == 0
            acc1 = Ax.registers((64, main1.bn), "float32", main1.acc_layout(), name="acc")
            acc2 = acc1 if shared_acc else Ax.registers((64, bn), "float32", main2.acc_layout(), name="acc2")
            out1 = Ax.registers((64, epi1.half), dtype, epi1.out_layout(), name="out")
            out2 = Ax.registers((64, epi2.half), dtype, epi2.out_layout(), name="out2")
            stored = T.alloc_buffer((1,), "int32", scope="local")     # the m-tile of the last h tile stored
            for it in T.serial(count):
                if it < first:
                    m_blk, n_blk = sched.coords1(bx, it)
                    main1.mainloop(pool, pipe, acc1, wg, it * k1, leader)
                    if it > 0:      # the previous h tile's stores had this k-loop's time to land
                        ready.announce(stored[0], leader)
                    epi1.store(acc1, out1, pool, H, wg, leader, trows[m_blk, 0], trows[m_blk, 1], n_blk)
                    stored[0] = m_blk
                    if it == first - 1:     # a GEMM 2 tile of this CTA may wait for it: no later k-loop
                        ready.announce(m_blk, leader)
                else:
                    m2, n2_blk = sched.coords2(bx, it)
                    main2.mainloop(pool, pipe, acc2, wg, first * k1 + (it - first) * k2, leader)
                    epi2.store(acc2, out2, pool, Y, wg, leader, trows[m2, 0], trows[m2, 1], n2_blk)
            Ax.cuda.tma_store_wait(0, pred=leader)
    unbake_rows(Ax.current_build().tensormaps, ("H_map", "HA_map", "Y_map") + (() if gather_rows else ("A_map",)))
    return moe_experts


def make_experts(dtype="bfloat16", bm=64, bn=128, bn1=None, stages=4, pad=16, gather_rows=False, experts=E,
                 sms=SMS, name=None, bk=BK):
    """Both grouped GEMMs in one persistent launch (the module's law).

    ``moe_experts(A, w1 (experts, 2·inter, hidden), h (P, inter), w2 (experts, hidden, inter),
    y (P, hidden), sorted_ids, tile_expert, tile_rows, meta, ready (2, MT))``: A, sorted_ids and
    the tile tables as :func:`kernels.moe_gemm.make_grouped_gemm` takes them (``gather_rows``: A is
    x); ``ready`` is a zero-filled int32 workspace the launch leaves zero-filled.

    Every CTA runs its share of GEMM 1's tiles, then of GEMM 2's (one persistent order over both).
    Neither side idles on the protocol: a GEMM 2 tile's producer issues the weight loads of its
    first ``stages`` k-blocks before it waits for h, and a consumer counts a GEMM 1 tile after the
    next tile's k-loop (by then its stores are long written) — at once only for its last GEMM 1
    tile, which a GEMM 2 tile of its own CTA may be waiting for.  ``bn1``: GEMM 1's tile width
    (default ``bn``); ``bk``: K elements per stage, both GEMMs."""
    check_dtype(dtype, "moe_experts")
    config = (dtype, bm, bn, bn1, stages, pad, gather_rows, sms, bk)
    parts(*config)          # refusals now, not at build time

    def factory():
        return kernel(dtype, experts, stages, sms, *parts(*config))

    return Ax.Kernel(name or f"moe_experts_{dtype}_bm{bm}_bn{bn1 or bn}x{bn}" + ("_gather" if gather_rows else ""),
                     factory, outputs=("h", "y"),
                     meta={"dtype": dtype, "bm": bm, "bn1": bn1 or bn, "bn2": bn, "pad": pad or bm,
                           "gather_rows": gather_rows, "threads": 128 * (bm // 64 + 1)})
