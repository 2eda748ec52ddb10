"""Choosing a block-scaled FP8 GEMM configuration (``kernels.gemm_fp8.make`` keywords) by shape: the
buckets of M, the candidates of each bucket (what the sweep and ``axe tune`` measure) and a heuristic
that picks one without measuring.

Pure Python (no TVM, no torch): a serving machine picks an artifact per call from the same tables.

The buckets are the 16-bit GEMM's (:data:`kernels.gemm_select.BUCKETS`): a call with M rows runs the
artifact of the smallest bound ≥ M.  An artifact takes M at run time (``make(None, ...)``); up to
:data:`~kernels.gemm_config.MAX_BOUND` rows it is **scheduled statically for the bound**
(``max_rows``), so the tile grid is fixed at build time and split-K and CTA pairs can serve any M of
the bucket (rows past M load zeros and store nothing).  Larger buckets run the run-time-M
persistent schedule (no split: its tile count is an expression of M), on single CTAs or CTA pairs.

The configuration space: ``bn`` (tile width 64, 128, 192 or 256), ``stages`` (:data:`STAGES`: the
deepest ring that fits beside the static store buffer), ``cluster`` (1, or CTA pairs sharing B),
``stream_k``, ``split_k`` (K cut into slices of whole 128-deep k-blocks, fp32 partials added in slice
order), ``max_rows`` (the bucket bound a run-time M is scheduled for).

The cost model is the 16-bit GEMM's (:func:`kernels.gemm_select.cost`: waves of work units, each
streaming its slice of K through tiles ``bn`` wide, plus a hand-over charge per extra slice), fed
with the FP8 k-block count: a 128-deep e4m3 k-block moves the same bytes per row of A and B as a
64-deep 16-bit one (128 bytes) and takes the tensor cores the same time (four ``wgmma`` of k32
against four of k16), so the 16-bit model's unit is the FP8 k-block.  Its constants are the 16-bit
fit's except in the decode buckets, where they are fitted to the FP8 sweep's candidates
(:data:`DECODE_K_BLOCK`).
"""

from kernels.gemm_config import MAX_BOUND, SMS
from kernels.gemm_select import BK as BK16, BUCKETS, MID_SPLITS, bucket, cost as cost16, name, splits as splits16  # noqa: F401

BM, BK = 128, 128                   # the FP8 tile's rows and k-block depth (one scale block of K)
#: pipeline depth per tile width (227 KiB of shared memory: slots of A, B and SA's 128 row scales,
#: beside the 128-column bf16 store buffer)
STAGES = {64: 7, 128: 5, 192: 4, 256: 4}
#: pipeline depth of the transposed decode tile per ``tile_m`` (slots of B's 128×128 and A's tile_m×128
#: k-blocks and tile_m row scales, beside two tile_m×64 bf16 store buffers, within 227 KiB)
TILE_M_STAGES = {16: 12, 32: 10, 64: 8}
#: the tile widths of a decode bucket (≤ 128 rows: few tiles, so narrow ones give more CTAs work) and
#: of the others (wide ones move fewer bytes per flop)
DECODE_WIDTHS, WIDTHS = (64, 128, 256), (128, 192, 256)
#: the slice counts a decode bucket tries (its few tiles leave most of the SMs idle without them)
DECODE_SPLITS = (1, 2, 4, 8)


