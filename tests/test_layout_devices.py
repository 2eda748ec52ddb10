"""Which part of a tensor each device holds (axe.layout.devices), against brute force.

The law under test, for every global element x and rank g:
``(g, off) ∈ {(c[gpuid], c[m]) | c ∈ L.map(x, shape)}`` ⇔ x lies in a box b of ``boxes[g]``
and ``off == local.map(x − b.lows)[m]``.
"""

from __future__ import annotations

import itertools
from math import prod

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from axe.layout import (DeviceBox, DeviceSharding, Iter, Layout, LayoutError, R, S, Swizzle, SwizzledLayout,
                        device_sharding, gpuid, warp)
from axe.layout.interop.dtensor import DeviceMesh, Partial, Replicate, Shard, to_layout
from layout_oracles import layouts, shapes_for

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# --- the oracle ------------------------------------------------------------------------------
def held_by_map(L, shape, x, axis="gpuid"):
    return {(c[axis], c["m"]) for c in L.map(tuple(x), shape)}


def held_by_boxes(ds: DeviceSharding, x):
    out = set()
    for g, bs in ds.boxes.items():
        for b in bs:
            if b.contains(x):
                y = tuple(xi - lo for xi, lo in zip(x, b.lows))
                pts = ds.local.map(y, ds.local_shape())
                assert len(pts) == 1, f"local layout {ds.local} is not single-valued at {y}"
                (c,) = pts
                out.add((g, c["m"]))
    return out


def check_law(L, shape, ds: DeviceSharding, axis="gpuid"):
    """The module's law by brute force over every element, plus the facts it promises."""
    shape = tuple(shape)
    assert ds.shape == shape
    assert set(ds.boxes) == set(range(ds.world))
    exts = ds.local_shape()
    assert all(b.exts == exts for bs in ds.boxes.values() for b in bs)
    assert ds.local.replica == () and set(ds.local.axes()) <= {"m"}
    assert ds.local.size == prod(exts)
    for g, bs in ds.boxes.items():
        assert list(bs) == sorted(bs, key=lambda b: b.lows)
        assert len({b.lows for b in bs}) == len(bs)           # disjoint: same exts, aligned lows
    seen = set()
    for x in itertools.product(*(range(n) for n in shape)):
        want = held_by_map(L, shape, x, axis)
        assert held_by_boxes(ds, x) == want, (L, shape, x)
        ranks = tuple(sorted({g for g, _ in want}))
        assert ds.owners(x) == ranks
        for g, off in want:
            assert ds.local_offset(x, g) == off
        for g in set(range(ds.world)) - set(ranks):
            assert ds.local_offset(x, g) is None
        seen |= {g for g, _ in want}
    assert ds.world == 1 + max(seen)


def rows(ds, g):
    return [(b.lows, b.exts) for b in ds.boxes[g]]


# --- the brief's examples --------------------------------------------------------------------
def test_row_shard_over_two_gpus():
    L = S[(2, 32, 128):(1@gpuid, 128, 1)]
    ds = device_sharding(L, (64, 128))
    assert ds.world == 2
    assert ds.boxes == {0: (DeviceBox((0, 0), (32, 128)),), 1: (DeviceBox((32, 0), (32, 128)),)}
    assert ds.local == S[(32, 128):(128, 1)]
    assert ds.local_shape() == (32, 128)
    check_law(L, (64, 128), ds)


def test_dtensor_shard_replicate():
    dl = to_layout((64, 128), DeviceMesh((2, 2), ("x", "y")), [Shard(0), Replicate()])
    assert dl.layout == S[(2, 32, 128):(2@gpuid, 128, 1)] + R[2:1@gpuid]
    ds = device_sharding(dl.layout, dl.shape)
    assert ds.world == 4
    top, bottom = DeviceBox((0, 0), (32, 128)), DeviceBox((32, 0), (32, 128))
    assert ds.boxes == {0: (top,), 1: (top,), 2: (bottom,), 3: (bottom,)}
    assert ds.owners((5, 7)) == (0, 1) and ds.owners((40, 0)) == (2, 3)
    assert ds.local_offset((40, 3), 3) == 8 * 128 + 3
    check_law(dl.layout, dl.shape, ds)


