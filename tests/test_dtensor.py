"""DTensor placements <-> Axe layouts over gpuid (axe.layout.interop.dtensor).

The pure tests check the conversion against a direct simulation of DTensor's chunking; the
multi-process test builds real torch DTensors (CPU, gloo, 4 processes) and checks every local
element against the layout.
"""

from __future__ import annotations

import itertools
import os
import socket
import time

import pytest

from axe.layout import equivalent, parse
from axe.layout.group import LayoutError
from axe.layout.interop.dtensor import (DeviceMesh, DistributedLayout, LayoutMismatch, Partial, Replicate,
                                        Shard, as_placement, to_layout, to_placements)

ROW = DeviceMesh((2, 2), ("x", "y"))                       # ids [[0, 1], [2, 3]]
PAPER = DeviceMesh.from_ids([[0, 2], [1, 3]], ("x", "y"))  # the Axe paper's Figure 2 grid


# --- a reference: where DTensor puts each element ----------------------------------------------
def holders(shape, mesh, placements, u):
    """{(device id, local row-major offset)} holding global index u, by simulating torch.chunk."""
    out = set()
    for c in itertools.product(*(range(s) for s in mesh.shape)):
        local, ok = [], True
        for d, n in enumerate(shape):
            ks = [k for k, p in enumerate(placements) if isinstance(p, Shard) and p.dim == d]
            ways = 1
            chunk = 0
            for k in ks:                       # mesh dim 0 outer, as torch nests the splits
                chunk = chunk * mesh.shape[k] + c[k]
                ways *= mesh.shape[k]
            size = n // ways
            if u[d] // size != chunk:
                ok = False
            local.append((u[d] % size, size))
        if ok:
            off = 0
            for i, size in local:
                off = off * size + i
            out.add((mesh.device(c), off))
    return out


def layout_holders(dl: DistributedLayout, u):
    return {(c["gpuid"], c["m"]) for c in dl.layout.map(tuple(u), dl.shape)}


def all_placements(ndim, mesh_ndim):
    choices = [Replicate(), Partial()] + [Shard(d) for d in range(ndim)]
    return itertools.product(choices, repeat=mesh_ndim)


MESHES = [ROW, PAPER, DeviceMesh((4,), ("w",)), DeviceMesh((2, 3), ("a", "b"), first=4),
          DeviceMesh((2, 1, 2), ("p", "q", "r"), strides=(1, 7, 2))]


@pytest.mark.parametrize("mesh", MESHES, ids=repr)
def test_layout_matches_dtensor_chunking(mesh):
    """f(u) = {(device, local offset)} for every element, every placement choice (brute force)."""
    shape = (12, 12)
    for pl in all_placements(len(shape), mesh.ndim):
        dl = to_layout(shape, mesh, pl)
        for u in itertools.product(*(range(n) for n in shape)):
            assert layout_holders(dl, u) == holders(shape, mesh, pl, u), (pl, u, dl)
        assert dict(dl.partial) == {mesh.names[k]: "sum" for k, p in enumerate(pl) if isinstance(p, Partial)}
        back = to_placements(dl, None, mesh)
        # a size-1 mesh dimension cannot be told apart: it reads as Replicate (or Partial)
        want = tuple(p if mesh.shape[k] > 1 or not isinstance(p, Shard) else Replicate()
                     for k, p in enumerate(pl))
        assert back == want, (pl, dl)


def test_paper_figure_2_examples():
    # the paper's numbers: its column-major id grid and the *global* row pitch as memory stride
    assert to_layout((64, 128), PAPER, [Shard(0), Shard(1)], memory="global").layout == \
        parse("S[(2,32,2,64):(1@gpuid,128,2@gpuid,1)]")
    s0r = parse("S[(2,32,128):(1@gpuid,128,1)] + R[2:2@gpuid]")
    assert to_layout((64, 128), PAPER, [Shard(0), Replicate()]).layout == s0r   # local == global pitch here
    assert to_placements(s0r, (64, 128), PAPER) == (Shard(0), Replicate())
    # DTensor's local shard of S0S1 is a row-major 32x64 tensor: stride 64, not 128
    s0s1 = to_layout((64, 128), PAPER, [Shard(0), Shard(1)])
    assert s0s1.layout == parse("S[(2,32,2,64):(1@gpuid,64,2@gpuid,1)]")
    with pytest.raises(LayoutError, match=r"tensor dimension 0 has local memory stride 128.*needs 64"):
        to_placements("S[(2,32,2,64):(1@gpuid,128,2@gpuid,1)]", (64, 128), PAPER)
    assert to_placements("S[(2,32,2,64):(1@gpuid,128,2@gpuid,1)]", (64, 128), PAPER,
                         memory="global") == (Shard(0), Shard(1))
    # the same placements on torch's default row-major grid
    assert str(to_layout((64, 128), ROW, [Shard(0), Replicate()])) == "S[(2,32,128):(2@gpuid,128,1)] + R[2:1@gpuid]"
    # the spec's reduce-scatter example: (4,64,64) sharded on dim 0 over 4 GPUs
    mesh4 = DeviceMesh((4,), ("g",))
    assert to_layout((4, 64, 64), mesh4, [Shard(0)]).layout == parse("S[(4,64,64):(1@gpuid,64,1)]")
    assert to_layout((64, 64), mesh4, [Shard(0)]).layout == parse("S[(4,16,64):(1@gpuid,64,1)]")


