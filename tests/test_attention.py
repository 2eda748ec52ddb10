"""The flash-attention forward (kernels/attention.py) on the CPU machine: one sm_90a build whose PTX
holds the instructions its schedules chose (wgmma ss and rs, TMA tensor copies, mbarriers) and that
ptxas accepted without spills, with tensor maps at the tensors' real extents; the refusals (sizes,
dtypes, heads, targets; the Trainium forms: tests/test_attention_trn.py); the NumPy
model of the GPU body's tiled online softmax against a direct softmax (an independent oracle);
and the fragment-coordinate law the masks rely on."""

import math
import os
import re

import numpy as np
import pytest

os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

pytest.importorskip("tvm")

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.schedules.wgmma import d_fragment  # noqa: E402
from axe.layout import R, S  # noqa: E402
from kernels import attention as A  # noqa: E402
from kernels.parts.fragments import check_coords, coords  # noqa: E402


@pytest.fixture(scope="module")
def art():
    # ragged (77 rows: less than one query tile), causal, grouped-query heads, head size 64, LSE; the
    # longer sequences' default for head 64 (pp3: three consumer warpgroups taking turns)
    return A.build(2, 77, 77, 4, 2, 64, "bfloat16", True, lse=True, name="attention_test", variant="pp3")


def test_ptx_holds_wgmma_tma_and_mbarriers(art):
    ptx = art.ptx
    # one key tile: Q·Kᵀ from shared memory (head size 64: 4 k16 steps) in the prologue and P·V with P
    # from registers (128 keys: 8) in the tail of the overlapped loop
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", ptx)) == 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16", ptx)) == 8
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx          # O's TMA store
    assert "mbarrier.try_wait.parity" in ptx and "mbarrier.arrive.expect_tx" in ptx
    # the producer at 24 registers, three consumers at (512 - 24) / 3 rounded down to 8
    assert "setmaxnreg.dec.sync.aligned.u32 24" in ptx and "setmaxnreg.inc.sync.aligned.u32 160" in ptx
    assert "bar.arrive" in ptx                                          # the turns
    assert art.cubin and art.launch["resources"]["spill_stores"] == 0


def test_launch_and_tensor_maps_use_the_real_extents(art):
    L = art.launch
    assert L["grid"] == [1 * 4 * 2, 1, 1] and L["block"] == [512, 1, 1]
    maps = {m["param"]: m for m in L["tensormaps"]}
    # (batch, seq, heads·dim) innermost first: a sequence shorter than a tile keeps its 77 rows
    assert maps["Q_map"]["shape"] == [4 * 64, 77, 2] and maps["K_map"]["shape"] == [2 * 64, 77, 2]
    assert maps["K_map"]["strides_bytes"] == [2 * 64 * 2, 77 * 2 * 64 * 2]
    assert maps["K_map"]["box"] == [64, 128, 1] and maps["O_map"]["box"] == [64, 64, 1]
    assert [a["name"] for a in L["args"]] == ["Q_", "K_", "V_", "O_", "LSE_"]
    assert [a["shape"] for a in L["args"]][3:] == [[2, 77, 4, 64], [2, 4, 77]]


@pytest.mark.parametrize("kw, why", [
    (dict(head_dim=96), "head_dim must be one of"),
    (dict(dtype="float32"), "dtype must be one of"),
    (dict(kv_heads=3), "kv_heads=3 must divide q_heads=4"),
    (dict(seq_q=0), "seq_q must be a positive int"),
    (dict(scale=-1.0), "scale must be positive"),
])
def test_wrong_problems_are_refused(kw, why):
    args = dict(batch=1, seq_q=64, seq_kv=64, q_heads=4, kv_heads=2, head_dim=64, dtype="bfloat16")
    args.update(kw)
    with pytest.raises(ValueError, match=why):
        A.make(**args)


