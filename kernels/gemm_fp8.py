"""Block-scaled FP8 GEMM for Hopper (sm_90a), DeepSeek-V3's recipe: ``C = (SA ⊙ A) · (SB ⊙ B)ᵀ``.

- A: M×K ``float8_e4m3fn``, row-major (activations); B: N×K e4m3 (an ``nn.Linear`` weight, so
  ``C = A·Bᵀ``); C: M×N bf16.
- SA: one fp32 scale per row and 128 elements of K, stored K-block-major as a ``(ceil(K/128), Mp)``
  array (``Mp``: M rounded up to 4, so rows are 16-byte aligned for TMA) — logically the
  ``(M, K/128)`` tensor with layout ``S[(M, KB):(1, Mp)]``, the layout DeepGEMM and cuBLAS use;
  SB: one fp32 scale per 128×128 block of B, ``(ceil(N/128), ceil(K/128))`` row-major.
- ``C[i, j] = Σ_kb SA[i, kb] · SB[j // 128, kb] · Σ_{k in kb} A[i, k] · B[j, k]``.

The kernel is :mod:`kernels.gemm`'s structure (persistent CTAs over a grouped
:class:`~axe.lang.TileSchedule`, a producer warpgroup issuing TMA into a
:class:`~axe.backends.cuda.lang.pipeline.Pipeline`, two consumer warpgroups of 64 rows each, an stmatrix +
TMA-store epilogue) with an fp8 main loop.  A pipeline slot holds one scale block of K
(BK = 128): the A tile (128×128), the B tile (``bn``×128, both 128-byte swizzled, K-major as fp8
wgmma requires) and the A tile's 128 row scales (a 512-byte TMA box of SA).  Per slot and per
128 columns of the tile a consumer warpgroup

1. issues four ``wgmma.m64n128k32.e4m3`` into a fresh fp32 partial accumulator (``Ax.gemm``
   with fp8 operands; ``wait=False``),
2. loads its scale products — ``SA[row, kb] · SB[n-block, kb]`` for the rows it holds — while the
   tensor cores run (``scale_accumulate``: which scale goes with which accumulator element comes
   from the layouts of the wgmma D fragment, of the SA slot in shared memory and of SB in global
   memory, see :mod:`axe.schedules.block_scale`),
3. waits for the group and promotes: ``acc += partial · factor`` (the two-level accumulation that
   keeps FP8 accurate: Hopper's tensor cores keep only about 14 bits while summing fp8 products,
   so their error is confined to one k-block's 128 terms; the sum over k-blocks is full fp32).

With ``bn = 256`` a warpgroup holds a 64×256 accumulator (128 registers) and one 64×128 partial
(64) — two full partials would not fit the 232 registers a consumer gets — so the two 128-column
halves of a slot are issued one after the other.  ``bn = 256`` loads 48 KiB per slot for 8.4
MFLOP, ``bn = 128`` 32 KiB for 4.2 MFLOP (a third more L2 traffic per flop) but keeps 5 stages.
Where N is not a multiple of 256 the last tile's second half may lie wholly past N:
it is skipped (its scale row does not exist) and its columns are clipped by the TMA store.

``bn = 192`` (a width that is not a multiple of 128, for N whose 256-wide tiles quantize badly:
N = 2112 gives 11 full column tiles instead of 8 and a 64-wide one) keeps one 64×192 partial (96
registers) beside the accumulator (96): a single group of four ``wgmma.m64n192k32`` per slot.  Its
tiles start at multiples of 64 that need not be multiples of 128, so which SB block scales a
column depends on the tile: every 64-column group lies in one block
(``gcd(192, 128) = 64``), and per slot the warpgroup's first threads stage the group's
``SB[(n0 + 64 g) // 128, kb]`` into shared memory (two buffers by slot parity, one named barrier),
which ``scale_accumulate`` then reads as a (1, 3) scale — the per-element mapping still comes from
the layouts.

``cluster=2`` runs CTA pairs on vertically neighbouring tiles (block-rows 2p and 2p + 1 of one
block-column): each CTA loads half of the B tile and multicasts it to both, and a slot is free once
the consumers of both CTAs released it (the pipeline counts the peer's releases).  Why it may pay
here when it did not for the 16-bit GEMM: at fp8 rates a 128×256 tile consumes its 48.5 KiB per
k-block in about 0.7 µs (8.4 MFLOP at ~12 TFLOP/s per SM), 9 TB/s from L2 over 132 SMs; sharing B
brings that to 32.5 KiB, 6 TB/s.  With an odd number of block-rows the last pair's second CTA
computes a block-row past M (its loads read zeros) and stores nothing.

``stream_k=True`` (bn 128 or 256, no clusters) is :mod:`kernels.gemm`'s stream-K: the last whole wave
of tiles and the partial one are split evenly over all CTAs in k-blocks (:class:`StreamK`, whose
bounds are :func:`kernels.gemm.stream_k_bound`'s), so no CTA idles in a partial last wave.  A tile
is then computed in at most two pieces, each a range of whole 128-wide k-blocks: per-k-block
promotion makes a piece's accumulator the promoted fp32 sum over its k-blocks (scales applied),
so the CTA holding a tile's last k-blocks writes it to a scratch workspace and sets a flag
(``Ax.cuda.flag_set``), and the CTA holding the first k-blocks waits for the flag
(``Ax.cuda.flag_take``, bounded, call-free), adds the workspace into its accumulator while casting
and stores the tile.  The CTA's pieces run after its whole-tile waves, in the same pipeline.

Shapes need not be multiples of the tile: TMA zero-fills loads past M, N or K and clips stores.
K may be a single k-block (K = 128: SA's tensor map then has an extent-1 dimension, which gets the
packed stride the driver accepts, :func:`axe.runtime.tensormap.packed_strides`); a tensor smaller
than one tile in M, N or K is refused.
"""

