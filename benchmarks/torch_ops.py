#!/usr/bin/env python3
"""Host and GPU time per call of every ``torch.ops.axe`` op beside torch's own (issue 24, item 1).

Two steps, one case table (:data:`CASES`) so both sides compute the same cache keys:

- here (TVM + nvcc): ``.venv/bin/python benchmarks/torch_ops.py build`` fills ``.carry/serving_cache``
  with every artifact the cases launch (``--cache DIR`` elsewhere);
- on the GPU machine (no TVM): ``python3 benchmarks/torch_ops.py run`` checks each axe op against
  its torch counterpart, then times both, and writes
  ``torch_ops-<date>-<device>.json`` under ``$OUT`` (else ``benchmarks/results``).

Rows ``op, M, axe_host_us, torch_host_us, axe_gpu_us, torch_gpu_us`` (Llama-3.1-8B sizes, bf16):

- ``rmsnorm`` beside ``F.rms_norm``; ``softmax`` beside ``torch.softmax``; ``gemm_up`` /
  ``gemm_down`` (``x @ w.T``, w (N, K): 14336×4096 and 4096×14336) beside ``torch.matmul``;
- ``fused_add_rmsnorm``, ``silu_and_mul`` and ``rotary_embedding`` (NeoX, 32 query and 8 key
  heads of 128, in place) beside torch-written equivalents of the same semantics (what a model
  without custom kernels runs: ``residual += x; x = rms_norm(residual)``, ``silu(g) * u``, the
  rotation written with slices and ``cat``).

**Host µs** is wall time per call with nothing synchronized between calls: rounds of ``--calls``
back-to-back calls (few enough that the launch queue never fills, so a call never waits for the
GPU), the stream drained between rounds outside the timing; the median over ``--rounds`` rounds.
**GPU µs** is CUDA-graph replay: ``--graph-calls`` calls captured into one graph, replayed in
batches, per call (:func:`axe.torch.timing.graph_ms`): the kernels without host work between them.
``axe_checked_host_us`` is the axe op with ``axe.torch.ops.FAST_PATH = False``: every call through
the op's full checks and the jit's specialization lookup (the path before the launch plans; the
runtime under it still keeps one plan per signature).  ``axe_launch_path`` (in the JSON) is
:func:`axe.torch.ops.launcher`: whether the compiled launcher (:mod:`axe.torch.fast_ops`) takes the
ops, and why not where it does not; where it does, ``axe_host_us`` is its path and
``axe_python_host_us`` the Python plans' (``torch.ops.axe_checked.<op>``: the default path before
it), timed in the same run.

``cpu`` times the same ops on CPU tensors at M = 1 through a driver that returns at once (the
artifacts' real ``launch.json`` from ``--cache``, read as a machine without TVM reads them; a
compiled no-op ``cuLaunchKernel`` and ``cuTensorMapReplaceAddress`` for the compiled launcher, a
Python driver returning success, tensor maps encoded as 128 bytes holding the address, for the
Python plans): the host cost of each path alone, on any machine with a C++ compiler.

``run --launchers`` also times one launch of the rmsnorm kernel (M = 1) by each candidate
mechanism: the whole op through the compiled launcher and through the Python plan (with
``torch.ops.aten.empty_like``, torch's own op through the same generic binding), the runtime's ``LaunchPlan`` (checks of the pointers + ``cuLaunchKernel`` through
``cuda.bindings`` with a pre-packed ``void*[]``), that bare ``cuda.bindings`` call, ``ctypes``
straight into ``libcuda``, ``cuda.core``'s ``launch`` (Python ints and NumPy scalars packed per
call), the runtime ``Kernel``'s checked call, and a compiled launcher called through
apache-tvm-ffi with the three torch tensors (:data:`TVM_FFI_LAUNCHER`, built by ``build`` into
``.carry/tvm_ffi`` where ``tvm_ffi`` is installed; it runs where the ``apache-tvm-ffi`` wheel is
installed, e.g. carried in ``.whl/``: scripts/gpu_run.sh installs carried wheels).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

#: the artifacts of the serving benchmarks (this one and benchmarks/layer.py): carried alone, small
CACHE = os.path.join(ROOT, ".carry", "serving_cache")
TARGET = "sm_90a"
#: Llama-3.1-8B: hidden, MLP width, query heads, key heads, head size
HIDDEN, MLP, HQ, HK, HS = 4096, 14336, 32, 8, 128
ROWS = (1, 8, 64, 2048)
EPS = 1e-5


def specs(rows=ROWS) -> list:
    """``(jit kernel of axe.torch.ops.KERNELS, spec)`` of every artifact the cases launch."""
    from axe.torch import tune
    out = [("rmsnorm", {"n": HIDDEN, "dtype": "bfloat16"}), ("fused_add_rmsnorm", {"n": HIDDEN, "dtype": "bfloat16"}),
           ("softmax", {"n": HIDDEN, "dtype": "bfloat16"}), ("silu_and_mul", {"d": MLP, "dtype": "bfloat16"}),
           ("rotary_neox", {"head_size": HS, "q_heads": HQ, "kv_heads": HK, "is_neox": True, "dtype": "bfloat16",
                            "pos_dtype": "int64"})]
    for N, K in ((MLP, HIDDEN), (HIDDEN, MLP)):
        for m in rows:
            s = ("gemm_nt", tune.spec_for("", N, K, "bfloat16", "col", m))
            if s not in out:
                out.append(s)
    return out


#: where ``build`` puts the tvm-ffi launcher
TVM_FFI_DIR = os.path.join(ROOT, ".carry", "tvm_ffi")
#: the rmsnorm kernel's launch as a C++ function exported through TVM's FFI: its parameters (W_, X_,
#: Y_, M, eps) from three DLPack tensors and two scalars, then cuLaunchKernel (looked up in libcuda)
TVM_FFI_LAUNCHER = r"""
#include <dlfcn.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/function.h>

