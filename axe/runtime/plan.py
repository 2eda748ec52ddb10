"""A launch plan: one checked call signature of a :class:`~axe.runtime.launcher.Kernel`, ready to
launch again with new data pointers for the price of writing them and one driver call.

:meth:`Kernel.plan(*args) <axe.runtime.launcher.Kernel.plan>` runs every check of
:func:`~axe.runtime.launcher.bind_arguments` once and returns a :class:`LaunchPlan` holding what
they decided: the ``CUfunction``, grid, block, dynamic shared memory, the launch configuration
(clusters, programmatic serialization), and a ``void*[]`` parameter array whose scalar slots are
written and whose tensor slots wait for pointers.  ``plan(ptrs, stream)`` then

1. checks each pointer's alignment (the one property a signature does not fix; the error names
   the argument, as the full checks do),
2. writes the pointers into their slots; a tensor map whose tensor moved gets its address replaced
   in place (``cuTensorMapReplaceAddress``: the shape, strides and box are the signature's, so
   only the address differs; the driver copies parameters at launch, so rewriting the map after a
   launch returns cannot change that launch),
3. launches with one ``cuLaunchKernel`` (or ``cuLaunchKernelEx`` / ``cuLaunchCooperativeKernel``).

Law: for tensors ``ts`` of the plan's signature (dtypes, shapes, strides, device; scalars equal),
``plan(tuple(t.data_ptr() for t in ts), stream)`` launches exactly what ``kernel(*ts, stream=stream)``
launches — same function, grid, block, shared memory and parameter bytes.

The caller keeps the tensors alive until the call returns (the plan holds only their addresses)
and guarantees the signature: a plan never looks at a tensor.  ``axe.torch.ops`` keys its plans by
every tensor's dtype, shape, strides and device, so a call that differs in any of them takes the
checked path again.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import operator
import threading

from .driver import LaunchError, check_result

__all__ = ["LaunchPlan", "Fields"]

#: what :meth:`LaunchPlan.fields` exports (see there)
Fields = collections.namedtuple("Fields", "func grid block smem params scalars maps scratch stream keep programmatic")


class _Map:
    """One ``CUtensorMap`` parameter of a plan: which tensor argument it describes (its position),
    the encoded map, the address it holds, and what re-encoding it needs."""

    __slots__ = ("position", "tmap", "ptr", "index", "spec", "shape", "strides", "size", "dtype")

    def __init__(self, position, index, spec, t, driver):
        from axe.backends.cuda import tensormap as _tm

        self.position, self.index, self.spec = position, index, spec
        self.shape, self.strides, self.size = list(t.shape), list(t.stride()), t.element_size()
        self.dtype = str(t.dtype).removeprefix("torch.")
        self.ptr = int(t.data_ptr())
        self.tmap = _tm.encode(spec, self.ptr, self.shape, self.strides, self.size, self.dtype, driver)


class LaunchPlan:
    """See the module docstring.  Built by :meth:`Kernel.plan` from what its checks decided:
    ``bound`` (:class:`~axe.runtime.launcher.Bound`, tensors included: their shapes and strides
    shape the tensor maps), ``pack`` (the signature's :class:`~axe.runtime.launcher.ParamPack`,
    scalars written), ``cfg`` (a ``CUlaunchConfig`` or None), ``index`` the CUDA device;
    ``current_stream(index)`` gives the raw stream a call without one launches on, and
    ``ensure_context(driver, index)`` makes the device's context current.  ``device_type`` is what
    the checks demanded (``"cpu"`` only where a test launches through a stand-in driver)."""

    def __init__(self, kernel, bound, index: int, pack, cfg, current_stream, ensure_context, device_type: str = "cuda"):
        self.kernel, self.index, self.device_type = kernel, index, device_type
        self._ensure_context = ensure_context
        launch, d = kernel.launch, kernel.driver
        self.name = launch["name"]
        sig = launch["args"]
        self.grid, self.block, self.smem = bound.grid, bound.block, bound.dynamic_smem
        self.empty = 0 in bound.grid
        self.pack = pack
        self.array = ctypes.addressof(pack.array)
        self.scratch = any(a.get("scratch") for a in sig)
        #: per tensor argument (signature order; scratch is last): (name, alignment)
        self.slots = [(a["name"], int(a.get("alignment", 1))) for a in sig if a["kind"] == "tensor"]
        self._mask = functools.reduce(operator.or_, (align - 1 for _, align in self.slots), 0)
        #: the tensors' data pointers, in slots' order: the parameter array points its pointer
        #: parameters here, so one slice assignment writes a call's pointers
        self.storage = (ctypes.c_uint64 * max(len(self.slots), 1))()
        self._n = len(self.slots)
        position = {n: i for i, (n, _) in enumerate(self.slots)}
        base = ctypes.addressof(self.storage)
        for i, p in enumerate(launch["params"]):
            if p["kind"] == "tensor":
                pack.array[i] = base + 8 * position[p["arg"]]
        self._device = None
        self._stream = current_stream
        #: the launch configuration (clusters, programmatic serialization)
        self.cfg = cfg
        self.cluster = bool(bound.cluster)
        self.maps = []
        if self.empty:          # nothing to launch: no function to load, no map of zero rows to encode
            return
        self.maps = [_Map(position[spec["tensor"]], i, spec, bound.tensors[spec["tensor"]], d)
                     for i, spec in pack._tensormaps]
        for m in self.maps:
            pack.array[m.index] = int(m.tmap.getPtr())
        self._replace = getattr(d, "cuTensorMapReplaceAddress", None)
        self.cooperative = bool(launch.get("cooperative"))
        self.func = kernel.function(index, bound.dynamic_smem)
        self.success = d.CUresult.CUDA_SUCCESS
        self.invalid_context = getattr(d.CUresult, "CUDA_ERROR_INVALID_CONTEXT", None)
        self.lock = threading.Lock()      # one thread at a time writes the slots and launches
        self._launch = self._launcher(d, cfg)
        if device_type == "cuda":
            import torch
            self._device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)

    def fields(self, stream: int | None = None):
        """What a compiled launcher needs to launch this plan itself on the raw ``CUstream``
        ``stream`` (None: the current one), as :class:`Fields`: the ``CUfunction`` as an integer
        (0 for an empty grid, which launches nothing), grid, block, shared memory, and per kernel
        parameter one of: the byte offset of its value in ``scalars`` (the scalar parameters'
        bytes, as this plan passes them), ``-(slot + 1)`` (the data pointer of tensor argument
        ``slot``, :attr:`slots` order) or ``-(len(slots) + 1 + j)`` (tensor map ``j`` of
        ``maps``: ``(slot it follows, its 128 bytes, the address they hold)``); ``scratch``: the
        data pointers of the last ``len(scratch)`` slots, the kernel's scratch set for ``stream``,
        which no launch on another stream may use (``keep``: those tensors) — or 0 for each where
        no parameter reads them (a kernel whose signature lists scratch it does not use in this
        configuration: the launch then depends on no stream, and ``keep`` is empty).  Writing those pointers, those
        bytes and those maps (each with the address of its slot's tensor:
        ``cuTensorMapReplaceAddress``) into a parameter array and launching ``func`` with this
        grid, block and shared memory on ``stream`` is exactly what :meth:`__call__` launches
        there — with programmatic stream serialization (``cuLaunchKernelEx``) where ``programmatic``
        (the kernel's ``launch.json`` marks it; whether to use the attribute is
        :func:`~axe.runtime.launcher.programmatic_launch_enabled`'s call, at each launch).  None for a
        plan that needs more: a cluster shape or a cooperative launch."""
        launch = self.kernel.launch
        if self.cluster or launch.get("cooperative"):
            return None
        programmatic = bool(launch.get("programmatic"))
        if stream is None:
            stream = self._stream(self.index)
        if self.empty:          # launches nothing: no parameter to write
            return Fields(0, tuple(self.grid), tuple(self.block), int(self.smem), [], b"", [], [], int(stream), (),
                          programmatic)
        n = len(self.slots)
        position = {name: i for i, (name, _) in enumerate(self.slots)}
        maps = {m.index: j for j, m in enumerate(self.maps)}
        params, scalars, keep = [], b"", iter(self.pack._keep)
        for i, p in enumerate(launch["params"]):
            if p["kind"] == "tensormap":
                params.append(-(n + 1 + maps[i]))
                continue
            value = next(keep)          # the pack keeps one value per parameter that is not a map
            if p["kind"] == "tensor":
                params.append(-(position[p["arg"]] + 1))
            else:
                params.append(len(scalars))
                scalars += ctypes.string_at(self.pack.array[i], ctypes.sizeof(value))
        scratch, tensors = [0] * sum(1 for a in launch["args"] if a.get("scratch")), ()
        if any(-p - 1 >= n - len(scratch) for p in params if -n <= p < 0):   # the scratch arguments are the last
            scratch = list(self.kernel._scratch_ptrs(self.index, stream, self.device_type))
            tensors = tuple(self.kernel._scratch[(self.index, int(stream))])
        with self.lock:         # __call__ rewrites a map under it
            exported = [(m.position, ctypes.string_at(int(m.tmap.getPtr()), 128), m.ptr) for m in self.maps]
        return Fields(int(self.func), tuple(self.grid), tuple(self.block), int(self.smem), params, scalars, exported, scratch,
                      int(stream), tensors, programmatic)

    def _launcher(self, d, cfg):
        """``launch(stream, array, 0) -> result``: the driver call with everything but the stream
        and the parameter array bound (the grid, block and shared memory are the signature's; the
        plain launch, the common one, is a bare ``functools.partial``: no Python frame)."""
        f, (gx, gy, gz), (bx, by, bz), smem = self.func, self.grid, self.block, self.smem
        if cfg is not None:
            launch_ex, cu_stream = d.cuLaunchKernelEx, d.CUstream

            def launch(stream, array, extra):
                cfg.hStream = cu_stream(stream)
                return launch_ex(cfg, f, array, extra)
            return launch
        if self.cooperative:
            coop = functools.partial(d.cuLaunchCooperativeKernel, f, gx, gy, gz, bx, by, bz, smem)
            return lambda stream, array, extra: coop(stream, array)
        return functools.partial(d.cuLaunchKernel, f, gx, gy, gz, bx, by, bz, smem)

    def __repr__(self):
        return f"LaunchPlan({self.name}, grid={self.grid}, block={self.block}, smem={self.smem}, cuda:{self.index})"

    def __call__(self, ptrs, stream: int | None = None):
        """Launch on the tensors at ``ptrs`` (their data pointers, in the order of the
        signature's tensor arguments; scratch may be left out) on the raw ``CUstream`` ``stream``
        (None: torch's current stream on the plan's device)."""
        if self.empty:
            return
        if stream is None:
            stream = self._stream(self.index)
        if len(ptrs) < self._n and self.scratch:      # the kernel's own scratch set for this stream
            ptrs = tuple(ptrs) + self.kernel._scratch_ptrs(self.index, stream, self.device_type)
        if functools.reduce(operator.or_, ptrs, 0) & self._mask:     # some pointer may be misaligned: which?
            self._check_alignment(ptrs)
        with self.lock:
            self.storage[:self._n] = ptrs
            for m in self.maps:
                if ptrs[m.position] != m.ptr:
                    self._move(m, ptrs[m.position])
            if self._device is not None and self._device() != self.index:
                import torch
                with torch.cuda.device(self.index):     # the function belongs to that device's context
                    result = self._launch(stream, self.array, 0)
            else:
                result = self._launch(stream, self.array, 0)
            if result[0] != self.success:
                self._failed(result, stream)

    def _check_alignment(self, ptrs):
        """A :class:`LaunchError` naming the first argument whose pointer breaks its alignment."""
        for ptr, (name, align) in zip(ptrs, self.slots):
            if ptr % align:
                raise LaunchError(f"{self.name}: argument {name!r} data pointer 0x{ptr:x} is not {align}-byte "
                                  f"aligned (offset {ptr % align}); a sliced view? pass a fresh or .clone()d tensor")

    def _move(self, m: _Map, ptr: int):
        """Point tensor map ``m`` at ``ptr``: in place where the driver can, else encoded anew."""
        d = self.kernel.driver
        if ptr % 16:
            raise LaunchError(f"{self.name}: the tensor map of argument {m.spec['tensor']!r} needs a 16-byte aligned "
                              f"pointer, got 0x{ptr:x}")
        if self._replace is not None:
            check_result(d, self._replace(m.tmap, ptr), f"cuTensorMapReplaceAddress({self.name})")
        else:
            from axe.backends.cuda import tensormap as _tm
            m.tmap = _tm.encode(m.spec, ptr, m.shape, m.strides, m.size, m.dtype, d)
            self.pack.array[m.index] = int(m.tmap.getPtr())
        m.ptr = ptr

    def _failed(self, result, stream):
        """A launch that did not succeed: once more with the device's context made current where
        none was (a thread that never made one current), else the error in words (a wait that
        timed out in an earlier kernel becomes :class:`~axe.runtime.report.WaitTimeoutError`)."""
        from . import report as _report

        d = self.kernel.driver
        if result[0] == self.invalid_context:
            self._ensure_context(d, self.index)
            result = self._launch(stream, self.array, 0)
            if result[0] == self.success:
                return
        try:
            check_result(d, result, f"cuLaunchKernel({self.name}, grid={self.grid}, block={self.block}, "
                                    f"smem={self.smem})")
        except LaunchError as e:
            _report.PAGES.check(self.index, cause=e)
            raise