def test_same_tensor_dim_on_two_mesh_dims_mesh_dim_0_outer():
    dl = to_layout((8, 4), ROW, [Shard(0), Shard(0)])
    assert dl.layout == parse("S[(2,2,2,4):(2@gpuid,1@gpuid,4,1)]")
    # canonicalization merges the two device iters; reading back still finds both mesh dims
    assert to_placements("S[(4,8):(1@gpuid,1)]", (8, 4), ROW) == (Shard(0), Shard(0))
    with pytest.raises(LayoutError, match=r"tensor dimension 0 is split by mesh dimensions 'y', 'x'"):
        to_placements("S[(2,2,2,4):(1@gpuid,2@gpuid,4,1)]", (8, 4), ROW)


def test_partial_is_an_annotation():
    dl = to_layout((4, 4), ROW, [Partial("sum"), Shard(1)])
    assert dl.layout == parse("S[(4,2,2):(2,1@gpuid,1)] + R[2:2@gpuid]")
    assert dl.partial == (("x", "sum"),) and "partial: sum over x" in str(dl)
    assert to_placements(dl.layout, (4, 4), ROW) == (Replicate(), Shard(1))        # the layout alone
    assert to_placements(dl.layout, (4, 4), ROW, partial={"x": "max"}) == (Partial("max"), Shard(1))
    with pytest.raises(LayoutError, match=r"mesh dimension 'y' is declared partial but the layout shards"):
        to_placements(dl.layout, (4, 4), ROW, partial={"y": "sum"})


@pytest.mark.parametrize("text, shape, pattern", [
    ("S[(2,32,2,64):(2@gpuid,64,2@gpuid,1)]", (64, 128), r"mesh dimension 'x' is used twice"),
    ("S[(32,2,2,64):(64,2@gpuid,1@gpuid,1)]", (64, 128), r"tensor dimension 0 has device iter 2:2@gpuid inside memory"),
    ("S[(2,32,128):(2@gpuid,128,1)]", (64, 128), r"mesh dimension 'y' \(size 2, stride 1@gpuid\) is used by neither"),
    ("S[(2,32,128):(2@gpuid,128,1)] + R[2:1]", (64, 128), r"replica 2:1 is on 'm'"),
    ("S[(2,32,128):(2@gpuid,128,1@lane)] + R[2:1@gpuid]", (64, 128), r"axes \['lane'\]"),
    ("S[(2,32,128):(2@gpuid,128,1)] + R[3:1@gpuid]", (64, 128), r"replica: iter 3:1@gpuid does not enumerate whole mesh"),
    ("S[(2,32,128):(2@gpuid,128,1)] + R[2:1@gpuid] + 1@gpuid", (64, 128), r"offset 1@gpuid differs from the mesh's first device 0"),
    ("S[(2,32,128):(2@gpuid,1,32)] + R[2:1@gpuid]", (64, 128), r"tensor dimension 0 has local memory stride 1"),
    ("S[(3,32,128):(2@gpuid,128,1)] + R[2:1@gpuid]", (64, 128), r"does not group by the global shape"),
])
def test_not_a_dtensor_layout(text, shape, pattern):
    with pytest.raises(LayoutError, match=pattern):
        to_placements(text, shape, ROW)


