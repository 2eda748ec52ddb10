"""Split-K's hand-over for the static-buffer store (:class:`~.static_store.StaticStore`, the block-scaled
FP8 kernel's epilogue): :class:`~.handover.SplitKHandover`'s slots and order, finished the way
:class:`~.static_store.OneSiteHandover` finishes stream-K — at one store site, the partials added
chunk by chunk.

A unit (tile t, slice s) below the last publishes its fp32 partial to slot ``(t·(S−1) + s)·2 + wg``
(:func:`~.handover.publish`); the last slice's unit takes slices 0, 1, …, S−2 (:func:`~.handover.take`)
and stores the tile, adding, for each ``epilogue``-wide chunk, slice 0's columns, then slice 1's, …
into its accumulator through ``scratch`` (the mainloop's partial accumulator, free once the main
loop is done) before the chunk is cast.  Chunk by chunk because a whole 64×256 fp32 partial read at
once beside the accumulator and its cast spilled (as for stream-K).

Law: every element of a stored tile is ``acc_{S−1} + p_0 + p_1 + … + p_{S−2}`` summed in that order
(results do not depend on which CTA finished first), each ``p_s`` the promoted fp32 sum over slice
s's k-blocks; every slot is written once and taken once per launch (the flags are left zero).
"""

import axe.lang as Ax
from kernels.parts.epilogues.handover import SplitKHandover


class OneSiteSplitK(SplitKHandover):
    """A :class:`~.static_store.StaticStore` (``inner``) finishing split-K units (module docstring);
    ``slices``: S, the slices of K per tile."""

    def __init__(self, inner, slices):
        if inner.epilogue != inner.main.part_n:
            raise ValueError(f"gemm_fp8: split-K adds partials {inner.epilogue} columns at a time through the "
                             f"{inner.main.part_n}-column partial accumulator: both must be one width (a tile "
                             "width that is a multiple of 128)")
        super().__init__(inner, slices)

    def declare_scratch(self, W_, F_):
        """The partials (fp32, a 64-row block per (tile, slice but the last, warpgroup)) and their flags."""
        self.W, self.F = Ax.param(W_, scratch=True), Ax.param(F_, scratch=True)

    def finish(self, acc, out, pool, C, cid, wg, leader, m_blk, n_blk, t, s, scratch):
        """After slice s of tile t: publish (s < S−1), or take every other slice's partial and store."""
        e = self.epilogue

        def store(take_slice):
            partials = [take_slice(r) for r in range(self.slices - 1)]

            def add(j, Cw, n0):
                cols = slice(j * e, (j + 1) * e)
                for p in partials:
                    Ax.copy(scratch, p[:, cols])
                    Ax.elementwise(acc[:, cols], lambda a, q: a + q, acc[:, cols], scratch)
            self.inner.tile(acc, out, pool, C, wg, leader, m_blk, n_blk, add_chunk=add)
        self.reduce(self.W, self.F, acc, leader, wg, t, s, store)
