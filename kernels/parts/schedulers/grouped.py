"""The grouped GEMM's tile walk (the MoE layer's expert GEMMs): the m-extent is the permutation's
tile count ``meta[0]``, read on the device, so the persistent schedule's tile count, each CTA's
share of it and (stream-K) the split are run-time values; the grid is ``min(ctas, MT · n_tiles)``
for the tile tables' capacity ``MT``.

Contract (to :mod:`kernels.moe_gemm`): ``launch_grid(MT)``, ``over(meta)`` (the walk of this
launch: call once, in the kernel, before the loops), ``whole_tiles(cid, role)`` (how many tiles
CTA ``cid`` runs whole; ``role``: ``"producer"`` or ``"consumer"``, whose code names the run-time
split once), ``coords(cid, it)`` (``(m block, n block)`` of its ``it``-th), ``produce_rest(load)`` /
``consume_rest(k_blocks, finish)`` (the CTA's stream-K pieces: nothing for :class:`Grouped`) and
what :func:`kernels.parts.compose` reads (``name``, ``hands_over``, ``stack``).

Law: :class:`~axe.lang.TileSchedule`'s — CTA ``cid`` runs tiles ``cid + i·ctas`` in grouped order,
every tile of the ``meta[0] × n_tiles`` grid exactly once; with stream-K,
:class:`~.stream_k.StreamK`'s on the run-time count (``select = T.if_then_else``, each run-time
value bound once per role): whole tiles ``dp_count(cid)``, then the CTA's pieces, a split tile's
head finishing it with the tail's partial; below one tile per CTA nothing is split.
:class:`TwoGemms` (two GEMMs in one order, the fused experts kernel): CTA ``cid`` runs tiles
``cid + i·grid`` of GEMM 1's ``meta[0]·n1`` tiles followed by GEMM 2's ``meta[0]·n2`` — all its GEMM 1
tiles first — each GEMM's tiles in its own grouped order, every tile of both exactly once.
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from kernels.parts.schedulers.stream_k import StreamK


class Grouped:
    """The persistent grouped walk of ``meta[0]`` m-tiles × ``n_tiles`` column blocks over ``ctas``
    CTAs, bands of ``group`` block-rows."""

    name = "grouped (run-time tile count)"
    hands_over = False
    stack = 1

    def __init__(self, n_tiles, k_iters, ctas, group):
        self.n_tiles, self.k_iters, self.ctas, self.group = n_tiles, k_iters, ctas, group
        self.grid = None            # this launch's TileSchedule (:meth:`over`)

    def launch_grid(self, MT):
        """No more CTAs than the tile tables' capacity holds tiles."""
        return [T.min(self.ctas, MT * self.n_tiles)]

    def over(self, meta):
        """The walk over the permutation's ``meta[0]`` m-tiles, read on the device."""
        self.grid = Ax.TileSchedule(meta[0], self.n_tiles, self.ctas, self.group)

    def whole_tiles(self, cid, role):
        return self.grid.count(cid)

    def coords(self, cid, it):
        return self.grid.coords(self.grid.tile(cid, it))

    def produce_rest(self, load):
        """Nothing after the whole tiles."""

    def consume_rest(self, k_blocks, finish):
        """Nothing after the whole tiles."""


