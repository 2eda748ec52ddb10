"""The MoE layer's grouped GEMM (sm_90a): for every m-tile ``m`` of the ``meta[0]`` tiles the
permutation made (:mod:`kernels.moe`), the ``bm`` rows from ``r = tile_rows[m, 0]``:
``C[r : r + own] = act(A[r : r + own] · B[tile_expert[m]]ᵀ)``, ``own = tile_rows[m, 1]``.

A composition of :mod:`kernels.parts`: the grouped tile walk whose tile count is read on the device
(:class:`~kernels.parts.schedulers.grouped.Grouped`, with ``stream_k``
:class:`~kernels.parts.schedulers.grouped.GroupedStreamK`), the gathered-rows mainloop
(:class:`~kernels.parts.mainloops.gathered_rows.GatheredRows`: A's rows by TMA or gathered through
``sorted_ids``, the expert's B rows from the 3-D weight tensor) and the fused epilogue
(:class:`~kernels.parts.epilogues.fused.FusedStore`: SiLU·up or a cast, own rows only, with
stream-K's :class:`~kernels.parts.epilogues.fused.FusedHandover`), in one persistent
warp-specialized kernel: warpgroup 0 loads, one or two consumer warpgroups of 64 rows compute and
store.  The design choices and their measurements: ``docs/moe.md``.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.moe_host import DTYPES, E, HIDDEN, INTER, PANEL
from kernels.parts import compose
from kernels.parts.epilogues.fused import STORE_ROWS, FusedHandover, FusedStore
from kernels.parts.mainloops.gathered_rows import GATHER_WARPS, GatheredRows, Ring
from kernels.parts.schedulers.grouped import Grouped, GroupedStreamK
from kernels.parts.tiles import static_rows, unbake_rows

BK, SMS, GROUP = PANEL, 132, 16
ROW_ELEMENTS = 8         # 16 bytes of 16-bit elements: TMA's row-stride unit
PRODUCER_REGS, CONSUMER_REGS = 40, 232
GATHER_REGS = 56         # a producer warp that gathers rows computes addresses for 16 cp.async per stage


def check_dtype(dtype, what):
    if dtype not in DTYPES:
        raise ValueError(f"{what}: dtype must be one of {DTYPES}, got {dtype!r}")


def check(n, k, bm, bn, bk, act, pad):
    """The tile's conditions (``pad``: already defaulted to ``bm``).  Neither ``n_out`` nor ``k``
    need be a multiple of the tile: the last column block and the last k-block reach past them,
    TMA zero-fills what they load there (the weights' and h's maps have the true extents) and
    clips what the epilogue stores (a gate box of GEMM 1's last block reads up rows into columns
    that are never stored).  Rows of 16 bytes are TMA's unit, so both are multiples of
    :data:`ROW_ELEMENTS`; the first column block and k-block lie inside them (the operands'
    static extents bound every slice)."""
    if bm not in (64, 128) or bn not in (96, 128, 256) or act not in (None, "silu_mul") or (bn == 96 and not act):
        raise ValueError(f"moe_gemm: bm must be 64 or 128, bn 128 or 256 (or 96 with silu_mul: 48 gate + 48 up "
                         f"rows), act None or 'silu_mul' (got {bm}, {bn}, {act!r})")
    if pad % STORE_ROWS or bm % pad:
        raise ValueError(f"moe_gemm: pad={pad} must be a multiple of {STORE_ROWS} that divides bm={bm}")
    n_out = n // 2 if act else n
    if n % (2 if act else 1) or n_out % ROW_ELEMENTS or k % ROW_ELEMENTS:
        raise ValueError(f"moe_gemm: n_out={n_out} and k={k} must be multiples of {ROW_ELEMENTS} (16-byte rows for "
                         f"TMA){' and n even (gate and up halves)' if act else ''}")
    half = bn // 2 if act else bn
    if half > n_out:            # the first column block's boxes lie inside the operands
        raise ValueError(f"moe_gemm: a tile of {half} output columns (bn={bn}) is wider than n_out={n_out}")
    if -(-k // bk) < 2:         # the mainloop's first and last k-blocks are distinct iterations
        raise ValueError(f"moe_gemm: k={k} is a single k-block of bk={bk}; use bk < {k}")


def check_gather(k, bk):
    """A gathered A (``gather_rows``): its cp.async copies whole rows of a k-block, with no
    column bound, so ``bk`` must divide ``k``."""
    if k % bk:
        raise ValueError(f"moe_gemm: gather_rows copies whole {bk}-column k-blocks of x's rows; k={k} must be a "
                         f"multiple of bk={bk}")


def gemm_parts(n, k, dtype, bm, bn, bk, act, pad, gather_rows):
    """``(mainloop, epilogue)`` of one grouped GEMM (new objects: they keep a build's state)."""
    pad = pad or bm
    check(n, k, bm, bn, bk, act, pad)
    if gather_rows:
        check_gather(k, bk)
    main = GatheredRows(n, k, dtype, bm, bn, bk, act is not None, gather_rows)
    return main, FusedStore(main, dtype, act, pad)


def role_registers(gather_rows, consumers):
    """``setmaxnreg`` of the producer and of each consumer warpgroup: a gathering producer needs
    more; the 128 threads of each role share the 64K registers."""
    producer = GATHER_REGS if gather_rows else PRODUCER_REGS
    return producer, min(CONSUMER_REGS, (65536 // 128 - producer) // consumers // 8 * 8)


def parts(n, k, dtype, bm, bn, bk, stages, act, pad, gather_rows, ctas, stream_k):
    """``(scheduler, mainloop, epilogue)`` composed, over their :class:`Ring`."""
    main, epi = gemm_parts(n, k, dtype, bm, bn, bk, act, pad, gather_rows)
    Ring([(main, epi)], stages)
    n_tiles = -(-(n // 2 if act else n) // epi.half)
    if stream_k:
        return compose(GroupedStreamK(n_tiles, main.k_iters, ctas, GROUP), main,
                       FusedHandover(epi, main.k_iters, main.consumers))
    return compose(Grouped(n_tiles, main.k_iters, ctas, GROUP), main, epi)


def kernel(n, k, dtype, experts, stages, ctas_per_sm, sched, main, epi):
    """The ``tvm.tirx`` PrimFunc ``moe_gemm`` of the composition (without stream-K the workspace
    and flags leave the signature)."""
    bm, bn, k_iters, gather_rows, ring = main.bm, main.bn, main.k_iters, main.gather_rows, main.ring
    n_out, ctas, consumers = n // 2 if epi.act else n, sched.ctas, main.consumers
    threads = 128 * (1 + consumers)
    # setmaxnreg moves registers between the roles of one CTA per SM; with more, each keeps its share
    producer_regs, consumer_regs = role_registers(gather_rows, consumers) if ctas_per_sm == 1 else (None, None)

    @T.prim_func
    # sorted_ids (srt_) is used only by gather_rows, A_map only without it: TVM drops the unused one
    def moe_gemm(a_: T.handle, B_: T.Buffer((experts, n, k), dtype), c_: T.handle, srt_: T.handle,
                 tiles_: T.handle, trows_: T.handle, meta: T.Buffer((4,), "int32"), A_map: T.handle("tensormap"),
                 B_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
                 W_: T.Buffer((ctas * consumers * 64, bn), "float32"), F_: T.Buffer((ctas * consumers,), "int32")):
        P = T.int32()
        MT = T.int32()
        NS = T.int32()
        RA = T.int32()      # A's rows: P (the permuted rows), or T (x itself, with gather_rows)
        A_ = T.match_buffer(a_, (RA, k), dtype, align=16)
        S_ = T.match_buffer(srt_, (NS,), "int32")
        C_ = T.match_buffer(c_, (P, n_out), dtype, align=16)
        tiles = T.match_buffer(tiles_, (MT,), "int32")
        trows = T.match_buffer(trows_, (MT, 2), "int32")
        Ax.cuda.min_blocks_per_sm(ctas_per_sm)
        Ax.cuda.programmatic_launch()
        bx, tx = Ax.launch(sched.launch_grid(MT), threads)
        A, SRT = main.a_operands(A_, S_, A_map)
        B = Ax.param(B_, tensormap=B_map)
        C = Ax.param(static_rows(C_, bm, n_out), tensormap=C_map, name="C")
        epi.declare(W_, F_)
        pool = Ax.cuda.dynamic_shared(ring.elems, dtype)
        pipe = main.pipeline(stages)
        Ax.cuda.grid_wait()     # set-up above overlaps the previous kernel; its outputs are read below
        sched.over(meta)        # the m-extent is the permutation's tile count, read on the device
        with Ax.cuda.role(0, 1, regs=producer_regs):
            with Ax.warps(0, GATHER_WARPS if gather_rows else 1):
                for it in T.serial(sched.whole_tiles(bx, "producer")):
                    m_blk, n_blk = sched.coords(bx, it)
                    for kb in T.serial(k_iters):
                        main.load(pool, pipe, A, B, SRT, it * k_iters + kb, trows[m_blk, 0], n_blk, tiles[m_blk], kb)
                sched.produce_rest(lambda i, m_blk, n_blk, kb: main.load(pool, pipe, A, B, SRT, i, trows[m_blk, 0], n_blk,
                                                                         tiles[m_blk], kb))
            # every load is issued: the next kernel may launch while the last tiles finish
            Ax.cuda.launch_dependents()
        with Ax.cuda.role(1, 1 + consumers, regs=consumer_regs, each=True):
            wg = Ax.cuda.warpgroup_index()
            leader = tx % 128 == 0
            acc = Ax.registers((64, bn), "float32", main.acc_layout(), name="acc")
            out = Ax.registers((64, epi.half), dtype, epi.out_layout(), name="out")
            for it in T.serial(sched.whole_tiles(bx, "consumer")):
                m_blk, n_blk = sched.coords(bx, it)
                base = it * k_iters
                # first k-block overwrites; the last one is waited for in straight-line code
                main.mma(pool, pipe, acc, wg, base, False, leader)
                for kb in T.serial(1, k_iters - 1):
                    main.mma(pool, pipe, acc, wg, base + kb, True, leader)
                main.mma(pool, pipe, acc, wg, base + k_iters - 1, True, leader)
                epi.store(acc, out, pool, C, wg, leader, trows[m_blk, 0], trows[m_blk, 1], n_blk)
            epi.registers()
            sched.consume_rest(lambda base, k0, k1: main.k_blocks(pool, pipe, acc, wg, leader, base, k0, k1),
                               lambda m_blk, n_blk, k0, k1: epi.finish(acc, out, pool, C, bx, wg, leader, trows[m_blk, 0],
                                                                       trows[m_blk, 1], n_blk, k0, k1))
            Ax.cuda.tma_store_wait(0, pred=leader)
    unbake_rows(Ax.current_build().tensormaps, ("C_map",) if gather_rows else ("A_map", "C_map"))
    return moe_gemm if sched.hands_over else Ax.without_params(moe_gemm, ("W_", "F_"))


def make_grouped_gemm(n, k, dtype="bfloat16", bm=128, bn=256, stages=4, act=None, experts=E, sms=SMS, name=None,
                      bk=BK, pad=None, gather_rows=False, ctas_per_sm=1, stream_k=False):
    """A grouped GEMM over the padded, expert-grouped rows (the module's law).

    ``moe_gemm(A (P, k), B (experts, n, k), C (P, n_out), sorted_ids, tile_expert (MT,), tile_rows
    (MT, 2), meta (4,))``; ``act=None``: ``n_out = n``; ``act="silu_mul"``: B's rows are gate rows
    [0, n/2) then up rows [n/2, n), ``C = SiLU(A·gateᵀ) · (A·upᵀ)`` and ``n_out = n/2``.

    ``bm``: 64 (one consumer warpgroup) or 128 (two); ``bn``: columns of B per tile (for
    ``silu_mul``, bn/2 gate + bn/2 up); ``bk``: K elements per pipeline stage (a multiple of 64,
    one 128-byte swizzle panel each: longer stages read longer runs of each weight row);
    ``pad``: the rows the segments are padded to (default ``bm``).  With a smaller ``pad`` a tile
    reaches into the next experts' rows, computes them and stores only its own rows, 16 at a time
    (:func:`kernels.parts.schedulers.padding.tiles`), so padding costs up to ``pad - 1`` rows per expert in
    every buffer the layer moves instead of ``bm - 1``.

    ``ctas_per_sm``: persistent CTAs resident on each SM (``__launch_bounds__(threads, ctas_per_sm)``,
    no ``setmaxnreg``): with 2, one CTA's loads go on while the other runs its epilogue, at the
    price of half the shared memory each (``stages`` must fit it).

    ``stream_k``: the tiles of the last whole round and the partial one (the count is read on the
    device) are split over all CTAs in whole k-blocks, so no SM streams the last tiles alone while
    the others idle; a tile split between two CTAs is finished by the one with its first k-blocks,
    which adds the other's fp32 partial (scratch workspace, bounded flag) before the epilogue.
    Below one tile per CTA nothing is split.

    ``gather_rows``: A is the unpermuted ``x`` (T, k) and the producer warpgroup gathers each tile's
    rows itself (``A[r] = x[sorted_ids[r]]``, zeros where ``sorted_ids[r] < 0``) with ``cp.async``
    into the swizzled stage — the permutation kernel and its padded copy of x disappear
    (``sorted_ids`` holds -1 for ``bm`` rows past the padded ones, so a tile reaching past the last
    segment reads padding); without it ``sorted_ids`` is unused."""
    check_dtype(dtype, "moe_gemm")
    stream_k = bool(stream_k)       # variants pass 0/1
    config = (n, k, dtype, bm, bn, bk, stages, act, pad, gather_rows, sms * ctas_per_sm, stream_k)
    main, epi = gemm_parts(*config[:6], act, pad, gather_rows)
    if stream_k and (main.k_iters < 4 or ctas_per_sm != 1):
        raise ValueError(f"moe_gemm: stream_k needs at least 4 k-blocks (k={k}, bk={bk}) and one CTA per SM")
    Ring([(main, epi)], stages)         # refusals now, not at build time

    def factory():
        return kernel(n, k, dtype, experts, stages, ctas_per_sm, *parts(*config))

    return Ax.Kernel(name or f"moe_gemm_{act or 'plain'}_{dtype}_bm{bm}_bn{bn}_{n}x{k}", factory, outputs=("C",),
                     meta={"n": n, "k": k, "dtype": dtype, "bm": bm, "bn": bn, "pad": pad or bm, "act": act,
                           "gather_rows": gather_rows, "threads": 128 * (1 + main.consumers)})


def make_gemm1(dtype="bfloat16", bm=128, bn=256, **kw):
    """Grouped GEMM 1: ``h = SiLU(xp · gateᵀ) · (xp · upᵀ)`` (P × 768) from ``w1`` (128, 1536, 2048)."""
    return make_grouped_gemm(2 * INTER, HIDDEN, dtype, bm, bn, act="silu_mul", **kw)


def make_gemm2(dtype="bfloat16", bm=128, bn=256, **kw):
    """Grouped GEMM 2: ``y = h · w2[e]ᵀ`` (P × 2048) from ``w2`` (128, 2048, 768)."""
    return make_grouped_gemm(HIDDEN, INTER, dtype, bm, bn, **kw)