typedef int (*LaunchFn)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                        void**);

static LaunchFn driver_launch() {
  static LaunchFn fn = [] {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    return lib ? reinterpret_cast<LaunchFn>(dlsym(lib, "cuLaunchKernel")) : nullptr;
  }();
  return fn;
}

void launch_rows(int64_t func, tvm::ffi::TensorView x, tvm::ffi::TensorView w, tvm::ffi::TensorView y, int64_t m,
                 double eps, int64_t stream) {
  void* px = static_cast<char*>(x.data_ptr()) + x.byte_offset();
  void* pw = static_cast<char*>(w.data_ptr()) + w.byte_offset();
  void* py = static_cast<char*>(y.data_ptr()) + y.byte_offset();
  int mi = static_cast<int>(m);
  float e = static_cast<float>(eps);
  void* params[5] = {&pw, &px, &py, &mi, &e};
  LaunchFn fn = driver_launch();
  TVM_FFI_ICHECK(fn != nullptr) << "libcuda.so.1 has no cuLaunchKernel";
  int err = fn(reinterpret_cast<void*>(func), mi, 1, 1, 128, 1, 1, 0, reinterpret_cast<void*>(stream), params, nullptr);
  TVM_FFI_ICHECK(err == 0) << "cuLaunchKernel failed: " << err;
}

