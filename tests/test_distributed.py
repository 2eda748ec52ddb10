"""Distributed kernels on the CPU: signatures, dispatch decisions and declines, PTX contents,
and the runtime's argument checks (GPU runs: tests/gpu/cases_dist.py)."""

import os
import re

import pytest
from tvm.script import tirx as T

import axe.lang as Ax
from axe.layout import parse
from axe.layout.interop.dtensor import Shard

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


@pytest.fixture(scope="module")
def coll():
    from kernels import collectives
    return collectives


def _records(k, target="sm_90a", features=()):
    _, ctx = Ax.build_func(k, target, features)
    return ctx


def test_reduce_scatter_signature_is_the_papers(coll):
    ctx = _records(coll.make("reduce_scatter", 256, 64, 4))
    p = ctx.distributed["params"]
    assert p["X_"]["shape"] == [4, 256, 64] and p["X_"]["partial_dim"] == 0 and p["X_"]["symmetric"]
    assert parse(p["X_"]["layout"]) == parse("S[(4,256,64):(1@gpuid,64,1)]")
    assert p["Y_"]["shape"] == [256, 64] and p["Y_"]["local_shape"] == [64, 64]
    assert ctx.distributed["world"] == 4 and ctx.distributed["runtime"]["rank"] == "rank"


@pytest.mark.parametrize("kind,what", [("reduce_scatter", "reduce"), ("all_reduce", "reduce"), ("all_gather", "copy")])
def test_collective_dispatch_and_explain(coll, kind, what):
    ctx = _records(coll.make(kind, 256, 64, 2))
    (rec,) = ctx.records
    assert rec.call.op == what and rec.chosen == "peer_pull"
    text = rec.format()
    if what == "reduce":
        assert "multimem" in text and "does not declare NVLink multicast" in text
    boxes = {0: [((0, 0), (128, 64))], 1: [((128, 0), (128, 64))]} if kind == "reduce_scatter" \
        else {0: [((0, 0), (256, 64))], 1: [((0, 0), (256, 64))]}
    assert str(boxes) in rec.plan


def test_multimem_only_for_a_multicast_target(coll):
    k = coll.make("reduce_scatter", 256, 64, 2)
    assert _records(k, "sm_100a", ("multicast",)).records[0].chosen == "multimem"
    assert _records(k, "sm_100a").records[0].chosen == "peer_pull"


def test_peer_pull_declines_name_the_condition():
    """A non-symmetric source and a call outside the devices scope are declined with reasons."""

    def factory(symmetric, scope):
        @T.prim_func
        def k(X_: T.Buffer((128, 64), "bfloat16"), Y_: T.Buffer((64, 64), "bfloat16"),
              peers: T.Buffer((2,), "int64"), sig: T.Buffer((1024,), "int32"), err: T.Buffer((8,), "int32"),
              rank: T.int32, epoch: T.int32, timeout_ns: T.int64):
            bx, tx = Ax.launch(4, 128)
            mesh = Ax.mesh(2, peers, sig, err, rank, epoch, timeout_ns)
            X = Ax.dtensor(X_, (2, 128, 64), "S[(2,128,64):(1@gpuid,64,1)]", symmetric=symmetric)
            Y = Ax.dtensor(Y_, (128, 64), placements=[Shard(0)])
            if scope:
                with Ax.devices():
                    Ax.reduce(Y, X, "sum", dims=0)
            else:
                Ax.reduce(Y, X, "sum", dims=0)
        return k

    for symmetric, scope, why in ((False, True, "is not symmetric"), (True, False, "multi-device scope")):
        with pytest.raises(Exception) as e:
            Ax.build_func(Ax.Kernel("k", lambda: factory(symmetric, scope)))
        assert why in str(e.value), str(e.value)[-600:]


def test_dtensor_refuses_a_buffer_that_is_not_the_shard():
    def factory():
        @T.prim_func
        def k(X_: T.Buffer((100, 64), "bfloat16"), peers: T.Buffer((2,), "int64"), sig: T.Buffer((8,), "int32"),
              err: T.Buffer((8,), "int32"), rank: T.int32, epoch: T.int32, timeout_ns: T.int64):
            bx, tx = Ax.launch(1, 32)
            mesh = Ax.mesh(2, peers, sig, err, rank, epoch, timeout_ns)
            Ax.dtensor(X_, (256, 64), placements=[Shard(0)])
        return k

    with pytest.raises(Exception, match=r"X_.*does not hold one shard \[128, 64\]"):
        Ax.build_func(Ax.Kernel("k", factory))


