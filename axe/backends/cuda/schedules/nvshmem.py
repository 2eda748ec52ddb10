"""NVSHMEM put-with-signal: a copy whose ``dst`` is a peer GPU's part of a symmetric tensor,
issued by a CTA (``nvshmemx_putmem_signal_nbi_block``) or a warp (``..._warp``) through TVM's
``tirx.nvshmem`` intrinsics.  NVSHMEM moves the bytes (over NVLink, or over the network between
nodes, where the peer table of the ``vector`` schedule has no address) and then sets the
receiver's uint64 signal to this launch's epoch.

Chosen only for targets that declare ``"nvshmem"``: such a cubin calls NVSHMEM's device library,
so it must be linked with it (``nvcc -rdc``, ``-lnvshmem_device``) and its module initialised by
NVSHMEM at load, which the plain-cubin runtime does not do yet; it is verified by compilation.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from axe.layout import group
from axe.schedules.registry import add_schedule

from .vector import on_this_gpu

__all__ = ["NvshmemPlan"]


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
        except ValueError as err:
            return str(err)
    return NvshmemPlan(prod(dst.shape) * dst.elem_bytes, remote["dst"], "block" if kind == "cta" else "warp")


def _emit(call, plan, ctx):
    from tvm.script import tirx as T
    local, _ = on_this_gpu(call)
    dst, src = local.operands["dst"], local.operands["src"]
    buf, index = call.config["signal"]
    put = T.nvshmem.putmem_signal_nbi.block if plan.scope == "block" else T.nvshmem.putmem_signal_nbi.warp
    off = lambda t: t.layout.offset["m"] + t.base     # noqa: E731 - the run's first element
    T.evaluate(put(dst.flat().ptr_to([off(dst)]), src.flat().ptr_to([off(src)]), plan.nbytes,
                   buf.access_ptr("rw", offset=index), T.Cast("uint64", ctx.mesh.epoch), "set", plan.pe))
    ctx.distributed["nvshmem"] = True


add_schedule("copy", "nvshmem", "cuda", 45, "a target declaring NVSHMEM; a CTA or warp putting a contiguous "
             "local tile into a peer's symmetric tile; signal=", devices=True, check=_check, emit=_emit)