TVM_FFI_DLL_EXPORT_TYPED_FUNC(launch_rows, launch_rows);
"""


def build_tvm_ffi_launcher() -> str | None:
    """:data:`TVM_FFI_LAUNCHER` compiled into :data:`TVM_FFI_DIR` (None where tvm_ffi is absent)."""
    try:
        import tvm_ffi.cpp
    except ImportError:
        return None
    os.makedirs(TVM_FFI_DIR, exist_ok=True)
    src = os.path.join(TVM_FFI_DIR, "launch_rows.cc")
    with open(src, "w") as f:
        f.write(TVM_FFI_LAUNCHER)
    return tvm_ffi.cpp.build("axe_launch_rows", cpp_files=[src], build_directory=os.path.join(TVM_FFI_DIR, "build"),
                             extra_ldflags=["-ldl"])


def build(args) -> int:
    """Every artifact of :func:`specs` into ``args.cache`` (TVM + nvcc here), and the tvm-ffi
    launcher of ``run --launchers``."""
    from axe.torch import ops
    failed = ops.prebuild(specs(), args.cache, TARGET)
    print(f"tvm-ffi launcher: {build_tvm_ffi_launcher() or 'not built (no tvm_ffi here)'}")
    return 1 if failed else 0


# --- the GPU side ---------------------------------------------------------------------------------

def rope_cache(torch, positions=4096, base=500000.0, dev="cuda"):
    """Llama-3's ``cos_sin_cache`` (positions, head size): cos of each angle in its first half, sin
    in its second (vLLM's layout), bf16 on ``dev``."""
    inv = 1.0 / (base ** (torch.arange(0, HS, 2, device=dev, dtype=torch.float32) / HS))
    ang = torch.arange(positions, device=dev, dtype=torch.float32)[:, None] * inv[None]
    return torch.cat([ang.cos(), ang.sin()], -1).to(torch.bfloat16)


def rope_torch(torch, positions, q, k, cache):
    """NeoX rotary embedding of ``q`` and ``k`` (tokens, heads·HS) in place, written with torch ops
    (what a model without a custom kernel runs); returns ``(q, k)``."""
    cos, sin = cache[positions].chunk(2, -1)
    cos, sin = cos[:, None], sin[:, None]
    for t in (q, k):
        v = t.view(t.shape[0], -1, HS)
        a, b = v[..., :HS // 2], v[..., HS // 2:]
        v.copy_(torch.cat([a * cos - b * sin, b * cos + a * sin], -1))
    return q, k


def cases(torch, m: int, axe=None, dev="cuda") -> dict:
    """``{op: (axe call, torch call)}`` at ``m`` rows (tokens), Llama-3.1-8B sizes, on ``dev``; the axe
    ops are ``axe``'s (default ``torch.ops.axe``; :class:`PythonPath`).  Each call returns what it
    computed (the in-place ones their tensors), so the check compares like with like."""
    F = torch.nn.functional
    bf = torch.bfloat16
    axe = axe or torch.ops.axe
    g = torch.Generator(device=dev).manual_seed(m)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, dtype=bf, device=dev, generator=g) * scale

    x, w = rnd(m, HIDDEN), rnd(HIDDEN) * 0.1 + 1
    xs = {k: x.clone() for k in ("axe", "torch")}
    rs = {k: rnd(m, HIDDEN) if k == "axe" else None for k in ("axe", "torch")}
    rs["torch"] = rs["axe"].clone()
    gu = rnd(m, 2 * MLP)
    pos = torch.randint(0, 4096, (m,), device=dev, generator=g)
    rope = rope_cache(torch, dev=dev)
    qk = {k: (rnd(m, HQ * HS), rnd(m, HK * HS)) for k in ("axe",)}
    qk["torch"] = tuple(t.clone() for t in qk["axe"])
    up, down = rnd(MLP, HIDDEN, scale=HIDDEN ** -0.5), rnd(HIDDEN, MLP, scale=MLP ** -0.5)
    act = rnd(m, MLP)

    def add_rms_torch():
        x_, r_ = xs["torch"], rs["torch"]
        r_.add_(x_)
        x_.copy_(F.rms_norm(r_, (HIDDEN,), w, EPS))
        return x_, r_

    def add_rms_axe():
        axe.fused_add_rmsnorm(xs["axe"], rs["axe"], w, EPS)
        return xs["axe"], rs["axe"]

    def rope_ref():
        return rope_torch(torch, pos, *qk["torch"], rope)

    def rope_axe():
        q, k = qk["axe"]
        axe.rotary_embedding(pos, q, k, HS, rope, True)
        return q, k

    return {
        "rmsnorm": (lambda: axe.rmsnorm(x, w, EPS), lambda: F.rms_norm(x, (HIDDEN,), w, EPS)),
        "fused_add_rmsnorm": (add_rms_axe, add_rms_torch),
        "softmax": (lambda: axe.softmax(x), lambda: torch.softmax(x, -1)),
        "silu_and_mul": (lambda: axe.silu_and_mul(gu), lambda: F.silu(gu[:, :MLP]) * gu[:, MLP:]),
        "rotary_embedding": (rope_axe, rope_ref),
        "gemm_up": (lambda: axe.gemm(x, up, True), lambda: torch.matmul(x, up.t())),
        "gemm_down": (lambda: axe.gemm(act, down, True), lambda: torch.matmul(act, down.t())),
    }


class PythonPath:
    """The ops as the Python path runs them where the compiled launcher takes them: their checked
    Python implementations with the Python plans (``torch.ops.axe_checked.<op>``, what the compiled
    launcher's misses call); the ops it does not take, as they are."""

    def __init__(self, torch):
        from axe.torch import ops
        self.torch, self.compiled = torch, set(ops.launcher()["compiled"])

    def __getattr__(self, name):            # looked up once: the timing loop reads an attribute
        op = getattr(self.torch.ops.axe_checked if name in self.compiled else self.torch.ops.axe, name)
        setattr(self, name, op)
        return op


def check(torch, name, axe_fn, torch_fn, tol=3e-2, again=None) -> float:
    """Both sides once on the same inputs; the largest difference relative to the largest torch
    value (an in-place pair starts from equal copies); AssertionError past ``tol``.  ``again``: the
    same axe call on fresh copies of the same inputs (another :func:`cases`), made after the first:
    it takes the signature's plan in the compiled launcher, and must give the first (checked)
    call's results exactly (the row kernels are deterministic)."""
    got, want = axe_fn(), torch_fn()
    if again is not None:
        planned = again()
        for a, b in zip(planned if isinstance(planned, tuple) else (planned,), got if isinstance(got, tuple) else (got,)):
            assert torch.equal(a, b), f"{name}: the compiled launcher's call differs from the checked one"
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    err = 0.0
    for a, b in zip(got, want):
        assert a.shape == b.shape, f"{name}: axe gives shape {tuple(a.shape)}, torch {tuple(b.shape)}"
        assert not a.isnan().any(), f"{name}: NaN in axe's output"
        err = max(err, ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6)).item())
    assert err < tol, f"{name}: max error {err:.2e} (relative to the largest value) exceeds {tol}"
    return err