@pytest.fixture(scope="module")
def rs_art(coll):
    return coll.build("reduce_scatter", 256, 64, 2)


def test_collective_ptx_has_system_scope_acquire_release(rs_art):
    ptx = rs_art.ptx
    assert "ld.acquire.sys.global.b32" in ptx and "st.release.sys.global.b32" in ptx
    assert "fence.acq_rel.sys" in ptx and "%globaltimer" in ptx
    assert "multimem" not in ptx
    assert rs_art.launch["distributed"]["signals_used"] == 4 * 132 * 2
    assert not rs_art.launch.get("distributed", {}).get("multicast")


def test_multimem_builds_for_sm_100a(coll):
    art = coll.build("all_reduce", 256, 64, 2, target="sm_100a", features=("multicast",))
    assert re.search(r"multimem\.ld_reduce\.relaxed\.sys\.global\.add\.v4\.bf16x2", art.ptx)
    assert art.launch["distributed"]["multicast"] is True
    assert art.launch["distributed"]["runtime"]["multicast"] == "mc"


def test_exchange_puts_and_gets_through_the_peer_table(coll):
    ctx = _records(coll.make("exchange", 264, 64, 2))
    put, get = ctx.records
    assert put.chosen == get.chosen == "vector"
    assert "dst in the memory of GPU" in put.plan and "src in the memory of GPU" in get.plan
    tma = dict(put.verdicts)["tma_store"]
    assert "on other GPUs" in tma


@pytest.fixture(scope="module")
def gemm_rs_art():
    from kernels import gemm_rs
    return gemm_rs.build(2 * 1000, 1000, 2 * 512, 2, "bfloat16", "col", name="gemm_rs_test")


def test_gemm_rs_signature_and_ptx(gemm_rs_art):
    d = gemm_rs_art.launch["distributed"]
    assert d["params"]["A_"]["placements"] == "(Shard(1))" and d["params"]["A_"]["local_shape"] == [2000, 512]
    assert d["params"]["A_"]["buffer_shape"] == [2, 1000, 512]
    assert d["params"]["C_"]["placements"] == "(Shard(0))" and d["params"]["C_"]["local_shape"] == [1000, 1000]
    assert d["params"]["P_"]["scratch"] and d["params"]["P_"]["symmetric"]
    ptx = gemm_rs_art.ptx
    assert "st.release.sys.global.b32" in ptx and "ld.acquire.sys.global.b32" in ptx
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.wait_group 0" in ptx
    res = gemm_rs_art.launch["resources"]
    # the mesh waits are inline (a call made ptxas ignore setmaxnreg, C7507) and the forwarding
    # warps fit their 40 registers: nothing spills
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0 and res["stack"] == 0, res
    assert "C7507" not in gemm_rs_art.log and "C7510" not in gemm_rs_art.log
    assert "__noinline__" not in gemm_rs_art.cuda_source


def test_gemm_rs_pushes_peer_tiles_and_stores_own_tiles(gemm_rs_art):
    """The default (rs_push="forward"): the consumers stash peer tiles with one bulk copy per
    chunk, the forwarding warps push them to the owner with 16-byte peer stores, the owners load
    the partials with bulk copies, and own tiles go to C with TMA."""
    recs = gemm_rs_art.records
    pushes = [r for r in recs if r.call.op == "copy" and r.call.operands["dst"].name == "P_"]
    assert pushes and all(r.chosen == "vector" and "memory of GPU" in r.plan and r.call.scope.threads == 32
                          for r in pushes)
    stash = [r for r in recs if r.call.op == "copy" and r.call.operands["dst"].name.startswith("Q_")]
    assert stash and all(r.chosen == "bulk" and "16384 contiguous bytes" in r.plan for r in stash)
    assert "cp.async.bulk.global.shared::cta.bulk_group" in gemm_rs_art.ptx
    reads = [r for r in recs if r.call.op == "copy" and r.call.operands["src"].name.startswith("P_")
             and r.call.operands["dst"].mem == "shared"]
    # the peers' partials, read locally: one bulk load per chunk into the shared chunk buffer
    assert reads and all(r.chosen == "bulk" and "global → shared" in r.plan for r in reads)
    stores = [r for r in recs if r.chosen == "tma_store"]
    assert stores and all(r.call.operands["dst"].name == "C_" for r in stores)


