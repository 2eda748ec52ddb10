"""Thread-block clusters (sm_90): cluster launch, cluster-wide barriers and arrivals on another
CTA's mbarrier.

A cluster kernel starts with :func:`cluster_launch` instead of :func:`axe.lang.launch`::

    cid, rank, bx, tx = Ax.cuda.cluster_launch(132, 384, cluster=2)   # 66 clusters of 2 CTAs

The launch record then carries ``cluster: [2, 1, 1]`` and the runtime launches through
``cuLaunchKernelEx`` with a cluster-dimension attribute.  CTAs of one cluster share their
shared memory through the ``shared::cluster`` window: a TMA load with ``multicast=mask``
(``Ax.copy(..., barrier=..., multicast=0b11)``) writes the same CTA-relative offset of every CTA
in the mask and completes bytes on each one's mbarrier at the barrier's offset, and
:func:`arrive_remote` arrives on the mbarrier of CTA ``rank`` (``mapa`` +
``mbarrier.arrive.shared::cluster``, default ``.release.cta`` semantics as CUTLASS's cluster
barrier uses: a ``.release.cluster`` arrive on every consumer release cost a third of the GEMM's
throughput on an H200).  Barriers that other CTAs arrive on or
write into must be initialised and published (:func:`fence_mbarrier_init`, :func:`cluster_sync`)
before any CTA uses them, and no CTA may exit while a peer can still reach its shared memory
(:func:`cluster_sync` at the end).
"""

from __future__ import annotations

__all__ = ["cluster_launch", "cluster_arrive", "cluster_wait", "cluster_sync", "fence_mbarrier_init",
           "arrive_remote"]


def cluster_launch(grid: int, threads: int, cluster: int):
    """Emit the kernel entry of a 1-d grid of ``grid`` CTAs in clusters of ``cluster``; enter the
    CTA scope.  Returns ``(cluster id, rank in cluster, CTA index, tx)``."""
    from tvm.script import tirx as T
    from axe.ops.scope import ExecScope, enter_launch
    if not isinstance(cluster, int) or not 1 <= cluster <= 8:
        raise ValueError(f"cluster_launch: cluster must be an int in 1..8 (portable size), got {cluster!r}")
    if grid % cluster:
        raise ValueError(f"cluster_launch: grid {grid} is not a whole number of clusters of {cluster}")
    T.device_entry()
    cid = T.cluster_id([grid // cluster])
    rank = T.cta_id_in_cluster([cluster])
    bx = T.cta_id([grid])
    tx = T.thread_id([threads])
    enter_launch(ExecScope("cta", tx, threads))
    return cid, rank, bx, tx


def cluster_arrive():
    """``barrier.cluster.arrive.release.aligned`` (every thread of the CTA, warp-uniformly)."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["barrier.cluster.arrive.release.aligned"]())


def cluster_wait():
    """``barrier.cluster.wait.acquire.aligned``: every thread of the cluster has arrived."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["barrier.cluster.wait.acquire.aligned"]())


def cluster_sync():
    """A barrier over every thread of the cluster (arrive, then wait)."""
    cluster_arrive()
    cluster_wait()


def fence_mbarrier_init():
    """``fence.mbarrier_init.release.cluster``: publish this thread's ``mbarrier.init`` to the
    cluster (before the :func:`cluster_sync` after which peers may arrive or complete bytes)."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx["fence.mbarrier_init.release.cluster"]())


_REMOTE_SRC = """
__forceinline__ __device__ void axe_mbarrier_arrive_remote(void* bar, int cta) {
  unsigned int a = (unsigned int)__cvta_generic_to_shared(bar);
  asm volatile("{\\n.reg .b32 ra;\\nmapa.shared::cluster.u32 ra, %0, %1;\\n"
               "mbarrier.arrive.shared::cluster.b64 _, [ra];\\n}"
               :: "r"(a), "r"(cta) : "memory");
}
"""


def arrive_remote(bar_ptr, cta):
    """One arrival on the mbarrier at ``bar_ptr``'s offset in the shared memory of cluster CTA
    ``cta`` (this CTA's own rank works too)."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.func_call("axe_mbarrier_arrive_remote", bar_ptr,
                                T.int32(cta) if isinstance(cta, int) else cta, source_code=_REMOTE_SRC))
