"""mbarriers in shared memory: allocation, initialisation, expect-tx and waits (PTX ops)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MBarrier", "alloc_mbarrier", "wait", "expect_tx"]


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


def _ptr(bar, stage):
    return bar.ptr(stage) if isinstance(bar, MBarrier) else bar.ptr()


def expect_tx(bar, nbytes: int, stage=0):
    """Arrive on the barrier announcing ``nbytes`` of asynchronous transactions."""
    from tvm.script import tirx as T
    T.evaluate(T.ptx.mbarrier.arrive.expect_tx.shared.b64(_ptr(bar, stage), T.uint32(nbytes)))


def wait(bar, phase=0, stage=0):
    """Block until the barrier's ``phase`` completes."""
    from tvm.script import tirx as T
    T.evaluate(T.cuda.mbarrier_wait(_ptr(bar, stage), phase))
