"""Launch plans (issue 24 item 1): a repeated call of a checked signature costs a lookup, the
pointers' alignment checks and one driver launch — and launches exactly what the checked path
launches.

The runtime's :class:`~axe.runtime.launcher.Kernel` runs here on CPU tensors (``device_type
"cpu"``) over a recording stand-in for ``cuda.bindings.driver``: every launch is recorded with its
function, grid, block, shared memory, stream and the bytes of every kernel parameter, read back
through the ``void*[]`` array the launcher passed.  The laws:

- ``LaunchPlan(ptrs)`` records the same launch as ``Kernel(*tensors)`` for tensors at ``ptrs``;
- a tensor map follows its tensor: moved in place (``cuTensorMapReplaceAddress``) or re-encoded
  where the driver has no such call, either way equal to a fresh encode at the new address;
- ``torch.ops.axe.*`` take the plan on a signature's second call (the op's checks are not run),
  fall back to the checked path for a misaligned view (which is copied), and keep every error
  naming the argument for a new signature.
"""

import ctypes

import pytest
import torch

from axe.backends.cuda.artifact import Artifact
from axe.runtime import launcher
from axe.runtime.launcher import Kernel, LaunchError
from axe.torch import ops
from axe.torch.jit import JitKernel
from test_build import FakeDriver, LaunchDriver, _Struct

_SIZES = {"float32": 4, "int32": 4, "int64": 8}


