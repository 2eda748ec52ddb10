"""SiLU-and-multiply in axe (the gated MLP's activation): ``y = silu(x[..., :d]) * x[..., d:]``.

vLLM's ``silu_and_mul`` convention: ``x`` is ``(M, 2d)``, its first half the gate, its second
half the up projection; ``y`` is ``(M, d)``; ``silu(g) = g / (1 + exp(-g))``.  Computed in fp32
and rounded to the dtype once (vLLM rounds ``silu(g)`` to the dtype before the product).

:func:`dynamic` ``(d, dtype)``: one artifact for every number of rows ``M`` (read off ``X`` at
launch).  The grid is ``(M, blocks)``: CTA ``(m, b)`` computes columns ``[b·BLOCK, (b+1)·BLOCK)``
of row ``m`` — 128 threads, each moving :data:`PER` 16-byte chunks of the gate, of the up half
and of the result — so that a decode step's few rows still spread over many SMs.  Where ``d``
is not a multiple of :data:`BLOCK`, the last column block is its own branch, held as
:func:`kernels.rmsnorm.row_tile` holds a short row (every thread's chunks, then a predicated
tail).  ``axe.torch.ops.silu_and_mul`` calls it, launched programmatically
(:func:`kernels.rmsnorm.after_predecessor`).
"""

from tvm.script import tirx as T

import axe.lang as Ax
from kernels.rmsnorm import VEC, after_predecessor, check_dtype, load_row, row_tile, store_row

THREADS = 128
PER = 2                                   # 16-byte chunks per thread and operand
BLOCK = THREADS * VEC * PER               # output columns per CTA


def reference(X):
    """``silu(X[..., :d]) * X[..., d:]`` in fp32 (torch)."""
    import torch
    d = X.shape[-1] // 2
    xf = X.float()
    return torch.nn.functional.silu(xf[..., :d]) * xf[..., d:]


def _silu_mul(g, u, dtype):
    gf = T.Cast("float32", g)
    return T.Cast(dtype, gf / (T.float32(1) + T.exp(-gf)) * T.Cast("float32", u))


def _block(Xrow, Yrow, col0, width, d, dtype):
    """Columns ``[col0, col0 + width)`` of one row: gate and up in, the product out."""
    rt = row_tile(width, "silu_and_mul", THREADS)
    g = Ax.registers((1, rt.padded), dtype, rt.layout, name="gate")
    u = Ax.registers((1, rt.padded), dtype, rt.layout, name="up")
    zero = T.Cast(dtype, T.float32(0))
    load_row(g, Xrow[0:1, col0:col0 + width], rt, zero)
    load_row(u, Xrow[0:1, d + col0:d + col0 + width], rt, zero)
    Ax.elementwise(g, lambda a, b: _silu_mul(a, b, dtype), g, u)
    store_row(Yrow[0:1, col0:col0 + width], g, rt)


def _columns(Xrow, Yrow, bx, d, dtype):
    """Column block ``bx``: whole blocks share one branch, a short last block has its own."""
    blocks = -(-d // BLOCK)
    tail = d - (blocks - 1) * BLOCK      # columns of the last block (BLOCK when d is a multiple)
    if tail == BLOCK:
        _block(Xrow, Yrow, bx * BLOCK, BLOCK, d, dtype)
        return
    if blocks > 1:
        with Ax.guard(bx < blocks - 1):
            _block(Xrow, Yrow, bx * BLOCK, BLOCK, d, dtype)
    with Ax.guard(bx == blocks - 1):
        _block(Xrow, Yrow, (blocks - 1) * BLOCK, tail, d, dtype)


def dynamic(d: int, dtype: str = "bfloat16"):
    """``silu_and_mul_dyn(X: (M, 2d), Y: (M, d))`` for ``d`` a multiple of 8 and any ``M``:
    ``Y = silu(X[:, :d]) * X[:, d:]``, grid ``(M, ceil(d / BLOCK))``."""
    if d <= 0 or d % VEC:
        raise ValueError(f"silu_and_mul: d={d} (half of x's last dimension) must be a positive multiple of {VEC} "
                         "(rows move in 16-byte chunks)")
    check_dtype("silu_and_mul", dtype)
    blocks = -(-d // BLOCK)

    @Ax.kernel(name="silu_and_mul_dyn", outputs=("Y",), threads=THREADS, dynamic=("M",))
    def silu_and_mul_dyn():
        @T.prim_func
        def silu_and_mul_dyn(x_: T.handle, y_: T.handle):
            M = T.int32()
            X_ = T.match_buffer(x_, (M, 2 * d), dtype, align=16)
            Y_ = T.match_buffer(y_, (M, d), dtype, align=16)
            Ax.cuda.programmatic_launch()
            (row, col), _ = Ax.launch([M, blocks], THREADS)     # rows on x: gridDim.y stops at 65535
            after_predecessor()
            Xrow = Ax.param(T.decl_buffer((1, 2 * d), dtype, data=X_.data, elem_offset=row * (2 * d)), name="X")
            Yrow = Ax.param(T.decl_buffer((1, d), dtype, data=Y_.data, elem_offset=row * d), name="Y")
            _columns(Xrow, Yrow, col, d, dtype)
        return silu_and_mul_dyn
    return silu_and_mul_dyn
