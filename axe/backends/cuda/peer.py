"""Peer memory on CUDA: addressing another GPU's copy of a symmetric buffer, and the signals
that order work between GPUs.

Every symmetric buffer of a heap (``axe.runtime.symmetric``) sits at the same offset of each
rank's pool, so ``local address + peers[g]`` is the same element on rank ``g`` as this process
maps it (``peers`` is the runtime's table of pool deltas, 0 for the rank itself).  Loads and
stores through such addresses travel over NVLink.

Signals are int32 flags in a symmetric buffer; a signal for launch ``epoch`` stores ``epoch``
(the runtime counts launches, the same count on every rank), so no flag is ever reset and a
flag from an earlier launch never satisfies a later wait.  A setter publishes with
``fence.acq_rel.sys`` + ``st.release.sys`` on the peer's flag; a waiter spins on
``ld.acquire.sys`` of its own flag until ``flag - epoch >= 0`` — or until ``timeout`` ns of
``%globaltimer`` have passed: then it writes who it waited for into the error record (the first
failure wins, later waits return at once) and returns, so a missing rank ends the kernel with a
report instead of a hang.  Error record (int32): ``[status (1 = timeout), my rank, rank waited
for, flag index, epoch wanted, value seen, CTA, 0]``.  The wait is inline code (no function call:
a call in a kernel with wgmma serializes the wgmma, C7510, or makes ptxas ignore ``setmaxnreg``,
C7507), so the fused GEMM + reduce-scatter waits with its register budgets intact.
"""

from __future__ import annotations

__all__ = ["remote_ptr", "fence_sys", "signal_peer", "wait_signal", "wait_value", "ERROR_WORDS", "TIMEOUT"]

ERROR_WORDS = 8
TIMEOUT = 1   # status word of a wait that timed out

_FENCE_SRC = r"""
__forceinline__ __device__ void axe_fence_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
"""
_SIGNAL_SRC = r"""
__forceinline__ __device__ void axe_signal_peer(int* flag, long long delta, int value) {
  int* p = (int*)((char*)flag + delta);
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.release.sys.global.b32 [%0], %1;" :: "l"(p), "r"(value) : "memory");
}
"""
_WAIT_SRC = r"""
__forceinline__ __device__ unsigned long long axe_globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__forceinline__ __device__ int axe_wait_signal(int* flag, int epoch, long long timeout_ns, int* err,
                                               int me, int src, int index) {
  if (*(volatile int*)err != 0) return 0;       // an earlier wait failed: the launch is lost anyway
  unsigned long long t0 = axe_globaltimer();
  int v = 0;
  while (true) {
    asm volatile("ld.acquire.sys.global.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    if (v - epoch >= 0) return 1;
    if ((long long)(axe_globaltimer() - t0) > timeout_ns) {
      if (atomicCAS(err, 0, -1) == 0) {          // claim the record, fill it, then publish status
        err[1] = me; err[2] = src; err[3] = index; err[4] = epoch; err[5] = v;
        err[6] = (int)blockIdx.x; err[7] = 0;
        __threadfence_system();
        atomicExch(err, 1);
      }
      return 0;
    }
    __nanosleep(32);
  }
}
"""


def _T():
    from tvm.script import tirx as T
    return T


def remote_ptr(ptr, gpu, mesh):
    """``ptr`` (a local address in a symmetric buffer) as the same element on GPU ``gpu``."""
    T = _T()
    return T.handle_add_byte_offset(ptr, mesh.peers[gpu])


def fence_sys():
    """``fence.acq_rel.sys``: this thread's accesses before it are ordered, at system scope,
    before those after it (what a peer GPU observes)."""
    T = _T()
    T.evaluate(T.cuda.func_call("axe_fence_sys", source_code=_FENCE_SRC))


def signal_peer(mesh, index, gpu):
    """Set signal ``index`` on GPU ``gpu`` to this launch's epoch (one thread; it fences at
    system scope first, so what it wrote — and what its CTA published to it through a barrier
    — is visible to the waiter that reads the signal)."""
    T = _T()
    T.evaluate(T.cuda.func_call("axe_signal_peer", mesh.signals.access_ptr("rw", offset=index),
                                mesh.peers[gpu], mesh.epoch, source_code=_SIGNAL_SRC))


def _wait(mesh, ptr, value, src, index):
    """One thread spins on the int32 at ``ptr`` until it reaches ``value`` (bounded; see the module doc)."""
    T = _T()
    T.evaluate(T.cuda.func_call("axe_wait_signal", ptr, value, mesh.timeout, mesh.errors.access_ptr("rw"),
                                mesh.rank, src, index, source_code=_WAIT_SRC, return_type="int32"))


def wait_signal(mesh, index, src):
    """Spin (one thread) until this GPU's signal ``index`` reaches this launch's epoch, set by
    GPU ``src``; after ``mesh.timeout`` ns record the failure and go on (see the module doc)."""
    _wait(mesh, mesh.signals.access_ptr("rw", offset=index), mesh.epoch, src, index)


def wait_value(mesh, ptr, value, index):
    """One thread waits until the int32 at ``ptr`` (this GPU's memory) reaches ``value``, bounded
    by the mesh's timeout (the error record names this rank as the one waited for)."""
    _wait(mesh, ptr, value, mesh.rank, index)