class RecordingDriver(FakeDriver):
    """Enough of ``cuda.bindings.driver`` to load, encode tensor maps (128 bytes: the address, then
    the encoding's other arguments) and launch; records each launch with its parameters' bytes."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_CONTEXT = 201

    CUfunction_attribute = FakeDriver._Names()

    def __init__(self, sizes, replace=True):
        super().__init__()
        self.sizes, self.launches = sizes, []
        if replace:
            self.cuTensorMapReplaceAddress = self._replace

    @property
    def encodes(self):
        return len(self.calls)

    def cuModuleLoadData(self, cubin):
        return 0, 1

    def cuModuleGetFunction(self, module, name):
        return 0, 2

    def cuFuncSetAttribute(self, *args):
        return (0,)

    def cuTensorMapEncodeTiled(self, dtype, rank, ptr, *rest):
        err, m = super().cuTensorMapEncodeTiled(dtype, rank, ptr, *rest)
        ctypes.memmove(m.getPtr(), ctypes.byref(ctypes.c_uint64(ptr)), 8)
        ctypes.memmove(m.getPtr() + 8, repr((dtype, rank, rest)).encode()[:120], 120)
        return err, m

    def _replace(self, tmap, ptr):
        ctypes.memmove(tmap.getPtr(), ctypes.byref(ctypes.c_uint64(ptr)), 8)
        return (0,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        array = (ctypes.c_void_p * len(self.sizes)).from_address(params)
        values = tuple(ctypes.string_at(array[i], n) for i, n in enumerate(self.sizes))
        self.launches.append((f, (gx, gy, gz), (bx, by, bz), smem, stream, values))
        return (0,)


def _ptr(t):
    return t.data_ptr().to_bytes(8, "little")


@pytest.fixture
def cpu_launches(monkeypatch):
    """Kernels check CPU tensors; no CUDA context is needed; module cache and plans start empty."""
    monkeypatch.setattr(Kernel, "device_type", "cpu")
    monkeypatch.setattr(launcher, "_ensure_context", lambda driver, index: None)
    monkeypatch.setattr(launcher, "_CACHE", {})
    ops.clear_plans()
    yield
    ops.clear_plans()


def rows_launch(n=64):
    """The rmsnorm kernel's signature (as its launch.json has it): X_, W_, Y_, eps; parameters
    W_, X_, Y_, M, eps."""
    t = {"kind": "tensor", "strides": None, "alignment": 16}
    return {"name": "rmsnorm_dyn", "kernel": "rmsnorm_dyn_kernel", "arch": "sm_90a", "grid": ["M", 1, 1],
            "block": [128, 1, 1], "dynamic_smem": 0, "symbols": {"M": {"arg": "X_", "dim": 0}},
            "shape_vars": {"M": "int32"}, "tensormaps": [],
            "args": [dict(t, name="X_", dtype="float16", shape=["M", n]), dict(t, name="W_", dtype="float16", shape=[1, n]),
                     dict(t, name="Y_", dtype="float16", shape=["M", n]), {"name": "eps", "kind": "scalar", "dtype": "float32"}],
            "params": [{"kind": "tensor", "arg": "W_"}, {"kind": "tensor", "arg": "X_"}, {"kind": "tensor", "arg": "Y_"},
                       {"kind": "scalar", "dtype": "int32", "value": "M", "name": "M"},
                       {"kind": "scalar", "dtype": "float32", "value": "eps", "name": "eps"}]}


def gemm_launch(N=256, K=128, dtype="float16", max_rows=16, **_):
    """The decode GEMM's signature (as its launch.json has it): A_, B_ (N x K), C_, scratch W_ and
    F_; parameters the three tensor maps and the scratch pointers."""
    t = {"kind": "tensor", "dtype": dtype, "strides": None, "alignment": 64}
    tm = {"dtype": dtype, "elem_strides": [1, 1], "interleave": 0, "l2_promotion": 0, "oob_fill": "zero", "swizzle": 128}
    return {"name": "gemm_dyn", "kernel": "gemm_dyn_kernel", "arch": "sm_90a", "grid": [4, 1, 1], "block": [384, 1, 1],
            "dynamic_smem": 1024, "symbols": {"M": {"arg": "A_", "dim": 0, "max": max_rows}}, "shape_vars": {"M": "int32"},
            "args": [dict(t, name="A_", shape=["M", K]), dict(t, name="B_", shape=[N, K]), dict(t, name="C_", shape=["M", N]),
                     dict(t, name="W_", dtype="float32", shape=[8, 16], scratch=True),
                     dict(t, name="F_", dtype="int32", shape=[4], scratch=True)],
            "params": [{"kind": "tensormap", "name": "A_map", "tensormap": 1}, {"kind": "tensormap", "name": "B_map", "tensormap": 0},
                       {"kind": "tensormap", "name": "C_map", "tensormap": 2}, {"kind": "tensor", "arg": "F_", "name": "F__ptr"},
                       {"kind": "tensor", "arg": "W_", "name": "W__ptr"}],
            "tensormaps": [dict(tm, param="B_map", tensor="B_", shape=[K, N], strides_bytes=[2 * K], box=[64, 64]),
                           dict(tm, param="A_map", tensor="A_", shape=None, strides_bytes=[2 * K], box=[64, 16]),
                           dict(tm, param="C_map", tensor="C_", shape=None, strides_bytes=[2 * N], box=[64, 16])]}


def _kernel(launch, driver):
    return Kernel(Artifact("", "", b"\x7fELF", launch), driver=driver)


GEMM_SIZES = [128, 128, 128, 8, 8]


@pytest.mark.parametrize("replace", [True, False])
def test_plan_launches_what_the_checked_call_launches(cpu_launches, replace):
    """For the GEMM signature (tensor maps + runtime scratch): a plan called with pointers records
    the launch the checked Kernel call records; when the tensors move, the maps follow (in place,
    or re-encoded where the driver cannot replace an address) and equal fresh encodes."""
    d = RecordingDriver(GEMM_SIZES, replace=replace)
    k = _kernel(gemm_launch(), d)
    a, b, c = torch.randn(5, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16), torch.empty(5, 256, dtype=torch.float16)
    k(a, b, c, stream=7)
    plan = k.plan(a, b, c, stream=7)
    plan((a.data_ptr(), b.data_ptr(), c.data_ptr()), 7)
    assert d.launches[0] == d.launches[1] and d.launches[0][:5] == (2, (4, 1, 1), (384, 1, 1), 1024, 7)
    a2, c2 = a.clone(), torch.empty_like(c)
    encodes = d.encodes
    plan((a2.data_ptr(), b.data_ptr(), c2.data_ptr()), 7)
    fresh = RecordingDriver(GEMM_SIZES)
    _kernel(gemm_launch(), fresh)(a2, b, c2, stream=7)
    assert d.launches[-1][:5] == fresh.launches[-1][:5] and d.launches[-1][5][:3] == fresh.launches[-1][5][:3]
    assert d.launches[-1][5][0][:8] == _ptr(a2) and d.launches[-1][5][2][:8] == _ptr(c2)
    assert d.encodes == encodes + (0 if replace else 2)              # A and C moved; B did not
    scratch = k._scratch[(0, 7)]
    assert d.launches[-1][5][3:] == (_ptr(scratch[1]), _ptr(scratch[0]))   # F__ptr, W__ptr: the stream's set
    plan((a2.data_ptr(), b.data_ptr(), c2.data_ptr()), 9)                   # another stream, its own set
    assert d.launches[-1][5][3] != d.launches[-2][5][3] and k._scratch[(0, 9)]


def test_plan_checks_alignment_and_names_the_argument(cpu_launches):
    d = RecordingDriver([8, 8, 8, 4, 4])
    k = _kernel(rows_launch(), d)
    x, w, y = torch.randn(3, 64, dtype=torch.float16), torch.randn(1, 64, dtype=torch.float16), torch.empty(3, 64, dtype=torch.float16)
    plan = k.plan(x, w, y, 1e-6)
    with pytest.raises(LaunchError, match=r"rmsnorm_dyn: argument 'W_' data pointer 0x[0-9a-f]+ is not 16-byte aligned"):
        plan((x.data_ptr(), w.data_ptr() + 2, y.data_ptr()))
    assert not d.launches
    plan((x.data_ptr(), w.data_ptr(), y.data_ptr()))
    (f, grid, block, smem, stream, values), = d.launches
    assert grid == (3, 1, 1) and values[:3] == (_ptr(w), _ptr(x), _ptr(y))
    assert int.from_bytes(values[3], "little") == 3 and ctypes.c_float.from_buffer_copy(values[4]).value == pytest.approx(1e-6)
    assert k.plan(x, w, y, 1e-6) is plan                          # one plan per signature
    assert k.plan(x[:2], w, y[:2], 1e-6) is not plan               # another M: checked and planned anew


class _Stand(JitKernel):
    """A jit kernel whose specializations load as runtime Kernels of the signatures above over one
    recording driver (no TVM, no cache: what the jit does before the launch is tested elsewhere)."""

    def __init__(self, make, kernel, spec, driver):
        super().__init__(kernel, spec, target="sm_90a", progress=False)
        self.make, self.driver = make, driver

    def load(self, device, spec):
        k = self._memo[(device, *spec.items())] = _kernel(self.make(**spec), self.driver)
        return k


@pytest.fixture
def stand_ins(cpu_launches, monkeypatch):
    """ops.KERNELS' rmsnorm and gemm_nt replaced by stand-ins; returns their drivers."""
    drivers = {"rmsnorm": RecordingDriver([8, 8, 8, 4, 4]), "gemm_nt": RecordingDriver(GEMM_SIZES)}
    monkeypatch.setitem(ops.KERNELS, "rmsnorm", _Stand(lambda n, dtype: rows_launch(n), "kernels.rmsnorm:dynamic",
                                                       ops.spec_rows, drivers["rmsnorm"]))
    monkeypatch.setitem(ops.KERNELS, "gemm_nt", _Stand(gemm_launch, "kernels.gemm:make_dynamic", ops.spec_gemm("col"),
                                                       drivers["gemm_nt"]))
    return drivers


