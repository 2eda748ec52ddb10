"""The compiled launch path of ``torch.ops.axe.*`` (:mod:`axe.torch.fast_ops`, issue 24 item 1).

The library is built here against this machine's torch and launches CPU tensors through a
recording stand-in of ``cuLaunchKernel`` (a ctypes callback into test_torch_plans'
``RecordingDriver``, which reads back every parameter's bytes through the ``void*[]`` array).  The
ops' jit kernels are stand-ins loading launch signatures written here (as test_torch_plans does).
The laws:

- a signature's second call launches from C++ (no Python check runs) exactly what the op's Python
  :class:`~axe.runtime.plan.LaunchPlan` launches for the same tensors: function, grid, block,
  shared memory, stream and parameter bytes — and those bytes hold the tensors' pointers, the row
  count and the scalars where the kernel's signature puts them;
- the GEMM's tensor maps follow their tensors in C++ (equal to fresh encodes at the new
  addresses, under the plan's lock across threads); its scratch is the set of the plan's stream,
  and a call on another stream is refused, launched by the Python plan, and re-recorded;
- a new signature, a misaligned view, a wrong dtype, ``x is residual`` take the checked path with
  today's errors; ``FAST_PATH = False`` and ``clear_plans()`` govern the compiled table;
- ``AXE_FAST_OPS=0`` or a failed build leave the Python path, and :func:`launcher` says why;
- a kernel built programmatic launches from C++ through ``cuLaunchKernelEx`` with programmatic
  stream serialization (its configuration laid out as cuda.h lays it out), a plain one through
  ``cuLaunchKernel``, and ``AXE_PROGRAMMATIC_LAUNCH=0`` switches the attribute off per call.
"""

import ctypes
import os
import struct
import subprocess
import sys
import threading

import pytest
import torch

from axe.torch import fast_ops, ops
from axe.runtime.plan import LaunchPlan
from test_build import LaunchDriver, _Struct
from test_torch_plans import GEMM_SIZES, RecordingDriver, _kernel, _ptr, _Stand, cpu_launches, gemm_launch, rows_launch  # noqa: F401 - a fixture

PATH = ops.launcher()
#: the tests that launch through the library (the fallback's run anywhere)
built = pytest.mark.skipif(PATH["path"] != "compiled", reason=f"the compiled launcher is not built here: {PATH['why']}")

_T = {"kind": "tensor", "strides": None, "alignment": 16}
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)
_REPLACE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_LAUNCH_EX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
#: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (cuda.h; checked there where it is installed)
PROGRAMMATIC = 6


class LaunchAttribute(ctypes.Structure):
    """cuda.h's ``CUlaunchAttribute``: the id, padding, the 64-byte value (its first int read)."""
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int), ("rest", ctypes.c_char * 60)]


