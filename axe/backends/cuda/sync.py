"""mbarriers in shared memory: allocation, initialisation, expect-tx and waits (PTX ops)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MBarrier", "alloc_mbarrier", "barrier_ptr", "wait", "wait_bounded", "expect_tx", "CTA_WAIT_TIMEOUT_NS"]


@dataclass(frozen=True)
class MBarrier:
    """``stages`` mbarriers (a shared ``uint64`` array), each completing after ``count`` arrivals
    plus the transaction bytes announced with :func:`expect_tx`."""

    _is_meta_class = True

    buffer: object
    count: int
    stages: int
    name: str

    def ptr(self, stage=0):
        return self.buffer.ptr_to([stage])

    def __getitem__(self, stage) -> "StagedBarrier":
        return StagedBarrier(self, stage)


@dataclass(frozen=True)
class StagedBarrier:
    """One stage of an :class:`MBarrier` (what ``barrier=`` takes in a pipeline)."""

    _is_meta_class = True

    bar: MBarrier
    stage: object

    def ptr(self, stage=None):
        return self.bar.ptr(self.stage)


def alloc_mbarrier(scope, count: int, stages: int, name: str) -> MBarrier:
    from tvm.script import tirx as T
    from tvm.script.ir_builder import tirx as IRB
    buf = T.alloc_buffer((stages,), "uint64", scope="shared")
    with IRB.If(scope.local_tx() == 0):
        with IRB.Then():
            for s in range(stages):
                T.evaluate(T.ptx.mbarrier.init.shared.b64(buf.ptr_to([s]), T.uint32(count)))
            T.evaluate(T.ptx.fence.proxy.async_.shared__cta())
    T.evaluate(T.tvm_storage_sync("shared"))
    return MBarrier(buf, count, stages, name)


def barrier_ptr(bar, stage=0):
    """The address of ``bar``'s barrier ``stage`` (an :class:`MBarrier`), or of ``bar`` itself (one
    stage of one, a :class:`StagedBarrier`)."""
    return bar.ptr(stage) if isinstance(bar, MBarrier) else bar.ptr()


def expect_tx(bar, nbytes: int, stage=0):
    """Arrive on the barrier announcing ``nbytes`` of asynchronous transactions."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx.mbarrier.arrive.expect_tx.shared.b64(barrier_ptr(bar, stage), T.uint32(nbytes)))


def wait(bar, phase=0, stage=0):
    """Block until the barrier's ``phase`` completes."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.mbarrier_wait(barrier_ptr(bar, stage), phase))


#: how long a thread waits for another CTA (an mbarrier another CTA of the cluster completes, a
#: flag another CTA of the launch sets) before it reports and traps (ns): the arrival comes within
#: microseconds; a missing one is a logic or co-residency error, not a slow peer
CTA_WAIT_TIMEOUT_NS = 10_000_000_000

# the slow path is out of line, so the spin stays small; try_wait suspends in hardware for up to
# its time hint before returning false, so %globaltimer is read once per suspension, not per spin
_WAIT_BOUNDED_SRC = r"""
__noinline__ __device__ void axe_mbarrier_timeout(unsigned addr, int phase, long long timeout_ns) {
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  printf("axe: CTA %d (cluster rank %u) thread %d waited %lld ms for phase %d of the mbarrier at shared 0x%x, "
         "which another CTA of its cluster completes; it never came (the peer CTA failed or its arrivals "
         "do not match the expected count): trapping\n",
         (int)blockIdx.x, rank, (int)threadIdx.x, timeout_ns / 1000000, phase, addr);
  __trap();
}
__forceinline__ __device__ void axe_mbarrier_wait_bounded(void* barrier, int phase, long long timeout_ns) {
  unsigned addr = (unsigned)__cvta_generic_to_shared(barrier);
  unsigned done;
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(addr), "r"(phase), "r"(0x989680) : "memory");
    if (done) return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if ((long long)(t - t0) > timeout_ns) axe_mbarrier_timeout(addr, phase, timeout_ns);
  }
}
"""


def wait_bounded(bar, phase=0, stage=0, timeout_ns: int = CTA_WAIT_TIMEOUT_NS):
    """:func:`wait` for a barrier that another CTA completes (a remote arrival, a multicast copy's
    bytes): bounded, so a CTA that never arrives ends the launch after ``timeout_ns`` of
    ``%globaltimer`` with a printed report (CTA, cluster rank, barrier, phase) and a trap."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.func_call("axe_mbarrier_wait_bounded", barrier_ptr(bar, stage), phase, T.int64(timeout_ns),
                                source_code=_WAIT_BOUNDED_SRC))
