"""Broadcasting in copy and elementwise (issue 27 item 1).

The layout side (:mod:`axe.layout.broadcast`) is checked against brute force: numpy's shape rule,
and :func:`locality` against enumerating every element's holders on random layouts.  The schedule
side builds the GPU case's rotary kernels (tests/gpu/cases_broadcast.py) and checks what dispatch
chose, why the others declined, and the per-thread code it emitted.
"""

import os
import random
import re
import sys

import numpy as np
import pytest
from tvm.script import tirx as T

import axe.lang as Ax

from axe.layout import Iter, Layout, LayoutError, parse
from axe.layout.broadcast import (aligned_shape, broadcast_index, broadcast_shape, locality, needed_replica,
                                  with_replica)
from axe.layout.layout import all_indices

HERE = os.path.dirname(os.path.abspath(__file__))


# --- numpy's rule ---------------------------------------------------------------------------

def test_broadcast_shape_matches_numpy_on_random_shapes():
    rng = random.Random(0)
    for _ in range(400):
        shapes = [tuple(rng.choice((1, 1, 2, 3)) for _ in range(rng.randint(0, 3))) for _ in range(rng.randint(1, 3))]
        try:
            want = np.broadcast_shapes(*shapes)
        except ValueError:
            with pytest.raises(LayoutError, match="neither is 1"):
                broadcast_shape(*shapes)
            continue
        assert broadcast_shape(*shapes) == tuple(want)


def test_broadcast_index_reads_what_numpy_reads():
    rng = np.random.default_rng(1)
    src = rng.standard_normal((3, 1, 4))
    full = np.broadcast_to(src, (2, 3, 5, 4))
    for u in all_indices((2, 3, 5, 4)):
        assert full[u] == src[broadcast_index(u, src.shape)]
    assert aligned_shape((4,), 3) == (1, 1, 4)


# --- locality: brute force ------------------------------------------------------------------

AXES = ("tx", "lane")


def _holders(L, shape, u, axes):
    return {tuple(c[a] for a in axes) for c in L.map(u, shape)}


def _brute_local(C, cshape, S, sshape, axes):
    n = broadcast_shape(cshape, sshape)
    for u in all_indices(n):
        cu = broadcast_index(u, cshape)
        su = broadcast_index(u, sshape)
        if not _holders(C, cshape, cu, axes) <= _holders(S, sshape, su, axes):
            return False
    return True