def _direct(q, k, v, causal, scale):
    s = q @ k.T * scale
    if causal:
        s = np.where(np.arange(k.shape[0])[None, :] <= np.arange(q.shape[0])[:, None], s, -np.inf)
    m = s.max(1, keepdims=True)
    e = np.exp(s - m)
    return e @ v / e.sum(1, keepdims=True), (m[:, 0] + np.log(e.sum(1)))


@pytest.mark.parametrize("sq, skv, causal", [(1, 1, False), (77, 77, True), (200, 333, False), (333, 200, True),
                                             (300, 300, True)])
def test_online_softmax_tiling_matches_a_direct_softmax(sq, skv, causal):
    rng = np.random.default_rng()
    q, k, v = rng.standard_normal((sq, 64)) * 2, rng.standard_normal((skv, 64)) * 2, rng.standard_normal((skv, 64))
    for bm, bn in ((64, 128), (128, 64)):
        o, lse = A.online_softmax_reference(q, k, v, causal, 0.3, bm, bn)
        want_o, want_lse = _direct(q, k, v, causal, 0.3)
        assert np.abs(o - want_o).max() < 1e-12 and np.abs(lse - want_lse).max() < 1e-12


def test_fragment_coordinates_follow_the_layouts():
    for n in (64, 128):
        check_coords(d_fragment(n, "tx"), (64, n), 128)
    check_coords(A.ROW_VALUES, (64, 1), 128)
    assert coords(A.ROW_VALUES, (64, 1), 1, 37) == (16 + 8 + 1, 0)       # warp 1, lane 5: rows 17 and 25
    with pytest.raises(ValueError, match="replicates on registers"):
        coords(S[4:1] + R[2:4], (4,), 0, 0)


def test_scale_default_is_one_over_sqrt_d():
    assert A.Problem(1, 8, 8, 1, 1, 128, "float16", False).scale == pytest.approx(1 / math.sqrt(128))


# --- torch.ops.axe.attention (axe/torch/attention.py) on the CPU ---------------------------------

torch = pytest.importorskip("torch")


def _sdpa(t, env):
    """What the artifact computes, from its bound arguments (for test_torch_jit's CpuLaunch)."""
    q = t["Q_"]
    t["O_"].copy_(A.reference(q, t["K_"], t["V_"], causal=env.get("causal", False))["O"].to(q.dtype))


@pytest.fixture(scope="module")
def op(tmp_path_factory):
    """``axe.torch.attention`` with its kernel built for real into a fresh cache, launched by a CPU
    stand-in that checks each call against the artifact's launch.json (the runtime's own
    ``bind_arguments``) and computes with torch."""
    from axe.torch import attention as mod
    from axe.torch.cache import ArtifactCache
    from test_torch_jit import REFS, CpuLaunch
    for causal in (False, True):         # make's default names: attention_<dtype>_d<D>[_causal]
        for short in ("bf16", "f16"):
            REFS[f"attention_{short}_d64" + ("_causal" if causal else "")] = (
                lambda t, env, c=causal: _sdpa(t, {**env, "causal": c}))
    k = mod.KERNEL
    saved = (k._cache, k.loader, k.target, k.progress)
    k._cache, k.loader, k.target, k.progress = ArtifactCache(tmp_path_factory.mktemp("cache"), shipped=[]), CpuLaunch, \
        "sm_90a", False
    k.clear()
    yield mod
    k._cache, k.loader, k.target, k.progress = saved
    k.clear()


def _qkv(b=1, sq=40, skv=40, hq=2, hk=1, d=64, dt=None):
    dt = dt or torch.bfloat16
    return torch.randn(b, sq, hq, d, dtype=dt), torch.randn(b, skv, hk, d, dtype=dt), torch.randn(b, skv, hk, d, dtype=dt)


def test_op_runs_the_built_kernel_and_matches_sdpa(op):
    q, k, v = _qkv()
    got = torch.ops.axe.attention(q, k, v, True)
    assert got.shape == q.shape and got.dtype == q.dtype
    assert torch.allclose(got.float(), A.reference(q, k, v, causal=True)["O"], atol=2e-2)
    assert [dict(m[1:])["causal"] for m in op.KERNEL._memo] == [True]          # one specialization, loaded once


