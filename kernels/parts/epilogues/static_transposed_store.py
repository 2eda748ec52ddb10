"""The transposed store (:class:`~.transposed_store.TransposedStore`) of a mainloop whose shared pool
is not of the output type (the FP8 decode tile, :mod:`kernels.parts.mainloops.fp8_transposed`):
each consumer warpgroup's ``tile_m × 64`` bf16 buffer is a region of one static buffer declared
beside the pool (as :class:`~.static_store.StaticStore` does for the row-major store), and a split
tile's partials are added the way :class:`~.one_site_split_k.OneSiteSplitK` adds them — through
``add_chunk``, here one chunk: the whole ``64 × tile_m`` accumulator.

Contract: :class:`~.transposed_store.TransposedStore`'s, plus ``shared()`` (the buffer, declared once
per CTA) and ``declare_scratch(W_, F_)`` (nothing for whole tiles).
Law: :mod:`.transposed_store`'s; with ``add_chunk`` the stored tile is the accumulator after it.
"""

import axe.lang as Ax
from kernels.parts.epilogues.transposed_store import TransposedStore
from kernels.parts.tiles import swizzled


class StaticTransposedStore(TransposedStore):
    """Cast + transposed TMA store of each consumer warpgroup's ``64 × tile_m`` part through its
    ``tile_m × 64`` region of a static buffer."""

    name = "cast + transposed TMA store through a static buffer"

    def __init__(self, main, sched, dtype):
        super().__init__(main, sched, dtype)
        self.smem = 0               # nothing in the mainloop's pool

    def shared(self):
        """The static buffer: a ``tile_m × 64`` region (C's orientation) per consumer warpgroup."""
        return Ax.shared((2 * self.cols, self.rows), self.dtype, swizzled(2 * self.cols, self.rows), name="cbuf")

    def buffer(self, pool, wg, j=0):
        """Warpgroup wg's region (``pool``: the static buffer)."""
        return Ax.view(pool, swizzled(self.cols, self.rows), (self.cols, self.rows), base=wg * (self.rows * self.cols))

    def declare_scratch(self, W_, F_):
        """Whole tiles: no workspace (its parameters leave the signature)."""

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        """``add_chunk(0, None, 0)`` (a split tile's partials) into the whole accumulator, then
        :class:`~.transposed_store.TransposedStore`'s cast and store."""
        if add_chunk is not None:
            add_chunk(0, None, 0)
        super().tile(acc, out, pool, C, wg, leader, m_blk, n_blk, partial, dest)
