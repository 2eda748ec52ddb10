"""Launch an :class:`~axe.backends.cuda.artifact.Artifact` on torch tensors via ``cuda.bindings``.

``Kernel(artifact)(*args)`` does, in order:

1. :func:`bind_arguments` — match the arguments to the artifact's call signature
   (``launch["args"]``): tensor dtype, rank, shape (binding shape symbols such as ``M``),
   strides (contiguous unless the kernel declared strides), device (all on one CUDA device) and
   data-pointer alignment; scalar type and range.  Every failure is a :class:`LaunchError`
   naming the argument and the condition.
2. evaluate grid, block, cluster and dynamic shared memory from the bound symbols;
3. encode each ``CUtensorMap`` from its spec and tensor (:mod:`axe.backends.cuda.tensormap`);
4. get the ``CUfunction`` from the module cache (loaded once per device and cubin hash with
   ``cuModuleLoadData``; its dynamic shared memory limit raised with ``cuFuncSetAttribute``; a
   module with bounded waits gets its report slot, :mod:`axe.runtime.report`);
5. ``cuLaunchKernel`` (``cuLaunchKernelEx`` for clusters, ``cuLaunchCooperativeKernel`` for
   cooperative kernels) on the given stream or torch's current stream.

A wait on another CTA that timed out traps, so a later launch or :func:`synchronize` fails; both
then raise :class:`~axe.runtime.report.WaitTimeoutError` stating the kernel's report in words.

Only torch and ``cuda.bindings`` are imported, lazily; TVM never is.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import threading
import warnings
from dataclasses import dataclass, field

from axe.backends.cuda import tensormap as _tm
from axe.backends.cuda.artifact import Artifact, eval_expr

from . import report as _report
from .driver import LaunchError, check_result, cuda_driver
from .plan import LaunchPlan
from .report import WaitTimeoutError  # noqa: F401 - re-exported: what a failed launch or synchronize raises

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_CTYPES = {
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
    "bool": ctypes.c_bool,
}
_MAX_GRID = (2**31 - 1, 65535, 65535)
_MAX_SMEM = 232448  # per CTA on sm_90 and sm_100
_BOUND_CACHE = 256   # checked argument signatures remembered per Kernel (then forgotten all at once)


# --- argument binding (pure; CPU-testable) -------------------------------------------------------


@dataclass
class Bound:
    """Arguments matched to a signature: tensors by name, scalars and symbols in ``env``."""

    tensors: dict
    env: dict
    device: object = None
    grid: tuple = (1, 1, 1)
    block: tuple = (1, 1, 1)
    cluster: tuple | None = None
    dynamic_smem: int = 0
    extra: dict = field(default_factory=dict)


def _dtype_name(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def bind_arguments(launch: dict, args, device_type: str = "cuda") -> Bound:
    """Check ``args`` against ``launch["args"]`` and evaluate the launch configuration.

    Raises :class:`LaunchError` naming the argument and the failed condition: wrong count,
    not a tensor, dtype, rank, shape (including inconsistent shape symbols), strides
    (non-contiguous), device (type ``device_type``, one device for all tensors), alignment of
    the data pointer, scalar type or range, and a grid or block beyond CUDA's limits.
    """
    sig = launch["args"]
    kname = launch.get("name", launch.get("kernel", "kernel"))
    if len(args) != len(sig):
        names = ", ".join(a["name"] for a in sig)
        raise LaunchError(f"{kname}({names}): expected {len(sig)} arguments, got {len(args)}")
    tensors, env = {}, {}
    device = None
    for a, v in zip(sig, args):
        n = a["name"]
        if a["kind"] == "tensor":
            if not (hasattr(v, "data_ptr") and hasattr(v, "stride") and hasattr(v, "dtype")):
                raise LaunchError(f"{kname}: argument {n!r} must be a torch tensor, got {type(v).__name__}")
            if _dtype_name(v) != a["dtype"]:
                raise LaunchError(f"{kname}: argument {n!r} has dtype {_dtype_name(v)}, expected {a['dtype']}")
            if v.device.type != device_type:
                raise LaunchError(
                    f"{kname}: argument {n!r} is on device {v.device}, expected a {device_type} tensor"
                )
            if device is None:
                device = v.device
            elif v.device != device:
                raise LaunchError(
                    f"{kname}: argument {n!r} is on {v.device} but earlier tensors are on {device}"
                )
            if v.dim() != len(a["shape"]):
                raise LaunchError(
                    f"{kname}: argument {n!r} has rank {v.dim()} (shape {tuple(v.shape)}), expected "
                    f"rank {len(a['shape'])} (shape {a['shape']})"
                )
            tensors[n] = v
        elif a["kind"] == "scalar":
            env[n] = _scalar(kname, n, a["dtype"], v)
        else:
            raise LaunchError(f"{kname}: argument {n!r} has unknown kind {a['kind']!r}")
    for sym, src in launch.get("symbols", {}).items():
        val = int(tensors[src["arg"]].shape[src["dim"]])
        lo, hi = _INT_RANGES.get(launch.get("shape_vars", {}).get(sym, "int64"), _INT_RANGES["int64"])
        if not lo <= val <= hi:
            raise LaunchError(f"{kname}: shape symbol {sym} = {val} (from {src['arg']}.shape[{src['dim']}]) overflows")
        if val > src.get("max", val):
            raise LaunchError(f"{kname}: shape symbol {sym} = {val} (from {src['arg']}.shape[{src['dim']}]) exceeds "
                              f"{src['max']}, the largest this artifact was built for")
        env[sym] = val
    for a in sig:
        if a["kind"] != "tensor":
            continue
        n, t = a["name"], tensors[a["name"]]
        want = [eval_expr(s, env) for s in a["shape"]]
        if list(t.shape) != want:
            raise LaunchError(
                f"{kname}: argument {n!r} has shape {tuple(t.shape)}, expected {tuple(want)} "
                f"(declared {a['shape']}, with {_fmt_env(env)})"
            )
        if a.get("strides") is None:
            want_strides = _contiguous_strides(want)
            what = "contiguous row-major strides"
        else:
            want_strides = [eval_expr(s, env) for s in a["strides"]]
            what = "declared strides"
        got = list(t.stride())
        if any(g != w and size != 1 for g, w, size in zip(got, want_strides, want)):
            raise LaunchError(
                f"{kname}: argument {n!r} has strides {tuple(got)}, expected {what} "
                f"{tuple(want_strides)} (call .contiguous()?)"
            )
        _check_alignment(kname, n, t, int(a.get("alignment", 1)))
    b = Bound(tensors=tensors, env=env, device=device)
    b.grid = tuple(eval_expr(g, env) for g in launch["grid"])
    b.block = tuple(eval_expr(x, env) for x in launch["block"])
    if launch.get("cluster"):
        b.cluster = tuple(eval_expr(x, env) for x in launch["cluster"])
    b.dynamic_smem = eval_expr(launch.get("dynamic_smem", 0), env)
    for i, (g, lim) in enumerate(zip(b.grid, _MAX_GRID)):
        if not 0 <= g <= lim:
            raise LaunchError(f"{kname}: grid[{i}] = {g} is outside 0..{lim} (grid {launch['grid']}, {_fmt_env(env)})")
    if any(x < 1 for x in b.block) or b.block[0] * b.block[1] * b.block[2] > 1024:
        raise LaunchError(f"{kname}: block {b.block} must have 1..1024 threads")
    if b.cluster and any(c < 1 or g % c for g, c in zip(b.grid, b.cluster)):
        raise LaunchError(f"{kname}: grid {b.grid} is not a whole number of clusters {b.cluster}")
    if not 0 <= b.dynamic_smem <= _MAX_SMEM:
        raise LaunchError(f"{kname}: dynamic shared memory {b.dynamic_smem} bytes is outside 0..{_MAX_SMEM}")
    return b


def _check_alignment(kname, n, t, align):
    ptr = int(t.data_ptr())
    if ptr % align:
        raise LaunchError(
            f"{kname}: argument {n!r} data pointer 0x{ptr:x} is not {align}-byte aligned "
            f"(offset {ptr % align}); a sliced view? pass a fresh or .clone()d tensor"
        )


def _call_key(args):
    """What of ``args`` decides every check of :func:`bind_arguments` but the data pointers'
    alignment: each tensor's dtype, shape, strides and device, each scalar's type and value (a
    scalar may size the grid).  None when an argument is neither (the full checks explain it)."""
    import torch
    key = []
    for v in args:
        if isinstance(v, torch.Tensor):
            key.append((v.dtype, v.shape, v.stride(), v.device))
        elif isinstance(v, (int, float, bool)):
            key.append((type(v), v))
        else:
            return None
    return tuple(key)


def _scalar(kname, n, dtype, v):
    if dtype in _INT_RANGES or dtype == "bool":
        if isinstance(v, bool) and dtype != "bool":
            raise LaunchError(f"{kname}: scalar {n!r} ({dtype}) got a bool")
        if hasattr(v, "item") and not hasattr(v, "data_ptr"):
            v = v.item()
        if not isinstance(v, int):
            raise LaunchError(f"{kname}: scalar {n!r} must be an int for {dtype}, got {type(v).__name__}")
        if dtype != "bool":
            lo, hi = _INT_RANGES[dtype]
            if not lo <= v <= hi:
                raise LaunchError(f"{kname}: scalar {n!r} = {v} is outside {dtype}'s range {lo}..{hi}")
        return v
    if dtype in ("float32", "float64"):
        if hasattr(v, "item") and not hasattr(v, "data_ptr"):
            v = v.item()
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise LaunchError(f"{kname}: scalar {n!r} must be a number for {dtype}, got {type(v).__name__}")
        return float(v)
    raise LaunchError(f"{kname}: scalar {n!r} has dtype {dtype}, which the runtime cannot pass")


def _contiguous_strides(shape):
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(int(s), 1)
    return list(reversed(strides))


def _fmt_env(env):
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items())) or "no symbols"


# --- parameter packing --------------------------------------------------------------------------


class ParamPack:
    """The ``void*[]`` kernel-parameter array of one checked call signature (a key of
    :meth:`Kernel.bind`): scalar values are written once, at construction; :meth:`fill` writes one
    call's data pointers and tensor maps.  A tensor map is a function of the data pointer, the
    shape and the strides, and the shape and strides are fixed by the signature, so encoded maps
    are remembered per (parameter, data pointer): a repeat call on the same tensors encodes none.
    """

    _MAPS = 64      # encoded tensor maps remembered (then forgotten all at once)

    def __init__(self, launch: dict, env: dict, driver):
        self.launch, self.driver = launch, driver
        params = launch["params"]
        specs = launch.get("tensormaps", [])
        self.array = (ctypes.c_void_p * max(len(params), 1))()
        self._pointers, self._tensormaps, self._keep = [], [], []
        self._scalars = {}      # parameter index -> its ctypes value (see scalar())
        self._maps = {}
        for i, p in enumerate(params):
            kind = p["kind"]
            if kind == "tensor":
                c = ctypes.c_void_p(0)
                self._pointers.append((p["arg"], c))
            elif kind == "scalar":
                ct = _CTYPES.get(p["dtype"])
                if ct is None:
                    raise LaunchError(f"kernel parameter {p['name']!r} has dtype {p['dtype']}, which the runtime cannot pass")
                c = ct(env[p["value"]] if isinstance(p["value"], str) and p["value"] in env else eval_expr(p["value"], env))
                self._scalars[i] = c
            elif kind == "tensormap":
                self._tensormaps.append((i, specs[p["tensormap"]]))
                continue
            else:
                raise LaunchError(f"kernel parameter {p['name']!r} has unknown kind {kind!r}")
            self._keep.append(c)
            self.array[i] = ctypes.addressof(c)

    def scalar(self, i: int):
        """The ctypes value that scalar parameter ``i`` is passed from: setting its ``value`` changes
        what the next launch of this pack passes (the driver copies the parameters at each launch)."""
        if i not in self._scalars:
            raise LaunchError(f"kernel parameter {i} ({self.launch['params'][i]['name']!r}) is not a scalar")
        return self._scalars[i]

    def fill(self, tensors: dict) -> int:
        """Write the data pointers and tensor maps of ``tensors`` (by argument name); returns the
        array's address, valid until the next :meth:`fill`."""
        for name, c in self._pointers:
            c.value = int(tensors[name].data_ptr())
        for i, spec in self._tensormaps:
            t = tensors[spec["tensor"]]
            ptr = int(t.data_ptr())
            tmap = self._maps.get((i, ptr))
            if tmap is None:
                if len(self._maps) >= self._MAPS:
                    self._maps.clear()
                tmap = _tm.encode(spec, ptr, list(t.shape), list(t.stride()), t.element_size(), _dtype_name(t),
                                  self.driver)
                self._maps[(i, ptr)] = tmap
            self.array[i] = int(tmap.getPtr())
        return ctypes.addressof(self.array)


