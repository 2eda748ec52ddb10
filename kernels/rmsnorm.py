"""Fused row-wise RMSNorm in axe: ``y = x / sqrt(mean(x²) + eps) * w``, one CTA per row.

Each of 128 threads holds 8 contiguous fp16 of the row (16-byte loads), squares in fp32 (a
fused cast + multiply), the CTA sums the squares (warp shuffles + shared memory), and one
fused elementwise pass scales, casts back and the row leaves with 16-byte stores.

Three builds share the row's body (:func:`_normalize_row`):

- ``rmsnorm`` (module level): the static example, ``ROWS x N`` fp16, ``eps`` compiled in — what
  ``axe demo`` and ``tests/test_kernels.py`` build;
- :func:`dynamic` ``(n, dtype)``: one artifact for every number of rows ``M`` (read off ``X`` at
  launch; the grid is ``M``), ``eps`` a runtime ``float32`` argument; ``n`` (any multiple of 8)
  and ``dtype`` are the specialization.  ``axe.torch.ops.rmsnorm`` calls it;
- :func:`dynamic_add` ``(n, dtype)``: the residual add fused in front (vLLM's and FlashInfer's
  ``fused_add_rms_norm``): ``r = x + r`` is stored back over ``r``, ``x`` is overwritten with
  ``rmsnorm(r)``.  ``axe.torch.ops.fused_add_rmsnorm`` calls it.

The dynamic builds serve ``torch.ops.axe`` between other kernels of a layer: they are launched
programmatically (:func:`after_predecessor`), so their launch and scheduling overlap the tail of
the kernel before them in the stream.

A row of any multiple of 8 values is held as in :func:`row_tile`: the register tile is the
row padded to whole 16-byte chunks of every thread, the padding filled with a neutral value
(0 here, -inf for softmax) and never stored; the row moves in at most two copies, the chunks
every thread holds and a tail that the first threads hold (a predicated copy).

The static ``rmsnorm`` is one source for sm_90a, sm_100a and trn1: what differs per target is
in :data:`TARGETS` — rows per step, where the on-chip tiles live and their layouts — and the
entry (a CTA per row on a GPU, a loop over 128-row blocks on the one NeuronCore).  On trn1 the
weights sit on one partition and the scaling broadcasts them to all 128.
"""

from dataclasses import dataclass

from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import S, tx

