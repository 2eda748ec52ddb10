"""``gemm(C, A, B, accumulate)``: ``C = A·B`` or ``C += A·B`` on tiles.

A is M×K, B is K×N, C is M×N; A and B share one dtype — float16, bfloat16 or float8_e4m3fn
(the block-scaled FP8 GEMM's operands; the scales are :mod:`axe.ops.block_scale`'s business) —
and C accumulates in float32.  The operands' layouts (shared or registers, which thread holds
what) choose the schedule, and a schedule that has no instruction for the dtype declines saying
so; this module only checks the signature.
"""

from __future__ import annotations

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["gemm", "IN_DTYPES", "FP8_DTYPES", "ACC_DTYPES"]

FP8_DTYPES = ("float8_e4m3fn",)
IN_DTYPES = ("float16", "bfloat16") + FP8_DTYPES
ACC_DTYPES = ("float32",)


def gemm(C, A, B, accumulate: bool = True, scope: ExecScope = None, **config) -> OpCall:
    """The call record of ``C (+)= A·B``; ``accumulate=False`` overwrites C."""
    c, a, b = as_operand(C, "gemm C"), as_operand(A, "gemm A"), as_operand(B, "gemm B")
    for name, t in (("C", c), ("A", a), ("B", b)):
        if t.rank != 2:
            raise OpError(f"gemm: {name} ({t.describe()}) has rank {t.rank}, not 2")
    (m, k), (k2, n), (mc, nc) = a.shape, b.shape, c.shape
    if k != k2:
        raise OpError(f"gemm: A is {m}x{k} but B is {k2}x{n} (K differs)")
    if (mc, nc) != (m, n):
        raise OpError(f"gemm: C is {mc}x{nc}, A·B is {m}x{n}")
    if a.dtype not in IN_DTYPES or b.dtype != a.dtype:
        raise OpError(f"gemm: A and B must share one dtype of {IN_DTYPES}, got A {a.dtype}, B {b.dtype}")
    if c.dtype not in ACC_DTYPES:
        raise OpError(f"gemm: C accumulates in {ACC_DTYPES[0]}, got {c.dtype}")
    if not isinstance(accumulate, bool):
        raise OpError(f"gemm: accumulate must be a Python bool, got {accumulate!r}")
    return OpCall("gemm", {"C": c, "A": a, "B": b}, scope, attrs={"accumulate": accumulate}, config=config)
