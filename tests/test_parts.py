"""The GEMM parts on their own (kernels/parts): each scheduler's law against a brute-force model,
the split-K protocol's deadlock freedom, and the refusals of impossible compositions."""

import itertools

import pytest

pytest.importorskip("tvm")

from kernels import gemm, gemm_rs  # noqa: E402
from kernels.parts import CompositionError, Problem, compose  # noqa: E402
from kernels.parts.epilogues.handover import Handover, SplitKHandover  # noqa: E402
from kernels.parts.epilogues.reduce_scatter import ReduceScatter  # noqa: E402
from kernels.parts.epilogues.store import ChunkedStore, chunking  # noqa: E402
from kernels.parts.mainloops.tcgen05 import Tcgen05  # noqa: E402
from kernels.parts.mainloops.tma_wgmma import Cooperative, MulticastB, PingPong, WholeB  # noqa: E402
from kernels.parts.schedulers.owners import OwnerOrder  # noqa: E402
from kernels.parts.schedulers.persistent import Persistent  # noqa: E402
from kernels.parts.schedulers.split_k import SplitK  # noqa: E402
from kernels.parts.schedulers.stream_k import StreamKSchedule  # noqa: E402


@pytest.mark.parametrize("M,N,ctas,group,stack", [(1000, 1000, 132, 16, 1), (128 * 7, 256 * 5, 8, 3, 2),
                                                  (128, 256, 132, 16, 1), (128 * 33, 2048, 10, 16, 1)])
