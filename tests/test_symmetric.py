"""CPU tests of axe.runtime.symmetric.

The pure parts (pool allocator, sizes, delta composition, reachability, the multicast
environment guard) are tested directly.  The heap itself is exercised with two real processes
over a gloo process group, with the torch backend replaced by a file-backed stand-in: each
rank's pool is a shared memory-mapped file that the other rank maps too, so peer views, deltas
and the collective checks run for real, without a GPU.  NVSHMEM and torch's CUDA symmetric
memory themselves only run on the GPU machines (tests/gpu).
"""

import ctypes
import itertools
import json
import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from axe.runtime import symmetric as sm
from axe.runtime.symmetric import (ALIGNMENT, DEFAULT_POOL_BYTES, POOL_ENV, PoolAllocator, SymmetricError,
                                   align_up, compose_deltas, describe_mismatch, disable_multicast_env,
                                   multicast_env_problems, parse_bytes, reachable_ranks, resolve_pool_bytes)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


# --- sizes ---------------------------------------------------------------------------------------

def test_align_up():
    assert [align_up(n) for n in (0, 1, 255, 256, 257)] == [0, 256, 256, 256, 512]
    assert align_up(5, 4) == 8
    with pytest.raises(ValueError):
        align_up(-1)


@pytest.mark.parametrize("text,n", [(4096, 4096), ("4096", 4096), ("512M", 512 << 20), ("2G", 2 << 30),
                                    ("2g", 2 << 30), ("1.5GiB", 3 << 29), (" 64 KB ", 64 << 10), ("1T", 1 << 40)])
def test_parse_bytes(text, n):
    assert parse_bytes(text) == n


@pytest.mark.parametrize("text", ["", "abc", "-5", "0", "2X", "1.2.3", True, 0])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError):
        parse_bytes(text)


def test_resolve_pool_bytes():
    assert resolve_pool_bytes(None, {}) == DEFAULT_POOL_BYTES == 2 << 30
    assert resolve_pool_bytes(None, {POOL_ENV: "1G"}) == 1 << 30          # env overrides the default
    assert resolve_pool_bytes(4096, {POOL_ENV: "1G"}) == 4096              # an explicit size wins
    with pytest.raises(SymmetricError, match=POOL_ENV):
        resolve_pool_bytes(None, {POOL_ENV: "lots"})
    with pytest.raises(SymmetricError, match="pool_bytes"):
        resolve_pool_bytes(-1, {})


# --- the pool allocator --------------------------------------------------------------------------

def test_allocator_offsets_are_aligned_and_ordered():
    a = PoolAllocator(4096)
    offs = [a.allocate(n) for n in (1, 300, 0, 256, 7)]
    assert offs == [0, 256, 768, 768, 1024]
    assert all(o % ALIGNMENT == 0 for o in offs)
    assert a.used == 1031 and a.free == 4096 - 1031
    assert [e[:2] for e in a.log] == [(0, 1), (256, 300), (768, 0), (768, 256), (1024, 7)]
    a.reset()
    assert a.allocate(10) == 0


def test_allocator_exact_fit_and_exhaustion_message():
    a = PoolAllocator(1024, rank=3, world=4)
    assert a.allocate(512, "first") == 0
    assert a.allocate(512) == 512                  # exactly fills the pool
    b = PoolAllocator(1024, rank=3, world=4)
    b.allocate(600)
    with pytest.raises(SymmetricError) as e:
        b.allocate(300, "shape (75,) float32")
    msg = str(e.value)
    for part in ("rank 3/4", "requested 300 bytes", "shape (75,) float32", "only 256 bytes are free",
                 "424 before alignment", "1024-byte pool", "600 used by 1 buffers", POOL_ENV, "every rank"):
        assert part in msg, (part, msg)
    assert b.used == 600 and len(b.log) == 1       # unchanged by the failure
    assert b.allocate(256) == 768                  # what is left still fits


