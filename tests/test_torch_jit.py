"""axe kernels as PyTorch functions on the CPU: the jit wrapper (axe/torch/jit.py) and the
torch.library ops (axe/torch/ops.py) with a CPU stand-in for the launcher that binds the
arguments with the runtime's own ``bind_arguments`` and computes the outputs with torch.

The rmsnorm/softmax artifacts are real builds (TVM + nvcc, once per module); the GEMM's are
stand-ins with its call signature (a real GEMM build takes minutes)."""

import time

import pytest
import torch

from axe.backends.cuda.artifact import Artifact
from axe.runtime.launcher import bind_arguments
from axe.torch import jit as jit_mod
from axe.torch.cache import ArtifactCache
from axe.torch.jit import JitKernel, target_of
from test_torch_cache import fake_artifact


def _rmsnorm_ref(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


#: what each artifact computes, by kernel name, from the bound arguments
REFS = {
    "rows_dyn": lambda t, env: t["Y_"].copy_(t["X_"] * 2),
    "rmsnorm_dyn": lambda t, env: t["Y_"].copy_(_rmsnorm_ref(t["X_"], t["W_"], env["eps"])),
    "softmax_dyn": lambda t, env: t["Y_"].copy_(torch.softmax(t["X_"].float(), -1).to(t["X_"].dtype)),
    "gemm_row": lambda t, env: t["C_"].copy_((t["A_"].float() @ t["B_"].float()).to(t["C_"].dtype)),
    "gemm_col": lambda t, env: t["C_"].copy_((t["A_"].float() @ t["B_"].float().T).to(t["C_"].dtype)),
}


class CpuLaunch:
    """Stands in for :class:`axe.runtime.Kernel` on the CPU: loads the artifact, checks every
    call with the runtime's ``bind_arguments`` (device type cpu) and computes with torch."""

    loads = []

    def __init__(self, path):
        self.launch = Artifact.load(path).launch
        CpuLaunch.loads.append(path)
        self.grids = []

    def __call__(self, *args, stream=None):
        b = bind_arguments(self.launch, args, device_type="cpu")
        self.grids.append(b.grid)
        REFS[self.launch["name"]](b.tensors, b.env)
        return b


class FakeBuild(JitKernel):
    """A jit kernel whose builds are stand-in artifacts (no TVM): ``make(spec)`` gives one."""

    def __init__(self, make, *a, **kw):
        super().__init__(*a, **kw)
        self.make = make

    def _build(self, target, spec):
        self.builds += 1
        return self.make(**spec)


def _rows_kernel(tmp_path, **kw):
    return FakeBuild(lambda n, dtype: fake_artifact(n=n, dtype=dtype), "kernels.softmax:dynamic",
                     lambda X, Y: {"n": int(X.shape[1]), "dtype": str(X.dtype)[6:]},
                     path=jit_mod.__file__.rsplit("/axe/", 1)[0], cache=ArtifactCache(tmp_path, shipped=[]),
                     loader=CpuLaunch, target="sm_90a", progress=False, **kw)


def test_first_call_builds_later_calls_hit(tmp_path):
    CpuLaunch.loads.clear()
    jk = _rows_kernel(tmp_path)
    for m in (3, 5, 0, 8):                       # one artifact serves every row count
        x = torch.randn(m, 1024, dtype=torch.float16)
        y = torch.zeros_like(x)
        b = jk(x, y)
        assert torch.equal(y, x * 2) and b.grid == (m, 1, 1)
    assert jk.builds == 1 and len(CpuLaunch.loads) == 1
    x = torch.randn(2, 2048, dtype=torch.float16)
    jk(x, torch.zeros_like(x))                   # another specialization: another build
    assert jk.builds == 2 and len(CpuLaunch.loads) == 2
    later = _rows_kernel(tmp_path)               # a later process: the disk cache serves both
    later(x, torch.zeros_like(x))
    assert later.builds == 0 and CpuLaunch.loads[-1] == CpuLaunch.loads[-2]


def test_bookkeeping_per_call_is_small(tmp_path):
    """The jit's own cost per call (spec, device, memo lookup) beside a launcher that does
    nothing; the GPU run (tests/gpu/run_torch.py) measures the real launch."""
    jk = _rows_kernel(tmp_path)
    x = torch.randn(4, 1024, dtype=torch.float16)
    y = torch.zeros_like(x)
    jk(x, y)
    jk.clear()

    def noop(*args, stream=None):
        return None
    jk.loader = lambda path: noop
    jk(x, y)
    n = 20000
    t = time.perf_counter()
    for _ in range(n):
        noop(x, y)
    bare = time.perf_counter() - t
    t = time.perf_counter()
    for _ in range(n):
        jk(x, y)
    wrapped = time.perf_counter() - t
    per_call = (wrapped - bare) / n
    print(f"jit bookkeeping: {per_call * 1e6:.2f} us per call")
    assert per_call < 20e-6, f"jit bookkeeping {per_call * 1e6:.1f} us per call"


def test_target_from_compute_capability(monkeypatch):
    for cap, want in (((9, 0), "sm_90a"), ((10, 0), "sm_100a")):
        monkeypatch.setattr(jit_mod, "_TARGET_OF", {})
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i, c=cap: c)
        assert target_of(torch.device("cuda", 0)) == want
    monkeypatch.setattr(jit_mod, "_TARGET_OF", {})
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i: (8, 0))
    with pytest.raises(RuntimeError, match=r"cuda:0 has compute capability 8\.0"):
        target_of(torch.device("cuda", 0))


