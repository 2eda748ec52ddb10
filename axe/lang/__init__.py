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
"""

from axe.layout import R, S, Swizzle, SwizzledLayout, parse
from .kernel import Kernel, KernelError, TargetError, build_func, compile_kernel, explain, kernel, kernels_of, without_params
from .operators import binary, cast, copy, elementwise, reduce, sync, unary
from .scopes import cta, each_warp, launch, thread, warpgroups, warps
from .barriers import mbarrier, mbarrier_wait
from .tensors import param, permute, registers, shared, view
from .operators import gemm, wgmma_wait

__all__ = ["S", "R", "Swizzle", "SwizzledLayout", "parse", "Kernel", "KernelError", "TargetError", "kernel", "build_func",
           "compile_kernel", "explain", "kernels_of", "without_params", "copy", "reduce", "elementwise", "unary",
           "binary", "cast", "sync", "launch", "warps", "warpgroups", "each_warp", "thread", "cta",
           "mbarrier", "mbarrier_wait", "param", "permute", "registers", "shared", "view",
           "gemm", "wgmma_wait"]

from .hopper import (bulk_wait, dynamic_shared, elect_one, entry_registers, fence_proxy_async, fence_registers, min_blocks_per_sm, named_barrier,
                     named_barrier_arrive, role, setmaxnreg, tma_store_wait, warpgroup_index)
from .pipeline import Pipeline, TileSchedule, pipeline

__all__ += ["bulk_wait", "dynamic_shared", "elect_one", "entry_registers", "fence_proxy_async", "fence_registers", "min_blocks_per_sm", "named_barrier",
            "named_barrier_arrive", "role", "setmaxnreg", "tma_store_wait", "warpgroup_index", "Pipeline", "TileSchedule", "pipeline"]
from .cluster import arrive_remote, cluster_arrive, cluster_launch, cluster_sync, cluster_wait, fence_mbarrier_init

__all__ += ["arrive_remote", "cluster_arrive", "cluster_launch", "cluster_sync", "cluster_wait", "fence_mbarrier_init"]
from .flags import counter_publish, counter_wait, fence_gpu, flag_set, flag_take

__all__ += ["counter_publish", "counter_wait", "fence_gpu", "flag_set", "flag_take"]
from .mesh import Mesh, current_mesh, device_rank, devices, dtensor, fence_system, mesh, signal, wait

__all__ += ["Mesh", "current_mesh", "device_rank", "devices", "dtensor", "fence_system", "mesh", "signal", "wait"]
from axe.backends.cuda.schedules.tcgen05 import commit as tcgen05_commit, pair as cta_pair
from axe.backends.cuda.tmem import fence_after as tcgen05_fence_after, fence_before as tcgen05_fence_before, tmem, tmem_free

__all__ += ["tcgen05_commit", "cta_pair", "tmem", "tmem_free", "tcgen05_fence_after", "tcgen05_fence_before"]
