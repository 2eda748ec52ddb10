"""A fused Mixture-of-Experts layer in axe for Hopper (sm_90a): Qwen3-30B-A3B's MoE block.

For T tokens ``x`` (T × 2048, bf16 or fp16), 128 experts, top-8 routing with renormalized
softmax weights, expert MLP ``down(SiLU(gate(x)) · up(x))`` (gate/up 768 each, down 768 → 2048)
and the weighted combine of each token's 8 expert outputs.  Weights as serving stacks hold them
(SGLang, vLLM, FlashInfer): ``w1`` (128, 1536, 2048) — each expert's gate rows then up rows,
nn.Linear (N × K) — and ``w2`` (128, 2048, 768).

Six axe kernels, each one artifact for every T (the token count and the padded row count are
read off the tensors at launch):

1. :func:`make_route` — ``logits`` (T × 128) → top-8 ``ids`` (int32) and ``weights`` (fp32,
   softmax over the 8 chosen logits = the renormalized top-8 of the full softmax).  One warp per
   token; eight rounds of a warp arg-max (ties to the lower expert, as ``torch.topk`` on distinct
   values).  The peers' fused kernels take ids and weights (SGLang's ``fused_experts``,
   FlashInfer's ``cutlass_fused_moe``), so the layer's contract starts after this kernel and
   the benchmark times it apart.
2. :func:`make_align` — the permutation (one CTA): per-expert counts (shared atomics), each
   expert's segment padded to the GEMM tile's ``bm`` rows (:func:`kernels.parts.schedulers.padding.segments`
   is the law), ``sorted_ids`` (the token of every padded row, -1 for padding), the expert of
   every m-tile, ``meta`` = (m-tiles, padded rows) and ``pos`` (the padded row of every
   (token, k)).  Experts with no token get no rows and no tiles.
3. :func:`make_permute` — ``xp[r] = x[sorted_ids[r]]`` (zero rows for padding): the ``gather``
   operator (:mod:`axe.ops.gather`, schedule ``vector_gather``: 16-byte rows loads and stores).
4. :func:`~kernels.moe_gemm.make_grouped_gemm` with ``act="silu_mul"`` — grouped GEMM 1: every
   m-tile of ``xp`` times its expert's gate and up rows, ``h = SiLU(gate) · up`` in the epilogue
   (P × 768).
5. :func:`~kernels.moe_gemm.make_grouped_gemm` with ``act=None`` — grouped GEMM 2:
   ``y = h · w2[e]ᵀ`` (P × 2048).
6. :func:`make_combine` — ``out[t] = Σ_k weights[t, k] · y[pos[t, k]]`` in fp32: the ``gather``
   operator into registers (the top-k rows, in groups where they are many), then a weighted sum.

This module holds the kernels around the GEMMs (route, align, permute, combine) and
:func:`builds`; the grouped GEMM is :mod:`kernels.moe_gemm` and the fused pair (both GEMMs in one
persistent launch, GEMM 2's tiles pipelined behind GEMM 1's) :mod:`kernels.moe_experts`, both
compositions of :mod:`kernels.parts` (re-exported here with :func:`make_gemm1`,
:func:`make_gemm2`).

Every kernel is launched programmatically (``Ax.cuda.programmatic_launch``): it may start while
the one before it in the stream finishes, waits (``grid_wait``) before it reads that kernel's
output, and lets the next one launch once its own work is issued (``launch_dependents``), so the
launches and set-up of the layer's kernels overlap their predecessors' tails.

The configurations of :data:`kernels.moe_host.CONFIGS` vary this layer: ``bm``/``bn`` (the GEMM
tiles), ``pad`` (segments padded to 16 rows, tiles reaching into the next experts' rows and
storing only their own: :func:`kernels.parts.schedulers.padding.tiles`), ``gather_rows`` (GEMM 1 gathers x's
rows itself, no permute kernel), ``bn1`` (GEMM 1's own tile width), ``stream_k``,
``split_align`` (:func:`make_align_split`) and ``fused`` (:func:`make_experts`).  Why each
configuration exists, with the measurements: ``docs/moe.md``.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.lang.gather import gather
from axe.layout import S
from kernels.moe_experts import make_experts
from kernels.moe_gemm import check_dtype, make_gemm1, make_gemm2, make_grouped_gemm  # noqa: F401
from kernels.moe_host import CONFIGS, DTYPES, E, HIDDEN, INTER, TOPK, align_name, gemm_config, gemm_keywords  # noqa: F401
from kernels.parts.tiles import static_rows

ROUTE_WARPS = 4          # tokens per routing CTA (one warp each)
ALIGN_THREADS = 1024     # the permutation's one CTA
ALIGN_SPLIT_THREADS = 512   # the split alignment (make_align_split): threads per CTA,
ALIGN_SPLIT_TOKENS = 128    # tokens per CTA (at least),
ALIGN_SPLIT_CTAS = 64       # and CTAs at most (co-resident: each waits for all the others' histograms)
PERMUTE_ROWS = 16        # rows gathered per permute CTA (256 threads: 16 chunks of 16 bytes each)
COMBINE_THREADS = 256    # the combine's threads at most,
COMBINE_VEC = 8          # elements each moves per vector (16 bytes of 16-bit values),
COMBINE_ROW_WORDS = 64   # and 32-bit registers of gathered rows each holds at once


def make_route(dtype="bfloat16", experts=E, topk=TOPK):
    """Routing: ``moe_route(logits (T, experts), ids (T, topk) int32, weights (T, topk) fp32)``."""
    check_dtype(dtype, "moe_route")
    per = experts // 32
    if experts % 32 or not 1 <= topk <= experts:
        raise ValueError(f"moe_route: experts={experts} must be a multiple of 32 and topk={topk} in [1, experts]")
    lowest = -3.0e38

    @Ax.kernel(name=f"moe_route_{dtype}", outputs=("ids", "weights"), threads=32 * ROUTE_WARPS, dynamic=("T",))
    def moe_route():
        @T.prim_func
        def moe_route(logits_: T.handle, ids_: T.handle, w_: T.handle):
            n_tok = T.int32()
            L = T.match_buffer(logits_, (n_tok, experts), dtype, align=16)
            ids = T.match_buffer(ids_, (n_tok, topk), "int32")
            W = T.match_buffer(w_, (n_tok, topk), "float32")
            Ax.cuda.programmatic_launch()
            bx, tx = Ax.launch([(n_tok + ROUTE_WARPS - 1) // ROUTE_WARPS], 32 * ROUTE_WARPS)
            Ax.cuda.grid_wait()
            Ax.cuda.launch_dependents()     # (the next kernel waits for this whole grid anyway)
            v = T.alloc_buffer((per,), "float32", scope="local")
            best = T.alloc_buffer((1,), "float32", scope="local")
            bi = T.alloc_buffer((1,), "int32", scope="local")
            sv = T.alloc_buffer((topk,), "float32", scope="local")
            si = T.alloc_buffer((topk,), "int32", scope="local")
            den = T.alloc_buffer((1,), "float32", scope="local")
            tok = bx * ROUTE_WARPS + tx // 32
            lane = tx % 32
            if tok < n_tok:     # one warp per token: the branch is warp-uniform, so shuffles are safe
                for j in T.unroll(per):
                    v[j] = T.cast(L[tok, lane * per + j], "float32")
                for k in T.unroll(topk):
                    best[0] = v[0]
                    bi[0] = lane * per
                    for j in T.unroll(1, per):
                        if v[j] > best[0]:
                            best[0] = v[j]
                            bi[0] = lane * per + j
                    for m in T.unroll(5):      # butterfly arg-max; ties go to the lower expert
                        ob = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), best[0], 16 >> m, 32)
                        oi = T.cuda.__shfl_xor_sync(T.uint32(0xFFFFFFFF), bi[0], 16 >> m, 32)
                        if ob > best[0] or (ob == best[0] and oi < bi[0]):
                            best[0] = ob
                            bi[0] = oi
                    sv[k] = best[0]
                    si[k] = bi[0]
                    for j in T.unroll(per):    # the owner drops the chosen logit (static register index)
                        if bi[0] == lane * per + j:
                            v[j] = T.float32(lowest)
                if lane == 0:   # softmax over the chosen logits; sv[0] is their maximum
                    den[0] = T.float32(0)
                    for k in T.unroll(topk):
                        den[0] = den[0] + T.exp(sv[k] - sv[0])
                    for k in T.unroll(topk):
                        ids[tok, k] = si[k]
                        W[tok, k] = T.exp(sv[k] - sv[0]) / den[0]
        return moe_route
    return moe_route


def lanes(experts):
    """The experts the alignment scans: ``experts`` rounded up to a multiple of 32 (one warp
    scans them, lane l taking ``experts / 32`` of them), the ones past the real experts empty."""
    return -(-experts // 32) * 32


def check_align(experts, pad, bm, threads):
    """An alignment's conditions: one thread per scanned expert (:func:`lanes`), segments of
    ``pad`` rows (a multiple of 16) tiling ``bm``-row tiles."""
    if not 1 <= experts or lanes(experts) > threads or pad % 16 or bm % pad:
        raise ValueError(f"moe_align: experts={experts} must be in [1, {threads}] (one thread per expert), "
                         f"pad={pad} a multiple of 16 that divides bm={bm}")


def _align_buffers(ids_, pos_, sorted_, tiles_, trows_, n_tok, P, MT, topk):
    """An alignment kernel's tensors: ids and pos (T, topk), sorted_ids (P,), tile_expert (MT,),
    tile_rows (MT, 2), int32, their extents bound at launch."""
    from tvm.script.ir_builder import IRBuilder
    shapes = ((ids_, (n_tok, topk), "ids"), (pos_, (n_tok, topk), "pos"), (sorted_, (P,), "srt"),
              (tiles_, (MT,), "tiles"), (trows_, (MT, 2), "trows"))
    return tuple(IRBuilder.name(n, T.match_buffer(h, shape, "int32")) for h, shape, n in shapes)


def _align_scan(cnt, off, cur, toff, meta, tiles, trows, tx, bm, pad, experts, write=None):
    """The alignment's middle, after the counts ``cnt`` (shared, per expert) and before the
    scatter: one warp pads, tiles and scans them — lane l takes experts ``l·per ..`` — into the
    segment starts ``off`` (and the cursors ``cur``, equal to them) and the m-tile starts
    ``toff``, lane 31 writes ``meta`` = (m-tiles, padded rows, 0, 0); after a CTA barrier, thread
    e writes expert e's m-tiles into ``tiles`` and ``trows`` (the law:
    :func:`kernels.parts.schedulers.padding.tiles`).  ``write``: where meta and the tables are written
    (default: this CTA; every CTA of a split alignment scans, one writes).  ``experts``: a
    multiple of 32 (:func:`lanes`; the counts of the experts past the real ones are zero)."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as IRB
    per = experts // 32
    part, tpart = (IRBuilder.name(n, T.alloc_buffer((32,), "int32", scope="shared")) for n in ("part", "tpart"))
    run, trun = (IRBuilder.name(n, T.alloc_buffer((1,), "int32", scope="local")) for n in ("run", "trun"))
    padded = lambda c: (c + pad - 1) // pad * pad     # noqa: E731
    with IRB.If(tx < 32):
        with IRB.Then():
            T.buffer_store(run, 0, [0])
            T.buffer_store(trun, 0, [0])
            for j in range(per):
                T.buffer_store(run, run[0] + padded(cnt[tx * per + j]), [0])
                T.buffer_store(trun, trun[0] + (cnt[tx * per + j] + bm - 1) // bm, [0])
            T.buffer_store(part, run[0], [tx])
            T.buffer_store(tpart, trun[0], [tx])
            T.evaluate(T.cuda.warp_sync())
            T.buffer_store(run, 0, [0])
            T.buffer_store(trun, 0, [0])
            with IRB.serial(32) as i:
                with IRB.If(i < tx):
                    with IRB.Then():
                        T.buffer_store(run, run[0] + part[i], [0])
                        T.buffer_store(trun, trun[0] + tpart[i], [0])
            for j in range(per):
                T.buffer_store(off, run[0], [tx * per + j])
                T.buffer_store(cur, run[0], [tx * per + j])
                T.buffer_store(toff, trun[0], [tx * per + j])
                T.buffer_store(run, run[0] + padded(cnt[tx * per + j]), [0])
                T.buffer_store(trun, trun[0] + (cnt[tx * per + j] + bm - 1) // bm, [0])
            with IRB.If(tx == 31):
                with IRB.Then():
                    T.buffer_store(off, run[0], [experts])
                    T.buffer_store(toff, trun[0], [experts])
                    with Ax.guard(write):
                        for q, v in enumerate((trun[0], run[0], 0, 0)):
                            T.buffer_store(meta, v, [q])
    T.evaluate(T.tvm_storage_sync("shared"))
    with IRB.If(tx < experts if write is None else T.And(tx < experts, write)):
        with IRB.Then():
            with IRB.serial(toff[tx], toff[tx + 1]) as t:
                T.buffer_store(tiles, tx, [t])
                T.buffer_store(trows, off[tx] + (t - toff[tx]) * bm, [t, 0])
                T.buffer_store(trows, T.min(bm, cnt[tx] - (t - toff[tx]) * bm), [t, 1])


def make_align(bm, pad=None, experts=E, topk=TOPK):
    """The permutation: ``moe_align(ids (T, topk), sorted_ids (P,), tile_expert (MT,), tile_rows
    (MT, 2), meta (4,), pos (T, topk))``: each expert's segment padded to ``pad`` rows (default
    ``bm``), its ``ceil(count / bm)`` m-tiles of ``bm`` rows starting every ``bm`` rows from the
    segment's start, ``tile_rows[t]`` = (start row, rows the tile owns) — the law is
    :func:`kernels.parts.schedulers.padding.tiles`.  ``P`` and ``MT`` are the capacities the caller allocated
    (:func:`kernels.moe_host.Layer`); ``meta`` = (m-tiles, padded rows, 0, 0)."""
    pad = pad or bm
    check_align(experts, pad, bm, ALIGN_THREADS)
    nt, ex = ALIGN_THREADS, lanes(experts)

    @Ax.kernel(name=align_name(bm, pad), outputs=("sorted_ids", "tile_expert", "tile_rows", "meta", "pos"),
               threads=nt, dynamic=("T", "P", "MT"))
    def moe_align():
        @T.prim_func
        def moe_align(ids_: T.handle, sorted_: T.handle, tiles_: T.handle, trows_: T.handle,
                      meta: T.Buffer((4,), "int32"), pos_: T.handle):
            n_tok = T.int32()
            P = T.int32()
            MT = T.int32()
            ids, pos, srt, tiles, trows = _align_buffers(ids_, pos_, sorted_, tiles_, trows_, n_tok, P, MT, topk)
            Ax.cuda.programmatic_launch()
            bx, tx = Ax.launch(1, nt)
            Ax.cuda.grid_wait()
            cnt = T.alloc_buffer((ex,), "int32", scope="shared")
            cur = T.alloc_buffer((ex,), "int32", scope="shared")
            off = T.alloc_buffer((ex + 1,), "int32", scope="shared")
            toff = T.alloc_buffer((ex + 1,), "int32", scope="shared")
            n = n_tok * topk
            if tx < ex:
                cnt[tx] = 0
            T.tvm_storage_sync("shared")
            # consecutive (token, k) pairs across the threads (batching 4 tokens' ids per thread
            # instead was 1.4-1.8x slower on an H200 at T = 1024..4096: moe-stages-2026-11-23*)
            for j in T.serial((n + nt - 1 - tx) // nt):
                a = tx + j * nt
                T.evaluate(T.cuda.atomic_add(T.address_of(cnt[ids[a // topk, a % topk]]), 1))
            for j in T.serial((P + nt - 1 - tx) // nt):
                srt[tx + j * nt] = -1
            T.tvm_storage_sync("shared")
            _align_scan(cnt, off, cur, toff, meta, tiles, trows, tx, bm, pad, ex)
            for j in T.serial((n + nt - 1 - tx) // nt):     # each (token, k) takes a row
                a = tx + j * nt
                p = T.cuda.atomic_add(T.address_of(cur[ids[a // topk, a % topk]]), 1)
                srt[p] = a // topk
                pos[a // topk, a % topk] = p
            Ax.cuda.launch_dependents()
        return moe_align
    return moe_align


def make_align_split(bm, pad=None, experts=E, topk=TOPK):
    """The permutation of :func:`make_align` (same arguments, outputs and law) on many CTAs, for
    many tokens, where one CTA is bound by its own SM (its shared-memory atomics and scattered
    stores).  CTA c of ``G = min(ALIGN_SPLIT_CTAS, ceil(T / ALIGN_SPLIT_TOKENS))`` takes tokens
    ``[c·chunk, (c+1)·chunk)``, counts their experts in shared memory and writes the histogram to
    a scratch row; once every CTA has (a bounded readiness count, ``Ax.cuda.count_done`` /
    ``wait_count``, all CTAs co-resident), each sums every CTA's histogram (the totals) and those
    before it (its start inside each expert's segment), runs the same scan, and scatters its own
    tokens.  The -1 padding of a segment is written by the CTA ``e mod G``, the rows past the last
    segment by all CTAs, so no row is written twice and nothing waits on another CTA's stores.
    CTA 0 writes the tile tables and ``meta``."""
    pad = pad or bm
    check_align(experts, pad, bm, ALIGN_SPLIT_THREADS)
    nt, gmax, tpc, ex = ALIGN_SPLIT_THREADS, ALIGN_SPLIT_CTAS, ALIGN_SPLIT_TOKENS, lanes(experts)

    @Ax.kernel(name=align_name(bm, pad, split=True), outputs=("sorted_ids", "tile_expert", "tile_rows", "meta", "pos"),
               threads=nt, dynamic=("T", "P", "MT"))
    def moe_align():
        @T.prim_func
        def moe_align(ids_: T.handle, sorted_: T.handle, tiles_: T.handle, trows_: T.handle,
                      meta: T.Buffer((4,), "int32"), pos_: T.handle, H_: T.Buffer((gmax, experts), "int32"),
                      R_: T.Buffer((2,), "int32")):
            n_tok = T.int32()
            P = T.int32()
            MT = T.int32()
            ids, pos, srt, tiles, trows = _align_buffers(ids_, pos_, sorted_, tiles_, trows_, n_tok, P, MT, topk)
            scratch = Ax.param(H_, scratch=True, name="histograms")     # (read and written as H_ below)
            ready = Ax.param(R_, scratch=True, name="histograms_written")
            Ax.cuda.programmatic_launch()
            bx, tx = Ax.launch([T.min(gmax, (n_tok + tpc - 1) // tpc)], nt)
            Ax.cuda.grid_wait()
            G = T.min(gmax, (n_tok + tpc - 1) // tpc)
            chunk = (n_tok + G - 1) // G
            lo = bx * chunk
            cnt = T.alloc_buffer((ex,), "int32", scope="shared")       # this CTA's, then the totals
            mine = T.alloc_buffer((experts,), "int32", scope="shared")      # rows before this CTA's, per expert
            cur = T.alloc_buffer((ex,), "int32", scope="shared")
            off = T.alloc_buffer((ex + 1,), "int32", scope="shared")
            toff = T.alloc_buffer((ex + 1,), "int32", scope="shared")
            acc = T.alloc_buffer((2,), "int32", scope="local")
            if tx < ex:
                cnt[tx] = 0
            T.tvm_storage_sync("shared")
            for j in T.serial((chunk * topk + nt - 1) // nt):
                f = j * nt + tx
                if f < chunk * topk and lo + f // topk < n_tok:
                    T.evaluate(T.cuda.atomic_add(T.address_of(cnt[ids[lo + f // topk, f % topk]]), 1))
            T.tvm_storage_sync("shared")
            if tx < experts:
                H_[bx, tx] = cnt[tx]
            Ax.cuda.fence_gpu()         # this thread's row entry before the count that announces it
            T.tvm_storage_sync("shared")
            Ax.cuda.count_done(ready, 0, tx == 0)
            Ax.cuda.wait_count(ready, 0, G, 1, G, tx == 0)      # every CTA's histogram is written
            T.tvm_storage_sync("shared")
            Ax.cuda.fence_gpu()
            if tx < experts:
                acc[0] = 0
                acc[1] = 0
                for c in T.serial(G):
                    acc[0] = acc[0] + H_[c, tx]
                    if c < bx:
                        acc[1] = acc[1] + H_[c, tx]
                cnt[tx] = acc[0]
                mine[tx] = acc[1]
            T.tvm_storage_sync("shared")
            _align_scan(cnt, off, cur, toff, meta, tiles, trows, tx, bm, pad, ex, write=bx == 0)
            if tx < experts:
                cur[tx] = off[tx] + mine[tx]
                if tx % G == bx:        # expert tx's padding rows
                    for r in T.serial(off[tx] + cnt[tx], off[tx + 1]):
                        srt[r] = -1
            for j in T.serial((P - off[experts] + G * nt - 1) // (G * nt)):     # rows past the last segment
                if off[experts] + (j * G + bx) * nt + tx < P:
                    srt[off[experts] + (j * G + bx) * nt + tx] = -1
            T.tvm_storage_sync("shared")
            for j in T.serial((chunk * topk + nt - 1) // nt):
                f = j * nt + tx
                if f < chunk * topk and lo + f // topk < n_tok:
                    p = T.cuda.atomic_add(T.address_of(cur[ids[lo + f // topk, f % topk]]), 1)
                    srt[p] = lo + f // topk
                    pos[lo + f // topk, f % topk] = p
            Ax.cuda.launch_dependents()
        return moe_align
    return moe_align


def make_permute(dtype="bfloat16", hidden=HIDDEN):
    """``moe_permute(x (T, hidden), sorted_ids (P,), meta (4,), xp (P, hidden))``: ``xp[r] =
    x[sorted_ids[r]]``, zero rows for padding, rows past ``meta[1]`` untouched."""
    check_dtype(dtype, "moe_permute")
    rows = PERMUTE_ROWS

    @Ax.kernel(name=f"moe_permute_{dtype}", outputs=("xp",), threads=256, dynamic=("T", "P"))
    def moe_permute():
        @T.prim_func
        def moe_permute(x_: T.handle, sorted_: T.handle, meta: T.Buffer((4,), "int32"), xp_: T.handle):
            n_tok = T.int32()
            P = T.int32()
            X_ = T.match_buffer(x_, (n_tok, hidden), dtype, align=16)
            S_ = T.match_buffer(sorted_, (P,), "int32")
            XP_ = T.match_buffer(xp_, (P, hidden), dtype, align=16)
            Ax.cuda.programmatic_launch()
            bx, tx = Ax.launch([P // rows], 256)
            Ax.cuda.grid_wait()
            X = Ax.param(static_rows(X_, 2, hidden), name="x")
            XP = Ax.view(Ax.param(static_rows(XP_, rows, hidden), name="xp"), S[(rows, hidden)], (rows, hidden),
                         base=bx * (rows * hidden))
            ix = Ax.view(Ax.param(static_rows(S_, rows), name="sorted_ids"), S[rows], (rows,), base=bx * rows)
            with Ax.guard(bx * rows < meta[1]):
                gather(XP, X, ix)
            Ax.cuda.launch_dependents()
        return moe_permute
    return moe_permute


def combine_split(hidden):
    """``(threads, chunks)`` of the combine for rows of ``hidden`` elements: each thread moves
    ``chunks`` vectors of 8 (16 bytes) per row, ``threads · chunks · 8 = hidden``, with the fewest
    chunks that keep ``threads`` at most :data:`COMBINE_THREADS` (a row is covered exactly, so no
    thread is predicated off)."""
    if hidden % COMBINE_VEC:
        raise ValueError(f"moe_combine: hidden={hidden} must be a multiple of {COMBINE_VEC} (16-byte vectors)")
    vectors = hidden // COMBINE_VEC
    chunks = next(c for c in range(-(-vectors // COMBINE_THREADS), vectors + 1) if vectors % c == 0)
    return vectors // chunks, chunks


def _weighted_rows(acc, W, Y, pos, bx, topk, group, threads, chunks, dtype):
    """``acc += Σ_k W[bx, k] · y[pos[bx, k]]`` (this thread's ``chunks`` vectors of every row), the
    ``topk`` rows gathered into registers ``group`` at a time: a loop over the whole groups (none
    where one group holds them all) and the remaining rows after it."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as IRB
    vec = COMBINE_VEC

    def rows_from(k0, rows):
        R = Ax.registers((rows, Y.shape[1]), dtype, f"S[({rows},{chunks},{threads},{vec}):({chunks * vec},{vec},1@tx,1)]",
                         name="rows")
        gather(R, Y, Ax.view(pos, S[rows], (rows,), base=bx * topk + k0))
        rv = IRBuilder.name("rv", R.flat())
        with IRB.unroll(rows) as k:
            with IRB.unroll(chunks * vec) as j:
                T.buffer_store(acc, acc[j] + W[bx, k0 + k] * T.cast(rv[k * chunks * vec + j], "float32"), [j])

    whole, rest = divmod(topk, group)
    if whole == 1:
        rows_from(0, group)
    elif whole:
        with IRB.serial(whole) as g:
            rows_from(g * group, group)
    if rest:
        rows_from(whole * group, rest)


def make_combine(dtype="bfloat16", hidden=HIDDEN, topk=TOPK):
    """``moe_combine(y (P, hidden), pos (T, topk), weights (T, topk) fp32, out (T, hidden))``:
    ``out[t] = Σ_k weights[t, k] · y[pos[t, k]]`` summed in fp32, one CTA per token
    (:func:`combine_split`'s threads).  The rows are gathered into registers
    :data:`COMBINE_ROW_WORDS` 32-bit words per thread at a time (all ``topk`` rows at once when
    they fit, else in groups), each group summed before the next is loaded."""
    check_dtype(dtype, "moe_combine")
    vec = COMBINE_VEC
    threads, c = combine_split(hidden)
    group = max(1, min(topk, COMBINE_ROW_WORDS * 2 // (c * vec)))
    out_l = f"S[({c},{threads},{vec}):({vec},1@tx,1)]"

    @Ax.kernel(name=f"moe_combine_{dtype}", outputs=("out",), threads=threads, dynamic=("T", "P"))
    def moe_combine():
        @T.prim_func
        def moe_combine(y_: T.handle, pos_: T.handle, w_: T.handle, out_: T.handle):
            n_tok = T.int32()
            P = T.int32()
            Y_ = T.match_buffer(y_, (P, hidden), dtype, align=16)
            POS_ = T.match_buffer(pos_, (n_tok, topk), "int32")
            W = T.match_buffer(w_, (n_tok, topk), "float32")
            O_ = T.match_buffer(out_, (n_tok, hidden), dtype, align=16)
            Ax.cuda.programmatic_launch()
            bx, tx = Ax.launch([n_tok], threads)
            Ax.cuda.grid_wait()
            Y = Ax.param(static_rows(Y_, 2, hidden), name="y")
            pos = Ax.param(static_rows(POS_, 1, topk), name="pos")
            O = Ax.view(Ax.param(static_rows(O_, 1, hidden), name="out"), S[(1, hidden)], (1, hidden), base=bx * hidden)
            acc = T.alloc_buffer((c * vec,), "float32", scope="local")
            res = Ax.registers((1, hidden), dtype, out_l, name="res")
            for j in T.unroll(c * vec):
                acc[j] = T.float32(0)
            _weighted_rows(acc, W, Y, pos, bx, topk, group, threads, c, dtype)
            ov = res.flat()
            for j in T.unroll(c * vec):
                ov[j] = T.cast(acc[j], dtype)
            Ax.copy(O, res)
            Ax.cuda.launch_dependents()
        return moe_combine
    return moe_combine


def builds(dtypes=DTYPES):
    """``{artifact name: kernel}`` for every artifact of :func:`kernels.moe_host.artifact_names`."""
    out = {}
    for dtype in dtypes:
        out[f"moe_route_{dtype}"] = make_route(dtype)
        out[f"moe_permute_{dtype}"] = make_permute(dtype)
        out[f"moe_combine_{dtype}"] = make_combine(dtype)
        for cfg, kw in CONFIGS.items():
            if gemm_config(cfg) != cfg:         # its GEMMs are another configuration's
                continue
            if kw.get("fused"):
                out[f"moe_experts_{dtype}_{cfg}"] = make_experts(
                    dtype, name=f"moe_experts_{dtype}_{cfg}", **{k: v for k, v in kw.items() if k != "fused"})
                continue
            kw1, kw2 = gemm_keywords(cfg)
            out[f"moe_gemm1_{dtype}_{cfg}"] = make_gemm1(dtype, name=f"moe_gemm1_{dtype}_{cfg}", **kw1)
            out[f"moe_gemm2_{dtype}_{cfg}"] = make_gemm2(dtype, name=f"moe_gemm2_{dtype}_{cfg}", **kw2)
    for kw in CONFIGS.values():
        split = kw.get("split_align", False)
        out[align_name(kw["bm"], kw.get("pad"), split)] = (make_align_split if split else make_align)(kw["bm"], kw.get("pad"))
    return out
