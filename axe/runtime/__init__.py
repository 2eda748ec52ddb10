"""Launch built artifacts on torch CUDA tensors through ``cuda.bindings`` — no TVM needed.

``load(path_or_artifact)`` returns a :class:`Kernel`; calling it with the kernel's arguments
(tensors and scalars in signature order; tensor maps are encoded from the artifact's specs)
checks dtypes, shapes, strides, devices and alignment, then launches on the current torch
stream.  Loaded CUDA modules are cached per (device, cubin hash).
"""

from axe.backends.cuda.tensormap import TensorMapError, check_spec

__all__ = ["Kernel", "LaunchError", "TensorMapError", "WaitTimeoutError", "check_spec", "load", "clear_cache"]


def __getattr__(name):
    if name in ("Kernel", "LaunchError", "load", "clear_cache", "bind_arguments"):
        from . import launcher

        return getattr(launcher, name)
    if name == "WaitTimeoutError":      # a bounded wait timed out on the device (axe.runtime.report)
        from . import report

        return report.WaitTimeoutError
    raise AttributeError(f"module 'axe.runtime' has no attribute {name!r}")