def host_us(torch, fn, calls: int, rounds: int) -> float:
    """Median over ``rounds`` of the wall µs per call of ``calls`` back-to-back ``fn()``; the stream
    is drained before each round, outside the timing."""
    for _ in range(5):
        fn()
    per = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t) / calls * 1e6)
    torch.cuda.synchronize()
    return sorted(per)[len(per) // 2]


def gpu_us(torch, fn, calls: int, reps: int) -> float:
    """µs per call of ``calls`` calls captured into one CUDA graph, replayed (no host work between
    the kernels)."""
    from axe.torch.timing import capture, graph_ms

    def many():
        for _ in range(calls):
            out = fn()
        return out
    graph, _ = capture(torch, many)
    return graph_ms(torch, graph, reps) * 1e3 / calls


def launchers(torch, calls: int, rounds: int) -> dict:
    """Host µs of one launch of the rmsnorm kernel (M = 1) by each candidate mechanism (see the
    module docstring); a candidate that cannot run here says why."""
    import ctypes
    import functools

    import numpy as np

    from axe.torch import ops
    x = torch.randn(1, HIDDEN, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(1, HIDDEN, dtype=torch.bfloat16, device="cuda")
    y = torch.empty_like(x)
    jk = ops.KERNELS["rmsnorm"]
    plan = jk.plan(x, w, y, EPS)
    kernel = jk._memo[(x.device, *jk.spec(x, w, y, EPS).items())]
    ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr())
    stream = torch.cuda.current_stream().cuda_stream
    d = kernel.driver
    (gx, gy, gz), (bx, by, bz) = plan.grid, plan.block
    bare = functools.partial(d.cuLaunchKernel, plan.func, gx, gy, gz, bx, by, bz, plan.smem)
    python, w1 = PythonPath(torch), w[0]
    rms, empty_like = torch.ops.axe.rmsnorm, torch.ops.aten.empty_like.default
    out = {
        "torch.ops.axe.rmsnorm (default path: " + ops.launcher()["path"] + ")": lambda: rms(x, w1, EPS),
        "torch.ops.axe.rmsnorm, Python plan (torch.ops.axe_checked)": lambda: python.rmsnorm(x, w1, EPS),
        "torch.ops.aten.empty_like.default (any op through torch.ops)": lambda: empty_like(x),
        "axe LaunchPlan (pointers checked, cuda.bindings)": lambda: plan(ptrs, stream),
        "cuda.bindings cuLaunchKernel, pre-packed void*[]": lambda: bare(stream, plan.array, 0),
        "runtime Kernel(*tensors) (signature memo)": lambda: kernel(x, w, y, EPS, stream=stream),
        "torch.empty_like (for scale)": lambda: torch.empty_like(x),
    }
    lib = ctypes.CDLL("libcuda.so.1")
    raw = lib.cuLaunchKernel
    raw.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    raw.restype = ctypes.c_int
    fn = int(plan.func)
    out["ctypes libcuda cuLaunchKernel, pre-packed void*[]"] = lambda: raw(fn, gx, gy, gz, bx, by, bz, plan.smem,
                                                                            stream, plan.array, None)
    res = {}
    try:
        from cuda.core import LaunchConfig, ObjectCode, Stream, launch
        k = ObjectCode.from_cubin(kernel.artifact.cubin).get_kernel(kernel.launch["kernel"])
        cfg = LaunchConfig(grid=plan.grid, block=plan.block, shmem_size=plan.smem)
        cs = Stream.from_handle(stream)
        by_name = {"X_": ptrs[0], "W_": ptrs[1], "Y_": ptrs[2]}
        params = [by_name[p["arg"]] if p["kind"] == "tensor" else np.int32(1) if p["dtype"] == "int32" else np.float32(EPS)
                  for p in kernel.launch["params"]]
        launch(cs, cfg, k, *params)
        torch.cuda.synchronize()
        out["cuda.core launch"] = lambda: launch(cs, cfg, k, *params)
    except Exception as e:  # noqa: BLE001 - a missing or different cuda.core is a result too
        res["cuda.core launch"] = f"not run: {type(e).__name__}: {e}"
    so = os.path.join(TVM_FFI_DIR, "build", "axe_launch_rows.so")
    try:
        import tvm_ffi
        launch_rows = tvm_ffi.load_module(so)["launch_rows"]
        launch_rows(fn, x, w, y, 1, EPS, stream)
        torch.cuda.synchronize()
        out["tvm-ffi compiled launcher (3 torch tensors)"] = lambda: launch_rows(fn, x, w, y, 1, EPS, stream)
    except Exception as e:  # noqa: BLE001 - as above
        res["tvm-ffi compiled launcher (3 torch tensors)"] = f"not run: {type(e).__name__}: {e}"
    for name, fn_ in out.items():
        try:
            res[name] = round(host_us(torch, fn_, calls, rounds), 2)
        except Exception as e:  # noqa: BLE001 - as above
            res[name] = f"failed: {type(e).__name__}: {e}"
    return res


#: ``cuLaunchKernel`` that launches nothing and succeeds, and ``cuTensorMapReplaceAddress`` that
#: writes the address where :class:`NoopDriver` encodes it (``cpu``'s driver for the compiled launcher)
NOOP_LAUNCH = 'extern "C" int noop_launch(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, ' \
              'void*, void**, void**) { return 0; }\n' \
              'extern "C" int noop_replace(void* map, void* address) { *(void**)map = address; return 0; }\n'


class NoopDriver:
    """``cuda.bindings.driver`` as far as loading and launching a plain kernel go, every call
    returning success at once (``cpu``'s driver for the Python plans)."""

    class CUresult:
        CUDA_SUCCESS, CUDA_ERROR_INVALID_CONTEXT = 0, 201

    class CUfunction_attribute:
        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    @staticmethod
    def cuModuleLoadData(cubin):
        return 0, 1

    @staticmethod
    def cuModuleGetFunction(module, name):
        return 0, 2

    @staticmethod
    def cuFuncSetAttribute(*args):
        return (0,)

    @staticmethod
    def cuLaunchKernel(*args):
        return (0,)

    @staticmethod
    def cuModuleGetGlobal(module, name):
        return 500, None, None          # CUDA_ERROR_NOT_FOUND: no bounded-wait report (nothing runs)

    class _Names:
        def __getattr__(self, name):
            return name

    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = CUtensorMapL2promotion = \
        CUtensorMapFloatOOBfill = _Names()
    cuuint64_t = cuuint32_t = int

    class _Map:
        """128 bytes, the address first (what :data:`NOOP_LAUNCH`'s replacement rewrites)."""

        def __init__(self, ptr):
            import ctypes
            self.buf = ctypes.create_string_buffer(int(ptr).to_bytes(8, "little"), 128)

        def getPtr(self):
            import ctypes
            return ctypes.addressof(self.buf)

    @classmethod
    def cuTensorMapEncodeTiled(cls, dtype, rank, ptr, *rest):
        return 0, cls._Map(ptr)

    @staticmethod
    def cuTensorMapReplaceAddress(tmap, ptr):
        import ctypes
        ctypes.memmove(tmap.getPtr(), int(ptr).to_bytes(8, "little"), 8)
        return (0,)


def cpu(args) -> int:
    """Host µs per call of the ops on CPU tensors (M = 1) through :class:`NoopDriver` and
    :data:`NOOP_LAUNCH`: the compiled launcher, the Python plans, the checked path (see the module
    docstring); thread time, the best of ``--rounds`` rounds of ``--calls`` calls."""
    import ctypes
    import subprocess
    import tempfile

    sys.modules["tvm"] = None          # read the cache as a machine without TVM: any source state's entries
    os.environ["AXE_CACHE_DIR"] = args.cache
    import torch

    from axe.backends.cuda.artifact import Artifact
    from axe.runtime import launcher
    from axe.torch import ops
    launcher.Kernel.device_type = "cpu"
    launcher._ensure_context = lambda driver, index: None
    for jk in ops.KERNELS.values():
        jk.target, jk.progress = TARGET, False
        jk.loader = lambda path: launcher.Kernel(Artifact.load(path), driver=NoopDriver())
    path = ops.launcher()
    if path["path"] == "compiled":
        tmp = tempfile.mkdtemp()
        src, so = os.path.join(tmp, "noop.cc"), os.path.join(tmp, "noop.so")
        with open(src, "w") as f:
            f.write(NOOP_LAUNCH)
        subprocess.run([os.environ.get("CXX") or "c++", "-O2", "-shared", "-fPIC", src, "-o", so], check=True)
        noop = ctypes.CDLL(so)
        ops._LAUNCHER.set_launch(ctypes.cast(noop.noop_launch, ctypes.c_void_p).value,
                                 ctypes.cast(noop.noop_replace, ctypes.c_void_p).value)
    paths = {"compiled": cases(torch, 1, dev="cpu")} if path["path"] == "compiled" else {}
    paths["python"] = cases(torch, 1, PythonPath(torch) if path["path"] == "compiled" else None, dev="cpu")
    rows = []
    for name in paths["python"]:
        if args.ops and name not in args.ops:
            continue
        row = {"op": name, "M": 1}
        for label, table in (*paths.items(), ("checked", paths["python"])):
            ops.FAST_PATH = label != "checked"
            fn = table[name][0]
            try:
                for _ in range(100):
                    fn()
                best = float("inf")
                for _ in range(args.rounds):
                    t = time.thread_time()
                    for _ in range(args.calls):
                        fn()
                    best = min(best, (time.thread_time() - t) / args.calls * 1e6)
                row[f"{label}_host_us"] = round(best, 2)
            except Exception as e:  # noqa: BLE001 - every row is reported
                row[f"{label}_error"] = f"{type(e).__name__}: {e}"
            finally:
                ops.FAST_PATH = True
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"benchmark": "torch_ops_cpu", "date": __import__("datetime").date.today().isoformat(),
              "device": "cpu (no-op driver)", "torch": torch.__version__, "axe_launch_path": path,
              "calls": args.calls, "rounds": args.rounds, "rows": rows}
    if ops._LAUNCHER is not None:      # did the library launch, or why not
        result["axe_launch_counts"] = ops._LAUNCHER.counts()
        print("compiled launcher:", result["axe_launch_counts"])
    if args.json:
        write(result, args.json)
    return 0


