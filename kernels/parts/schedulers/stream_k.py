"""Stream-K: the last whole wave of tiles and the partial one are split evenly over all persistent
CTAs in k-blocks, so no CTA idles in a partial last wave.

Law (:class:`StreamK`, brute-force tested): the first ``dp_waves`` whole waves go tile by tile (CTA
p takes tiles p, p + ctas, ...); the remaining ``units`` k-blocks (the tiles from ``dp_tiles`` on,
in linear order) are cut into one contiguous range per CTA, ``[bound(p), bound(p + 1))``.  With
``tiles >= ctas`` and ``k_iters >= 4`` every tile falls into at most two CTAs' ranges and every piece
holds at least two k-blocks (:func:`stream_k_bound`).  A tile split in two is finished by the CTA
holding its first k-blocks (its *head*), which adds the partial sum the CTA holding its last
k-blocks (its *tail*) handed over — so the scheduler needs an epilogue that hands partials over
(:mod:`kernels.parts.epilogues.handover`).  The methods take Python ints (the CPU model) or TIR
expressions (the kernel), so both walk the same split; ``tiles`` may be known only at run time.

*Spread* (``spread=True``, a build-time tile count below the CTA count: decode-sized M, where a
few tiles of long K leave most SMs idle): every k-block of every tile is cut into the CTAs' ranges,
no whole waves, so every CTA streams about ``tiles·k_iters/ctas`` k-blocks.  A range is shorter than
a tile (refused otherwise), so it holds at most one tile's first k-block: a CTA runs at most two
pieces, first a *tail* (its range starts inside a tile), then a *head* (a tile's first k-blocks);
a tile falls into the ranges of its head's CTA ``p`` and the CTAs ``p + 1 …`` whose ranges start
inside it (:meth:`StreamK.takes`), each of which hands its tail over before it waits for anything,
so the head's waits end (every CTA co-resident).
"""

from tvm.script import tirx as T

from .persistent import Persistent
from .spread import spread_fits


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
    (the module's law).  ``tiles`` may be a run-time TIR expression (``select`` =
    ``T.if_then_else``): with fewer tiles than CTAs there is no split, each CTA runs its one tile or
    none (:meth:`dp_count`); ``bind`` (``Ax.computed_once`` in a kernel) computes each run-time value
    once — substituted into every use, the nested selects grew a kernel's CUDA 11-fold."""

    def __init__(self, tiles, k_iters, ctas, select=None, bind=lambda v: v, spread=False):
        self.spread = spread and select is None and tiles < ctas
        if self.spread and not spread_fits(tiles, k_iters, ctas):
            raise ValueError(f"stream_k over {tiles} tiles of {k_iters} k-blocks on {ctas} CTAs: each CTA's range "
                             f"({tiles * k_iters // ctas} k-blocks) must hold 4 to k_iters - 4 = {k_iters - 4} k-blocks, "
                             "so that every piece holds two and no range two tiles' starts")
        if k_iters < 4 or (select is None and tiles < ctas and not self.spread):
            raise ValueError(f"stream_k needs at least 4 k-blocks and at least one tile per CTA ({ctas}), got "
                             f"{k_iters} k-blocks and {tiles} tiles")
        self.k_iters, self.ctas = k_iters, ctas
        self.select = select
        if self.spread:         # every k-block of every tile in the CTAs' ranges
            self.tiles_, self.dp_waves, self.units = tiles, 0, tiles * k_iters
        elif select is None:      # a tile count known at build time
            self.tiles_ = tiles
            self.dp_waves = tiles // ctas - 1               # whole waves of tiles before the split
            self.units = (tiles - self.dp_waves * ctas) * k_iters   # the last whole wave and the partial one
        else:                   # read at run time: below one tile per CTA no split (every range empty)
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

    def most_takes(self):
        """Spread: the most tails one head takes — the CTAs whose ranges start inside one tile after
        the head's, each range at least ``units // ctas - 2`` long (both ends moved by one at most)."""
        return self.k_iters // (self.units // self.ctas - 2) + 1

    def takes(self, p, k1, r, select=lambda c, a, b: a if c else b):
        """Spread: whether the head piece ``[0, k1)`` that CTA ``p`` ends its range with takes the tail of
        CTA ``p + r`` (``1 <= r <= most_takes()``): that CTA exists and its range starts before the
        tile ends."""
        end = self.bound(p + 1, select) - k1 + self.k_iters
        return select(p + r < self.ctas, self.bound(p + r, select) < end, False)


class StreamKSchedule(Persistent):
    """The persistent schedule with a stream-K tail (a build-time tile count): each CTA runs
    ``dp_waves`` whole tiles, then its stream-K pieces (at most three: at most one head and one
    tail), each followed by the epilogue's ``finish`` (store, hand over, or wait and add); with
    ``spread`` (:class:`StreamK`'s) fewer tiles than CTAs are spread over all of them, else refused."""

    name = "stream-K"
    hands_over = True

    def __init__(self, M, N, bm, bn, ctas, group, k_iters, rows_per_piece, cols, stack=1, spread=False):
        super().__init__(M, N, bm, bn, ctas, group, stack=stack)
        self.split = StreamK(self.tiles, k_iters, ctas, spread=spread)
        self.k_iters = k_iters
        self.workspace = (ctas * 2 * rows_per_piece, cols)     # fp32 partials: one per CTA and warpgroup

    def trips(self, count):
        return self.split.dp_waves

    def _bound(self, p):
        return self.split.bound(p, T.if_then_else)

    def produce_rest(self, cid, load):
        """The producer's k-blocks ``u`` of the CTA's stream-K range, continuing its iteration count;
        ``load(i, m_blk, n_blk, kb)`` fills pipeline iteration i."""
        sk, k_iters, grid, bound = self.split, self.k_iters, self.grid, self._bound

        @T.macro
        def rest():
            b0 = bound(cid)
            for u in T.serial(b0, bound(cid + 1)):
                m_blk, n_blk = grid.coords(sk.dp_tiles + u // k_iters)
                load(sk.dp_waves * k_iters + u - b0, m_blk, n_blk, u % k_iters)
        rest()

    def consume_rest(self, cid, k_range, finish):
        """The consumers' pieces: ``k_range(base, k0, k1)`` runs k-blocks ``[k0, k1)`` of a tile whose
        k-block 0 is pipeline iteration ``base``; ``finish(m_blk, n_blk, k0, k1)`` completes the piece."""
        sk, k_iters, grid, bound = self.split, self.k_iters, self.grid, self._bound

        @T.macro
        def rest():
            b0 = bound(cid)
            b1 = bound(cid + 1)
            for t in T.serial(b0 // k_iters, (b1 - 1) // k_iters + 1):
                k0 = T.max(b0, t * k_iters) - t * k_iters
                k1 = T.min(b1, t * k_iters + k_iters) - t * k_iters
                m_blk, n_blk = grid.coords(sk.dp_tiles + t)
                k_range(sk.dp_waves * k_iters + t * k_iters - b0, k0, k1)
                finish(m_blk, n_blk, k0, k1)
        rest()
