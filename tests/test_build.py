"""CPU tests of axe.build (TVM -> nvcc -> Artifact) and of axe.runtime's checks (fake driver)."""

import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "gpu"))

nvcc_missing = shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc")
pytestmark = pytest.mark.skipif(nvcc_missing, reason="nvcc not installed")


@pytest.fixture(scope="module")
def k():
    import _kernels_runtime

    return _kernels_runtime


@pytest.fixture(scope="module")
def built(k):
    from axe.backends.cuda.build import build

    return {
        "vcopy": build(k.vcopy, "sm_90a", name="vcopy"),
        "axpy": build(k.axpy, "sm_90a", name="axpy"),
        "tma_copy": build(k.tma_copy, "sm_90a", name="tma_copy", tensormaps=k.TMA_SPECS),
        "tma_copy_100a": build(k.tma_copy, "sm_100a", name="tma_copy", tensormaps=k.TMA_SPECS),
    }


def test_ptxas_accepts_both_targets_and_ptx_has_the_instructions(built):
    for key, arch in (("tma_copy", "sm_90a"), ("tma_copy_100a", "sm_100a")):
        art = built[key]
        assert art.launch["arch"] == arch
        assert f"Compiling entry function 'tma_copy_kernel' for '{arch}'" in art.log
        assert art.cubin[:4] == b"\x7fELF" and b"tma_copy_kernel" in art.cubin
        assert f".target {arch}" in art.ptx
        assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in art.ptx
        assert "cp.async.bulk.tensor.2d.global.shared::cta" in art.ptx
        assert "mbarrier.try_wait" in art.ptx
        assert "const __grid_constant__ CUtensorMap A_map" in art.cuda_source
    ptx = built["vcopy"].ptx
    assert "ld.global.nc.v4" in ptx and "st.global.v4" in ptx


def test_launch_metadata(built):
    tma = built["tma_copy"].launch
    assert tma["kernel"] == "tma_copy_kernel"
    assert (tma["grid"], tma["block"], tma["dynamic_smem"]) == ([4, 1, 1], [128, 1, 1], 64 * 64 * 2)
    assert [(p["name"], p["kind"]) for p in tma["params"]] == [("A_map", "tensormap"), ("B_map", "tensormap")]
    assert [a["name"] for a in tma["args"]] == ["A", "B"]
    assert tma["tensormaps"][0]["box"] == [64, 64] and tma["tensormaps"][0]["dtype"] == "float16"
    ax = built["axpy"].launch
    assert ax["grid"] == ["M", 1, 1] and ax["block"] == [256, 1, 1] and ax["dynamic_smem"] == 0
    assert ax["symbols"] == {"M": {"arg": "A", "dim": 0}}
    assert [(p["name"], p["kind"]) for p in ax["params"]] == [
        ("A_ptr", "tensor"), ("B_ptr", "tensor"), ("C_ptr", "tensor"), ("M", "scalar"), ("alpha", "scalar"),
    ]
    assert ax["params"][4]["dtype"] == "float32" and ax["params"][0]["alignment"] == 64
    assert [a["name"] for a in ax["args"]] == ["A", "B", "C", "alpha"]


