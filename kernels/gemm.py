"""GEMM in axe for Hopper (sm_90a, wgmma), Blackwell (sm_100a, tcgen05) and Trainium (trn1,
TensorE; both below): ``C = A·B``, fp16 or bf16, fp32 accumulation, A row-major (M×K), B row-major
(K×N) or column-major (stored N×K).  One kernel object (:func:`make`) builds for all three; what
differs per target is the :data:`TARGETS` entry the build's target picks.

One persistent CTA per SM (``TileSchedule``: grouped rasterization, bands of 16 block-rows)
computes 128×256 tiles of C with three warpgroups:

- warpgroup 0, the producer (``setmaxnreg`` down to 40): one thread issues TMA loads of the
  A tile (128×64) and the B tile (64×256 or 256×64) into 128-byte-swizzled shared slots of a
  ``STAGES``-deep (4) ``Ax.cuda.pipeline`` (full barriers count bytes, empty
  barriers count the two consumers' releases);
- warpgroups 1 and 2, the consumers (``setmaxnreg`` up to 232): each owns 64 rows of the tile
  and runs ``Ax.gemm`` per slot.  The wgmma schedule is chosen from the layouts: B's shared
  layout (MN- or K-major) sets the instruction's transpose bit, so both B variants are this
  one kernel.  By default no wgmma group is left in flight (``in_flight=0``): a consumer waits
  for its k-block's group and releases the slot at once, so it holds one slot and the producer
  runs three ahead; the tensor cores stay busy with the other consumer's group meanwhile.  A
  tile's last k-block waits in straight-line code, so the accumulator is complete before the
  epilogue reads it.  The epilogue casts the accumulator and stores each warpgroup's 64×256 tile
  as two 64×128 chunks (``stmatrix`` into one swizzled 16 KiB buffer per warpgroup, then one
  thread's TMA store; the second chunk waits until the first store has read the buffer), which
  leaves room for the 4th stage (224 KiB in all).

Why 4 stages and no group in flight (H200, ncu, Llama-3.1-8B down 8192×4096×14336): with 3
stages and one group in flight a consumer holds two slots, the producer runs one ahead, and the
consumers slept on full barriers in a third of the stall samples: 2.12 M cycles against cuBLAS's
1.88 M.  With 4 stages and none in flight: 1.92 M against cuBLAS's 1.89 M in one ncu run.

``cluster=2`` runs the CTAs in clusters of two that compute vertically neighbouring tiles
(block-rows 2p and 2p+1 of one block-column, the tile schedule walking those pairs): they need
the same B tile, so each CTA loads half of it (128 of its 256 columns) with a TMA multicast to
both CTAs, halving B's L2→SM traffic (48 → 32 KiB per k-block per CTA).  A slot is then filled by
both producers, so it is free only when all four consumers of the pair released it: the pipeline
counts the peer's releases too (remote ``mbarrier.arrive`` through ``mapa``), and cluster barriers
publish the mbarriers at the start and keep both CTAs alive to the end.  Every wait on the pair's
mbarriers is bounded (a peer that never arrives ends the launch with a report naming the CTA, the
barrier and its phase: ``Ax.cuda.pipeline(remote=True)``, call-free).  With an odd number of
block-rows the last pair's second CTA computes a block-row of zeros past M and stores nothing.
Measured on H200 it is 1–4% slower than unclustered, so it is not the default.

``stream_k=True`` splits the last whole wave of tiles and the partial one evenly over the CTAs
in k-iterations (:func:`stream_k_bound`), so no CTA idles in a partial last wave: a tile is then
computed in at most two pieces, the CTA with its last k-blocks writes the fp32 partial sum to a
scratch workspace and sets a flag (``Ax.cuda.flag_set``), the CTA with its first k-blocks waits for the
flag (``Ax.cuda.flag_take``), adds the partial sum and stores the tile.  It is correct but not the
default: on H200 it gains 3–4% where K is short (8192×12288×4096) and loses up to 17% where K
is long (8192×3584×14336), because CTAs at different k-offsets of different tiles no longer share
A and B slabs in L2, and the stream-K phase waits on DRAM.

``epilogue=64`` stores each warpgroup's tile as four 64×64 chunks through two 8 KiB buffers;
``stages=3, in_flight=1, epilogue=256`` is the first version (one 64×256 store, 3 stages).

``schedule="pingpong"`` gives each consumer warpgroup its own 64×256 tiles (the CTA's tiles
alternate between the two) so that one's epilogue runs under the other's main loop: their main
loops take turns through two named barriers (wait for the turn with ``bar.sync``, pass it with
``bar.arrive`` once all but the last k-block are issued, which also keeps a consumer from waiting
on a slot two fills ahead), one ring of 4 stages of 40 KiB feeds them in turn and one consumer
releases each slot.  It is correct but measured slower on H200 (0.91 of cuBLAS against 0.98):
64-row tiles fetch 40 KiB from L2 per 2·64·256·64 flops, 1.67× the cooperative tile's traffic.

**Blackwell (sm_100a)** is the same kernel body with another :class:`Generation` (:data:`GENERATIONS`,
picked from the build target inside the factory): the accumulator lives in tensor memory (one
128×256 fp32 TMEM tile, 256 columns), so the MMAs need no consumer registers and are issued by one
elected thread of the producer warpgroup's warp 1: per k-block it waits for the slot, runs
``Ax.gemm`` (the layouts pick ``tcgen05.mma.cta_group::1`` M=128 N=256) and commits to the slot's
*empty* barrier (the tensor core's completion frees it, one arrival); after a tile's last k-block it
commits to the accumulator's *full* barrier (a one-slot ``Ax.cuda.pipeline``).
Warpgroups 1 and 2 are the epilogue: warp w of a warpgroup reaches only TMEM lanes 32·(w % 4), so
each warpgroup reads all 128 rows of its own 128 columns (``Ax.copy`` TMEM → registers, which the
register layout turns into ``tcgen05.ld.16x256b``: the fragment ``stmatrix`` stores), frees the
accumulator for the next tile's MMAs (all 256 threads arrive on its *empty* barrier) and stores
through the same chunked ``stmatrix`` + TMA-store path as on sm_90a (64-column chunks: 4 stages and
2 × 16 KiB of chunk buffer fit in 224 KiB).  What differs is confined to :data:`GENERATIONS` and
the two small per-generation steps (``mma`` vs ``mma_tcgen05``; the consumers' ``tile_loop`` vs
``drain``).  ``cluster=2`` on sm_100a makes CTA pairs (vertically neighbouring tiles, as on
sm_90a) run ``tcgen05.mma.cta_group::2``: each CTA loads its 128 rows of A and its half (128
columns) of B at the same shared offsets — no multicast, the pair MMA reads both CTAs' shared
memory — the odd CTA's warp 1 relays each landed slot to the even CTA (``Ax.cuda.arrive_remote`` on a
*relay* barrier), and the even CTA's thread issues M=256 N=256 instructions on the
``Ax.cuda.cta_pair`` views, committing by multicast to both CTAs' *empty* and accumulator barriers;
each CTA's epilogue reads its own 128 TMEM lanes, and all 512 epilogue threads free the even
CTA's accumulator.  The cooperative schedule is built for sm_100a; ping-pong, stream-K and the
reduce-scatter epilogue are sm_90a-only for now and refused there by name.

Shapes need not be multiples of the tile: TMA fills out-of-bounds loads with zeros (which add
nothing to the products) and clips the stores at the matrix edge.

**A runtime M** (:func:`make_dynamic`; ``axe::gemm`` in ``axe/torch/ops.py`` runs it): one artifact
for every number of rows, N, K, dtype and B's layout being the specialization.  M is a TIR variable
that A and C bind at launch (launch.json: shapes ``["M", K]``, ``["M", N]``, symbol ``M``); the tile
counts are ceil-divisions of it in the kernel, the persistent grid is ``min(sms, tiles)`` (an
expression the runtime evaluates; the schedule still strides by ``sms``, so a smaller grid only
leaves out CTAs that would have had no tile) and A's and C's tensor maps are encoded from the
tensors (their specs carry no shape).  Ragged M is the path above, down to M = 1.  The kernel body is
the static one: ``make(M=None, ...)``; stream-K, clusters and the reduce-scatter are refused.

**Trainium (trn1)** takes the :class:`NeuronCore` entry of :data:`TARGETS`: block sizes (512×1024
blocks of C, 128-deep k-steps) and the layouts of the on-chip tiles — A's tile with K on the
partitions (a transposing DMA), B's k-step with K on the partitions (as stored, or through a
transposing DMA when B is stored N×K), C's accumulator as 4 blocks of 128 PSUM partitions, each two
banks wide — from which ``Ax.gemm`` derives the TensorE instructions (8 ``nc_matmul`` K=128 M=128
N=512 per k-step).  The body is :func:`make`'s ``neuron_core``: a loop over C's blocks, each
accumulated in PSUM over the k-steps (``Ax.copy`` into fresh SBUF tiles, masked at ragged edges;
``Ax.gemm``), then cast and stored, through the same region helpers (:func:`block`,
:func:`b_block`) as the GPU forms.  Its NKI source is the former ``kernels/nki_gemm.py``'s, line for
line.  Any size builds there; sizes only the GPU form refuses (N or K not a multiple of 8, a problem
smaller than one GPU tile) are refused by the GPU builds, and the GPU-only options (stream-K,
clusters, ping-pong, reduce-scatter, a runtime M) by the trn1 build, each as a ``TargetError``.

Why the GPU body and the trn1 loop stay two bodies (the brief's "where one source would cost a
kernel its measured speed, keep the split minimal"): the GPU kernel's speed is its warp
specialization — a producer warpgroup running TMA ``STAGES`` k-blocks ahead of two consumer
warpgroups through mbarriers, registers moved between them with ``setmaxnreg`` — and every part of
that was measured: 0.998–1.001 of cuBLAS (median, H200, ``benchmarks/results/gemm-2026-11-23-h200.json``),
while the nearest measured stand-in for a loop without warp roles — Triton's autotuned,
software-pipelined matmul in the same runs — reached 0.77 (axe has not timed a loop of its own); 3
stages and one group in flight instead of 4 and none cost 10% of the cycles (2.12 M against 1.92 M,
above); the ping-pong variant 0.91.  The tile loop a NeuronCore runs has none of those parts: one instruction stream per
engine, with NKI's compiler overlapping a loop's DMA and TensorE work by itself (tiles allocated in
an ``affine_range`` body rotate through buffers it assigns), so there is no producer/consumer ring
to write.  Folding the GPU body into that loop would drop the overlap that makes it fast; folding
the loop into the GPU body would make trn1 run warp roles it has no hardware for.  What is shared
is what both are: the problem and its checks, the regions of A, B and C a step reads and writes,
the operators (copy, gemm, cast) and the per-target configuration table.  Both GPU builds emit
byte-identical CUDA to the pre-merge source.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import F, Iter, Layout, P, S, Swizzle, SwizzledLayout
from axe.schedules.emit import guard

BM, BN, BK, STAGES, SMS, GROUP = 128, 256, 64, 4, 132, 16
IN_FLIGHT, EPILOGUE = 0, 128   # cooperative defaults: wgmma groups left in flight, columns per store chunk
THREADS, PRODUCER_REGS, CONSUMER_REGS = 384, 40, 232
FWD_ROWS = 8            # rows a reduce-scatter forwarding warp copies per loop iteration
HALF = BM // 2          # rows per consumer warpgroup
ORDER = 3               # ping-pong: named barriers ORDER + w, "warpgroup w's turn" (1, 2: the epilogues')


class Generation:
    """What one GPU generation changes in the kernel (the body is shared): the MMA, where the
    accumulator lives, each consumer warpgroup's ``part`` (rows, columns) of the BM×BN tile and how
    the two split it, the default epilogue chunk, and how many arrivals free a pipeline slot."""

    def __init__(self, mma, accumulator, part, split, epilogue, releases):
        self.mma, self.accumulator, self.part, self.split = mma, accumulator, part, split
        self.epilogue, self.releases = epilogue, releases

    def acc_layout(self):
        """The consumer warpgroup's register layout of its ``part``: wgmma's D fragment (sm_90a);
        on sm_100a the tcgen05.ld 16x256b fragment (whose 8x8 blocks are stmatrix's) over 128 rows."""
        if self.mma == "wgmma":
            from axe.backends.cuda.schedules.wgmma import d_fragment
            return d_fragment(self.part[1], "tx")
        from axe.backends.cuda.schedules.tcgen05 import ld_fragment
        return ld_fragment("16x256b", self.part[1] // 8, self.part[0])


class NeuronCore:
    """trn1: the GEMM on one NeuronCore — a loop over ``bm``×``bn`` blocks of C, each accumulated
    in PSUM over ``bk``-deep k-steps on TensorE — as block sizes and the layouts of the on-chip tiles,
    which carry the whole TensorE mapping (the Axe paper §3.4): ``Ax.gemm`` intersects their iters
    and issues ``bm/128 × bn/512`` ``nc_matmul`` (K=128, M=128, N=512) per k-step."""

    mma, accumulator, bm, bk = "tensore", "psum", 512, 128

    def bn(self, N):
        """C's block width: 1024 (two PSUM banks per 128-row block, all 8 banks) when N > 512, so
        A's tile is loaded half as often; else 512."""
        return 1024 if N > 512 else 512

    def a_tile(self):
        """A[m, k] with k on the partitions and m on the free axis (the DMA transposes it)."""
        return S[(self.bm, self.bk):(1 @ F, 1 @ P)]

    def b_tile(self, bn, b_major):
        """B's k-step with k on the partitions: B[k, n] as stored (``row``), or B stored [n, k]
        (``col``) through a transposing DMA, so that both feed the same matmul."""
        if b_major == "row":
            return S[(self.bk, bn):(1 @ P, 1 @ F)]
        return S[(bn, self.bk):(1 @ F, 1 @ P)]

    def c_tile(self, bn):
        """C[m, n] in PSUM (and its cast in SBUF): ``bm/128`` blocks of 128 rows on the partitions,
        each ``bn`` fp32 wide (``bn/512`` PSUM banks)."""
        return S[(self.bm // 128, 128, bn):(bn @ F, 1 @ P, 1 @ F)]


#: what each target changes, in one place: sm_90a — each consumer warpgroup runs wgmma on 64 rows ×
#: 256 columns in its registers and frees a slot itself (2 releases); sm_100a — one thread runs
#: tcgen05.mma into a TMEM accumulator, whose commit frees the slot (1 release), and each epilogue
#: warpgroup reads 128 rows × 128 columns (TMEM lanes are per warp, so the warpgroups split columns,
#: not rows); trn1 — one NeuronCore's loop over 512×1024 blocks of C accumulated in PSUM
TARGETS = {
    "wgmma": Generation("wgmma", "registers", (HALF, BN), "rows", EPILOGUE, 2),
    "tcgen05": Generation("tcgen05", "tmem", (BM, BN // 2), "columns", 64, 1),
    "trn1": NeuronCore(),
}


def generation(target):
    """The :data:`TARGETS` key of a build target: ``trn1`` for Trainium, ``tcgen05`` on
    sm_100a-family, else ``wgmma``."""
    from axe.schedules.context import target_arch, target_family
    if target_family(target) == "neuron":
        return "trn1"
    return "tcgen05" if 100 <= target_arch(target) < 120 and target.endswith("a") else "wgmma"


def block(X, i, j, rows, cols):
    """Block (i, j) of ``rows``×``cols`` of the matrix ``X``."""
    return X[i * rows:(i + 1) * rows, j * cols:(j + 1) * cols]


def b_block(B, b_major, n0, k0, cols, depth):
    """B's ``depth`` k-rows from ``k0`` by ``cols`` columns from ``n0``, as B is stored (K×N for
    ``"row"``, N×K for ``"col"``)."""
    return B[k0:k0 + depth, n0:n0 + cols] if b_major == "row" else B[n0:n0 + cols, k0:k0 + depth]


def swizzled(rows, cols, lead=(), panel=None):
    """A (rows, cols) tile as column blocks of 64 elements (128 bytes of 16-bit data), each
    row-major under TMA's 128-byte swizzle: a tiling of both the TMA box and the wgmma atom.
    ``lead``: extent-1 dims in front (the tile seen as a box of a higher-rank tensor).
    ``panel``: elements from one column block to the next (default ``rows * 64``: the blocks
    back to back); a larger one describes these rows as a row range of a taller tile."""
    if cols <= 64:
        return SwizzledLayout(S[tuple(lead) + (rows, cols)], Swizzle(3, 3, 3))
    ones = (1,) * len(lead)
    return SwizzledLayout(S[ones + (rows, cols // 64, 64):ones + (64, panel or rows * 64, 1)], Swizzle(3, 3, 3))


def reference(A, B, b_major="row"):
    """fp32 ``A·B`` (B as stored: K×N for ``"row"``, N×K for ``"col"``)."""
    return {"C": A.float() @ (B if b_major == "row" else B.t()).float()}


def sk_publish(W, F, slot, acc, leader, wg):
    """Stream-K, the CTA with a tile's last k-iterations: its warpgroup ``wg`` writes its partial
    accumulator to workspace row block ``slot`` (HALF rows of fp32) and publishes it with flag
    ``slot`` (the warpgroup's 128 threads meet at named barrier ``1 + wg``)."""
    Ax.copy(W[slot * HALF:(slot + 1) * HALF, :], acc)
    Ax.cuda.flag_set(F, slot, leader, 1 + wg, 128)


def sk_take(W, F, slot, leader, wg, pred=None):
    """Stream-K, the CTA with a tile's first k-iterations: wait (bounded) for flag ``slot`` where
    ``pred`` holds (default always) and return the workspace block to add to the accumulator."""
    if pred is None:
        Ax.cuda.flag_take(F, slot, leader, 1 + wg, 128)
    else:
        with guard(pred):
            Ax.cuda.flag_take(F, slot, leader, 1 + wg, 128)
    return W[slot * HALF:(slot + 1) * HALF, :]


def stream_k_bound(p, units, ctas, k_iters, select=lambda c, a, b: a if c else b):
    """The first stream-K k-iteration of CTA ``p``: ``units`` k-iterations (whole tiles of
    ``k_iters``) split evenly over ``ctas`` CTAs, each boundary moved off a tile's second and last
    k-iteration so that every piece of a tile holds at least two (``select``: ``T.if_then_else`` for
    TIR values).  With ``units >= ctas * k_iters`` and ``k_iters >= 4`` each tile falls into at most
    two CTAs' ranges: a CTA's range is at least ``k_iters - 2`` long and starts and ends at least
    two k-iterations into a tile, so no range lies inside one tile."""
    b = p * units // ctas
    r = b % k_iters
    return b - select(r == 1, 1, 0) + select(r == k_iters - 1, 1, 0)


class StreamK:
    """The stream-K split of ``tiles`` tiles of ``k_iters`` k-blocks over ``ctas`` persistent CTAs
    (this module's design): the first ``dp_waves`` whole waves go tile by tile (CTA p takes
    tiles p, p + ctas, ...); the remaining ``units`` k-blocks (the tiles from ``dp_tiles`` on, in
    linear order) are split into one contiguous range per CTA, ``[bound(p), bound(p + 1))``.
    With ``tiles >= ctas`` and ``k_iters >= 4`` every tile falls into at most two CTAs' ranges and
    every piece holds at least two k-blocks (:func:`stream_k_bound`).  The methods take Python
    ints (the CPU model) or TIR expressions (the kernel, with ``T.if_then_else``, ``T.max`` and
    ``T.min``), so both walk the same split.  ``tiles`` may be known only at run time (a TIR
    expression, ``select`` = ``T.if_then_else``): with fewer tiles than CTAs there is no split,
    each CTA runs its one tile or none (:meth:`dp_count`)."""

    def __init__(self, tiles, k_iters, ctas, select=None, bind=lambda v: v):
        if k_iters < 4 or (select is None and tiles < ctas):
            raise ValueError(f"stream_k needs at least 4 k-blocks and at least one tile per CTA ({ctas}), got "
                             f"{k_iters} k-blocks and {tiles} tiles")
        self.k_iters, self.ctas = k_iters, ctas
        self.select = select
        if select is None:      # a tile count known at build time
            self.tiles_ = tiles
            self.dp_waves = tiles // ctas - 1               # whole waves of tiles before the split
            self.units = (tiles - self.dp_waves * ctas) * k_iters   # the last whole wave and the partial one
        else:                   # read at run time: below one tile per CTA no split (every range empty)
            # ``bind`` (axe.schedules.emit.computed_once in a kernel) computes each run-time value
            # once: substituted into every use, the nested selects grew the CUDA 11-fold and its
            # loops recomputed them (the grouped GEMM's stream-K ran 1.4-2.7x slower)
            self.tiles_ = tiles = bind(tiles)
            on = tiles >= ctas
            self.dp_waves = bind(select(on, tiles // ctas - 1, 0))
            self.units = bind(select(on, (tiles - self.dp_waves * ctas) * k_iters, 0))
        self.dp_tiles = bind(self.dp_waves * ctas)

    def dp_count(self, p):
        """How many whole tiles CTA ``p`` runs before its stream-K range: ``dp_waves``, or with a
        run-time tile count below one per CTA, its one tile if it has one (tile ``p``)."""
        if self.select is None:
            return self.dp_waves
        return self.select(self.tiles_ >= self.ctas, self.dp_waves, self.select(p < self.tiles_, 1, 0))

    def bound(self, p, select=lambda c, a, b: a if c else b):
        """The first stream-K k-block (counted from tile ``dp_tiles``'s first) of CTA ``p``."""
        return stream_k_bound(p, self.units, self.ctas, self.k_iters, select)

    def tiles(self, b0, b1):
        """``(first, stop)``: the stream-K tiles (counted from ``dp_tiles``) that the range
        ``[b0, b1)`` of k-blocks touches."""
        return b0 // self.k_iters, (b1 - 1) // self.k_iters + 1

    def piece(self, t, b0, b1, lo=max, hi=min):
        """``(k0, k1)``: the k-blocks of stream-K tile ``t`` inside ``[b0, b1)``, ``lo`` and ``hi``
        the maximum and minimum.  ``k1 < k_iters``: the tile's head, whose CTA waits for the rest;
        ``k0 > 0``: its tail, whose CTA hands its partial over; both: the tile is whole."""
        at = t * self.k_iters
        return lo(b0, at) - at, hi(b1, at + self.k_iters) - at

    def pieces(self, p):
        """CTA ``p``'s stream-K pieces ``[(linear tile, k0, k1)]`` in the order the kernel runs
        them (the CPU model of its loops)."""
        b0, b1 = self.bound(p), self.bound(p + 1)
        return [(self.dp_tiles + t, *self.piece(t, b0, b1)) for t in range(*self.tiles(b0, b1))]


#: the rows of the static view a runtime-M operand (A, C) is declared through (:func:`make_dynamic`).
#: A and C are reached only by TMA, whose coordinates are the slices' starts and whose bounds come
#: from the tensor map encoded off the real tensor, so the view need hold just one tile's rows (its
#: element base wraps at them and is never read); a larger count costs parse time, since slicing
#: checks every block of the sliced dimension (2**31 rows: minutes)
DYN_ROWS = BM


def unbake_rows(specs, params=("A_map", "C_map")):
    """Let the TMA maps ``params`` among ``specs`` (the build's tensor-map specs, edited in place)
    take their extents from the tensor at launch (``shape: None``) instead of the placeholder
    view's static ones; strides stay (N and K are static).  Returns the specs edited."""
    done = [s for s in specs if s["param"] in params]
    if len(done) != len(params):
        raise ValueError(f"gemm: tensor maps {sorted(params)} expected among the build's, found "
                         f"{sorted(s['param'] for s in specs)}")
    for s in done:
        s["shape"] = None
    return done


def make(M, N, K, dtype="float16", b_major="row", name=None, stages=None, sms=SMS, in_flight=None, group=GROUP,
         cluster=1, epilogue=None, schedule="cooperative", epilogue_bufs=None, stream_k=False, world=1,
         rs_comm=True, rs_push="forward"):
    """The GEMM kernel (an :class:`axe.lang.Kernel`) for static sizes (``M=None``: a runtime M,
    see :func:`make_dynamic`); ``b_major``: ``"row"``
    (B is K×N) or ``"col"`` (B is stored N×K, ``C = A·Bᵀ``); ``cluster``: 1, or 2 for CTA pairs
    sharing B through TMA multicast; ``epilogue``: columns per store chunk (``BN``: one 64×256
    tile per warpgroup; 128, the default: two 64×128 chunks through one 16 KiB buffer; 64: four 64×64
    chunks through two 8 KiB buffers); ``epilogue_bufs``: buffers per warpgroup for the chunks;
    ``stream_k``: split the last waves' tiles in k over all CTAs (see the module docstring);
    ``schedule``: ``"cooperative"`` (both consumers
    on one 128×256 tile) or ``"pingpong"`` (each consumer on its own 64×256 tiles, taking turns
    in the main loop; 4 stages by default); ``world > 1``: the fused GEMM + reduce-scatter of
    ``kernels/gemm_rs.py`` (A, B sharded over K on ``world`` GPUs, C's rows scattered);
    ``rs_comm=False`` (a measurement aid, wrong results): the same kernel with the peer tiles
    stored into this rank's own staging and no signals, waits or partial sums; ``"nowait"``: the
    peer tiles pushed and signalled, the own tiles stored without waiting or adding.  ``rs_push``:
    how a peer tile reaches its owner — ``"forward"`` (the default: the consumers bulk-copy it
    into a local stash and go on; one warp of the producer warpgroup per consumer copies it over
    NVLink and signals) or ``"bulk"`` (the consumers' bulk copies write it into the owner's memory;
    1–8% slower on 6 of the 8 benchmark shapes, see the README)."""
    rs = world > 1
    dyn = M is None         # make_dynamic: the rows are a runtime variable
    if dyn and (rs or stream_k or cluster > 1):
        raise ValueError("gemm: a runtime M (make_dynamic) is built for one GPU without stream_k or clusters (got "
                         + ", ".join(n for n, v in (("world>1", rs), ("stream_k", stream_k), ("cluster>1", cluster > 1))
                                     if v) + ")")
    if b_major not in ("row", "col"):
        raise ValueError(f"gemm: b_major must be 'row' or 'col', got {b_major!r}")
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"gemm: dtype must be float16 or bfloat16, got {dtype!r}")
    if min(1 if dyn else M, N, K) < 1:
        raise ValueError(f"gemm: empty problem {M}x{N}x{K}")
    # what only the GPU form needs of the sizes (trn1 masks ragged edges at any size): refused when a
    # GPU build is asked for
    gpu_sizes = (f"N={N} and K={K} must be multiples of 8 (TMA needs 16-byte row pitches)" if N % 8 or K % 8 else
                 f"{M}x{N}x{K} is smaller than one {BM}x{BN}x{BK} tile"
                 if (not dyn and M < BM and not rs) or N < BN or K < BK else None)
    if cluster not in (1, 2) or sms % cluster:
        raise ValueError(f"gemm: cluster must be 1 or 2 and divide sms={sms}, got {cluster!r}")
    if schedule not in ("cooperative", "pingpong") or (schedule == "pingpong" and cluster > 1):
        raise ValueError(f"gemm: schedule must be 'cooperative' or 'pingpong' (without clusters), got {schedule!r}")
    pp = schedule == "pingpong"
    if rs:
        if M % world or K % world:
            raise ValueError(f"gemm_rs: M={M} and K={K} must be multiples of world={world} (unequal shards are "
                             "not supported)")
        if cluster != 1 or pp or stream_k:
            raise ValueError("gemm_rs: the reduce-scatter epilogue needs the cooperative schedule without clusters "
                             "or stream-K")
        M, K = M // world, K // world        # each rank: its K slice of every owner's M/world rows
        if (K % 8) or K < BK:
            raise ValueError(f"gemm_rs: the local K={K} must be a multiple of 8 and at least {BK}")
    bm = HALF if pp else BM                  # rows of one scheduled tile (ping-pong: one warpgroup's)
    stages = stages or STAGES
    in_flight = (1 if pp else IN_FLIGHT) if in_flight is None else in_flight
    epi_arg = epilogue
    epilogue = epilogue or (BN if pp else EPILOGUE)
    wrows, wcols = TARGETS["wgmma"].part   # a consumer warpgroup's part of the tile (the factory
    split_cols = False                         # sets sm_100a's: 128 rows x 128 columns)
    b_shape, b_tile = ((K, N), (BK, BN)) if b_major == "row" else ((N, K), (BN, BK))
    b_half = (BK, BN // 2) if b_major == "row" else (BN // 2, BK)      # one CTA's multicast share
    if dyn:                 # a TIR variable: A (M, K) and C (M, N) bind it at launch
        import tvm
        M = tvm.tirx.Var("M", "int32")
    m_tiles = (M + bm - 1) // bm            # ceil-div written so that it stays readable as TIR
    # the schedule's block-rows: one per cluster; reduce-scatter: world segments of m_tiles, one
    # per owner of the output rows, this rank's own last (the peers' partial tiles arrive meanwhile)
    pairs = (m_tiles + cluster - 1) // cluster * world
    sched = Ax.TileSchedule(pairs, -(-N // BN), sms // cluster, max(group * (BM // bm) // cluster, 1), cluster)
    k_iters = -(-K // BK)
    a_at, b_at = 0, stages * bm * BK                       # element offsets in the shared pool
    c_at = b_at + stages * BK * BN

    def chunking(epilogue, cols):
        """``(chunks, bufs)`` of a warpgroup's ``cols`` columns stored ``epilogue`` at a time."""
        if cols % epilogue or epilogue % 64:
            raise ValueError(f"gemm: epilogue chunk {epilogue} must be a multiple of 64 dividing {cols}")
        chunks = cols // epilogue
        # chunk buffers per warpgroup: two (write one while the other stores) for 64-column chunks, else
        # one (wait until the previous chunk's store has read it): 128-column chunks fit 4 stages that way
        bufs = epilogue_bufs or (2 if chunks > 2 else 1)
        if bufs not in (1, 2) or bufs > chunks:
            raise ValueError(f"gemm: epilogue_bufs must be 1 or 2 and at most the {chunks} chunks, got {epilogue_bufs!r}")
        return chunks, bufs
    chunks, bufs = chunking(epilogue, wcols)
    sm90 = epilogue, chunks, bufs
    wait = in_flight if k_iters > 1 else 0                 # wgmma groups left running per k-block
    # stream-K tail: the last full wave and the partial one are split in k-iterations evenly over the CTAs
    tiles = sched.tiles
    fits_sk = not dyn and cluster == 1 and not pp and k_iters >= 4 and tiles >= 2 * sms
    if stream_k and not fits_sk:
        raise ValueError(f"gemm: stream_k needs the cooperative schedule without clusters, K >= {4 * BK} and at "
                         f"least {2 * sms} tiles (got {tiles})")
    dp_waves = tiles // sms - 1 if stream_k else 0        # whole waves of data-parallel tiles first
    dp_tiles = dp_waves * sms
    sk_units = (tiles - dp_tiles) * k_iters                # the rest, in k-iterations
    ws_rows = sms * 2 * HALF if stream_k else 1            # fp32 partial tiles: one per CTA and warpgroup

    def tile(pool, at, shape):
        return Ax.view(pool, swizzled(*shape), shape, base=at)

    def b_region(B, n0, k0, cols=BN):
        return b_block(B, b_major, n0, k0, cols, BK)

    def load_b(pool, pipe, B, s, n_blk, kb, rank):
        if cluster > 1 and pair_mma:    # sm_100a pair: each CTA loads its half at the same offset
            Ax.copy(tile(pool, b_at + s * (BK * BN), b_half), b_region(B, n_blk * BN + rank * (BN // 2), kb * BK, BN // 2),
                    barrier=pipe.full, stage=s)
        elif cluster == 1:
            Ax.copy(tile(pool, b_at + s * (BK * BN), b_tile), b_region(B, n_blk * BN, kb * BK),
                    barrier=pipe.full, stage=s)
        else:   # half r of the tile (columns / rows r*128..) lies contiguously at r * 8192 elements
            Ax.copy(tile(pool, b_at + s * (BK * BN) + rank * (BK * BN // 2), b_half),
                    b_region(B, n_blk * BN + rank * (BN // 2), kb * BK, BN // 2),
                    barrier=pipe.full, stage=s, multicast=0b11)

    def epilogue_tile(acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        """Cast (adding stream-K's fp32 ``partial``) and store the tile chunk by chunk, each through
        a shared buffer: TMA stores into C, or (reduce-scatter) bulk copies into ``dest(row, n0)``.
        ``add_chunk(j, Cw, n0)`` adds into the accumulator's chunk j through the free buffer Cw
        first (the reduce-scatter owner's peer partials); each chunk is then cast on its own."""
        if add_chunk is None and partial is None:
            Ax.cast(out, acc)
        elif add_chunk is None:     # a stream-K tile's first k-iterations: add the partial sum of the rest
            Ax.elementwise(out, lambda a, p: T.cast(a + p, dtype), acc, partial)
        row = m_blk * bm + (0 if pp or split_cols else wg * HALF)

        def n0_of(j):
            return n_blk * BN + (wg * wcols + j * epilogue if split_cols else j * epilogue)

        def buffer(j):      # chunk j's buffer: the one chunk j - bufs (or the previous tile's) used
            return tile(pool, c_at + (wg * bufs + j % bufs) * (wrows * epilogue), (wrows, epilogue))

        def add(j, Cw):
            cols = slice(j * epilogue, (j + 1) * epilogue)
            add_chunk(j, Cw, n0_of(j))
            Ax.cast(out[:, cols], acc[:, cols])

        def write(j, Cw):
            n0 = n0_of(j)
            if dest is None:
                Ax.copy(C[row:row + wrows, n0:n0 + epilogue], Cw, fence=False, wait=False)
            else:           # one bulk copy of the chunk's image (a peer's staging has no tensor map)
                Ax.copy(dest(row, n0), Cw, fence=False, wait=False, schedule="bulk")
        Ax.cuda.staged_store(out, epilogue, buffer, write, 1 + wg, leader, bufs, None if add_chunk is None else add)

    def rs_flag(src, j, n_blk, wg):
        """The signal on the owner that ``src``'s half-tile ``wg`` of (j, n_blk) has arrived."""
        return ((src * m_tiles + j) * n_tiles + n_blk) * 2 + wg

    def distributed(A_, B_, C_, P_, Q_, peers, sig, err, rank_, epoch, timeout_ns, F, cid, tx):
        """Reduce-scatter: declare the mesh and the distributed signature (A and B sharded over K,
        C's rows scattered, P the symmetric staging the runtime supplies)."""
        if not rs:
            return _Distributed()
        from axe.layout.interop.dtensor import Shard
        mesh = Ax.mesh(world, peers, sig, err, rank_, epoch, timeout_ns)
        mesh.alloc(nsig, "gemm_rs tile signals (rs_flag)")
        Ax.dtensor(A_, (M * world, K * world), placements=[Shard(1)])
        b_dim = 1 if b_major == "col" else 0          # K is B's dim 1 when B is stored N×K
        b_global = tuple(e * (world if d == b_dim else 1) for d, e in enumerate(b_shape))
        Ax.dtensor(B_, b_global, placements=[Shard(b_dim)])
        Ax.dtensor(C_, (M * world, N), placements=[Shard(0)])
        # staging holds each 64×epilogue chunk as the image of the shared chunk it is pushed from
        # (rows of 64-column blocks under the 128-byte swizzle), so one bulk copy moves a chunk
        rows, cols = p_shape[1], p_shape[2]

        def staging(lead, row_blocks):
            """``lead`` iters, then the rows in blocks of 64, then the columns as chunks of
            ``epilogue``, each chunk's 64-column blocks (of 64 rows) after one another."""
            its = list(lead) + [Iter(row_blocks, HALF * cols), Iter(HALF, 64), Iter(cols // epilogue, HALF * epilogue),
                                Iter(epilogue // 64, HALF * 64), Iter(64, 1)]
            return SwizzledLayout(Layout(its), Swizzle(3, 3, 3))
        P = Ax.dtensor(P_, (world,) + p_shape, staging([Iter(world, 1, "gpuid"), Iter(world, rows * cols)], rows // HALF),
                       scratch=True)
        # Pl: this rank's slots as one (world·rows, cols) matrix, read locally
        Pl = Ax.view(Ax.param(P_), staging([], world * rows // HALF), (world * rows, cols))
        d = _Distributed(mesh, P, Pl, Ax.cuda.mbarrier(1, 2, name="partial"))   # one barrier per consumer
        if rs_push == "forward":     # the stash: this rank's peer tiles, by owner, as staging images
            d.Q = Ax.view(Ax.param(Q_, scratch=True), staging([], world * rows // HALF), (world * rows, cols))
        d.F, d.cid, d.tx = F, cid, tx
        return d

    def rs_begin(dist):
        """The warpgroup's pending signal (flag index, owner; -1: none), in registers."""
        from tvm.script.ir_builder import tirx as IRB
        # flag, owner, partial loads so far, peer tiles handed to the forwarding warp so far
        dist.pending = T.alloc_buffer((4,), "int32", scope="local")
        IRB.buffer_store(dist.pending, -1, [0])
        IRB.buffer_store(dist.pending, 0, [2])
        IRB.buffer_store(dist.pending, 0, [3])

    def rs_flush(dist, wg, leader):
        """Signal the owner of the tile pushed last, if any.  It is signalled one tile late — after
        this warpgroup's next main loop — so its bulk copies have long crossed NVLink and waiting
        for their completion costs nothing; only the thread that issued them waits and signals."""
        from tvm.script.ir_builder import tirx as IRB
        pend = dist.pending
        with guard(pend[0] >= 0):
            with guard(leader):
                Ax.cuda.bulk_wait(0)                 # the pushed chunks are written (at the owner, or stashed)
                if rs_push == "bulk":
                    Ax.signal(pend[0], pend[1])
                else:                           # hand the stashed half-tile to this warpgroup's forwarding warp
                    Ax.cuda.counter_publish(dist.F, dist.cid * 2 + wg, pend[3] + 1)
            IRB.buffer_store(pend, -1, [0])
            IRB.buffer_store(pend, pend[3] + 1, [3])

    def rs_forward(dist, wg):
        """Forwarding warp ``2 + wg`` of the producer warpgroup: for each peer tile of this CTA, in
        the consumers' order, wait until consumer warpgroup ``wg`` has stashed its half, copy it
        from the stash into the owner's staging slot over NVLink (16-byte loads and stores), fence
        at system scope and signal the owner.  It serves one warpgroup only: a forwarding warp
        that also waited on the other would couple the two, and a warpgroup waiting for a peer
        could then hold back the signal the peer waits for."""
        from tvm.script.ir_builder import tirx as IRB
        mesh, me = dist.mesh, dist.mesh.rank
        lead = dist.tx % 32 == 0
        done = T.alloc_buffer((1,), "int32", scope="local")
        IRB.buffer_store(done, 0, [0])
        with T.serial(sched.count(dist.cid)) as it:
            p, n_blk = sched.coords(sched.tile(dist.cid, it))
            seg, j = p // m_tiles, p % m_tiles
            owner = (me + 1 + seg) % world
            with guard(seg < world - 1):
                with guard(lead):
                    Ax.cuda.counter_wait(dist.F, dist.cid * 2 + wg, done[0] + 1)
                T.evaluate(T.cuda.warp_sync())
                # FWD_ROWS rows at a time, in a loop TVM leaves rolled (pragma_unroll_explicit 0):
                # unrolled whole, the copy's 64 lane offsets are invariant in the tile loop, nvcc
                # hoists them out of it, and 64 live offsets overflow the producer's 40 registers
                # (596 B of spills once setmaxnreg is honoured)
                with T.serial(HALF // FWD_ROWS, annotations={"pragma_unroll_explicit": 0}) as c:
                    row = j * BM + wg * HALF + c * FWD_ROWS
                    at = owner * p_shape[1] + row
                    Ax.copy(dist.P[owner, me, row:row + FWD_ROWS, n_blk * BN:(n_blk + 1) * BN],
                            dist.Q[at:at + FWD_ROWS, n_blk * BN:(n_blk + 1) * BN], schedule="vector")
                Ax.fence_system()
                T.evaluate(T.cuda.warp_sync())
                with guard(lead):
                    Ax.signal(rs_flag(me, j, n_blk, wg), owner)
                IRB.buffer_store(done, done[0] + 1, [0])
        with guard(lead):                       # the counter is zero again for the next launch
            Ax.cuda.counter_publish(dist.F, dist.cid * 2 + wg, 0)

    def rs_forwarders(dist):
        """Warp 2 + wg of the producer warpgroup forwards consumer warpgroup wg's halves."""
        for wg in range(2):
            with Ax.warps(2 + wg, 3 + wg):
                rs_forward(dist, wg)

    def rs_store(acc, out, pool, C, dist, wg, leader, p, n_blk):
        """Reduce-scatter epilogue of block-row p: a peer's tile is pushed as a partial into the
        owner's staging slot of this rank (SM stores over NVLink) and signalled at the next
        epilogue (:func:`rs_flush`); an own tile waits for every peer's partial, adds them and is
        stored."""
        from tvm.script.ir_builder import tirx as IRB
        mesh, P, Pl = dist.mesh, dist.P, dist.Pl
        seg, j = p // m_tiles, p % m_tiles
        me = mesh.rank
        owner = (me + 1 + seg) % world
        if not rs_comm:     # the measurement aid: every epilogue local, nothing exchanged
            with IRB.If(seg < world - 1):
                with IRB.Then():
                    epilogue_tile(acc, out, pool, C, wg, leader, j, n_blk, dest=lambda row, n0:
                                  Pl[me * p_shape[1] + row:me * p_shape[1] + row + HALF, n0:n0 + epilogue])
                with IRB.Else():
                    epilogue_tile(acc, out, pool, C, wg, leader, j, n_blk)
            return
        rs_flush(dist, wg, leader)
        with IRB.If(seg < world - 1):
            with IRB.Then():
                epilogue_tile(acc, out, pool, C, wg, leader, j, n_blk, dest=lambda row, n0: (
                    P[owner, me, row:row + HALF, n0:n0 + epilogue] if rs_push == "bulk" else
                    dist.Q[owner * p_shape[1] + row:owner * p_shape[1] + row + HALF, n0:n0 + epilogue]))
                IRB.buffer_store(dist.pending, rs_flag(me, j, n_blk, wg), [0])
                IRB.buffer_store(dist.pending, owner, [1])
            with IRB.Else():
                if rs_comm == "nowait":
                    epilogue_tile(acc, out, pool, C, wg, leader, j, n_blk)
                    return
                with guard(leader):
                    for s in range(1, world):
                        src = (me + s) % world
                        Ax.wait(rs_flag(src, j, n_blk, wg), src)
                Ax.cuda.named_barrier(1 + wg, 128)
                Ax.cuda.fence_gpu()
                row = j * BM + wg * HALF

                def add_partials(c, Cw, n0):
                    """Each peer's partial of chunk c: one bulk load of its image into the free chunk
                    buffer, ldmatrix into the fragment layout, fp32 add."""
                    cols = slice(c * epilogue, (c + 1) * epilogue)
                    for s in range(1, world):
                        at = (me + s) % world * p_shape[1] + row
                        Ax.copy(Cw, Pl[at:at + HALF, n0:n0 + epilogue], barrier=dist.bar, stage=wg, schedule="bulk")
                        Ax.cuda.mbarrier_wait(dist.bar, dist.pending[2] % 2, wg)
                        IRB.buffer_store(dist.pending, dist.pending[2] + 1, [2])
                        Ax.copy(out[:, cols], Cw)
                        Ax.cuda.named_barrier(1 + wg, 128)       # every thread has read the buffer
                        Ax.elementwise(acc[:, cols], lambda a, q: a + T.cast(q, "float32"), acc[:, cols], out[:, cols])
                epilogue_tile(acc, out, pool, C, wg, leader, j, n_blk, add_chunk=add_partials)

    def store(acc, out, pool, C, wg, leader, m_blk, n_blk):
        if cluster == 1 or m_tiles % cluster == 0:
            epilogue_tile(acc, out, pool, C, wg, leader, m_blk, n_blk)
            return
        # the odd last pair's second block-row lies past M
        when(m_blk < m_tiles, lambda: epilogue_tile(acc, out, pool, C, wg, leader, m_blk, n_blk))

    def when(cond, body):
        with guard(cond):
            body()

    def sk_bound(p):
        return stream_k_bound(p, sk_units, sms, k_iters, T.if_then_else)

    def tile_loop(pool, pipe, acc, wg, leader, base, k0, k1, before_last=None):
        """k-blocks k0 .. k1-1 of a tile (``base`` is the pipeline iteration of k-block 0; at least
        two k-blocks unless the tile has one): ``wait`` groups in flight, the last one waited for in
        straight-line code (ptxas moved a read of the last registers above a wait_group 0 placed
        after the loop); ``before_last`` runs before the last k-block is issued."""
        mma = steps["mma"]      # this generation's k-block step
        mma(pool, pipe, acc, wg, base + k0, False, leader, wait)
        with T.serial(k0 + 1, k1 - 1) as kb:
            mma(pool, pipe, acc, wg, base + kb, True, leader, wait)
        if before_last:
            before_last()
        if k_iters == 1:        # that first k-block was the last (wait is 0 then)
            return
        mma(pool, pipe, acc, wg, base + k1 - 1, True, leader, 0)
        if wait > 0:    # the previous k-block's group completed at this wait
            pipe.release(base + k1 - 2, pred=leader)

    def sk_finish(acc, out, pool, C, W, F, cid, wg, leader, m_blk, n_blk, k0, k1):
        """A stream-K piece [k0, k1) of a tile: the whole tile is stored as usual; the last
        k-iterations (the CTA's first piece) go to workspace row block ``cid``, published by a flag;
        the first k-iterations (the CTA's last piece) wait for CTA ``cid + 1``'s flag, add its
        partial sum and store the tile."""
        from tvm.script.ir_builder import tirx as IRB
        with IRB.If(k1 < k_iters):
            with IRB.Then():
                partial = sk_take(W, F, (cid + 1) * 2 + wg, leader, wg)
                epilogue_tile(acc, out, pool, C, wg, leader, m_blk, n_blk, partial=partial)
            with IRB.Else():
                with IRB.If(k0 > 0):
                    with IRB.Then():
                        sk_publish(W, F, cid * 2 + wg, acc, leader, wg)
                    with IRB.Else():
                        epilogue_tile(acc, out, pool, C, wg, leader, m_blk, n_blk)

    def a_region(A, mesh, m_blk, kb):
        """A's k-block kb of block-row m_blk (reduce-scatter: of the owner's rows of segment m_blk)."""
        if not rs:
            return block(A, m_blk, kb, bm, BK)
        owner = (mesh.rank + 1 + m_blk // m_tiles) % world
        j = m_blk % m_tiles
        return A[owner, j * bm:(j + 1) * bm, kb * BK:(kb + 1) * BK]

    def load(pool, pipe, A, B, i, m_blk, n_blk, kb, rank, mesh=None):
        """Producer: iteration i loads k-block kb of tile (m_blk, n_blk) into its slot."""
        s = pipe.slot(i)
        pipe.acquire(i)
        a_tile = Ax.view(pool, swizzled(bm, BK, (1,) * rs), (1,) * rs + (bm, BK), base=a_at + s * (bm * BK))
        Ax.copy(a_tile, a_region(A, mesh, m_blk, kb), barrier=pipe.full, stage=s)
        load_b(pool, pipe, B, s, n_blk, kb, rank)

    def b_operand(pool, s, shape=b_tile):
        Bs = tile(pool, b_at + s * (BK * BN), shape)
        return Bs if b_major == "row" else Ax.permute(Bs, (1, 0))      # the K×N view

    def mma(pool, pipe, acc, wg, i, accumulate, leader, wait):
        """Wait for iteration i's slot, wgmma this warpgroup's 64 rows leaving ``wait`` groups in
        flight, then release the slot whose group has completed: i - wait."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = tile(pool, a_at + s * (bm * BK) + (0 if pp else wg * (HALF * BK)), (HALF, BK))
        Ax.gemm(acc, a, b_operand(pool, s), accumulate=accumulate, wait=wait)
        if accumulate or not wait:
            pipe.release(i - wait, pred=leader)

    def mma_tcgen05(pool, pipe, acc, wg, i, accumulate, leader, wait):
        """sm_100a: wait for iteration i's slot; one elected thread runs tcgen05.mma over the whole
        BM×BK slab into the TMEM accumulator and commits to the slot's empty barrier, so the slot
        is freed when the tensor core has read it (``wg``, ``leader``, ``wait``: unused here).
        A CTA pair (``cluster=2``): the even CTA's thread also waits for the odd CTA's relay of its
        own slot, and issues ``cta_group::2`` on the pair's views (A and C split by rows, B by
        columns over ``cta``), its commit multicast to both CTAs' empty barriers."""
        s = pipe.slot(i)
        pipe.wait(i)
        a = tile(pool, a_at + s * (bm * BK), (BM, BK))
        if cluster == 1:
            with Ax.cuda.elect_one():
                Ax.gemm(acc, a, b_operand(pool, s), accumulate=accumulate, barrier=pipe.empty[s])
            return
        Ax.cuda.mbarrier_wait(steps["relay"], pipe.phase(i), s, remote=True)
        with Ax.cuda.elect_one():
            Ax.gemm(Ax.cuda.cta_pair(acc, 0), Ax.cuda.cta_pair(a, 0), Ax.cuda.cta_pair(b_operand(pool, s, b_half), 1),
                    accumulate=accumulate, barrier=pipe.empty[s], multicast=0b11)

    def relay_slots(pipe, cid):
        """sm_100a pair, warp 1 of the odd CTA: for every k-block, once its own slot has landed,
        one arrival on the even CTA's relay barrier of that slot (the pair MMA reads both)."""
        with T.serial(sched.count(cid) * k_iters) as i:
            pipe.wait(i)
            with Ax.cuda.elect_one():
                Ax.cuda.arrive_remote(steps["relay"].ptr(pipe.slot(i)), 0)

    def issue_tiles(pool, pipe, acc_t, accp, cid, rank):
        """sm_100a, warp 1 of the producer warpgroup: every tile's MMAs, each tile once the
        epilogue has read the previous one out of TMEM; its completion committed to ``accp.full``."""
        with T.serial(sched.count(cid)) as it:
            accp.acquire(it)
            Ax.cuda.tcgen05_fence_after()
            tile_loop(pool, pipe, acc_t, 0, None, it * k_iters, 0, k_iters)
            with Ax.cuda.elect_one():        # arrives when every MMA this thread issued has completed
                Ax.cuda.tcgen05_commit((accp.full,), cluster, 0b11 if cluster > 1 else None)

    def drain(acc_t, accp, acc, wg, j):
        """sm_100a epilogue warpgroup ``wg``: wait for tile j's accumulator, read its 128 columns
        of TMEM into registers (tcgen05.ld), then free the accumulator (all its threads arrive)."""
        accp.wait(j)
        for w in range(2):          # TMEM views have static columns: one branch per warpgroup
            with guard(wg == w):
                Ax.copy(acc, acc_t[:, w * wcols:(w + 1) * wcols])
        Ax.cuda.tcgen05_fence_before()
        accp.release(j)

    steps = {"mma": mma}        # the factory sets sm_100a's; "relay": a pair's relay barriers (the kernel's)
    pair_mma = False            # sm_100a with cluster=2: cta_group::2 (the factory sets it)

    n_tiles = -(-N // BN)
    a_shape = (world, M, K) if rs else (M, K)
    p_shape = (world, m_tiles * BM, n_tiles * BN) if rs else (1,)     # staging: one padded slot per source
    nsig = world * m_tiles * n_tiles * 2 if rs else 1

    def rows_view(buf):
        """``buf`` itself (static M), or for a runtime M the same data seen as a static
        (:data:`DYN_ROWS`, columns) matrix: axe's tensors need static shapes, and A and C are
        only reached through TMA, whose maps take the real extent from the tensor at launch."""
        if not dyn:
            return buf
        import tvm
        return tvm.tirx.decl_buffer((DYN_ROWS, buf.shape[1]), buf.dtype, name=buf.name, data=buf.data)

    def neuron_core(cfg):
        """The trn1 form (see the module docstring): a loop over C's blocks on one NeuronCore, each
        accumulated in PSUM over k-steps; the layouts of ``cfg`` carry the TensorE mapping, masked
        DMAs into fresh tiles handle ragged edges."""
        gpu_only = [n for n, v in (("a runtime M", dyn), ("world>1", rs), ("stream_k", stream_k),
                                   ("cluster>1", cluster > 1), ("pingpong", pp)) if v]
        if gpu_only:
            raise Ax.TargetError(f"gemm on trn1: {', '.join(gpu_only)} belong to the GPU form")
        bm, bk, bn = cfg.bm, cfg.bk, cfg.bn(N)
        b_box = (bk, bn) if b_major == "row" else (bn, bk)

        def k_by_n(b):      # the matmul's K×N operand
            return b if b_major == "row" else Ax.permute(b, (1, 0))

        @T.prim_func
        def gemm(A_: T.Buffer((M, K), dtype), B_: T.Buffer(b_shape, dtype), C_: T.Buffer((M, N), dtype)):
            Ax.neuron.core()
            A, B, C = Ax.neuron.hbm(A_, (bm, bk)), Ax.neuron.hbm(B_, b_box), Ax.neuron.hbm(C_, (bm, bn))
            for m in T.parallel(-(-M // bm)):
                for n in T.parallel(-(-N // bn)):
                    acc = Ax.neuron.psum((bm, bn), "float32", cfg.c_tile(bn), name="acc")
                    for k in T.parallel(-(-K // bk)):
                        a = Ax.neuron.sbuf((bm, bk), dtype, cfg.a_tile(), name="a")
                        b = Ax.neuron.sbuf(b_box, dtype, cfg.b_tile(bn, b_major), name="b")
                        Ax.copy(a, block(A, m, k, bm, bk))
                        Ax.copy(b, b_block(B, b_major, n * bn, k * bk, bn, bk))
                        Ax.gemm(acc, a, k_by_n(b))
                    out = Ax.neuron.sbuf((bm, bn), dtype, cfg.c_tile(bn), name="out")
                    Ax.cast(out, acc)
                    Ax.copy(block(C, m, n, bm, bn), out)
        return gemm

    def factory():
        from axe.schedules.context import current_context
        nonlocal wrows, wcols, split_cols, epilogue, chunks, bufs, pair_mma
        target = current_context().target
        if generation(target) == "trn1":
            return neuron_core(TARGETS["trn1"])
        if gpu_sizes:
            raise Ax.TargetError(f"gemm on {target}: {gpu_sizes}")
        gen = TARGETS[generation(target)]
        tc = gen.mma == "tcgen05"
        if tc:
            if pp or stream_k or rs:
                raise Ax.TargetError("gemm on sm_100a: only the cooperative schedule without stream_k or reduce-scatter "
                                 "is built for tcgen05 so far (got " + ", ".join(
                                     n for n, v in (("pingpong", pp), ("stream_k", stream_k), ("world>1", rs)) if v) + ")")
        pair_mma = tc and cluster > 1
        # the closures read these: set them for this build (a kernel object builds for either target)
        wrows, wcols = gen.part
        split_cols = gen.split == "columns"
        epilogue, chunks, bufs = (epi_arg or gen.epilogue, *chunking(epi_arg or gen.epilogue, wcols)) if tc else sm90
        steps["mma"] = mma_tcgen05 if tc else mma
        smem = (c_at + 2 * bufs * wrows * epilogue) * 2
        if tc and smem > 227 * 1024:
            raise Ax.TargetError(f"gemm on sm_100a: {stages} stages and {bufs} x {wrows}x{epilogue} epilogue buffers per "
                             f"warpgroup need {smem // 1024} KiB of shared memory, more than 227 KiB")
        acc_layout = gen.acc_layout()

        # the reduce-scatter parameters (P_ ... timeout_ns) are unused, so dropped, when world == 1
        @T.prim_func
        def gemm(A_: T.Buffer(a_shape, dtype), B_: T.Buffer(b_shape, dtype), C_: T.Buffer((M, N), dtype),
                 A_map: T.handle("tensormap"), B_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
                 P_: T.Buffer(p_shape, dtype), peers: T.Buffer((world,), "int64"), sig: T.Buffer((nsig,), "int32"),
                 err: T.Buffer((8,), "int32"), rank_: T.int32, epoch: T.int32, timeout_ns: T.int64,
                 Q_: T.Buffer(p_shape, dtype), W_: T.Buffer((ws_rows, BN if stream_k else 1), "float32"), F_: T.Buffer((2 * sms,), "int32")):
            Ax.cuda.min_blocks_per_sm(1)
            if cluster == 1:      # a runtime M: no more CTAs than tiles (the grid is an expression of M)
                bx, tx = Ax.launch([T.min(sms, sched.tiles)] if dyn else sms, THREADS)
                cid, rank = bx, 0
            else:
                cid, rank, bx, tx = Ax.cuda.cluster_launch(sms, THREADS, cluster)
            A = Ax.param(rows_view(A_), tensormap=A_map)
            B = Ax.param(B_, tensormap=B_map)
            C = Ax.param(rows_view(C_), tensormap=C_map)
            W = Ax.param(W_, scratch=True)          # stream-K partial sums (fp32)
            F = Ax.param(F_, scratch=True)          # stream-K flags, one per CTA and warpgroup
            dist = distributed(A_, B_, C_, P_, Q_, peers, sig, err, rank_, epoch, timeout_ns, F, cid, tx)
            pool = Ax.cuda.dynamic_shared(c_at + 2 * bufs * wrows * epilogue, dtype)
            # a pair's slots are freed by the even CTA's multicast commit: one arrival per CTA; in a
            # cluster the peer fills and frees our slots, so every wait on them is bounded (call-free)
            pipe = Ax.cuda.pipeline(stages, producers=2, consumers=1 if pp else gen.releases, cluster=1 if tc else cluster,
                                    remote=cluster > 1)
            if tc:      # the TMEM accumulator (256 columns) and its one-slot pipeline: full <- the MMA
                acc_t = Ax.cuda.tmem((BM, BN), "float32", name="acc_tmem", cta_group=cluster)   # thread's commit,
                # empty <- the epilogues' 256 threads (a pair: of both CTAs, on the even CTA's barrier)
                accp = Ax.cuda.pipeline(1, producers=1, consumers=2 * 128, name="accp", cluster=cluster, remote=cluster > 1)
                if cluster > 1:
                    steps.update(relay=Ax.cuda.mbarrier(1, stages, name="relay"))   # odd CTA's slot landed -> even
                    Ax.cuda.fence_mbarrier_init()
                    Ax.cuda.cluster_sync()
            with Ax.cuda.role(0, 1, regs=PRODUCER_REGS):
                with Ax.warps(0, 1):
                    for it in T.serial(dp_waves if stream_k else sched.count(cid)):
                        m_blk, n_blk = sched.coords(sched.tile(cid, it), rank)
                        for kb in T.serial(k_iters):
                            load(pool, pipe, A, B, it * k_iters + kb, m_blk, n_blk, kb, rank, dist.mesh)
                    if stream_k:    # k-iterations u of the stream-K tiles, continuing the iteration count
                        b0 = sk_bound(cid)
                        for u in T.serial(b0, sk_bound(cid + 1)):
                            m_blk, n_blk = sched.coords(dp_tiles + u // k_iters)
                            load(pool, pipe, A, B, dp_waves * k_iters + u - b0, m_blk, n_blk, u % k_iters, rank)
                if rs and rs_comm is True and rs_push == "forward":
                    rs_forwarders(dist)
                if tc:
                    with Ax.warps(1, 2):
                        if cluster == 1:
                            issue_tiles(pool, pipe, acc_t, accp, cid, rank)
                        else:       # the even CTA issues the pair's MMAs, the odd one relays its slots
                            with guard(rank == 0):
                                issue_tiles(pool, pipe, acc_t, accp, cid, rank)
                            with guard(rank == 1):
                                relay_slots(pipe, cid)
            with Ax.cuda.role(1, 3, regs=CONSUMER_REGS, each=True):
                wg = Ax.cuda.warpgroup_index()
                leader = tx % 128 == 0
                acc = Ax.registers((wrows, wcols), "float32", acc_layout, name="acc")
                out = Ax.registers((wrows, wcols), dtype, acc_layout, name="out")
                if rs:
                    rs_begin(dist)
                count = sched.count(cid)
                # ping-pong: warpgroup wg takes the CTA's tiles wg, wg + 2, ...
                for j in T.serial((count - wg + 1) // 2 if pp else (dp_waves if stream_k else count)):
                    it = 2 * j + wg if pp else j
                    m_blk, n_blk = sched.coords(sched.tile(cid, it), rank)
                    if pp:      # my turn: the other warpgroup has issued the previous tile's main loop
                        when(it > 0, lambda: Ax.cuda.named_barrier(ORDER + wg, 256))
                    if tc:      # the MMA thread computed the tile in TMEM
                        drain(acc_t, accp, acc, wg, it)
                    else:       # ping-pong: pass the turn once every k-block but the last has been waited for
                        tile_loop(pool, pipe, acc, wg, leader, it * k_iters, 0, k_iters, before_last=(
                            lambda: when(it + 1 < count, lambda: Ax.cuda.named_barrier_arrive(ORDER + 1 - wg, 256))) if pp else None)
                    if rs:
                        rs_store(acc, out, pool, C, dist, wg, leader, m_blk, n_blk)
                    else:
                        store(acc, out, pool, C, wg, leader, m_blk, n_blk)
                if rs:
                    rs_flush(dist, wg, leader)
                if stream_k:    # this CTA's k-iterations of the stream-K tiles: at most three pieces
                    b0 = sk_bound(cid)
                    b1 = sk_bound(cid + 1)
                    for t in T.serial(b0 // k_iters, (b1 - 1) // k_iters + 1):
                        k0 = T.max(b0, t * k_iters) - t * k_iters
                        k1 = T.min(b1, t * k_iters + k_iters) - t * k_iters
                        m_blk, n_blk = sched.coords(dp_tiles + t)
                        tile_loop(pool, pipe, acc, wg, leader, dp_waves * k_iters + t * k_iters - b0, k0, k1)
                        sk_finish(acc, out, pool, C, W, F, cid, wg, leader, m_blk, n_blk, k0, k1)
                Ax.cuda.tma_store_wait(0, pred=leader)
            if tc:
                if cluster > 1:     # PTX ISA: no access from the peer may run into the pair's dealloc
                    Ax.cuda.cluster_sync()
                Ax.cuda.tmem_free(acc_t)
            if cluster > 1:
                Ax.cuda.cluster_sync()                    # no CTA leaves while its peer may still arrive on it
        if dyn:
            unbake_rows(current_context().tensormaps)
        # one GPU: the reduce-scatter parameters leave the call signature
        unused = () if rs and rs_push == "forward" else ("Q_",)
        return Ax.without_params(gemm, unused + (() if rs else ("P_", "peers", "sig", "err", "rank_", "epoch", "timeout_ns")))

    return Ax.Kernel(name or f"gemm_{dtype}_{b_major}", factory, reference=reference, outputs=("C",),
                     meta={"M": None if dyn else M, "N": N, "K": K, "dtype": dtype, "b_major": b_major, "grid": (sms,),
                           "threads": THREADS, "cluster": cluster})


class _Distributed:
    """What a reduce-scatter build declared (the mesh, the staging P as a distributed tensor and
    as this rank's local slots); all None for one GPU."""

    _is_meta_class = True

    def __init__(self, mesh=None, P=None, Pl=None, bar=None):
        self.mesh, self.P, self.Pl, self.bar = mesh, P, Pl, bar
        self.Q = self.F = self.cid = self.tx = None     # the stash and the forwarding counters
        self.pending = None     # a consumer warpgroup's unsent signal (rs_begin)


def build(M, N, K, dtype="float16", b_major="row", name=None, target="sm_90a", **kw):
    """Build :func:`make`'s kernel into an artifact (CUDA source, PTX, cubin, launch.json)."""
    return Ax.compile_kernel(make(M, N, K, dtype, b_major, name, **kw), target)


def make_dynamic(N, K, dtype="float16", b_major="row", name=None, **kw):
    """The GEMM for any number of rows M, read off A at launch (one artifact for every M; N, K,
    dtype and B's layout are the specialization): :func:`make`'s kernel with A ``(M, K)`` and C
    ``(M, N)``, tile counts ``ceil(M / 128)`` computed in the kernel, the persistent grid
    ``min(sms, tiles)`` an expression of M in launch.json and A's and C's TMA maps encoded from
    the tensors.  Ragged M (down to 1) is the static build's path: TMA loads past M read zeros,
    stores past M are clipped.  ``kw``: :func:`make`'s options (not stream_k, cluster or world)."""
    return make(None, N, K, dtype, b_major, name or f"gemm_dyn_{dtype}_{b_major}", **kw)


def build_dynamic(N, K, dtype="float16", b_major="row", name=None, target="sm_90a", **kw):
    """Build :func:`make_dynamic`'s kernel into an artifact."""
    return Ax.compile_kernel(make_dynamic(N, K, dtype, b_major, name, **kw), target)


#: the examples ``axe build kernels/gemm.py`` and ``axe demo`` build (any size works through
#: :func:`make`): fp16 with row-major B and bf16 with column-major B (C = A·Bᵀ)
gemm_fp16 = make(4096, 4096, 4096, "float16", "row", name="gemm_fp16")
gemm_bf16_nt = make(4096, 4096, 4096, "bfloat16", "col", name="gemm_bf16_nt")