def _random_layout(rng, shape, axes=("tx", "m", "lane")):
    """A layout over ``shape``: each extent factored into iters on random axes and strides, plus
    random replicas and offsets on the thread axes."""
    shard = []
    for e in shape:
        f = [k for k in (2, 3) if e % k == 0 and e > k]
        parts = [f[0], e // f[0]] if f and rng.random() < 0.5 else [e]
        shard += [Iter(p, rng.choice((1, 2, 3, 4, 8)), rng.choice(axes)) for p in parts]
    reps = [Iter(rng.choice((2, 3, 4)), rng.choice((1, 2, 4, 8)), rng.choice(("tx", "lane")))
            for _ in range(rng.choice((0, 0, 1, 2)))]
    off = {a: rng.choice((0, 0, 1, 2)) for a in ("tx", "lane")}
    return Layout(shard or [Iter(1, 1)], reps, off)


def _random_case(rng):
    n = tuple(rng.choice((1, 2, 3, 4, 6)) for _ in range(rng.randint(1, 3)))
    sshape = tuple(e if rng.random() < 0.5 else 1 for e in n)[rng.randint(0, len(n) - 1):]
    S = _random_layout(rng, sshape)
    return n, (_consumer_like(rng, S, sshape, n) if rng.random() < 0.4 else _random_layout(rng, n)), sshape, S


def _consumer_like(rng, S, sshape, n):
    """A consumer that places S's dims as S does and its broadcast dims in registers or, where S
    replicates, on threads (often local; a random offset or replica sometimes breaks it)."""
    from axe.layout import group
    blocks = group(S, sshape).blocks
    full = aligned_shape(sshape, len(n))
    shard = []
    for d, e in enumerate(n):
        if full[d] > 1:
            shard += list(blocks[d - (len(n) - len(sshape))])
        elif S.replica and rng.random() < 0.5 and S.replica[0][0] % e == 0:
            shard.append(Iter(e, S.replica[0][1] * (S.replica[0][0] // e), S.replica[0][2]))
        else:
            shard.append(Iter(e, rng.choice((1, 4)), "m"))
    reps = [r for r in S.replica if rng.random() < 0.3]
    off = S.offset if rng.random() < 0.8 else {"tx": 1}
    return Layout(shard or [Iter(1, 1)], reps, off)


def test_locality_agrees_with_enumerating_every_elements_holders():
    rng = random.Random(2)
    seen = {True: 0, False: 0}
    for _ in range(400):
        n, C, sshape, S = _random_case(rng)
        got = locality(C, n, S, sshape, AXES).local
        assert got == _brute_local(C, n, S, sshape, AXES), (C, n, S, sshape)
        seen[got] += 1
    assert min(seen.values()) > 20, seen     # both verdicts exercised


def test_a_replica_made_from_a_sources_own_consumer_is_local():
    """Law of the suggestion: with its replica replaced by the suggestion, the source is local."""
    rng = random.Random(3)
    suggested = 0
    for _ in range(400):
        n, C, sshape, S = _random_case(rng)
        v = locality(C, n, S, sshape, AXES)
        if v.local or v.suggestion is None:
            continue
        fixed = with_replica(S, v.suggestion, AXES)
        assert _brute_local(C, n, fixed, sshape, AXES), (C, S, v.suggestion)
        suggested += 1
    assert suggested > 20


def test_needed_replica_is_exactly_the_displacements():
    """Law: the set holds h − proj(f_D^S(b(u)) + O_S) for every u and holder h, and nothing else."""
    rng = random.Random(4)
    for _ in range(200):
        n, C, sshape, S = _random_case(rng)
        want, shard_only = set(), Layout(S.shard, (), S.offset)
        for u in all_indices(n):
            (b,) = shard_only.map(broadcast_index(u, sshape), sshape)
            for h in _holders(C, n, broadcast_index(u, n), AXES):
                want.add(tuple(x - b[a] for x, a in zip(h, AXES)))
        assert needed_replica(C, n, S, sshape, AXES) == want


def test_the_issues_example_is_local_and_its_unreplicated_twin_is_not():
    x = parse("S[(32,8,8):(8@tx,1@tx,1)]")
    cs = parse("S[(8,8):(1@tx,1)] + R[32:8@tx]")
    assert locality(x, (32, 64), cs, (1, 64), ("tx",)).local
    assert locality(x, (32, 64), cs, (64,), ("tx",)).local
    once = parse("S[(8,8):(1@tx,1)]")
    v = locality(x, (32, 64), once, (1, 64), ("tx",))
    assert not v.local and v.witness == {"tx": 8} and v.suggestion == (Iter(32, 8, "tx"),)


# --- the operators and their schedules --------------------------------------------------------

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")


def _cases():
    sys.path.insert(0, os.path.join(HERE, "gpu"))
    import cases_broadcast
    return cases_broadcast


@pytest.mark.parametrize("name", sorted(_cases().VARIANTS))
def test_rotary_variants_choose_the_schedule_their_layouts_call_for(name):
    import axe.lang as Ax
    C = _cases()
    _, ctx = Ax.build_func(C.rope_kernel(name))
    assert [r.chosen for r in ctx.records] == C.VARIANTS[name][4]


def test_unreplicated_source_names_the_replica_that_would_make_it_local():
    import axe.lang as Ax
    C = _cases()
    _, ctx = Ax.build_func(C.rope_kernel("bcast_rope_staged"))
    rec = ctx.records[5]
    reason = dict(rec.verdicts)["per_thread"]
    assert "R[32:8@tx]" in reason and "+8@tx" in reason, reason


def _body(art):
    src = art.cuda_source
    return src[src.index("{", src.index("__global__ void __launch_bounds__")):]


def test_replicated_source_is_read_in_place_by_every_thread():
    """The per-thread code multiplies each x register by the cos/sin register of the same index
    and by the gain's one register: no shared memory, no shuffle, no barrier."""
    import axe.lang as Ax
    body = _body(Ax.compile_kernel(_cases().rope_kernel("bcast_rope_replicated")))
    assert "__shared__" not in body and "__syncthreads" not in body and "shfl_sync((uint)4294967295, v" not in body
    reads = re.findall(r"_ptr_5\[(\d)\] = \(\(\(_ptr\[(\d)\] \* _ptr_2\[(\d)\]\) - \(_ptr_1\[(\d)\] \* "
                       r"_ptr_3\[(\d)\]\)\) \* _ptr_4\[0\]\)", body)
    assert sorted(int(r[0]) for r in reads) == list(range(8))
    assert all(len(set(r)) == 1 for r in reads), reads
    assert "_ptr_4[0] = G__ptr[((((int)blockIdx.x) * 32) + (((int)threadIdx.x) >> 3))];" in body


def test_staged_source_goes_through_shared_memory_between_two_barriers():
    """Each of the two elementwise calls stages cos and sin (a buffer each) between two barriers."""
    import axe.lang as Ax
    body = _body(Ax.compile_kernel(_cases().rope_kernel("bcast_rope_staged")))
    assert body.count("__shared__") == 4 and body.count("__syncthreads()") == 4


def test_copy_refuses_shapes_that_do_not_broadcast():
    from axe.ops import OpError
    from axe.ops.copy import broadcasts_to
    assert broadcasts_to((1, 64), (32, 64)) and broadcasts_to((64,), (32, 64))
    assert not broadcasts_to((2, 64), (32, 64)) and not broadcasts_to((32, 64), (64,))
    from axe.layout import S
    from axe.ops import copy
    from axe.ops.scope import ExecScope
    from axe.ops.tensor import Tensor
    a = Tensor(None, S[(2, 64)], (2, 64), "float32", "local")
    b = Tensor(None, S[(32, 64)], (32, 64), "float32", "local")
    with pytest.raises(OpError, match=r"src shape \[2, 64\] neither matches nor broadcasts to dst shape \[32, 64\]"):
        copy(b, a, ExecScope("cta", cta_threads=128))


def test_per_thread_refusal_at_warp_scope_says_why_staging_does_not_apply():
    from axe.ops import elementwise
    from axe.ops.scope import ExecScope
    from axe.ops.tensor import Tensor
    from axe.schedules import building, candidates
    x = Tensor(None, parse("S[(4,8,8):(8@lane,1@lane,1)]"), (4, 64), "float32", "local")
    c = Tensor(None, parse("S[(8,8):(1@lane,1)]"), (1, 64), "float32", "local")
    warp = ExecScope("warp", tx=tvm.tirx.Var("tx", "int32"), cta_threads=128, lo=0, hi=1)
    call = elementwise(x, lambda a, b: a * b, x, c, scope=warp)
    with building() as ctx:
        by = {s.name: s.check(call, ctx) for s in candidates("elementwise", "cuda")}
    assert "R[4:8@lane]" in by["per_thread"]
    assert "CTA-wide scope" in by["smem_staged"]


def test_trn1_broadcasting_copy_refusal_says_what_to_do_instead():
    """No trn1 copy schedule broadcasts: the refusal says so once and names the workaround (copy at the
    source's shape, broadcast in the operator that reads it) — the newcomer test's finding F4."""
    from axe.layout import F, P, S
    rows = S[(128, 512):(1 @ P, 1 @ F)]

    @Ax.kernel(outputs=("Y",))
    def bcast_copy():
        @T.prim_func
        def bcast_copy(G_: T.Buffer((1, 512), "bfloat16"), Y_: T.Buffer((128, 512), "bfloat16")):
            Ax.neuron.core()
            G, Y = Ax.param(G_), Ax.param(Y_)
            g = Ax.neuron.sbuf((128, 512), "bfloat16", rows, name="g")
            Ax.copy(g, G)
            Ax.copy(Y, g)
        return bcast_copy

    with pytest.raises(Exception) as info:
        Ax.compile_kernel(bcast_copy, "trn1")
    text = str(info.value)
    assert "none of trn1's copy schedules broadcasts" in text, text
    assert "let the operator that reads it broadcast" in text