def test_gemm_rs_bulk_push_variant():
    """rs_push="bulk": the consumers' bulk copies write the peer tiles straight into the owner."""
    from kernels import gemm_rs
    _, ctx = Ax.build_func(gemm_rs.make(2 * 1024, 1024, 2 * 512, 2, rs_push="bulk", name="gemm_rs_bulk_test"))
    pushes = [r for r in ctx.records if r.call.op == "copy" and r.call.operands["dst"].on_devices]
    assert pushes and all(r.chosen == "bulk" and "memory of GPU" in r.plan for r in pushes)


def test_gemm_rs_register_add_variant():
    """rs_add="registers": an owner reads each peer's partial half-tile from its staging straight
    into the output registers (no bulk load of a partial into shared memory), then stores the sum
    with TMA; the pushes are the default's.  A name other than chunks/registers is refused."""
    from kernels import gemm_rs
    _, ctx = Ax.build_func(gemm_rs.make(2 * 1024, 1024, 2 * 512, 2, rs_add="registers", name="gemm_rs_regs_test"))
    recs = ctx.records
    reads = [r for r in recs if r.call.op == "copy" and r.call.operands["src"].name.startswith("P_")]
    assert reads and all(r.call.operands["dst"].mem == "local" and r.call.scope.threads == 128 for r in reads)
    assert not [r for r in reads if r.chosen == "bulk"]
    pushes = [r for r in recs if r.call.op == "copy" and r.call.operands["dst"].name == "P_"]
    assert pushes and all(r.chosen == "vector" for r in pushes)
    assert [r for r in recs if r.chosen == "tma_store" and r.call.operands["dst"].name == "C_"]
    with pytest.raises(ValueError, match="add must be 'chunks' or 'registers'"):
        gemm_rs.make(2 * 1024, 1024, 2 * 512, 2, rs_add="shared")


def test_gemm_rs_refuses_unequal_shards():
    from kernels import gemm_rs
    with pytest.raises(ValueError, match="multiples of world"):
        gemm_rs.make(1001, 1024, 1024, 2)
    with pytest.raises(ValueError, match="world must be at least 2"):
        gemm_rs.make(1024, 1024, 1024, 1)


# --- the runtime's checks, without a GPU ---------------------------------------------------------

class _FakeHeap:
    """Stands in for SymmetricHeap: CPU tensors, world/rank given."""

    def __init__(self, world, rank=0):
        import torch
        self.world, self.rank, self.device = world, rank, torch.device("cpu")

    def deltas(self):
        import torch
        return torch.zeros(self.world, dtype=torch.int64)

    def zeros(self, shape, dtype):
        import torch
        return _Sym(torch.zeros(shape, dtype=dtype), self)

    empty = zeros

    def barrier(self):
        pass


class _Sym:
    def __init__(self, local, heap):
        self.local, self.heap = local, heap


def test_runtime_refuses_another_world_size(rs_art):
    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    with pytest.raises(DistributedSignatureError, match=r"built for a mesh of 2 GPUs .* has 4"):
        DistKernel(rs_art, _FakeHeap(4))


def test_runtime_fills_the_mesh_parameters(rs_art):
    import torch

    from axe.runtime.distributed import DistKernel
    heap = _FakeHeap(2, rank=1)
    k = DistKernel(rs_art, heap, timeout=3.0)
    assert [a["name"] for a in k.user_args] == ["X_", "Y_"]
    X, Y = heap.empty((256, 64), torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16)
    full = k.arguments(X, Y)
    names = [a["name"] for a in rs_art.launch["args"]]
    vals = dict(zip(names, full))
    assert vals["rank"] == 1 and vals["epoch"] == 1 and vals["timeout_ns"] == 3_000_000_000
    assert vals["X_"] is X.local and vals["peers"].dtype == torch.int64