def test_save_load_round_trip_without_tvm(built, tmp_path):
    art = built["axpy"]
    d = art.save(tmp_path / "axpy")
    code = (
        "import json, sys\n"
        "from axe.backends.cuda.artifact import Artifact\n"
        "import axe.runtime\n"
        f"a = Artifact.load({str(d)!r})\n"
        "k = axe.runtime.load(a)\n"
        "print(json.dumps({'tvm': 'tvm' in sys.modules, 'torch': 'torch' in sys.modules,"
        " 'kernel': a.kernel, 'cubin': a.cubin.hex(), 'ptx': a.ptx, 'src': a.cuda_source,"
        " 'launch': a.launch}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    got = json.loads(out.stdout)
    assert got["tvm"] is False and got["torch"] is False
    assert bytes.fromhex(got["cubin"]) == art.cubin and got["ptx"] == art.ptx and got["src"] == art.cuda_source
    launch = dict(got["launch"])
    assert launch.pop("cubin_sha256")
    assert launch == json.loads(json.dumps(art.launch))


def test_load_rejects_tampered_or_foreign_artifacts(built, tmp_path):
    from axe.backends.cuda.artifact import Artifact, ArtifactError

    d = built["vcopy"].save(tmp_path / "v")
    with open(os.path.join(d, "kernel.cubin"), "ab") as f:
        f.write(b"\0")
    with pytest.raises(ArtifactError, match="sha256"):
        Artifact.load(d)
    meta = json.load(open(os.path.join(d, "launch.json")))
    meta["schema"] = "something/else"
    json.dump(meta, open(os.path.join(d, "launch.json"), "w"))
    with pytest.raises(ArtifactError, match="schema"):
        Artifact.load(d)
    with pytest.raises(ArtifactError, match="no launch.json"):
        Artifact.load(tmp_path)


def test_build_errors_name_the_parameter(k):
    from axe.backends.cuda.build import BuildError, build

    with pytest.raises(BuildError, match="'B_map' is a CUtensorMap but no"):
        build(k.tma_copy, "sm_90a", tensormaps=k.TMA_SPECS[:1])
    with pytest.raises(BuildError, match="tensor 'X'"):
        build(k.tma_copy, "sm_90a", tensormaps=[dict(k.TMA_SPECS[0], tensor="X"), k.TMA_SPECS[1]])
    with pytest.raises(BuildError, match="box\\[0\\] = 512"):
        build(k.tma_copy, "sm_90a", tensormaps=[dict(k.TMA_SPECS[0], box=[512, 64]), k.TMA_SPECS[1]])
    with pytest.raises(BuildError, match="arch"):
        build(k.vcopy, {"kind": "cuda"})
    # a name C++ cannot spell is refused before TVM runs, with a spelling it can
    with pytest.raises(BuildError, match="'gemm_Qwen3-8B_up' is not a C identifier.*'gemm_Qwen3_8B_up'"):
        build(k.vcopy, "sm_90a", name="gemm_Qwen3-8B_up")


# --- runtime checks (no GPU: CPU tensors, device_type="cpu", a fake driver) ---------------------


def _aligned(torch, shape, dtype, align=64, offset=0):
    """A contiguous CPU tensor whose data pointer is ``offset`` bytes past an ``align`` boundary."""
    n = 1
    for s in shape:
        n *= s
    esize = torch.empty((), dtype=dtype).element_size()
    raw = torch.zeros(n * esize + 2 * align, dtype=torch.uint8)
    skip = (-raw.data_ptr()) % align + offset
    return raw[skip : skip + n * esize].view(dtype).view(*shape)


def test_bind_arguments_checks(built):
    import torch

    from axe.runtime import LaunchError, bind_arguments

    launch = built["axpy"].launch
    a, b, c = (_aligned(torch, (37, 256), torch.float32) for _ in range(3))
    bound = bind_arguments(launch, (a, b, c, 2.0), device_type="cpu")
    assert bound.env == {"M": 37, "alpha": 2.0} and bound.grid == (37, 1, 1) and bound.block == (256, 1, 1)

    def err(args, *words, device_type="cpu"):
        with pytest.raises(LaunchError) as e:
            bind_arguments(launch, args, device_type=device_type)
        for w in words:
            assert w in str(e.value), str(e.value)

    err((a, b, c), "expected 4 arguments, got 3")
    err((a.double(), b, c, 1.0), "'A'", "dtype float64, expected float32")
    err((a, b[:36], c, 1.0), "'B'", "shape (36, 256)", "M=37")
    err((a, b, c.view(37, 1, 256), 1.0), "'C'", "rank 3")
    err((a, b.t().contiguous().t(), c, 1.0), "'B'", "strides")
    err((a, b, _aligned(torch, (37, 256), torch.float32, offset=16), 1.0), "'C'", "not 64-byte aligned")
    err((a, b, c, "x"), "'alpha'", "number")
    err((a, b, c, True), "'alpha'")
    err((a, b, c, 1.0), "'A'", "device cpu", device_type="cuda")
    err((a, [0.0], c, 1.0), "'B'", "torch tensor")


def test_scalar_range_check():
    from axe.runtime import LaunchError, bind_arguments

    launch = {"name": "s", "args": [{"name": "n", "kind": "scalar", "dtype": "int32"}], "grid": [1, 1, 1],
              "block": [32, 1, 1], "dynamic_smem": 0}
    assert bind_arguments(launch, (2**31 - 1,)).env == {"n": 2**31 - 1}
    with pytest.raises(LaunchError, match="'n' = 2147483648 is outside int32"):
        bind_arguments(launch, (2**31,))
    launch["grid"] = ["n * 70000", 1, 1]
    with pytest.raises(LaunchError, match="grid\\[0\\]"):
        bind_arguments(launch, (2**20,))
    launch.update(grid=["n", 1, 1], cluster=[2, 1, 1])
    assert bind_arguments(launch, (6,)).cluster == (2, 1, 1)
    with pytest.raises(LaunchError, match="not a whole number of clusters"):
        bind_arguments(launch, (7,))
    launch.update(cluster=None, dynamic_smem="n * 1024")
    with pytest.raises(LaunchError, match="dynamic shared memory 1048576 bytes"):
        bind_arguments(launch, (1024,))


class FakeDriver:
    """Just enough of cuda.bindings.driver to encode tensor maps; records the calls."""

    class CUresult:
        CUDA_SUCCESS = 0

    class _Names:
        def __getattr__(self, name):
            return name

    CUtensorMapDataType = CUtensorMapInterleave = CUtensorMapSwizzle = _Names()
    CUtensorMapL2promotion = CUtensorMapFloatOOBfill = _Names()

    def __init__(self):
        self.calls = []

    @staticmethod
    def cuuint64_t(x):
        return int(x)

    cuuint32_t = cuuint64_t

    def cuTensorMapEncodeTiled(self, *args):
        self.calls.append(args)
        buf = ctypes.create_string_buffer(128)

        class Map:
            def getPtr(self):
                return ctypes.addressof(buf)

        m = Map()
        m.buf = buf
        return 0, m


class _Struct:
    """An attribute bag standing in for cuda.bindings' structs and unions."""

    def __getattr__(self, name):
        value = _Struct()
        setattr(self, name, value)
        return value


class LaunchDriver:
    """Just enough of cuda.bindings.driver to build a cuLaunchKernelEx configuration."""

    class CUlaunchAttributeID:
        CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = "cluster"
        CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = "programmatic"
        CU_LAUNCH_ATTRIBUTE_COOPERATIVE = "cooperative"

    CUlaunchConfig = CUlaunchAttribute = _Struct

    @staticmethod
    def CUstream(handle):
        return ("stream", handle)


def test_programmatic_launch_configuration(monkeypatch):
    """A kernel built with Ax.cuda.programmatic_launch is launched through cuLaunchKernelEx with
    programmatic stream serialization (next to a cluster shape or cooperative launch where those
    apply); AXE_PROGRAMMATIC_LAUNCH=0 and kernels without the mark launch plainly."""
    from types import SimpleNamespace

    from axe.runtime.launcher import launch_config

    b = SimpleNamespace(grid=(132, 1, 1), block=(384, 1, 1), dynamic_smem=200000, cluster=None)
    cfg = launch_config(LaunchDriver, {"programmatic": True}, b, 7)
    assert (cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes, cfg.hStream) == (132, 384, 200000, ("stream", 7))
    assert [a.id for a in cfg.attrs] == ["programmatic"] and cfg.numAttrs == 1
    assert cfg.attrs[0].value.programmaticStreamSerializationAllowed == 1
    assert launch_config(LaunchDriver, {"programmatic": False}, b, 7) is None
    assert launch_config(LaunchDriver, {}, b, 7) is None
    pair = SimpleNamespace(**dict(vars(b), cluster=(2, 1, 1)))
    cfg = launch_config(LaunchDriver, {"programmatic": True, "cooperative": True}, pair, 7)
    assert [a.id for a in cfg.attrs] == ["cluster", "programmatic", "cooperative"]
    assert (cfg.attrs[0].value.clusterDim.x, cfg.attrs[0].value.clusterDim.y) == (2, 1)
    monkeypatch.setenv("AXE_PROGRAMMATIC_LAUNCH", "0")
    assert launch_config(LaunchDriver, {"programmatic": True}, b, 7) is None
    assert [a.id for a in launch_config(LaunchDriver, {"programmatic": True}, pair, 7).attrs] == ["cluster"]


def test_programmatic_launch_needs_a_wait():
    """Ax.cuda.programmatic_launch marks the artifact; a kernel that declares it but never waits
    for its predecessor (griddepcontrol.wait) is refused at build time."""
    from tvm.script import tirx as T

    import axe.lang as Ax

    def make(wait):
        @Ax.kernel(name=f"pdl_scale_{wait}", outputs=("Y",))
        def k():
            @T.prim_func
            def f(X_: T.Buffer((1024,), "float32"), Y_: T.Buffer((1024,), "float32")):
                Ax.cuda.programmatic_launch()
                bx, tx = Ax.launch(4, 256)
                if wait:
                    Ax.cuda.grid_wait()
                Y_[bx * 256 + tx] = X_[bx * 256 + tx] * T.float32(2)
                Ax.cuda.launch_dependents()
            return f
        return k

    art = Ax.compile_kernel(make(True), "sm_90a")
    assert art.launch["programmatic"] is True
    ptx = [line.strip() for line in art.ptx.splitlines() if "griddepcontrol" in line]
    assert ptx == ["griddepcontrol.wait;", "griddepcontrol.launch_dependents;"]
    with pytest.raises(Exception, match="never waits"):
        Ax.compile_kernel(make(False), "sm_90a")


def test_tensormap_encoding_and_packing(built):
    import torch

    from axe.runtime.launcher import bind_arguments, pack_params

    launch = built["tma_copy"].launch
    a, b = (_aligned(torch, (200, 64), torch.float16) for _ in range(2))
    bound = bind_arguments(launch, (a, b), device_type="cpu")
    drv = FakeDriver()
    arr, keep = pack_params(launch, bound, drv)
    assert len(drv.calls) == 2
    dtype, rank, ptr, dims, strides, box, es, inter, swz, l2, oob = drv.calls[0]
    assert (dtype, rank, ptr) == ("CU_TENSOR_MAP_DATA_TYPE_FLOAT16", 2, a.data_ptr())
    assert (dims, strides, box, es) == ([64, 200], [128], [64, 64], [1, 1])
    assert (swz, oob) == ("CU_TENSOR_MAP_SWIZZLE_NONE", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    assert drv.calls[1][2] == b.data_ptr()
    assert [arr[i] for i in range(2)] == [m.getPtr() for m in keep[:2]]

    ax = built["axpy"].launch
    x, y, z = (_aligned(torch, (5, 256), torch.float32) for _ in range(3))
    arr, keep = pack_params(ax, bind_arguments(ax, (x, y, z, 0.5), device_type="cpu"), drv)
    ptrs = [ctypes.c_void_p.from_address(arr[i]).value for i in range(3)]
    assert ptrs == [x.data_ptr(), y.data_ptr(), z.data_ptr()]
    assert ctypes.c_int32.from_address(arr[3]).value == 5
    assert ctypes.c_float.from_address(arr[4]).value == 0.5


def test_param_pack_reuse(built):
    """A ParamPack (one per checked call signature) encodes a tensor map once per data pointer and
    rewrites pointers per call: what a repeat launch writes equals what a fresh pack writes."""
    import torch

    from axe.runtime.launcher import LaunchError, ParamPack, bind_arguments

    launch = built["tma_copy"].launch
    drv = FakeDriver()
    a, b, a2 = (_aligned(torch, (200, 64), torch.float16) for _ in range(3))
    bound = bind_arguments(launch, (a, b), device_type="cpu")
    pack = ParamPack(launch, bound.env, drv)
    pack.fill(bound.tensors)
    first = [pack.array[i] for i in range(2)]
    pack.fill(bound.tensors)
    assert len(drv.calls) == 2 and [pack.array[i] for i in range(2)] == first   # same tensors: no new encoding
    pack.fill({"A": a2, "B": b})
    assert len(drv.calls) == 3 and drv.calls[2][2] == a2.data_ptr()           # a new pointer: encoded anew
    assert pack.array[1] == first[1] and pack.array[0] != first[0]

    ax = built["axpy"].launch
    x, y, z, x2 = (_aligned(torch, (5, 256), torch.float32) for _ in range(4))
    pack = ParamPack(ax, bind_arguments(ax, (x, y, z, 0.5), device_type="cpu").env, drv)
    for xs in (x, x2):
        arr = (ctypes.c_void_p * 5).from_address(pack.fill({"A": xs, "B": y, "C": z}))
        assert [ctypes.c_void_p.from_address(arr[i]).value for i in range(3)] == [xs.data_ptr(), y.data_ptr(), z.data_ptr()]
        assert ctypes.c_float.from_address(arr[4]).value == 0.5
    pack.scalar(4).value = 2.0          # a scalar slot rewritten in place: the next launch passes it
    assert ctypes.c_float.from_address(pack.array[4]).value == 2.0
    with pytest.raises(LaunchError, match="parameter 0 .* is not a scalar"):
        pack.scalar(0)


def test_tensormap_rules():
    from axe.backends.cuda.tensormap import TensorMapError, check_spec, tiled_args

    spec = {"param": "m", "tensor": "A", "dtype": "float16", "box": [64, 64], "elem_strides": [1, 1], "swizzle": 0}
    check_spec(spec)
    for bad, words in (
        (dict(spec, box=[4, 64]), "8 bytes must be a multiple of 16"),
        (dict(spec, swizzle=64), "exceeds the 64-byte swizzle span"),
        (dict(spec, swizzle=48), "swizzle 48"),
        (dict(spec, dtype="complex64"), "no TMA data type"),
        (dict(spec, elem_strides=[1]), "elem_strides"),
        (dict(spec, box=[64] * 6, elem_strides=[1] * 6), "rank 6"),
    ):
        with pytest.raises(TensorMapError, match=words):
            check_spec(bad)
    assert tiled_args(spec, 1024, [200, 64], [64, 1], 2, "float16") == ([64, 200], [128], [64, 64], [1, 1])
    with pytest.raises(TensorMapError, match="not 16-byte aligned"):
        tiled_args(spec, 1032, [200, 64], [64, 1], 2, "float16")
    with pytest.raises(TensorMapError, match="innermost stride is 2"):
        tiled_args(spec, 1024, [200, 64], [128, 2], 2, "float16")
    with pytest.raises(TensorMapError, match="byte stride of dim 1 = 74"):
        tiled_args(dict(spec, box=[8, 8]), 1024, [200, 37], [37, 1], 2, "float16")
    with pytest.raises(TensorMapError, match="covers"):
        tiled_args(dict(spec, shape=[64, 400], strides_bytes=[128]), 1024, [200, 64], [64, 1], 2, "float16")


def test_eval_expr_is_restricted():
    from axe.backends.cuda.artifact import ArtifactError, eval_expr

    assert eval_expr("((M + 127) // 128) * 2 - min(M, 3) % 2", {"M": 300}) == 5
    for bad in ("__import__('os').system('true')", "M ** 2", "M.real", "N + 1"):
        with pytest.raises(ArtifactError):
            eval_expr(bad, {"M": 3})


def test_tensormap_specs_from_function_attribute(k, built):
    from axe.backends.cuda.build import build

    attr_specs = [dict(s, swizzle=0) for s in k.TMA_SPECS]
    attr_specs[1]["oob_fill"] = "nan"  # replaced by the explicit spec below
    func = k.tma_copy.with_attr("axe.tensormaps", json.dumps(attr_specs))
    art = build(func, "sm_90a", name="tma_copy", tensormaps=[k.TMA_SPECS[1]])
    assert [s["param"] for s in art.launch["tensormaps"]] == ["A_map", "B_map"]
    assert art.launch["tensormaps"] == built["tma_copy"].launch["tensormaps"]


def test_scratch_is_per_stream():
    """Runtime-supplied scratch: launches on one (device, stream) share one zero-filled set (the
    kernel leaves it zeroed); another stream, whose launches may overlap, gets its own set."""
    import torch

    from axe.backends.cuda.artifact import Artifact
    from axe.runtime.launcher import Kernel

    launch = {"name": "k", "kernel": "k", "arch": "sm_90a", "grid": [1, 1, 1], "block": [32, 1, 1],
              "args": [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": [4]},
                       {"name": "w", "kind": "tensor", "dtype": "float32", "shape": [8], "scratch": True},
                       {"name": "f", "kind": "tensor", "dtype": "int32", "shape": [2], "scratch": True}]}
    k = Kernel(Artifact("", "", b"\0", launch))
    x = torch.zeros(4)
    s1 = k._with_scratch((x,), 0, 0x10, device="cpu")
    again = k._with_scratch((x,), 0, 0x10, device="cpu")
    s2 = k._with_scratch((x,), 0, 0x20, device="cpu")
    other_dev = k._with_scratch((x,), 1, 0x10, device="cpu")
    assert s1[0] is x and len(s1) == 3 and all(a is b for a, b in zip(s1, again))
    assert not {id(t) for t in s1[1:]} & {id(t) for t in s2[1:] + other_dev[1:]}
    assert s2[1].shape == (8,) and s2[2].dtype == torch.int32 and not s2[1].any()
    given = (x, torch.ones(8), torch.ones(2, dtype=torch.int32))
    assert k._with_scratch(given, 0, 0x30, device="cpu") is given    # the caller's own scratch is kept
    k.release_scratch()
    assert k._with_scratch((x,), 0, 0x10, device="cpu")[1] is not s1[1]



def test_scratch_a_graph_captured_outlives_its_kernel(monkeypatch):
    """A scratch set used while a CUDA graph is being captured stays alive after its Kernel is gone
    (the graph may replay later: freed, its memory would be handed out again while the replays
    write partial sums and flags into it); sets used outside a capture die with the Kernel."""
    import gc
    import weakref

    import torch

    from axe.backends.cuda.artifact import Artifact
    from axe.runtime import launcher
    from axe.runtime.launcher import Kernel

    launch = {"name": "k", "kernel": "k", "arch": "sm_90a", "grid": [1, 1, 1], "block": [32, 1, 1],
              "args": [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": [4]},
                       {"name": "w", "kind": "tensor", "dtype": "float32", "shape": [8], "scratch": True}]}
    x = torch.zeros(4)
    refs = {}
    for capturing in (False, True):
        monkeypatch.setattr(launcher, "_capturing", lambda c=capturing: c)
        k = Kernel(Artifact("", "", b"\0", launch))
        refs[capturing] = weakref.ref(k._with_scratch((x,), 0, 0x10, device="cpu")[1])
        del k
        gc.collect()
    assert refs[False]() is None and refs[True]() is not None
    launcher._CAPTURED_SCRATCH.clear()

def test_bind_is_remembered_per_argument_signature():
    """Kernel.bind checks a new argument signature fully and remembers it: a later call with the
    same dtypes, shapes, strides, device and scalars gets the same configuration with its own
    tensors, and only the data pointers' alignment is checked again; anything else that differs
    goes through the full checks (same errors as bind_arguments)."""
    import torch

    from axe.backends.cuda.artifact import Artifact
    from axe.runtime.launcher import Kernel, LaunchError, bind_arguments

    launch = {"name": "k", "kernel": "k", "arch": "sm_90a", "grid": ["(M + 63) // 64", "n", 1], "block": [128, 1, 1],
              "symbols": {"M": {"arg": "x", "dim": 0}},
              "args": [{"name": "x", "kind": "tensor", "dtype": "float16", "shape": ["M", 64], "alignment": 16},
                       {"name": "y", "kind": "tensor", "dtype": "float16", "shape": ["M", 64], "alignment": 16},
                       {"name": "n", "kind": "scalar", "dtype": "int32"}]}
    k = Kernel(Artifact("", "", b"\0", launch))
    x, y = torch.zeros(200, 64, dtype=torch.float16), torch.zeros(200, 64, dtype=torch.float16)
    first = k.bind(x, y, 3, device_type="cpu")
    x2, y2 = torch.ones(200, 64, dtype=torch.float16), torch.ones(200, 64, dtype=torch.float16)
    again = k.bind(x2, y2, 3, device_type="cpu")
    full = bind_arguments(launch, (x2, y2, 3), device_type="cpu")
    assert again.tensors["x"] is x2 and again.tensors["y"] is y2
    assert (again.grid, again.block, again.env) == (full.grid, full.block, full.env) == (first.grid, first.block, first.env)
    assert len(k._bound) == 1 and not next(iter(k._bound.values()))[1].tensors   # no tensor kept alive
    base = torch.zeros(201 * 64 + 1, dtype=torch.float16)
    odd = base[1:].view(201, 64)[:200]          # same shape and strides, pointer off by 2 bytes
    with pytest.raises(LaunchError, match="'x' data pointer .* is not 16-byte aligned"):
        k.bind(odd, y, 3, device_type="cpu")
    assert k.bind(x, y, 5, device_type="cpu").grid == (4, 5, 1)          # another scalar: checked anew
    assert k.bind(x[:70], y[:70], 3, device_type="cpu").grid == (2, 3, 1)  # another M
    with pytest.raises(LaunchError, match="'y' has shape"):
        k.bind(x, y[:70], 3, device_type="cpu")
    with pytest.raises(LaunchError, match="'y' has dtype float32"):
        k.bind(x, y.float(), 3, device_type="cpu")
    with pytest.raises(LaunchError, match="'x' has strides"):
        k.bind(torch.zeros(64, 200, dtype=torch.float16).t(), y, 3, device_type="cpu")
