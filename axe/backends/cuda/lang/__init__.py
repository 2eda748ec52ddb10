"""The CUDA backend's kernel-language constructs, which a kernel reaches as ``Ax.cuda.<name>``.

What here is CUDA's own: mbarriers and the producer/consumer :class:`~.pipeline.Pipeline` over
them, Hopper's warpgroup roles with ``setmaxnreg``, named barriers, proxy fences and the wgmma
wait (:mod:`.hopper`), thread-block clusters (:mod:`.cluster`), flags between CTAs of a launch
(:mod:`.flags`), readiness counters (:mod:`.counters`), programmatic dependent launch (:mod:`.grid_dependency`), the staged epilogue store (:mod:`.staged_store`) and Blackwell's tensor memory and tcgen05 commit/fences; and the register fragments
the CUDA instructions fill, for laying out register tiles (``wgmma_fragment``, ``tcgen05_fragment``,
``ldmatrix_atom``).  The language
(:mod:`axe.lang`) resolves ``Ax.cuda`` to this module on first use and checks, when a construct
is called, that the build's target is a CUDA one (a trn1 build using ``Ax.cuda.mbarrier`` is an
error naming both), so nothing shared imports this package.
"""

from .barriers import mbarrier, mbarrier_wait
from .cluster import arrive_remote, cluster_arrive, cluster_launch, cluster_sync, cluster_wait, fence_mbarrier_init
from .counters import count_done, wait_count
from .flags import counter_publish, counter_wait, fence_gpu, flag_set, flag_take
from .grid_dependency import grid_wait, launch_dependents, programmatic_launch
from .hopper import (bulk_wait, dynamic_shared, elect_one, entry_registers, fence_proxy_async, fence_registers,
                     min_blocks_per_sm, named_barrier, named_barrier_arrive, role, setmaxnreg, tma_store_wait, warp_sync,
                     warpgroup_index, wgmma_wait)
from .pipeline import Pipeline, pipeline
from .staged_store import staged_store
from ..schedules.ldmatrix import atom as ldmatrix_atom
from ..schedules.tcgen05 import commit as tcgen05_commit, ld_fragment as tcgen05_fragment, pair as cta_pair
from ..schedules.wgmma import d_fragment as wgmma_fragment
from ..tmem import fence_after as tcgen05_fence_after, fence_before as tcgen05_fence_before, tmem, tmem_free
from ..tmem_words import pack_pairs, retype as tmem_retype

__all__ = ["mbarrier", "mbarrier_wait",
           "arrive_remote", "cluster_arrive", "cluster_launch", "cluster_sync", "cluster_wait", "fence_mbarrier_init",
           "count_done", "wait_count", "counter_publish", "counter_wait", "fence_gpu", "flag_set", "flag_take",
           "grid_wait", "launch_dependents", "programmatic_launch",
           "bulk_wait", "dynamic_shared", "elect_one", "entry_registers", "fence_proxy_async", "fence_registers",
           "min_blocks_per_sm", "named_barrier", "named_barrier_arrive", "role", "setmaxnreg", "tma_store_wait", "warp_sync",
           "warpgroup_index", "wgmma_wait", "Pipeline", "pipeline", "staged_store",
           "tcgen05_commit", "cta_pair", "tcgen05_fence_after", "tcgen05_fence_before", "tmem", "tmem_free",
           "tmem_retype", "pack_pairs",
           "wgmma_fragment", "tcgen05_fragment", "ldmatrix_atom"]