def run(args) -> int:
    import datetime
    import importlib.util

    os.environ["AXE_CACHE_DIR"] = args.cache
    import torch

    from axe.torch import ops
    from dist_bench import versions
    if importlib.util.find_spec("tvm") is None:
        print("TVM is not installed here: every artifact comes from", args.cache)
    rows, failed = [], 0
    path = ops.launcher() if hasattr(ops, "launcher") else {"path": "python", "why": "a tree before the compiled launcher"}
    print(f"launch path: {path['path']} ({path['why']})")
    for m in args.rows:
        python = cases(torch, m, PythonPath(torch)) if path["path"] == "compiled" else {}
        again = cases(torch, m) if path["path"] == "compiled" else {}
        for name, (axe_fn, torch_fn) in cases(torch, m).items():
            if args.ops and name not in args.ops:
                continue
            row = {"op": name, "M": m}
            try:
                fresh = again[name][0] if name in path.get("compiled", ()) else None
                row["max_rel_err"] = round(check(torch, name, axe_fn, torch_fn, again=fresh), 5)
                row["axe_host_us"] = round(host_us(torch, axe_fn, args.calls, args.rounds), 2)
                row["torch_host_us"] = round(host_us(torch, torch_fn, args.calls, args.rounds), 2)
                if name in python:
                    row["axe_python_host_us"] = round(host_us(torch, python[name][0], args.calls, args.rounds), 2)
                if hasattr(ops, "FAST_PATH"):      # an older tree (--axe) has only the checked path
                    ops.FAST_PATH = False
                    try:
                        row["axe_checked_host_us"] = round(host_us(torch, axe_fn, args.calls, args.rounds), 2)
                    finally:
                        ops.FAST_PATH = True
                row["axe_gpu_us"] = round(gpu_us(torch, axe_fn, args.graph_calls, args.reps), 2)
                row["torch_gpu_us"] = round(gpu_us(torch, torch_fn, args.graph_calls, args.reps), 2)
            except Exception as e:  # noqa: BLE001 - every row is reported
                failed += 1
                row["error"] = f"{type(e).__name__}: {e}"
            rows.append(row)
            print(table_line(row), flush=True)
    import axe
    result = {"benchmark": "torch_ops", "date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(),
              "axe_tree": os.path.dirname(os.path.dirname(os.path.abspath(axe.__file__))),
              "versions": versions(), "axe_launch_path": path, "calls": args.calls, "rounds": args.rounds,
              "graph_calls": args.graph_calls, "rows": rows}
    if args.launchers and hasattr(ops, "FAST_PATH"):
        result["launchers_host_us"] = launchers(torch, args.calls, args.rounds)
        print("one launch of the rmsnorm kernel, M = 1, host us:")
        for k, v in result["launchers_host_us"].items():
            print(f"  {k:55s} {v}")
    if getattr(ops, "_LAUNCHER", None) is not None:      # did the library launch, or why not
        result["axe_launch_counts"] = ops._LAUNCHER.counts()
        print("compiled launcher:", result["axe_launch_counts"])
    write(result, args.json)
    return 1 if failed else 0