class GroupedStreamK(Grouped):
    """:class:`Grouped` with the last whole round of tiles and the partial one split over all CTAs in
    k-blocks (:class:`~.stream_k.StreamK` on the run-time count)."""

    name = "grouped stream-K (run-time tile count)"
    hands_over = True

    def __init__(self, n_tiles, k_iters, ctas, group):
        super().__init__(n_tiles, k_iters, ctas, group)
        self.split = {}             # role -> (StreamK, b0, b1, whole tiles): named once in the role's code

    def whole_tiles(self, cid, role):
        """The tiles before the CTA's stream-K range; names, once in ``role``'s code, the split of the
        tile count read on the device and this CTA's range ``[b0, b1)`` of its k-blocks."""
        sk = StreamK(self.grid.tiles, self.k_iters, self.ctas, T.if_then_else, Ax.computed_once)
        self.split[role] = (sk, Ax.computed_once(sk.bound(cid, T.if_then_else)),
                            Ax.computed_once(sk.bound(cid + 1, T.if_then_else)), Ax.computed_once(sk.dp_count(cid)))
        return self.split[role][3]

    def _pieces(self, role, body):
        """``body(k0, k1, m_blk, n_blk, base)`` for each stream-K piece of the CTA (the tile's
        coordinates found once per piece; ``base``: the pipeline iteration of its k-block 0)."""
        sk, b0, b1, dp = self.split[role]
        t0, t1 = sk.tiles(b0, b1)
        with IRB.serial(t0, t1) as t:
            k0, k1 = sk.piece(t, b0, b1, T.max, T.min)
            m_blk, n_blk = self.grid.coords(sk.dp_tiles + t)
            base = dp * self.k_iters + t * self.k_iters - b0      # the iteration of the tile's k-block 0
            body(k0, k1, m_blk, n_blk, base)

    def produce_rest(self, load):
        """Producer: the pieces' k-blocks, continuing the CTA's pipeline iterations;
        ``load(i, m_blk, n_blk, kb)``."""
        def piece(k0, k1, m_blk, n_blk, base):
            with IRB.serial(k0, k1) as kb:
                load(base + kb, m_blk, n_blk, kb)
        self._pieces("producer", piece)

    def consume_rest(self, k_blocks, finish):
        """Consumer: each piece's ``k_blocks(base, k0, k1)``, then ``finish(m_blk, n_blk, k0, k1)``
        (at most three pieces: a tail, whole tiles, a head)."""
        def piece(k0, k1, m_blk, n_blk, base):
            k_blocks(base, k0, k1)
            finish(m_blk, n_blk, k0, k1)
        self._pieces("consumer", piece)


class TwoGemms:
    """Two grouped GEMMs' tiles in one persistent order (the fused experts kernel,
    :mod:`kernels.moe_experts`): ``meta[0]`` m-tiles × ``n1`` column blocks of GEMM 1, then × ``n2``
    of GEMM 2, over ``grid = min(ctas, MT · (n1 + n2))`` CTAs; CTA ``cid`` runs tiles ``cid + i·grid``
    of the concatenation, so its GEMM 1 tiles (the first ``first``) come before its GEMM 2 tiles,
    each GEMM walked in grouped order (bands of ``group`` block-rows).  The kernel names ``grid``,
    ``tiles1``, ``count`` and ``first`` once (:meth:`over` takes the named ones)."""

    name = "grouped, two GEMMs in one order (run-time tile count)"
    hands_over = False
    stack = 1

    def __init__(self, n1, n2, ctas, group):
        self.n1, self.n2, self.ctas, self.group = n1, n2, ctas, group
        self.grid = self.tiles1 = self.walk1 = self.walk2 = None      # this launch's (:meth:`over`)

    def launch_grid(self, MT):
        return [self.size(MT)]

    def size(self, MT):
        """The persistent grid: no more CTAs than the tile tables' capacity holds tiles."""
        return T.min(self.ctas, MT * (self.n1 + self.n2))

    def first_tiles(self, meta):
        """GEMM 1's tiles: they come first in the order."""
        return meta[0] * self.n1

    def count(self, meta, cid, grid):
        """CTA ``cid``'s tiles of both GEMMs."""
        return (meta[0] * (self.n1 + self.n2) - cid + grid - 1) // grid

    def first(self, tiles1, cid, grid):
        """How many of them are GEMM 1's."""
        return (tiles1 - cid + grid - 1) // grid

    def over(self, meta, grid, tiles1):
        """Both walks of this launch (``grid``, ``tiles1``: the kernel's named values)."""
        self.grid, self.tiles1 = grid, tiles1
        self.walk1 = Ax.TileSchedule(meta[0], self.n1, grid, self.group)
        self.walk2 = Ax.TileSchedule(meta[0], self.n2, grid, self.group)

    def coords1(self, cid, it):
        """``(m block, n block)`` of CTA ``cid``'s ``it``-th tile, one of GEMM 1's."""
        return self.walk1.coords(cid + it * self.grid)

    def coords2(self, cid, it):
        """``(m block, n block)`` of CTA ``cid``'s ``it``-th tile, one of GEMM 2's."""
        return self.walk2.coords(cid + it * self.grid - self.tiles1)
