"""The axe kernel language: scopes, tensors with layouts, operators dispatched by layout.

Write a kernel body in TVMScript and call these at parse time::

    from tvm.script import tirx as T
    import axe.lang as Ax

    @Ax.kernel()
    def copy_rows():
        @T.prim_func
        def k(A_: T.Buffer((256, 64), "float16"), B_: T.Buffer((256, 64), "float16")):
            bx, tx = Ax.launch(4, 128)
            A, B = Ax.param(A_), Ax.param(B_)
            R = Ax.registers((64, 64), "float16", "S[(64,8,8):(2@tx,... )]")
            Ax.copy(R, A[bx*64:(bx+1)*64, :])
            ...
        return k

This package holds what every target shares.  A target's own constructs live in its backend and
are reached through the target family: ``Ax.cuda.mbarrier``, ``Ax.cuda.pipeline``,
``Ax.cuda.role`` (Hopper warpgroup roles), ``Ax.cuda.tmem`` (Blackwell), ``Ax.neuron.sbuf``,
``Ax.neuron.core`` (Trainium).  ``Ax.<family>`` is resolved on first use from the backend's
registration (:mod:`axe.lang.targets`), so importing the language imports no backend, and a
construct of one family used in a build for another is an error naming both.

Two constructs shape the TIR around operators on every target: ``with Ax.guard(cond):`` (the block
runs where ``cond`` holds) and ``Ax.computed_once(value)`` (a run-time value computed once, read
where used); the register fragments of CUDA's instructions are ``Ax.cuda.wgmma_fragment``,
``Ax.cuda.tcgen05_fragment`` and ``Ax.cuda.ldmatrix_atom``.  A kernel's factory reads the build it runs
in through ``Ax.current_build()`` (its target, features and tensor-map specs), and classifies a target
with ``Ax.target_family`` / ``Ax.target_arch``.
"""

from axe.layout import R, S, Swizzle, SwizzledLayout, parse
from axe.schedules.context import current_context as current_build, target_arch, target_family
from axe.schedules.emit import computed_once, guard
from .kernel import Kernel, KernelError, build_func, compile_kernel, explain, kernel, kernels_of, without_params
from .operators import binary, cast, copy, elementwise, gemm, reduce, sync, unary
from .scopes import cta, each_warp, launch, thread, warpgroups, warps
from .tensors import INFER, param, permute, registers, shared, view
from .targets import TargetError
from .tile_schedule import TileSchedule
from .gather import gather
from .block_scale import scale_accumulate
from .mesh import Mesh, current_mesh, device_rank, devices, dtensor, fence_system, mesh, signal, wait

__all__ = ["S", "R", "Swizzle", "SwizzledLayout", "parse", "Kernel", "KernelError", "TargetError", "kernel", "build_func",
           "compile_kernel", "explain", "kernels_of", "without_params", "copy", "reduce", "elementwise", "unary",
           "binary", "cast", "sync", "gemm", "launch", "warps", "warpgroups", "each_warp", "thread", "cta",
           "INFER", "param", "permute", "registers", "shared", "view", "TileSchedule", "gather", "scale_accumulate",
           "Mesh", "current_mesh", "device_rank", "devices", "dtensor", "fence_system", "mesh", "signal", "wait",
           "guard", "computed_once", "current_build", "target_arch", "target_family"]


def __getattr__(name: str):
    """``Ax.<family>``: the language of the target family's backend (cached here once resolved).
    Any other missing name is an ``AttributeError``, which names the backend whose construct it
    is, if one is (``Ax.mbarrier``: write ``Ax.cuda.mbarrier``)."""
    if name.startswith("_"):
        raise AttributeError(f"module 'axe.lang' has no attribute {name!r}")
    import importlib
    targets = importlib.import_module("axe.lang.targets")   # not ``from . import``: it would ask us for it
    if name in targets.families():
        lang = globals()[name] = targets.language(name)
        return lang
    owners = " or ".join(f"Ax.{f}.{name}" for f in targets.owners(name))
    hint = f" ({name} is a construct of a target: write {owners})" if owners else ""
    raise AttributeError(f"module 'axe.lang' has no attribute {name!r}{hint}")
