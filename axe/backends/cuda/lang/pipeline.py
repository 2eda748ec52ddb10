"""Producer/consumer pipelines over shared-memory stages (``Ax.cuda.pipeline``).

A :class:`Pipeline` is a ring of ``stages`` slots guarded by two mbarrier arrays: *full[s]*
completes when the producer's asynchronous copies into slot s have landed (``expect_tx`` byte
counts), *empty[s]* when every consumer has released it.  Slot and phase are functions of a
running iteration count ``i`` (``s = i % stages``, phase ``(i / stages) & 1``), so producer and
consumers need no shared mutable state: each counts its own iterations the same way.  The
producer's first pass waits on parity 1 of fresh *empty* barriers, which completes at once.

In a cluster (``pipeline(..., cluster=n)``) the CTAs' producers fill each other's slots (TMA
multicast), so a slot is free only when the consumers of every CTA released it: *empty* expects
``consumers * n`` arrivals and :meth:`Pipeline.release` arrives on the *empty* barrier of every
CTA of the cluster.  Both sides' waits then depend on other CTAs; ``remote=True`` bounds them
(:func:`~axe.backends.cuda.sync.wait_bounded`: a CTA that never arrives ends the launch with a
report and a trap after ``CTA_WAIT_TIMEOUT_NS``).  The report path calls no function, so wgmma
kernels (the Hopper cluster GEMM) bound their waits too.

Why this is CUDA's and not the language's: the slot and phase arithmetic would serve any target,
but what makes it a pipeline is the synchronisation — mbarrier waits on parity, ``expect_tx``
byte counts completed by TMA, arrivals on another CTA's barrier — and that is CUDA's hardware.
A trn1 kernel has no such ring to write: NKI's compiler overlaps a loop's DMA with TensorE
itself (tiles allocated inside an ``affine_range`` loop rotate through buffers it assigns).  The
tile enumeration that feeds a pipeline, :class:`axe.lang.TileSchedule`, is plain arithmetic and
stays in the language.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Pipeline", "pipeline"]


@dataclass(frozen=True)
class Pipeline:
    """``stages`` slots; *full* expects ``producers`` arrivals (one per expect_tx copy) plus the
    bytes, *empty* ``consumers`` arrivals."""

    _is_meta_class = True

    full: object        # MBarrier
    empty: object       # MBarrier
    stages: int
    cluster: int = 1    # CTAs whose consumers release each slot (and whose producers fill it)
    remote: bool = False    # other CTAs complete its barriers: every wait is bounded

    def slot(self, i):
        """The slot of iteration ``i``."""
        return i % self.stages

    def phase(self, i):
        """The barrier phase iteration ``i`` waits for."""
        return (i // self.stages) % 2

    def acquire(self, i):
        """Producer: wait until slot ``slot(i)`` is free (its consumers released it).  In a ring
        whose barriers other CTAs complete (``remote``) the wait is bounded: a CTA that never
        releases ends the launch with a report and a trap after ``CTA_WAIT_TIMEOUT_NS``."""
        from tvm.script import tirx as T
        from ..sync import wait_bounded
        slot, phase = self.slot(i), 1 - self.phase(i)
        if self.remote:
            wait_bounded(self.empty, phase, slot)
        else:
            T.evaluate(T.cuda.mbarrier_wait(self.empty.ptr(slot), phase))

    def wait(self, i):
        """Consumer: wait until slot ``slot(i)`` holds iteration ``i``'s data.  In a ring whose
        barriers other CTAs complete (``remote``: a peer's multicast copy fills the slot) the wait
        is bounded like :meth:`acquire`'s."""
        from tvm.script import tirx as T
        from ..sync import wait_bounded
        if self.remote:
            wait_bounded(self.full, self.phase(i), self.slot(i))
        else:
            T.evaluate(T.cuda.mbarrier_wait(self.full.ptr(self.slot(i)), self.phase(i)))

    def release(self, i, pred=None):
        """Consumer: mark slot ``slot(i)`` free (one arrival on *empty*, on every CTA's in a
        cluster; ``pred`` selects the arriving thread, e.g. one per warpgroup)."""
        from tvm.script import tirx as T
        from axe.schedules.emit import guard
        from .cluster import arrive_remote
        with guard(pred):
            if self.cluster == 1:
                T.evaluate(T.ptx.mbarrier.arrive.shared.b64(self.empty.ptr(self.slot(i)), T.uint32(1)))
            else:
                for r in range(self.cluster):
                    arrive_remote(self.empty.ptr(self.slot(i)), r)


def pipeline(stages: int, producers: int = 1, consumers: int = 1, name: str = "pipe", cluster: int = 1,
             remote: bool = False) -> Pipeline:
    """Allocate and initialise a :class:`Pipeline` (in the CTA scope, before the roles split);
    ``cluster=n``: shared by the n CTAs of a cluster (barriers published with a cluster sync).
    ``remote``: other CTAs complete its barriers, so every wait on them is bounded (call-free, so
    kernels with wgmma may ask for it)."""
    from ..sync import alloc_mbarrier
    from axe.ops.scope import scope_or_cta
    if stages < 1:
        raise ValueError(f"pipeline: {stages} stages")
    s = scope_or_cta()
    full = alloc_mbarrier(s, producers, stages, f"{name}_full")
    empty = alloc_mbarrier(s, consumers * cluster, stages, f"{name}_empty")
    if cluster > 1:
        from .cluster import cluster_sync, fence_mbarrier_init
        fence_mbarrier_init()
        cluster_sync()
    return Pipeline(full, empty, stages, cluster, remote)