def k_iters(K):
    """FP8 k-blocks of K (128 deep)."""
    return -(-K // BK)


def _k16(K):
    """The 16-bit model's K with as many (64-deep) k-blocks as K has FP8 ones (the module docstring)."""
    return k_iters(K) * BK16


def splits(K, counts=DECODE_SPLITS):
    """The split-K slice counts worth trying for K: 1, and those of ``counts`` whose slices keep at
    least :data:`kernels.gemm_select.MIN_SLICE` FP8 k-blocks (and so are at least 2 long, with every
    slice starting inside K, as :class:`~kernels.parts.schedulers.split_k.SplitK` requires)."""
    return splits16(_k16(K), counts)


#: the decode buckets' constants of the model (a k-block of a tile ``bn`` wide costs
#: ``max(bn, DECODE_FLOOR) + DECODE_K_BLOCK``, an extra slice ``DECODE_SPLIT``), fitted to every
#: candidate measured at M = 1, 16, 64 and 128 on the 16 MLP shapes (H200,
#: benchmarks/results/gemm_fp8-allm-2026-11-27-h200.json): the pick is within 0.7% of the fastest
#: candidate on average and 13% at worst (fitted leaving each shape out in turn: 1.9% and 21% on the
#: shape left out), where the 16-bit constants gave 5.7% and 29%.  The floor says a 64-wide tile's
#: k-block costs nearly a 96-wide one's (TMA issue and barrier latency, not bytes, bound it), so
#: wider tiles cut in more slices win at the same CTA count
DECODE_FLOOR, DECODE_K_BLOCK, DECODE_SPLIT = 96, 160, 2560


def cost(N, K, bn, split_k, sms=SMS, block_rows=1, decode=False):
    """The modelled time of (bn, split_k) over ``block_rows`` block-rows: the 16-bit model's
    (:func:`kernels.gemm_select.cost`) with FP8 k-blocks as its unit, and for a decode bucket
    (``decode``) the constants fitted to the FP8 decode sweep (:data:`DECODE_K_BLOCK`)."""
    if decode:
        return cost16(N, _k16(K), bn, split_k, sms, block_rows, k_block=DECODE_K_BLOCK, split=DECODE_SPLIT,
                      floor=DECODE_FLOOR)
    return cost16(N, _k16(K), bn, split_k, sms, block_rows)


def scheduled_rows(bound, config):
    """The row bound ``config``'s artifact for bucket ``bound`` is scheduled for (``max_rows``), or
    None when it takes M at run time: a bucket of at most :data:`MAX_BOUND` rows is scheduled for
    its bound where the configuration needs a fixed tile grid (split-K, stream-K, CTA pairs) or the
    bucket is a decode bucket (≤ 128 rows: one block-row, no rows to save)."""
    if bound is None or bound > MAX_BOUND:
        return None
    if bound <= BM or config.get("split_k", 1) > 1 or config.get("stream_k") or config.get("cluster", 1) > 1:
        return bound
    return None


def widths(N, bound):
    """The tile widths bucket ``bound`` tries for N columns (a tile no wider than N)."""
    decode = bound is not None and bound <= BM
    return [bn for bn in (DECODE_WIDTHS if decode else WIDTHS) if bn <= N]


def splits_width(bn):
    """Whether tiles ``bn`` wide can be split in K: the one-site hand-over adds partials through the
    partial accumulator in store chunks, so the tile must be a multiple or a divisor of 128 columns."""
    return bn % BK == 0 or BK % bn == 0


def candidates(bound, N, K):
    """The configurations measured for bucket ``bound`` (``make`` keywords without M, N, K and
    ``max_rows``, which :func:`with_bound` adds): a decode bucket the tile widths 64, 128 and 256
    with every split of :data:`DECODE_SPLITS`, and below 128 rows the transposed decode tile
    (``tile_m`` = the bound, :data:`TILE_M_STAGES`) with every split; a middle bucket (≤ :data:`MAX_BOUND` rows) the tiles
    128, 192 and 256 wide uncut, 128 and 256 as CTA pairs and cut in K as
    :data:`~kernels.gemm_select.MID_SPLITS` allows; a larger bucket the widths uncut and 128 and 256
    as CTA pairs (the run-time-M schedule).  Split-K takes tile widths :func:`splits_width` allows."""
    ws = widths(N, bound)
    if bound is not None and bound <= BM:
        # below 128 rows also the transposed decode tile bound×128 (the heuristic's pick: decode_tile)
        swapped = [dict(tile_m=bound, stages=TILE_M_STAGES[bound], split_k=s) for s in splits(K)
                   if bound in TILE_M_STAGES and N >= BM]
        return swapped + [dict(bn=bn, stages=STAGES[bn], split_k=s) for bn in ws for s in splits(K)
                          if s == 1 or splits_width(bn)]
    plain = [dict(bn=bn, stages=STAGES[bn]) for bn in ws]
    pairs = [dict(bn=bn, stages=STAGES[bn], cluster=2) for bn in (128, 256) if bn <= N]
    if bound is None or bound > MAX_BOUND:
        return plain + pairs
    return plain + pairs + [dict(bn=bn, stages=STAGES[bn], split_k=s) for bn in (128, 256) if bn <= N
                            for s in splits(K, MID_SPLITS) if s > 1]


#: the large buckets' CTA-pair rule (:func:`pairs_win`): the 256-wide pair where K ≥ PAIR_MIN_K or
#: N ≥ PAIR_MIN_N.  Drawn between the 22 shapes of a static-M run (H200, the 16 MLP weights at
#: M = 8192 and DeepSeek-V3's six at 4096, benchmarks/results/gemm_fp8-2026-11-23-h200-run4.json: bn 256
#: as pairs against uncut): the pair won at every K ≥ 7168 and lost at every K ≤ 5120 but two whose
#: N ≥ 32768, and every loss has N ≤ 25600 — each threshold lies in the gap between a measured loss
#: and a measured win
PAIR_MIN_K, PAIR_MIN_N = 6144, 28672
#: the largest bucket that keeps the uncut tile although the rule's shape holds: at 2048 rows the
#: run-time pairs ran slower than the uncut 256-wide tile on 10 of the 16 shapes the rule picks (median
#: cuBLAS ÷ axe 0.908 against 0.927), at 4096 and 8192 faster on 12 and 14 (0.938 against 0.884, 0.934
#: against 0.894) — H100, benchmarks/results/gemm_fp8-allm-2026-11-27-h100-pairs.json against
#: gemm_fp8-allm-2026-11-27-h100.json (same tree but the pairs, same shapes)
PAIR_MAX_UNCUT = 2048
#: the pick where the rule holds
PAIR = dict(bn=256, stages=STAGES[256], cluster=2)


def pairs_win(bound, N, K):
    """Whether bucket ``bound`` of an N×K weight runs the 256-wide CTA pair (:data:`PAIR`): a bucket
    above :data:`PAIR_MAX_UNCUT` rows (the run-time-M schedule), N ≥ 256, and K ≥ :data:`PAIR_MIN_K`
    or N ≥ :data:`PAIR_MIN_N` (the measurements: docs/gemm_fp8.md, "CTA pairs at a run-time M")."""
    large = bound is None or bound > PAIR_MAX_UNCUT
    return large and N >= PAIR["bn"] and (K >= PAIR_MIN_K or N >= PAIR_MIN_N)


def heuristic(M, N, K, sms=SMS):
    """A configuration for M×N×K without measuring: in a bucket the transposed decode tile serves
    (bound 16 or 64, N ≥ 128) that tile (:func:`decode_tile`); where :func:`pairs_win` (a bucket
    above :data:`PAIR_MAX_UNCUT` rows) the 256-wide CTA pair; otherwise :func:`modelled`'s pick."""
    bound = bucket(M)
    if bound in TILE_M_STAGES and N >= BM:
        return with_bound(bound, decode_tile(bound, N, K, sms))
    if pairs_win(bound, N, K):
        return with_bound(bound, PAIR)
    return modelled(M, N, K, sms)


def modelled(M, N, K, sms=SMS):
    """Over the candidates of M's bucket that are not CTA pairs nor the decode tile (the model has
    no term for them), the one of least :func:`cost` over the bound's block-rows (an unbounded
    bucket counted as 8192 rows; a decode bucket with its fitted constants); ties go to fewer
    slices, then the wider tile.  ``max_rows`` is added where :func:`scheduled_rows` says."""
    bound = bucket(M)
    rows, decode = -(-(bound or 8192) // BM), bound is not None and bound <= BM
    cands = [c for c in candidates(bound, N, K) if c.get("cluster", 1) == 1 and "tile_m" not in c]
    best = min(cands, key=lambda c: (cost(N, K, c["bn"], c.get("split_k", 1), sms, rows, decode), c.get("split_k", 1),
                                     -c["bn"]))
    return with_bound(bound, best)


def decode_tile(bound, N, K, sms=SMS):
    """The transposed decode tile of bucket ``bound`` (``tile_m`` = the bound), cut in the most
    slices of :func:`splits` whose units (N/128 weight tiles × slices) still fit one wave of ``sms``
    CTAs (the measurements behind the rule: docs/gemm_fp8.md, "The transposed decode tile")."""
    tiles = -(-N // BM)
    slices = max((s for s in splits(K) if tiles * s <= sms), default=1)
    return dict(tile_m=bound, stages=TILE_M_STAGES[bound], split_k=slices)


def with_bound(bound, config):
    """``config`` with the ``max_rows`` its artifact for bucket ``bound`` is scheduled for (if any);
    ``split_k=1`` dropped (the default)."""
    out = {k: v for k, v in config.items() if not (k == "split_k" and v == 1)}
    rows = scheduled_rows(bound, out)
    return {**out, "max_rows": rows} if rows is not None else out