# --- the ops ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """axe.torch.ops with its rmsnorm/softmax kernels building for real (TVM) into a fresh
    cache, launched by CpuLaunch; the GEMM with stand-in artifacts."""
    pytest.importorskip("tvm")
    from axe.torch import ops
    cache = ArtifactCache(tmp_path_factory.mktemp("cache"), shipped=[])
    saved = dict(ops.KERNELS)
    for name in ("rmsnorm", "softmax"):
        k = ops.KERNELS[name]
        ops.KERNELS[name] = JitKernel(k.kernel, k.spec, path=k.path, cache=cache, loader=CpuLaunch,
                                      target="sm_90a", progress=False)
    for name, major in (("gemm", "row"), ("gemm_nt", "col")):
        k = ops.KERNELS[name]
        ops.KERNELS[name] = FakeBuild(lambda major=major, **s: _gemm_artifact(major=major, **s), k.kernel, k.spec,
                                      path=k.path, cache=cache, loader=CpuLaunch, target="sm_90a", progress=False)
    yield ops
    ops.KERNELS.update(saved)


def _gemm_artifact(N, K, dtype, b_major, major, max_rows=None, **config):
    """A stand-in with the dynamic-M GEMM's call signature ``(A_: MxK, B_: KxN or NxK, C_: MxN)``,
    M read off A (at most ``max_rows``) and the grid ``min(132, tiles)`` as in
    ``kernels/gemm.py:make_dynamic``."""
    art = fake_artifact(name=f"gemm_{major}", dtype=dtype)
    L = art.launch
    shapes = {"A_": ["M", K], "B_": [K, N] if b_major == "row" else [N, K], "C_": ["M", N]}
    L["args"] = [{"name": n, "kind": "tensor", "dtype": dtype, "shape": s, "strides": None, "alignment": 16}
                 for n, s in shapes.items()]
    L["params"] = [dict(a, arg=a["name"]) for a in L["args"]]
    L["symbols"], L["shape_vars"] = {"M": {"arg": "A_", "dim": 0}}, {"M": "int32"}
    if max_rows is not None:
        L["symbols"]["M"]["max"] = max_rows
    L["grid"] = [f"min(132, ((M + 127) // 128) * {-(-N // 256)})", 1, 1]
    return art


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_softmax_ops_every_row_count(ops, dtype):
    w = torch.randn(1024, dtype=dtype)
    for shape in ((1, 1024), (7, 1024), (3, 5, 1024), (0, 1024)):
        x = torch.randn(shape, dtype=dtype)
        y = torch.ops.axe.rmsnorm(x, w, 1e-5)
        assert y.shape == x.shape and y.dtype == dtype
        torch.testing.assert_close(y, _rmsnorm_ref(x, w, 1e-5))
        s = torch.ops.axe.softmax(x)
        torch.testing.assert_close(s, torch.softmax(x.float(), -1).to(dtype))
    for name in ("rmsnorm", "softmax"):
        mine = [k for m, k in ops.KERNELS[name]._memo.items() if dict(m[1:])["dtype"] == str(dtype)[6:]]
        assert len(mine) == 1                            # one artifact for every row count
        assert [g[0] for g in mine[0].grids[-4:]] == [1, 7, 15, 0]   # grid = rows ((3, 5, 1024): 15)


def test_ops_copy_unaligned_and_strided_inputs(ops):
    base = torch.randn(4 * 1024 + 8, dtype=torch.float16)
    x = base[8:].view(4, 1024)                   # 16-byte aligned? 8 halves = 16 bytes: yes
    x2 = base[1:4 * 1024 + 1].view(4, 1024)      # 2 bytes off: copied first
    xt = torch.randn(1024, 4, dtype=torch.float16).t()   # not contiguous: copied first
    for v in (x, x2, xt):
        torch.testing.assert_close(torch.ops.axe.softmax(v), torch.softmax(v.float(), -1).half())


def test_ops_refuse_with_names(ops):
    x = torch.randn(4, 1004, dtype=torch.float16)
    with pytest.raises(ValueError, match="last dimension of x is 1004; the axe kernel needs a positive multiple of 8"):
        torch.ops.axe.softmax(x)
    with pytest.raises(ValueError, match=r"weight has shape \(512,\), expected \(1024,\)"):
        torch.ops.axe.rmsnorm(torch.randn(2, 1024, dtype=torch.float16), torch.randn(512, dtype=torch.float16))
    with pytest.raises(TypeError, match="x has dtype torch.float32"):
        torch.ops.axe.softmax(torch.randn(2, 1024))
    with pytest.raises(ValueError, match="a is 128x64 but b is 32x256: the inner dimensions differ"):
        torch.ops.axe.gemm(torch.randn(128, 64, dtype=torch.float16), torch.randn(32, 256, dtype=torch.float16))


def test_gemm_op(ops):
    a = torch.randn(128, 64, dtype=torch.float16)
    b = torch.randn(64, 256, dtype=torch.float16)
    torch.testing.assert_close(torch.ops.axe.gemm(a, b), (a.float() @ b.float()).half())
    bt = torch.randn(256, 64, dtype=torch.float16)
    torch.testing.assert_close(torch.ops.axe.gemm(a, bt, True), (a.float() @ bt.float().T).half())
    assert ops.KERNELS["gemm"].builds == 1 and ops.KERNELS["gemm_nt"].builds == 1
    (spec,) = [dict(m[1:]) for m in ops.KERNELS["gemm_nt"]._memo]
    from kernels import gemm_select                     # M = 128: the decode bucket's configuration
    assert spec == {"N": 256, "K": 64, "dtype": "float16", "b_major": "col", "max_rows": 128,
                    **gemm_select.heuristic(128, 256, 64)}
    for m in (100, 77):                 # the same bucket: the same artifact, M read at launch
        am = torch.randn(m, 64, dtype=torch.float16)
        torch.testing.assert_close(torch.ops.axe.gemm(am, b), (am.float() @ b.float()).half())
    assert ops.KERNELS["gemm"].builds == 1
    for m in (300, 400):                # the next bucket: one more artifact, the grid from M
        am = torch.randn(m, 64, dtype=torch.float16)
        torch.testing.assert_close(torch.ops.axe.gemm(am, b), (am.float() @ b.float()).half())
    assert ops.KERNELS["gemm"].builds == 2
    am = torch.randn(1, 64, dtype=torch.float16)       # the smallest decode bucket: its own artifact
    torch.testing.assert_close(torch.ops.axe.gemm(am, b), (am.float() @ b.float()).half())
    assert ops.KERNELS["gemm"].builds == 3
    launched = [k for m, k in ops.KERNELS["gemm"]._memo.items() if "max_rows" not in dict(m[1:])]
    assert [g[0] for g in launched[0].grids[-2:]] == [3, 4]
    assert torch.ops.axe.gemm(a[:0], b).shape == (0, 256)


def test_fake_tensors_give_shapes_without_launching(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = {n: len(k._memo) for n, k in ops.KERNELS.items()}
    with FakeTensorMode():
        x = torch.empty(9, 3, 2048, dtype=torch.bfloat16)
        w = torch.empty(2048, dtype=torch.bfloat16)
        y = torch.ops.axe.rmsnorm(x, w)
        s = torch.ops.axe.softmax(x)
        c = torch.ops.axe.gemm(torch.empty(300, 64, dtype=torch.float16), torch.empty(512, 64, dtype=torch.float16), True)
        with pytest.raises(ValueError, match="multiple of 8"):
            torch.ops.axe.softmax(torch.empty(3, 100, dtype=torch.float16))
    assert y.shape == s.shape == (9, 3, 2048) and y.dtype == torch.bfloat16 and c.shape == (300, 512)
    assert {n: len(k._memo) for n, k in ops.KERNELS.items()} == before      # nothing built or launched


def test_opcheck(ops):
    x = torch.randn(5, 1024, dtype=torch.float16)
    w = torch.randn(1024, dtype=torch.float16)
    for op, args in ((torch.ops.axe.rmsnorm.default, (x, w, 1e-6)), (torch.ops.axe.softmax.default, (x,))):
        torch.library.opcheck(op, args, test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))


def test_compile_fullgraph_without_graph_breaks(ops):
    def f(x, w):
        return torch.ops.axe.softmax(torch.ops.axe.rmsnorm(x, w) * 2) + 1

    w = torch.randn(1024, dtype=torch.float16)
    explained = torch._dynamo.explain(f)(torch.randn(6, 1024, dtype=torch.float16), w)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (6, 11, 1):
        x = torch.randn(m, 1024, dtype=torch.float16)
        want = torch.softmax((_rmsnorm_ref(x, w, 1e-6) * 2).float(), -1).half() + 1
        torch.testing.assert_close(compiled(x, w), want)


def test_without_tvm_loads_what_tvm_built(ops, monkeypatch):
    """A machine without TVM (its version unknown) finds the entries built here, builds nothing,
    and names the command for one it lacks."""
    from axe.torch import cache as cache_mod
    torch.ops.axe.softmax(torch.randn(2, 1024, dtype=torch.float16))          # built here, with TVM
    monkeypatch.setattr(cache_mod, "tvm_version", lambda: None)
    k = ops.KERNELS["softmax"]
    bare = JitKernel(k.kernel, k.spec, path=k.path, cache=k.cache, loader=CpuLaunch, target="sm_90a", progress=False)
    bare._build = lambda *a: pytest.fail("built without TVM")
    x = torch.randn(9, 1024, dtype=torch.float16)
    y = torch.empty_like(x)
    bare(x, y)
    torch.testing.assert_close(y, torch.softmax(x.float(), -1).half())
    with pytest.raises(cache_mod.ArtifactMissing, match="axe cache build kernels.softmax:dynamic dtype=float16 n=3072"):
        bare(torch.randn(2, 3072, dtype=torch.float16), torch.empty(2, 3072, dtype=torch.float16))