from math import gcd

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.lang.block_scale import scale_accumulate
from axe.layout import S, Swizzle, SwizzledLayout
from axe.schedules.emit import guard
from kernels.fp8_blocks import reference, scale_shapes  # noqa: F401  (torch-only: the GPU side imports it)
from kernels.gemm import StreamK, sk_publish, sk_take, swizzled

FP8 = "float8_e4m3fn"
BM, BK, SMS, GROUP = 128, 128, 132, 16
STAGES = {128: 5, 192: 4, 256: 4}   # pipeline depth per tile width (shared memory: 227 KiB)
THREADS, PRODUCER_REGS, CONSUMER_REGS = 384, 40, 232
HALF = BM // 2                      # rows per consumer warpgroup
PART = 128                          # columns per partial accumulator (one wgmma N)


def fp8_tile(rows, cols=BK):
    """A (rows, cols) fp8 tile, K-major, under TMA's 128-byte swizzle (``Swizzle(3, 4, 3)`` in
    1-byte elements): one 128-byte row per row of the tile, the wgmma K-major atom's width."""
    if cols != 128:
        raise ValueError(f"gemm_fp8: fp8 tiles are 128 elements of K wide, got {cols}")
    return SwizzledLayout(S[(rows, cols)], Swizzle(3, 4, 3))