def pack_params(launch: dict, bound: Bound, driver):
    """Kernel parameter storage and the ``void*[]`` array pointing at it, in parameter order.

    Returns ``(array, keepalive)``: pass ``ctypes.addressof(array)`` as ``kernelParams`` and keep
    ``keepalive`` referenced until the launch call returns.  Tensor maps are encoded here.
    """
    pack = ParamPack(launch, bound.env, driver)
    pack.fill(bound.tensors)
    return pack.array, [m for _, m in sorted(pack._maps.items())] + [pack]


# --- module cache and launch ----------------------------------------------------------------------

_CACHE: dict = {}
_LOCK = threading.Lock()


def clear_cache(driver=None):
    """Unload every cached module (``cuModuleUnload``) and empty the cache."""
    with _LOCK:
        items = list(_CACHE.values())
        _CACHE.clear()
    if items:
        d = driver or cuda_driver()
        for module, *_ in items:
            d.cuModuleUnload(module)


def _ensure_context(driver, device_index):
    import torch

    torch.cuda.init()
    with torch.cuda.device(device_index):
        torch.cuda.current_stream()  # makes torch create the primary context
    check_result(driver, driver.cuInit(0), "cuInit")
    ctx = check_result(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        dev = check_result(driver, driver.cuDeviceGet(device_index), "cuDeviceGet")
        ctx = check_result(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        check_result(driver, driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class Kernel:
    """A loaded artifact; call it with the kernel's arguments to launch it.

    ``Kernel(artifact_or_path)(*args, stream=None)`` — ``stream`` is a ``torch.cuda.Stream`` or
    a raw ``CUstream`` int; by default torch's current stream on the tensors' device.
    """

    def __init__(self, artifact: Artifact | str | os.PathLike, driver=None):
        if not isinstance(artifact, Artifact):
            artifact = Artifact.load(artifact)
        self.artifact = artifact
        self.launch = artifact.launch
        self._driver = driver
        self._key = hashlib.sha256(artifact.cubin).hexdigest()
        self._scratch = {}      # (device index, stream handle) -> the scratch tensors (zero-filled at allocation)
        self._bound = {}        # _call_key(args) -> a Bound that passed every check (pointers aside)
        self._scratch_ptr = {}  # (device index, stream handle) -> (kept by a capture, the scratch set's pointers)
        self._user_args = sum(1 for a in self.launch["args"] if not a.get("scratch"))

    @property
    def driver(self):
        """The ``cuda.bindings.driver`` module (or the stand-in given at construction)."""
        if self._driver is None:
            self._driver = cuda_driver()
        return self._driver

    def __repr__(self):
        sig = ", ".join(
            f"{a['name']}: {a['dtype']}{list(a['shape']) if a['kind'] == 'tensor' else ''}" for a in self.launch["args"]
        )
        return f"Kernel {self.launch['name']}({sig}) [{self.launch['arch']}, {self.launch['kernel']}]"

    def _with_scratch(self, args, index: int, stream: int, device=None):
        """``args`` followed by the scratch tensors the caller left out.

        A kernel leaves its scratch zero-filled when it ends, so launches that are ordered (one
        stream) can share one set; launches on different streams may overlap, so each
        (device, stream) gets its own set, allocated zero-filled on first use. A set lives as long
        as this Kernel: :meth:`release_scratch` drops them (call it after the streams are done) —
        except a set a CUDA graph captured, which lives as long as the process: the graph may be
        replayed after this Kernel is gone, and freed scratch would be handed to other tensors
        while the replays still write their partial sums and flags into it."""
        import torch

        sig = self.launch["args"]
        missing = sig[len(args):]
        if not missing or not all(a.get("scratch") for a in missing):
            return args
        key = (index, int(stream))
        if key not in self._scratch:
            device = device if device is not None else torch.device("cuda", index)
            self._scratch[key] = [torch.zeros(a["shape"], dtype=getattr(torch, a["dtype"]), device=device)
                                  for a in missing]
        if id(self._scratch[key]) not in _CAPTURED_SCRATCH and _capturing():
            _CAPTURED_SCRATCH[id(self._scratch[key])] = self._scratch[key]
        return tuple(args) + tuple(self._scratch[key])

    def _scratch_ptrs(self, index: int, stream: int, device_type: str = "cuda") -> tuple:
        """The data pointers of the scratch set of (``index``, ``stream``) (:meth:`_with_scratch`'s,
        made on first use; asked whether a graph is being captured until a capture has used it,
        which keeps it for the process)."""
        got = self._scratch_ptr.get((index, stream))
        if got is not None and (got[0] or not _capturing()):
            return got[1]
        import torch

        n = self._user_args
        full = self._with_scratch((None,) * n, index, stream, device=torch.device(device_type, index))
        kept = id(self._scratch[(index, int(stream))]) in _CAPTURED_SCRATCH
        ptrs = tuple(int(t.data_ptr()) for t in full[n:])
        self._scratch_ptr[(index, stream)] = (kept, ptrs)
        return ptrs

    def release_scratch(self):
        """Forget every scratch set (the next launch on a stream allocates a fresh one). Only call it
        when no launch that used them is still running."""
        self._scratch.clear()
        self._scratch_ptr.clear()

    def bind(self, *args, device_type="cuda") -> Bound:
        """Check the arguments and compute the launch configuration without launching.

        Equal to :func:`bind_arguments`, remembered per :func:`_call_key`: a later call whose
        tensors have the same dtypes, shapes, strides and device and whose scalars are equal
        reuses the checked configuration and re-checks only the data pointers' alignment (the
        one property the key leaves out), so repeated launches cost a dict lookup."""
        return self._bind(args, device_type)[0]

    def _bind(self, args, device_type):
        """``(Bound, entry)``: ``entry`` is the cache record of the call signature (a list
        ``[device_type, Bound without tensors, LaunchPlan or None]``; the launch keeps its plan
        there), or None when ``args`` have no key."""
        key = _call_key(args)
        entry = self._bound.get(key) if key is not None else None
        if entry is None or entry[0] != device_type:
            b = bind_arguments(self.launch, args, device_type=device_type)
            if key is not None:
                if len(self._bound) >= _BOUND_CACHE:
                    self._bound.clear()
                # without the tensors: the cache must not keep the first call's memory alive
                entry = self._bound[key] = [device_type, Bound(
                    tensors={}, env=b.env, device=b.device, grid=b.grid, block=b.block, cluster=b.cluster,
                    dynamic_smem=b.dynamic_smem, extra=b.extra), None]
            return b, entry
        b = entry[1]
        kname = self.launch.get("name", self.launch.get("kernel", "kernel"))
        tensors = {}
        for a, v in zip(self.launch["args"], args):
            if a["kind"] == "tensor":
                _check_alignment(kname, a["name"], v, int(a.get("alignment", 1)))
                tensors[a["name"]] = v
        return Bound(tensors=tensors, env=b.env, device=b.device, grid=b.grid, block=b.block,
                     cluster=b.cluster, dynamic_smem=b.dynamic_smem, extra=b.extra), entry

    def function(self, device_index: int, dynamic_smem: int = 0):
        """The ``CUfunction`` on a device, loading the cubin once per (device, cubin hash)."""
        d = self.driver
        key = (device_index, self._key, self.launch["kernel"])
        with _LOCK:
            entry = _CACHE.get(key)
            if entry is None:
                _ensure_context(d, device_index)
                module = check_result(d, d.cuModuleLoadData(self.artifact.cubin), f"cuModuleLoadData({self.launch['name']})")
                func = check_result(
                    d, d.cuModuleGetFunction(module, self.launch["kernel"].encode()),
                    f"cuModuleGetFunction({self.launch['kernel']})",
                )
                entry = [module, func, 0]
                _CACHE[key] = entry
                if _report.SYMBOL.encode() in self.artifact.cubin:     # a module with bounded waits
                    if _report.PAGES.attach(d, module, self.launch["name"], device_index) is None:
                        warnings.warn(f"{self.launch['name']}: the cubin names {_report.SYMBOL}, but cuModuleGetGlobal "
                                      "does not find it: a wait that times out will trap without a report")
            if dynamic_smem > entry[2]:
                check_result(
                    d,
                    d.cuFuncSetAttribute(
                        entry[1], d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        int(dynamic_smem),
                    ),
                    f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={dynamic_smem}) for {self.launch['name']}",
                )
                entry[2] = dynamic_smem
            return entry[1]

    def module(self, device_index: int):
        """The ``CUmodule`` on a device (loaded once, as :meth:`function` does): a library the
        kernel calls into may need to initialise it (NVSHMEM's ``nvshmemx_cumodule_init``)."""
        self.function(device_index)
        with _LOCK:
            return _CACHE[(device_index, self._key, self.launch["kernel"])][0]

    #: the device type the checks demand of every tensor (``"cpu"`` only for a test that launches
    #: CPU tensors through a stand-in driver)
    device_type = "cuda"

    def plan(self, *args, stream=None):
        """The :class:`~axe.runtime.plan.LaunchPlan` of the signature of ``args`` (tensors in
        signature order; scratch may be left out): every check of :func:`bind_arguments` runs on
        a signature's first call, later calls of the same signature get the remembered plan."""
        import torch

        index = self._index(args, torch)
        return self._planned(args, index, self._stream(stream, index, torch), torch)[1]

    def _index(self, args, torch) -> int:
        dev = next((v.device for v in args if isinstance(v, torch.Tensor)), None)
        if dev is not None and dev.index is not None:
            return dev.index
        return 0 if self.device_type == "cpu" else torch.cuda.current_device()

    def _stream(self, stream, index, torch) -> int:
        if stream is None:
            return _current_stream(torch, index) if self.device_type == "cuda" else 0
        return stream.cuda_stream if hasattr(stream, "cuda_stream") else stream

    def _planned(self, args, index, stream, torch):
        """``(Bound, LaunchPlan)`` of ``args`` (scratch appended where the caller left it out)."""
        device = torch.device(self.device_type, index)
        b, entry = self._bind(self._with_scratch(args, index, stream, device=device), self.device_type)
        if b.device is None:
            b.device = device
        plan = entry[2] if entry is not None else None
        # a programmatic kernel's plan follows AXE_PROGRAMMATIC_LAUNCH as it is now (a benchmark
        # toggles it between two timings of one signature)
        if plan is None or (self.launch.get("programmatic") and plan.programmatic != programmatic_launch_enabled()):
            cuda = self.device_type == "cuda"
            plan = LaunchPlan(self, b, b.device.index if b.device.index is not None else index,
                              ParamPack(self.launch, b.env, self.driver), launch_config(self.driver, self.launch, b, 0),
                              functools.partial(_current_stream, torch) if cuda else lambda index: 0,
                              lambda d, i: _ensure_context(d, i), self.device_type)
            plan.programmatic = programmatic_launch_enabled()
            if entry is not None:
                entry[2] = plan
        return b, plan

    def __call__(self, *args, stream=None):
        """Check ``args`` (fully on a signature's first call, the data pointers' alignment on every
        call) and launch through the signature's :class:`~axe.runtime.plan.LaunchPlan`; returns the
        :class:`Bound` arguments."""
        import torch

        index = self._index(args, torch)
        stream = self._stream(stream, index, torch)
        b, plan = self._planned(args, index, stream, torch)
        plan(tuple(int(b.tensors[name].data_ptr()) for name, _ in plan.slots), stream)
        return b


@contextlib.contextmanager
def _reported(device):
    """Within it, a :class:`LaunchError` (a launch that failed because an earlier one trapped)
    becomes :class:`WaitTimeoutError` when a kernel on ``device`` reported a timed-out wait."""
    try:
        yield
    except LaunchError as e:
        _report.PAGES.check(device, cause=e)
        raise


def synchronize(device=None):
    """``torch.cuda.synchronize(device)``; if it fails and a kernel on the device reported a wait
    that timed out (:mod:`axe.runtime.report`), raise :class:`WaitTimeoutError` stating the report
    instead of CUDA's bare "unspecified launch failure"."""
    import torch

    try:
        torch.cuda.synchronize(device)
    except RuntimeError as e:
        _report.PAGES.check(_device_index(torch, device), cause=e)
        raise


def _device_index(torch, device) -> int:
    """The CUDA device index of ``device`` (None: the current device; an int; a torch.device or string)."""
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    index = torch.device(device).index
    return torch.cuda.current_device() if index is None else index


def _current_stream(torch, index: int) -> int:
    """torch's current stream on device ``index`` as a raw ``CUstream`` handle (torch's raw-handle
    query where it has one: it makes no Stream object, which costs microseconds per launch)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def launch_config(d, launch, bound, stream):
    """The ``CUlaunchConfig`` for ``cuLaunchKernelEx`` where the launch needs attributes — a
    cluster shape, programmatic stream serialization (``launch["programmatic"]``, unless
    :func:`programmatic_launch_enabled` says no) — else None (a plain ``cuLaunchKernel``)."""
    programmatic = launch.get("programmatic", False) and programmatic_launch_enabled()
    if not bound.cluster and not programmatic:
        return None
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = bound.grid
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = bound.block
    cfg.sharedMemBytes = bound.dynamic_smem
    cfg.hStream = d.CUstream(stream)
    attrs = []

    def attribute(name):
        """A new launch attribute ``CU_LAUNCH_ATTRIBUTE_<name>`` in ``attrs``; its value to fill."""
        a = d.CUlaunchAttribute()
        a.id = getattr(d.CUlaunchAttributeID, "CU_LAUNCH_ATTRIBUTE_" + name)
        attrs.append(a)
        return a.value

    if bound.cluster:
        v = attribute("CLUSTER_DIMENSION")
        v.clusterDim.x, v.clusterDim.y, v.clusterDim.z = bound.cluster
    if programmatic:    # the kernel waits for its predecessor itself (griddepcontrol.wait)
        attribute("PROGRAMMATIC_STREAM_SERIALIZATION").programmaticStreamSerializationAllowed = 1
    if launch.get("cooperative"):
        attribute("COOPERATIVE").cooperative = 1
    cfg.attrs = attrs
    cfg.numAttrs = len(attrs)
    return cfg


def programmatic_launch_enabled() -> bool:
    """Whether kernels built with ``Ax.cuda.programmatic_launch`` are launched programmatically
    (the default); ``AXE_PROGRAMMATIC_LAUNCH=0`` launches them in plain stream order (their
    ``griddepcontrol.wait`` then returns at once), e.g. to measure what the overlap gains."""
    return os.environ.get("AXE_PROGRAMMATIC_LAUNCH", "1") != "0"


#: scratch sets launches captured into CUDA graphs used (by id): kept for the process's lifetime
_CAPTURED_SCRATCH = {}


@functools.lru_cache(maxsize=None)
def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _capturing() -> bool:
    """Whether the current CUDA stream is capturing a graph (False where there is no CUDA; asked
    once per process, since a launch with scratch asks this every time)."""
    import torch
    return _has_cuda() and torch._C._cuda_isCurrentStreamCapturing()


def load(path_or_artifact, driver=None) -> Kernel:
    """Load an artifact (a saved folder or an :class:`Artifact`) as a callable :class:`Kernel`."""
    return Kernel(path_or_artifact, driver=driver)
