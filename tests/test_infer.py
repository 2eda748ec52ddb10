"""Layout inference (issue 27 item 2): tiles declared without a layout get one from the operators
that touch them.  The constructions are checked against brute force; kernels written with open
tiles build, say in ``explain`` what fixed each layout, refuse conflicts naming both operators and
both layouts; random operator chains infer layouts under which every operator reads its register
operands in place, checked by enumerating every element's holders."""

import os
import random

import pytest

from axe.layout import Iter, Layout, parse
from axe.layout.broadcast import broadcast_index
from axe.layout.infer import compact_memory, replicated_for, vector_layout
from axe.layout.layout import all_indices, flatten_index

THREADS = ("tx", "lane")


def _holders(L, shape, u):
    return {tuple(c[a] for a in THREADS) for c in L.map(u, shape)}


def _local(C, n, S, sshape):
    """Brute force: every holder of each consumer element u holds the source's element b(u)."""
    return all(_holders(C, n, u) <= _holders(S, sshape, broadcast_index(u, sshape)) for u in all_indices(n))


def _thread_layout(rng, shape):
    """A random layout spreading ``shape`` over tx and registers (each extent split in two)."""
    shard, off = [], 0
    for e in shape:
        parts = [2, e // 2] if e % 2 == 0 and e > 2 and rng.random() < 0.6 else [e]
        shard += [(p, 1, rng.choice(("tx", "m"))) for p in parts]
    w = {"tx": 1, "m": 1}
    out = []
    for e, _, a in reversed(shard):      # dense strides per axis, innermost first
        out.append(Iter(e, w[a], a))
        w[a] *= e
    reps = [Iter(2, w["tx"], "tx")] if rng.random() < 0.3 else []
    return Layout(tuple(reversed(out)), reps, {"tx": off})


def test_replicated_for_is_local_to_its_consumer():
    rng = random.Random(0)
    for _ in range(300):
        n = tuple(rng.choice((2, 3, 4, 6)) for _ in range(rng.randint(1, 3)))
        sshape = tuple(e if rng.random() < 0.5 else 1 for e in n)[rng.randint(0, len(n) - 1):]
        C = _thread_layout(rng, n)
        S = replicated_for(C, n, sshape)
        assert _local(C, n, S, sshape), (C, n, S, sshape)
        assert S.size == max(1, _prod(sshape))


def _prod(shape):
    out = 1
    for e in shape:
        out *= e
    return out


def test_replicated_for_gives_the_issues_cos_sin_layout():
    x = parse("S[(32,8,8):(8@tx,1@tx,1)]")
    assert replicated_for(x, (32, 64), (1, 64)) == parse("S[(8,8):(1@tx,1)] + R[32:8@tx]")


@pytest.mark.parametrize("shape,eb,threads", [((32, 64), 4, 256), ((64, 128), 2, 128), ((1, 64), 4, 256),
                                              ((6, 24), 2, 32), ((3, 40), 4, 128), ((128,), 1, 64)])
def test_vector_layout_holds_each_element_once_in_row_runs(shape, eb, threads):
    L = vector_layout(shape, eb, threads)
    v = 1
    while v * 2 * eb <= 16 and shape[-1] % (v * 2) == 0:
        v *= 2
    held = {}
    for u in all_indices(shape):
        (c,) = L.map(u, shape)
        assert 0 <= c["tx"] < threads
        assert (c["tx"], c["m"]) not in held
        held[(c["tx"], c["m"])] = u
    assert len(held) == _prod(shape)
    for (t, r), u in held.items():
        if r % v == 0:
            for j in range(1, v):
                w = held[(t, r + j)]
                assert w[:-1] == u[:-1] and flatten_index(w, shape) == flatten_index(u, shape) + j


def test_compact_memory_keeps_threads_and_numbers_registers_densely():
    rng = random.Random(1)
    for _ in range(100):
        n = tuple(rng.choice((2, 3, 4)) for _ in range(3))
        L = _thread_layout(rng, n)
        sparse = Layout(tuple(Iter(e, s * 3, a) if a == "m" else Iter(e, s, a) for e, s, a in L.shard), L.replica,
                        {"m": 5, **dict(L.offset.items())})
        dense = compact_memory(sparse)
        seen = set()
        for u in all_indices(n):
            assert _holders(dense, n, u) == _holders(sparse, n, u)
            seen.add(dense.shard_coord(flatten_index(u, n))["m"])
        assert seen == set(range(_prod([e for e, _, ax in dense.shard if ax == "m"])))


# --- kernels ------------------------------------------------------------------------------------

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402


def _rotary():
    @Ax.kernel(name="rope_inferred")
    def k():
        @T.prim_func
        def k(X_: T.Buffer((32, 128), "float32"), C_: T.Buffer((1, 64), "float32"), Sn_: T.Buffer((1, 64), "float32"),
              Y_: T.Buffer((32, 128), "float32")):
            _bx, _tx = Ax.launch(1, 256)
            X, C, Sn, Y = Ax.param(X_), Ax.param(C_), Ax.param(Sn_), Ax.param(Y_)
            x1 = Ax.registers((32, 64), "float32", name="x1")
            x2 = Ax.registers((32, 64), "float32", name="x2")
            c = Ax.registers((1, 64), "float32", name="cos")
            s = Ax.registers((1, 64), "float32", name="sin")
            y1 = Ax.registers((32, 64), "float32", name="y1")
            y2 = Ax.registers((32, 64), "float32", name="y2")
            Ax.copy(x1, X[0:32, 0:64])
            Ax.copy(x2, X[0:32, 64:128])
            Ax.copy(c, C)
            Ax.copy(s, Sn)
            Ax.elementwise(y1, lambda a, b, co, si: a * co - b * si, x1, x2, c, s)
            Ax.elementwise(y2, lambda a, b, co, si: b * co + a * si, x1, x2, c, s)
            Ax.copy(Y[0:32, 0:64], y1)
            Ax.copy(Y[0:32, 64:128], y2)
        return k
    return k


def test_rotary_with_open_tiles_infers_vectors_and_replicas():
    _, ctx = Ax.build_func(_rotary())
    fixed = {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}
    x = vector_layout((32, 64), 4, 256)
    assert fixed["x1"].layout == x and fixed["x1"].rule.startswith("16-byte vectors")
    assert fixed["cos"].layout == replicated_for(x, (32, 64), (1, 64)) and fixed["cos"].rule.startswith("replicated")
    assert [r.chosen for r in ctx.records] == ["vector"] * 4 + ["per_thread"] * 2 + ["vector"] * 2


def test_explain_prints_each_inferred_layout_and_what_fixed_it():
    text = Ax.explain(_rotary())
    head = text.split("\n\n")[1].splitlines()
    assert head[0] == "inferred layouts" and len(head) == 7
    assert any(line.strip().startswith("cos[1, 64] float32 local: S[(16,4):(1@tx,1)] + R[16:16@tx]") and
               "replicated onto the threads that read it: elementwise at" in line for line in head)


def _two_buffer_kernel(name, shape, dtype, threads, body):
    """A kernel of two buffers ``A_``, ``B_`` of ``shape`` whose body is ``body(A_, B_)``."""
    @Ax.kernel(name=name)
    def k():
        @T.prim_func
        def k(A_: T.Buffer(shape, dtype), B_: T.Buffer(shape, dtype)):
            _bx, _tx = Ax.launch(1, threads)
            body(A_, B_)
        return k
    return k


def test_conflicting_operators_are_named_with_both_layouts():
    def body(A_, B_):
        A, B = Ax.param(A_), Ax.param(B_)
        a = Ax.registers((32, 64), "float32", "S[(32,8,8):(8@tx,1@tx,1)]", name="a")
        b = Ax.registers((32, 64), "float32", "S[(8,32,8):(1@tx,8@tx,1)]", name="b")
        y = Ax.registers((32, 64), "float32", name="y")
        Ax.copy(a, A)
        Ax.copy(b, B)
        Ax.elementwise(y, lambda u: u, a)
        Ax.elementwise(y, lambda u: u + 1, b)
    with pytest.raises(Ax.KernelError) as err:
        Ax.build_func(_two_buffer_kernel("clash", (32, 64), "float32", 256, body))
    msg = str(err.value)
    assert "tile y[32, 64]" in msg and msg.count("elementwise at") == 2
    assert "S[(32,8,8):(8@tx,1@tx,1)]" in msg and "S[(8,32,8):(1@tx,8@tx,1)]" in msg


def test_a_tile_no_operator_fixes_is_named():
    def body(A_, B_):
        Ax.registers((4, 4), "float32", name="idle")
    with pytest.raises(Ax.KernelError, match=r"tile idle\[4, 4\] \(local\): no operator fixes its layout"):
        Ax.build_func(_two_buffer_kernel("loose", (32, 64), "float32", 128, body))


def test_a_shared_tile_takes_the_layout_with_fewest_conflicts():
    """Written from global in 16-byte vectors, read by threads holding a column each (32-way on a
    row-major tile): the inferred layout is the search's first, with fewer conflicts."""
    from axe.layout.swizzle_search import cost, search_swizzle, storage_offsets, warp_accesses

    def body(X_, Y_):
        X, Y = Ax.param(X_), Ax.param(Y_)
        s = Ax.shared((64, 64), "float16", Ax.INFER, name="s")
        r = Ax.registers((64, 64), "float16", "S[(2,32,64):(64@tx,1@tx,1)]", name="r")
        Ax.copy(s, X)
        Ax.sync()
        Ax.copy(r, s)
        Ax.copy(Y, r)
    _, ctx = Ax.build_func(_two_buffer_kernel("smem_inferred", (64, 64), "float16", 128, body))
    (fix,) = ctx.infer.fixed.values()
    write = warp_accesses(vector_layout((64, 64), 2, 128), (64, 64), 8, first_warp=True)
    read = warp_accesses(parse("S[(2,32,64):(64@tx,1@tx,1)]"), (64, 64), 1, first_warp=True)
    best = search_swizzle((64, 64), 2, write, read)[0]
    assert fix.layout == best.layout
    plain = cost(read, storage_offsets(parse("S[(64,64):(64,1)]"), (64, 64)).__getitem__, 2)
    assert plain.worst == 32 and best.read.worst < plain.worst


def test_a_shared_tile_read_through_its_transposed_view_is_searched_in_its_own_coordinates():
    """``copy(r, permute(s, (1, 0)))``: r's layout is over the transposed shape; the search sees
    the accesses it makes in s's coordinates (column reads: 8-way on a row-major tile) and picks a
    swizzle that serves them, not the row-major tile that serves r's rows."""
    from axe.layout.swizzle_search import cost, search_swizzle, storage_offsets, warp_accesses
    from axe.schedules.infer import _permuted
    R = parse("S[(4,128,8):(8,1@tx,1)]")

    def body(X_, Y_):
        X, Y = Ax.param(X_), Ax.param(Y_)
        s = Ax.shared((64, 64), "float16", Ax.INFER, name="s")
        r = Ax.registers((64, 64), "float16", R, name="r")
        Ax.copy(s, X)
        Ax.sync()
        Ax.copy(r, Ax.permute(s, (1, 0)))
        Ax.copy(Y, r)
    _, ctx = Ax.build_func(_two_buffer_kernel("smem_transposed", (64, 64), "float16", 128, body))
    (fix,) = ctx.infer.fixed.values()
    read = warp_accesses(_permuted(R, (64, 64), (1, 0)), (64, 64), 1, first_warp=True)
    assert read[0].lanes[:2] == (0, 512)          # lane 1 reads row 8 of s: a column read
    write = warp_accesses(vector_layout((64, 64), 2, 128), (64, 64), 8, first_warp=True)
    assert fix.layout == search_swizzle((64, 64), 2, write, read)[0].layout
    plain = cost(read, storage_offsets(parse("S[(64,64):(64,1)]"), (64, 64)).__getitem__, 2)
    got = cost(read, storage_offsets(fix.layout, (64, 64)).__getitem__, 2)
    assert plain.worst == 8 and got.worst == 1


# --- property: random chains ----------------------------------------------------------------------

def _chain(rng, i):
    """A random kernel: open register tiles loaded from global, elementwise ops over random
    subsets (with broadcast rows and rank-1 sources), results stored back."""
    rows, cols = rng.choice((4, 8, 16, 32)), rng.choice((16, 32, 64))
    threads = rng.choice((64, 128, 256))
    dtype = rng.choice(("float32", "float16"))
    ops = []
    full = ["t0"]
    bshape = {"b0": rng.choice(((1, cols), (cols,))), "b1": (rows, 1)}
    for j in range(rng.randint(2, 4)):
        srcs = rng.sample(full, min(len(full), rng.randint(1, 2))) + rng.sample(sorted(bshape), rng.randint(0, 2))
        ops.append((f"t{j + 1}", srcs))
        full.append(f"t{j + 1}")

    def body(A_, B0_, B1_, O_):
        A, B0, B1, O = Ax.param(A_), Ax.param(B0_), Ax.param(B1_), Ax.param(O_)
        tiles = {"t0": Ax.registers((rows, cols), dtype, name="t0")}
        tiles["b0"] = Ax.registers(bshape["b0"], dtype, name="b0")
        tiles["b1"] = Ax.registers(bshape["b1"], dtype, name="b1")
        Ax.copy(tiles["t0"], A)
        Ax.copy(tiles["b0"], B0)
        Ax.copy(tiles["b1"], B1)
        for dst, srcs in ops:
            tiles[dst] = Ax.registers((rows, cols), dtype, name=dst)
            Ax.elementwise(tiles[dst], lambda *xs: sum(xs[1:], xs[0]), *[tiles[s] for s in srcs])
        Ax.copy(O, tiles[ops[-1][0]])

    @Ax.kernel(name=f"chain{i}")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((rows, cols), dtype), B0_: T.Buffer((1, cols), dtype), B1_: T.Buffer((rows, 1), dtype),
              O_: T.Buffer((rows, cols), dtype)):
            _bx, _tx = Ax.launch(1, threads)
            body(A_, B0_, B1_, O_)
        return k
    return k


def test_random_chains_infer_layouts_every_operator_reads_in_place():
    rng = random.Random(7)
    for i in range(10):
        _, ctx = Ax.build_func(_chain(rng, i))
        for rec in ctx.records:
            assert rec.chosen != "smem_staged", rec.format()
            if rec.call.op != "elementwise":
                continue
            dst, *srcs = rec.call.operands.values()
            for s in srcs:
                assert _local(dst.layout, tuple(dst.shape), s.layout, tuple(s.shape)), rec.format()


def test_inferred_rmsnorm_has_the_hand_written_row_and_a_replicated_scalar():
    """kernels/inferred/rmsnorm.py: the row takes the hand kernel's ``S[(128,8):(1@tx,1)]``, the
    fp32 squares follow it, the (1, 1) sum of squares is replicated on every thread that scales."""
    import kernels.inferred.rmsnorm as m
    from kernels.rmsnorm import ROW
    _, ctx = Ax.build_func(m.rmsnorm)
    got = {i: f.layout for i, f in ctx.infer.fixed.items()}
    assert got[0] == got[1] == got[2] == ROW
    assert got[3] == parse("S[1:1] + R[128:1@tx]")
