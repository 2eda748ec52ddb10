"""CUDA schedules (Hopper sm_90a, Blackwell sm_100a); importing registers them."""

from . import ldmatrix, reduce, tma, vector  # noqa: F401
from . import mma, wgmma, tcgen05  # noqa: F401
from . import bulk, devices, gather, nvshmem  # noqa: F401
from . import staged  # noqa: F401
from . import proposals  # noqa: F401

__all__ = ["ldmatrix", "reduce", "tma", "vector", "mma", "wgmma", "tcgen05", "devices", "nvshmem", "bulk", "gather", "staged", "proposals"]