def make(M, N, K, bn=128, stages=None, sms=SMS, group=GROUP, name=None, cluster=1, stream_k=False):
    """The block-scaled FP8 GEMM kernel for static sizes; ``bn``: tile columns (128, 192 or 256);
    ``cluster=2``: CTA pairs on vertically neighbouring tiles, each loading half of the B tile with
    a TMA multicast to both (B's L2 traffic per CTA halved, as in kernels/gemm.py); ``stream_k``:
    split the last waves' tiles over all CTAs in k-blocks (bn 128 or 256, no clusters; see the
    module docstring)."""
    if bn not in STAGES:
        raise ValueError(f"gemm_fp8: bn must be one of {sorted(STAGES)}, got {bn!r}")
    if cluster not in (1, 2) or sms % cluster:
        raise ValueError(f"gemm_fp8: cluster must be 1 or 2 and divide sms={sms}, got {cluster!r}")
    if M < BM or N < bn or K < BK:
        raise ValueError(f"gemm_fp8: {M}x{N}x{K} is smaller than one {BM}x{bn} tile and one {BK}-wide k-block "
                         "(a TMA box larger than its whole tensor is not built: no GPU case covers it)")
    if N % 8 or K % 16:
        raise ValueError(f"gemm_fp8: N={N} must be a multiple of 8 and K={K} of 16 (TMA: 16-byte row pitches)")
    if stream_k and (bn % PART or cluster != 1):
        raise ValueError(f"gemm_fp8: stream_k is built for bn 128 or 256 without clusters, got bn={bn}, "
                         f"cluster={cluster}")
    stages = stages or STAGES[bn]
    sa_shape, sb_shape = scale_shapes(M, N, K)
    n_blocks = sb_shape[0]                      # rows of SB: 128-column blocks of N
    # a tile width that is a multiple of 128 keeps one SB block per 128-column partial; otherwise one
    # partial spans the tile and SB is staged per column group (the gcd: no group crosses a block)
    staged = bn % PART != 0
    part_n = bn if staged else PART
    group_n = gcd(bn, PART)
    halves = bn // part_n
    store_n = PART if bn % PART == 0 else 64    # epilogue columns per TMA store (its box's width)
    m_tiles, n_tiles, k_iters = -(-M // BM), -(-N // bn), sa_shape[0]
    # one scheduled block-row per cluster: a pair's CTAs take block-rows 2p and 2p + 1 (the second
    # lies past M when m_tiles is odd: its loads read zeros and its store is skipped)
    sched = Ax.TileSchedule(-(-m_tiles // cluster), n_tiles, sms // cluster, max(group // cluster, 1), cluster)
    b_part = bn // cluster                      # rows of the B tile each CTA of a cluster loads
    odd_pair = cluster > 1 and m_tiles % cluster != 0
    a_at, b_at = 0, stages * BM * BK            # byte offsets of the slots in the fp8 pool
    # the last tile's second half lies past N when the 128-column blocks are odd in number
    ragged_half = halves > 1 and n_blocks % halves != 0
    sk = StreamK(sched.tiles, k_iters, sms) if stream_k else None
    ws_rows = sms * 2 * HALF if stream_k else 1     # stream-K partials: one 64-row block per CTA and warpgroup

    def factory():
        acc_layout = _d_fragment(bn)
        part_layout = _d_fragment(part_n)

        def sb_scales(SB, sbg, wg, i, kb, n_blk):
            """This slot's SB as a (1, bn / group_n) scale of the tile, one per column group: thread g
            of the warpgroup stages ``SB[(n0 + g·group_n) // 128, kb]`` (the block clamped to SB's
            last row: groups past N only feed columns the store clips), buffers alternating by slot
            so a thread still reading the previous slot's scales is never overwritten (the barrier
            of the slot in between orders it)."""
            row, lane = wg * 2 + i % 2, cta["tx"] % 128
            with guard(lane < bn // group_n):
                nb = T.min((n_blk * bn + lane * group_n) // PART, n_blocks - 1)
                IRB.buffer_store(sbg.flat(), SB.flat()[nb * k_iters + kb], [row * (bn // group_n) + lane])
            Ax.cuda.named_barrier(1 + wg, 128)
            return sbg[row:row + 1, :]

        def k_block(pool, sa, SB, pipe, acc, part, wg, leader, i, kb, n_blk, first):
            """Slot of iteration i (k-block kb): wgmma each 128-column half (or, ``staged``, the
            whole tile) into the partial accumulator, scale it by its k-block's scales and add it
            into acc."""
            s = pipe.slot(i)
            pipe.wait(i)
            a = Ax.view(pool, fp8_tile(HALF), (HALF, BK), base=a_at + s * (BM * BK) + wg * (HALF * BK))
            # SA's slot seen as the (rows, k-blocks) tensor it is: this warpgroup's 64 rows, one k-block
            sa_rows = Ax.permute(sa[s:s + 1, wg * HALF:(wg + 1) * HALF], (1, 0))
            for h in range(halves):
                nb = n_blk * halves + h

                def half():
                    b = Ax.view(pool, fp8_tile(part_n), (part_n, BK), base=b_at + s * (bn * BK) + h * (part_n * BK))
                    Ax.gemm(part, a, Ax.permute(b, (1, 0)), accumulate=False, wait=False)
                    sb = sb_scales(SB, cta["sbg"], wg, i, kb, n_blk) if staged else SB[nb:nb + 1, kb:kb + 1]
                    scale_accumulate(acc[:, h * part_n:(h + 1) * part_n], part, sa_rows, sb,
                                     accumulate=not first, before_apply=lambda: _wait_for(part))
                if ragged_half and h == halves - 1:
                    with guard(nb < n_blocks):
                        half()
                else:
                    half()
            pipe.release(i, pred=leader)

        cta = {}        # the CTA's rank in its cluster, set at launch; the staged SB buffer; stream-K's workspace

        def alloc_sbg():
            """``staged``: the shared buffer of SB per column group, rows (warpgroup, slot parity)."""
            if staged:
                cta["sbg"] = Ax.shared((4, bn // group_n), "float32", name="sbg")

        def launch():
            """``(cluster index, tx)``: a plain persistent launch, or one in clusters of ``cluster``."""
            if cluster == 1:
                cid, cta["tx"] = Ax.launch(sms, THREADS)
            else:
                cid, cta["rank"], _, cta["tx"] = Ax.cuda.cluster_launch(sms, THREADS, cluster)
            return cid, cta["tx"]

        def load_b(pool, pipe, B, s, n_blk, kb):
            """The slot's B tile: whole, or (a cluster) this CTA's ``b_part`` rows of it multicast
            into the same offset of every CTA of the pair, so each slot receives the whole tile."""
            ks = slice(kb * BK, (kb + 1) * BK)
            if cluster == 1:
                Ax.copy(Ax.view(pool, fp8_tile(bn), (bn, BK), base=b_at + s * (bn * BK)),
                        B[n_blk * bn:(n_blk + 1) * bn, ks], barrier=pipe.full, stage=s)
                return
            r0 = n_blk * bn + cta["rank"] * b_part
            Ax.copy(Ax.view(pool, fp8_tile(b_part), (b_part, BK), base=b_at + s * (bn * BK) + cta["rank"] * (b_part * BK)),
                    B[r0:r0 + b_part, ks], barrier=pipe.full, stage=s, multicast=(1 << cluster) - 1)

        def store(cbuf, C, acc, out, wg, leader, m_blk, n_blk, partial=None, part=None, add_if=None):
            """Cast the tile and store it ``store_n`` columns at a time: stmatrix into the warpgroup's
            swizzled buffer, one thread's TMA store (rows and columns past C are clipped).
            ``partial``: stream-K's fp32 sum of the tile's other k-blocks (global, 64 × bn), added
            where ``add_if`` holds, chunk by chunk before each chunk is cast: loaded into the partial
            accumulator ``part`` (free once the main loop is done; a chunk's shape), then added into
            acc — a whole 64×256 partial read at once beside acc and out spilled."""
            add = None
            if partial is None:
                Ax.cast(out, acc)
            else:
                def add(c, buf):
                    cols = slice(c * store_n, (c + 1) * store_n)
                    with guard(add_if):
                        Ax.copy(part, partial[:, cols])
                        Ax.elementwise(acc[:, cols], lambda a, q: a + q, acc[:, cols], part)
                    Ax.cast(out[:, cols], acc[:, cols])
            row = m_blk * BM + wg * HALF
            cw = Ax.view(cbuf, swizzled(HALF, store_n), (HALF, store_n), base=wg * (HALF * PART))

            def tma_store(c, buf):
                n0 = n_blk * bn + c * store_n
                Ax.copy(C[row:row + HALF, n0:n0 + store_n], buf, fence=False, wait=False)
            Ax.cuda.staged_store(out, store_n, lambda c: cw, tma_store, 1 + wg, leader, before=add)

        def load(pool, pipe, A, B, SA, sa, i, s, m_blk, n_blk, kb):
            """Producer: iteration i loads k-block kb of tile (m_blk, n_blk) — A, B and A's row
            scales — into its slot s."""
            pipe.acquire(i)
            Ax.copy(Ax.view(pool, fp8_tile(BM), (BM, BK), base=a_at + s * (BM * BK)),
                    A[m_blk * BM:(m_blk + 1) * BM, kb * BK:(kb + 1) * BK], barrier=pipe.full, stage=s)
            load_b(pool, pipe, B, s, n_blk, kb)
            Ax.copy(sa[s:s + 1, :], SA[kb:kb + 1, m_blk * BM:(m_blk + 1) * BM], barrier=pipe.full, stage=s)

        def declare_workspace(W_, F_):
            """Stream-K: the scratch partials ``cta["W"]`` (fp32, a 64-row block per CTA and
            warpgroup) and their flags ``cta["F"]``; without stream-K nothing (the parameters then
            leave the signature)."""
            if stream_k:
                cta["W"], cta["F"] = Ax.param(W_, scratch=True), Ax.param(F_, scratch=True)

        def sk_bounds(cid):
            """This CTA's stream-K range of k-blocks, as TIR."""
            return sk.bound(cid, T.if_then_else), sk.bound(cid + 1, T.if_then_else)

        def sk_finish(cbuf, C, acc, part, out, cid, wg, leader, m_blk, n_blk, k0, k1):
            """After stream-K piece [k0, k1) of a tile: a tail (the CTA's first piece, k0 > 0) goes to
            workspace block ``cid·2 + wg``, published by a flag; a head (the CTA's last piece,
            k1 < k_iters) waits for CTA ``cid + 1``'s flag and adds that block; a head or a whole
            tile is then stored (one store site for both: each site's hoisted epilogue addresses
            cost consumer registers)."""
            W, F = cta["W"], cta["F"]
            with IRB.If(k0 > 0):
                with IRB.Then():
                    sk_publish(W, F, cid * 2 + wg, acc, leader, wg)
                with IRB.Else():
                    partial = sk_take(W, F, (cid + 1) * 2 + wg, leader, wg, pred=k1 < k_iters)
                    store(cbuf, C, acc, out, wg, leader, m_blk, n_blk, partial, part, k1 < k_iters)

        @T.prim_func
        def gemm_fp8_kernel(A_: T.Buffer((M, K), FP8), B_: T.Buffer((N, K), FP8), SA_: T.Buffer(sa_shape, "float32"),
                            SB_: T.Buffer(sb_shape, "float32"), C_: T.Buffer((M, N), "bfloat16"),
                            A_map: T.handle("tensormap"), B_map: T.handle("tensormap"),
                            SA_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
                            W_: T.Buffer((ws_rows, bn), "float32"), F_: T.Buffer((2 * sms,), "int32")):
            Ax.cuda.min_blocks_per_sm(1)
            cid, tx = launch()
            A = Ax.param(A_, tensormap=A_map)
            B = Ax.param(B_, tensormap=B_map)
            SA = Ax.param(SA_, tensormap=SA_map)
            SB = Ax.param(SB_)
            C = Ax.param(C_, tensormap=C_map)
            declare_workspace(W_, F_)
            pool = Ax.cuda.dynamic_shared(stages * (BM + bn) * BK, FP8)
            sa = Ax.shared((stages, BM), "float32", name="sa")          # the A tile's row scales, per slot
            alloc_sbg()
            cbuf = Ax.shared((2 * HALF, PART), "bfloat16", swizzled(2 * HALF, PART), name="cbuf")
            # full: the A, B and SA copies; empty: both consumers of every CTA of the cluster
            pipe = Ax.cuda.pipeline(stages, producers=3, consumers=2, cluster=cluster)
            with Ax.cuda.role(0, 1, regs=PRODUCER_REGS):
                with Ax.warps(0, 1):
                    for it in T.serial(sk.dp_waves if stream_k else sched.count(cid)):
                        m_blk, n_blk = sched.coords(sched.tile(cid, it), cta.get("rank", 0))
                        for kb in T.serial(k_iters):
                            i = it * k_iters + kb
                            s = pipe.slot(i)
                            load(pool, pipe, A, B, SA, sa, i, s, m_blk, n_blk, kb)
                    if stream_k:    # this CTA's stream-K k-blocks u, continuing the iteration count
                        b0, b1 = sk_bounds(cid)
                        for u in T.serial(b0, b1):
                            m_blk, n_blk = sched.coords(sk.dp_tiles + u // k_iters)
                            i = sk.dp_waves * k_iters + u - b0
                            s = pipe.slot(i)
                            load(pool, pipe, A, B, SA, sa, i, s, m_blk, n_blk, u % k_iters)
            with Ax.cuda.role(1, 3, regs=CONSUMER_REGS, each=True):
                wg = Ax.cuda.warpgroup_index()
                leader = tx % 128 == 0
                acc = Ax.registers((HALF, bn), "float32", acc_layout, name="acc")
                part = Ax.registers((HALF, part_n), "float32", part_layout, name="part")
                out = Ax.registers((HALF, bn), "bfloat16", acc_layout, name="out")

                for j in T.serial(sk.dp_waves if stream_k else sched.count(cid)):
                    m_blk, n_blk = sched.coords(sched.tile(cid, j), cta.get("rank", 0))
                    k_block(pool, sa, SB, pipe, acc, part, wg, leader, j * k_iters, 0, n_blk, True)
                    for kb in T.serial(1, k_iters):
                        k_block(pool, sa, SB, pipe, acc, part, wg, leader, j * k_iters + kb, kb, n_blk, False)
                    if odd_pair:
                        with guard(m_blk < m_tiles):
                            store(cbuf, C, acc, out, wg, leader, m_blk, n_blk)
                    else:
                        store(cbuf, C, acc, out, wg, leader, m_blk, n_blk)
                if stream_k:    # this CTA's stream-K pieces: at most three, at most one head and one tail
                    b0, b1 = sk_bounds(cid)
                    t0, t1 = sk.tiles(b0, b1)
                    for t in T.serial(t0, t1):
                        k0, k1 = sk.piece(t, b0, b1, T.max, T.min)
                        m_blk, n_blk = sched.coords(sk.dp_tiles + t)
                        base = sk.dp_waves * k_iters + t * k_iters - b0    # the iteration of k-block 0
                        k_block(pool, sa, SB, pipe, acc, part, wg, leader, base + k0, k0, n_blk, True)
                        for kb in T.serial(k0 + 1, k1):
                            k_block(pool, sa, SB, pipe, acc, part, wg, leader, base + kb, kb, n_blk, False)
                        sk_finish(cbuf, C, acc, part, out, cid, wg, leader, m_blk, n_blk, k0, k1)
                Ax.cuda.tma_store_wait(0, pred=leader)
            if cluster > 1:
                Ax.cuda.cluster_sync()      # no CTA leaves while its peer may still arrive on its barriers
        # without stream-K the workspace and flags leave the call signature
        return gemm_fp8_kernel if stream_k else Ax.without_params(gemm_fp8_kernel, ("W_", "F_"))

    return Ax.Kernel(name or f"gemm_fp8_{M}x{N}x{K}", factory, reference=reference, outputs=("C",),
                     meta={"M": M, "N": N, "K": K, "bn": bn, "stages": stages, "grid": (sms,), "threads": THREADS,
                           "cluster": cluster, "stream_k": stream_k})


def _d_fragment(n):
    from axe.backends.cuda.schedules.wgmma import d_fragment
    return d_fragment(n, "tx")


def _wait_for(part):
    """The partial accumulator is complete: wait for the wgmma group and pin its registers after
    the wait (the compiler cannot see wgmma's asynchronous writes)."""
    Ax.cuda.wgmma_wait(0)
    Ax.cuda.fence_registers(part)


def build(M, N, K, bn=128, name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact (CUDA source, PTX, cubin, launch.json)."""
    return Ax.compile_kernel(make(M, N, K, bn, name=name, **kw), target)


#: the example ``axe build kernels/gemm_fp8.py`` builds: DeepSeek-V3's attention output projection
#: shape at M = 4096 (N=7168, K=2048)
gemm_fp8_example = make(4096, 7168, 2048, name="gemm_fp8_4096x7168x2048")
