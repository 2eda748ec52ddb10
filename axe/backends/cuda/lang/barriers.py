"""mbarriers in shared memory as kernel-language objects (``Ax.cuda.mbarrier``)."""

from __future__ import annotations

__all__ = ["mbarrier", "mbarrier_wait"]


def mbarrier(count: int = 1, stages: int = 1, name: str = "mbar"):
    """``stages`` mbarriers in shared memory, each expecting ``count`` arrivals; initialised
    by thread 0 of the current scope, then the CTA synchronises.  Returns an
    :class:`~axe.backends.cuda.sync.MBarrier` (index it by stage for a pipeline)."""
    from ..sync import alloc_mbarrier
    from axe.ops.scope import scope_or_cta
    return alloc_mbarrier(scope_or_cta(), count, stages, name)


def mbarrier_wait(bar, phase=0, stage=0, remote: bool = False):
    """Wait until phase ``phase`` of barrier ``bar[stage]`` completes.  ``remote``: another CTA
    completes it (a remote arrival, a multicast commit), so the wait is bounded and a CTA that never
    arrives ends the launch with a report and a trap (:func:`~axe.backends.cuda.sync.wait_bounded`)."""
    from ..sync import wait, wait_bounded
    (wait_bounded if remote else wait)(bar, phase, stage)
