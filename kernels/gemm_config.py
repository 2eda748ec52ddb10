"""The GEMM's configuration space (:class:`Config`: data, the keywords of ``kernels.gemm.make``) and
its defaults.  Pure Python (no TVM), so that selection (:mod:`kernels.gemm_select`) and a serving
machine's runtime can read it.
"""

import inspect
import math

BM, BN, BK, STAGES, SMS, GROUP = 128, 256, 64, 4, 132, 16
#: tile widths (``tile_n``): wgmma's N, in whole 64-column swizzle blocks (any B; what selection tries)
TILE_N = (64, 128, 192, 256)
#: tile widths with column-major B (stored N×K: its tile's rows lie on wgmma's N side and its swizzle
#: runs along K, so any 8 rows are a TMA box and a wgmma B operand): every multiple of 16 from 64 to
#: 256, for tile counts that fill whole waves; those not in :data:`TILE_N` only on the cooperative
#: 128-row tile without CTA pairs, stream-K or fused epilogues (:func:`narrow_refusal`)
TILE_N_COL = tuple(range(64, 257, 16))
#: tile heights (``tile_m``): 128 (the cooperative tile), or 16/32/64 rows of a decode tile computed
#: transposed (the weights' 128 rows on the MMA's M side, the few rows of A on its N side)
TILE_M = (16, 32, 64, 128)
#: k-block depths (``tile_k``): one or two 64-element swizzle panels per slot
TILE_K = (64, 128)
#: the largest row bound a run-time M may be scheduled statically for (``make_dynamic(max_rows=)``):
#: past it a bucket has enough block-rows to fill the GPU without splitting K
MAX_BOUND = 1024
#: the largest row bound (``max_rows``) of a runtime-M GEMM launched programmatically: it gains at
#: decode and loses with many rows (the figures: docs/torch.md, "Programmatic launch and the decoder layer")
PROGRAMMATIC_ROWS = 128
HALF = BM // 2                      # rows per consumer warpgroup
#: each target's epilogue chunk (columns per store): wgmma's 64×256 part in two 128-column chunks,
#: tcgen05's 128×128 part in 64-column chunks (4 stages and 2 × 16 KiB of chunk buffer fit 224 KiB)
EPILOGUE = {"wgmma": 128, "tcgen05": 64}
#: with fused operands: 64-column chunks through one buffer, so that 4 stages and the operands' shared
#: slices fit on sm_90a (on sm_100a they need 3 stages)
FUSED_EPILOGUE = (64, 1)


def narrow_refusal(tile_n, schedule="cooperative", stream_k=False, epilogue_ops=()):
    """Why a tile ``tile_n`` columns wide that is not a multiple of 64 (:data:`TILE_N_COL`) cannot be
    built with these options, or None: such a tile is built for the cooperative schedule (its store
    chunks are 64-column multiples and one narrower last chunk) without stream-K or fused operands."""
    if tile_n % 64 == 0:
        return None
    used = [n for n, on in (("schedule='pingpong'", schedule != "cooperative"), ("stream_k", stream_k),
                            ("epilogue_ops", epilogue_ops)) if on]
    if used:
        return (f"tile_n={tile_n} (not a multiple of 64) is built for the cooperative schedule without stream_k or "
                f"epilogue_ops (got {', '.join(used)})")
    return None


def narrow_chunk(tile_n):
    """The default store chunk of a tile ``tile_n`` columns wide (a multiple of 16): the wgmma
    chunk (:data:`EPILOGUE`) or 64 columns, whichever divides its whole 64-column blocks; the
    rest (``tile_n mod 64``) is the last chunk's."""
    return math.gcd(EPILOGUE["wgmma"], tile_n - tile_n % 64)