def test_reduce_scatter_signature():
    src = S[(4, 64, 64):(1@gpuid, 64, 1)]
    ds_in = device_sharding(src, (4, 64, 64))
    assert ds_in.world == 4
    assert all(rows(ds_in, g) == [((g, 0, 0), (1, 64, 64))] for g in range(4))
    assert ds_in.local == S[(64, 64):(64, 1)]
    dst = S[(4, 16, 64):(1@gpuid, 64, 1)]
    ds_out = device_sharding(dst, (64, 64))
    assert ds_out.world == 4
    assert all(rows(ds_out, g) == [((16 * g, 0), (16, 64))] for g in range(4))
    assert ds_out.local == S[(16, 64):(64, 1)]
    check_law(dst, (64, 64), ds_out)
    check_law(src, (4, 64, 64), ds_in)


def test_column_shard():
    L = S[(64, 2, 64):(64, 1@gpuid, 1)]
    ds = device_sharding(L, (64, 128))
    assert all(rows(ds, g) == [((0, 64 * g), (64, 64))] for g in range(2))
    assert ds.local == S[(64, 64):(64, 1)]
    check_law(L, (64, 128), ds)


def test_fully_replicated():
    L = S[(64, 128):(128, 1)] + R[4:1@gpuid]
    ds = device_sharding(L, (64, 128))
    assert ds.world == 4
    assert all(rows(ds, g) == [((0, 0), (64, 128))] for g in range(4))
    assert ds.owners((63, 127)) == (0, 1, 2, 3)
    assert ds.local == S[(64, 128):(128, 1)]