def test_swizzled_is_not_a_dtensor_layout():
    from axe.layout import Swizzle, SwizzledLayout
    with pytest.raises(LayoutError, match=r"SwizzledLayout is not a DTensor layout"):
        to_placements(SwizzledLayout(parse("S[(2,8,8):(1@gpuid,8,1)] + R[2:2@gpuid]"), Swizzle(1, 1, 2)), (16, 8), PAPER)


def test_uneven_and_bad_placements():
    with pytest.raises(LayoutError, match=r"tensor dimension 0 of size 7 is not divisible by the 2 devices "
                                          r"of mesh dimension\(s\) 'x'.*DTensor pads"):
        to_layout((7, 4), ROW, [Shard(0), Replicate()])
    with pytest.raises(LayoutError, match=r"divisible by the 4 devices of mesh dimension\(s\) 'x', 'y'"):
        to_layout((6, 4), ROW, [Shard(0), Shard(0)])
    with pytest.raises(LayoutError, match=r"2 for a mesh of 3 dimensions"):
        to_layout((8, 4), DeviceMesh((2, 2, 2)), [Shard(0), Shard(1)])
    with pytest.raises(LayoutError, match=r"has no dimension 2"):
        to_layout((8, 4), ROW, [Shard(2), Shard(1)])


def test_mesh_values():
    assert ROW.ids() == [[0, 1], [2, 3]] and PAPER.ids() == [[0, 2], [1, 3]]
    assert PAPER.strides == (1, 2) and PAPER.coordinate(2) == (0, 1)
    for mesh in MESHES:
        assert DeviceMesh.from_ids(mesh.ids(), mesh.names) == mesh
    with pytest.raises(LayoutError, match=r"not affine"):
        DeviceMesh.from_ids([[0, 3], [1, 2]])
    with pytest.raises(ValueError, match=r"repeated device ids"):
        DeviceMesh((2, 2), strides=(1, 1))


def test_torch_placements_convert():
    torch_tensor = pytest.importorskip("torch.distributed.tensor")
    assert as_placement(torch_tensor.Shard(1)) == Shard(1)
    assert as_placement(torch_tensor.Replicate()) == Replicate()
    assert as_placement(torch_tensor.Partial("max")) == Partial("max")


# --- real DTensors, 4 processes ------------------------------------------------------------------
WORLD = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check_local(dt, dl, g, rank):
    """Every element this rank holds sits where the layout says, and nothing else is there."""
    import torch
    local = dt.to_local()
    seen = set()
    for u in itertools.product(*(range(n) for n in dl.shape)):
        for c in dl.layout.map(u, dl.shape):
            if c["gpuid"] == rank:
                at = torch.as_strided(local, (1,), (1,), c["m"]).item()    # storage element m
                assert at == g[u].item(), (u, c, dl)
                seen.add(c["m"])
    assert len(seen) == local.numel(), (len(seen), local.numel(), dl)


