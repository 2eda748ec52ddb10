"""The partial hand-over of a tile split in k over two CTAs (stream-K; a tile's *tail* CTA holds its
last k-blocks, its *head* CTA its first): the tail writes its fp32 partial accumulator to a scratch
workspace block and publishes it with a flag (``Ax.cuda.flag_set``: release ordering); the head
waits for the flag (``Ax.cuda.flag_take``: bounded, acquire ordering, resets it for the next launch),
adds the block into its accumulator while casting, and stores the tile.

Law: with slot ``s`` written once by the tail and taken once by the head, the stored tile equals the
sum over all its k-blocks; a slot is one 64-row block per (CTA, consumer warpgroup), so the tail of
CTA ``c + 1``'s first piece is the head of CTA ``c``'s last (the stream-K ranges are contiguous).
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax

ROWS = 64           # rows of a consumer warpgroup's partial


def publish(W, F, slot, acc, leader, wg, rows=ROWS):
    """The tail: warpgroup ``wg`` writes its partial accumulator to workspace row block ``slot``
    (``rows`` rows of fp32) and publishes it with flag ``slot`` (its 128 threads meet at named
    barrier ``1 + wg``)."""
    Ax.copy(W[slot * rows:(slot + 1) * rows, :], acc)
    Ax.cuda.flag_set(F, slot, leader, 1 + wg, 128)


def take(W, F, slot, leader, wg, pred=None, rows=ROWS):
    """The head: wait (bounded) for flag ``slot`` where ``pred`` holds (default always) and return
    the workspace block to add to the accumulator."""
    if pred is None:
        Ax.cuda.flag_take(F, slot, leader, 1 + wg, 128)
    else:
        with Ax.guard(pred):
            Ax.cuda.flag_take(F, slot, leader, 1 + wg, 128)
    return W[slot * rows:(slot + 1) * rows, :]


class Handover:
    """An epilogue (``inner``: :class:`~kernels.parts.epilogues.store.ChunkedStore`) that also
    finishes split pieces: whole tiles are stored by ``inner``; after a piece [k0, k1) of a tile of
    ``k_iters`` k-blocks the tail (``k0 > 0``) publishes, the head (``k1 < k_iters``) takes the next
    CTA's partial and stores, a whole piece is stored."""

    hands_over = True

    def __init__(self, inner, k_iters):
        self.inner, self.k_iters = inner, k_iters
        self.name = f"{inner.name} + partial hand-over"

    def __getattr__(self, attr):        # everything else is the inner epilogue's
        return getattr(self.inner, attr)

    def finish(self, acc, out, pool, C, W, F, cid, wg, leader, m_blk, n_blk, k0, k1):
        store = self.inner.tile
        with IRB.If(k1 < self.k_iters):
            with IRB.Then():
                partial = take(W, F, (cid + 1) * 2 + wg, leader, wg)
                store(acc, out, pool, C, wg, leader, m_blk, n_blk, partial=partial)
            with IRB.Else():
                with IRB.If(k0 > 0):
                    with IRB.Then():
                        publish(W, F, cid * 2 + wg, acc, leader, wg)
                    with IRB.Else():
                        store(acc, out, pool, C, wg, leader, m_blk, n_blk)


class SpreadHandover(Handover):
    """The hand-over of a spread stream-K split (:class:`~kernels.parts.schedulers.stream_k.StreamK`
    with ``spread``: a tile may fall into many CTAs' ranges): a piece that starts inside its tile (a
    tail) publishes to its CTA's slot; a tile's head (its first k-blocks, the last piece of CTA ``p``)
    takes the tails of the CTAs ``p + 1, p + 2, …`` whose ranges start inside the tile — adds those of
    ``p + 2, p + 3, …`` in that order, then ``p + 1``'s while storing (the sum's order is fixed, so
    results do not depend on timing)."""

    def __init__(self, inner, split):
        super().__init__(inner, split.k_iters)
        self.split = split
        self.name = f"{inner.name} + spread partial hand-over"

    def finish(self, acc, out, pool, C, W, F, cid, wg, leader, m_blk, n_blk, k0, k1):
        split, store = self.split, self.inner.tile

        def takes(r):
            return split.takes(cid, k1, r, T.if_then_else)
        with IRB.If(k0 > 0):
            with IRB.Then():
                publish(W, F, cid * 2 + wg, acc, leader, wg)
            with IRB.Else():
                with IRB.If(k1 < self.k_iters):
                    with IRB.Then():
                        # the head's first take is certain (someone holds the tile's last k-blocks);
                        # the rest are taken while their CTA's range starts inside the tile
                        for r in range(2, split.most_takes() + 1):
                            with Ax.guard(takes(r)):
                                Ax.elementwise(acc, lambda a, q: a + q, acc, take(W, F, (cid + r) * 2 + wg, leader, wg))
                        store(acc, out, pool, C, wg, leader, m_blk, n_blk,
                              partial=take(W, F, (cid + 1) * 2 + wg, leader, wg))
                    with IRB.Else():
                        store(acc, out, pool, C, wg, leader, m_blk, n_blk)


class SplitKHandover(Handover):
    """The split-K hand-over: a unit (tile t, slice s) below the last publishes its partial to slot
    ``(t·(S−1) + s)·2 + wg``; the last slice's CTA takes slices 0, 1, …, S−2 in that order, adds each
    into its accumulator (the sum's order is fixed, so results do not depend on timing) and stores
    the tile (:mod:`kernels.parts.schedulers.split_k`)."""

    def __init__(self, inner, slices):
        super().__init__(inner, None)
        self.slices = slices
        self.name = f"{inner.name} + split-K reduction"

    def reduce(self, W, F, acc, leader, wg, t, s, store):
        """Unit (tile t, slice s): publish below the last slice, else ``store(take_slice)`` —
        ``take_slice(r)`` waits for slice r's partial and returns its block (call it for r = 0, 1, …,
        S−2 in that order: the sum's order is fixed)."""
        last = self.slices - 1

        def slot(r):
            return (t * last + r) * 2 + wg
        with IRB.If(s < last):
            with IRB.Then():
                publish(W, F, slot(s), acc, leader, wg)
            with IRB.Else():
                store(lambda r: take(W, F, slot(r), leader, wg))

    def finish(self, acc, out, pool, C, W, F, cid, wg, leader, m_blk, n_blk, t, s):
        last = self.slices - 1

        def store(take_slice):
            for r in range(last - 1):
                Ax.elementwise(acc, lambda a, p: a + p, acc, take_slice(r))
            self.inner.tile(acc, out, pool, C, wg, leader, m_blk, n_blk, partial=take_slice(last - 1))
        self.reduce(W, F, acc, leader, wg, t, s, store)