# --- more shapes of the answer -----------------------------------------------------------------
def test_paper_fully_sharded_2x2():
    L = S[(2, 32, 2, 64):(1@gpuid, 128, 2@gpuid, 1)]    # the paper's S0S1, global row pitch
    ds = device_sharding(L, (64, 128))
    for g in range(4):
        assert rows(ds, g) == [((32 * (g % 2), 64 * (g // 2)), (32, 64))]
    assert ds.local == S[(32, 64):(128, 1)]
    check_law(L, (64, 128), ds)


def test_offsets_and_gaps():
    L = S[(2, 4):(2@gpuid, 1)] + 1@gpuid + 7              # ranks 1 and 3; 0 and 2 hold nothing
    ds = device_sharding(L, (8,))
    assert ds.world == 4
    assert ds.boxes[0] == () and ds.boxes[2] == ()
    assert rows(ds, 1) == [((0,), (4,))] and rows(ds, 3) == [((4,), (4,))]
    assert ds.local == S[4:1] + 7
    check_law(L, (8,), ds)
    whole = S[(4, 4)] + 3@gpuid                            # no device iters: all on rank O[gpuid]
    ds = device_sharding(whole, (4, 4))
    assert ds.world == 4 and rows(ds, 3) == [((0, 0), (4, 4))]
    assert all(ds.boxes[g] == () for g in range(3))


def test_negative_device_stride():
    L = S[(2, 4):(-1@gpuid, 1)] + 1@gpuid                  # first half on rank 1, second on rank 0
    ds = device_sharding(L, (8,))
    assert rows(ds, 1) == [((0,), (4,))] and rows(ds, 0) == [((4,), (4,))]
    check_law(L, (8,), ds)


def test_rank_with_several_boxes():
    # two device digits of one stride: rank 1 holds rows 1 and 2 (digits (0,1) and (1,0))
    L = S[(2, 2, 4):(1@gpuid, 1@gpuid, 1)]
    ds = device_sharding(L, (4, 4))
    assert ds.world == 3
    assert rows(ds, 1) == [((1, 0), (1, 4)), ((2, 0), (1, 4))]
    check_law(L, (4, 4), ds)
    # a replica landing on a shard's rank: rank 1 holds both halves
    L = S[(2, 4):(1@gpuid, 1)] + R[2:1@gpuid]
    ds = device_sharding(L, (8,))
    assert rows(ds, 1) == [((0,), (4,)), ((4,), (4,))] and ds.owners((5,)) == (1, 2)
    check_law(L, (8,), ds)


def test_every_element_on_its_own_device():
    L = S[(2, 3):(3@gpuid, 1@gpuid)]
    ds = device_sharding(L, (2, 3))
    assert ds.local_shape() == (1, 1) and ds.local.size == 1
    assert all(rows(ds, 3 * i + j) == [((i, j), (1, 1))] for i in range(2) for j in range(3))
    check_law(L, (2, 3), ds)


def test_tiled_memory_in_a_dim_and_text_input():
    # dim 1's block has two memory iters (a column-tiled local buffer); the flat index works too
    text = "S[(2,4,2,8):(1@gpuid,8,32,1)]"
    ds = device_sharding(text, (8, 16))
    assert ds.local == S[(4, 2, 8):(8, 32, 1)] and ds.local_shape() == (4, 16)
    assert ds.owners(16 * 5 + 9) == ds.owners((5, 9)) == (1,)
    assert ds.local_offset((5, 9), 1) == 1 * 8 + 32 + 1
    check_law(S[(2, 4, 2, 8):(1@gpuid, 8, 32, 1)], (8, 16), ds)


def test_other_device_axis():
    L = S[(2, 4):(1@warp, 1)]
    ds = device_sharding(L, (8,), axis="warp")
    assert rows(ds, 1) == [((4,), (4,))]
    check_law(L, (8,), ds, axis="warp")


MESHES = [DeviceMesh((2, 2), ("x", "y")), DeviceMesh.from_ids([[0, 2], [1, 3]], ("x", "y")),
          DeviceMesh((4,), ("w",)), DeviceMesh((2, 3), ("a", "b"), first=4)]


@pytest.mark.parametrize("mesh", MESHES, ids=lambda m: str(m.ids()))
def test_every_dtensor_layout_is_supported(mesh):
    shape = (12, 12)
    choices = [Replicate(), Partial(), Shard(0), Shard(1)]
    for placements in itertools.product(choices, repeat=mesh.ndim):
        try:
            dl = to_layout(shape, mesh, placements)
        except LayoutError:
            continue                                  # uneven shard: DTensor pads, Axe refuses
        check_law(dl.layout, shape, device_sharding(dl.layout, shape))


# --- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("L, shape, says", [
    (S[(64, 2, 64):(128, 64, 1@gpuid)], (64, 128), "dim 1 has a gpuid iter 64:1@gpuid inside a memory iter"),
    (S[(64, 2):(1, 1@gpuid)], (128,), "dim 0 has a gpuid iter"),
    (S[(2, 4):(1@gpuid, 1)] + R[2:4], (8,), "replica 2:4 is over memory"),
    (S[(2, 4):(1@warp, 1)], (8,), "axes ['warp']"),
    (S[(2, 4):(1@gpuid, 1)] + 1@warp, (8,), "axes ['warp']"),
    (S[(2, 4):(-1@gpuid, 1)], (8,), "device -1 < 0"),
    (S[(2, 4):(1@gpuid, 1)] + R[2:-3@gpuid] + 2@gpuid, (8,), "< 0"),
    (S[(2, 4):(1@gpuid, 1)], (3, 3), "does not group"),
])
def test_refusals(L, shape, says):
    with pytest.raises(LayoutError) as err:
        device_sharding(L, shape)
    assert says in str(err.value) and str(L) in str(err.value)


def test_refuses_swizzle_and_non_layouts():
    sw = SwizzledLayout(S[(2, 8, 8):(1@gpuid, 8, 1)], Swizzle(1, 0, 1))
    with pytest.raises(LayoutError, match="swizzled"):
        device_sharding(sw, (16, 8))
    dl = to_layout((8, 8), DeviceMesh((2,), ("x",)), [Shard(0)])
    with pytest.raises(LayoutError, match="DistributedLayout"):
        device_sharding(dl, (8, 8))
    with pytest.raises(LayoutError, match="memory axis"):
        device_sharding(S[8:1], (8,), axis="m")


def test_extent_one_iters_touch_nothing():
    L = Layout([Iter(2, 1, "gpuid"), Iter(1, 5, "warp"), Iter(4, 1)], [Iter(1, 3, "m")])
    ds = device_sharding(L, (8,))
    assert rows(ds, 1) == [((4,), (4,))]
    check_law(L, (8,), ds)


# --- properties --------------------------------------------------------------------------------
nonzero = lambda lo, hi: st.integers(lo, hi).filter(bool)  # noqa: E731


def _extreme(its, pick):
    return sum(pick(0, (e - 1) * s) for e, s, _ in its)


@st.composite
def supported(draw, max_size=64, max_world=8):
    """A layout of the supported class over a shape: per dim, device iters then memory iters."""
    rank = draw(st.integers(1, 3))
    shard, shape, size = [], [], 1
    for _ in range(rank):
        n = 1
        for ax, count, ext, stride in (("gpuid", 2, 3, nonzero(-3, 3)), ("m", 2, 4, nonzero(-8, 8))):
            for _ in range(draw(st.integers(0, count))):
                e = draw(st.integers(1, ext))
                if size * n * e > max_size:
                    continue
                shard.append(Iter(e, draw(stride), ax))
                n *= e
        if draw(st.integers(0, 9)) == 0:                  # an extent-1 iter on another axis
            shard.append(Iter(1, draw(nonzero(-4, 4)), "warp"))
        shape.append(n)
        size *= n
    replica = draw(st.lists(st.builds(Iter, st.integers(1, 3), nonzero(-2, 2), st.just("gpuid")), max_size=2))
    devs = [i for i in shard if i[2] == "gpuid"] + replica
    low = _extreme(devs, min)
    first = -low + draw(st.integers(0, 2))
    assume(first + _extreme(devs, max) < max_world)
    return Layout(shard or [Iter(1, 1)], replica, {"gpuid": first, "m": draw(st.integers(-8, 8))}), tuple(shape)


@SETTINGS
@given(supported())
def test_law_on_supported_layouts(case):
    L, shape = case
    check_law(L, shape, device_sharding(L, shape))


@st.composite
def unsupported(draw):
    """A supported layout spoiled in one way that no regrouping can undo."""
    L, shape = draw(supported(max_size=32))
    shard, replica, offset = list(L.shard), list(L.replica), dict(L.offset)
    how = draw(st.sampled_from(["gpuid inside m", "R over m", "other axis", "negative id", "swizzle"]))
    if how == "gpuid inside m":
        # the dim's block ends in memory iter, device iter: both extent >= 2, so they stay apart
        d = draw(st.integers(0, len(shape) - 1))
        end = _block_end(L, shape, d)
        e1, e2 = draw(st.integers(2, 3)), draw(st.integers(2, 3))
        shard[end:end] = [Iter(e1, draw(nonzero(-8, 8))), Iter(e2, draw(nonzero(-3, 3)), "gpuid")]
        shape = shape[:d] + (shape[d] * e1 * e2,) + shape[d + 1:]
        offset["gpuid"] = offset.get("gpuid", 0) + 3 * (e2 - 1)  # keep ids >= 0: only the order is wrong
    elif how == "R over m":
        replica.append(Iter(draw(st.integers(2, 3)), draw(nonzero(-4, 4))))
    elif how == "other axis":
        if draw(st.booleans()):
            replica.append(Iter(draw(st.integers(2, 3)), draw(nonzero(-2, 2)), "warp"))
        else:
            offset["warp"] = draw(nonzero(-3, 3))
    elif how == "negative id":
        devs = [i for i in shard if i[2] == "gpuid"] + replica
        offset["gpuid"] = -_extreme(devs, min) - draw(st.integers(1, 3))
    out = Layout(shard, replica, offset)
    if how == "swizzle":
        out = SwizzledLayout(out, Swizzle(1, 0, 1))
    return out, shape, how


def _block_end(L, shape, d):
    """The index in L.shard just past dim d's iters (the shard is dims' blocks, in order)."""
    target, acc, k = prod(shape[:d + 1]), 1, 0
    while acc < target:
        acc *= L.shard[k][0]
        k += 1
    return k


@SETTINGS
@given(unsupported())
def test_unsupported_layouts_are_refused(case):
    L, shape, how = case
    with pytest.raises(LayoutError) as err:
        device_sharding(L, shape)
    assert str(L) in str(err.value)


@SETTINGS
@given(st.data())
def test_any_layout_is_refused_or_exact(data):
    """Random layouts over gpuid and m (any order, replicas on both): LayoutError or the law."""
    L = data.draw(layouts(axes=("m", "gpuid"), max_extent=3))
    shape = data.draw(shapes_for(L.size))
    try:
        ds = device_sharding(L, shape)
    except LayoutError:
        return
    check_law(L, shape, ds)
