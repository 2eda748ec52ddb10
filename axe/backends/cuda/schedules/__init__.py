"""CUDA schedules (Hopper sm_90a, Blackwell sm_100a); importing registers them."""

from . import reduce, tma, vector  # noqa: F401

__all__ = ["reduce", "tma", "vector"]