def test_op_refuses_wrong_arguments(op):
    q, k, v = _qkv()
    for args, why in [((q[0], k, v), "q must be \\(batch, seq, heads, head_dim\\)"),
                      ((q.float(), k, v), "expected float16 or bfloat16"),
                      ((q, k.half(), v), "k has dtype torch.float16, q has torch.bfloat16"),
                      ((q, k, v[:, :3]), "v has shape"),
                      ((q, *_qkv(hq=2, hk=3)[1:]), "3 heads, which must divide q's 2"),
                      ((*_qkv(d=96)[:1], *_qkv(d=96)[1:]), "head_dim 96")]:
        with pytest.raises((ValueError, TypeError), match=why):
            torch.ops.axe.attention(*args)


def test_op_fake_tensors_opcheck_and_compile(op):
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = len(op.KERNEL._memo)
    with FakeTensorMode():
        q, k, v = _qkv(b=3, sq=1000, skv=2048, hq=32, hk=8, d=128)
        assert torch.ops.axe.attention(q, k, v, False, 0.1).shape == (3, 1000, 32, 128)
    assert len(op.KERNEL._memo) == before                       # nothing built or launched
    q, k, v = _qkv()
    torch.library.opcheck(torch.ops.axe.attention.default, (q, k, v, True, None),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    def layer(q, k, v):
        return torch.ops.axe.attention(q * 1, k, v, True).sum(-1)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q, k, v), layer(q, k, v))


def test_pingpong_schedule_overlaps_and_takes_turns():
    art = A.build(1, 300, 300, 2, 2, 128, "float16", False, name="attention_test_pp", variant="pp")
    ptx = art.ptx
    assert "wgmma.wait_group.sync.aligned 1" in ptx                  # S_j waited for while P·V runs on
    # Q·Kᵀ and P·V (8 k16 steps each), each issued in the loop and in the prologue or the tail
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16", ptx)) == 8 * 4
    assert "bar.arrive" in ptx and art.launch["resources"]["spill_stores"] == 0
    with pytest.raises(ValueError, match="ping-pong schedule takes turns between 2 or 3 consumer warpgroups, not 1"):
        A.make(1, 300, 300, 2, 2, 128, variant="pp", consumers=1)
    with pytest.raises(ValueError, match="unknown variant 'pp4'"):
        A.make(1, 300, 300, 2, 2, 128, variant="pp4")
    with pytest.raises(ValueError, match="unknown configuration \\['tile'\\]"):
        A.make(1, 300, 300, 2, 2, 128, tile=3)


@pytest.mark.parametrize("q_tiles, section, heads", [(1, 1, 1), (5, 1, 3), (4, 2, 6), (17, 32, 64), (3, 8, 8)])
def test_tile_order_is_a_bijection_longest_first_within_a_section(q_tiles, section, heads):
    seen = [A.tile_order(bx, q_tiles, section) for bx in range(q_tiles * heads)]
    assert sorted(seen) == [(qt, h) for qt in range(q_tiles) for h in range(heads)]
    for bx, (qt, h) in enumerate(seen):
        assert h // section == bx // (section * q_tiles)                 # section by section
        if bx % (section * q_tiles):                                     # in a section: query tiles descend
            assert qt <= seen[bx - 1][0]


def test_section_heads_keeps_a_section_in_l2():
    P = lambda seq, d, hq, hk, b, causal: A.Problem(b, seq, seq, hq, hk, d, "bfloat16", causal)  # noqa: E731
    assert A.section_heads(P(2048, 128, 16, 16, 8, False), 16) == 1       # no mask: a head's tiles side by side
    # causal, K and V of a head 1 MiB: 4·132/16 = 33 heads wanted, 32 fit in L2_KV_BYTES (and divide 128)
    assert A.section_heads(P(2048, 128, 16, 16, 8, True), 16) == 32
    # 8 MiB a head: 4 fit (5 wanted); with 4 query heads a kv head, 16 fit: the smallest divisor >= 5
    assert A.section_heads(P(16384, 128, 16, 16, 1, True), 128) == 4
    assert A.section_heads(P(16384, 128, 16, 4, 1, True), 128) == 8
    # 7 heads (prime): the whole batch or one head; here the budget holds all 7
    assert A.section_heads(P(512, 64, 7, 7, 1, True), 3) == 7


