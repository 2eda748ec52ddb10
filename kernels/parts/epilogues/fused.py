"""The grouped GEMM's epilogue (:mod:`kernels.moe_gemm`, :mod:`kernels.moe_experts`): a finished
accumulator goes through the fused elementwise in registers — ``SiLU(gate) · up`` where the
mainloop paired each gate column with its up column (:mod:`..mainloops.gathered_rows`), else a
cast — then ``stmatrix`` + TMA store chunk by chunk through the consumer warpgroup's staging
buffer of the ring (each chunk waits until the previous store has read it).  Where segments are
padded to fewer rows than a tile (``overlap``), a tile reaches into the next experts' rows and
stores only its ``own`` rows, in boxes of :data:`STORE_ROWS` each guarded by the owned count.
:class:`FusedHandover` adds stream-K's partial hand-over (:func:`~.handover.publish`,
:func:`~.handover.take`).

Contract: ``store(acc, out, pool, C, wg, leader, r0, own, n_blk)`` for each whole tile of rows
[r0, r0 + bm) (``own`` of them the tile's), ``chunk`` (columns per store: the ring's staging
buffer), ``out_layout()``, ``declare(W_, F_)`` and ``registers()`` (a hand-over's workspace and
partial registers: nothing here), ``name``/``hands_over`` (what :func:`kernels.parts.compose` reads).

Law: every row a tile owns is written exactly once per column, from the accumulator element the
wgmma fragment puts there (rows past the tile's own are never written: segments are padded to a
multiple of :data:`STORE_ROWS`, so the last box ends inside the segment; stores past the tensor
are clipped by TMA); a split tile's head adds the tail's fp32 partial before the elementwise, so
the stored value is that of the whole sum.
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from axe.layout import S
from kernels.parts.epilogues.handover import publish, take
from kernels.parts.tiles import swizzled

STORE_ROWS = 16          # rows per epilogue store box where tiles overlap the next segment
SK_PART = 64             # stream-K: partial-sum columns added per step (a 64 × 64 fp32 register block)
ROWS = 64                # rows of a consumer warpgroup's part


class FusedStore:
    """SiLU·up (``act="silu_mul"``: accumulator columns [0, bn/2) are gate, [bn/2, bn) up) or a cast,
    then the chunked TMA store of each consumer warpgroup's 64 rows (only the ``own`` rows where
    segments are padded to ``pad`` < ``bm`` rows)."""

    name = "fused elementwise + stmatrix + TMA store of own rows"
    hands_over = False

    def __init__(self, main, dtype, act, pad):
        self.dtype, self.act, self.bn = dtype, act, main.bn
        self.half = main.bn // 2 if act else main.bn      # output columns per tile
        self.chunk = min(self.half, 128)                  # output columns per store chunk (one 16 KiB buffer)
        # the staging buffer: 64-column swizzled blocks, or (a chunk of 48: bn = 96) plain rows, which
        # TMA stores unswizzled and stmatrix writes at a 16-byte-aligned pitch
        self.swizzled_stage = self.chunk % 64 == 0
        self.overlap = pad < main.bm                      # tiles reach past their segment: store only own rows
        self.ring = None                                  # the mainloop's Ring (it sets this)

    def out_layout(self):
        """wgmma's D fragment over the warpgroup's 64 × ``half`` output (the elementwise's result)."""
        return Ax.cuda.wgmma_fragment(self.half, "tx")

    def declare(self, W_, F_):
        """Whole tiles: no workspace (its parameters leave the signature)."""

    def registers(self):
        """Whole tiles: no partial registers."""

    def stage(self, rows):
        """The layout of ``rows`` rows of a warpgroup's staging buffer (``rows < 64``: a row range of
        it, whose column blocks stay 64 rows apart)."""
        return swizzled(rows, self.chunk, panel=64 * 64) if self.swizzled_stage else S[(rows, self.chunk)]

    def add_partial(self, acc, partial, add_if, part):
        """``acc += partial`` where ``add_if`` holds, ``part``'s columns at a time (``partial``: a
        stream-K head's fp32 sum of the tile's other k-blocks, global, 64 × bn)."""
        pn = part.shape[1]
        for c in range(self.bn // pn):
            cols = slice(c * pn, (c + 1) * pn)
            with Ax.guard(add_if):
                Ax.copy(part, partial[:, cols])
                Ax.elementwise(acc[:, cols], lambda a, q: a + q, acc[:, cols], part)

    def store(self, acc, out, pool, C, wg, leader, r0, own, n_blk, partial=None, add_if=None, part=None):
        """The elementwise (adding a head's ``partial`` first, :meth:`add_partial`) in registers,
        then the tile's chunks through this warpgroup's buffer; with ``overlap`` only the tile's
        ``own`` rows go out, in boxes of ``STORE_ROWS``."""
        chunk, half, dtype = self.chunk, self.half, self.dtype
        if partial is not None:
            self.add_partial(acc, partial, add_if, part)
        if self.act:
            Ax.elementwise(out, lambda g, u: T.cast(g / (T.float32(1) + T.exp(-g)) * u, dtype),
                           acc[:, 0:half], acc[:, half:self.bn])
        else:
            Ax.cast(out, acc)
        row, at = r0 + wg * ROWS, self.ring.c_at + wg * self.ring.c_slot

        def tma_store(j, buf):
            n0 = n_blk * half + j * chunk
            if not self.overlap:
                Ax.copy(C[row:row + ROWS, n0:n0 + chunk], buf, fence=False, wait=False)
                return
            h = STORE_ROWS
            for q in range(ROWS // h):     # rows q·h .. of the staging tile (its column blocks hold 64 rows each)
                part = Ax.view(pool, self.stage(h), (h, chunk), base=at + q * h * min(chunk, 64))
                with Ax.guard(q * h < own - wg * ROWS):
                    Ax.copy(C[row + q * h:row + (q + 1) * h, n0:n0 + chunk], part, fence=False, wait=False)
        Ax.cuda.staged_store(out, chunk, lambda j: Ax.view(pool, self.stage(ROWS), (ROWS, chunk), base=at), tma_store,
                             1 + wg, leader)


class FusedHandover:
    """:class:`FusedStore` (``inner``) finishing stream-K pieces of ``k_iters`` k-blocks with
    ``consumers`` warpgroups per CTA: a tail (``k0 > 0``) publishes its partial to workspace block
    ``cid·consumers + wg``; a head (``k1 < k_iters``) takes CTA ``cid + 1``'s and adds it, ``SK_PART``
    columns at a time, before the elementwise; a head or a whole piece is stored."""

    hands_over = True

    def __init__(self, inner, k_iters, consumers):
        self.inner, self.k_iters, self.consumers = inner, k_iters, consumers
        self.name = f"{inner.name} + partial hand-over"

    def __getattr__(self, attr):        # everything else is the inner epilogue's
        return getattr(self.inner, attr)

    def declare(self, W_, F_):
        """The scratch partials (fp32, a 64-row block per CTA and warpgroup) and their flags."""
        self.W, self.F = Ax.param(W_, scratch=True), Ax.param(F_, scratch=True)

    def registers(self):
        """The register block a head adds the partial through."""
        self.part = Ax.registers((ROWS, SK_PART), "float32", Ax.cuda.wgmma_fragment(SK_PART, "tx"), name="part")

    def finish(self, acc, out, pool, C, cid, wg, leader, r0, own, n_blk, k0, k1):
        """After piece [k0, k1) of the tile of rows [r0, r0 + bm), column block n_blk."""
        W, F, c = self.W, self.F, self.consumers
        with IRB.If(k0 > 0):
            with IRB.Then():
                publish(W, F, cid * c + wg, acc, leader, wg)
            with IRB.Else():
                partial = take(W, F, (cid + 1) * c + wg, leader, wg, pred=k1 < self.k_iters)
                self.inner.store(acc, out, pool, C, wg, leader, r0, own, n_blk, partial, k1 < self.k_iters, self.part)
