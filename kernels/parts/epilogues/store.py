"""The store epilogue: a finished accumulator is cast to the output type and stored chunk by chunk —
``stmatrix`` into a 128-byte-swizzled shared buffer, then one thread's TMA store — so that the
shared memory it needs stays small (chunks of ``epilogue`` columns through ``bufs`` buffers per
warpgroup; with one buffer a chunk waits until the previous chunk's store has read it).  A part
whose width is not a multiple of 64 (a tile ``tile_n`` = 176 wide) stores its whole 64-column blocks
so, then its last 64 columns as one more chunk: C has one tensor map, so every store is the same
64-column box, and the columns this chunk shares with the one before are written twice, with the
same values.

Contract (every epilogue offers it to the kernel skeleton): ``smem`` (pool elements it needs after
the mainloop's), ``declare(...)`` (its parameters and mesh: an object with ``mesh``), ``begin``,
``inputs(...)`` (the fused operands' parameters, :data:`FUSED`), ``store(acc, out, pool, C, dist, wg,
leader, m_blk, n_blk)`` for each whole tile, ``end``,
``producer_warps``, ``unused_params`` (the kernel parameters it does not use) and ``m_maps``.

Law: every element of C inside the matrix is written once per tile (an overlapped column of a
narrower last chunk twice, with the same value), from the accumulator element the wgmma/tcgen05
fragment layout puts there; stores past M or N are clipped by TMA; a
cluster's block-row past M (``past_rows``) stores nothing.
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.parts.epilogues.chunks import chunking


#: the fused elementwise operands' kernel parameters (tensor, tensor map), by operation, in the order
#: they apply (:mod:`kernels.parts.epilogues.elementwise`); an epilogue without them leaves them unused
FUSED = {"row_scale": ("Srow_", "Srow_map"), "col_scale": ("Scol_", "Scol_map"), "bias": ("Bias_", "Bias_map"),
         "residual": ("R_", "R_map")}
FUSED_PARAMS = tuple(p for ps in FUSED.values() for p in ps)


class NoMesh:
    """What a one-GPU epilogue declares: no mesh."""

    _is_meta_class = True

    def __init__(self):
        self.mesh = None


class ChunkedStore:
    """Cast + stmatrix + TMA store of each consumer warpgroup's part (``main.part``) of a
    ``bm``×``bn`` tile, ``epilogue`` columns at a time."""

    name = "cast + stmatrix + TMA store"
    hands_over = False

    def __init__(self, main, sched, dtype, epilogue, epilogue_bufs=None):
        self.main, self.sched, self.dtype = main, sched, dtype
        self.rows, self.cols = main.part
        self.epilogue = epilogue
        self.chunks, self.bufs = chunking(epilogue, self.cols, epilogue_bufs)
        self.rest = self.cols % 64          # columns past the whole 64-column blocks (0: none)
        self.c_at = main.smem
        self.smem = 2 * self.bufs * self.rows * epilogue

    def out_cols(self, N):
        """C's columns for a GEMM of ``N`` columns (a cast stores them all)."""
        return N

    def convert(self, out, acc):
        """The finished accumulator into the output registers (here a cast)."""
        Ax.cast(out, acc)

    def out_part(self, out):
        """The output registers a warpgroup stores (all of them here)."""
        return out

    #: C's columns per tile (the GEMM's, for a cast)
    @property
    def tile_cols(self):
        return self.main.bn

    def declare(self, *params):
        return NoMesh()

    def inputs(self, *params):
        """No fused operands."""

    def begin(self, dist):
        """Nothing to set up."""

    def end(self, dist, wg, leader):
        """Nothing pending."""

    def producer_warps(self, dist):
        """No producer warps."""

    unused_params = ("Q_", "P_", "P_map", "peers", "sig", "err", "rank_", "epoch", "timeout_ns") + FUSED_PARAMS
    #: static shared bytes of fused operands
    operand_bytes = 0
    #: registers per thread of the producer warpgroup (its warps run only the loads here)
    producer_regs = 40
    #: the tensor maps besides A's and C's whose extents include M (a run-time M reads them at launch)
    m_maps = ()
    #: the mesh-wide parameters' sizes (one GPU: placeholders, dropped from the signature)
    world, p_shape, nsig = 1, (1,), 1

    def span(self, j):
        """``(first column, columns)`` of chunk j within a warpgroup's part: ``epilogue`` columns at
        ``j·epilogue``, except a narrower rest's chunk, which is the part's last 64 columns."""
        e = self.epilogue
        return (j * e, e) if j * e + e <= self.cols else (self.cols - 64, 64)

    def buffer(self, pool, wg, j):
        """Warpgroup wg's shared buffer for chunk j (in the pool after the mainloop's slots): the one
        chunk j - bufs (or the previous tile's) used."""
        e, w = self.epilogue, self.span(j)[1]
        return self.main.tile(pool, self.c_at + (wg * self.bufs + j % self.bufs) * (self.rows * e), (self.rows, w))

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        """Cast (adding a split tile's fp32 ``partial``) and store the tile chunk by chunk, each through
        a shared buffer: TMA stores into C, or bulk copies into ``dest(row, n0)``.  ``add_chunk(j, Cw,
        n0)`` adds into the accumulator's chunk j through the free buffer Cw first (a distributed
        owner's peer partials); each chunk is then cast on its own."""
        main, e, dtype = self.main, self.epilogue, self.dtype
        if add_chunk is None and partial is None:
            self.convert(out, acc)
        elif add_chunk is None:     # a split tile's first k-blocks: add the partial sum of the rest
            Ax.elementwise(out, lambda a, p: T.cast(a + p, dtype), acc, partial)
        row = m_blk * main.bm + main.row0(wg)
        split_cols = main.split == "columns"

        def n0_of(j):
            c0 = self.span(j)[0]
            return n_blk * self.tile_cols + (main.col0(wg) + c0 if split_cols else c0)

        def add(j, Cw):
            c0, w = self.span(j)
            cols = slice(c0, c0 + w)
            add_chunk(j, Cw, n0_of(j))
            Ax.cast(out[:, cols], acc[:, cols])

        def write(j, Cw):
            n0, w = n0_of(j), self.span(j)[1]
            if dest is None:
                Ax.copy(C[row:row + self.rows, n0:n0 + w], Cw, fence=False, wait=False)
            else:           # one bulk copy of the chunk's image (a peer's staging has no tensor map)
                Ax.copy(dest(row, n0), Cw, fence=False, wait=False, schedule="bulk")
        before = None if add_chunk is None else add
        part = self.out_part(out)
        if not self.rest:
            Ax.cuda.staged_store(part, e, lambda j: self.buffer(pool, wg, j), write, 1 + wg, leader, self.bufs, before)
            return
        if add_chunk is not None:
            raise ValueError(f"gemm: chunks added into the accumulator (add_chunk) need a part whose {self.cols} "
                             "columns are whole 64-column blocks: the rest's chunk overlaps the one before")
        # the whole 64-column blocks, then the rest as the part's last 64 columns through the same
        # 64-column box of C's one tensor map: the overlap is stored twice, with the same values
        body, last = self.cols - self.rest, self.chunks - 1
        Ax.cuda.staged_store(part[:, :body], e, lambda j: self.buffer(pool, wg, j), write, 1 + wg, leader, self.bufs)
        Ax.cuda.staged_store(part[:, self.cols - 64:], 64, lambda j: self.buffer(pool, wg, last),
                             lambda j, Cw: write(last, Cw), 1 + wg, leader, self.bufs)

    def store(self, acc, out, pool, C, dist, wg, leader, m_blk, n_blk):
        """A whole tile; a cluster's block-row past M stores nothing."""
        if not self.sched.past_rows:
            self.tile(acc, out, pool, C, wg, leader, m_blk, n_blk)
            return
        with Ax.guard(m_blk < self.sched.m_tiles):
            self.tile(acc, out, pool, C, wg, leader, m_blk, n_blk)