def _worker(rank, port, failures):
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh as TorchMesh
    from torch.distributed.tensor import DTensor, distribute_tensor
    from torch.distributed.tensor import Partial as TP
    from torch.distributed.tensor import Replicate as TR
    from torch.distributed.tensor import Shard as TS

    from axe.layout.interop.dtensor import check_layout, layout_of, mesh_of

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        row = TorchMesh("cpu", torch.arange(4).reshape(2, 2), mesh_dim_names=("x", "y"))
        paper = TorchMesh("cpu", [[0, 2], [1, 3]], mesh_dim_names=("x", "y"))
        flat = TorchMesh("cpu", torch.arange(4), mesh_dim_names=("w",))
        assert mesh_of(row) == ROW and mesh_of(paper) == PAPER
        g = torch.arange(16 * 8).reshape(16, 8)
        cases = [(row, [TS(0), TS(1)]), (row, [TS(0), TR()]), (row, [TS(0), TS(0)]), (row, [TR(), TS(1)]),
                 (paper, [TS(0), TS(1)]), (paper, [TS(0), TR()]), (paper, [TS(1), TS(0)]),
                 (flat, [TS(1)]), (flat, [TR()])]
        for tmesh, pl in cases:
            dt = distribute_tensor(g, tmesh, pl)
            dl = layout_of(dt)
            assert dl == to_layout((16, 8), mesh_of(tmesh), pl), (pl, dl)
            _check_local(dt, dl, g, rank)
            assert check_layout(dt, dl.layout) == dl
            assert check_layout(dt, str(dl.layout)) == dl

        # the paper's S0S1 numbers (global row pitch) against a real DTensor: names tensor dim 0
        dt = distribute_tensor(torch.zeros(64, 128), paper, [TS(0), TS(1)])
        with pytest.raises(LayoutMismatch, match=r"tensor dimension 0: declared local extent 32 with memory "
                                                 r"stride 128, the DTensor's local tensor has extent 32 with stride 64"):
            check_layout(dt, "S[(2,32,2,64):(1@gpuid,128,2@gpuid,1)]")
        check_layout(dt, "S[(2,32,2,64):(1@gpuid,64,2@gpuid,1)]")
        # S0R declared for an S0S1 tensor: names the mesh axis and the tensor dimensions
        with pytest.raises(LayoutMismatch, match=r"mesh axis 'y' \(size 2\): declared Replicate\(\), the DTensor has Shard\(1\)"):
            check_layout(dt, "S[(2,32,128):(1@gpuid,128,1)] + R[2:2@gpuid]")
        # mesh axes swapped
        with pytest.raises(LayoutMismatch, match=r"mesh axis 'x' \(size 2\): declared Shard\(1\), the DTensor has Shard\(0\)"):
            check_layout(dt, "S[(2,32,2,64):(2@gpuid,64,1@gpuid,1)]")
        # not a DTensor layout at all: per tensor dimension diff plus the reason
        with pytest.raises(LayoutMismatch, match=r"(?s)tensor dimension 1: declared iters.*lane.*not a DTensor layout"):
            check_layout(dt, "S[(2,32,2,64):(1@gpuid,64,2@lane,1)]")
        with pytest.raises(LayoutMismatch, match=r"declared layout has 64 elements"):
            check_layout(dt, "S[(2,32):(1@gpuid,1)]")

        # Partial: the layout is the replicated one; the annotation carries the reduction
        mine = torch.full((16, 8), float(rank))
        dt = DTensor.from_local(mine, row, [TP("sum"), TS(1)], shape=(16, 16), stride=(16, 1))
        dl = layout_of(dt)
        assert dl.partial == (("x", "sum"),)
        assert dl.layout == parse("S[(16,2,8):(8,1@gpuid,1)] + R[2:2@gpuid]")
        check_layout(dt, dl)
        with pytest.raises(LayoutMismatch, match=r"mesh axis 'x' \(size 2\): declared Replicate\(\), the DTensor has Partial\('sum'\)"):
            check_layout(dt, dl._replace(partial=()))

        # a non-contiguous local shard: the memory part is read from its strides
        local = torch.arange(8 * 8).reshape(8, 8).t().contiguous().t()      # column-major 8x8
        dt = DTensor.from_local(local, row, [TS(0), TS(1)], shape=(16, 16), stride=(16, 1))
        assert layout_of(dt).layout == parse("S[(2,8,2,8):(2@gpuid,1,1@gpuid,8)]")
        _check_local(dt, layout_of(dt), dt.full_tensor(), rank)
        with pytest.raises(LayoutMismatch, match=r"tensor dimension 0: declared local extent 8 with memory stride 8, "
                                                 r"the DTensor's local tensor has extent 8 with stride 1"):
            check_layout(dt, to_layout((16, 16), ROW, [Shard(0), Shard(1)]))

        # uneven shards: DTensor pads, Axe refuses with the reason
        dt = distribute_tensor(torch.zeros(7, 8), row, [TS(0), TR()])
        with pytest.raises(LayoutError, match=r"tensor dimension 0 of size 7 is not divisible by the 2 devices"):
            layout_of(dt)
    except BaseException as err:  # report, then let every rank leave the process group
        failures.put(f"rank {rank}: {type(err).__name__}: {err}")
        raise
    finally:
        dist.destroy_process_group()


def test_real_dtensors_four_processes():
    pytest.importorskip("torch.distributed.tensor")
    import torch.distributed as dist
    import torch.multiprocessing as mp
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    ctx = mp.get_context("spawn")
    failures = ctx.SimpleQueue()
    start = time.monotonic()
    procs = mp.start_processes(_worker, args=(_free_port(), failures), nprocs=WORLD, join=False,
                               start_method="spawn")
    try:
        while not procs.join(timeout=1):
            if time.monotonic() - start > 55:
                raise TimeoutError("the 4-process DTensor test ran over 55 s")
    except Exception:
        msgs = []
        while not failures.empty():
            msgs.append(failures.get())
        for p in procs.processes:
            if p.is_alive():
                p.kill()
        if msgs:
            pytest.fail("\n".join(msgs))
        raise
