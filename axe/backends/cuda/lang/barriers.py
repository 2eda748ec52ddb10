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


def mbarrier_wait(bar, phase=0, stage=0, remote: bool = False, timeout_ns: int | None = None):
    """Wait until phase ``phase`` of barrier ``bar[stage]`` completes.  ``remote``: another CTA
    completes it (a remote arrival, a multicast commit), so the wait is bounded and a CTA that never
    arrives ends the launch with a report and a trap after ``timeout_ns`` (default
    ``CTA_WAIT_TIMEOUT_NS``; :func:`~axe.backends.cuda.sync.wait_bounded`, call-free)."""
    from ..sync import CTA_WAIT_TIMEOUT_NS, wait, wait_bounded
    if not remote:
        if timeout_ns is not None:
            raise ValueError(f"mbarrier_wait: timeout_ns={timeout_ns} needs remote=True (a local wait is unbounded)")
        wait(bar, phase, stage)
    else:
        wait_bounded(bar, phase, stage, CTA_WAIT_TIMEOUT_NS if timeout_ns is None else timeout_ns)
