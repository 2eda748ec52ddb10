"""mbarriers in shared memory: allocation, initialisation, expect-tx and waits (PTX ops)."""

from __future__ import annotations

from dataclasses import dataclass

from . import report as _report

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

# the first try_wait runs before the timer is read, so a wait that succeeds at once costs what
# the plain wait costs; try_wait suspends in hardware for up to its time hint before returning
# false, so %globaltimer is read once per suspension, not per spin.  The timeout path is inline
# (report.SOURCE): no call, so wgmma kernels may use it
_WAIT_BOUNDED_SRC = _report.SOURCE + r"""
__forceinline__ __device__ unsigned axe_mbarrier_try(unsigned addr, int phase) {
  unsigned done;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}"
               : "=r"(done) : "r"(addr), "r"(phase), "r"(0x989680) : "memory");
  return done;
}
__forceinline__ __device__ void axe_mbarrier_wait_bounded(void* barrier, int phase, int stage, long long timeout_ns,
    unsigned n0, unsigned n1, unsigned n2, unsigned n3) {
  unsigned addr = (unsigned)__cvta_generic_to_shared(barrier);
  if (axe_mbarrier_try(addr, phase)) return;
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  while (!axe_mbarrier_try(addr, phase)) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if ((long long)(t - t0) > timeout_ns) axe_report_trap(AXE_KIND, addr, stage, phase, 0u, timeout_ns, n0, n1, n2, n3);
  }
}
""".replace("AXE_KIND", f"{_report.MBARRIER}u")


def wait_bounded(bar, phase=0, stage=0, timeout_ns: int = CTA_WAIT_TIMEOUT_NS):
    """:func:`wait` for a barrier that another CTA completes (a remote arrival, a multicast copy's
    bytes): bounded, so a CTA that never arrives ends the launch after ``timeout_ns`` of
    ``%globaltimer`` with a report (CTA, cluster rank, thread, barrier name, stage, phase; see
    :mod:`.report`) and a trap.  Call-free: wgmma kernels may use it."""
    from tvm.script import tirx as T
    name = bar.bar.name if isinstance(bar, StagedBarrier) else bar.name
    if isinstance(bar, StagedBarrier):
        stage = bar.stage
    T.evaluate(T.cuda.func_call("axe_mbarrier_wait_bounded", barrier_ptr(bar, stage), phase, stage, T.int64(timeout_ns),
                                *(T.uint32(w) for w in _report.name_words(name)), source_code=_WAIT_BOUNDED_SRC))