def test_persistent_covers_every_tile_once(M, N, ctas, group, stack):
    s = Persistent(M, N, 128, 256, ctas, group, stack=stack)
    seen = [s.coords(c, i, r) for c in range(ctas) for i in range(max(s.count(c), 0)) for r in range(stack)]
    rows = -(-s.m_tiles // stack) * stack
    assert sorted(seen) == sorted(itertools.product(range(rows), range(s.n_tiles)))
    assert s.past_rows == (rows != s.m_tiles)


@pytest.mark.parametrize("world", [2, 3, 4])
def test_owner_order_visits_each_owner_block_once_own_last(world):
    s = OwnerOrder(300, 700, 128, 256, 5, 4, world)
    for rank in range(world):
        seen = []
        for c in range(5):
            for i in range(s.count(c)):
                p, n = s.coords(c, i)
                seg, j = s.segment(p)
                seen.append((s.owner(rank, seg), j, n))
        assert sorted(seen) == sorted(itertools.product(range(world), range(s.m_tiles), range(s.n_tiles)))
        assert s.owner(rank, world - 1) == rank


@pytest.mark.parametrize("M,N,K_iters,slices,ctas", [(256, 1024, 64, 8, 132), (200, 1000, 16, 3, 8),
                                                     (128, 512, 8, 2, 1), (640, 2048, 224, 7, 132), (128, 256, 10, 4, 3)])
def test_split_k_covers_every_k_block_once(M, N, K_iters, slices, ctas):
    s = SplitK(M, N, 128, 256, ctas, 16, K_iters, slices, 64)
    done = {}
    for c in range(ctas):
        for t, sl, k0, k1 in s.units_of(c):
            assert k1 - k0 == s.L >= 2
            for kb in range(k0, min(k1, K_iters)):
                done[t, kb] = done.get((t, kb), 0) + 1
    assert done == {(t, kb): 1 for t in range(s.tiles) for kb in range(K_iters)}
    assert s.workspace == (s.tiles * (slices - 1) * 128, 256) and s.flags(ctas) == (s.tiles * (slices - 1) * 2,)


@pytest.mark.parametrize("tiles_n,slices,ctas", [(4, 8, 132), (8, 3, 8), (2, 2, 1), (16, 5, 3), (3, 4, 5)])
def test_split_k_reduction_never_deadlocks(tiles_n, slices, ctas):
    """Every CTA runs its units in order; a unit below the last slice publishes, the last slice
    waits for slices 0..S-2 of its tile in that order.  Stepping all CTAs until none can move must
    finish every unit (co-resident CTAs: the kernel's persistent grid)."""
    s = SplitK(128, 256 * tiles_n, 128, 256, ctas, 16, 4 * slices, slices, 64)
    queue = {c: list(s.units_of(c)) for c in range(ctas)}
    published, stored = set(), set()
    moved = True
    while moved:
        moved = False
        for c, units in queue.items():
            if not units:
                continue
            t, sl, _, _ = units[0]
            if sl < slices - 1:
                published.add((t, sl))
            elif all((t, r) in published for r in range(slices - 1)):
                stored.add(t)
            else:
                continue
            units.pop(0)
            moved = True
    assert not any(queue.values()), {c: u[:1] for c, u in queue.items() if u}
    assert stored == set(range(s.tiles))


def test_split_k_refuses_what_it_cannot_cut():
    with pytest.raises(ValueError, match="at least 2 k-blocks per slice"):
        SplitK(128, 256, 128, 256, 132, 16, 8, 8, 64)       # slices of one k-block
    with pytest.raises(ValueError, match="every slice inside K"):
        SplitK(128, 256, 128, 256, 132, 16, 9, 4, 64)       # 4 slices of 3: the last starts at K
    with pytest.raises(ValueError, match="split_k"):
        gemm.make_dynamic(1024, 4096, split_k=4)
    with pytest.raises(ValueError, match="two tile schedulers"):
        gemm.make(256, 1024, 4096, stream_k=True, split_k=4)


def test_chunking_law():
    assert chunking(128, 256) == (2, 1) and chunking(64, 256) == (4, 2) and chunking(256, 256) == (1, 1)
    for bad in ((96, 256), (128, 192)):
        with pytest.raises(ValueError, match="epilogue chunk"):
            chunking(*bad)


def _parts(sched, main=None, epi=None):
    main = main or Cooperative("float16", "row", 128, 256, 64, 4, 16, 0, WholeB())
    return sched, main, (epi(main, sched) if callable(epi) else epi) or ChunkedStore(main, sched, "float16", 128)


def test_compose_refuses_impossible_combinations_naming_the_parts():
    sk = StreamKSchedule(8192, 4096, 128, 256, 132, 16, 16, 64, 256)
    main = Cooperative("float16", "row", 128, 256, 64, 4, 16, 0, WholeB())
    store = ChunkedStore(main, sk, "float16", 128)
    with pytest.raises(CompositionError, match="stream-K scheduler .* reduce-scatter .* no partial hand-over"):
        compose(sk, main, ReduceScatter(store, sk, 4096, 1024, 4096, 2, "col", (4096, 1024)))
    compose(sk, main, Handover(store, 16))             # the hand-over makes it work
    pp = PingPong("float16", "row", 256, 64, 4, 16, 1, WholeB())
    with pytest.raises(CompositionError, match="ping-pong .* split tiles"):
        compose(sk, pp, Handover(ChunkedStore(pp, sk, "float16", 256), 16))
    tc = Tcgen05("float16", "row", 128, 256, 64, 4, 16, 0, 1)
    own = OwnerOrder(4096, 4096, 128, 256, 132, 16, 2)
    with pytest.raises(CompositionError, match="tcgen05.* reduce-scatter"):
        compose(own, tc, ReduceScatter(ChunkedStore(tc, own, "float16", 64), own, 4096, 1024, 4096, 2, "col", (4096, 1024)))
    with pytest.raises(CompositionError, match="clusters of 1 .* CTA groups of 2"):
        c2 = Cooperative("float16", "row", 128, 256, 64, 4, 16, 0, MulticastB())
        compose(Persistent(4096, 4096, 128, 256, 66, 16), c2, ChunkedStore(c2, own, "float16", 128))
    split = SplitK(256, 1024, 128, 256, 132, 16, 64, 8, 64)
    with pytest.raises(CompositionError, match="split-K scheduler .* no partial hand-over"):
        compose(split, main, ChunkedStore(main, split, "float16", 128))
    compose(split, main, SplitKHandover(ChunkedStore(main, split, "float16", 128), 8))


def test_kernels_refuse_when_composed():
    """The kernels surface the refusal at make(), naming both parts."""
    with pytest.raises(ValueError, match="stream-K scheduler .* reduce-scatter"):
        gemm_rs.make(8192, 4096, 14336, 2, stream_k=True)
    with pytest.raises(ValueError, match="owners' order .* CTA pairs|clusters"):
        gemm_rs.make(8192, 4096, 14336, 2, cluster=2)
    with pytest.raises(ValueError, match="ping-pong"):
        gemm_rs.make(8192, 4096, 14336, 2, schedule="pingpong")


def test_problem_shapes():
    p = Problem(100, 300, 200, "float16", "col")
    assert p.a_shape == (100, 200) and p.b_shape == (300, 200)
    assert Problem(100, 300, 200, "float16", "row", a_shape=(2, 100, 200)).b_shape == (200, 300)


@pytest.mark.parametrize("bk", [64, 128])
def test_warpgroup_rows_are_a_row_range_of_the_slot_tile(bk):
    """A consumer warpgroup's view of its 64 rows of a slot's 128-row A tile addresses exactly the
    elements the whole tile puts there (with two 64-column panels the rows are a range of both)."""
    from kernels.parts.tiles import swizzled
    main = Cooperative("float16", "col", 128, 128, bk, 3, 4, 0, WholeB())
    full = swizzled(128, bk)
    part = swizzled(64, bk, panel=128 * 64)
    for wg in (0, 1):
        for r in range(0, 64, 7):
            for c in range(bk):
                want = full.map((wg * 64 + r) * bk + c)
                got = {x + main.a_offset(wg) for x in part.map(r * bk + c)}
                assert got == want, (wg, r, c)
    if bk > 64:     # the view the 128-deep k-block used to take (a 64-row tile of its own) is not it
        wrong = swizzled(64, bk)
        assert any({x + 64 * bk for x in wrong.map(r * bk + c)} != full.map((64 + r) * bk + c)
                   for r in range(64) for c in range(bk))