def test_runtime_refuses_wrong_arguments(rs_art):
    import torch

    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    heap = _FakeHeap(2)
    k = DistKernel(rs_art, heap)
    X = heap.empty((256, 64), torch.bfloat16)
    with pytest.raises(DistributedSignatureError, match=r"'X_' must be a SymmetricTensor"):
        k.arguments(torch.empty(256, 64, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16))
    with pytest.raises(DistributedSignatureError, match=r"'Y_' has local shape \(120, 64\).*\(128, 64\)"):
        k.arguments(X, torch.empty(120, 64, dtype=torch.bfloat16))
    with pytest.raises(DistributedSignatureError, match="expected 2 arguments"):
        k.arguments(X)


def test_runtime_refuses_to_launch_multicast(coll):
    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    art = coll.build("all_reduce", 256, 64, 2, target="sm_100a", features=("multicast",))
    with pytest.raises(DistributedSignatureError, match="multicast"):
        DistKernel(art, _FakeHeap(2))


def test_runtime_reports_a_timed_out_wait(rs_art):
    """The error record a timed-out wait leaves becomes a PeerTimeoutError naming the rank and
    the signal; later launches are refused."""
    import torch

    from axe.runtime import distributed as D
    k = D.DistKernel(rs_art, _FakeHeap(2))
    err = k._fill[k.dist["runtime"]["errors"]]
    err.copy_(torch.tensor([1, 0, 1, 17, 3, 2, 5, 0], dtype=torch.int32))
    sync = torch.cuda.synchronize
    torch.cuda.synchronize = lambda *a: None
    try:
        with pytest.raises(D.PeerTimeoutError, match=r"rank 0 waited 10 s for signal 17 \(reduce at .*\) from rank 1"):
            k.synchronize()
    finally:
        torch.cuda.synchronize = sync
    with pytest.raises(D.PeerTimeoutError, match="earlier launch failed"):
        k(None, None)


def test_nvshmem_put_only_where_declared(coll):
    """signal= is a put-with-signal: NVSHMEM's where the target declares it; elsewhere every copy
    schedule declines it by name (SM stores would set no signal) instead of ignoring it."""
    with pytest.raises(Ax.KernelError) as err:
        _records(coll.make("put_signal", 256, 64, 2, ctas=4, threads=128), "sm_90a")
    msg = str(err.value)
    assert "does not declare NVSHMEM" in msg and "signal= asks for a put-with-signal" in msg
    rec = _records(coll.make("put_signal", 256, 64, 2, ctas=4, threads=128), "sm_90a", ("nvshmem",)).records[0]
    assert rec.chosen == "nvshmem" and "8192 contiguous bytes" in rec.plan


def test_nvshmem_put_compiles_to_nvshmem_calls(coll):
    """The generated CUDA calls nvshmemx_putmem_signal_nbi_block; with NVSHMEM's headers (the
    nvidia-nvshmem-cu13 wheel, an optional extra) nvcc compiles it as relocatable device code."""
    from axe.backends.cuda.build import BuildError
    try:
        art = coll.build("put_signal", 256, 64, 2, features=("nvshmem",), ctas=4, threads=128, name="put_signal")
    except BuildError as err:
        assert "NVSHMEM" in str(err) and "headers were not found" in str(err)
        return
    assert "nvshmemx_putmem_signal_nbi_block" in art.cuda_source
    assert "nvshmemi_device_state_d" in art.ptx     # NVSHMEM's device code, compiled in (relocatable)
    assert art.launch["distributed"]["nvshmem"] is True
    # device-linked with libnvshmem_device.a into one loadable image: the kernel and NVSHMEM's device
    # functions (relocatable code alone holds unresolved calls that cuModuleLoadData refuses)
    assert art.cubin.startswith(b"\x7fELF") and b"put_signal_kernel" in art.cubin
    # code from libnvshmem_device.a (the function's mangled name differs between NVSHMEM releases)
    assert re.search(rb"\.text\._Z\d+nvshmemi_transfer_put_signal", art.cubin)
    from axe.backends.cuda.build import nvshmem_version
    assert art.launch["distributed"]["nvshmem_version"] == nvshmem_version() and \
        re.fullmatch(r"\d+\.\d+\.\d+", nvshmem_version())
    from axe.backends.cuda.artifact import Artifact
    import tempfile
    with tempfile.TemporaryDirectory() as d:       # the schema keeps the version through save and load
        assert Artifact.load(art.save(d)).launch["distributed"]["nvshmem_version"] == nvshmem_version()
    from axe.runtime.distributed import DistKernel, DistributedSignatureError
    with pytest.raises(DistributedSignatureError, match="needs a heap on NVSHMEM"):
        DistKernel(art, _FakeHeap(2))


