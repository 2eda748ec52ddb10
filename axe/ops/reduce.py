"""``reduce(dst, src, kind, dims)``: sum, max or min of src over the chosen dimensions."""

from __future__ import annotations

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["reduce", "KINDS"]

KINDS = ("sum", "max", "min")


def reduce(dst, src, kind: str, dims, scope: ExecScope, **config) -> OpCall:
    """The call record; dst has src's shape with the reduced dims set to 1 (or dropped)."""
    d, s = as_operand(dst, "reduce dst"), as_operand(src, "reduce src")
    if kind not in KINDS:
        raise OpError(f"reduce: kind {kind!r} is not one of {KINDS}")
    dims = tuple(sorted({x % s.rank for x in ((dims,) if isinstance(dims, int) else dims)}))
    kept = tuple(1 if i in dims else e for i, e in enumerate(s.shape))
    if tuple(e for e in d.shape if e != 1) != tuple(e for e in kept if e != 1):
        raise OpError(f"reduce: dst shape {list(d.shape)} is not src shape {list(s.shape)} reduced over "
                      f"dims {list(dims)} ({list(kept)})")
    if d.dtype != s.dtype:
        raise OpError(f"reduce: dst dtype {d.dtype} differs from src dtype {s.dtype}")
    return OpCall("reduce", {"dst": d, "src": s}, scope, attrs={"kind": kind, "dims": dims}, config=config)
