"""GPU test kernels whose bounded waits must time out (imports TVM: build side only).

- ``cluster_wait_timeout``: one cluster of two CTAs; CTA 1 waits (``remote=True``) for phase 0 of
  an mbarrier that expects one arrival, which nobody makes;
- ``flag_wait_timeout``: two CTAs; CTA 1's thread 0 takes flag 1 of ``F_``, which nobody sets.

Both wait ``TIMEOUT_NS`` and trap, leaving a report for the runtime to state.
"""

from tvm.script import tirx as T

import axe.lang as Ax

TIMEOUT_NS = 50_000_000     # 50 ms: long against any real arrival, short for a test


def _cluster_wait():
    @T.prim_func
    def cluster_wait_timeout(Out_: T.Buffer((2,), "int32")):
        cid, rank, bx, tx = Ax.cuda.cluster_launch(2, 64, 2)
        Out = Ax.param(Out_)
        bar = Ax.cuda.mbarrier(count=1, name="never_arrives")
        if rank == 1:
            Ax.cuda.mbarrier_wait(bar, 0, remote=True, timeout_ns=TIMEOUT_NS)
        if tx == 0:
            Out_[bx] = 1
    return cluster_wait_timeout


def _flag_wait():
    @T.prim_func
    def flag_wait_timeout(F_: T.Buffer((2,), "int32")):
        bx, tx = Ax.launch(2, 128)
        F = Ax.param(F_)
        if bx == 1:
            Ax.cuda.flag_take(F, 1, tx == 0, 1, 128, timeout_ns=TIMEOUT_NS)
    return flag_wait_timeout


@Ax.kernel(grid=(2,), threads=64)
def cluster_wait_timeout():
    return _cluster_wait()


@Ax.kernel(grid=(2,), threads=128)
def flag_wait_timeout():
    return _flag_wait()