def test_bulk_copy_needs_the_same_memory_image():
    """A bulk copy moves bytes: the shared tile must be laid out like the destination, contiguous."""
    from axe.backends.cuda.schedules.bulk import contiguous_image
    from axe.layout import S, Swizzle, SwizzledLayout
    from axe.ops.tensor import Tensor

    class _Buf:
        name = "b"
    ok = Tensor(_Buf(), SwizzledLayout(S[(64, 2, 64):(64, 4096, 1)], Swizzle(3, 3, 3)), (64, 128), "bfloat16", "shared")
    gap = Tensor(_Buf(), S[(64, 128):(256, 1)], (64, 128), "bfloat16", "global")
    assert contiguous_image(ok) is None
    assert "leaves gaps" in contiguous_image(gap)


def test_runtime_keeps_one_stream(rs_art):
    """One DistKernel's launches share signals, epochs and symmetric scratch: a launch on another
    stream than the first one's is refused before anything runs, naming both streams."""
    from axe.runtime.distributed import DistKernel
    from axe.runtime.launcher import LaunchError
    k = DistKernel(rs_art, _FakeHeap(2))
    k._check_stream(0x10)
    k._check_stream(0x10)
    with pytest.raises(LaunchError, match=r"stream 0x20, but its earlier launches went to stream 0x10.*another DistKernel"):
        k._check_stream(0x20)
    assert k.epoch == 0


def test_runtime_launches_every_epoch_through_one_plan(gemm_rs_art, monkeypatch):
    """A DistKernel's launches of one signature differ in their epoch only: the arguments are bound
    (checked, tensor maps encoded, a plan made) once, and launch n records exactly the launch of the
    kernel's checked path given epoch n — every parameter byte, over a recording stand-in driver on
    CPU tensors."""
    import torch
    from test_torch_plans import RecordingDriver

    from axe.runtime import launcher
    from axe.runtime.distributed import DistKernel
    monkeypatch.setattr(launcher.Kernel, "device_type", "cpu")
    monkeypatch.setattr(launcher, "_ensure_context", lambda driver, index: None)
    monkeypatch.setattr(launcher, "_CACHE", {})
    binds, bind = [], launcher.bind_arguments
    monkeypatch.setattr(launcher, "bind_arguments", lambda *a, **kw: binds.append(1) or bind(*a, **kw))
    params = gemm_rs_art.launch["params"]
    width = {"tensormap": 128, "tensor": 8}
    d = RecordingDriver([width.get(p["kind"]) or {"int32": 4, "int64": 8}[p["dtype"]] for p in params])
    k = DistKernel(launcher.Kernel(gemm_rs_art, driver=d), _FakeHeap(2, rank=1), timeout=3.0)
    A = (torch.randn(2000, 512) * 0.5).to(torch.bfloat16)
    B = (torch.randn(1000, 512) * 0.5).to(torch.bfloat16)
    C = torch.empty(1000, 1000, dtype=torch.bfloat16)
    stream = 0x10
    for _ in range(3):
        k(A, B, C, stream=stream)
    assert len(binds) == 1 and k.epoch == 3
    planned = list(d.launches)
    checked = []
    for n in (1, 2, 3):
        full = list(k.arguments(A, B, C))
        full[k._epoch_at] = n
        k.kernel(*full, stream=stream)
        checked.append(d.launches[-1])
    assert len(binds) == 4 and planned == checked
    at = next(i for i, p in enumerate(params) if p["name"] == k.dist["runtime"]["epoch"])
    assert [launch[5][at] for launch in planned] == [n.to_bytes(4, "little") for n in (1, 2, 3)]
    C2 = torch.empty(1000, 1000, dtype=torch.bfloat16)      # another output tensor: the same plan, moved
    k(A, B, C2, stream=stream)
    full = list(k.arguments(A, B, C2))
    full[k._epoch_at] = 4
    k.kernel(*full, stream=stream)
    assert len(binds) == 5 and d.launches[-2] == d.launches[-1] and d.launches[-1][5] != planned[-1][5]