def write(result: dict, path=None) -> str:
    """``result`` (with its ``benchmark`` and ``date``) as JSON at ``path``, by default
    ``<benchmark>-<date>-<device>.json`` under ``$OUT`` (else ``benchmarks/results``)."""
    from dist_bench import device_tag
    path = path or os.path.join(os.environ.get("OUT", os.path.join(ROOT, "benchmarks", "results")),
                                f"{result['benchmark']}-{result['date']}-{device_tag()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {path}")
    return path


HEAD = (f"{'op':18s} {'M':>5s} {'axe host':>9s} {'torch host':>10s} {'ratio':>6s} {'python':>7s} {'checked':>8s} "
        f"{'axe gpu':>8s} {'torch gpu':>9s}  (us)")


def table_line(row) -> str:
    """One row of the readable table (the header is :data:`HEAD`)."""
    if "error" in row:
        return f"{row['op']:18s} {row['M']:5d} FAILED {row['error']}"
    ratio = row["axe_host_us"] / row["torch_host_us"]
    checked, python = row.get("axe_checked_host_us"), row.get("axe_python_host_us")
    return (f"{row['op']:18s} {row['M']:5d} {row['axe_host_us']:9.1f} {row['torch_host_us']:10.1f} {ratio:6.2f} "
            f"{'-' if python is None else format(python, '7.1f'):>7s} "
            f"{'-' if checked is None else format(checked, '8.1f'):>8s} {row['axe_gpu_us']:8.1f} {row['torch_gpu_us']:9.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("build", "run", "cpu", "table"))
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    ap.add_argument("--ops", nargs="+", help="only these ops (default: all)")
    ap.add_argument("--calls", type=int, default=100, help="calls per timed round (host µs)")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--graph-calls", type=int, default=20, help="calls captured per CUDA graph (GPU µs)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--launchers", action="store_true", help="also time the launch mechanisms (see the docstring)")
    ap.add_argument("--json", help="output path (default $OUT or benchmarks/results, torch_ops-DATE-DEVICE.json)")
    ap.add_argument("--axe", help="import axe from this folder instead (an older tree, for a before/after in one "
                                  "session; give it this tree's kernels/ so the cache keys agree)")
    ap.add_argument("file", nargs="?", help="table: the JSON to print")
    args = ap.parse_args(argv)
    if args.axe:
        sys.path.insert(0, os.path.abspath(args.axe))
    if args.what == "table":
        rows = json.load(open(args.file))["rows"]
        print(HEAD)
        print("\n".join(table_line(r) for r in rows))
        return 0
    if args.what == "run":
        print(HEAD)
    return {"build": build, "run": run, "cpu": cpu}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
