"""The gated MLP's activation fused into the transposed decode tile's store
(:class:`~.transposed_store.TransposedStore`'s tile, ``Cᵀ = W·xᵀ``).  The weight W is interleaved
in periods of 128 rows (:func:`kernels.tp_shapes.interleave` with ``bn=128``): the tile's 128
weight rows are 64 gate rows, held by consumer warpgroup 0, then the matching 64 up rows, held
by warpgroup 1, so the gate and up values of one output element live in two warpgroups.

Per tile, warpgroup 1 (up) writes its fp32 ``64 × tile_m`` accumulator into a shared buffer in
its own fragment layout, the two warpgroups meet at named barrier :data:`HANDOVER` (256 threads),
warpgroup 0 (gate) reads the buffer back in the same layout (so each thread reads the up value
of the element whose gate it holds), computes ``silu(gate)·up`` in fp32 and rounds once; the
warpgroups meet again (the buffer is read: the next tile may overwrite it), and warpgroup 0 stores
its 64 output columns transposed through one ``tile_m × 64`` buffer with one TMA store.

Law: for every (m, c) inside C (N/2 columns), ``C[m, 64·t + c] = cast(silu(g) · u)`` with
``g = acc[c, m − m0]`` and ``u = acc[64 + c, m − m0]`` of weight block t's tile, each the full sum
over k (a split tile's fp32 partials are added before the act), written once.
"""

import axe.lang as Ax
from kernels.parts.epilogues.silu_mul import silu_mul
from kernels.parts.epilogues.transposed_store import TransposedStore
from kernels.tp_shapes import GATE_UP_PERIOD as PERIOD      # the interleave's period: one transposed tile's weight rows

#: the named barrier the two consumer warpgroups meet at (1, 2: their own epilogue barriers)
HANDOVER = 5
#: floats between the up buffer's rows beyond its own: a quarter-warp's four fragment rows then
#: fall 8 banks apart (a pitch of 64 floats put a warp's 8 rows on the same banks: 8-way conflicts)
PAD = 8


class TransposedSiluMul(TransposedStore):
    """silu(gate)·up of a transposed decode tile whose warpgroups hold gate (0) and up (1), then
    warpgroup 0's transposed TMA store of C's 64 columns."""

    name = "SiLU·up hand-over + transposed TMA store"

    def __init__(self, main, sched, dtype):
        super().__init__(main, sched, dtype)
        if main.bm != PERIOD or self.rows * 2 != PERIOD:
            raise ValueError(f"gemm: the transposed SiLU·up store needs the {PERIOD}-row transposed tile split over two "
                             f"64-row warpgroups, got bm={main.bm}, {self.rows} rows per warpgroup")
        self.smem = self.rows * self.cols              # one store buffer: only the gate warpgroup stores
        self.pitch = self.cols + PAD
        self.operand_bytes = 4 * self.rows * self.pitch   # the up warpgroup's fp32 accumulator

    def out_cols(self, N):
        if N % PERIOD:
            raise ValueError(f"gemm: the SiLU·up store needs N={N} a multiple of the interleave's {PERIOD} rows")
        return N // 2

    def inputs(self, *params):
        """The up accumulator's shared buffer (fp32, written and read through the fragment's layout,
        rows padded by :data:`PAD` floats)."""
        self.up = Ax.shared((self.rows, self.cols), "float32", f"S[({self.rows},{self.cols}):({self.pitch},1)]",
                            name="up_acc")

    def tile(self, acc, out, pool, C, wg, leader, m_blk, n_blk, partial=None, dest=None, add_chunk=None):
        if dest is not None or add_chunk is not None:
            raise ValueError("gemm: the transposed SiLU·up store has no remote destination or added chunks")
        if partial is not None:         # the act needs the full sum
            Ax.elementwise(acc, lambda a, p: a + p, acc, partial)
        with Ax.guard(wg == 1):
            Ax.copy(self.up, acc)
        Ax.cuda.named_barrier(HANDOVER, 256)           # up is in shared memory
        with Ax.guard(wg == 0):
            Ax.elementwise(out, silu_mul(self.dtype), acc, self.up)
        Ax.cuda.named_barrier(HANDOVER, 256)           # up is read: the next tile may overwrite it
        with Ax.guard(wg == 0):
            col = m_blk * (self.main.bm // 2)          # a tile of 128 weight rows makes 64 of C's columns
            row = n_blk * self.main.bn
            buf = self.buffer(pool, 0)

            def write(j, Cw):
                Ax.copy(C[row:row + self.cols, col:col + self.rows], buf, fence=False, wait=False)
            Ax.cuda.staged_store(out, self.cols, lambda j: Ax.permute(buf, (1, 0)), write, 1, leader, 1)
