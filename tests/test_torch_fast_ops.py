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
- a new signature, a misaligned view, a wrong dtype, ``x is residual`` take the checked path with
  today's errors; ``FAST_PATH = False`` and ``clear_plans()`` govern the compiled table;
- ``AXE_FAST_OPS=0`` or a failed build leave the Python path, and :func:`launcher` says why.
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
from test_torch_plans import RecordingDriver, _ptr, _Stand, cpu_launches, rows_launch  # noqa: F401 - a fixture

PATH = ops.launcher()
#: the tests that launch through the library (the fallback's run anywhere)
built = pytest.mark.skipif(PATH["path"] != "compiled", reason=f"the compiled launcher is not built here: {PATH['why']}")

_T = {"kind": "tensor", "strides": None, "alignment": 16}
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p, ctypes.c_void_p,
                           ctypes.c_void_p)


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
        self.drivers, self.by_func = drivers, {}

    def __getitem__(self, name):
        return self.drivers[name].launches

    def launch(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        """``cuLaunchKernel`` as the library calls it: recorded by the driver of the kernel whose
        function ``f`` is (each stand-in driver hands out its own function handle)."""
        return self.by_func[f].cuLaunchKernel(f, gx, gy, gz, bx, by, bz, smem, stream or 0, params, extra)[0]


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
    cb = _LAUNCH(launches.launch)
    ops._LAUNCHER.set_launch(ctypes.cast(cb, ctypes.c_void_p).value)
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