class Config:
    """A GEMM configuration (data; :func:`make`'s keywords): ``stages`` (default 4), ``sms``
    persistent CTAs, ``in_flight`` wgmma groups left running (default 0; ping-pong 1), ``group``
    block-rows per rasterization band, ``cluster`` 1 or 2 (CTA pairs sharing B), ``epilogue`` columns
    per store chunk and ``epilogue_bufs`` buffers per warpgroup, ``schedule`` ``"cooperative"`` or
    ``"pingpong"``, ``stream_k``, ``split_k`` slices of K (1: none), ``epilogue_ops`` fused operands
    (:mod:`kernels.parts.epilogues.elementwise`), ``tile_n`` the tile's columns (:data:`TILE_N`; with
    column-major B :data:`TILE_N_COL`, whose store chunks default to :func:`narrow_chunk`), ``tile_m`` its
    rows (:data:`TILE_M`; below 128 the tile is computed transposed, for few rows), ``tile_k`` the
    k-block's depth (:data:`TILE_K`)."""

    def __init__(self, stages=None, sms=SMS, in_flight=None, group=GROUP, cluster=1, epilogue=None,
                 schedule="cooperative", epilogue_bufs=None, stream_k=False, split_k=1, epilogue_ops=(), tile_n=BN,
                 tile_m=BM, tile_k=BK):
        if tile_n not in TILE_N_COL:
            raise ValueError(f"gemm: tile_n must be one of {TILE_N}, or with column-major B a multiple of 16 from 64 "
                             f"to 256, got {tile_n!r}")
        if tile_m not in TILE_M:
            raise ValueError(f"gemm: tile_m must be one of {TILE_M}, got {tile_m!r}")
        if tile_m < BM and (tile_n != 128 or schedule != "cooperative" or cluster > 1 or epilogue_ops):
            raise ValueError(f"gemm: the decode tile (tile_m={tile_m} < {BM}: computed transposed) is tile_m x 128 "
                             "(tile_n=128), cooperative, without CTA pairs or epilogue_ops")
        if tile_k not in TILE_K or (tile_k != BK and cluster > 1):
            raise ValueError(f"gemm: tile_k must be one of {TILE_K} (64 with CTA pairs, whose B halves are one panel "
                             f"deep), got {tile_k!r}")
        if cluster not in (1, 2) or sms % cluster:
            raise ValueError(f"gemm: cluster must be 1 or 2 and divide sms={sms}, got {cluster!r}")
        if schedule not in ("cooperative", "pingpong") or (schedule == "pingpong" and cluster > 1):
            raise ValueError(f"gemm: schedule must be 'cooperative' or 'pingpong' (without clusters), got {schedule!r}")
        why = narrow_refusal(tile_n, schedule, stream_k, epilogue_ops)
        if why:
            raise ValueError(f"gemm: {why}")
        pp = schedule == "pingpong"
        if epilogue is None and tile_n % 64:
            epilogue = narrow_chunk(tile_n)
        self.stages, self.sms, self.group, self.cluster, self.schedule = stages or STAGES, sms, group, cluster, schedule
        self.in_flight = (1 if pp else 0) if in_flight is None else in_flight
        if stream_k and split_k > 1:
            raise ValueError("gemm: stream_k and split_k are two tile schedulers; pick one")
        self.epilogue, self.epilogue_bufs, self.stream_k, self.pingpong = epilogue, epilogue_bufs, stream_k, pp
        self.split_k, self.epilogue_ops, self.bn = split_k, tuple(epilogue_ops), tile_n
        self.tile_m, self.bk = tile_m, tile_k
        self.bm = HALF if pp else BM        # rows of one scheduled tile (ping-pong: one warpgroup's)

    @classmethod
    def of(cls, options, who="gemm"):
        """The configuration of ``options`` (a kernel's keywords); an unknown keyword is a
        ``ValueError`` naming it and the known ones, as is a ``tile_n`` outside :data:`TILE_N` for
        another kernel than the one-GPU GEMM (``who``: the distributed ones' epilogues are built
        for whole 64-column blocks)."""
        known = inspect.signature(cls).parameters
        unknown = sorted(set(options) - set(known))
        if unknown:
            hint = "; a GEMM + reduce-scatter is kernels/gemm_rs.py" if who == "gemm" else ""
            raise ValueError(f"{who}: unknown options {unknown} (known: {', '.join(known)}{hint})")
        tile_n = options.get("tile_n", BN)
        if who != "gemm" and tile_n not in TILE_N:
            raise ValueError(f"{who}: tile_n must be one of {TILE_N} (widths in steps of 16 are built for the one-GPU "
                             f"GEMM, kernels/gemm.py), got {tile_n!r}")
        return cls(**options)

    @property
    def ctas(self):
        """Persistent work units: CTAs, or CTA pairs."""
        return self.sms // self.cluster

    @property
    def band(self):
        """Rasterization band in scheduled block-rows (``group`` block-rows of 128)."""
        return max(self.group * (BM // self.bm) // self.cluster, 1)

    def options(self):
        """The configuration's non-default choices, by name (for messages)."""
        return [n for n, v in (("stream_k", self.stream_k), ("split_k", self.split_k > 1), ("cluster>1", self.cluster > 1),
                               ("pingpong", self.pingpong), ("epilogue_ops", self.epilogue_ops),
                               ("tile_n", self.bn != BN), ("tile_m", self.tile_m != BM), ("tile_k", self.bk != BK)) if v]
