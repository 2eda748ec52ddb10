"""NVSHMEM put-with-signal: a copy whose ``dst`` is a peer GPU's part of a symmetric tensor,
issued by a CTA (``nvshmemx_putmem_signal_nbi_block``) or a warp (``..._warp``).  NVSHMEM moves the bytes (over NVLink, or over the network between
nodes, where the peer table of the ``vector`` schedule has no address) and then sets the
receiver's uint64 signal to this launch's epoch.

Chosen only for targets that declare ``"nvshmem"``: such a cubin calls NVSHMEM's device library,
so the build compiles relocatable code and device-links it with ``libnvshmem_device.a`` (recording
the NVSHMEM version), and ``DistKernel`` has NVSHMEM initialise the module
(``nvshmemx_cumodule_init``) before the first launch, on a heap that is NVSHMEM's.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import LayoutError, group
from axe.schedules.registry import add_schedule

from .vector import on_this_gpu

__all__ = ["NvshmemPlan"]

#: NVSHMEM's put-with-signal, called with NVSHMEM's own NVSHMEM_SIGNAL_SET.  Not TVM's
#: ``tirx.nvshmem.putmem_signal_nbi``: TVM 0.27 lowers the op name "set" to 0 (its table says
#: set=0, add=1; NVSHMEM's enum is SET=9, ADD=10) and NVSHMEM treats 0 as an add — on 2xH200 a
#: second launch's signal became 1 + 2 = 3 (2026-11-23; docs/tirx-differences.md)
#: (the build pre-includes nvshmem.h and nvshmemx.h: included here, after TVM's ``#define uint``,
#: NVSHMEM's headers do not compile)
_PUT_SIGNAL_SRC = r"""
__forceinline__ __device__ void axe_nvshmem_put_signal_block(void* dst, const void* src, size_t bytes,
                                                             uint64_t* sig, uint64_t value, int pe) {
  nvshmemx_putmem_signal_nbi_block(dst, src, bytes, sig, value, NVSHMEM_SIGNAL_SET, pe);
}
__forceinline__ __device__ void axe_nvshmem_put_signal_warp(void* dst, const void* src, size_t bytes,
                                                            uint64_t* sig, uint64_t value, int pe) {
  nvshmemx_putmem_signal_nbi_warp(dst, src, bytes, sig, value, NVSHMEM_SIGNAL_SET, pe);
}
"""


@dataclass
class NvshmemPlan:
    nbytes: int
    pe: object
    scope: str          # "block" or "warp"

    def describe(self) -> str:
        return (f"nvshmemx_putmem_signal_nbi_{self.scope} of {self.nbytes} contiguous bytes to PE {self.pe}, "
                "then the receiver's signal set to this launch's epoch")


def _contiguous(t) -> bool:
    """The tensor's elements are one run of consecutive memory offsets, in row-major order."""
    n = prod(t.shape)
    if n == 1:
        return True
    blocks = group(t.layout, (n,)).blocks[0]
    return len(blocks) == 1 and blocks[0][1] == 1 and blocks[0][2] == "m"


def _check(call, ctx):
    if "nvshmem" not in ctx.features:
        return (f"target {ctx.target} does not declare NVSHMEM (features=('nvshmem',)): the cubin would need "
                "NVSHMEM's device library")
    signal = call.config.get("signal")
    if signal is None:
        return "pass signal=(uint64 symmetric buffer, index): the receiver's flag"
    kind = call.scope.kind
    if kind not in ("cta", "warp") or (kind == "warp" and call.scope.threads != 32):
        return f"issued by a CTA or one warp, not {call.scope.describe()}"
    local, remote = on_this_gpu(call)
    if remote is None:
        return local
    if set(remote) != {"dst"}:
        return "puts a local src into a peer's dst (dst sliced at a device index, src on this GPU)"
    dst, src = local.operands["dst"], local.operands["src"]
    if src.mem not in ("global", "shared"):
        return f"src {src.name} is in {src.mem} memory (NVSHMEM reads global or shared memory)"
    for k, t in (("dst", dst), ("src", src)):
        try:
            if not _contiguous(t):
                return f"{k} {t.name} is not one contiguous run ({t.layout})"
        except LayoutError as err:
            return str(err)
    return NvshmemPlan(prod(dst.shape) * dst.elem_bytes, remote["dst"], "block" if kind == "cta" else "warp")


def _emit(call, plan, ctx):
    from tvm.script import tirx as T
    local, _ = on_this_gpu(call)
    dst, src = local.operands["dst"], local.operands["src"]
    buf, index = call.config["signal"]
    off = lambda t: t.layout.offset["m"] + t.base     # noqa: E731 - the run's first element
    T.evaluate(T.cuda.func_call(f"axe_nvshmem_put_signal_{plan.scope}", dst.flat().ptr_to([off(dst)]),
                                src.flat().ptr_to([off(src)]), T.uint64(plan.nbytes),
                                buf.access_ptr("rw", offset=index), T.Cast("uint64", ctx.mesh.epoch), plan.pe,
                                source_code=_PUT_SIGNAL_SRC))
    ctx.distributed["nvshmem"] = True


add_schedule("copy", "nvshmem", "cuda", 45, "a target declaring NVSHMEM; a CTA or warp putting a contiguous "
             "local tile into a peer's symmetric tile; signal=", devices=True, check=_check, emit=_emit)
