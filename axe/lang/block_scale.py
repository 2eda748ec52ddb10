"""Block-scaled operators as written in a kernel body (``from axe.lang.block_scale import ...``):
``scale_accumulate`` (semantics in :mod:`axe.ops.block_scale`).  The fp8 GEMM that produces its
partial product is :func:`axe.lang.gemm` with ``float8_e4m3fn`` operands."""

from __future__ import annotations

from axe.ops import block_scale as _ops

from .operators import _run
from .scopes import scope_or_cta

__all__ = ["scale_accumulate"]


def scale_accumulate(D, P, *scales, accumulate: bool = True, **config):
    """``D = (D if accumulate else 0) + P ⊙ ∏ up(S)``: each scale holds one value per block of D
    (its shape divides D's).  ``before_apply=fn``: called between the scale loads and the
    multiply-adds (put the wait for the MMA writing P there, so the loads overlap it)."""
    _run(_ops.scale_accumulate(D, P, scales, accumulate, scope_or_cta(), **config))
