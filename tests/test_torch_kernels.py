"""Dynamic-M builds of the memory-bound kernels (``kernels/rmsnorm.py``, ``kernels/softmax.py``):
one artifact for every number of rows — the grid and the tensors' row count are the runtime
symbol ``M`` read off ``X`` — with the static build's schedules and instructions."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.artifact import eval_expr  # noqa: E402
from kernels import rmsnorm, softmax  # noqa: E402

CASES = [(rmsnorm, 1024, "float16", ["ld.global.v4", "st.global.v4", "shfl.sync.bfly", "bar.sync"]),
         (softmax, 2048, "bfloat16", ["ld.global.v4", "st.global.v4", "shfl.sync.bfly", "max.ftz.f32", "ex2.approx"])]


@pytest.mark.parametrize("module,n,dtype,promised", CASES, ids=["rmsnorm", "softmax"])
def test_dynamic_m_build(module, n, dtype, promised):
    art = Ax.compile_kernel(module.dynamic(n, dtype), "sm_90a")
    L = art.launch
    assert L["symbols"] == {"M": {"arg": "X_", "dim": 0}} and L["shape_vars"] == {"M": "int32"}
    tensors = {a["name"]: a for a in L["args"] if a["kind"] == "tensor"}
    assert tensors["X_"]["shape"] == ["M", n] and tensors["Y_"]["shape"] == ["M", n]
    assert all(a["dtype"] == dtype and a["alignment"] == 16 for a in tensors.values())
    for m in (1, 7, 4096):                     # the grid is one CTA per row, whatever M is
        assert [eval_expr(g, {"M": m}) for g in L["grid"]] == [m, 1, 1]
    assert L["block"] == [128, 1, 1]
    static = Ax.kernels_of(module)[module.__name__.rsplit(".", 1)[1]]
    _, ctx = Ax.build_func(static, "sm_90a")   # the same schedules as the static build
    assert [r.chosen for r in art.records] == [r.chosen for r in ctx.records]
    missing = [ins for ins in promised if ins not in art.ptx]
    assert not missing, f"{art.name}: PTX lacks {missing}"
    # 16-byte vectors: n/8 chunks per row, n/1024 per thread, for the load of X and the store of Y
    assert art.ptx.count("ld.global.v4") >= n // 1024 and art.ptx.count("st.global.v4") >= n // 1024
    assert art.launch["resources"].get("spill_stores", 0) == 0


def test_rmsnorm_eps_is_a_runtime_scalar():
    func, _ = Ax.build_func(rmsnorm.dynamic(1024, "float16"), "sm_90a")
    assert [str(p.name) for p in func.params][-1] == "eps"


@pytest.mark.parametrize("bad", [1004, 0, 12])
def test_row_length_refused(bad):
    for module in (rmsnorm, softmax):
        with pytest.raises(ValueError, match=f"n={bad} must be a positive multiple of 8"):
            module.dynamic(bad, "float16")
    with pytest.raises(ValueError, match="dtype 'float32'"):
        softmax.dynamic(1024, "float32")