def test_ops_take_the_plan_on_a_signatures_second_call(stand_ins, monkeypatch):
    d = stand_ins["rmsnorm"]
    x, w = torch.randn(2, 3, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    y1 = torch.ops.axe.rmsnorm(x, w, 1e-6)
    assert len(ops.PLANS["rmsnorm"]) == 1
    checked = []
    monkeypatch.setattr(ops, "_check_rmsnorm", lambda *a, **k: checked.append(a) or (64, "float16"))
    y2 = torch.ops.axe.rmsnorm(x, w, 1e-6)
    assert not checked and y2.shape == x.shape and y2.data_ptr() != x.data_ptr()
    first, second = d.launches
    assert first[:5] == second[:5] and first[5][:2] == second[5][:2] == (_ptr(w), _ptr(x))
    assert first[5][2] == _ptr(y1) and second[5][2] == _ptr(y2) and first[5][3:] == second[5][3:]
    base = torch.randn(6 * 64 + 1, dtype=torch.float16)
    odd = base[1:].view(2, 3, 64)                                 # the plan's signature, 2 bytes off
    torch.ops.axe.rmsnorm(odd, w, 1e-6)
    assert len(checked) == 1 and d.launches[-1][5][1] != _ptr(odd)     # checked, and launched on a copy
    monkeypatch.setattr(ops, "FAST_PATH", False)
    torch.ops.axe.rmsnorm(x, w, 1e-6)
    assert len(checked) == 2                                       # the switch: every call checked


def test_ops_errors_still_name_the_argument(stand_ins):
    x, w = torch.randn(4, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    torch.ops.axe.rmsnorm(x, w)
    with pytest.raises(TypeError, match="axe::rmsnorm: x has dtype torch.float32"):
        torch.ops.axe.rmsnorm(x.float(), w)
    with pytest.raises(ValueError, match=r"axe::rmsnorm: weight has shape \(32,\), expected \(64,\)"):
        torch.ops.axe.rmsnorm(x, w[:32])
    with pytest.raises(TypeError, match="axe::rmsnorm: weight has dtype torch.bfloat16, x has torch.float16"):
        torch.ops.axe.rmsnorm(x, w.bfloat16())


def test_gemm_plan_moves_its_tensor_maps(stand_ins):
    """The GEMM op's second call of a signature launches through the plan; a new activation and
    output move their maps, the weight's stays."""
    d = stand_ins["gemm_nt"]
    a, b = torch.randn(3, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16)
    c1 = torch.ops.axe.gemm(a, b, True)
    a2 = a.clone()
    c2 = torch.ops.axe.gemm(a2, b, True)
    assert len(ops.PLANS["gemm"]) == 1 and c2.shape == (3, 256)
    (_, _, _, _, _, v1), (_, _, _, _, _, v2) = d.launches
    assert v1[0][:8] == _ptr(a) and v2[0][:8] == _ptr(a2) and v1[1] == v2[1] and v2[1][:8] == _ptr(b)
    assert v1[2][:8] == _ptr(c1) and v2[2][:8] == _ptr(c2) and v1[0][8:] == v2[0][8:]


def rebuilt(fields, ptrs):
    """The parameter bytes :meth:`LaunchPlan.fields` says a launch passes for the tensors at
    ``ptrs`` (scratch left out): scalars where it says, each tensor slot's pointer (the scratch
    slots' from ``scratch``), each tensor map's bytes as exported."""
    ptrs = (*ptrs, *fields.scratch)
    n, sizes = len(ptrs), {}
    for i, p in enumerate(fields.params):                 # a scalar's size: up to the next one's offset
        if p >= 0:
            sizes[i] = min([q for q in fields.params if q > p] + [len(fields.scalars)]) - p
    return tuple(fields.scalars[p:p + sizes[i]] if p >= 0 else ptrs[-p - 1].to_bytes(8, "little") if p >= -n
                 else fields.maps[-p - n - 1][1] for i, p in enumerate(fields.params))


def test_plan_fields_state_what_the_plan_launches(cpu_launches):
    """:meth:`LaunchPlan.fields` (what a compiled launcher copies): its function, grid, block and
    shared memory are the plan's launch, and writing the pointers, scalars and tensor maps where
    it says gives the parameter bytes the plan passes — for the GEMM too, whose maps hold their
    tensors' addresses (equal to fresh encodes) and whose scratch is the stream's set; a plan with
    a launch configuration (clusters) has none."""
    d = RecordingDriver([8, 8, 8, 4, 4])
    k = _kernel(rows_launch(), d)
    x, w, y = torch.randn(3, 64, dtype=torch.float16), torch.randn(1, 64, dtype=torch.float16), torch.empty(3, 64, dtype=torch.float16)
    plan = k.plan(x, w, y, 0.25)
    f = plan.fields()
    ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr())
    plan(ptrs)
    (func, grid, block, smem, _, values), = d.launches
    assert (f.func, f.grid, f.block, f.smem) == (func, grid, block, smem) and not f.maps and not f.scratch
    assert rebuilt(f, ptrs) == values and len(f.scalars) == 8                 # M (int32) and eps (float32)
    d = RecordingDriver(GEMM_SIZES)
    k = _kernel(gemm_launch(), d)
    a, bt, c = torch.randn(5, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16), torch.empty(5, 256, dtype=torch.float16)
    plan = k.plan(a, bt, c, stream=7)
    a2 = a.clone()
    ptrs = (a2.data_ptr(), bt.data_ptr(), c.data_ptr())
    plan(ptrs, 7)                                                     # A's map moved
    f = plan.fields(7)
    assert (f.func, f.grid, f.block, f.smem, f.stream) == d.launches[-1][:5]
    assert rebuilt(f, ptrs) == d.launches[-1][5]
    assert f.scratch == [t.data_ptr() for t in k._scratch[(0, 7)]] and f.keep == tuple(k._scratch[(0, 7)])
    fresh = RecordingDriver(GEMM_SIZES)
    _kernel(gemm_launch(), fresh)(a2, bt, c, stream=7)
    assert [m[1] for m in f.maps] == [bytes(v) for v in fresh.launches[0][5][:3]]        # A_map, B_map, C_map
    assert [(slot, ptr) for slot, _, ptr in f.maps] == [(0, a2.data_ptr()), (1, bt.data_ptr()), (2, c.data_ptr())]
    assert plan.fields(9).scratch == [t.data_ptr() for t in k._scratch[(0, 9)]] != f.scratch   # another stream's set
    unread = _kernel(dict(gemm_launch(), params=gemm_launch()["params"][:3]), RecordingDriver(GEMM_SIZES[:3]))
    f = unread.plan(a, bt, c, stream=7).fields(7)         # scratch in the signature, read by no parameter
    assert f.scratch == [0, 0] and f.keep == () and len(f.params) == 3
    pair = _kernel(dict(gemm_launch(), cluster=[2, 1, 1]), ClusterDriver(GEMM_SIZES))
    assert pair.plan(a, bt, c, stream=7).fields() is None


class ClusterDriver(RecordingDriver):
    """A recording driver that also builds ``cuLaunchKernelEx`` configurations."""

    CUlaunchConfig = CUlaunchAttribute = _Struct
    CUlaunchAttributeID = LaunchDriver.CUlaunchAttributeID
    CUstream = staticmethod(LaunchDriver.CUstream)

    def cuLaunchKernelEx(self, cfg, f, params, extra):
        return (0,)