class LaunchConfig(ctypes.Structure):
    """cuda.h's ``CUlaunchConfig``."""
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("smem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


def _sig(name, args, params, grid=("M", 1, 1), block=(256, 1, 1), smem=0):
    """A launch.json of kernel ``name``: tensors ``args`` ``(name, dtype, shape[, alignment])``,
    then scalars ``(name, dtype)``; parameters in ``params`` order (tensor names, scalar names)."""
    a = [dict(_T, name=n, dtype=d, shape=list(s), alignment=al[0] if al else 16) for n, d, s, *al in args[0]]
    a += [{"name": n, "kind": "scalar", "dtype": d} for n, d in args[1]]
    kinds = {x["name"]: x for x in a}
    p = [{"kind": "tensor", "arg": n} if kinds.get(n, {}).get("kind") == "tensor" else
         {"kind": "scalar", "dtype": "int32" if n == "M" else kinds[n]["dtype"], "value": n, "name": n} for n in params]
    return {"name": name, "kernel": f"{name}_kernel", "arch": "sm_90a", "grid": list(grid), "block": list(block),
            "dynamic_smem": smem, "symbols": {"M": {"arg": a[0]["name"], "dim": 0}}, "shape_vars": {"M": "int32"},
            "tensormaps": [], "args": a, "params": p}


def add_launch(n, dtype):      # parameters in another order than the arguments: the mapping is tested
    return _sig("add_rms", ([("X_", dtype, ["M", n]), ("W_", dtype, [1, n]), ("R_", dtype, ["M", n])], [("eps", "float32")]),
                ["R_", "eps", "X_", "M", "W_"], smem=512)


def softmax_launch(n, dtype):
    return _sig("softmax", ([("X_", dtype, ["M", n]), ("Y_", dtype, ["M", n])], []), ["X_", "Y_", "M"])


def silu_launch(d, dtype):
    return _sig("silu", ([("X_", dtype, ["M", 2 * d]), ("Y_", dtype, ["M", d])], []), ["Y_", "X_", "M"], block=(128, 1, 1))


def rotary_launch(head_size, q_heads, kv_heads, is_neox, dtype, pos_dtype):
    t = [("P_", pos_dtype, ["M"], 8 if pos_dtype == "int64" else 4), ("Q_", dtype, ["M", q_heads * head_size])]
    if kv_heads:
        t.append(("K_", dtype, ["M", kv_heads * head_size]))
    t.append(("C_", dtype, ["L", head_size]))
    launch = _sig("rope_neox" if is_neox else "rope_gptj", (t, []), [n for n, *_ in t] + ["M"], grid=("M", 2, 1))
    launch["symbols"]["L"] = {"arg": "C_", "dim": 0}
    launch["shape_vars"]["L"] = "int32"
    return launch


#: (jit kernel name, signature maker, the op's spec function, kernel reference, parameter sizes)
STANDS = {
    "rmsnorm": (lambda n, dtype: rows_launch(n), ops.spec_rows, "kernels.rmsnorm:dynamic", [8, 8, 8, 4, 4]),
    "fused_add_rmsnorm": (add_launch, ops.spec_rows, "kernels.rmsnorm:dynamic_add", [8, 4, 8, 4, 8]),
    "softmax": (softmax_launch, ops.spec_rows, "kernels.softmax:dynamic", [8, 8, 4]),
    "silu_and_mul": (silu_launch, ops.spec_silu, "kernels.silu_mul:dynamic", [8, 8, 4]),
    "rotary_neox": (rotary_launch, ops.spec_rotary(True), "kernels.rotary:dynamic", [8, 8, 8, 8, 4]),
    "rotary_gptj": (rotary_launch, ops.spec_rotary(False), "kernels.rotary:dynamic", [8, 8, 8, 4]),
}


class Launches:
    """The recording drivers of the stand-ins, and the C++ launches (through the same drivers)."""

    def __init__(self, drivers):
        self.drivers, self.by_func, self.replaced, self.ex = drivers, {}, [], []

    def __getitem__(self, name):
        return self.drivers[name].launches

    def launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        """``cuLaunchKernel`` as the library calls it: recorded by the driver of the kernel whose
        function ``f`` is (each stand-in driver hands out its own function handle)."""
        return self.by_func[f].cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream or 0, params, extra)[0]

    def launch_ex(self, config, f, params, extra):
        """``cuLaunchKernelEx`` as the library calls it: its attributes ``(id, value)`` recorded in
        :attr:`ex`, the launch recorded by the kernel's driver as :meth:`launch` records it."""
        c = LaunchConfig.from_address(config)
        self.ex.append(tuple((c.attrs[i].id, c.attrs[i].value) for i in range(c.num_attrs)))
        return self.by_func[f].cuLaunchKernel(f, *c.grid, *c.block, c.smem, c.stream or 0, params, extra)[0]

    def replace(self, tmap, ptr):
        """``cuTensorMapReplaceAddress`` as the stand-in drivers do it (the address is the map's
        first 8 bytes); recorded."""
        self.replaced.append(ptr or 0)
        ctypes.memmove(tmap, ctypes.byref(ctypes.c_uint64(ptr or 0)), 8)
        return 0


@pytest.fixture
def stands(cpu_launches, monkeypatch):
    """Every op's jit kernel replaced by a stand-in over its own recording driver; the library
    launches through those drivers; both tables start and end empty."""
    drivers = {}
    launches = Launches(drivers)
    for i, (name, (make, spec, ref, sizes)) in enumerate(STANDS.items()):
        d = drivers[name] = RecordingDriver(sizes)
        d.cuModuleGetFunction = lambda module, name, f=100 + i: (0, f)
        launches.by_func[100 + i] = d
        monkeypatch.setitem(ops.KERNELS, name, _Stand(make, ref, spec, d))
    cb, replace, ex = _LAUNCH(launches.launch), _REPLACE(launches.replace), _LAUNCH_EX(launches.launch_ex)
    ops._LAUNCHER.set_launch(*(ctypes.cast(f, ctypes.c_void_p).value for f in (cb, replace, ex)))
    try:
        yield launches
    finally:
        ops._LAUNCHER.set_launch(None)


def counts():
    return ops._LAUNCHER.counts()


