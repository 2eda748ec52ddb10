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
   expert's segment padded to the GEMM tile's ``bm`` rows (:func:`axe.schedules.grouped.segments`
   is the law), ``sorted_ids`` (the token of every padded row, -1 for padding), the expert of
   every m-tile, ``meta`` = (m-tiles, padded rows) and ``pos`` (the padded row of every
   (token, k)).  Experts with no token get no rows and no tiles.
3. :func:`make_permute` — ``xp[r] = x[sorted_ids[r]]`` (zero rows for padding): the ``gather``
   operator (:mod:`axe.ops.gather`, schedule ``vector_gather``: 16-byte rows loads and stores).
4. :func:`make_grouped_gemm` with ``act="silu_mul"`` — grouped GEMM 1: every m-tile of ``xp``
   times its expert's gate and up rows, ``h = SiLU(gate) · up`` in the epilogue (P × 768).
5. :func:`make_grouped_gemm` with ``act=None`` — grouped GEMM 2: ``y = h · w2[e]ᵀ`` (P × 2048).
6. :func:`make_combine` — ``out[t] = Σ_k weights[t, k] · y[pos[t, k]]`` in fp32: the ``gather``
   operator into registers (8 rows per token), then a weighted sum.

The grouped GEMM is :mod:`kernels.gemm`'s cooperative Hopper design with a runtime tile count:
persistent CTAs walk a :class:`~axe.lang.TileSchedule` whose m-extent is ``meta[0]``
(read in the kernel), a producer warpgroup issues TMA loads of the A tile (rows of the padded
matrix, a tensor map encoded from the tensor at launch) and of the expert's B rows from the
3-D weight tensor (box ``(1, rows, 64)`` at the tile's expert), consumer warpgroups of 64 rows
run ``Ax.gemm`` → wgmma and store through ``stmatrix`` + TMA.  For GEMM 1 the B tile holds
``bn/2`` gate rows and the matching ``bn/2`` up rows (two TMA boxes), so a thread's accumulator
holds gate column c and up column c together (wgmma's fragment repeats every 8 columns) and
SiLU·up is one in-register ``Ax.elementwise``.

Every kernel is launched programmatically (``Ax.cuda.programmatic_launch``): it may start while
the one before it in the stream finishes, waits (``grid_wait``) before it reads that kernel's
output, and lets the next one launch once its own work is issued (``launch_dependents``), so the
launches and set-up of the layer's kernels overlap their predecessors' tails.

Tiles: ``bm`` = 64 (one consumer warpgroup) for small T, where the layer is bound by streaming
the active experts' weights (each 2048×1536 + 768×2048, 9.4 MB in bf16) and small m-tiles waste
the least tensor work; ``bm`` = 128 (two consumers) and ``bn`` = 256 beyond.

The configurations of :data:`kernels.moe_host.CONFIGS` vary this layer: ``pad`` (segments padded
to 16 rows, tiles reaching into the next experts' rows and storing only their own:
:func:`axe.schedules.grouped.tiles`), ``gather_rows`` (GEMM 1 gathers x's rows itself, no
permute kernel), ``bn1`` (GEMM 1's own tile width) and ``fused`` (:func:`make_experts`: both
GEMMs in one persistent launch, GEMM 2's tiles pipelined behind GEMM 1's).  The grouped GEMM's
pieces (:class:`GroupedGemm`, :class:`Ring`) serve both kernels.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from axe.lang.gather import gather
from axe.layout import S
from axe.schedules.emit import computed_once, guard
from axe.backends.cuda.schedules.wgmma import d_fragment
from kernels.parts.epilogues.handover import publish as sk_publish, take as sk_take
from kernels.parts.schedulers.stream_k import StreamK
from kernels.parts.tiles import swizzled, unbake_rows
from kernels.moe_host import CONFIGS, DTYPES, E, HIDDEN, INTER, TOPK, align_name, gemm_config, gemm_keywords

BK, SMS, GROUP = 64, 132, 16
PRODUCER_REGS, CONSUMER_REGS = 40, 232
GATHER_REGS = 56         # a producer warp that gathers rows computes addresses for 16 cp.async per stage
GATHER_WARPS = 4         # the producer warpgroup's four warps gather (8 chunks each at bm=128)
ROUTE_WARPS = 4          # tokens per routing CTA (one warp each)
ALIGN_THREADS = 1024     # the permutation's one CTA
ALIGN_SPLIT_THREADS = 512   # the split alignment (make_align_split): threads per CTA,
ALIGN_SPLIT_TOKENS = 128    # tokens per CTA (at least),
ALIGN_SPLIT_CTAS = 64       # and CTAs at most (co-resident: each waits for all the others' histograms)
PERMUTE_ROWS = 16        # rows gathered per permute CTA (256 threads: 16 chunks of 16 bytes each)
STORE_ROWS = 16          # rows per epilogue store box where tiles overlap the next segment
COMBINE_THREADS = 256
SK_PART = 64             # stream-K: partial-sum columns added per step (a 64 × 64 fp32 register block)


def _check_dtype(dtype, what):
    if dtype not in DTYPES:
        raise ValueError(f"{what}: dtype must be one of {DTYPES}, got {dtype!r}")


def _rows(buf, rows, cols=None):
    """``buf``'s data seen as a static ``(rows, cols)`` matrix: axe tensors have static shapes,
    and these operands are reached through TMA (coordinates are slice starts, bounds come from
    the tensor map encoded off the real tensor) or by row index, so the view holds a few rows."""
    from tvm.script.ir_builder import IRBuilder
    shape = (rows,) if cols is None else (rows, cols)
    return IRBuilder.name(buf.name, T.decl_buffer(shape, buf.dtype, data=buf.data))


def make_route(dtype="bfloat16", experts=E, topk=TOPK):
    """Routing: ``moe_route(logits (T, experts), ids (T, topk) int32, weights (T, topk) fp32)``."""
    _check_dtype(dtype, "moe_route")
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
    :func:`axe.schedules.grouped.tiles`).  ``write``: where meta and the tables are written
    (default: this CTA; every CTA of a split alignment scans, one writes)."""
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
                    with guard(write):
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
    :func:`axe.schedules.grouped.tiles`.  ``P`` and ``MT`` are the capacities the caller allocated
    (:func:`kernels.moe_host.Layer`); ``meta`` = (m-tiles, padded rows, 0, 0)."""
    pad = pad or bm
    if experts % 32 or experts > ALIGN_THREADS or pad % 16 or bm % pad:
        raise ValueError(f"moe_align: experts={experts} must be a multiple of 32 up to {ALIGN_THREADS}, "
                         f"pad={pad} a multiple of 16 that divides bm={bm}")
    nt = ALIGN_THREADS

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
            cnt = T.alloc_buffer((experts,), "int32", scope="shared")
            cur = T.alloc_buffer((experts,), "int32", scope="shared")
            off = T.alloc_buffer((experts + 1,), "int32", scope="shared")
            toff = T.alloc_buffer((experts + 1,), "int32", scope="shared")
            n = n_tok * topk
            if tx < experts:
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
            _align_scan(cnt, off, cur, toff, meta, tiles, trows, tx, bm, pad, experts)
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
    if experts % 32 or experts > ALIGN_SPLIT_THREADS or pad % 16 or bm % pad:
        raise ValueError(f"moe_align: experts={experts} must be a multiple of 32 up to {ALIGN_SPLIT_THREADS}, "
                         f"pad={pad} a multiple of 16 that divides bm={bm}")
    nt, gmax, tpc = ALIGN_SPLIT_THREADS, ALIGN_SPLIT_CTAS, ALIGN_SPLIT_TOKENS

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
            cnt = T.alloc_buffer((experts,), "int32", scope="shared")       # this CTA's, then the totals
            mine = T.alloc_buffer((experts,), "int32", scope="shared")      # rows before this CTA's, per expert
            cur = T.alloc_buffer((experts,), "int32", scope="shared")
            off = T.alloc_buffer((experts + 1,), "int32", scope="shared")
            toff = T.alloc_buffer((experts + 1,), "int32", scope="shared")
            acc = T.alloc_buffer((2,), "int32", scope="local")
            if tx < experts:
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
            _align_scan(cnt, off, cur, toff, meta, tiles, trows, tx, bm, pad, experts, write=bx == 0)
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
    _check_dtype(dtype, "moe_permute")
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
            X = Ax.param(_rows(X_, 2, hidden), name="x")
            XP = Ax.view(Ax.param(_rows(XP_, rows, hidden), name="xp"), S[(rows, hidden)], (rows, hidden),
                         base=bx * (rows * hidden))
            ix = Ax.view(Ax.param(_rows(S_, rows), name="sorted_ids"), S[rows], (rows,), base=bx * rows)
            with guard(bx * rows < meta[1]):
                gather(XP, X, ix)
            Ax.cuda.launch_dependents()
        return moe_permute
    return moe_permute


def make_combine(dtype="bfloat16", hidden=HIDDEN, topk=TOPK):
    """``moe_combine(y (P, hidden), pos (T, topk), weights (T, topk) fp32, out (T, hidden))``:
    ``out[t] = Σ_k weights[t, k] · y[pos[t, k]]`` summed in fp32, one CTA per token."""
    _check_dtype(dtype, "moe_combine")
    vec = 8                                  # 16 bytes of 16-bit values per thread and row chunk
    width = COMBINE_THREADS * vec
    if hidden % width:
        raise ValueError(f"moe_combine: hidden={hidden} must be a multiple of {width}")
    c = hidden // width
    rows_l = f"S[({topk},{c},{COMBINE_THREADS},{vec}):({c * vec},{vec},1@tx,1)]"
    out_l = f"S[({c},{COMBINE_THREADS},{vec}):({vec},1@tx,1)]"

    @Ax.kernel(name=f"moe_combine_{dtype}", outputs=("out",), threads=COMBINE_THREADS, dynamic=("T", "P"))
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
            bx, tx = Ax.launch([n_tok], COMBINE_THREADS)
            Ax.cuda.grid_wait()
            Y = Ax.param(_rows(Y_, 2, hidden), name="y")
            ix = Ax.view(Ax.param(_rows(POS_, 1, topk), name="pos"), S[topk], (topk,), base=bx * topk)
            O = Ax.view(Ax.param(_rows(O_, 1, hidden), name="out"), S[(1, hidden)], (1, hidden), base=bx * hidden)
            R = Ax.registers((topk, hidden), dtype, rows_l, name="rows")
            acc = T.alloc_buffer((c * vec,), "float32", scope="local")
            res = Ax.registers((1, hidden), dtype, out_l, name="res")
            gather(R, Y, ix)
            rv = R.flat()
            ov = res.flat()
            for j in T.unroll(c * vec):
                acc[j] = T.float32(0)
            for k in T.unroll(topk):
                for j in T.unroll(c * vec):
                    acc[j] = acc[j] + W[bx, k] * T.cast(rv[k * c * vec + j], "float32")
            for j in T.unroll(c * vec):
                ov[j] = T.cast(acc[j], dtype)
            Ax.copy(O, res)
            Ax.cuda.launch_dependents()
        return moe_combine
    return moe_combine


class GroupedGemm:
    """One grouped GEMM's pieces, for a persistent kernel to string together: the producer's load
    of a pipeline iteration, a consumer warpgroup's wgmma of one, and a tile's epilogue, over the
    ring of pipeline slots and the staging buffers of :class:`Ring`.  The arguments are
    :func:`make_grouped_gemm`'s (which documents them)."""

    def __init__(self, n, k, dtype, bm, bn, bk, act, pad, gather_rows):
        if bm not in (64, 128) or bn not in (96, 128, 256) or act not in (None, "silu_mul") or (bn == 96 and not act):
            raise ValueError(f"moe_gemm: bm must be 64 or 128, bn 128 or 256 (or 96 with silu_mul: 48 gate + 48 up "
                             f"rows), act None or 'silu_mul' (got {bm}, {bn}, {act!r})")
        self.pad = pad = pad or bm
        if pad % STORE_ROWS or bm % pad:
            raise ValueError(f"moe_gemm: pad={pad} must be a multiple of {STORE_ROWS} that divides bm={bm}")
        self.n, self.k, self.dtype, self.bm, self.bn, self.bk, self.act = n, k, dtype, bm, bn, bk, act
        self.gather_rows = gather_rows
        self.overlap = pad < bm                   # tiles reach past their segment: store only own rows
        self.half = bn // 2 if act else bn        # output columns per tile
        self.n_out = n // 2 if act else n
        if self.n_out % self.half or k % bk:
            raise ValueError(f"moe_gemm: n_out={self.n_out} must be a multiple of {self.half} and k={k} of {bk}")
        self.consumers = bm // 64
        self.n_tiles, self.k_iters = self.n_out // self.half, k // bk
        if self.k_iters < 2:        # the mainloop's first and last k-blocks are distinct iterations
            raise ValueError(f"moe_gemm: k={k} is a single k-block of bk={bk}; use bk <= {k // 2}")
        self.chunk = min(self.half, 128)          # output columns per store chunk (one 16 KiB buffer)
        # the staging buffer: 64-column swizzled blocks, or (a chunk of 48: bn = 96) plain rows, which
        # TMA stores unswizzled and stmatrix writes at a 16-byte-aligned pitch
        self.swizzled_stage = self.chunk % 64 == 0
        # arrivals per slot: one per TMA copy (expect_tx), or one per producer thread for the gather
        self.copies = (2 if act else 1) + (32 * GATHER_WARPS if gather_rows else 1)
        self.acc_layout, self.out_layout = d_fragment(bn, "tx"), d_fragment(self.half, "tx")
        self.ring = None                          # the Ring this GEMM's tiles live in (it sets this)

    def a_operands(self, A_, S_, A_map):
        """``(A, sorted_ids)`` as the kernel's parameters: A's rows through TMA (``A_map``), or
        with ``gather_rows`` x by index, sorted_ids then read (without, A stands in for it and
        sorted_ids stays unused, so TVM drops the parameter)."""
        if not self.gather_rows:
            A = Ax.param(_rows(A_, self.bm, self.k), tensormap=A_map, name="A")
            return A, A
        return Ax.param(_rows(A_, 2, self.k), name="x"), Ax.param(_rows(S_, self.bm), name="sorted_ids")

    def tile(self, pool, at, shape, lead=()):
        return Ax.view(pool, swizzled(*shape, lead), tuple(lead) + tuple(shape), base=at)

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
        bn, bk, half = self.bn, self.bk, self.half
        s, k0 = pipe.slot(i), kb * bk
        at = self.ring.b_at + s * self.ring.b_slot
        if self.act:    # gate rows then the matching up rows (rows [h·bn/2, (h+1)·bn/2) of every column
            # block of the (bn, bk) tile): accumulator columns c and c + bn/2 pair up
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
            with guard(one):
                T.evaluate(T.ptx.mbarrier.arrive.shared.b64(pipe.full.ptr(s), T.uint32(extra)))

    def mma(self, pool, pipe, acc, wg, i, accumulate, leader):
        """Consumer: wait for iteration i's slot, wgmma this warpgroup's 64 rows, release it."""
        ring = self.ring
        s = pipe.slot(i)
        pipe.wait(i)
        if self.gather_rows:    # cp.async wrote A through the generic proxy; wgmma reads it through the async one
            Ax.cuda.fence_proxy_async()
        a = self.tile(pool, ring.a_at + s * ring.a_slot, (self.bm, self.bk))[wg * 64:(wg + 1) * 64, :]
        b = Ax.permute(self.tile(pool, ring.b_at + s * ring.b_slot, (self.bn, self.bk)), (1, 0))   # the K×N view
        Ax.gemm(acc, a, b, accumulate=accumulate, wait=0)
        pipe.release(i, pred=leader)

    def mainloop(self, pool, pipe, acc, wg, base, leader):
        """A consumer warpgroup's k-loop over one tile, pipeline iterations ``base ..``: the first
        k-block overwrites the accumulator, the last one is waited for in straight-line code (so
        the accumulator is complete for the epilogue).  (:func:`make_grouped_gemm` spells the same
        loop in its TVMScript, which binds ``base`` to a local: its measured CUDA stays as it was.)"""
        from tvm.script.ir_builder import tirx as IRB
        self.mma(pool, pipe, acc, wg, base, False, leader)
        with IRB.serial(1, self.k_iters - 1) as kb:
            self.mma(pool, pipe, acc, wg, base + kb, True, leader)
        self.mma(pool, pipe, acc, wg, base + self.k_iters - 1, True, leader)

    def epilogue(self, acc, out, pool, C, wg, leader, r0, own, n_blk, partial=None, add_if=None, part=None):
        """Activation (or cast) in registers, then ``stmatrix`` + TMA store chunk by chunk through
        this warpgroup's buffer (each chunk waits until the previous store has read it); with
        ``overlap`` only the tile's ``own`` rows go out, in boxes of ``STORE_ROWS`` (segments are
        padded to a multiple of it, so the last box ends inside the segment).  ``partial``: a
        stream-K head's fp32 sum of the tile's other k-blocks (global, 64 × bn), added into the
        accumulator where ``add_if`` holds, ``part``'s columns at a time, before the activation."""
        chunk, half, dtype = self.chunk, self.half, self.dtype
        if partial is not None:
            pn = part.shape[1]
            for c in range(self.bn // pn):
                cols = slice(c * pn, (c + 1) * pn)
                with guard(add_if):
                    Ax.copy(part, partial[:, cols])
                    Ax.elementwise(acc[:, cols], lambda a, q: a + q, acc[:, cols], part)
        if self.act:
            Ax.elementwise(out, lambda g, u: T.cast(g / (T.float32(1) + T.exp(-g)) * u, dtype),
                           acc[:, 0:half], acc[:, half:self.bn])
        else:
            Ax.cast(out, acc)
        row, at = r0 + wg * 64, self.ring.c_at + wg * self.ring.c_slot

        def tma_store(j, buf):
            n0 = n_blk * half + j * chunk
            if not self.overlap:
                Ax.copy(C[row:row + 64, n0:n0 + chunk], buf, fence=False, wait=False)
                return
            h = STORE_ROWS
            for q in range(64 // h):     # rows q·h .. of the staging tile (its column blocks hold 64 rows each)
                part = Ax.view(pool, self.stage(h), (h, chunk), base=at + q * h * min(chunk, 64))
                with guard(q * h < own - wg * 64):
                    Ax.copy(C[row + q * h:row + (q + 1) * h, n0:n0 + chunk], part, fence=False, wait=False)
        Ax.cuda.staged_store(out, chunk, lambda j: Ax.view(pool, self.stage(64), (64, chunk), base=at), tma_store,
                             1 + wg, leader)

    def stage(self, rows):
        """The layout of ``rows`` rows of a warpgroup's staging buffer (``rows < 64``: a row range of
        it, whose column blocks stay 64 rows apart)."""
        return swizzled(rows, self.chunk, panel=64 * 64) if self.swizzled_stage else S[(rows, self.chunk)]


class Ring:
    """The shared-memory plan of a kernel running one or more :class:`GroupedGemm`: ``stages``
    pipeline slots, each an A tile and a B tile as large as the largest GEMM's, then one staging
    buffer per consumer warpgroup as large as the largest chunk.  Each GEMM reads its offsets from
    the ring (``g.ring``), which the ring sets."""

    def __init__(self, gemms, stages):
        self.a_slot = max(g.bm * g.bk for g in gemms)
        self.b_slot = max(g.bn * g.bk for g in gemms)
        self.c_slot = max(64 * g.chunk for g in gemms)
        self.a_at, self.b_at = 0, stages * self.a_slot
        self.c_at = self.b_at + stages * self.b_slot
        self.consumers = max(g.consumers for g in gemms)
        self.elems = self.c_at + self.consumers * self.c_slot
        if self.elems * 2 > 227 * 1024:
            raise ValueError(f"moe_gemm: {stages} stages of {self.a_slot} + {self.b_slot} elements and the epilogue "
                             f"need {self.elems * 2 // 1024} KiB of shared memory, more than 227 KiB")
        self.copies = max(g.copies for g in gemms)   # the arrivals each slot's full barrier expects
        for g in gemms:
            g.ring = self

    def arrivals(self, g):
        """``(per producer thread, by one thread)``: the plain arrivals ``g``'s loads add so that
        every slot's barrier sees :attr:`copies` — one per producer thread where another GEMM of
        the ring gathers and ``g`` does not, and the rest of the difference by one thread."""
        missing = self.copies - g.copies
        per_thread = 1 if missing >= 32 * GATHER_WARPS else 0
        return per_thread, missing - per_thread * 32 * GATHER_WARPS



def make_grouped_gemm(n, k, dtype="bfloat16", bm=128, bn=256, stages=4, act=None, experts=E, sms=SMS, name=None,
                      bk=BK, pad=None, gather_rows=False, ctas_per_sm=1, stream_k=False):
    """A grouped GEMM over the padded, expert-grouped rows: for every m-tile ``m`` of the
    ``meta[0]`` tiles, the ``bm`` rows from ``r = tile_rows[m, 0]``:
    ``C[r : r + own] = act(A[r : r + own] · B[tile_expert[m]]ᵀ)``, ``own = tile_rows[m, 1]``.

    ``moe_gemm(A (P, k), B (experts, n, k), C (P, n_out), sorted_ids, tile_expert (MT,), tile_rows
    (MT, 2), meta (4,))``; ``act=None``: ``n_out = n``; ``act="silu_mul"``: B's rows are gate rows
    [0, n/2) then up rows [n/2, n), ``C = SiLU(A·gateᵀ) · (A·upᵀ)`` and ``n_out = n/2``.

    ``bm``: 64 (one consumer warpgroup) or 128 (two); ``bn``: columns of B per tile (for
    ``silu_mul``, bn/2 gate + bn/2 up); ``bk``: K elements per pipeline stage (a multiple of 64,
    one 128-byte swizzle panel each: longer stages read longer runs of each weight row);
    ``pad``: the rows the segments are padded to (default ``bm``).  With a smaller ``pad`` a tile
    reaches into the next experts' rows, computes them and stores only its own rows, 16 at a time
    (:func:`axe.schedules.grouped.tiles`), so padding costs up to ``pad - 1`` rows per expert in
    every buffer the layer moves instead of ``bm - 1``.

    ``ctas_per_sm``: persistent CTAs resident on each SM (``__launch_bounds__(threads, ctas_per_sm)``,
    no ``setmaxnreg``): with 2, one CTA's loads go on while the other runs its epilogue, at the
    price of half the shared memory each (``stages`` must fit it; on an H200 it did not help).

    ``stream_k``: the tiles of the last whole round and the partial one (the count is read on the
    device) are split over all CTAs in whole k-blocks (:class:`kernels.parts.schedulers.stream_k.StreamK`), so no SM
    streams the last tiles alone while the others idle; a tile split between two CTAs is finished
    by the one with its first k-blocks, which adds the other's fp32 partial (scratch workspace,
    bounded flag; ``kernels.parts.epilogues.handover``) before the epilogue.  Below one tile per
    CTA nothing is split.

    ``gather_rows``: A is the unpermuted ``x`` (T, k) and the producer warpgroup gathers each tile's
    rows itself (``A[r] = x[sorted_ids[r]]``, zeros where ``sorted_ids[r] < 0``) with ``cp.async``
    into the swizzled stage, arriving on the stage's barrier once per thread — the permutation
    kernel and its padded copy of x disappear (``sorted_ids`` holds -1 for ``bm`` rows past the
    padded ones, so a tile reaching past the last segment reads padding); without it
    ``sorted_ids`` is unused."""
    _check_dtype(dtype, "moe_gemm")
    g = GroupedGemm(n, k, dtype, bm, bn, bk, act, pad, gather_rows)
    stream_k = bool(stream_k)       # a Python flag for the script (variants pass 0/1)
    if stream_k and (g.k_iters < 4 or ctas_per_sm != 1):
        raise ValueError(f"moe_gemm: stream_k needs at least 4 k-blocks (k={k}, bk={bk}) and one CTA per SM")
    ring = Ring([g], stages)
    threads = 128 * (1 + g.consumers)
    # setmaxnreg moves registers between the roles of one CTA per SM; with more, each keeps its share
    producer_regs, consumer_regs = _role_registers(gather_rows, g.consumers) if ctas_per_sm == 1 else (None, None)
    ctas = sms * ctas_per_sm
    kname = name or f"moe_gemm_{act or 'plain'}_{dtype}_bm{bm}_bn{bn}_{n}x{k}"
    n_out, n_tiles, k_iters = g.n_out, g.n_tiles, g.k_iters

    def factory():
        from axe.schedules.context import current_context
        from tvm.script.ir_builder import tirx as IRB
        cta = {}

        def whole_tiles(sched, bx, role):
            """The tiles this CTA runs whole, one after another: all of its tiles, or with
            ``stream_k`` those before its stream-K range.  With ``stream_k`` it also names, once
            in ``role``'s code (``IRB.Bind``), the split of the tile count read on the device and
            this CTA's range of its k-blocks, ``cta[role] = (split, b0, b1, dp)``, for
            :func:`sk_loads` and :func:`sk_pieces`."""
            if not stream_k:
                return sched.count(bx)
            sk = StreamK(sched.tiles, k_iters, ctas, T.if_then_else, computed_once)
            cta[role] = (sk, computed_once(sk.bound(bx, T.if_then_else)),
                         computed_once(sk.bound(bx + 1, T.if_then_else)), computed_once(sk.dp_count(bx)))
            return cta[role][3]

        def declare_workspace(W_, F_):
            """Stream-K: the scratch partials (fp32, a 64-row block per CTA and warpgroup) and their
            flags; without it nothing (the parameters then leave the signature)."""
            if stream_k:
                cta["W"], cta["F"] = Ax.param(W_, scratch=True), Ax.param(F_, scratch=True)

        def sk_loads(pool, pipe, A, B, SRT, sched, trows, tiles):
            """Producer: this CTA's stream-K pieces' k-blocks, continuing its pipeline iterations
            (the tile's coordinates found once per piece)."""
            sk, b0, b1, dp = cta["producer"]
            t0, t1 = sk.tiles(b0, b1)
            with IRB.serial(t0, t1) as t:
                k0, k1 = sk.piece(t, b0, b1, T.max, T.min)
                m_blk, n_blk = sched.coords(sk.dp_tiles + t)
                base = dp * k_iters + t * k_iters - b0      # the iteration of the tile's k-block 0
                with IRB.serial(k0, k1) as kb:
                    g.load(pool, pipe, A, B, SRT, base + kb, trows[m_blk, 0], n_blk, tiles[m_blk], kb)

        def sk_pieces(pool, pipe, acc, out, part, C, sched, bx, wg, leader, trows):
            """Consumer: this CTA's stream-K pieces (at most three: a tail, whole tiles, a head).  A
            tail (``k0 > 0``) hands its partial to the CTA before it; a head (``k1 < k_iters``)
            waits for the next CTA's and adds it; a head or a whole tile is stored."""
            sk, b0, b1, dp = cta["consumer"]
            t0, t1 = sk.tiles(b0, b1)
            W, F = cta["W"], cta["F"]
            with IRB.serial(t0, t1) as t:
                k0, k1 = sk.piece(t, b0, b1, T.max, T.min)
                m_blk, n_blk = sched.coords(sk.dp_tiles + t)
                base = dp * k_iters + t * k_iters - b0      # the iteration of the tile's k-block 0
                g.mma(pool, pipe, acc, wg, base + k0, False, leader)
                with IRB.serial(k0 + 1, k1) as kb:
                    g.mma(pool, pipe, acc, wg, base + kb, True, leader)
                with IRB.If(k0 > 0):
                    with IRB.Then():
                        sk_publish(W, F, bx * g.consumers + wg, acc, leader, wg)
                    with IRB.Else():
                        partial = sk_take(W, F, (bx + 1) * g.consumers + wg, leader, wg, pred=k1 < k_iters)
                        g.epilogue(acc, out, pool, C, wg, leader, trows[m_blk, 0], trows[m_blk, 1], n_blk,
                                   partial, k1 < k_iters, part)

        @T.prim_func
        # sorted_ids (srt_) is used only by gather_rows, A_map only without it: TVM drops the unused one
        def moe_gemm(a_: T.handle, B_: T.Buffer((experts, n, k), dtype), c_: T.handle, srt_: T.handle,
                     tiles_: T.handle, trows_: T.handle, meta: T.Buffer((4,), "int32"), A_map: T.handle("tensormap"),
                     B_map: T.handle("tensormap"), C_map: T.handle("tensormap"),
                     W_: T.Buffer((ctas * g.consumers * 64, bn), "float32"), F_: T.Buffer((ctas * g.consumers,), "int32")):
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
            bx, tx = Ax.launch([T.min(ctas, MT * n_tiles)], threads)
            A, SRT = g.a_operands(A_, S_, A_map)
            B = Ax.param(B_, tensormap=B_map)
            C = Ax.param(_rows(C_, bm, n_out), tensormap=C_map, name="C")
            declare_workspace(W_, F_)
            pool = Ax.cuda.dynamic_shared(ring.elems, dtype)
            pipe = Ax.cuda.pipeline(stages, producers=ring.copies, consumers=g.consumers)
            Ax.cuda.grid_wait()     # set-up above overlaps the previous kernel; its outputs are read below
            # the m-extent is the permutation's tile count, read on the device
            sched = Ax.TileSchedule(meta[0], n_tiles, ctas, GROUP)
            with Ax.cuda.role(0, 1, regs=producer_regs):
                with Ax.warps(0, GATHER_WARPS if gather_rows else 1):
                    for it in T.serial(whole_tiles(sched, bx, "producer")):
                        m_blk, n_blk = sched.coords(sched.tile(bx, it))
                        for kb in T.serial(k_iters):
                            g.load(pool, pipe, A, B, SRT, it * k_iters + kb, trows[m_blk, 0], n_blk, tiles[m_blk], kb)
                    if stream_k:
                        sk_loads(pool, pipe, A, B, SRT, sched, trows, tiles)
                # every load is issued: the next kernel may launch while the last tiles finish
                Ax.cuda.launch_dependents()
            with Ax.cuda.role(1, 1 + g.consumers, regs=consumer_regs, each=True):
                wg = Ax.cuda.warpgroup_index()
                leader = tx % 128 == 0
                acc = Ax.registers((64, bn), "float32", g.acc_layout, name="acc")
                out = Ax.registers((64, g.half), dtype, g.out_layout, name="out")
                for it in T.serial(whole_tiles(sched, bx, "consumer")):
                    m_blk, n_blk = sched.coords(sched.tile(bx, it))
                    base = it * k_iters
                    # first k-block overwrites; the last one is waited for in straight-line code
                    g.mma(pool, pipe, acc, wg, base, False, leader)
                    for kb in T.serial(1, k_iters - 1):
                        g.mma(pool, pipe, acc, wg, base + kb, True, leader)
                    g.mma(pool, pipe, acc, wg, base + k_iters - 1, True, leader)
                    g.epilogue(acc, out, pool, C, wg, leader, trows[m_blk, 0], trows[m_blk, 1], n_blk)
                if stream_k:
                    part = Ax.registers((64, SK_PART), "float32", d_fragment(SK_PART, "tx"), name="part")
                    sk_pieces(pool, pipe, acc, out, part, C, sched, bx, wg, leader, trows)
                Ax.cuda.tma_store_wait(0, pred=leader)
        unbake_rows(current_context().tensormaps, ("C_map",) if gather_rows else ("A_map", "C_map"))
        # without stream-K the workspace and flags leave the call signature
        return moe_gemm if stream_k else Ax.without_params(moe_gemm, ("W_", "F_"))

    return Ax.Kernel(kname, factory, outputs=("C",),
                     meta={"n": n, "k": k, "dtype": dtype, "bm": bm, "bn": bn, "pad": g.pad, "act": act,
                           "gather_rows": gather_rows, "threads": threads})


def make_experts(dtype="bfloat16", bm=64, bn=128, bn1=None, stages=4, pad=16, gather_rows=False, experts=E,
                 sms=SMS, name=None, bk=BK):
    """Both grouped GEMMs in one persistent launch, GEMM 2 pipelined behind GEMM 1 tile by tile
    (the finer-grained pipeline): ``h = SiLU(A·gateᵀ)·(A·upᵀ)`` then ``y = h · w2[e]ᵀ`` for every
    m-tile, where a GEMM 2 tile of m-tile ``m`` starts as soon as the GEMM 1 tiles of ``m`` have
    stored their rows of h — while other CTAs still compute GEMM 1's last tiles — instead of after
    the whole first GEMM.

    ``moe_experts(A, w1 (experts, 2·inter, hidden), h (P, inter), w2 (experts, hidden, inter),
    y (P, hidden), sorted_ids, tile_expert, tile_rows, meta, ready (2, MT))``: A, sorted_ids and
    the tile tables as :func:`make_grouped_gemm` takes them (``gather_rows``: A is x); ``ready`` is a
    zero-filled int32 workspace the launch leaves zero-filled.

    Every CTA runs its share of GEMM 1's tiles, then of GEMM 2's (one persistent order over both).
    A consumer warpgroup that stored its rows of an h tile waits until they are written
    (``Ax.cuda.bulk_wait``) and counts them in ``ready[0, m]`` (``Ax.cuda.count_done``); the producer
    of a GEMM 2 tile waits until the count is complete — GEMM 1's ``n/bn1 ·`` warpgroups — before
    its TMA loads of h (``Ax.cuda.wait_count``: bounded; the last of m's GEMM 2 tiles resets the
    counts).  No CTA waits on a GEMM 1 tile that is not ahead of it in some CTA's order, so the
    wait always ends.  Both GEMMs share one pipeline ring (:class:`Ring`): its slots fit the larger
    tiles, and the GEMM whose loads arrive fewer times on a slot's barrier adds plain arrivals.

    Neither side idles on the protocol: a GEMM 2 tile's producer issues the weight loads of its
    first ``stages`` k-blocks before it waits for h, and a consumer counts a GEMM 1 tile after the
    next tile's k-loop (by then its stores are long written) — at once only for its last GEMM 1
    tile, which a GEMM 2 tile of its own CTA may be waiting for.  ``bk``: K elements per stage,
    both GEMMs."""
    _check_dtype(dtype, "moe_experts")
    g1 = GroupedGemm(2 * INTER, HIDDEN, dtype, bm, bn1 or bn, bk, "silu_mul", pad, gather_rows)
    g2 = GroupedGemm(HIDDEN, INTER, dtype, bm, bn, bk, None, pad, False)
    ring = Ring([g1, g2], stages)
    consumers = g1.consumers
    threads = 128 * (1 + consumers)
    producer_regs, consumer_regs = _role_registers(gather_rows, consumers)
    n1, n2, k1, k2 = g1.n_tiles, g2.n_tiles, g1.k_iters, g2.k_iters
    ahead = min(stages, k2)                 # GEMM 2 weight loads issued before the wait for h
    shared_acc = g1.bn == g2.bn             # one accumulator serves both GEMMs' tiles
    kname = name or f"moe_experts_{dtype}_bm{bm}_bn{g1.bn}x{bn}" + ("_gather" if gather_rows else "")

    def factory():
        from axe.schedules.context import current_context

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
            bx, tx = Ax.launch([T.min(sms, MT * (n1 + n2))], threads)
            A, SRT = g1.a_operands(A_, S_, A_map)
            W1 = Ax.param(W1_, tensormap=W1_map)
            W2 = Ax.param(W2_, tensormap=W2_map)
            H = Ax.param(_rows(H_, bm, INTER), tensormap=H_map, name="h")          # GEMM 1 stores it
            HA = Ax.param(_rows(H_, bm, INTER), tensormap=HA_map, name="h_rows")   # GEMM 2 loads it
            Y = Ax.param(_rows(Y_, bm, HIDDEN), tensormap=Y_map, name="y")
            ready = Ax.param(_rows(R_, 2), name="ready")     # flat: [0, MT) h parts written, [MT, 2 MT) readers
            pool = Ax.cuda.dynamic_shared(ring.elems, dtype)
            pipe = Ax.cuda.pipeline(stages, producers=ring.copies, consumers=consumers)
            Ax.cuda.grid_wait()     # set-up above overlaps the previous kernel; its outputs are read below
            grid = T.min(sms, MT * (n1 + n2))
            tiles1 = meta[0] * n1
            count = (meta[0] * (n1 + n2) - bx + grid - 1) // grid    # this CTA's tiles of both GEMMs
            first = (tiles1 - bx + grid - 1) // grid        # this CTA's GEMM 1 tiles come first
            sched1 = Ax.TileSchedule(meta[0], n1, grid, GROUP)
            sched2 = Ax.TileSchedule(meta[0], n2, grid, GROUP)
            with Ax.cuda.role(0, 1, regs=producer_regs):
                with Ax.warps(0, GATHER_WARPS if gather_rows else 1):
                    for it in T.serial(count):
                        if it < first:
                            m_blk, n_blk = sched1.coords(bx + it * grid)
                            for kb in T.serial(k1):
                                g1.load(pool, pipe, A, W1, SRT, it * k1 + kb, trows[m_blk, 0], n_blk, tiles[m_blk],
                                        kb, one=tx == 0)
                        else:
                            m2, n2_blk = sched2.coords(bx + it * grid - tiles1)
                            base2 = first * k1 + (it - first) * k2
                            # the weights need no other tile: the first slots' loads go out now
                            for kb in range(ahead):
                                pipe.acquire(base2 + kb)
                                g2.load_b(pool, pipe, W2, base2 + kb, n2_blk, tiles[m2], kb)
                            # h's rows of m-tile m2 are all written: GEMM 1's n1 tiles x warpgroups
                            Ax.cuda.wait_count(ready, m2, n1 * consumers, MT, n2, tx == 0)
                            for kb in range(ahead):
                                g2.load_a(pool, pipe, HA, SRT, base2 + kb, trows[m2, 0], kb)
                                g2.arrive(pipe, base2 + kb, tx == 0)
                            for kb in T.serial(ahead, k2):
                                g2.load(pool, pipe, HA, W2, SRT, base2 + kb, trows[m2, 0], n2_blk, tiles[m2], kb,
                                        one=tx == 0)
                Ax.cuda.launch_dependents()
            with Ax.cuda.role(1, 1 + consumers, regs=consumer_regs, each=True):
                wg = Ax.cuda.warpgroup_index()
                leader = tx % 128 == 0
                acc1 = Ax.registers((64, g1.bn), "float32", g1.acc_layout, name="acc")
                acc2 = acc1 if shared_acc else Ax.registers((64, bn), "float32", g2.acc_layout, name="acc2")
                out1 = Ax.registers((64, g1.half), dtype, g1.out_layout, name="out")
                out2 = Ax.registers((64, g2.half), dtype, g2.out_layout, name="out2")
                stored = T.alloc_buffer((1,), "int32", scope="local")     # the m-tile of the last h tile stored
                for it in T.serial(count):
                    if it < first:
                        m_blk, n_blk = sched1.coords(bx + it * grid)
                        g1.mainloop(pool, pipe, acc1, wg, it * k1, leader)
                        if it > 0:      # the previous h tile's stores had this k-loop's time to land
                            Ax.cuda.bulk_wait(0, pred=leader)       # written, not only read
                            Ax.cuda.count_done(ready, stored[0], leader)
                        g1.epilogue(acc1, out1, pool, H, wg, leader, trows[m_blk, 0], trows[m_blk, 1], n_blk)
                        stored[0] = m_blk
                        if it == first - 1:     # a GEMM 2 tile of this CTA may wait for it: no later k-loop
                            Ax.cuda.bulk_wait(0, pred=leader)
                            Ax.cuda.count_done(ready, m_blk, leader)
                    else:
                        m2, n2_blk = sched2.coords(bx + it * grid - tiles1)
                        g2.mainloop(pool, pipe, acc2, wg, first * k1 + (it - first) * k2, leader)
                        g2.epilogue(acc2, out2, pool, Y, wg, leader, trows[m2, 0], trows[m2, 1], n2_blk)
                Ax.cuda.tma_store_wait(0, pred=leader)
        unbake_rows(current_context().tensormaps,
                    ("H_map", "HA_map", "Y_map") + (() if gather_rows else ("A_map",)))
        return moe_experts

    return Ax.Kernel(kname, factory, outputs=("h", "y"),
                     meta={"dtype": dtype, "bm": bm, "bn1": g1.bn, "bn2": bn, "pad": g1.pad,
                           "gather_rows": gather_rows, "threads": threads})


def _role_registers(gather_rows, consumers):
    """``setmaxnreg`` of the producer and of each consumer warpgroup: a gathering producer needs
    more; the 128 threads of each role share the 64K registers."""
    producer = GATHER_REGS if gather_rows else PRODUCER_REGS
    return producer, min(CONSUMER_REGS, (65536 // 128 - producer) // consumers // 8 * 8)


def make_gemm1(dtype="bfloat16", bm=128, bn=256, **kw):
    """Grouped GEMM 1: ``h = SiLU(xp · gateᵀ) · (xp · upᵀ)`` (P × 768) from ``w1`` (128, 1536, 2048)."""
    return make_grouped_gemm(2 * INTER, HIDDEN, dtype, bm, bn, act="silu_mul", **kw)


def make_gemm2(dtype="bfloat16", bm=128, bn=256, **kw):
    """Grouped GEMM 2: ``y = h · w2[e]ᵀ`` (P × 2048) from ``w2`` (128, 2048, 768)."""
    return make_grouped_gemm(HIDDEN, INTER, dtype, bm, bn, **kw)


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
