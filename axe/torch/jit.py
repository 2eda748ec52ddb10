"""A kernel factory as a function on torch tensors: built on first call, cached, launched.

``JitKernel("kernels.rmsnorm:dynamic", spec)`` wraps a factory — a function of keyword
arguments returning an :class:`axe.lang.Kernel` — named as ``module:function`` so that it can be
found (and its source hashed) without importing it: a kernel module imports TVM, which a GPU
machine may not have.  ``spec(*args)`` maps the call's arguments to the factory's keyword
arguments (dtypes and the sizes the kernel does not take at run time; JSON-exact values).

A call ``jk(*args)``:

1. ``spec(*args)`` and the tensors' device give the in-process memo key; a hit is a dict lookup;
2. on a miss: the target from the device's compute capability (9.0 -> ``sm_90a``, 10.0 ->
   ``sm_100a``), the :class:`~axe.torch.cache.CacheKey` of (kernel source, axe and TVM versions,
   target, spec), the cache's entry — built with TVM on a miss, or loaded from the cache or a
   shipped folder where TVM is absent (else :class:`~axe.torch.cache.ArtifactMissing`) — and
   the loaded :class:`axe.runtime.Kernel`;
3. the kernel launches on ``args`` (the runtime checks dtypes, shapes, strides and the 16-byte
   alignment each tensor's ``launch.json`` entry demands, naming the argument).

``loader`` (default :func:`axe.runtime.load`) and ``target`` may be given for tests and for
machines without a GPU.
"""

from __future__ import annotations

import importlib
import sys
import threading
from typing import Callable

from .cache import KERNELS, ArtifactCache, CacheKey, kernels_on_path

__all__ = ["JitKernel", "jit", "target_of", "TARGETS"]

#: compute capability -> the axe target that uses the arch-specific instructions
TARGETS = {(9, 0): "sm_90a", (10, 0): "sm_100a"}

_TARGET_OF: dict = {}


def target_of(device) -> str:
    """The axe target for a torch CUDA device (its compute capability, looked up once)."""
    import torch
    index = device.index if device.index is not None else torch.cuda.current_device()
    t = _TARGET_OF.get(index)
    if t is None:
        cap = tuple(torch.cuda.get_device_capability(index))
        if cap not in TARGETS:
            raise RuntimeError(f"axe builds for {', '.join(f'{a}.{b} ({t})' for (a, b), t in TARGETS.items())}; "
                               f"cuda:{index} has compute capability {cap[0]}.{cap[1]}")
        t = _TARGET_OF[index] = TARGETS[cap]
    return t


def _device_of(args):
    for a in args:
        d = getattr(a, "device", None)
        if d is not None:
            return d
    raise TypeError("an axe kernel call needs at least one tensor argument")


class JitKernel:
    """``kernel``: ``"module:function"`` of a factory; ``spec(*args) -> dict`` its keyword
    arguments for a call.  ``path``: a folder put on ``sys.path`` before the module is looked up
    (where the kernels live outside the installed packages); axe's own ``kernels`` package is
    found without it, in a checkout or an installed wheel (:func:`~axe.torch.cache.kernels_on_path`).
    ``cache``: an :class:`~axe.torch.cache.ArtifactCache` (default: ``$AXE_CACHE_DIR``).  ``target``: a fixed
    target instead of the device's.  ``progress``: show builds on stderr
    (:class:`axe.progress.Progress`)."""

    def __init__(self, kernel: str, spec: Callable[..., dict], *, path=None, cache=None, loader=None,
                 target: str | None = None, progress: bool = True):
        if ":" not in kernel:
            raise ValueError(f"JitKernel: kernel {kernel!r} must be 'module:function'")
        self.kernel, self.spec, self.path = kernel, spec, path
        self._cache, self.loader, self.target, self.progress = cache, loader, target, progress
        self._memo: dict = {}
        self._lock = threading.Lock()
        self.builds = 0          # artifacts this process built (not found in a cache)
        self.__name__ = kernel.rpartition(":")[2]

    def __repr__(self):
        return f"JitKernel({self.kernel}, {len(self._memo)} loaded)"

    @property
    def cache(self) -> ArtifactCache:
        if self._cache is None:
            self._cache = ArtifactCache()
        return self._cache

    def __call__(self, *args, stream=None):
        """Launch on ``args`` (built or loaded on this specialization's first call)."""
        spec = self.spec(*args)
        device = _device_of(args)
        k = self._memo.get((device, *spec.items()))
        if k is None:
            k = self.load(device, spec)
        return k(*args, stream=stream)

    def plan(self, *args):
        """The :class:`~axe.runtime.plan.LaunchPlan` of ``args``' call signature (the kernel built
        or loaded on its specialization's first call, the arguments checked fully on the
        signature's first call), or None where the loader's kernels make no plans (a test's
        stand-in)."""
        spec = self.spec(*args)
        device = _device_of(args)
        k = self._memo.get((device, *spec.items()))
        if k is None:
            k = self.load(device, spec)
        make = getattr(k, "plan", None)
        return make(*args) if make is not None else None

    def load(self, device, spec: dict):
        """The loaded kernel for ``spec`` on ``device`` (memoized)."""
        memo_key = (device, *spec.items())
        with self._lock:                 # one thread resolves a specialization; the others wait
            k = self._memo.get(memo_key)
            if k is None:
                target = self.target or target_of(device)
                path = self.artifact_path(target, spec)
                k = self._memo[memo_key] = self._loader()(str(path))
        return k

    def key(self, target: str, spec: dict) -> CacheKey:
        """The cache key of ``spec`` on ``target`` (the kernel's module importable first)."""
        self._on_path()
        return CacheKey.make(self.kernel, target, spec)

    def artifact_path(self, target: str, spec: dict):
        """The cache entry for ``spec`` on ``target``, built on a miss where TVM is installed."""
        key = self.key(target, spec)
        cache = self.cache
        if self.progress and cache.progress is None:
            from axe.progress import Progress
            cache.progress = Progress(None, "axe: build")
        return cache.get(key, lambda: self._build(target, spec))

    def _build(self, target: str, spec: dict):
        from axe.lang.kernel import compile_kernel
        self.builds += 1
        return compile_kernel(self.factory()(**spec), target)

    def factory(self):
        """The factory function (imports its module: needs TVM)."""
        self._on_path()
        module, _, name = self.kernel.partition(":")
        return getattr(importlib.import_module(module), name)

    def _on_path(self):
        if self.path is not None and str(self.path) not in sys.path:
            sys.path.append(str(self.path))
        if self.kernel.split(".")[0] == KERNELS:
            kernels_on_path()

    def _loader(self):
        if self.loader is None:
            from axe.runtime import load
            self.loader = load
        return self.loader

    def clear(self):
        """Forget the loaded kernels (the next call of each specialization looks it up again)."""
        with self._lock:
            self._memo.clear()


def jit(kernel: str, spec: Callable[..., dict], **kw) -> JitKernel:
    """``JitKernel(kernel, spec, **kw)``."""
    return JitKernel(kernel, spec, **kw)
