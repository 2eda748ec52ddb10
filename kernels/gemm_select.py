"""Choosing a GEMM configuration by shape: the row-count buckets, the candidates of each bucket (what
``axe tune`` and the benchmarks measure) and the heuristic that picks one without measuring.

Pure Python (no TVM): a serving machine reads the same buckets to pick an artifact per call.

Buckets: a call with M rows runs the artifact of the smallest bucket bound ≥ M (:func:`bucket`);
the decode buckets (M ≤ 16, ≤ 64, ≤ 128: one block-row) are scheduled statically for their bound
(``make_dynamic(..., max_rows=bound)``), so split-K, narrow tiles and the transposed decode tile
(``tile_m``: the weights' rows on the MMA's M side) can fill the GPU.  The middle buckets (≤ 256,
384, 512, 768, 1024: a few block-rows, often fewer tiles than SMs) add split-K candidates,
scheduled statically for the bound (:func:`scheduled_rows`); larger buckets run the run-time-M
persistent schedule.

The heuristic's inputs are the shape, the SM count and the GPU's DRAM bandwidth (``dram_bps``): an
H100 and an H200 have the same 132 SMs, and whether a few CTAs keep the DRAM busy differs between
them (:data:`CTA_STREAM_BPS`).
"""

from bisect import bisect_left

from kernels.gemm_config import BK, BM, BN as BN_DEFAULT, MAX_BOUND, SMS, TILE_N, TILE_N_COL, narrow_chunk
from kernels.parts.epilogues.chunks import chunking
from kernels.parts.schedulers.spread import spread_fits

#: bucket bounds (rows); a call runs the artifact of the first bound ≥ M, the last one is unbounded.
#: The middle ones step by half a doubling (384, 768) because their split-K artifacts compute every
#: block-row up to the bound: a call wastes less than one block-row in three
BUCKETS = (16, 64, 128, 256, 384, 512, 768, 1024, 2048, 4096, 8192, None)
#: shared memory a GEMM CTA may use for its ring and epilogue buffers (bytes; 227 KiB less 1 KiB of
#: barriers and static data)
SMEM = 226 * 1024
#: the fewest k-blocks a split-K slice gets (a shorter slice spends more on the hand-over than it saves)
MIN_SLICE = 8


def bucket(M):
    """The bucket bound for M rows (None: the unbounded last bucket)."""
    if M < 1:
        raise ValueError(f"gemm: M must be at least 1, got {M}")
    return BUCKETS[bisect_left(BUCKETS, M, hi=len(BUCKETS) - 1)]


