"""What choosing a kernel configuration needs to know about a GPU beyond its name, read off the
driver: its peak DRAM bandwidth (:func:`dram_bytes_per_s`).  An H100 and an H200 have the same SM
count and differ here (3.35 against 4.8 TB/s), which decides how many CTAs a streaming kernel needs.
"""

from __future__ import annotations

import functools

from .driver import LaunchError, check_result, cuda_driver

__all__ = ["dram_bytes_per_s"]


@functools.lru_cache(maxsize=None)
def dram_bytes_per_s(device_index: int, driver=None) -> float | None:
    """The peak DRAM bandwidth of GPU ``device_index`` in bytes per second: two transfers per memory
    clock (the driver's ``MEMORY_CLOCK_RATE``, kHz) times the bus width (``GLOBAL_MEMORY_BUS_WIDTH``,
    bits) over 8; None where the driver (or ``cuda.bindings``) does not report either (the caller then
    assumes a default)."""
    try:
        d = driver or cuda_driver()
        check_result(d, d.cuInit(0), "cuInit")
        dev = check_result(d, d.cuDeviceGet(device_index), "cuDeviceGet")
        attr = d.CUdevice_attribute
        khz = check_result(d, d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev),
                           "cuDeviceGetAttribute(MEMORY_CLOCK_RATE)")
        bits = check_result(d, d.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev),
                            "cuDeviceGetAttribute(GLOBAL_MEMORY_BUS_WIDTH)")
    except (LaunchError, AttributeError):
        return None
    return 2.0 * khz * 1e3 * bits / 8 if khz and bits else None
