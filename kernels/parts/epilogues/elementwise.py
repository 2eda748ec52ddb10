"""The fused elementwise epilogue: ``C = cast(acc · s_row[m] · s_col[n] + bias[n] + R[m, n])`` with
any non-empty subset of per-row scales (a quantized activation's), per-column scales (a
per-channel-quantized weight's), a bias (fp32 vectors) and a residual R (C's type and shape), then
:class:`~.store.ChunkedStore`'s chunked stmatrix + TMA store.

Per tile each consumer warpgroup's first thread loads the vectors' slices under its part (its rows'
``s_row``, its columns' ``s_col`` and ``bias``) with TMA into a shared buffer of its own and waits
on its mbarrier (the phase is the warpgroup's count of waits); ``Ax.elementwise`` broadcasts the
(rows, 1) and (1, cols) views over the accumulator's fragment (the fragment's layout pairs each
register with its row and column), and the warpgroup meets at its named barrier before the buffer
may be refilled.  The residual arrives chunk by chunk: each chunk's TMA load lands in the free
store buffer, is read into the fragment (ldmatrix) and added in fp32, then the chunk is cast and
stored through the same buffer.  TMA zero-fills loads past M and N, so ragged edges read nothing
outside the operands (their values land in rows and columns the store clips).

Law: for every stored element, ``C[m, n] = cast((Σ_k A[m, k]·B[k, n]) · s_row[m] · s_col[n] +
bias[n] + R[m, n])`` (absent operands are 1, 1, 0, 0), the sum over k complete before the scales
(a split tile's partials are added first).  The vectors are declared ``(1, M)`` and ``(1, N)`` (a
row vector is a one-row matrix; ``v.view(1, -1)`` in torch).
"""

from tvm.script import tirx as T
from tvm.script.ir_builder import tirx as IRB

import axe.lang as Ax
from kernels.parts.epilogues.store import FUSED as OPS, ChunkedStore


class Waits:
    """A per-thread count of the waits on one mbarrier stage: its parity is the phase to wait for."""

    def __init__(self):
        self.buf = T.alloc_buffer((1,), "int32", scope="local")
        IRB.buffer_store(self.buf, 0, [0])

    def wait(self, bar, stage):
        """Wait for the next phase of ``bar[stage]``, then count it (the count is read before it moves:
        a TIR load is evaluated where the wait uses it)."""
        Ax.cuda.mbarrier_wait(bar, self.buf[0] % 2, stage)
        IRB.buffer_store(self.buf, self.buf[0] + 1, [0])


class Elementwise(ChunkedStore):
    """:class:`ChunkedStore` after ``acc · s_row · s_col + bias + residual`` (``ops``: a non-empty
    subset of :data:`OPS`)."""

    def __init__(self, main, sched, dtype, epilogue, epilogue_bufs=None, ops=()):
        super().__init__(main, sched, dtype, epilogue, epilogue_bufs)
        unknown = sorted(set(ops) - set(OPS))
        if unknown or not ops:
            raise ValueError(f"gemm: epilogue_ops must be a non-empty subset of {tuple(OPS)}, got {tuple(ops)!r}")
        self.ops = tuple(o for o in OPS if o in ops)
        self.name = f"{ChunkedStore.name} after {' · '.join(self.ops)}"
        used = {p for o in self.ops for p in OPS[o]}
        #: the vectors' widths: a warpgroup part's rows (per-row scales) or columns
        self.widths = {o: w for o, w in (("row_scale", self.rows), ("col_scale", self.cols), ("bias", self.cols))
                       if o in self.ops}
        self.operand_bytes = sum(2 * 4 * w for w in self.widths.values())
        self.m_maps = tuple(OPS[o][1] for o in ("row_scale", "residual") if o in self.ops)
        self.unused_params = tuple(p for p in ChunkedStore.unused_params if p not in used)

    def inputs(self, srow, scol, bias, res, srow_map, scol_map, bias_map, res_map):
        """Declare the fused operands (through their tensor maps), the vectors' shared buffers (one
        row per consumer warpgroup) and the mbarriers of both kinds of load."""
        given = {"row_scale": (srow, srow_map), "col_scale": (scol, scol_map), "bias": (bias, bias_map)}
        self.vectors = {op: (Ax.param(given[op][0], tensormap=given[op][1]),
                             Ax.shared((2, width), "float32", name=f"{op}_tile")) for op, width in self.widths.items()}
        if self.vectors:
            self.vec_bar = Ax.cuda.mbarrier(len(self.vectors), 2, name="vectors")
        if "residual" in self.ops:
            self.residual = Ax.param(res, tensormap=res_map)
            self.res_bar = Ax.cuda.mbarrier(1, 2, name="residual")

    def begin(self, dist):
        """The warpgroup's mbarrier phases."""
        self.vec_waits, self.res_waits = Waits(), Waits()

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        main = self.main
        row, col = m_blk * main.bm + main.row0(wg), n_blk * main.bn + main.col0(wg)
        if partial is not None:         # a split tile: the sum over k is complete before the scales
            Ax.elementwise(acc, lambda a, p: a + p, acc, partial)
        if self.vectors:
            self.apply_vectors(acc, wg, row, col)
        residual = self.add_residual(acc, out, wg, row) if "residual" in self.ops else None
        super().tile(acc, out, pool, C, wg, leader, m_blk, n_blk, dest=dest, add_chunk=residual)

    def apply_vectors(self, acc, wg, row, col):
        """``acc ← acc · s_row · s_col + bias`` with the slices of the part at (row, col)."""
        starts = {"row_scale": row, "col_scale": col, "bias": col}
        for op, (g, s) in self.vectors.items():
            width = s.shape[1]
            Ax.copy(s[wg:wg + 1, :], g[0:1, starts[op]:starts[op] + width], barrier=self.vec_bar, stage=wg)
        self.vec_waits.wait(self.vec_bar, wg)
        views = {op: s[wg:wg + 1, :] for op, (g, s) in self.vectors.items()}
        if "row_scale" in views:
            views["row_scale"] = Ax.permute(views["row_scale"], (1, 0))
        names = tuple(views)

        def fn(a, *x):
            v = dict(zip(names, x))
            y = a * v["row_scale"] if "row_scale" in v else a
            y = y * v["col_scale"] if "col_scale" in v else y
            return y + v["bias"] if "bias" in v else y
        Ax.elementwise(acc, fn, acc, *views.values())
        Ax.cuda.named_barrier(1 + wg, 128)      # every thread has read the vectors: they may be refilled

    def add_residual(self, acc, out, wg, row):
        """The store's ``add_chunk``: chunk j of R through the free store buffer, added in fp32."""
        e, rows = self.epilogue, self.rows

        def add(j, Cw, n0):
            cols = slice(j * e, (j + 1) * e)
            Ax.copy(Cw, self.residual[row:row + rows, n0:n0 + e], barrier=self.res_bar, stage=wg)
            self.res_waits.wait(self.res_bar, wg)
            Ax.copy(out[:, cols], Cw)
            Ax.cuda.named_barrier(1 + wg, 128)       # every thread has read the buffer
            Ax.elementwise(acc[:, cols], lambda a, r: a + T.cast(r, "float32"), acc[:, cols], out[:, cols])
        return add
