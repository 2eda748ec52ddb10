"""The persistent warp-specialized GEMM kernel (sm_90a, sm_100a): a tile scheduler × a mainloop × an
epilogue (:mod:`kernels.parts`), each reached only through its contract.

One CTA per SM (or per cluster rank) runs three warpgroups: warpgroup 0 is the producer
(``setmaxnreg`` down to 40 registers) — its warp 0 loads every k-block the scheduler gives the CTA,
its other warps run what the mainloop and the epilogue put there (the tcgen05 MMA thread, the
reduce-scatter's forwarding warps); warpgroups 1 and 2 are the consumers (up to 232 registers) — for
each tile the mainloop leaves the accumulator in registers and the epilogue stores it; then the
scheduler's remaining pieces (stream-K) run with the epilogue's hand-over.

Law: the producer and the consumers walk the same tiles in the same order (both read the
scheduler), so pipeline iteration ``it · k_iters + kb`` is k-block kb of the CTA's tile ``it`` on
both sides; a scheduler's pieces continue that count.

``programmatic`` (a one-GPU build's opt-in; default off, so the mesh kernels' TIR does not change):
the kernel is launched programmatically (:func:`axe.lang.cuda.programmatic_launch`).  Its set-up
(the ring's barriers, the mainloop's own) overlaps the previous kernel's tail; every thread then
waits for that kernel (``griddepcontrol.wait``) before anything reads an operand or the scratch or
writes an output, and the producer lets the next kernel launch once its last load is issued.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.tiles import rows_view, unbake_rows

THREADS, PRODUCER_REGS, CONSUMER_REGS = 384, 40, 232


def role_registers(producer):
    """``(producer, consumer)`` registers per thread: the producer warpgroup's ``producer`` (the
    epilogue's ``producer_regs``: more where its warps copy to peers), the two consumer warpgroups
    what is left of the SM's 64 Ki registers, at most ``CONSUMER_REGS``, in multiples of 8."""
    return producer, min(CONSUMER_REGS, (65536 // 128 - producer) // 2 // 8 * 8)


def kernel(problem, sched, main, epi, sms, programmatic=False):
    """The ``tvm.tirx`` PrimFunc of ``problem`` (a :class:`~kernels.parts.Problem`) composed of the
    scheduler ``sched``, the mainloop ``main`` and the epilogue ``epi`` on ``sms`` persistent CTAs
    (``programmatic``: launched programmatically, see the module docstring).
    The signature declares every composition's parameters; those the epilogue does not use
    (``epi.unused_params``) leave it."""
    M, N, dtype, k_iters = problem.M, problem.N, problem.dtype, main.k_iters
    dyn, cluster, acc_layout = sched.runtime, main.cluster, main.acc_layout()
    # fewer rows than a tile (or a run-time count): the M-sized operands are declared through a
    # tile-high view, and their TMA maps take M from the tensors at launch
    narrow = not isinstance(M, int) or M < main.bm
    wrows, wcols = main.part
    world, p_shape, nsig = epi.world, epi.p_shape, epi.nsig
    producer_regs, consumer_regs = role_registers(epi.producer_regs)

    @T.prim_func
    def gemm(A_: T.Buffer(problem.a_shape, dtype), B_: T.Buffer(problem.b_shape, dtype), C_: T.Buffer((M, epi.out_cols(N)), dtype),
             A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
             Srow_: T.Buffer((1, M), "float32"), Scol_: T.Buffer((1, N), "float32"), Bias_: T.Buffer((1, N), "float32"),
             R_: T.Buffer((M, N), dtype), Srow_map: T.handle("tensormap"), Scol_map: T.handle("tensormap"),
             Bias_map: T.handle("tensormap"), R_map: T.handle("tensormap"),
             P_: T.Buffer(p_shape, dtype), P_map: T.handle("tensormap"), peers: T.Buffer((world,), "int64"), sig: T.Buffer((nsig,), "int32"),
             err: T.Buffer((8,), "int32"), rank_: T.int32, epoch: T.int32, timeout_ns: T.int64,
             Q_: T.Buffer(p_shape, dtype), W_: T.Buffer(sched.workspace, "float32"), F_: T.Buffer(sched.flags(sms), "int32")):
        Ax.cuda.min_blocks_per_sm(1)
        if programmatic:
            Ax.cuda.programmatic_launch()
        if cluster == 1:      # a runtime M: no more CTAs than tiles (the grid is an expression of M)
            bx, tx = Ax.launch(sched.launch_grid(sms), THREADS)
            cid, rank = bx, 0
        else:
            cid, rank, bx, tx = Ax.cuda.cluster_launch(sms, THREADS, cluster)
        A = Ax.param(rows_view(A_, narrow), tensormap=A_map)
        B = Ax.param(B_, tensormap=B_map)
        C = Ax.param(rows_view(C_, narrow), tensormap=C_map)
        # the mainloop's two operands: A and B, or B and A where the problem is computed transposed
        X, Y = (B, A) if problem.swap else (A, B)
        W = Ax.param(W_, scratch=True)          # split tiles' partial sums (fp32)
        F = Ax.param(F_, scratch=True)          # their flags, one per CTA and warpgroup
        dist = epi.declare(A_, B_, C_, P_, P_map, Q_, peers, sig, err, rank_, epoch, timeout_ns, F, cid, tx)
        epi.inputs(rows_view(Srow_, narrow, axis=1), Scol_, Bias_, rows_view(R_, narrow), Srow_map, Scol_map, Bias_map, R_map)
        pool = Ax.cuda.dynamic_shared(main.smem + epi.smem, dtype)
        pipe = main.pipeline()
        main.setup()
        if programmatic:    # the set-up above overlaps the previous kernel; its outputs are read below
            Ax.cuda.grid_wait()
        with Ax.cuda.role(0, 1, regs=producer_regs):
            with Ax.warps(0, 1):
                for it in T.serial(sched.trips(sched.count(cid))):
                    m_blk, n_blk = sched.coords(cid, it, rank)
                    sched.before_tile(m_blk, dist.mesh)
                    for kb in T.serial(k_iters):
                        main.load(pool, pipe, X, Y, it * k_iters + kb, m_blk, n_blk, kb, rank, sched, dist.mesh)
                sched.produce_rest(cid, lambda i, m_blk, n_blk, kb: main.load(pool, pipe, X, Y, i, m_blk, n_blk, kb, rank,
                                                                              sched))
                if programmatic:    # every load is issued: the next kernel may launch while the last tiles finish
                    Ax.cuda.launch_dependents()
            epi.producer_warps(dist)
            main.producer_warps(pool, pipe, sched, cid, rank)
        with Ax.cuda.role(1, 3, regs=consumer_regs, each=True):
            wg = Ax.cuda.warpgroup_index()
            leader = tx % 128 == 0
            acc = Ax.registers((wrows, wcols), "float32", acc_layout, name="acc")
            out = Ax.registers((wrows, wcols), dtype, acc_layout, name="out")
            epi.begin(dist)
            count = sched.count(cid)
            for j in T.serial(main.trips(sched.trips(count), wg)):
                it = main.tile_index(j, wg)
                m_blk, n_blk = sched.coords(cid, it, rank)
                main.consume(pool, pipe, acc, wg, leader, it, count)
                epi.store(acc, out, pool, C, dist, wg, leader, m_blk, n_blk)
            epi.end(dist, wg, leader)
            sched.consume_rest(cid, lambda base, k0, k1: main.k_range(pool, pipe, acc, wg, leader, base, k0, k1),
                               lambda m_blk, n_blk, k0, k1: epi.finish(acc, out, pool, C, W, F, cid, wg, leader,
                                                                       m_blk, n_blk, k0, k1))
            Ax.cuda.tma_store_wait(0, pred=leader)
        main.teardown()
    if narrow:
        unbake_rows(Ax.current_build().tensormaps, ("A_map", "C_map") + epi.m_maps, vectors=("Srow_map",))
    return Ax.without_params(gemm, epi.unused_params)