def _calls(op, args):
    """The op called twice on ``args`` (a fresh copy of in-place operands each time is not
    needed: the launch is recorded, not run); returns the counts after the first and second."""
    getattr(torch.ops.axe, op)(*args)
    first = counts()
    out = getattr(torch.ops.axe, op)(*args)
    return first, counts(), out


def _python_plan_launch(launches, name, op, key, ptrs):
    """What the op's Python LaunchPlan for ``key`` launches on ``ptrs`` (recorded)."""
    plan = ops.PLANS[op][key][0]
    plan(ptrs, 0)
    return launches[name][-1]


@built
def test_second_call_launches_from_cpp_what_the_python_plan_launches(stands, monkeypatch):
    x, w = torch.randn(2, 3, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    y1 = torch.ops.axe.rmsnorm(x, w, 1e-6)
    before = counts()
    checked = []
    monkeypatch.setattr(ops, "_check_rmsnorm", lambda *a, **k: checked.append(a) or (64, "float16"))
    y2 = torch.ops.axe.rmsnorm(x, w, 1e-6)
    after = counts()
    assert not checked and after["launched"] == before["launched"] + 1 and after["plans"] == before["plans"] == 1
    assert y2.shape == x.shape and y2.dtype == x.dtype and y2.data_ptr() not in (y1.data_ptr(), x.data_ptr())
    first, second = stands["rmsnorm"]
    want = _python_plan_launch(stands, "rmsnorm", "rmsnorm", (ops._sig(x), ops._sig(w), 1e-6),
                               (x.data_ptr(), w.data_ptr(), y2.data_ptr()))
    assert second == want                                        # function, grid, block, smem, stream, bytes
    f, grid, block, smem, stream, values = second
    assert (f, grid, block, smem, stream) == (first[0], (6, 1, 1), (128, 1, 1), 0, 0)
    assert values[:3] == (_ptr(w), _ptr(x), _ptr(y2)) and first[5][2] == _ptr(y1)   # W_, X_, Y_ as launch.json orders them
    assert struct.unpack("<i", values[3]) == (6,) and struct.unpack("<f", values[4])[0] == pytest.approx(1e-6)


@built
@pytest.mark.parametrize("op", ["fused_add_rmsnorm", "softmax", "silu_and_mul", "rotary_neox", "rotary_gptj_nokey"])
def test_every_op_launches_from_cpp_as_its_python_plan(stands, op):
    """Each op's kernel arguments come from the right operands and outputs (parameters read back
    in the signature's order), and equal the Python plan's launch."""
    bf = torch.bfloat16
    if op == "fused_add_rmsnorm":
        x, r, w = torch.randn(3, 128, dtype=bf), torch.randn(3, 128, dtype=bf), torch.randn(128, dtype=bf)
        first, second, out = _calls(op, (x, r, w, 1e-5))
        name, key, ptrs = op, (ops._sig(x), ops._sig(r), ops._sig(w), 1e-5), (x.data_ptr(), w.data_ptr(), r.data_ptr())
        expect = (_ptr(r), struct.pack("<f", 1e-5), _ptr(x), struct.pack("<i", 3), _ptr(w))
        assert out is None
    elif op in ("softmax", "silu_and_mul"):
        x = torch.randn(2, 5, 64, dtype=bf)
        first, second, out = _calls(op, (x,))
        name, key = op, ops._sig(x)
        assert out.shape == ((2, 5, 64) if op == "softmax" else (2, 5, 32)) and out.dtype == bf
        ptrs = (x.data_ptr(), out.data_ptr())
        expect = (_ptr(x), _ptr(out), struct.pack("<i", 10)) if op == "softmax" else (_ptr(out), _ptr(x), struct.pack("<i", 10))
    else:
        pos = torch.tensor([3, 0, 7, 1])
        q, cache = torch.randn(4, 2 * 64, dtype=bf), torch.randn(16, 64, dtype=bf)
        k = torch.randn(4, 64, dtype=bf) if op == "rotary_neox" else None
        neox = op == "rotary_neox"
        first, second, out = _calls("rotary_embedding", (pos, q, k, 64, cache, neox))
        name = "rotary_neox" if neox else "rotary_gptj"
        key = (ops._sig(pos), ops._sig(q), None if k is None else ops._sig(k), 64, ops._sig(cache), neox)
        ptrs = tuple(t.data_ptr() for t in (pos, q, k, cache) if t is not None)
        expect = (*(_ptr(t) for t in (pos, q, k, cache) if t is not None), struct.pack("<i", 4))
    assert second["launched"] == first["launched"] + 1 and second["checked"] == first["checked"]
    got = stands[name][-1]
    assert got[5] == expect
    assert got == _python_plan_launch(stands, name, "rotary_embedding" if name.startswith("rotary") else op, key, ptrs)


@built
def test_an_empty_grid_launches_nothing(stands):
    """No rows: the plan launches nothing; the library allocates the empty output and returns."""
    x, w = torch.randn(0, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    torch.ops.axe.rmsnorm(x, w)
    c, n = counts(), len(stands["rmsnorm"])
    y = torch.ops.axe.rmsnorm(x, w)
    assert counts()["launched"] == c["launched"] + 1 and len(stands["rmsnorm"]) == n and y.shape == (0, 64)


@built
def test_checked_path_keeps_todays_behaviour(stands):
    """A new signature, a misaligned view, a wrong dtype and x aliasing residual go to the checked
    path, which copies or raises today's errors."""
    x, w = torch.randn(4, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
    torch.ops.axe.rmsnorm(x, w)
    torch.ops.axe.rmsnorm(x, w)
    c = counts()
    torch.ops.axe.rmsnorm(x[:3], w)                                    # another M: a new signature
    assert counts()["checked"] == c["checked"] + 1 and counts()["plans"] == c["plans"] + 1
    base = torch.randn(4 * 64 + 1, dtype=torch.float16)
    odd = base[1:].view(4, 64)                                         # the plan's signature, 2 bytes off
    c = counts()
    torch.ops.axe.rmsnorm(odd, w)
    assert counts()["checked"] == c["checked"] + 1 and stands["rmsnorm"][-1][5][1] != _ptr(odd)   # launched on a copy
    with pytest.raises(TypeError, match="axe::rmsnorm: x has dtype torch.float32, expected float16 or bfloat16"):
        torch.ops.axe.rmsnorm(x.float(), w)
    with pytest.raises(ValueError, match=r"axe::rmsnorm: weight has shape \(32,\), expected \(64,\)"):
        torch.ops.axe.rmsnorm(x, w[:32])
    r = torch.randn(4, 64, dtype=torch.float16)
    torch.ops.axe.fused_add_rmsnorm(x, r, w)
    torch.ops.axe.fused_add_rmsnorm(x, r, w)
    c = counts()
    with pytest.raises(ValueError, match="axe::fused_add_rmsnorm: x and residual are the same memory"):
        torch.ops.axe.fused_add_rmsnorm(x, x, w)                      # the planned signature, aliased
    assert counts()["launched"] == c["launched"]


@built
def test_a_python_plan_reaches_the_table(stands):
    """A signature planned by a direct call of the checked implementation (no compiled call was
    pending: nothing to key it by) is handed over by the first compiled call that reaches it."""
    x = torch.randn(3, 64, dtype=torch.float16)
    torch.ops.axe_checked.softmax(x)
    assert ops.PLANS["softmax"] and counts()["plans"] == 0
    torch.ops.axe.softmax(x)
    c = counts()
    assert c["plans"] == 1
    torch.ops.axe.softmax(x)
    assert counts()["launched"] == c["launched"] + 1


def _has_libcuda():
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@built
@pytest.mark.skipif(_has_libcuda(), reason="a real libcuda.so.1 is here: the refusal needs its absence")
def test_a_hit_without_a_driver_is_refused_and_checked(stands):
    """Without a cuLaunchKernel to call (this machine's libcuda.so.1 is absent) a planned call is
    refused, counted with the reason, and launched by the Python plan instead."""
    x = torch.randn(2, 64, dtype=torch.float16)
    torch.ops.axe.softmax(x)
    ops._LAUNCHER.set_launch(None)
    c, n = counts(), len(stands["softmax"])
    y = torch.ops.axe.softmax(x)
    got = counts()
    assert got["refused"] == c["refused"] + 1 and "libcuda.so.1" in got["refusal"] and got["launched"] == c["launched"]
    assert len(stands["softmax"]) == n + 1 and stands["softmax"][-1][5][1] == _ptr(y)     # the Python plan's launch


@built
def test_fast_path_switch_and_clear_plans_govern_the_table(stands):
    x = torch.randn(2, 64, dtype=torch.float16)
    torch.ops.axe.softmax(x)
    torch.ops.axe.softmax(x)
    c = counts()
    ops.FAST_PATH = False
    try:
        torch.ops.axe.softmax(x)
        torch.ops.axe.softmax(torch.randn(5, 64, dtype=torch.float16))
        assert counts()["launched"] == c["launched"] and counts()["plans"] == c["plans"]   # nothing launched or kept
    finally:
        ops.FAST_PATH = True
    torch.ops.axe.softmax(x)
    assert counts()["launched"] == c["launched"] + 1
    ops.clear_plans()
    assert counts()["plans"] == 0 and not ops.PLANS["softmax"]
    c = counts()
    torch.ops.axe.softmax(x)
    assert counts()["checked"] == c["checked"] + 1 and counts()["plans"] == 1   # checked and planned again


@built
def test_threads_launch_their_own_tensors(stands):
    """Calls of one planned signature from several threads (no lock held while launching) each
    launch with their own pointers."""
    w = torch.randn(64, dtype=torch.float16)
    xs = [torch.randn(8, 64, dtype=torch.float16) for _ in range(4)]
    torch.ops.axe.rmsnorm(xs[0], w)
    outs = [[] for _ in xs]

    def work(i):
        for _ in range(25):
            outs[i].append(torch.ops.axe.rmsnorm(xs[i], w))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen = {(v[5][1], v[5][2]) for v in stands["rmsnorm"][1:]}
    assert seen == {(_ptr(x), _ptr(y)) for x, ys in zip(xs, outs) for y in ys}


FALLBACK = r"""
import json, sys
import torch
import axe.torch.ops as ops
path = ops.launcher()
x, w = torch.randn(4, 64, dtype=torch.float16), torch.randn(64, dtype=torch.float16)
try:
    torch.ops.axe.rmsnorm(x.float(), w)
except TypeError as e:
    path["error"] = str(e)
print(json.dumps(path))
"""


@pytest.mark.parametrize("env", [{"AXE_FAST_OPS": "0"}, {"CXX": "/nonexistent/c++"}])
def test_fallback_is_todays_python_path(env, tmp_path):
    """Without the library (switched off, or no compiler: nothing built in a fresh folder) the ops
    are registered in Python as before and launcher() says why."""
    import json
    e = dict(os.environ, AXE_FAST_OPS_DIR=str(tmp_path), PYTHONPATH=os.pathsep.join(sys.path), **env)
    out = subprocess.run([sys.executable, "-c", FALLBACK], env=e, capture_output=True, text=True, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert got["path"] == "python" and not got["compiled"] and "rmsnorm" in got["python"]
    assert ("AXE_FAST_OPS=0" if "AXE_FAST_OPS" in env else "no C++ compiler (/nonexistent/c++)") in got["why"]
    assert got["error"] == "axe::rmsnorm: x has dtype torch.float32, expected float16 or bfloat16"


def test_a_failed_build_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "false")                       # a "compiler" that fails
    with pytest.raises(fast_ops.BuildError, match="false failed on fast_ops.cpp"):
        fast_ops.build(tmp_path)
    assert not list(tmp_path.rglob("*.so"))


@built
def test_the_library_is_built_for_this_torch():
    """Loaded from a folder named by the digest of the source, torch's version and the compiler."""
    so = ops._LAUNCHER.path
    assert so.is_file() and so.name == "fast_ops.so" and len(so.parent.name) == 16
    assert fast_ops.build(so.parent.parent) == so              # found, not rebuilt


# --- gemm: tensor maps and scratch ------------------------------------------------------------

class GemmDriver(RecordingDriver):
    """The recording driver of the GEMM stand-ins: the decode kernel split in K (three tensor maps,
    two scratch pointers), unsplit (the maps), and the persistent one (the maps)."""

    FUNCS = {b"gemm_dyn_kernel": (200, GEMM_SIZES), b"gemm_pers_kernel": (201, GEMM_SIZES[:3]),
             b"gemm_whole_kernel": (202, GEMM_SIZES[:3])}

    def __init__(self):
        super().__init__(GEMM_SIZES)

    def cuModuleGetFunction(self, module, name):
        return 0, self.FUNCS[name][0]

    def cuLaunchKernel(self, f, *rest):
        self.sizes = {f: sizes for f, sizes in self.FUNCS.values()}[f]
        return super().cuLaunchKernel(f, *rest)


def gemm_stand_launch(N, K, dtype="float16", max_rows=None, **_):
    """A decode bucket's signature (``max_rows``) — split in K, reading its scratch, where N is
    256; whole where N is 128: its signature lists the scratch, which no parameter reads (as a
    real unsplit build's does) — or the persistent tile's (a run-time M: the maps alone)."""
    if max_rows is not None:
        launch = gemm_launch(N, K, dtype, max_rows)
        if N == 128:
            launch.update(name="gemm_whole", kernel="gemm_whole_kernel", params=launch["params"][:3])
        return launch
    launch = gemm_launch(N, K, dtype, 1 << 20)
    del launch["symbols"]["M"]["max"]
    launch.update(name="gemm_pers", kernel="gemm_pers_kernel", args=launch["args"][:3], params=launch["params"][:3])
    return launch


@pytest.fixture
def gemm_stand(stands, monkeypatch):
    """``ops.KERNELS["gemm_nt"]`` a stand-in of both GEMM signatures over one recording driver."""
    d = stands.drivers["gemm_nt"] = GemmDriver()
    stands.by_func.update({200: d, 201: d, 202: d})
    monkeypatch.setitem(ops.KERNELS, "gemm_nt", _Stand(gemm_stand_launch, "kernels.gemm:make_dynamic",
                                                       ops.spec_gemm("col"), d))
    return stands


def _fresh_maps(a, b, c):
    """A_map, B_map, C_map as a fresh driver encodes them for these tensors."""
    fresh = GemmDriver()
    launch = gemm_stand_launch(**ops.spec_gemm("col")(a, b, c))
    _kernel(launch, fresh)(a, b, c, stream=0)
    return fresh.launches[0][5][:3]


@built
@pytest.mark.parametrize("M", [3, 300], ids=["decode-split-scratch", "persistent-maps"])
def test_gemm_launches_from_cpp_as_its_python_plan(gemm_stand, M):
    """The GEMM's second call launches from C++ what its Python plan launches (maps, scratch);
    when the activation and the output move, their maps are pointed at the new addresses (equal
    to fresh encodes there) and the weight's is left alone."""
    a, b = torch.randn(M, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16)
    first, second, c = _calls("gemm", (a, b, True))
    assert second["launched"] == first["launched"] + 1 and second["checked"] == first["checked"]
    assert c.shape == (M, 256) and c.dtype == torch.float16
    key = (ops._sig(a), ops._sig(b), True)
    plan = ops.PLANS["gemm"][key][0]
    got = gemm_stand["gemm_nt"][-1]
    assert got[0] == (200 if M == 3 else 201) and got[5][:3] == _fresh_maps(a, b, c)
    if M == 3:                             # F__ptr, W__ptr: the plan's stream's scratch set
        w, f = plan.kernel._scratch[(0, 0)]
        assert got[5][3:] == (_ptr(f), _ptr(w))
    assert got == _python_plan_launch(gemm_stand, "gemm_nt", "gemm", key, (a.data_ptr(), b.data_ptr(), c.data_ptr()))
    a2 = a.clone()
    replaced, c0 = len(gemm_stand.replaced), counts()
    c2 = torch.ops.axe.gemm(a2, b, True)
    assert counts()["launched"] == c0["launched"] + 1
    got = gemm_stand["gemm_nt"][-1]
    assert got[5][:3] == _fresh_maps(a2, b, c2) and got[5][1] == _fresh_maps(a, b, c)[1]
    assert set(gemm_stand.replaced[replaced:]) == {a2.data_ptr(), c2.data_ptr()}     # A and C moved; B did not
    assert got == _python_plan_launch(gemm_stand, "gemm_nt", "gemm", key, (a2.data_ptr(), b.data_ptr(), c2.data_ptr()))


@built
def test_gemm_on_another_stream_is_refused_and_launched_by_python(gemm_stand, monkeypatch):
    """A plan whose scratch set belongs to stream 7 (made there) is refused on stream 0 (counted,
    with the reason) and the Python plan launches with stream 0's own set; the refused call hands
    the table the plan with stream 0's set, which the next call launches from C++.  A plan
    without scratch, or whose kernel reads none, launches on any stream."""
    fields, made_on = LaunchPlan.fields, [7]
    monkeypatch.setattr(LaunchPlan, "fields", lambda self, stream=None: fields(self, made_on[0]))
    a, b = torch.randn(3, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16)
    torch.ops.axe.gemm(a, b, True)
    made_on[0] = None                                                   # from now on: the current stream, 0
    plan = ops.PLANS["gemm"][(ops._sig(a), ops._sig(b), True)][0]
    c0 = counts()
    c = torch.ops.axe.gemm(a, b, True)
    got = counts()
    assert got["refused"] == c0["refused"] + 1 and got["launched"] == c0["launched"]
    assert got["refusal"] == "the plan's scratch belongs to another stream"
    w, f = plan.kernel._scratch[(0, 0)]
    last = gemm_stand["gemm_nt"][-1]
    assert last[4] == 0 and last[5][3:] == (_ptr(f), _ptr(w)) and last[5][2][:8] == _ptr(c)
    assert _ptr(plan.kernel._scratch[(0, 7)][1]) != last[5][3]
    c = torch.ops.axe.gemm(a, b, True)
    assert counts()["launched"] == got["launched"] + 1 and counts()["refused"] == got["refused"]
    last = gemm_stand["gemm_nt"][-1]
    assert last[5][2][:8] == _ptr(c) and last[5][3:] == (_ptr(f), _ptr(w))
    made_on[0] = 7
    for a, b in ((torch.randn(300, 128, dtype=torch.float16), b),                          # persistent: no scratch
                 (torch.randn(3, 128, dtype=torch.float16), torch.randn(128, 128, dtype=torch.float16))):  # scratch unread
        torch.ops.axe.gemm(a, b, True)
        c0 = counts()
        torch.ops.axe.gemm(a, b, True)
        assert counts()["launched"] == c0["launched"] + 1 and counts()["refused"] == c0["refused"]
        assert gemm_stand["gemm_nt"][-1][0] == (201 if len(a) == 300 else 202)


@built
def test_gemm_checked_path_fast_path_switch_and_clear_plans(gemm_stand):
    """A misaligned activation takes the checked path (copied); ``FAST_PATH = False`` launches
    nothing from C++ and keeps nothing; ``clear_plans()`` forgets the plans and the scratch sets
    kept for them."""
    a, b = torch.randn(3, 128, dtype=torch.float16), torch.randn(256, 128, dtype=torch.float16)
    torch.ops.axe.gemm(a, b, True)
    assert ops._LAUNCHER._kept and counts()["plans"] == 1
    base = torch.randn(3 * 128 + 8, dtype=torch.float16)
    odd = base[8:].view(3, 128)                                          # the signature, 16 bytes off
    c0 = counts()
    torch.ops.axe.gemm(odd, b, True)
    assert counts()["checked"] == c0["checked"] + 1 and gemm_stand["gemm_nt"][-1][5][0][:8] != _ptr(odd)
    ops.FAST_PATH = False
    try:
        torch.ops.axe.gemm(a, b, True)
        torch.ops.axe.gemm(torch.randn(5, 128, dtype=torch.float16), b, True)
        assert counts()["launched"] == c0["launched"] and counts()["plans"] == 1
    finally:
        ops.FAST_PATH = True
    torch.ops.axe.gemm(a, b, True)
    assert counts()["launched"] == c0["launched"] + 1
    ops.clear_plans()
    assert counts()["plans"] == 0 and not ops._LAUNCHER._kept and not ops.PLANS["gemm"]
    c0 = counts()
    torch.ops.axe.gemm(a, b, True)
    assert counts()["checked"] == c0["checked"] + 1 and counts()["plans"] == 1


@built
def test_gemm_threads_move_maps_without_mixing(gemm_stand):
    """Threads calling one planned GEMM signature with their own activations: each launch's A and
    C maps hold that call's own tensors (a map is rewritten and launched under the plan's lock)."""
    b = torch.randn(256, 128, dtype=torch.float16)
    xs = [torch.randn(3, 128, dtype=torch.float16) for _ in range(4)]
    torch.ops.axe.gemm(xs[0], b, True)
    n, c0 = len(gemm_stand["gemm_nt"]), counts()
    outs = [[] for _ in xs]

    def work(i):
        for _ in range(25):
            outs[i].append(torch.ops.axe.gemm(xs[i], b, True))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts()["launched"] == c0["launched"] + 100
    seen = [(v[5][0][:8], v[5][2][:8]) for v in gemm_stand["gemm_nt"][n:]]
    assert sorted(seen) == sorted((_ptr(x), _ptr(c)) for x, cs in zip(xs, outs) for c in cs)


# --- programmatic dependent launch ------------------------------------------------------------

class ProgrammaticDriver(RecordingDriver):
    """A recording driver that also launches through ``cuLaunchKernelEx`` (the Python plan of a
    programmatic kernel), recording its attributes in :attr:`ex`."""

    CUlaunchAttributeID = LaunchDriver.CUlaunchAttributeID
    CUlaunchConfig = CUlaunchAttribute = _Struct

    def __init__(self, sizes):
        super().__init__(sizes)
        self.ex = []

    @staticmethod
    def CUstream(handle):
        return handle

    def cuModuleGetFunction(self, module, name):
        return 0, 300

    def cuLaunchKernelEx(self, cfg, f, params, extra):
        self.ex.append(tuple((a.id, a.value.programmaticStreamSerializationAllowed) for a in cfg.attrs))
        return self.cuLaunchKernel(f, cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY,
                                   cfg.blockDimZ, cfg.sharedMemBytes, cfg.hStream, params, extra)


@pytest.fixture
def programmatic_softmax(stands, monkeypatch):
    """``axe::softmax``'s stand-in marked programmatic in its launch.json (the other ops' are not)."""
    d = stands.drivers["softmax"] = ProgrammaticDriver([8, 8, 4])
    stands.by_func[300] = d
    monkeypatch.setitem(ops.KERNELS, "softmax", _Stand(lambda n, dtype: dict(softmax_launch(n, dtype), programmatic=True),
                                                       "kernels.softmax:dynamic", ops.spec_rows, d))
    return stands


@built
def test_a_programmatic_plan_launches_with_the_attribute_and_a_plain_one_without(programmatic_softmax, monkeypatch):
    """The second call of a programmatic kernel's signature launches from C++ through
    cuLaunchKernelEx with programmatic stream serialization allowed, and launches what the Python
    plan launches; a plain kernel's goes through cuLaunchKernel.  AXE_PROGRAMMATIC_LAUNCH=0 (read
    at each call) launches the same plan plainly, without a check; set again, with the attribute."""
    launches = programmatic_softmax
    monkeypatch.delenv("AXE_PROGRAMMATIC_LAUNCH", raising=False)
    x = torch.randn(2, 5, 64, dtype=torch.bfloat16)
    first, second, y = _calls("softmax", (x,))
    assert second["launched"] == first["launched"] + 1 and second["checked"] == first["checked"]
    assert launches.drivers["softmax"].ex == [(("programmatic", 1),)]        # the checked call's Python plan
    assert launches.ex == [((PROGRAMMATIC, 1),)]
    got = launches["softmax"][-1]
    assert got[5] == (_ptr(x), _ptr(y), struct.pack("<i", 10))
    assert got == _python_plan_launch(launches, "softmax", "softmax", ops._sig(x), (x.data_ptr(), y.data_ptr()))
    xs = torch.randn(3, 64, dtype=torch.bfloat16)
    _calls("silu_and_mul", (xs,))
    assert len(launches.ex) == 1 and len(launches["silu_and_mul"]) == 2          # plain: cuLaunchKernel
    c, n = counts(), len(launches["softmax"])
    monkeypatch.setenv("AXE_PROGRAMMATIC_LAUNCH", "0")
    y = torch.ops.axe.softmax(x)
    assert counts()["launched"] == c["launched"] + 1 and counts()["checked"] == c["checked"]
    assert len(launches.ex) == 1 and len(launches["softmax"]) == n + 1 and launches["softmax"][-1][5][1] == _ptr(y)
    monkeypatch.setenv("AXE_PROGRAMMATIC_LAUNCH", "1")
    torch.ops.axe.softmax(x)
    assert launches.ex[1:] == [((PROGRAMMATIC, 1),)] and counts()["checked"] == c["checked"]


LAYOUT = r"""
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
int main() {
  printf("%zu %zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, sharedMemBytes),
         offsetof(CUlaunchConfig, hStream), offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs),
         sizeof(CUlaunchAttribute), offsetof(CUlaunchAttribute, value),
         (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
}
"""


def test_the_launch_structures_are_laid_out_as_cuda_h_says(tmp_path):
    """The mirror this module reads the library's cuLaunchKernelEx configuration through has
    cuda.h's offsets and sizes, and the attribute's id is cuda.h's (the library's own mirror is
    pinned by a static_assert on the same sizes and read back through this one above)."""
    header = os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "include")
    cxx = fast_ops.shutil.which(os.environ.get("CXX") or "c++")
    if cxx is None or not os.path.isfile(os.path.join(header, "cuda.h")):
        pytest.skip("no C++ compiler or no cuda.h here")
    (tmp_path / "layout.cpp").write_text(LAYOUT)
    subprocess.run([cxx, f"-I{header}", str(tmp_path / "layout.cpp"), "-o", str(tmp_path / "layout")], check=True)
    got = [int(v) for v in subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split()]
    assert got == [ctypes.sizeof(LaunchConfig), LaunchConfig.smem.offset, LaunchConfig.stream.offset,
                   LaunchConfig.attrs.offset, LaunchConfig.num_attrs.offset, ctypes.sizeof(LaunchAttribute),
                   LaunchAttribute.value.offset, PROGRAMMATIC]