def test_allocator_rejects_bad_arguments():
    with pytest.raises(SymmetricError):
        PoolAllocator(0)
    with pytest.raises(SymmetricError):
        PoolAllocator(1024, alignment=100)
    with pytest.raises(SymmetricError, match="negative"):
        PoolAllocator(1024).allocate(-1)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 1 << 16), st.lists(st.integers(0, 5000), max_size=30),
       st.sampled_from([16, 128, 256, 4096]))
def test_allocator_properties(pool, sizes, alignment):
    """Aligned, disjoint, inside the pool, deterministic; failures leave the state alone."""
    a, b = PoolAllocator(pool, alignment), PoolAllocator(pool, alignment)
    spans = []
    for n in sizes:
        try:
            o = a.allocate(n)
        except SymmetricError:
            before = (a.cursor, len(a.log))
            with pytest.raises(SymmetricError):
                b.allocate(n)
            assert (a.cursor, len(a.log)) == before
            assert align_up(a.cursor, alignment) + n > pool
            continue
        assert b.allocate(n) == o                  # same sequence, same offsets (every rank)
        assert o % alignment == 0 and 0 <= o and o + n <= pool
        spans.append((o, o + n))
    spans.sort()
    assert all(e1 <= s2 for (_, e1), (s2, _) in zip(spans, spans[1:]))


# --- deltas and reachability ---------------------------------------------------------------------

def test_compose_deltas():
    addrs = [0x7f0000000000, 0x7f0100000000, 0x7e0000000000, 0x7f0000400000]
    for r in range(4):
        d = compose_deltas(addrs, r)
        assert d[r] == 0
        assert [addrs[r] + x for x in d] == addrs
    # an unmapped peer: local + delta is the bare offset (faults), never the local copy
    d = compose_deltas([0x1000_0000, None, 0], 0)
    assert d == [0, -0x1000_0000, -0x1000_0000]
    with pytest.raises(SymmetricError, match="rank 1"):
        compose_deltas([0x1000, None], 1)
    with pytest.raises(SymmetricError):
        compose_deltas([0x1000], 2)


@given(st.lists(st.integers(1 << 20, 1 << 47), min_size=1, max_size=8), st.data())
def test_deltas_compose_with_every_offset(addrs, data):
    """local_ptr + deltas[g] is the same buffer on g, for any buffer offset."""
    rank = data.draw(st.integers(0, len(addrs) - 1))
    off = data.draw(st.integers(0, 1 << 30).map(align_up))
    d = compose_deltas(addrs, rank)
    assert all((addrs[rank] + off) + d[g] == addrs[g] + off for g in range(len(addrs)))
    assert all(-(1 << 63) <= x < (1 << 63) for x in d)


def test_reachable_ranks():
    assert reachable_ranks(["a"] * 4, 2) == [True] * 4
    assert reachable_ranks(["a", "a", "b", "b"], 0) == [True, True, False, False]
    assert reachable_ranks(["a", "a", "b", "b"], 3) == [False, False, True, True]
    assert reachable_ranks(["a"] * 3, 0, mapped=[True, False, True]) == [True, False, True]
    assert reachable_ranks(["a"] * 2, 1, mapped=[True, False]) == [True, True]   # self always


def test_describe_mismatch():
    assert describe_mismatch([{"p": 1}, {"p": 1}], "p") is None
    msg = describe_mismatch([{"p": 1}, {"p": 2}, {"p": 1}, {"p": 2}], "p", "pool_bytes")
    assert msg == "pool_bytes differs across the group: 1 on ranks [0, 2]; 2 on ranks [1, 3]"


# --- multicast safety ----------------------------------------------------------------------------

SAFE = {"NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0"}


def test_multicast_env_set_when_unset():
    env = {"OTHER": "x"}
    assert disable_multicast_env(env) == {k: "set" for k in SAFE}
    assert env == {"OTHER": "x", **SAFE}
    assert multicast_env_problems(env) == []
    env = {k: "" for k in SAFE}                    # empty counts as unset
    disable_multicast_env(env)
    assert env == SAFE