def test_each_default_variant_is_built_for_its_head_size():
    from kernels.parts.attention_variants import DEFAULTS, HEAD_DIMS, VARIANTS, default
    assert set(DEFAULTS) == {(d, c) for d in A.HEAD_DIMS for c in (False, True)}
    for (d, c), steps in DEFAULTS.items():
        bounds = [b for b, _ in steps]
        assert bounds[-1] is None and bounds[:-1] == sorted(bounds[:-1])     # ascending, then the rest
        for b, v in steps:
            assert v in VARIANTS and d in HEAD_DIMS[v]
            assert default(d, c, b) == v                                    # a bound is its own step's
            if b is not None:
                assert default(d, c, b + 1) != v or bounds.count(b) > 1
    assert default(64, True) == DEFAULTS[(64, True)][-1][1]
    assert A.make(1, 64, 64, 1, 1, 64).meta["variant"] == default(64, False, 64) == "pp3_pm"
    assert A.make(1, 16384, 16384, 1, 1, 64).meta["variant"] == "ov3"


def _run_turns(ops, order):
    """Run the per-warpgroup barrier ops (:func:`kernels.attention.turn_schedule`) on a model of the
    hardware's named barriers (a barrier of 256 threads = two warpgroups' arrivals, a sync waits for
    its generation to complete, arrivals of one warpgroup count again), picking the runnable
    warpgroup by ``order`` (a priority list or a random generator); returns None or why it stuck."""
    count, gen = {}, {}
    pc, waiting = [0] * len(ops), [None] * len(ops)
    issued = []
    while True:
        runnable = [w for w in range(len(ops)) if pc[w] < len(ops[w])
                    and (waiting[w] is None or gen.get(waiting[w][0], 0) > waiting[w][1])]
        if not runnable:
            break
        w = order.choice(runnable) if hasattr(order, "choice") else min(runnable, key=order.index)
        if waiting[w] is not None:
            waiting[w] = None
            pc[w] += 1
            continue
        op, b = ops[w][pc[w]]
        if op == "issue":
            issued.append((b, w))
            pc[w] += 1
            continue
        g = gen.get(b, 0)
        count[b] = count.get(b, 0) + 1
        if count[b] == 2:
            count[b], gen[b] = 0, g + 1
        if op == "arrive":
            pc[w] += 1
        else:
            waiting[w] = (b, g)
    stuck = [w for w in range(len(ops)) if pc[w] < len(ops[w])]
    if stuck:
        return f"warpgroups {stuck} stuck at {[ops[w][pc[w]] for w in stuck]}"
    if any(count.values()):
        return f"arrivals left pending at exit: {count}"
    # the turns: within a block index, warpgroups in order, and tile by tile block after block
    if issued != sorted(issued):
        return f"blocks out of turn: {issued}"
    return None


@pytest.mark.parametrize("consumers", [2, 3])
def test_pingpong_turns_never_deadlock_across_persistent_tiles(consumers):
    """The benchmark's hang (b=32 h=32 seq=512 d=64 causal, pp_p / pp3_p): unchained turns across a
    persistent CTA's tiles let warpgroup 0 pass the turn twice before warpgroup 1 took it."""
    import random
    ns = [1, 1, 2, 4, 1, 3]                       # causal tiles of one persistent CTA (n = 1: the diagonal)
    eager = list(range(consumers))                # warpgroup 0 runs ahead whenever it can
    assert "stuck" in _run_turns(A.turn_schedule(consumers, ns, chained=False), eager)
    for chained, tiles in ((True, ns), (False, ns[:1]), (True, ns[:1])):   # persistent; one tile a CTA
        ops = A.turn_schedule(consumers, tiles, chained)
        assert _run_turns(ops, eager) is None and _run_turns(ops, eager[::-1]) is None
        rng = random.Random(consumers)
        for _ in range(200):
            assert _run_turns(ops, rng) is None