ROWS, N, THREADS, EPS = 256, 1024, 128, 1e-6
ROW = S[(THREADS, N // THREADS):(1 @ tx, 1)]      # over shape (1, N)
VEC = 8                                           # 16-byte chunks of fp16/bf16

#: per target family: rows per step, the on-chip tile allocator and the layouts of a row tile,
#: of the weights and of a per-row scalar (None: the allocator's plain tile, rows on partitions)
TARGETS = {
    "cuda": dict(rows=1, tile=Ax.registers, row=ROW, weights=ROW, one="S[1:1]"),
    "neuron": dict(rows=128, tile=Ax.neuron.sbuf, row=None, weights=None, one=None),
}


@dataclass(frozen=True)
class RowTile:
    """How one CTA holds a row of ``n`` values (``n`` a multiple of :data:`VEC`) in registers.

    ``threads`` threads hold the row padded to ``padded`` values, ``layout`` over shape
    ``(1, padded)``: thread ``t`` holds chunks ``t, t + threads, ...`` of 8 contiguous values
    (every 16-byte load of a warp is coalesced).  ``pieces``: the ``[lo, hi)`` column ranges
    that cover ``[0, n)``, each a slice of ``layout`` with one 16-byte copy per chunk: the
    chunks every thread holds, then the tail that threads ``0 .. (n/8 mod threads) - 1`` hold.
    Law: the pieces are disjoint, ascending and their union is ``[0, n)``; ``padded == n``
    exactly when ``n`` is a multiple of ``threads * 8`` (then no padding, one piece)."""

    n: int
    threads: int
    padded: int
    layout: object
    pieces: tuple

    @property
    def exact(self) -> bool:
        return self.padded == self.n


def row_threads(n: int) -> int:
    """Threads per CTA for a row of ``n`` values: 128 up to 64 values a thread (n <= 8192), then
    doubled (up to 1024) so that a thread holds at most 64 values (keeps fp32 copies in registers)."""
    t = THREADS
    while t < 1024 and n > t * 64:
        t *= 2
    return t


def row_tile(n: int, kernel: str = "rmsnorm", threads: int | None = None) -> RowTile:
    """The :class:`RowTile` of a row of ``n`` values (``threads``: default :func:`row_threads`).
    ``row_tile(1024).layout`` is :data:`ROW`."""
    if n <= 0 or n % VEC:
        raise ValueError(f"{kernel}: row length n={n} must be a positive multiple of {VEC} "
                         "(rows move in 16-byte chunks)")
    t = threads or row_threads(n)
    chunks = n // VEC
    per = -(-chunks // t)                         # chunks per thread, the last maybe partial
    layout = S[(t, VEC):(1 @ tx, 1)] if per == 1 else S[(per, t, VEC):(VEC, 1 @ tx, 1)]
    body = (chunks // t) * t * VEC
    pieces = tuple(p for p in ((0, body), (body, n)) if p[1] > p[0])
    return RowTile(n, t, per * t * VEC, layout, pieces)


def load_row(dst, src, rt: RowTile, fill, rows: int = 1, row=0):
    """``dst[:, :n] = src[row:row + rows, :n]`` for a register tile ``dst`` of ``(rows,
    rt.padded)`` values; where the row is padded, ``dst`` is first filled with ``fill`` (a
    constant of dst's dtype) so the padding is neutral for what follows (0 for a sum of
    squares, -inf for a maximum and a sum of exponentials)."""
    if rt.exact:
        Ax.copy(dst, src[row:row + rows, :])
        return
    Ax.elementwise(dst, lambda: fill)
    for lo, hi in rt.pieces:
        Ax.copy(dst[0:rows, lo:hi], src[row:row + rows, lo:hi])


def store_row(dst, src, rt: RowTile, rows: int = 1, row=0):
    """``dst[row:row + rows, :n] = src[:, :n]``: the padding of ``src`` is never stored."""
    if rt.exact:
        Ax.copy(dst[row:row + rows, :], src)
        return
    for lo, hi in rt.pieces:
        Ax.copy(dst[row:row + rows, lo:hi], src[0:rows, lo:hi])


def row_params(n: int, dtype: str, threads: int = THREADS, **handles):
    """Inside a kernel over any number of rows ``M``: match each handle (keyword = buffer name)
    to an ``(M, n)`` tensor (16-byte aligned; ``M`` becomes the launch symbol read off the
    first), launch one CTA of ``threads`` per row, and return each tensor's current row as
    a ``(1, n)`` :func:`axe.lang.param` at element offset ``row * n``."""
    from tvm.script.ir_builder import IRBuilder
    M = IRBuilder.name("M", T.int32())     # named as TVMScript names an assignment's target
    bufs = [IRBuilder.name(name, T.match_buffer(h, (M, n), dtype, align=16)) for name, h in handles.items()]
    Ax.cuda.programmatic_launch()
    bx, _ = Ax.launch([M], threads)
    after_predecessor()
    return [Ax.param(T.decl_buffer((1, n), dtype, data=b.data, elem_offset=bx * n), name=name.rstrip("_"))
            for b, name in zip(bufs, handles)]


def after_predecessor():
    """Call at a programmatic kernel's top, after ``Ax.launch`` and before its first access of
    global memory: the kernel was launched programmatically (``Ax.cuda.programmatic_launch``), so
    it may run before its predecessor in the stream has finished; every thread waits here for that
    kernel to complete (``griddepcontrol.wait``), and then lets the next kernel launch at once (its
    own wait still holds it until this whole grid has completed)."""
    Ax.cuda.grid_wait()
    Ax.cuda.launch_dependents()


def check_dtype(kernel: str, dtype: str):
    if dtype not in ("float16", "bfloat16"):
        raise ValueError(f"{kernel}: dtype {dtype!r} must be float16 or bfloat16")


def reference(X, W):
    import torch
    xf = X.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * W.float()
    return {"Y": y.half()}


def inputs(device="cuda"):
    import torch
    return {"X": torch.randn(ROWS, N, dtype=torch.float16, device=device),
            "W": torch.randn(1, N, dtype=torch.float16, device=device),
            "Y": torch.zeros(ROWS, N, dtype=torch.float16, device=device)}


def _scale_row(y, x, w, sq, ss, n, dtype, eps):
    """``y = x / sqrt(mean(x²) + eps) * w`` per row, through the fp32 tiles ``sq`` (x's shape)
    and ``ss`` (one value a row); the mean is over the ``n`` values of a row: padding holds
    zeros, which add nothing to the sum of squares."""
    Ax.elementwise(sq, lambda v: T.Cast("float32", v) * T.Cast("float32", v), x)
    Ax.reduce(ss, sq, "sum", dims=1)
    Ax.elementwise(y, lambda v, s, g: T.Cast(dtype, T.Cast("float32", v)
                                             * T.rsqrt(s * T.float32(1.0 / n) + eps)
                                             * T.Cast("float32", g)), x, ss, w)


def _normalize_row(X, W, Y, row, rt, dtype, eps, rows=1, tile=Ax.registers, weights=None, one="S[1:1]"):
    """Normalize rows ``[row, row + rows)`` of ``X`` into ``Y``, held as ``rt`` says (``eps`` a
    constant or a float32 argument; tiles from ``tile``; ``weights``: the layout of the (1, n)
    weights, default the row's)."""
    x = tile((rows, rt.padded), dtype, rt.layout, name="x")
    w = tile((1, rt.padded), dtype, rt.layout if weights is None and rows == 1 else weights, name="w")
    sq = tile((rows, rt.padded), "float32", rt.layout, name="sq")
    ss = tile((rows, 1), "float32", one, name="ss")
    zero = T.Cast(dtype, T.float32(0))
    load_row(x, X, rt, zero, rows, row)
    load_row(w, W, rt, zero)
    _scale_row(x, x, w, sq, ss, rt.n, dtype, eps)
    store_row(Y, x, rt, rows, row)


def _add_normalize_row(X, R, W, rt, dtype, eps):
    """``R = X + R`` (the fp32 sum rounded to ``dtype`` once), then ``X = rmsnorm(R) * W`` for
    one row: the normalized values are those of the stored residual."""
    x = Ax.registers((1, rt.padded), dtype, rt.layout, name="x")
    r = Ax.registers((1, rt.padded), dtype, rt.layout, name="r")
    w = Ax.registers((1, rt.padded), dtype, rt.layout, name="w")
    sq = Ax.registers((1, rt.padded), "float32", rt.layout, name="sq")
    ss = Ax.registers((1, 1), "float32", "S[1:1]", name="ss")
    zero = T.Cast(dtype, T.float32(0))
    load_row(x, X, rt, zero)
    load_row(r, R, rt, zero)
    load_row(w, W, rt, zero)
    Ax.elementwise(r, lambda a, b: T.Cast(dtype, T.Cast("float32", a) + T.Cast("float32", b)), x, r)
    store_row(R, r, rt)
    _scale_row(x, r, w, sq, ss, rt.n, dtype, eps)
    store_row(X, x, rt)


def _trn1():
    cfg = TARGETS["neuron"]

    @T.prim_func
    def rmsnorm(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                Y_: T.Buffer((ROWS, N), "float16")):
        Ax.neuron.core()
        X = Ax.param(X_)
        W = Ax.param(W_)
        Y = Ax.param(Y_)
        for r in T.parallel(ROWS // cfg["rows"]):
            _normalize_row(X, W, Y, r * cfg["rows"], RowTile(N, THREADS, N, cfg["row"], ((0, N),)), "float16",
                           T.float32(EPS), cfg["rows"], cfg["tile"], cfg["weights"], cfg["one"])
    return rmsnorm


@Ax.kernel(reference=reference, inputs=inputs, outputs=("Y",), grid=(ROWS,), threads=THREADS)
def rmsnorm():
    if Ax.current_build().family == "neuron":   # the build's target, known while the kernel is parsed
        return _trn1()

    @T.prim_func
    def rmsnorm(X_: T.Buffer((ROWS, N), "float16"), W_: T.Buffer((1, N), "float16"),
                Y_: T.Buffer((ROWS, N), "float16")):
        bx, tx_ = Ax.launch(ROWS, THREADS)
        X = Ax.param(X_)
        W = Ax.param(W_)
        Y = Ax.param(Y_)
        _normalize_row(X, W, Y, bx, row_tile(N, threads=THREADS), "float16", T.float32(EPS))
    return rmsnorm


def _rows_kernel(name: str, n: int, dtype: str, outputs: tuple, rows, body):
    """A kernel ``name(X: (M, n), W: (1, n), S: (M, n), eps: float32)`` over any number of rows
    ``M`` (grid ``M``, one CTA of :func:`row_threads` a row): ``rows(x_, s_, threads)`` matches
    the row tensors' handles and returns their current rows (:func:`row_params`, which names
    them), ``body(X, W, S, rt, eps)`` computes one row."""
    rt = row_tile(n, name.removesuffix("_dyn"))
    check_dtype(name.removesuffix("_dyn"), dtype)

    @Ax.kernel(name=name, outputs=outputs, threads=rt.threads, dynamic=("M",))
    def rows_dyn():
        @T.prim_func
        def rows_dyn(x_: T.handle, w_: T.handle, s_: T.handle, eps: T.float32):
            W_ = T.match_buffer(w_, (1, n), dtype, align=16)
            X, S_row = rows(x_, s_, rt.threads)
            W = Ax.param(W_, name="W")
            body(X, W, S_row, rt, eps)
        return rows_dyn
    return rows_dyn


def dynamic(n: int = N, dtype: str = "float16"):
    """The RMSNorm kernel for rows of ``n`` ``dtype`` values (``n`` any multiple of 8) and any
    number of rows ``M``: ``rmsnorm_dyn(X: (M, n), W: (1, n), Y: (M, n), eps: float32)``, grid
    ``M``.  Each CTA sees its row as a ``(1, n)`` buffer at element offset ``row * n`` of ``X`` /
    ``Y``, so the row's operators are those of the static build."""
    return _rows_kernel("rmsnorm_dyn", n, dtype, ("Y",),
                        lambda x_, y_, t: row_params(n, dtype, t, X_=x_, Y_=y_),
                        lambda X, W, Y, rt, eps: _normalize_row(X, W, Y, 0, rt, dtype, eps))


def dynamic_add(n: int = N, dtype: str = "float16"):
    """The residual add fused with RMSNorm, in place, for rows of ``n`` ``dtype`` values (any
    multiple of 8) and any number of rows ``M``: ``fused_add_rmsnorm_dyn(X: (M, n), W: (1, n),
    R: (M, n), eps: float32)``, grid ``M``, computes per row ``R = X + R`` (the fp32 sum rounded
    to ``dtype``) and then ``X = R / sqrt(mean(R²) + eps) * W`` from the rounded ``R`` — the
    convention of vLLM's ``fused_add_rms_norm`` and FlashInfer's ``fused_add_rmsnorm``: both
    inputs are overwritten, nothing else is written.  A CTA reads its whole row before it
    writes, so the in-place update is safe."""
    return _rows_kernel("fused_add_rmsnorm_dyn", n, dtype, ("X", "R"),
                        lambda x_, r_, t: row_params(n, dtype, t, X_=x_, R_=r_),
                        lambda X, W, R, rt, eps: _add_normalize_row(X, R, W, rt, dtype, eps))
