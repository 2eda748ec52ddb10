"""GEMM + reduce-scatter's local work against the plain GEMM's: A read by 2-D boxes (``rs_a="rows"``)
and the ``rs_comm="nowait"`` measurement aid pushing for real.

Oracles: numpy slicing of one buffer seen both ways (the regions' law, brute force over every
scheduled block-row, rank and world size), and the instructions in the PTX of real builds.
"""

import os
import types

import numpy as np
import pytest

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from kernels import gemm_rs  # noqa: E402
from kernels.parts import CompositionError  # noqa: E402
from kernels.parts.schedulers.owner_rows import OwnerRows  # noqa: E402
from kernels.parts.schedulers.owners import OwnerOrder  # noqa: E402

SMALL = (2 * 1024, 1024, 2 * 512, 2)       # M, N, K, world: 1024 rows per owner, 8 row blocks


@pytest.mark.parametrize("world,m_tiles", [(2, 3), (4, 2), (8, 1)])
def test_rows_region_is_the_owners_box(world, m_tiles):
    """For every rank and scheduled block-row, the 2-D box over the (world·M, K) matrix holds exactly
    the elements of the owner's 3-D box over the (owner, M, K) tensor of the same memory."""
    bm, depth, k = 128, 64, 128
    m = m_tiles * bm
    A3 = np.arange(world * m * k).reshape(world, m, k)
    A2 = A3.reshape(world * m, k)
    old = OwnerOrder(m, 512, bm, 256, 132, 16, world)
    new = OwnerRows(m, 512, bm, 256, 132, 16, world)
    for rank in range(world):
        mesh = types.SimpleNamespace(rank=rank)
        seen = set()
        for p in range(world * m_tiles):
            for kb in range(k // depth):
                a = new.a_region(A2, p, kb, bm, depth, mesh)
                b = old.a_region(A3, p, kb, bm, depth, mesh)
                assert a.shape == (bm, depth) and np.array_equal(a, b), (rank, p, kb)
                seen.update(a.ravel().tolist())
        assert seen == set(range(A3.size))      # every element of A is read, by some block-row


def test_rows_refuses_ragged_owners():
    """A 2-D box would run into the next owner's rows when an owner's rows are not whole tiles."""
    with pytest.raises(CompositionError, match="1000 rows must be a multiple of the 128-row tile"):
        OwnerRows(1000, 1000, 128, 256, 132, 16, 2)
    with pytest.raises(ValueError, match="multiple of the 128-row tile"):
        gemm_rs.make(2 * 1000, 1000, 2 * 512, 2, rs_a="rows")
    with pytest.raises(ValueError, match=r"rs_a must be one of \['owners', 'rows'\]"):
        gemm_rs.make(*SMALL, rs_a="flat")


@pytest.fixture(scope="module")
def builds():
    """The default and the 2-D-box variant of one small problem, and the nowait aid."""
    return {name: gemm_rs.build(*SMALL, "bfloat16", "col", name=f"gemm_rs_{name}_test", **kw)
            for name, kw in (("owners", {}), ("rows", {"rs_a": "rows"}), ("nowait", {"rs_comm": "nowait"}))}


def _a_loads(ptx):
    """The TMA loads of A and B by dimensionality (``cp.async.bulk.tensor.Nd`` global → shared)."""
    return {d: ptx.count(f"cp.async.bulk.tensor.{d}d.shared::cluster.global") for d in (2, 3)}


def test_rows_loads_a_with_the_plain_gemms_2d_boxes(builds):
    """The variant's A loads are 2-D TMA boxes, like B's and like the one-GPU GEMM's; the default's A
    loads are 3-D.  A is declared as the rank's plain (M, K/w) shard; the same registers, no spill."""
    owners, rows = builds["owners"], builds["rows"]
    assert _a_loads(owners.ptx)[3] > 0
    assert _a_loads(rows.ptx)[3] == 0 and _a_loads(rows.ptx)[2] == sum(_a_loads(owners.ptx).values())
    a = rows.launch["distributed"]["params"]["A_"]
    assert a["placements"] == "(Shard(1))" and a["local_shape"] == [2048, 512]
    assert a.get("buffer_shape", a["local_shape"]) == [2048, 512]
    maps = {t["param"]: t for t in rows.launch["tensormaps"]}
    assert maps["A_map"]["box"] == [64, 128] and maps["A_map"]["shape"] == [512, 2048]
    r0, r1 = owners.launch["resources"], rows.launch["resources"]
    assert r1["spill_stores"] == r1["spill_loads"] == 0 and r1["registers"] == r0["registers"], (r0, r1)


def test_nowait_pushes_without_the_owners_waiting(builds):
    """``rs_comm="nowait"`` runs the forwarding warps (16-byte peer stores, a system-scope release
    per signal, each warp waiting for its consumers' counter ``F``) like the default, and no owner
    waits for a peer's signal (``sig``)."""
    owners, nowait = builds["owners"], builds["nowait"]
    for art in (owners, nowait):
        pushes = [r for r in art.records if r.call.op == "copy" and r.call.operands["dst"].name == "P_"]
        assert pushes and all(r.chosen == "vector" and "memory of GPU" in r.plan for r in pushes)
        assert "st.release.sys.global.b32" in art.ptx
        assert art.cuda_source.count("axe_wait_signal((&(F__ptr") == 2      # one forwarding warp per warpgroup
    assert "axe_wait_signal((&(sig_ptr" in owners.cuda_source and "axe_wait_signal((&(sig_ptr" not in nowait.cuda_source


def test_rows_composes_like_the_default():
    """The variant is still the owners' order: CTA pairs and ping-pong stay refused."""
    for kw, why in (({"cluster": 2}, "owners' order .* CTA pairs|clusters"), ({"schedule": "pingpong"}, "ping-pong")):
        with pytest.raises(ValueError, match=why):
            gemm_rs.make(8192, 4096, 14336, 2, rs_a="rows", **kw)
