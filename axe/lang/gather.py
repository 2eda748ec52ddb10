"""``gather`` as written in a kernel body (the operator is :mod:`axe.ops.gather`)."""

from __future__ import annotations

from .operators import _run
from .scopes import scope_or_cta

__all__ = ["gather"]


def gather(dst, src, index, **config):
    """``dst[r, :] = src[index[r], :]``, zero rows where ``index[r] < 0``; keywords go to the
    schedule (``schedule=``; ``cp_async_gather``: ``barrier=``/``stage=`` to complete on an
    mbarrier instead of waiting)."""
    from axe.ops.gather import gather as _gather
    _run(_gather(dst, src, index, scope_or_cta(), **config))
