"""``gather(dst, src, index)``: rows of a matrix picked by an index tensor.

The law: for every row r of ``dst`` (R×C) and column c,
``dst[r, c] = src[index[r], c]`` when ``index[r] >= 0`` and ``0`` when ``index[r] < 0`` (a
padding row: grouped problems pad each group to a tile's rows with index -1).  ``index`` is an
int32 tensor with R elements (any shape, read in row-major order); ``src`` is a rank-2 global
tensor whose rows are C contiguous elements.  Indices past ``src``'s rows are the caller's error
(the source's row count may be known only at launch).
"""

from __future__ import annotations

from math import prod

from .call import OpCall, OpError
from .scope import ExecScope
from .tensor import as_operand

__all__ = ["gather", "INDEX_DTYPES"]

INDEX_DTYPES = ("int32",)


def gather(dst, src, index, scope: ExecScope, **config) -> OpCall:
    """The call record of ``dst[r, :] = src[index[r], :]`` (zero rows where ``index[r] < 0``)."""
    d, s, i = as_operand(dst, "gather dst"), as_operand(src, "gather src"), as_operand(index, "gather index")
    if d.rank != 2 or s.rank != 2:
        raise OpError(f"gather: dst ({d.describe()}) and src ({s.describe()}) must both have rank 2")
    if d.shape[1] != s.shape[1]:
        raise OpError(f"gather: dst rows have {d.shape[1]} columns, src rows {s.shape[1]}")
    if d.dtype != s.dtype:
        raise OpError(f"gather: dst dtype {d.dtype} differs from src dtype {s.dtype}")
    if i.dtype not in INDEX_DTYPES:
        raise OpError(f"gather: index dtype {i.dtype} is not one of {INDEX_DTYPES}")
    if prod(i.shape) != d.shape[0]:
        raise OpError(f"gather: index has {prod(i.shape)} elements, dst has {d.shape[0]} rows")
    if s.mem != "global":
        raise OpError(f"gather: src must be a global tensor, got {s.mem}")
    return OpCall("gather", {"dst": d, "src": s, "index": i}, scope, config=config)
