"""The MoE layer's CPU checks (kernels/moe.py; GPU correctness: tests/gpu/cases_moe.py).

- the padding law of grouped tiles (kernels.parts.schedulers.padding) against a brute-force numpy model of
  the permutation, empty groups included, and the capacity bound against random routings;
- the ``gather`` operator: signature errors, dispatch (which schedule, which declines and why);
- every MoE kernel builds for sm_90a, ptxas accepts it with no spills, and its PTX holds the
  instructions its schedules chose.
"""

import re

import numpy as np
import pytest

from kernels.parts.schedulers.padding import capacity, segments, tile_capacity, tile_groups, tiles

tvm = pytest.importorskip("tvm")
from tvm.script import tirx as T  # noqa: E402 - the kernels below are TVMScript (the parser reads T here)

import axe.lang as Ax  # noqa: E402
from axe.lang.gather import gather as ax_gather  # noqa: E402


def brute_force_permutation(ids, experts, block):
    """The padded permutation of top-k routing ``ids`` (T × k), the slow way: each expert's
    (token, k) pairs in token order, each expert's block padded to a multiple of ``block`` with
    -1 rows.  Returns (sorted token per row, expert per tile, row of every (token, k))."""
    rows, tiles, pos = [], [], {}
    for e in range(experts):
        mine = [(t, j) for t in range(ids.shape[0]) for j in range(ids.shape[1]) if ids[t, j] == e]
        for t, j in mine:
            pos[t, j] = len(rows)
            rows.append(t)
        while len(rows) % block:
            rows.append(-1)
        tiles += [e] * (-(-len(mine) // block))
    return np.array(rows, dtype=np.int64), tiles, pos


@pytest.mark.parametrize("seed,tokens,experts,block", [(0, 1, 128, 64), (1, 7, 16, 16), (2, 50, 128, 128),
                                                       (3, 300, 8, 64), (4, 33, 128, 16)])
def test_segments_match_brute_force(seed, tokens, experts, block):
    rng = np.random.default_rng(seed)
    k = min(8, experts)
    ids = np.stack([rng.choice(experts, size=k, replace=False) for _ in range(tokens)])
    if seed % 2:        # skewed: most experts empty
        ids = np.stack([rng.choice(min(experts, k + 1), size=k, replace=False) for _ in range(tokens)])
    counts = np.bincount(ids.ravel(), minlength=experts)
    offsets, total = segments(counts, block)
    rows, tiles, pos = brute_force_permutation(ids, experts, block)
    assert total == len(rows)
    assert tile_groups(counts, block) == tiles
    assert total <= capacity(tokens * k, experts, block)
    for e in range(experts):
        seg = rows[offsets[e]:offsets[e] + -(-counts[e] // block) * block]
        assert sorted(seg[seg >= 0].tolist()) == sorted(t for t in range(tokens) for j in range(k) if ids[t, j] == e)
        assert (seg[counts[e]:] == -1).all() and offsets[e] % block == 0
    for (t, j), r in pos.items():
        assert rows[r] == t and offsets[ids[t, j]] <= r < offsets[ids[t, j]] + counts[ids[t, j]]


@pytest.mark.parametrize("seed,block,tile", [(0, 16, 64), (1, 16, 128), (2, 64, 64), (3, 32, 128), (4, 16, 16)])
def test_tiles_match_brute_force(seed, block, tile):
    """:func:`tiles` against the padded rows built one by one: each group's tiles start at its
    first row and every ``tile`` rows after, own exactly the rows of that group inside them, cover
    all its rows, and never start inside another group; the tile count stays under
    :func:`tile_capacity`."""
    rng = np.random.default_rng(seed)
    groups = 24
    counts = rng.integers(0, 3 * tile, groups) * (rng.random(groups) < 0.7)
    owner = []                                    # the group of every padded row (-1: padding)
    for g, c in enumerate(counts):
        owner += [g] * int(c)
        while len(owner) % block:
            owner.append(-1)
    got = tiles(counts, block, tile)
    want = []
    for g in range(groups):
        rows = [r for r, o in enumerate(owner) if o == g]
        start = rows[0] if rows else None
        while rows and start <= rows[-1]:
            want.append((g, start, sum(1 for r in range(start, start + tile) if r < len(owner) and owner[r] == g)))
            start += tile
    assert got == want
    assert len(got) <= tile_capacity(int(counts.sum()), groups, tile)
    if block == tile:
        assert [g for g, _, _ in got] == tile_groups(counts, block)
        assert [r for _, r, _ in got] == [tile * i for i in range(len(got))]


@pytest.mark.parametrize("tokens,pad,tile,seed", [(1, 16, 64, 0), (37, 16, 64, 1), (300, 16, 128, 2), (300, 64, 64, 3)])
def test_overlapping_tiles_dataflow(tokens, pad, tile, seed):
    """The layer's data flow with tiles taller than the padding, in numpy (small sizes): the
    permuted rows (padding zero, rows past the padded total stale = NaN), each tile computing
    ``tile`` rows from its start with its expert's weights and storing only its own rows (h and y
    poisoned with NaN elsewhere), the combine reading y through ``pos`` — equals the per-expert
    reference, so no row a token needs is left to another tile or to padding."""
    rng = np.random.default_rng(seed)
    experts, topk, hid, inter = 8, 2, 16, 8
    x = rng.standard_normal((tokens, hid))
    w1 = rng.standard_normal((experts, 2 * inter, hid))
    w2 = rng.standard_normal((experts, hid, inter))
    ids = np.stack([rng.choice(experts, topk, replace=False) for _ in range(tokens)])
    wts = rng.random((tokens, topk))
    counts = np.bincount(ids.ravel(), minlength=experts)
    offsets, total = segments(counts, pad)
    P = capacity(tokens * topk, experts, pad)
    rows = np.full(P + tile, -1)
    pos = np.zeros((tokens, topk), int)
    fill = list(offsets)
    for t in range(tokens):
        for k in range(topk):
            e = ids[t, k]
            rows[fill[e]], pos[t, k] = t, fill[e]
            fill[e] += 1
    xp = np.full((P + tile, hid), np.nan)        # the permute writes rows [0, total): x or zeros
    xp[:total] = np.where(rows[:total, None] >= 0, x[np.maximum(rows[:total], 0)], 0.0)
    h, y = np.full((P, inter), np.nan), np.full((P, hid), np.nan)

    def silu(v):
        return v / (1 + np.exp(-v))

    for e, r0, own in tiles(counts, pad, tile):
        a = xp[r0:r0 + tile]                     # reaches past the segment: other experts' rows
        g = a @ w1[e].T
        h[r0:r0 + own] = (silu(g[:, :inter]) * g[:, inter:])[:own]
    for e, r0, own in tiles(counts, pad, tile):
        hh = np.concatenate([h, np.full((tile, inter), np.nan)])[r0:r0 + tile]
        y[r0:r0 + own] = (hh @ w2[e].T)[:own]
    out = (y[pos] * wts[:, :, None]).sum(1)
    ref = np.zeros((tokens, hid))
    for t in range(tokens):
        for k in range(topk):
            g = w1[ids[t, k]] @ x[t]
            ref[t] += wts[t, k] * (w2[ids[t, k]] @ (silu(g[:inter]) * g[inter:]))
    assert not np.isnan(out).any() and np.allclose(out, ref, atol=1e-9)


def test_capacity_bounds_every_routing():
    """No split of ``rows`` rows over ``groups`` groups pads past the capacity (every split,
    enumerated), and the spread worst case (one row per group, the rest on one) stays within it."""
    import itertools
    for rows, groups, block in [(5, 3, 4), (6, 4, 3), (4, 5, 2), (7, 2, 8)]:
        cap = capacity(rows, groups, block)
        worst = max(segments(split, block)[1] for split in itertools.product(range(rows + 1), repeat=groups)
                    if sum(split) == rows)
        assert worst <= cap and cap % block == 0
    for rows, groups, block in [(1, 128, 64), (8, 128, 64), (256, 128, 64), (32768, 128, 128)]:
        spread = [1] * min(rows, groups)
        spread[0] += rows - len(spread)
        assert segments(spread, block)[1] <= capacity(rows, groups, block)
        assert segments([rows], block)[1] <= capacity(rows, groups, block)
    with pytest.raises(ValueError, match="negative"):
        segments([1, -1], 4)


def test_empty_groups_take_no_rows():
    offsets, total = segments([0, 3, 0, 0, 65], 64)
    assert offsets == [0, 0, 64, 64, 64] and total == 192
    assert tile_groups([0, 3, 0, 0, 65], 64) == [1, 4, 4]


# --- the gather operator -------------------------------------------------------------------

def _gather_kernel(dst_mem, **config):

    @Ax.kernel(name=f"gather_{dst_mem}")
    def kern():
        @T.prim_func
        def g(X_: T.Buffer((64, 256), "bfloat16"), I_: T.Buffer((16,), "int32"), Y_: T.Buffer((16, 256), "bfloat16")):
            bx, tx = Ax.launch(1, 128)
            X, ix, Y = Ax.param(X_), Ax.param(I_), Ax.param(Y_)
            if dst_mem == "global":
                ax_gather(Y, X, ix, **config)
            elif dst_mem == "shared":
                sm = Ax.shared((16, 256), "bfloat16", name="rows")
                ax_gather(sm, X, ix, **config)
                Ax.sync()
                Ax.copy(Y, sm)
            else:
                R = Ax.registers((16, 256), "bfloat16", "S[(16,32,8):(8,1@tx,1)]", name="rows")
                ax_gather(R, X, ix, **config)
                Ax.copy(Y, R)
        return g
    return kern


def _gather_record(text):
    return text.split("gather at ")[1].split("\ncopy at")[0]


@pytest.mark.parametrize("mem,chosen", [("global", "vector_gather"), ("shared", "cp_async_gather"),
                                        ("local", "vector_gather")])
def test_gather_dispatch(mem, chosen):
    rec = _gather_record(Ax.explain(_gather_kernel(mem), "sm_90a"))
    assert re.search(rf"\+ {chosen}\s+chosen", rec), rec
    if mem != "shared":
        assert "cp.async writes shared memory" in rec
    assert "16-byte vectors" in rec


def test_gather_declines_with_reasons():
    from axe.schedules.dispatch import DispatchError
    from axe.lang.kernel import KernelError
    with pytest.raises((DispatchError, KernelError)) as err:
        Ax.explain(_gather_kernel("local", barrier=object()), "sm_90a")
    msg = str(err.value)
    assert "drop barrier=" in msg and "cp.async writes shared memory, dst is local" in msg


def test_gather_signature_errors():
    from axe.layout import S
    from axe.ops.gather import gather
    from axe.ops.call import OpError
    from axe.ops.tensor import Tensor

    class Buf:
        name = "b"
    x = Tensor(Buf(), S[(64, 256)], (64, 256), "bfloat16", "global", name="x")
    y = Tensor(Buf(), S[(16, 256)], (16, 256), "bfloat16", "global", name="y")
    ix = Tensor(Buf(), S[16], (16,), "int32", "global", name="ix")
    with pytest.raises(OpError, match="index has 8 elements, dst has 16 rows"):
        gather(y, x, Tensor(Buf(), S[8], (8,), "int32", "global"), None)
    with pytest.raises(OpError, match="index dtype float32"):
        gather(y, x, Tensor(Buf(), S[16], (16,), "float32", "global"), None)
    with pytest.raises(OpError, match="dst dtype float16 differs"):
        gather(Tensor(Buf(), S[(16, 256)], (16, 256), "float16", "global"), x, ix, None)
    assert gather(y, x, ix, None).op == "gather"


# --- the MoE kernels build, pass ptxas with no spills, and hold the chosen instructions ------

KERNELS = {
    "route": ("make_route", {}, ["shfl.sync.bfly", "ex2.approx"]),
    "align": ("make_align", {"bm": 64}, ["atom.shared.add"]),
    "permute": ("make_permute", {}, ["ld.global.v4.u32", "st.global.v4.u32"]),
    "combine": ("make_combine", {"dtype": "float16"}, ["ld.global.v4.u32", "st.global.v4"]),
    "gemm1_small": ("make_gemm1", {"bm": 64, "bn": 128}, ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16",
                                                          "cp.async.bulk.tensor.3d", "cp.async.bulk.tensor.2d",
                                                          "stmatrix", "setmaxnreg", "ex2.approx"]),
    "align_pad16": ("make_align", {"bm": 128, "pad": 16}, ["atom.shared.add"]),
    "gemm1_small_pad16": ("make_gemm1", {"bm": 64, "bn": 128, "pad": 16},
                          ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d.global.shared"]),
    "gemm2_large_pad16": ("make_gemm2", {"bm": 128, "bn": 256, "pad": 16},
                          ["wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", "cp.async.bulk.tensor.2d.global.shared"]),
    "gemm1_small_gather": ("make_gemm1", {"bm": 64, "bn": 128, "pad": 16, "gather_rows": True},
                           ["cp.async.cg.shared.global", "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                            "fence.proxy.async.shared::cta", "cp.async.bulk.tensor.3d", "wgmma.mma_async"]),
    "gemm1_large_gather": ("make_gemm1", {"bm": 128, "bn": 256, "pad": 16, "gather_rows": True},
                           ["cp.async.cg.shared.global", "cp.async.mbarrier.arrive.noinc.shared::cta.b64"]),
    "gemm1_tiny_gather": ("make_gemm1", {"bm": 64, "bn": 96, "pad": 16, "gather_rows": True},
                          ["wgmma.mma_async.sync.aligned.m64n96k16", "stmatrix", "cp.async.bulk.tensor.2d.global.shared"]),
    "experts_small_fused": ("make_experts", {"bm": 64, "bn": 128, "pad": 16, "gather_rows": True},
                            ["red.release.gpu.global.add.s32", "ld.acquire.gpu.global.b32", "fence.proxy.async.global",
                             "cp.async.bulk.wait_group 0", "%globaltimer", "trap", "cp.async.mbarrier.arrive.noinc"]),
    "experts_large_fused": ("make_experts", {"bm": 128, "bn": 256, "pad": 16},
                            ["red.release.gpu.global.add.s32", "wgmma.mma_async.sync.aligned.m64n256k16"]),
    "gemm1_small_bk128": ("make_gemm1", {"bm": 64, "bn": 128, "bk": 128},
                          ["wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", "cp.async.bulk.tensor.3d"]),
    "gemm2_large": ("make_gemm2", {"bm": 128, "bn": 256, "dtype": "float16"},
                    ["wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", "cp.async.bulk.tensor.3d", "stmatrix"]),
}


@pytest.mark.parametrize("which", sorted(KERNELS))
def test_moe_kernel_builds(which):
    from kernels import moe
    factory, kw, instructions = KERNELS[which]
    art = Ax.compile_kernel(getattr(moe, factory)(**kw), "sm_90a")
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    # every kernel of the layer may launch under its predecessor's tail, and waits for it first
    assert art.launch["programmatic"] and "griddepcontrol.wait" in art.ptx
    for ins in instructions:
        assert ins in art.ptx, f"{which}: {ins} not in the PTX"


@pytest.mark.parametrize("bn,bk", [(128, 64), (128, 128), (256, 192)])
def test_gate_and_up_rows_land_in_the_wgmma_tile(bn, bk):
    """GEMM 1 loads its B tile as two half-height boxes (gate rows, up rows): each half's layout
    (``swizzled(half, bk, panel=bn·64)`` at ``h·half·64``) must put element (r, c) exactly where the
    full tile's layout, which wgmma reads, has row ``h·half + r``, column c — brute force over the
    tile, every 64-column panel included."""
    from kernels.parts.tiles import swizzled
    half = bn // 2
    full = swizzled(bn, bk, (1,))
    for h in range(2):
        sub = swizzled(half, bk, (1,), panel=bn * 64)
        for r in range(half):
            for c in range(bk):
                (got,) = sub.map((0, r, c), (1, half, bk))
                (want,) = full.map((0, h * half + r, c), (1, bn, bk))
                assert got["m"] + h * half * 64 == want["m"], (h, r, c)


def test_overlapping_tiles_store_only_their_rows():
    """With segments padded to 16 rows and 64-row tiles, each of the four 16-row store boxes of a
    warpgroup's chunk is guarded by the tile's own row count (the CUDA holds the guards and
    boxes of 16 rows); with pad = bm one 64-row box goes out unguarded."""
    from kernels import moe
    art = Ax.compile_kernel(moe.make_gemm2("bfloat16", bm=64, bn=128, pad=16), "sm_90a")
    spec = {t["param"]: t for t in art.launch["tensormaps"]}
    assert spec["C_map"]["box"] == [64, 16] and spec["A_map"]["box"] == [64, 64]
    for q in range(4):
        assert re.search(rf"if \({16 * q} < \(trows_ptr\[", art.cuda_source), f"store box {q} is not guarded"
    plain = Ax.compile_kernel(moe.make_gemm2("bfloat16", bm=64, bn=128), "sm_90a")
    assert {t["param"]: t for t in plain.launch["tensormaps"]}["C_map"]["box"] == [64, 64]


def test_gathering_gemm_counts_every_producer_thread():
    """GEMM 1 with ``gather_rows``: no tensor map for A (its rows come from x by index), and each
    stage's full barrier expects the producer warpgroup's 128 cp.async arrivals plus one per TMA
    copy of B (gate and up: 2) — a count off by one would hang or race, so it is read off the CUDA."""
    from kernels import moe
    art = Ax.compile_kernel(moe.make_gemm1("bfloat16", bm=64, bn=128, pad=16, gather_rows=True), "sm_90a")
    assert sorted(t["param"] for t in art.launch["tensormaps"]) == ["B_map", "C_map"]
    inits = re.findall(r"mbarrier_init_init_shared_b64\(.*?\(uint\)(\d+)\)", art.cuda_source)
    assert inits.count("130") == 4, inits           # 4 stages of full barriers
    assert [a["name"] for a in art.launch["args"]][:4] == ["A_", "B_", "C_", "S_"]


@pytest.mark.parametrize("config", ["small", "small_pad16", "large_gather", "tiny_gather", "large_fused", "tiny_fused",
                                    "small_gather_sk", "large_gather_sa"])
def test_layer_arguments_bind(config):
    """Every launch of ``Layer.experts`` (kernels/moe_host.py) against its artifact's signature:
    argument count, dtypes, shapes and shape symbols as the runtime checks them
    (``bind_arguments``), on meta tensors of the real sizes, for T = 1 and 37 — what the GPU would
    refuse at launch, found here."""
    torch = pytest.importorskip("torch")
    from axe.runtime.launcher import bind_arguments
    from kernels import moe, moe_host

    built = {role: Ax.compile_kernel(k, "sm_90a").launch for role, k in _role_kernels(config).items()}

    class Bind:
        def __init__(self, role):
            self.role = role

        def __call__(self, *args):
            # the runtime appends the scratch arguments the caller leaves out (stream-K's workspace)
            scratch = [torch.zeros(a["shape"], dtype=getattr(torch, a["dtype"]), device="meta")
                       for a in built[self.role]["args"][len(args):] if a.get("scratch")]
            bind_arguments(built[self.role], tuple(args) + tuple(scratch), device_type="meta")
            calls.append(self.role)

    meta = dict(device="meta")
    for tokens in (1, 37):
        calls = []
        layer = moe_host.Layer({r: Bind(r) for r in built}, tokens, config, "bfloat16", device="meta")
        x = torch.empty(tokens, moe.HIDDEN, dtype=torch.bfloat16, **meta)
        w1 = torch.empty(moe.E, 2 * moe.INTER, moe.HIDDEN, dtype=torch.bfloat16, **meta)
        w2 = torch.empty(moe.E, moe.HIDDEN, moe.INTER, dtype=torch.bfloat16, **meta)
        ids = torch.empty(tokens, moe.TOPK, dtype=torch.int32, **meta)
        weights = torch.empty(tokens, moe.TOPK, dtype=torch.float32, **meta)
        layer.experts(x, w1, w2, ids, weights)
        assert calls == list(layer.steps(x, w1, w2, ids, weights)) and ("permute" in calls) != layer.gather


def _role_kernels(config):
    """The layer's kernels for ``config``, by role (as ``kernels.moe.builds`` makes them)."""
    from kernels import moe, moe_host
    names = moe_host.artifact_names("bfloat16", config)
    every = moe.builds(("bfloat16",))
    return {role: every[name] for role, name in names.items() if role != "route"}


@pytest.mark.parametrize("kw,want,readers", [({"bm": 64, "bn": 128, "gather_rows": True}, 12, 16),
                                              ({"bm": 128, "bn": 256}, 12, 8),
                                              ({"bm": 64, "bn": 128, "bn1": 96, "gather_rows": True}, 16, 16)])
def test_fused_experts_signal_protocol(kw, want, readers):
    """The fused kernel's readiness protocol, read off its CUDA: a consumer announces an h tile only
    after its TMA stores are written (``cp.async.bulk.wait_group 0``, not ``.read``), the producer
    of a GEMM 2 tile waits for GEMM 1's n1 tiles x consumer warpgroups (``want``) before its first
    load of h, and the count is retired by the m-tile's n2 GEMM 2 tiles (``readers``).  Neither
    side idles on it: the GEMM 2 producer's first weight loads go out before its wait, and a
    consumer counts an h tile in two places — after the next tile's k-loop, and at once for its
    last GEMM 1 tile — each behind a full wait for its stores."""
    from kernels import moe
    src = Ax.compile_kernel(moe.make_experts("bfloat16", pad=16, **kw), "sm_90a").cuda_source
    body = src[src.rindex("__global__"):]
    dones = [m.start() for m in re.finditer(r"axe_count_done\(\(", body)]
    assert len(dones) == 2, dones
    for done in dones:
        assert body.rindex("cp_async_bulk_wait_group_async_bulk_wait_group_0()", 0, done) > body.rindex("wgmma", 0, done)
    wait = re.search(r"axe_wait_count\(\(&\(R__ptr\[(\w+)\[0\]\]\)\), \(&\(R__ptr\[\(MT \+ (\w+)\[0\]\)\]\)\), "
                     r"(\d+), (\d+),", body)
    assert wait and wait.group(1) == wait.group(2) and (int(wait.group(3)), int(wait.group(4))) == (want, readers)
    # weights first, then the wait, then the first load of h
    assert body.index("&(W2_map)") < wait.start() < body.index("&(HA_map)")


def test_fused_schedule_never_deadlocks():
    """The persistent order of the fused kernel (each CTA: its GEMM 1 tiles, then its GEMM 2 tiles,
    round robin over both ranges) simulated step by step with a CTA blocking on a GEMM 2 tile until
    every GEMM 1 tile of its m-tile is counted — a GEMM 1 tile counted only when the CTA finishes
    its next tile, the CTA's last GEMM 1 tile at once, as the kernel does: every schedule
    finishes, and the kernel's closed forms (tiles per CTA, GEMM 1 tiles first, the pipeline
    iteration base) match the enumeration."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        m_tiles, n1, n2 = int(rng.integers(1, 40)), int(rng.choice([12, 16, 6])), int(rng.choice([16, 8]))
        grid = min(132, int(rng.integers(1, 200)), m_tiles * (n1 + n2))
        k1, k2 = 32, 12
        tiles1, total = m_tiles * n1, m_tiles * (n1 + n2)
        orders = {bx: list(range(bx, total, grid)) for bx in range(grid)}
        for bx, order in orders.items():
            first = (tiles1 - bx + grid - 1) // grid
            assert len(order) == (total - bx + grid - 1) // grid and all((t < tiles1) == (i < first) for i, t in enumerate(order))
            bases = [i * k1 if i < first else first * k1 + (i - first) * k2 for i in range(len(order))]
            steps = [k1 if t < tiles1 else k2 for t in order]
            assert all(bases[i] + steps[i] == bases[i + 1] for i in range(len(order) - 1))
        done1 = np.zeros(m_tiles, int)
        pos = {bx: 0 for bx in orders}
        while any(pos[bx] < len(o) for bx, o in orders.items()):
            moved = False
            for bx, order in orders.items():
                if pos[bx] == len(order):
                    continue
                t = order[pos[bx]]
                if t >= tiles1 and done1[(t - tiles1) // n2] < n1:
                    continue                     # blocked on its m-tile's h
                if pos[bx] > 0 and order[pos[bx] - 1] < tiles1 and t < tiles1:
                    done1[order[pos[bx] - 1] // n1] += 1    # the previous h tile, counted after this k-loop
                if t < tiles1 and (pos[bx] + 1 == len(order) or order[pos[bx] + 1] >= tiles1):
                    done1[t // n1] += 1          # the CTA's last GEMM 1 tile: at once
                pos[bx] += 1
                moved = True
            assert moved, "deadlock"


def test_gemm_refuses_bad_configs():
    from kernels import moe
    with pytest.raises(ValueError, match="single k-block"):
        moe.make_grouped_gemm(2048, 768, bm=64, bn=128, bk=768, stages=1)
    with pytest.raises(ValueError, match="pad=24 must be a multiple of 16 that divides bm=64"):
        moe.make_grouped_gemm(1536, 2048, bm=64, pad=24)
    with pytest.raises(ValueError, match="bm must be 64 or 128"):
        moe.make_grouped_gemm(1536, 2048, bm=32)
    with pytest.raises(ValueError, match="more than 227 KiB"):
        moe.make_grouped_gemm(1536, 2048, bm=128, bn=256, stages=5)
    with pytest.raises(ValueError, match="dtype must be one of"):
        moe.make_route("float32")


def test_two_ctas_per_sm_must_fit_the_sm():
    """``ctas_per_sm=2``: ``__launch_bounds__(256, 2)`` and no ``setmaxnreg`` (it moves registers
    between the roles of one CTA per SM); two CTAs whose shared memory does not fit one SM are
    refused at build time (the launch bound alone would let them run one at a time, silently)."""
    from axe.backends.cuda.build import BuildError
    from kernels import moe
    src = Ax.compile_kernel(moe.make_gemm2("bfloat16", bm=64, bn=128, stages=3, ctas_per_sm=2), "sm_90a").cuda_source
    assert "__launch_bounds__(256, 2)" in src and "setmaxnreg" not in src
    with pytest.raises(BuildError, match=r"min_blocks_per_sm\(2\) needs 2 x \d+ bytes of shared memory"):
        Ax.compile_kernel(moe.make_gemm2("bfloat16", bm=64, bn=128, bk=128, stages=3, ctas_per_sm=2), "sm_90a")


def test_default_configuration_by_tokens():
    """``config_for``: every token count gets a configuration that exists and gathers or permutes
    as its table says; the thresholds rise, and T past the last one gets the largest tiles."""
    from kernels import moe_host
    bounds = [most for most, _ in moe_host.CONFIG_BY_TOKENS]
    assert bounds == sorted(bounds) and moe_host.LARGEST in moe_host.CONFIGS
    for t in (1, 2, 8, 9, 32, 512, 513, 2048, 2049, 4096, 10 ** 6):
        cfg = moe_host.config_for(t)
        assert cfg in moe_host.CONFIGS
        assert cfg == next((c for most, c in moe_host.CONFIG_BY_TOKENS if t <= most), moe_host.LARGEST)
    assert moe_host.config_for(4096) == "large_gather_sa" and moe_host.config_for(32) == "small_gather"



def _grouped_sk_walk(tiles, k, ctas):
    """The grouped GEMM's stream-K loops on a run-time tile count, walked on the CPU with the
    kernel's own formulas (:class:`kernels.parts.schedulers.stream_k.StreamK` with a Python ``select``): CTA p's whole
    tiles p, p + ctas, ... (``dp_count``), then its pieces.  Returns ``{tile: [(k0, k1, cta, n,
    pieces of that CTA)]}``."""
    from kernels.parts.schedulers.stream_k import StreamK
    sk = StreamK(tiles, k, ctas, lambda c, a, b: a if c else b)
    out = {}
    for p in range(ctas):
        for it in range(sk.dp_count(p)):
            out.setdefault(p + it * ctas, []).append((0, k, p, 0, 1))
        mine = sk.pieces(p)
        for n, (t, k0, k1) in enumerate(mine):
            out.setdefault(t, []).append((k0, k1, p, n, len(mine)))
    return sk, out


def test_grouped_stream_k_covers_every_k_block_once():
    """For every run-time tile count from 1 to past three rounds (small grids and 132 CTAs, 4 to 16
    k-blocks): each (tile, k-block) is computed exactly once; below one tile per CTA nothing is
    split; a split tile has two pieces of at least two k-blocks — the head (from k-block 0) the last
    piece of CTA p, which waits for CTA p + 1, whose first piece is the tail: no CTA waits on a
    piece computed after its own wait — and the run-time split equals the build-time one."""
    from kernels.parts.schedulers.stream_k import StreamK
    for ctas in (3, 7, 132):
        for k in (4, 6, 12, 16):
            for tiles in sorted({1, 2, ctas - 1, ctas, ctas + 1, 2 * ctas - 1, 2 * ctas, 2 * ctas + 5,
                                 3 * ctas + ctas // 2} - {0}):
                sk, pieces = _grouped_sk_walk(tiles, k, ctas)
                assert sorted(pieces) == list(range(tiles)), (tiles, k, ctas)
                if tiles >= ctas:
                    static = StreamK(tiles, k, ctas)
                    assert (sk.dp_waves, sk.units) == (static.dp_waves, static.units)
                else:
                    assert sk.units == 0 and all(len(ps) == 1 for ps in pieces.values())
                for t, ps in pieces.items():
                    ps.sort()
                    assert ps[0][0] == 0 and ps[-1][1] == k and all(a[1] == b[0] for a, b in zip(ps, ps[1:])), (t, ps)
                    assert len(ps) <= 2 and all(k1 - k0 >= 2 for k0, k1, *_ in ps), (t, ps)
                    if len(ps) == 2:
                        (_, _, p0, n0, c0), (_, _, p1, n1, _) = ps
                        assert p1 == p0 + 1 and n0 == c0 - 1 and n1 == 0, (t, ps)


def test_grouped_stream_k_builds_with_its_handover():
    """``stream_k=True``: the workspace and flags are scratch arguments (the runtime supplies
    them), the consumer publishes (``axe_flag_set``) and waits bounded (``axe_flag_take``), the
    producer has a second loop of loads (the stream-K k-blocks), no spills; the split of the
    run-time tile count is computed once, not in the loops (substituted into every use it grew
    the CUDA 11-fold and ran the layer 1.4-2.7x slower on an H200); without it neither the
    arguments nor the hand-over exist."""
    from kernels import moe, moe_host
    kw1, kw2 = moe_host.gemm_keywords("small_gather_sk")
    assert kw1["stream_k"] and kw2["stream_k"]
    for make, kw in ((moe.make_gemm1, kw1), (moe.make_gemm2, kw2)):
        art = Ax.compile_kernel(make("bfloat16", **kw), "sm_90a")
        scratch = {a["name"]: a for a in art.launch["args"] if a.get("scratch")}
        assert sorted(scratch) == ["F_", "W_"] and scratch["W_"]["dtype"] == "float32"
        body = art.cuda_source[art.cuda_source.rindex("__global__"):]
        assert "axe_flag_set(" in body and "axe_flag_take(" in body
        assert art.launch["resources"]["spill_stores"] == 0 and art.launch["resources"]["spill_loads"] == 0
        # the split's selects (if/else blocks in the CUDA) appear once per role, not per use
        base = Ax.compile_kernel(make("bfloat16", **{k: v for k, v in kw.items() if k != "stream_k"}), "sm_90a")
        assert body.count("condval") <= 80, body.count("condval")
        assert len(art.cuda_source) < 3 * len(base.cuda_source), (len(art.cuda_source), len(base.cuda_source))
    plain = Ax.compile_kernel(moe.make_gemm2("bfloat16", **moe_host.gemm_keywords("small_gather")[1]), "sm_90a")
    assert not any(a.get("scratch") for a in plain.launch["args"]) and "axe_flag_take(" not in plain.cuda_source
    with pytest.raises(ValueError, match="stream_k needs at least 4 k-blocks"):
        moe.make_gemm2("bfloat16", bm=64, bn=128, bk=256, stream_k=True)


def _split_align_model(ids, experts, pad, bm, P, ctas, per_cta):
    """``kernels.moe.make_align_split`` step by step in numpy: CTA c's chunk of tokens, its
    histogram, the totals and the rows before it, the scan, the padding owned by CTA ``e mod G``,
    the rows past the last segment written by every CTA, each CTA's scatter in its own order.
    Returns (srt, pos, meta, tile tables) and how often each row of srt was written."""
    from kernels.parts.schedulers.padding import segments
    n_tok, topk = ids.shape
    G = min(ctas, -(-n_tok // per_cta))
    chunk = -(-n_tok // G)
    hist = np.zeros((G, experts), int)
    for c in range(G):
        for t in range(c * chunk, min(n_tok, (c + 1) * chunk)):
            for k in range(topk):
                hist[c, ids[t, k]] += 1
    total = hist.sum(0)
    off, used = segments(total, pad)
    off = list(off) + [used]
    srt, writes, pos = np.full(P, 12345), np.zeros(P, int), np.full((n_tok, topk), -1)
    for c in range(G):
        cur = [off[e] + hist[:c, e].sum() for e in range(experts)]
        for e in range(experts):
            if e % G == c:
                for r in range(off[e] + total[e], off[e + 1]):
                    srt[r] = -1
                    writes[r] += 1
        for r in range(used + c * 512, P, G * 512):     # the kernel's strided tail, 512 threads
            for q in range(r, min(r + 512, P)):
                srt[q] = -1
                writes[q] += 1
        for t in range(c * chunk, min(n_tok, (c + 1) * chunk)):
            for k in range(topk):
                p = cur[ids[t, k]]
                cur[ids[t, k]] += 1
                srt[p], pos[t, k] = t, p
                writes[p] += 1
    return srt, pos, total, used, writes, G


@pytest.mark.parametrize("tokens,pad,bm,seed", [(1, 16, 128, 0), (127, 16, 128, 1), (300, 16, 64, 2), (2049, 16, 128, 3),
                                               (4096, 128, 128, 4), (9000, 16, 128, 5)])
def test_split_align_model_meets_the_law(tokens, pad, bm, seed):
    """The split alignment's algorithm (numpy model of its CTAs) meets the alignment's contract for
    1 to 64 CTAs: every segment holds exactly its expert's (token, k) pairs, its padding and the
    rows past the last segment are -1, every row of the buffer is written exactly once (so no CTA
    waits on another's stores), ``pos`` points at each pair's row, and the totals and padded rows
    are those of :func:`kernels.parts.schedulers.padding.segments`."""
    from kernels.parts.schedulers.padding import capacity, segments
    from kernels import moe
    rng = np.random.default_rng(seed)
    experts, topk = 128, 8
    ids = np.stack([rng.choice(experts, topk, replace=False, p=None if seed % 2 else
                               np.r_[np.full(8, 0.05), np.full(120, 0.6 / 120)]) for _ in range(tokens)])
    P = capacity(tokens * topk, experts, pad) + bm
    srt, pos, total, used, writes, G = _split_align_model(ids, experts, pad, bm, P, moe.ALIGN_SPLIT_CTAS,
                                                          moe.ALIGN_SPLIT_TOKENS)
    assert 1 <= G <= moe.ALIGN_SPLIT_CTAS and (writes == 1).all()
    off, want_used = segments(np.bincount(ids.ravel(), minlength=experts), pad)
    assert used == want_used and (total == np.bincount(ids.ravel(), minlength=experts)).all()
    for e in range(experts):
        seg = srt[off[e]:off[e] + total[e]]
        assert sorted(seg.tolist()) == sorted(np.nonzero(ids == e)[0].tolist())
    assert (srt[used:] == -1).all()
    assert all(srt[pos[t, k]] == t and ids[t, k] == next(e for e in range(experts) if off[e] <= pos[t, k] < off[e] + total[e])
               for t in range(min(tokens, 50)) for k in range(topk))


def test_split_align_protocol():
    """The split alignment's CUDA: its histograms and counts are scratch arguments (the runtime
    supplies them), each CTA fences its histogram row, one thread announces it (release) and waits
    for all G CTAs' (bounded; the last reader resets the counts), the reads of the other rows come
    after the wait and a fence; meta and the tile tables are written by CTA 0 alone; the grid is
    min(ALIGN_SPLIT_CTAS, ceil(T / ALIGN_SPLIT_TOKENS))."""
    from kernels import moe, moe_host
    art = Ax.compile_kernel(moe.make_align_split(128, 16), "sm_90a")
    assert art.launch["name"] == moe_host.align_name(128, 16, split=True) == "moe_align_bm128_pad16_split"
    assert {a["name"] for a in art.launch["args"] if a.get("scratch")} == {"H_", "R_"}
    assert art.launch["grid"][0] == f"min({moe.ALIGN_SPLIT_CTAS}, ((n_tok + {moe.ALIGN_SPLIT_TOKENS - 1}) // {moe.ALIGN_SPLIT_TOKENS}))"
    body = art.cuda_source[art.cuda_source.rindex("__global__"):]
    write, fence = body.index("H__ptr[((((int)blockIdx.x) * 128)"), body.index("axe_fence_gpu()")
    done, wait = body.index("axe_count_done("), body.index("axe_wait_count(")
    read = body.index("H__ptr[((c * 128)")
    assert write < fence < done < wait < body.index("axe_fence_gpu()", wait) < read
    assert re.search(r"if \(\(\(int\)blockIdx.x\) == 0\) \{\s*meta_ptr\[0\]", body)
    assert art.launch["resources"]["spill_stores"] == 0
    assert moe_host.artifact_names("bfloat16", "large_gather_sa")["align"] == "moe_align_bm128_pad16_split"
