"""GPU cases for the kernels written in axe (``kernels/``): build on the CPU machine, check on
the GPU against torch (fresh random inputs, outputs poisoned with NaN before every launch).

The ``*_bench`` artifacts are the same kernels at the sizes ``benchmarks/memory_bound.py``
times; they are checked here too, so the benchmark never times a wrong kernel.
"""

import contextlib
import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: the benchmark sizes: 8192×8192 fp16 transposed (256 MiB moved), 65536×1024 fp16 rows
BENCH_TRANSPOSE = {"M": 8192, "N": 8192}
BENCH_RMSNORM = {"ROWS": 65536}
BENCH_SOFTMAX = {"ROWS": 65536}
#: transpose variants built and checked at both sizes; the benchmark times each
TRANSPOSES = ("transpose", "transpose_one_tile", "transpose_wide", "transpose_vector", "transpose_ldmatrix")


@contextlib.contextmanager
def _sized(module, consts):
    """Parse the kernel with its module's size constants replaced (they are read at parse time)."""
    old = {k: getattr(module, k) for k in consts}
    for k, v in consts.items():
        setattr(module, k, v)
    try:
        yield module
    finally:
        for k, v in old.items():
            setattr(module, k, v)


def _builder(module_name, kernel_name, consts=None):
    def build():
        sys.path.insert(0, ROOT)
        import axe.lang as Ax
        mod = importlib.import_module(module_name)
        with _sized(mod, consts or {}):
            return Ax.compile_kernel(getattr(mod, kernel_name), "sm_90a")
    return build


BUILDS = {
    **{t: _builder("kernels.transpose", t) for t in TRANSPOSES},
    **{f"{t}_bench": _builder("kernels.transpose", t, BENCH_TRANSPOSE) for t in TRANSPOSES},
    "rmsnorm": _builder("kernels.rmsnorm", "rmsnorm"),
    "rmsnorm_bench": _builder("kernels.rmsnorm", "rmsnorm", BENCH_RMSNORM),
    "softmax": _builder("kernels.softmax", "softmax"),
    "softmax_bench": _builder("kernels.softmax", "softmax", BENCH_SOFTMAX),
}


def _shape(kernel, name):
    for a in kernel.launch["args"]:
        if a["name"] in (name, name + "_"):
            return tuple(a["shape"])
    raise KeyError(f"{kernel.launch['name']} has no tensor parameter {name!r}")


def check_transpose(kernel, torch):
    m, n = _shape(kernel, "A")
    for _ in range(3):
        a = torch.randn(m, n, device="cuda", dtype=torch.float16)
        b = torch.full((n, m), float("nan"), device="cuda", dtype=torch.float16)
        kernel(a, b)
        torch.cuda.synchronize()
        bad = (b != a.t()) | b.isnan()
        assert not bad.any(), f"transpose {m}x{n}: {bad.sum().item()} wrong elements, first at {bad.nonzero()[:4].tolist()}"
    return f"{m}x{n} fp16, 3 random runs exact"


def rmsnorm_reference(torch, x, w, eps=1e-6):
    xd = x.double()
    return (xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * w.double())


def check_rmsnorm(kernel, torch):
    rows, n = _shape(kernel, "X")
    worst = 0.0
    for _ in range(3):
        x = torch.randn(rows, n, device="cuda", dtype=torch.float16)
        w = torch.randn(1, n, device="cuda", dtype=torch.float16)
        y = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.float16)
        kernel(x, w, y)
        torch.cuda.synchronize()
        assert not y.isnan().any(), f"rmsnorm: {y.isnan().sum().item()} outputs never written"
        ref = rmsnorm_reference(torch, x, w)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        assert err < 2e-3, f"rmsnorm {rows}x{n}: relative error {err:.2e}"
    return f"{rows}x{n} fp16, 3 random runs, rel err {worst:.1e} vs float64"


def check_softmax(kernel, torch):
    rows, n = _shape(kernel, "X")
    worst = 0.0
    for _ in range(3):
        x = torch.randn(rows, n, device="cuda", dtype=torch.float16) * 4
        y = torch.full((rows, n), float("nan"), device="cuda", dtype=torch.float16)
        kernel(x, y)
        torch.cuda.synchronize()
        assert not y.isnan().any(), f"softmax: {y.isnan().sum().item()} outputs never written"
        ref = torch.softmax(x.double(), dim=-1)
        err = ((y.double() - ref).norm() / ref.norm()).item()
        worst = max(worst, err)
        assert err < 2e-3, f"softmax {rows}x{n}: relative error {err:.2e}"
        sums = y.double().sum(-1)
        assert ((sums - 1).abs() < 1e-2).all(), f"softmax: row sums off by up to {(sums - 1).abs().max().item():.2e}"
    return f"{rows}x{n} fp16 (x ~ 4·N(0,1)), 3 random runs, rel err {worst:.1e} vs float64"


CHECKS = {
    **{t: check_transpose for t in TRANSPOSES},
    **{f"{t}_bench": check_transpose for t in TRANSPOSES},
    "rmsnorm": check_rmsnorm,
    "rmsnorm_bench": check_rmsnorm,
    "softmax": check_softmax,
    "softmax_bench": check_softmax,
}