@pytest.mark.parametrize("name,value", [
    ("NVSHMEM_DISABLE_NVLS", "0"), ("NVSHMEM_DISABLE_NVLS", "false"), ("NVSHMEM_DISABLE_NVLS", "no"),
    ("NVSHMEM_DISABLE_NVLS", "N"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "true"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", " 1"),   # c10 accepts exactly "1"
    ("NCCL_NVLS_ENABLE", "1"), ("NCCL_NVLS_ENABLE", "2"), ("NCCL_NVLS_ENABLE", "yes")])
def test_multicast_env_never_flipped(name, value):
    env = {name: value}
    report = disable_multicast_env(env)
    assert env[name] == value                      # left alone, never rewritten
    assert report[name] == "unsafe"
    assert {k: v for k, v in env.items() if k != name} == {k: v for k, v in SAFE.items() if k != name}
    problems = multicast_env_problems(env)
    assert len(problems) == 1 and problems[0].startswith(f"{name}={value!r}") and SAFE[name] in problems[0]


@pytest.mark.parametrize("name,value", [("NVSHMEM_DISABLE_NVLS", "1"), ("NVSHMEM_DISABLE_NVLS", "true"),
                                        ("NVSHMEM_DISABLE_NVLS", "yes"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                                        ("NCCL_NVLS_ENABLE", "0"), ("NCCL_NVLS_ENABLE", "00")])
def test_multicast_env_safe_values_kept(name, value):
    env = {name: value}
    assert disable_multicast_env(env)[name] == "kept"
    assert env[name] == value and multicast_env_problems(env) == []


def _python(code, env=None):
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_is_light_and_sets_env():
    env = {k: v for k, v in os.environ.items() if k not in SAFE}
    env["NCCL_NVLS_ENABLE"] = "1"          # set by someone to an enabling value: must stay
    out = _python(
        "import os, sys, json\n"
        "import axe.runtime.symmetric\n"
        "heavy = sorted(m for m in sys.modules if m == 'nvshmem' or m.startswith('nvshmem.')"
        " or m.startswith('torch.distributed._symmetric_memory') or m.startswith('cuda.core'))\n"
        "print(json.dumps({'heavy': heavy, 'env': {k: os.environ.get(k) for k in %r}}))" % sorted(SAFE), env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["heavy"] == []
    assert got["env"] == {"NVSHMEM_DISABLE_NVLS": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                          "NCCL_NVLS_ENABLE": "1"}


def test_heap_needs_initialised_distributed():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    with pytest.raises(SymmetricError, match="init_process_group"):
        sm.SymmetricHeap(device="cpu")
    with pytest.raises(SymmetricError, match="backend"):
        sm.SymmetricHeap(backend="mpi")


# --- the heap, two real processes over gloo, file-backed pools -----------------------------------

class _FilePoolBackend:
    """Stands in for torch's CUDA symmetric memory: rank r's pool is the file pool<k>_<r>, mapped
    shared by r and by every rank on r's host, so stores through a peer view reach r."""

    name = "torch"
    counter = itertools.count()

    def open(self, heap):
        import torch
        k = next(self.counter)                     # the same sequence on every rank
        path = lambda g: os.path.join(os.environ["AXE_TEST_DIR"], f"pool{k}_{g}")  # noqa: E731
        with open(path(heap.rank), "wb") as f:
            f.truncate(heap.pool_bytes)
        heap.barrier()
        pools = [torch.from_file(path(g), shared=True, size=heap.pool_bytes, dtype=torch.uint8)
                 if g == heap.rank or heap._same_host[g] else None for g in range(heap.world)]
        return pools[heap.rank], pools

    def close(self, heap, collective):
        if collective:
            heap.barrier()


def _raises(fn, *parts):
    try:
        fn()
    except SymmetricError as e:
        for p in parts:
            assert p in str(e), (p, str(e))
        return str(e)
    raise AssertionError(f"no SymmetricError (expected {parts})")


def _worker():
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.path.join(os.environ["AXE_TEST_DIR"], "store"),
                            rank=rank, world_size=world)
    sm._BACKENDS["torch"] = _FilePoolBackend
    other = 1 - rank
    pool = 1 << 20

    # 1. a heap on one host: views, peers, deltas
    with sm.SymmetricHeap(backend="auto", pool_bytes=pool, device="cpu") as heap:
        assert (heap.rank, heap.world, heap.backend) == (rank, world, "torch")
        assert "nvshmem4py is not importable on ranks [0, 1]" in heap.fallback_reason
        assert heap.reachable(0) and heap.reachable(1)
        x = heap.empty((3, 5), torch.float32)
        y = heap.zeros(7, torch.int16)
        z = heap.empty((), torch.float64)
        assert (x.offset, y.offset, z.offset) == (0, 256, 512)
        assert x.local.shape == (3, 5) and x.local.dtype == torch.float32 and x.local.is_contiguous()
        assert int(y.local.abs().sum()) == 0 and z.local.shape == ()
        assert x.peer(rank) is x.local
        x.local.copy_(torch.arange(15, dtype=torch.float32).view(3, 5) + 100 * rank)
        heap.barrier()
        assert torch.equal(x.peer(other), torch.arange(15, dtype=torch.float32).view(3, 5) + 100 * other)
        y.peer(other)[rank] = 10 + rank                        # store into the peer's copy
        heap.barrier()
        assert int(y.local[other]) == 10 + other
        d = heap.deltas()
        assert d.dtype == torch.int64 and d.shape == (world,) and int(d[rank]) == 0
        assert heap.deltas() is d
        for t in (x, y):                                       # local_ptr + deltas[g] is g's copy
            raw = ctypes.string_at(t.data_ptr() + int(d[other]), t.nbytes)
            assert raw == t.peer(other).numpy().tobytes()
            assert t.data_ptr() + int(d[other]) == t.peer(other).data_ptr()
        heap.verify_allocations()
        assert heap.used_bytes == 512 + 8
        _raises(lambda: heap.empty((1 << 18,), torch.float32), f"rank {rank}/2", f"requested {1 << 20} bytes",
                f"only {pool - 768} bytes are free", f"{pool}-byte pool", "AXE_SYMM_POOL_BYTES")
        _raises(lambda: x.peer(2), "outside the group")
        if rank == 1:
            heap.empty(4, torch.int8)                          # breaks the allocation order rule
        _raises(heap.verify_allocations, "differs from rank 0 on ranks [1]", "buffer #3")
    _raises(lambda: heap.empty(4, torch.int8), "closed")
    _raises(lambda: x.peer(other), "closed")
    heap.close()                                               # idempotent

    # 2. ranks that disagree on the pool size or backend: every rank raises, naming the ranks
    _raises(lambda: sm.SymmetricHeap(backend="torch", pool_bytes=pool * (rank + 1), device="cpu"),
            "pool_bytes differs across the group", f"{pool} on rank [0]", f"{2 * pool} on rank [1]")
    _raises(lambda: sm.SymmetricHeap(backend=["torch", "auto"][rank], pool_bytes=pool, device="cpu"),
            "requested backend differs", "'torch' on rank [0]", "'auto' on rank [1]")
    _raises(lambda: sm.SymmetricHeap(backend="nvshmem", pool_bytes=pool, device="cpu"),
            "backend='nvshmem'", "not importable on ranks [0, 1]")

    # 3. multicast enabled on one rank only: every rank refuses, naming it; the value is kept
    if rank == 1:
        os.environ["NCCL_NVLS_ENABLE"] = "1"
    _raises(lambda: sm.SymmetricHeap(backend="torch", pool_bytes=pool, device="cpu"),
            "multicast", "rank 1: NCCL_NVLS_ENABLE='1'")
    assert os.environ["NCCL_NVLS_ENABLE"] == ("1" if rank == 1 else "0")
    os.environ["NCCL_NVLS_ENABLE"] = "0"

    # 4. two hosts: the peer is not load/store reachable
    sm._hostname = lambda: f"node{rank}"
    with sm.SymmetricHeap(backend="torch", pool_bytes=pool, device="cpu") as heap:
        assert heap.hosts == ["node0", "node1"]
        assert heap.reachable(rank) and not heap.reachable(other)
        heap.empty(1, torch.uint8)
        t = heap.empty(16, torch.uint8)
        assert t.offset == 256
        _raises(lambda: t.peer(other), f"rank {other} (host node{other}) is not load/store reachable")
        assert t.data_ptr() + int(heap.deltas()[other]) == t.offset     # a null-page address
    dist.destroy_process_group()
    print(f"rank {rank} ok")


def test_heap_two_processes(tmp_path):
    env = dict(os.environ, WORLD_SIZE="2", AXE_TEST_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([HERE, ROOT, os.environ.get("PYTHONPATH", "")]))
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.pop(POOL_ENV, None)
    procs = [subprocess.Popen([sys.executable, "-c", "import test_symmetric as t; t._worker()"], cwd=ROOT,
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"rank {r} ok" in out, f"rank {r} (rc {p.returncode}):\n{out}"


# --- the nvshmem backend's call sequence, against a stand-in with nvshmem4py 0.4.1's signatures ---

_FAKE = {
    "nvshmem/__init__.py": "",
    "nvshmem/core/interop/__init__.py": "",
    "nvshmem/core/_internal_tracking.py": """
from enum import IntEnum
class InternalInitStatus(IntEnum):
    UNINITIALIZED = 0
    INITIALIZED = 1
    DE_INITIALIZED = 2
_is_initialized = {"status": InternalInitStatus.UNINITIALIZED}
""",
    "nvshmem/core/__init__.py": """
import json, os
import numpy as np
from ._internal_tracking import _is_initialized, InternalInitStatus
_dt = np.dtype([("version", np.int32), ("internal", np.int8, (124,))], align=True)
STATE = {}
def _log(*a):
    with open(os.path.join(os.environ["AXE_TEST_DIR"], "calls%s" % os.environ["RANK"]), "a") as f:
        f.write(json.dumps(a) + "\\n")
class uniqueid:
    def __init__(self):
        self._data = np.zeros(1, dtype=_dt).view(np.recarray)
def get_unique_id(empty=False):
    u = uniqueid()
    if not empty:
        u._data.view(np.int8)[:] = np.frombuffer(os.urandom(128), dtype=np.int8)
    _log("get_unique_id", empty)
    return u
def init(device=None, uid=None, rank=None, nranks=None, mpi_comm=None, initializer_method=""):
    assert initializer_method == "uid" and uid is not None and mpi_comm is None
    assert type(device).__name__ == "Device", device
    STATE.update(rank=rank, nranks=nranks)
    _is_initialized["status"] = InternalInitStatus.INITIALIZED
    _log("init", rank, nranks, uid._data.view(np.int8).tobytes().hex(), os.environ.get("NVSHMEM_SYMMETRIC_SIZE"))
def finalize():
    _is_initialized["status"] = InternalInitStatus.DE_INITIALIZED
    _log("finalize")
def my_pe():
    return STATE["rank"]
def n_pes():
    return STATE["nranks"]
""",
    "nvshmem/core/interop/torch.py": """
import os, torch
import nvshmem.core as core
_n = [0]
def _path(k, pe):
    return os.path.join(os.environ["AXE_TEST_DIR"], "nv%d_%d" % (k, pe))
def tensor(shape, dtype=torch.float32, release=False, morder="C", except_on_del=True):
    assert dtype == torch.uint8 and len(shape) == 1
    k = _n[0]; _n[0] += 1
    with open(_path(k, core.my_pe()), "wb") as f:
        f.truncate(shape[0])
    t = torch.from_file(_path(k, core.my_pe()), shared=True, size=shape[0], dtype=torch.uint8)
    tensor.made[t.data_ptr()] = (k, shape[0])
    core._log("tensor", list(shape), except_on_del)
    return t
tensor.made = {}
def get_peer_tensor(tensor_, peer_pe=None):
    k, n = tensor.made[tensor_.data_ptr()]
    core._log("get_peer_tensor", peer_pe)
    return torch.from_file(_path(k, peer_pe), shared=True, size=n, dtype=torch.uint8)
def free_tensor(tensor_):
    core._log("free_tensor", tensor.made.pop(tensor_.data_ptr())[0])
""",
    "cuda/__init__.py": "",
    "cuda/core/__init__.py": """
class Device:
    def __init__(self, device_id=None):
        self.device_id = device_id
    def set_current(self):
        pass
""",
}


def _worker_nvshmem():
    import time
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.path.join(os.environ["AXE_TEST_DIR"], "store"),
                            rank=rank, world_size=world)
    pool = 1 << 20
    for round_ in range(2):                      # finalize, then initialise again
        with sm.SymmetricHeap(pool_bytes=pool, device="cpu") as heap:
            assert heap.backend == "nvshmem" and heap.fallback_reason is None
            x = heap.zeros(4, torch.int32)
            heap.empty(3, torch.int8)
            y = heap.empty((2, 2), torch.float16)
            assert (x.offset, y.offset) == (0, 512)
            heap.barrier()                           # every rank has zeroed its copy
            x.peer(1 - rank)[rank] = 7 + rank
            heap.barrier()
            assert x.local.tolist() == [7 + g if g == 1 - rank else 0 for g in range(4)]
            d = heap.deltas()
            assert x.data_ptr() + int(d[1 - rank]) == x.peer(1 - rank).data_ptr()
            with sm.SymmetricHeap(pool_bytes=pool // 2, device="cpu") as h2:    # a second heap, same world
                assert h2.backend == "nvshmem" and h2.reachable(1 - rank)
    time.sleep(0.2)
    dist.destroy_process_group()
    print(f"rank {rank} ok")


def test_nvshmem_backend_sequence(tmp_path):
    fake = tmp_path / "fake"
    for rel, text in _FAKE.items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    env = dict(os.environ, WORLD_SIZE="2", AXE_TEST_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(fake), HERE, ROOT, os.environ.get("PYTHONPATH", "")]))
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env.pop("NVSHMEM_SYMMETRIC_SIZE", None)
    procs = [subprocess.Popen([sys.executable, "-c", "import test_symmetric as t; t._worker_nvshmem()"], cwd=ROOT,
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and f"rank {r} ok" in out, f"rank {r} (rc {p.returncode}):\n{out}"
    calls = [[json.loads(line) for line in (tmp_path / f"calls{r}").read_text().splitlines()] for r in range(2)]
    size = str((1 << 20) + (256 << 20))
    for r in range(2):
        names = [c[0] for c in calls[r]]
        one = ["get_unique_id", "init", "tensor", "get_peer_tensor", "tensor", "get_peer_tensor",
               "free_tensor", "free_tensor", "finalize"]
        assert names == one + one, names
        assert calls[r][0] == ["get_unique_id", r == 1]       # rank 0 makes the id, others an empty one
        assert calls[r][1][1:3] == [r, 2] and calls[r][1][4] == size
        assert calls[r][2] == ["tensor", [1 << 20], False] and calls[r][3] == ["get_peer_tensor", 1 - r]
        assert calls[r][4] == ["tensor", [1 << 19], False]
        assert [c[1] for c in calls[r] if c[0] == "free_tensor"] == [1, 0, 3, 2]   # inner heap first
    for i in (1, 10):                                         # the same unique id reached both ranks
        assert calls[0][i][3] == calls[1][i][3]
    assert calls[0][1][3] != calls[0][10][3]