def test_persistent_pingpong_builds_chained_turns():
    art = A.build(2, 512, 512, 4, 4, 64, "bfloat16", True, name="attention_test_pp3_p", variant="pp3_p")
    ptx = art.ptx
    assert ptx.count("bar.arrive") >= 3 and art.launch["resources"]["spill_stores"] == 0


def test_section_is_a_configuration_that_must_divide_the_heads():
    """``section`` replaces :func:`section_heads`' choice (the ``*_p1`` variants: a head at a time when
    causal); a value that does not divide batch · q_heads would break tile_order's bijection: refused."""
    assert A.make(2, 512, 512, 4, 4, 64, causal=True, variant="pp_p1").meta["variant"] == "pp_p1"
    with pytest.raises(ValueError, match=r"section=3 .* positive divisor of batch · q_heads = 8"):
        A.make(2, 512, 512, 4, 4, 64, causal=True, section=3)


# --- the block mask and the warpgroup broadcast (mask="block", wg_broadcast: fewer ALU-pipe instructions) ---

@pytest.mark.parametrize("n", [128, 176])
def test_block_mask_bounds_keep_exactly_the_visible_keys(n):
    # brute force over every thread and register of the wgmma D fragment: a block every row keeps whole
    # (block_whole) holds no masked key, and elsewhere the per-thread bound keeps exactly key <= row and
    # key < seq_kv; the register/thread split of the coordinates is a sum (what the bound relies on)
    lay = d_fragment(n, "tx")
    blocks = A.mask_blocks(lay, n)
    assert sorted(r for _, _, regs in blocks for r, _, _ in regs) == list(range(64 * n // 128))
    for r in range(0, 64 * n // 128, 5):
        for t in range(0, 128, 7):
            got = tuple(a + b for a, b in zip(coords(lay, (64, n), r, 0), coords(lay, (64, n), 0, t)))
            assert got == coords(lay, (64, n), r, t)
    for seq_kv, causal in ((1000, True), (1000, False), (4 * n, True), (77, True)):
        ragged = seq_kv % n != 0
        for row0 in (0, 64, 128, 192, 320, 960):
            for col0 in range(0, min(seq_kv, row0 + 64 + n), n):
                for b0, w, regs in blocks:
                    lo = col0 + b0
                    whole = all(A.block_whole(lo, w, row0, seq_kv, ragged, causal))
                    for t in range(128):
                        row_t, col_t = coords(lay, (64, n), 0, t)
                        for r, rr, cc in regs:
                            row, col = coords(lay, (64, n), r, t)
                            key = col0 + col
                            keep = key < seq_kv and (not causal or key <= row0 + row)
                            if whole:
                                assert keep, (seq_kv, causal, row0, col0, b0, t, r)
                            else:
                                bound = A.block_bound(lo, rr, row0, row_t, col_t, seq_kv, ragged, causal, min)
                                assert (cc - b0 <= bound) == keep, (seq_kv, causal, row0, col0, b0, t, r)


@pytest.mark.parametrize("sq, skv, causal", [(77, 77, True), (200, 333, False), (333, 200, True), (300, 300, True)])
def test_block_mask_value_gives_the_softmax_of_minus_infinity(sq, skv, causal):
    # the block mask moves a score to MASKED (finite) instead of -inf: every row keeps key 0, so its running
    # max is finite from the first tile and MASKED's exp2 is 0; the tiled model agrees with a direct softmax
    rng = np.random.default_rng()
    q, k, v = rng.standard_normal((sq, 64)) * 2, rng.standard_normal((skv, 64)) * 2, rng.standard_normal((skv, 64))
    want_o, want_lse = _direct(q, k, v, causal, 0.125)
    for bm, bn in ((64, 128), (192, 128), (128, 176)):
        o, lse = A.online_softmax_reference(q, k, v, causal, 0.125, bm, bn, masked=A.MASKED)
        assert np.abs(o - want_o).max() < 1e-12 and np.abs(lse - want_lse).max() < 1e-12


def test_block_mask_and_broadcast_are_configurations_with_checked_values():
    from kernels.parts.attention_variants import VARIANTS
    with pytest.raises(ValueError, match="mask must be one of"):
        A.make(1, 64, 64, 1, 1, 64, mask="tree")
    for name in ("pp3_pu", "pp3_pm", "pp3m", "pp_p1m", "pp176m"):
        assert VARIANTS[name]["wg_broadcast"] is True
    assert A.make(1, 64, 64, 1, 1, 64, causal=True, variant="pp3_pm").meta["variant"] == "pp3_pm"


def _alu(art):
    """(main loop ALU-pipe instructions, the same behind the loop's forward branches, opcode counts)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "sass_count", os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                                   "sass_count.py"))
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    if sc.nvdisasm() is None:
        pytest.skip("nvdisasm not installed (pip install nvidia-cuda-nvdisasm)")
    insns = sc.parse(sc.disassemble(art.cubin))
    span = sc.main_loop(insns)
    body = sc.body(insns, span)
    _, guarded = sc.guarded(insns, span)
    return sc.alu(sc.counts(body)), sc.alu(sc.counts(guarded)), sc.counts(body)


@pytest.mark.parametrize("d, default, ours", [(64, "pp3_p", "pp3_pm"), (128, "pp_p1", "pp_p1m")])
def test_block_mask_variant_issues_fewer_alu_instructions_per_key_tile(d, default, ours):
    # the assembler's output (nvdisasm of the cubin ptxas wrote) is the oracle: in the consumers' key
    # loop (the innermost loop holding the wgmmas and the exp2s) the variant issues fewer ALU-pipe
    # instructions in all (the broadcast: the Q slot's descriptors on the uniform datapath) and in the
    # masked tile's guarded code (the block mask: FMA-pipe instructions instead of compares and selects);
    # ragged and causal so that both terms of the mask are built; no spills either way
    arts = {v: A.build(1, 1000, 1000, 4, 4, d, "bfloat16", True, name=f"attention_alu_{v}", variant=v)
            for v in (default, ours)}
    (base, base_mask, base_ops), (new, new_mask, new_ops) = (_alu(arts[v]) for v in (default, ours))
    assert new < base and new_mask < base_mask / 2, (base, new, base_mask, new_mask)
    assert new_ops["ISETP"] + new_ops["FSEL"] < (base_ops["ISETP"] + base_ops["FSEL"]) / 4
    assert new_ops["MUFU"] == base_ops["MUFU"] and new_ops["HGMMA"] == base_ops["HGMMA"]   # the same work
    assert arts[ours].launch["resources"]["spill_stores"] <= arts[default].launch["resources"]["spill_stores"]


def test_skip_dead_keeps_the_wgmmas_asynchronous():
    # the loop that skips a warpgroup's dead key tiles keeps each wgmma stage inside one branch: ptxas
    # (its own report, the oracle) serializes wgmmas whose stage a branch splits (C7514), and would spill
    # if the branches cost registers; the refusal of the simple loop names the entry
    kw = dict(name="attention_skip_dead", causal=True)
    base = A.build(1, 1000, 1000, 4, 4, 64, "bfloat16", variant="pp3_pm", **kw)
    for v in ("pp3_pmd", "pp3md"):
        art = A.build(1, 1000, 1000, 4, 4, 64, "bfloat16", variant=v, **kw)
        assert "C7514" not in art.log and "serialized" not in art.log, v
        assert art.launch["resources"]["spill_stores"] <= base.launch["resources"]["spill_stores"], v
    assert "C7514" not in base.log
    with pytest.raises(ValueError, match="skip_dead runs in the overlap and pingpong loops"):
        A.make(1, 64, 64, 1, 1, 64, causal=True, variant="simple", skip_dead=True)