def stages_for(tile_n, tile_m=BM, dtype_bytes=2, tile_k=BK):
    """The deepest ring of k-block slots that fits beside the epilogue's buffers, at most 8: (128×tile_k
    A, tile_k×tile_n B) slots beside the store's buffers as the store cuts the tile (its default chunk,
    :func:`~kernels.gemm_config.narrow_chunk`, and :func:`~kernels.parts.epilogues.chunks.chunking`'s
    buffers: 64 rows × chunk per buffer per consumer warpgroup), or for a transposed decode tile
    (``tile_m`` < 128) (128×tile_k weights, tile_m×tile_k A) slots and one tile_m×64 buffer per
    warpgroup.  Law: the ring and the buffers fit :data:`SMEM`."""
    if tile_m < BM:
        chunk, slot = 2 * 64 * tile_m * dtype_bytes, (BM + tile_m) * tile_k * dtype_bytes
    else:
        cols = narrow_chunk(tile_n)
        chunk, slot = 2 * chunking(cols, tile_n)[1] * 64 * cols * dtype_bytes, (BM + tile_n) * tile_k * dtype_bytes
    return min(8, (SMEM - chunk) // slot)


#: the third tile width a middle bucket tries: with a few block-rows, 128 × 192 tiles fill a last wave
#: that 128 × 256 tiles leave partly empty (Gemma-2-27B's up projection at 256 rows: 288 tiles of 256
#: columns are 2.2 waves of 132 SMs, 384 of 192 columns 2.9)
MID_TILE = 192
#: the uncut tile widths a middle bucket tries with column-major B (any multiple of 16 there:
#: :data:`~kernels.gemm_config.TILE_N_COL`), as cuBLAS picks 112–320 per shape, so that a width
#: exists whose tile count fills whole waves; row-major B has the 64-column steps
#: (benchmarks/results/cublas_kernels-mid-2026-11-27-h100.txt)
MID_WIDTHS = {"col": tuple(w for w in TILE_N_COL if w >= 128), "row": (128, MID_TILE, 256)}
#: narrower uncut widths a middle bucket lists for ``axe tune`` (not the heuristic's) with column-major
#: B: where N is small (the down projections) cuBLAS runs a 112-wide tile in one wave
#: (3584 × 14336 at 256 and 512 rows: 32 × 4 = 128 tiles), where 128 columns make 112 tiles
MID_NARROW = (96, 112)
#: the uncut widths a middle bucket also tries with 128-deep k-blocks (``tile_k=128``, 3 slots): a k-block's
#: fixed cost (the consumers' wait, drain and restart) is paid once per two 64-column panels, which the
#: narrow tiles need most (docs/gemm.md, "The narrow tile's ring and its k-block depth"); 112 with
#: column-major B only (96 was measured too and was never the fastest); where K holds at least one
MID_DEEP = (112, 128)
#: the heuristic's :data:`K_BLOCK` for a 128-deep k-block, per 64-column panel: fitted to 28 rows of the
#: middle buckets on an H100 (seven down projections × 128–1024 rows, every candidate and the deep widths,
#: benchmarks/results/gemm_mid-2026-11-27-h100-deep.json): it takes the deep tile on the three rows where
#: it measured fastest (the one-wave 128- and 112-wide tiles at 512 rows: Qwen3-8B, Llama-3.1-8B and
#: Gemma-2-9B down, 7–12% faster than the former pick) and on no other
DEEP_K_BLOCK = 48
#: the slice counts a middle bucket tries: with a few block-rows the tile count is rarely a multiple
#: of the SMs, and 3 or 6 slices can fill the last wave where 2 and 4 leave it half empty
MID_SPLITS = (1, 2, 3, 4, 6)
#: the largest bucket whose heuristic also weighs the uncut widths of :data:`MID_WIDTHS` (run-time-M
#: artifacts, no bound): at 2048–4096 rows a few shapes still leave a last wave mostly empty (Gemma-2-27B
#: down, 4608 × 36864, at 2048 rows: 288 tiles of 256 columns are 2.2 waves of 132 SMs; 0.77× cuBLAS on
#: an H100, benchmarks/results/gemm-allm-2026-11-27-h100-l2-256.json), and above it the 256-wide tile's
#: waves are many enough
WIDE_BOUND = 4096
#: there a narrower width is picked only where the model costs it at most this share of the 256-wide
#: tile's: the model charges a narrow tile's k-block less than it measures (the 112–144-wide tiles run
#: at about 70% of the 256-wide tile's rate per SM, docs/gemm.md).  On four shapes × 2048/4096 rows
#: (benchmarks/results/gemm_wide-2026-11-27-{h100,h200}.json) the six picks it lets through ran
#: 0.996–1.18× the 256-wide tile's speed on the H100 and 1.03–1.14× on the H200 (Gemma-2-27B down at 2048
#: rows: 192 wide, 1024 against 1211 µs on the H100, cuBLAS 973)
WIDE_MARGIN = 0.95


def uncut(tile_n):
    """The uncut tile ``tile_n`` wide with the deepest ring that fits (a configuration)."""
    return dict(tile_n=tile_n, stages=stages_for(tile_n))


def deep(tile_n):
    """The uncut tile ``tile_n`` wide with 128-deep k-blocks and the deepest ring of them that fits."""
    return dict(tile_n=tile_n, tile_k=128, stages=stages_for(tile_n, tile_k=128))


def deep_widths(N, K, b_major="col"):
    """The widths of :data:`MID_DEEP` a middle bucket tries 128-deep for N × K: no wider than N, K
    holding at least one deep k-block, and 112 with column-major B only."""
    return [tn for tn in MID_DEEP if tn <= N and K >= 128 and (b_major == "col" or tn % 64 == 0)]


def fitting(N, b_major="col"):
    """The widest uncut tile no wider than N (:data:`~kernels.gemm_config.TILE_N_COL` with column-major B,
    :data:`~kernels.gemm_config.TILE_N` with row-major), or None where N is below 64: what a bucket of
    128-row tiles runs when N is narrower than its 256-wide tile (a router's 64 or 128 experts)."""
    widths = [w for w in (TILE_N_COL if b_major == "col" else TILE_N) if w <= N]
    return uncut(max(widths)) if widths else None


def splits(K, counts=(1, 2, 4)):
    """The split-K slice counts worth trying for K: 1, and those of ``counts`` whose slices keep at
    least :data:`MIN_SLICE` k-blocks of 64."""
    k_iters = -(-K // BK)
    return [s for s in counts if s == 1 or k_iters // s >= MIN_SLICE]


def scheduled_rows(bound, config):
    """The row bound ``config``'s artifact for bucket ``bound`` is scheduled for (``max_rows``), or
    None when it takes M at run time: every decode bucket's, and a middle bucket's configurations
    that split K or pair CTAs (split-K, stream-K, CTA pairs: they divide a fixed tile grid among
    the CTAs)."""
    if bound is None or bound > MAX_BOUND:
        return None
    if bound <= BM or config.get("split_k", 1) > 1 or config.get("stream_k") or config.get("cluster", 1) > 1:
        return bound
    return None


def candidates(bound, N, K, b_major="col"):
    """The configurations (``make`` keywords) measured for a bucket: for a decode bucket every tile
    width with every split of K (deepest ring), below 128 rows the transposed decode tile
    ``bound``×128 with every split and with stream-K spread over every SM where it fits, and in the
    128-row bucket with column-major B the uncut widths between the 64-column steps and the 128-wide
    tile spread over every SM (:func:`spread_fits`); above them what
    a run-time M schedules (the persistent tile 128×256 or 128×128, ping-pong; with N below 256 also
    :func:`fitting`'s tile), up to
    :data:`WIDE_BOUND` rows also the run-time-M tiles of :data:`MID_WIDTHS` (``b_major``'s), and in a
    middle bucket (≤ :data:`MAX_BOUND` rows) also :data:`MID_NARROW` (tune's only), the widths of :data:`MID_DEEP`
    with 128-deep k-blocks (:func:`deep`), CTA pairs sharing B with tiles 128 and
    256 wide (scheduled for the bound: cuBLAS runs 2-CTA clusters on nearly every middle shape; the
    heuristic's model has no term for them, they are ``axe tune``'s to pick), and the tiles 128,
    :data:`MID_TILE` and 256 wide cut in K as :data:`MID_SPLITS` allows.  Stream-K is not one:
    bounded to these buckets it measured 1.1–2.5× slower than the best split on an H100
    (benchmarks/results/gemm_mid-2026-11-27-h100.json)."""
    if bound is not None and bound <= BM:
        swapped = [dict(tile_m=bound, tile_n=128, split_k=s, stages=stages_for(128, bound, tile_k=tk),
                        **({} if tk == BK else {"tile_k": tk}))
                   for tk in (BK, 128) if bound < BM and N >= 128 and K >= tk for s in splits(K)]
        if bound < BM and N >= 128 and spread_fits(-(-N // BM), -(-K // BK), SMS):      # stream-K (see SPREAD)
            swapped.append(dict(tile_m=bound, tile_n=128, stream_k=True, stages=stages_for(128, bound)))
        # the 128-row bucket with column-major B: also the uncut widths between the 64-column steps (one
        # block-row of tiles: a width whose tile count fills one wave, as cuBLAS picks 112 for N = 14336)
        fine = [uncut(tn) for tn in TILE_N_COL if bound == BM and b_major == "col" and tn not in TILE_N and tn <= N]
        # and the 128-wide tile spread over every SM (one block-row: each weight k-block is read once), a
        # candidate for axe tune: on an H200 it beat every split of the long-K down projections at 100 and
        # 128 rows by 1-15%, on an H100 it lost up to 12% (gemm_decode-2026-11-27-h{100,200}-spread128.json)
        spread = ([dict(tile_n=128, stream_k=True, stages=stages_for(128))]
                  if bound == BM and N >= 128 and spread_fits(-(-N // BM), -(-K // BK), SMS) else [])
        return swapped + [dict(tile_n=tn, split_k=s, stages=stages_for(tn)) for tn in TILE_N if tn != 192 and tn <= N
                          for s in splits(K)] + fine + spread
    runtime = [dict(), uncut(128), dict(schedule="pingpong")]
    fit = fitting(N, b_major) if N < BN_DEFAULT else None        # N narrower than the default tile
    if fit is not None and fit not in runtime:
        runtime.append(fit)
    if bound is None or bound > WIDE_BOUND:
        return runtime
    widths = [uncut(tn) for tn in MID_WIDTHS[b_major] if tn not in (128, 256) and tn <= N]
    if bound > MAX_BOUND:
        return runtime + widths
    pairs = [dict(tile_n=tn, cluster=2, stages=stages_for(tn)) for tn in (128, 256) if tn <= N]
    narrow = [uncut(tn) for tn in MID_NARROW if b_major == "col" and tn <= N]
    deeps = [deep(tn) for tn in deep_widths(N, K, b_major)]
    return runtime + widths + narrow + deeps + pairs + \
        [dict(tile_n=tn, split_k=s, stages=stages_for(tn)) for tn in (128, MID_TILE, 256) if tn <= N
         for s in splits(K, MID_SPLITS) if s > 1]


#: the heuristic's cost model (units: k-columns of B streamed by one SM): a k-block costs its tile's
#: width plus :data:`K_BLOCK` (issue, barriers, the wasted rows of a 128-row MMA), a split of K
#: :data:`SPLIT` per extra slice (the partials' hand-over); fitted to the decode sweep on an H100
#: (benchmarks/results/gemm_decode-2026-11-26-h100.json: within 3% of the best candidate on its 16 rows)
K_BLOCK, SPLIT = 64, 4096


def cost(N, K, tile_n, split_k, sms=SMS, block_rows=1, k_block=K_BLOCK, split=SPLIT, floor=0):
    """The modelled time of (tile_n, split_k) over ``block_rows`` block-rows of 128: waves of work
    units, each streaming its slice of K through tiles ``tile_n`` wide — a k-block costs
    ``max(tile_n, floor) + k_block``, an extra slice ``split`` (the defaults: the 16-bit fit above;
    the FP8 GEMM's decode buckets pass their own, :mod:`kernels.gemm_fp8_select`)."""
    units = -(-N // tile_n) * split_k * block_rows
    waves = -(-units // sms)
    slice_iters = -(-(-(-K // BK)) // split_k)          # ceil(ceil(K / BK) / split_k) k-blocks
    return waves * (slice_iters * (max(tile_n, floor) + k_block) + (split_k - 1) * split)


#: the transposed decode tile's model: the weights stream at a rate that grows with the CTAs
#: streaming them, up to one per SM, and each extra slice of K costs :data:`SWAP_SPLIT` k-blocks per
#: 16 rows of the tile; fitted to four decode sweeps (benchmarks/results/gemm_decode-2026-11-26-h100.json,
#: …-h200.json, gemm_decode-2026-11-27-h200-spread.json, …-deep.json: the pick within 7.5% of the
#: fastest split on all 63 rows of M <= 64, 0.7% on average; the former rate cap at 80 CTAs kept
#: 28–32 tiles at two slices where four ran 5–17% faster)
SWAP_SPLIT = 6


def swap_cost(N, K, tile_m, split_k, sms=SMS):
    """The modelled time (in k-blocks) of the transposed decode tile ``tile_m``×128 cut ``split_k``
    ways in K."""
    tiles, k_iters = -(-N // BM), -(-K // BK)
    return tiles * k_iters / min(tiles * split_k, sms) + (split_k - 1) * SWAP_SPLIT * tile_m / 16


#: the transposed decode tile spread over every SM (stream-K, :func:`spread_fits`) streams its
#: ``tiles·k_iters`` k-blocks over all SMs and pays :data:`SPREAD` k-blocks per 16 rows of the tile
#: (its second piece and hand-overs).  Fitted to the H200 spread run
#: (benchmarks/results/gemm_decode-2026-11-27-h200-spread.json: the pick within 6% of the fastest of
#: the splits and the spread on its 27 rows, 0.5% on average).
SPREAD = 32
#: the bytes per second one CTA of the decode tile streams at most: the spread is considered only
#: where the best split's CTAs at this rate fall short of the GPU's DRAM bandwidth (``dram_bps``).
#: By this rule an H100 (3.35 TB/s) needs 84 CTAs, and its 96 uncut CTAs do read GPT-3 down at the
#: DRAM's rate (397 µs, 3.04 TB/s; the spread 2% slower); an H200 (4.8 TB/s) needs 120, and the same
#: 96 CTAs ran 286.6–337.1 µs in one call, bimodal by where they land, the spread 287.0
#: (benchmarks/results/gemm_decode-2026-11-27-h{100,200}-spread96.json).  The H200 spread run the
#: former rule (5/8 of the SMs) was fitted to keeps its picks within 8% under this one (a CPU test).
#: A split of few CTAs on a long K is where the spread wins: Gemma-2-27B down's 72 CTAs moved
#: 85.6 → 117.1 µs between two H200 calls.
CTA_STREAM_BPS = 40e9
#: the DRAM bandwidth assumed where the GPU's is not known: an H100 SXM's (2 × 2619 MHz × 5120 bits)
DRAM_BPS = 3.35e12


def spread_cost(N, K, tile_m, sms=SMS):
    """The modelled time (in k-blocks) of the transposed decode tile ``tile_m``×128 spread over every
    SM, or None where the spread does not fit (:func:`spread_fits`)."""
    tiles, k_iters = -(-N // BM), -(-K // BK)
    return tiles * k_iters / sms + SPREAD * tile_m / 16 if spread_fits(tiles, k_iters, sms) else None


def swap_splits(N, K, sms=SMS):
    """The splits of K the transposed decode tile chooses among: those of :func:`splits` whose CTAs
    (one per tile and slice, one SM each) fit one wave.  A split is there to fill the SMs; one that
    overfills them leaves a last wave of a few CTAs streaming their slices at a few CTAs' rate
    (Qwen3-32B's 4608×36864 cut 4 ways: 144 CTAs on 132 SMs, 0.79× cuBLAS and 79% of the DRAM limit
    on an H200, benchmarks/results/gemm-allm-2026-11-27-h200.json)."""
    tiles = -(-N // BM)
    return [s for s in splits(K) if s == 1 or tiles * s <= sms]


def heuristic(M, N, K, sms=SMS, b_major="col", dram_bps=None):
    """A configuration for M×N×K without measuring, on a GPU of ``sms`` SMs and ``dram_bps`` bytes per
    second of DRAM bandwidth (None: :data:`DRAM_BPS`).  Buckets of at most 64 rows with B column-major:
    the transposed decode tile as tall as the bucket, cut in K as :func:`swap_cost` says among
    :func:`swap_splits`, or spread over every SM where that split's CTAs cannot keep the DRAM busy
    (:data:`CTA_STREAM_BPS` each) and :func:`spread_cost` is less; the
    128-row decode bucket (or B row-major): of the 64-column steps cut as :func:`splits` allows and,
    with column-major B, the uncut widths between them, the one of least :func:`cost` (ties: fewer
    slices, then 128, 64, 256 columns), the deepest ring that fits; a middle bucket: of an uncut tile of
    :data:`MID_WIDTHS` (``b_major``'s: with column-major B every multiple of 16 from 128 to 256), a
    tile 256, :data:`MID_TILE` or 128 wide cut in K, or a width of :data:`MID_DEEP` with 128-deep k-blocks
    (costed with :data:`DEEP_K_BLOCK`), the one of least :func:`cost` over the bound's
    block-rows (ties: fewer slices, then wider, then 64-deep; uncut: the run-time-M artifact); a bucket up to
    :data:`WIDE_BOUND`: of the uncut widths the one of least :func:`cost` if it is at most
    :data:`WIDE_MARGIN` of the 256-wide tile's; otherwise the default (the persistent 128×256 tile).
    Above 128 rows with N narrower than 256 columns, where the middle buckets' choice has no width
    that fits (N below 128) and in the larger buckets: :func:`fitting`.  N below 64 columns (the
    narrowest tile) is a ``ValueError`` naming it."""
    if N < TILE_N[0]:
        raise ValueError(f"gemm: N={N} is narrower than the narrowest tile ({TILE_N[0]} columns): no configuration "
                         f"fits (a build of it is refused too)")
    bound = bucket(M)
    if N < BN_DEFAULT and (bound is None or bound > MAX_BOUND or BM < bound and N < BM):
        return fitting(N, b_major)          # no 256-wide tile fits
    if bound is None or bound > WIDE_BOUND:
        return dict()
    if bound > MAX_BOUND:       # uncut widths only (run-time M), against the 256-wide tile with a margin
        rows = bound // BM
        tn = min((tn for tn in MID_WIDTHS[b_major] if tn <= N), key=lambda w: (cost(N, K, w, 1, sms, rows), -w))
        return uncut(tn) if cost(N, K, tn, 1, sms, rows) <= WIDE_MARGIN * cost(N, K, BN_DEFAULT, 1, sms, rows) else dict()
    if bound > BM:
        rows = -(-bound // BM)
        options = [(tn, 1, BK) for tn in MID_WIDTHS[b_major] if tn <= N] + \
            [(tn, s, BK) for tn in (256, MID_TILE, 128) if tn <= N for s in splits(K, MID_SPLITS) if s > 1] + \
            [(tn, 1, 128) for tn in deep_widths(N, K, b_major)]
        tn, s, tk = min(options, key=lambda c: (cost(N, K, c[0], c[1], sms, rows, DEEP_K_BLOCK if c[2] > BK else K_BLOCK),
                                               c[1], -c[0], c[2]))
        if tk > BK:
            return deep(tn)
        if s == 1:
            return dict() if tn == 256 else uncut(tn)
        return dict(tile_n=tn, split_k=s, stages=stages_for(tn))
    if bound < BM and b_major == "col" and N >= BM:
        split = min(swap_splits(N, K, sms), key=lambda s: (swap_cost(N, K, bound, s, sms), s))
        spread = spread_cost(N, K, bound, sms)
        idle = -(-N // BM) * split * CTA_STREAM_BPS < (dram_bps or DRAM_BPS)
        if idle and spread is not None and spread < swap_cost(N, K, bound, split, sms):
            return dict(tile_m=bound, tile_n=128, stream_k=True, stages=stages_for(128, bound))
        return dict(tile_m=bound, tile_n=128, split_k=split, stages=stages_for(128, bound))
    order = {128: 0, 64: 1, 256: 2}
    options = [(tn, s) for tn in order if tn <= N for s in splits(K)]
    if b_major == "col":     # the widths between the steps, uncut (one block-row: a width that fills one wave)
        options += [(tn, 1) for tn in TILE_N_COL if tn not in TILE_N and tn <= N]
    tn, s = min(options, key=lambda c: (cost(N, K, c[0], c[1], sms), c[1], order.get(c[0], len(order))))
    return uncut(tn) if tn not in TILE_N else dict(tile_n=tn, split_k=s, stages=stages_for(tn))


def name(config):
    """A short, stable name of a configuration (artifact names, tuning-cache entries)."""
    if not config:
        return "default"
    return "_".join(f"{k}{int(v) if isinstance(v, bool) else v}" for k, v in sorted(config.items()))


def act_config(config, N):
    """``config`` (a configuration or an artifact's keywords) made to compose with a fused SiLU·up
    store (``make(..., act="silu_mul")``): the store needs the cooperative tile whose columns are
    whole 128-column interleave periods and divide ``N`` (the weight's rows), so ping-pong
    becomes the default persistent tile and a narrower, odd or non-dividing tile 128 columns (with
    the deepest ring that fits), and 128-deep k-blocks (:func:`deep`) 64-deep ones with the deepest
    ring (the fused store is GPU-checked on 64-deep rings); every other key is kept.  Law: any other
    configuration that composes is returned unchanged."""
    out = dict(config)
    if out.get("schedule") == "pingpong":
        del out["schedule"]
    tile_n = out.get("tile_n", 256)
    if out.get("tile_m", BM) == BM and (tile_n % 128 or N % tile_n):
        out.update(uncut(128))
    if out.get("tile_m", BM) == BM and out.get("tile_k", BK) != BK:     # the fused store's ring is checked 64-deep
        del out["tile_k"]
        out["stages"] = stages_for(out.get("tile_n", 256))
    return out
