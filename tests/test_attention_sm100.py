"""The attention of kernels/attention.py on sm_100a (kernels/parts/attention_tcgen05.py), on the CPU:
compile-verified only, since no Blackwell GPU is lent.

- for several problems (causal or not, head 64 and 128, bf16 and fp16, grouped-query heads, ragged
  lengths 77 and 1000, the LSE) the sm_100a build succeeds, ptxas accepts it without spills, and the
  PTX holds what the schedules chose: tcgen05.mma as many times as the recorded plans issue (Q·Kᵀ:
  N = bn, K = head / 16 steps; P·V: N = head, K = bn / 16), tcgen05.ld / st, commits on mbarriers,
  tcgen05.alloc / dealloc in pairs within TMEM's 512 columns, TMA tensor loads and stores, no wgmma;
  every mbarrier wait is the bounded one; the tensor maps carry the tensors' real extents;
- the two MMAs the kernel records (Q·Kᵀ and P·V, with their shared layouts, descriptors and
  instruction descriptors) run on the NumPy model of the PTX ISA (tests/tcgen05_model.py), and the
  softmax warpgroup's tcgen05.ld plans read back numpy's products;
- the rows the softmax keeps per thread (``ROW_VALUES``) are those the tcgen05.ld fragment gives it;
- the NumPy model of the tiled online softmax at this body's tiling (128 query rows, the row's key
  tile) matches a direct softmax;
- refusals name the condition; the sm_90a build of the same kernel object is unchanged.
"""

import math
import os
import re
import sys

import numpy as np
import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import axe.lang as Ax  # noqa: E402
import tcgen05_model as M  # noqa: E402
from axe.backends.cuda import tmem_words  # noqa: E402
from axe.backends.cuda.schedules import tcgen05 as tc  # noqa: E402
from kernels import attention as A  # noqa: E402
from kernels.parts import attention_tcgen05 as B  # noqa: E402
from kernels.parts.fragments import check_coords, coords  # noqa: E402
from tcgen05_readback import ld_tile  # noqa: E402
from test_tcgen05 import B_AT, SM100, _desc, _smem_image  # noqa: E402

PROBLEMS = {   # (batch, seq_q, seq_kv, q_heads, kv_heads, head_dim, dtype, causal), lse, configuration
    "d64_bf16_causal_gqa_77": ((2, 77, 77, 4, 2, 64, "bfloat16", True), True, {}),
    "d128_f16_causal_gqa_1000": ((2, 1000, 1000, 4, 1, 128, "float16", True), True, {}),
    "d128_bf16_full_1000x77": ((1, 1000, 77, 2, 2, 128, "bfloat16", False), False, {}),
    "d64_f16_full_77x1000": ((1, 77, 1000, 8, 2, 64, "float16", False), True, {}),
    "d128_bf16_causal_300_bn64_3stages": ((1, 300, 300, 2, 2, 128, "bfloat16", True), False, dict(bn=64, stages=3)),
}


@pytest.fixture(scope="module", params=sorted(PROBLEMS))
def built(request):
    """``(problem arguments, lse, artifact, bn)`` of an sm_100a build."""
    args, lse, cfg = PROBLEMS[request.param]
    art = A.build(*args, lse=lse, target="sm_100a", name=f"attention_sm100_{request.param}", **cfg)
    return args, lse, art, cfg.get("bn", A.TARGETS["sm_100a"]["bn"][args[5]])


def test_build_is_tcgen05_with_no_spills(built):
    args, lse, art, bn = built
    D = args[5]
    ptx, res = art.ptx, art.launch["resources"]
    assert art.cubin                                         # ptxas accepted it for sm_100a
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert res["registers"] <= 255
    print(f"{art.name}: {res['registers']} registers, no spills")
    assert "wgmma" not in ptx and "setmaxnreg" not in ptx
    calls = [r.call for r in art.records if r.chosen == "tcgen05"]
    plans = [tc.tcgen05_plan(c, SM100) for c in calls]
    qk = [p for c, p in zip(calls, plans) if _tmem_col(c.operands["C"]) in (0, bn)]       # the S buffers
    pv = [p for c, p in zip(calls, plans) if _tmem_col(c.operands["C"]) == 2 * bn]        # O after them
    n_kv = -(-args[2] // bn)
    one_tile = n_kv == 1                                     # one key tile: the loop is dead code
    # S_0, S_1 and S_2 (where the key tiles may reach them: causal counts are run-time), S_{j+2} in the
    # loop in either buffer; O += P·V at j = 0 (overwrite) and in the loop
    static = not args[7]
    assert len(qk) == 1 + (n_kv > 1 or not static) + (n_kv > 2 or not static) + 2 and len(pv) == 2
    assert len(qk) + len(pv) == len(plans)
    assert {(p.n, p.k_tiles) for p in qk} == {(bn, D // 16)} and {(p.n, p.k_tiles) for p in pv} == {(D, bn // 16)}
    assert all(p.m == 128 and p.cta_group == 1 for p in plans)
    assert not any(p.ts for p in qk) and all(p.ts for p in pv)          # P·V takes P from TMEM
    issued = sum(len(list(p.steps())) for p in plans)
    want = (D // 16 + bn // 16) if one_tile else issued
    assert len(re.findall(r"tcgen05\.mma\.cta_group::1\.kind::f16", ptx)) == want
    # each MMA site commits to its barrier and to its ring slot
    commits = re.findall(r"tcgen05\.commit\.cta_group::1\.mbarrier::arrive::one\.shared::cluster\.b64", ptx)
    assert len(commits) == 2 * (2 if one_tile else len(plans))
    assert "tcgen05.ld.sync.aligned.16x256b" in ptx and "tcgen05.wait::ld.sync.aligned" in ptx
    assert ("tcgen05.st.sync.aligned.16x256b" in ptx) == (not one_tile)     # O's rescale needs a 2nd tile
    assert f"tcgen05.st.sync.aligned.16x128b.x{B.PACK // 8}.b32" in ptx      # P, two 16-bit values a word
    assert "stmatrix" in ptx and "fence.proxy.async.shared::cta" in ptx     # O's epilogue
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx          # O's TMA store


def _tmem_col(t):
    (c,) = t.layout.map((0, 0), t.shape)
    return c["TCol"]


def test_tmem_is_one_allocation_freed_once(built):
    """One allocation (two S buffers and O, rounded up to a power of two): a CTA holding one of two
    allocations while waiting for the other could deadlock with a co-resident one doing the same."""
    args, _, art, bn = built
    D = args[5]
    src = art.cuda_source
    allocs = re.findall(r"tcgen05_alloc_alloc\w*\([^;]*\(uint\)(\d+)\);", src)
    frees = re.findall(r"tcgen05_dealloc_dealloc\w*\([^;]*\(uint\)(\d+)\);", src)
    assert allocs == frees == [str(1 << (2 * bn + D + bn // 2 - 1).bit_length())], (allocs, frees)
    ptx = art.ptx
    assert ptx.count("tcgen05.alloc.cta_group::1") == 1 and ptx.count("tcgen05.dealloc.cta_group::1") == 1
    assert ptx.count("tcgen05.relinquish_alloc_permit") == 1


def test_mma_d_addresses_are_the_buffers_columns(built):
    """The emitted tcgen05.mma's D addresses are the TMEM base plus S buffer 0's, S buffer 1's and O's
    columns (0, bn, 2·bn) — no view offset counted twice (lanes: 0, M = 128 from lane 0) — and P·V's A
    address is P's first 32-bit column, after O (2·bn + head), plus 8 columns (16 elements) a k-step."""
    args, _, art, bn = built
    D = args[5]
    d = re.findall(r"tcgen05_mma_[st]s_mma_cta_group__1_kind__f16\(\(?_ptr_\d+\[0\](?: \+ \(uint\)(\d+)\))?,",
                   art.cuda_source)
    one_tile = -(-args[2] // bn) == 1 and not args[7]
    assert {int(x or 0) for x in d} == ({0, 2 * bn} if one_tile else {0, bn, 2 * bn}), d
    a = re.findall(r"tcgen05_mma_ts_mma_cta_group__1_kind__f16\([^,]*, \(_ptr_\d+\[0\] \+ \(uint\)(\d+)\),",
                   art.cuda_source)
    assert {int(x) for x in a} == {2 * bn + D + 8 * k for k in range(bn // 16)}, a


def test_every_mbarrier_wait_is_bounded(built):
    art = built[2]
    src = art.cuda_source
    assert "tvm_builtin_cuda_mbarrier_wait" not in src                  # the unbounded wait
    calls = re.findall(r"axe_mbarrier_wait_bounded\(", src)
    assert len(calls) >= 1 + 2 + 2 + 2 + 1                              # def + q, K, V, s, p, o (+ loop copies)
    # in the PTX every try_wait is the bounded helper's (suspend-time hint, then %globaltimer)
    assert "%globaltimer" in art.ptx
    assert all("shared::cta.b64 p," in w for w in re.findall(r"mbarrier\.try_wait[^\n]*", art.ptx))


def test_launch_and_tensor_maps_use_the_real_extents(built):
    (b, sq, skv, hq, hk, D, _, _), lse, art, _ = built
    L = art.launch
    assert L["block"] == [B.THREADS, 1, 1] and L["grid"] == [-(-sq // B.ROWS) * hq * b, 1, 1]
    maps = {m["param"]: m for m in L["tensormaps"]}
    assert maps["Q_map"]["shape"] == [hq * D, sq, b] and maps["O_map"]["shape"] == [hq * D, sq, b]
    assert maps["K_map"]["shape"] == [hk * D, skv, b] and maps["V_map"]["shape"] == [hk * D, skv, b]
    assert maps["K_map"]["strides_bytes"] == [hk * D * 2, skv * hk * D * 2]
    assert maps["Q_map"]["box"] == [64, B.ROWS, 1] and maps["O_map"]["box"] == [64, B.ROWS, 1]
    assert [a["name"] for a in L["args"]] == ["Q_", "K_", "V_", "O_"] + (["LSE_"] if lse else [])


# --- the MMAs on the NumPy model of the ISA ----------------------------------------------------------

@pytest.fixture(scope="module", params=[64, 128], ids=["d64", "d128"])
def records(request):
    D = request.param
    k = A.make(1, 200, 300, 1, 1, D, "float16", True)
    return D, Ax.build_func(k, "sm_100a")[1].records


def _mma(call, a_val, b_val):
    """Run a recorded tcgen05.mma call on the model: A and B written where the call's layouts put
    them, every instruction of its plan at its D column (C's own, the view's offset included: what
    :func:`test_mma_d_addresses_are_the_buffers_columns` reads in the CUDA); returns the model's TMEM."""
    plan = tc.tcgen05_plan(call, SM100)
    assert not isinstance(plan, str), plan
    smem = _smem_image(_smem_image(np.zeros(2 * B_AT, np.uint8), plan.local["A"], a_val), plan.local["B"], b_val, B_AT)
    tm = M.Tmem()
    for mi, ni, ki, dcol, (am, ak), (bn, bk), k in plan.steps():
        M.mma([tm], [smem], dcol, _desc(plan.a, am, ak), _desc(plan.b, bn, bk, B_AT), plan.idesc, k > 0, 1)
    return tm, plan


def _read(tm, ld_call):
    """The registers a tcgen05.ld plan leaves in the softmax warpgroup, as the (rows, cols) tile."""
    ld = tc.ld_plan(ld_call, SM100)
    assert not isinstance(ld, str), ld
    return ld_tile(tm, ld, ld_call.operands["dst"])


def test_qk_and_pv_on_the_isa_model(records):
    """S = Q·Kᵀ into either S buffer (A = Q, B = K's tile transposed: K-major) and O = P·V (A = P from
    TMEM, B = V: MN-major) as the kernel records them, executed on the model and read back by the
    softmax's tcgen05.ld plans of that buffer and of the final O, equal numpy's products; P reaches
    TMEM as the kernel writes it: chunk by chunk, packed two to a word (:func:`_packed`, the law
    :func:`test_pack_pairs_pairs_neighbouring_columns` checks) and stored by the recorded tcgen05.st
    plans."""
    D, recs = records
    rng = np.random.default_rng(7)
    mmas = [r.call for r in recs if r.chosen == "tcgen05"]
    lds = [r.call for r in recs if r.chosen == "tcgen05_ld" and r.call.operands["dst"].mem == "local"]
    bn = mmas[0].operands["B"].shape[1]
    qks = [c for c in mmas if _tmem_col(c.operands["C"]) < 2 * bn]
    assert {_tmem_col(c.operands["C"]) for c in qks} == {0, bn}           # both buffers are written
    for qk in qks:
        col = _tmem_col(qk.operands["C"])
        s_ld = next(c for c in lds if c.operands["dst"].name == "s_acc" and tc.ld_plan(c, SM100).col0 == col)
        q = rng.standard_normal((128, D)).astype(np.float16)
        k = rng.standard_normal((bn, D)).astype(np.float16)
        tm, plan = _mma(qk, q, k.T)
        assert M.decode_idesc(plan.idesc)["trans_b"] == 0               # K's rows are Kᵀ's columns: K-major
        np.testing.assert_allclose(_read(tm, s_ld), q.astype(np.float32) @ k.T.astype(np.float32),
                                   rtol=1e-5, atol=1e-3)
    (o_ld,) = [c for c in lds if c.operands["dst"].name == "o_acc"]
    p_sts = [r.call for r in recs if r.chosen == "tcgen05_ld" and r.call.operands["dst"].mem == "tmem"
             and r.call.operands["src"].dtype == "uint32"][:bn // B.PACK]       # key tile 0's P, chunk by chunk
    p_col = _tmem_col(p_sts[0].operands["dst"])
    for pv in [c for c in mmas if _tmem_col(c.operands["C"]) == 2 * bn]:
        p = rng.random((128, bn)).astype(np.float32)
        v = rng.standard_normal((bn, D)).astype(np.float16)
        tm = M.Tmem()
        for st in p_sts:
            c0 = 2 * (_tmem_col(st.operands["dst"]) - p_col)                # the chunk's first P column
            _store_words(tm, st, _packed(p[:, c0:c0 + B.PACK], st.operands["src"]))
        plan = tc.tcgen05_plan(pv, SM100)
        assert plan.ts and M.decode_idesc(plan.idesc)["trans_b"] == 1   # A from TMEM; V (keys × dim) MN-major
        smem = _smem_image(np.zeros(2 * B_AT, np.uint8), plan.local["B"], v, B_AT)
        A_t = plan.local["A"]
        for mi, ni, ki, dcol, (am, ak), (bn_, bk), k in plan.steps():
            (ca,) = A_t.layout.map((am, ak), A_t.shape)
            a_addr = (ca["TLane"] << 16) | ca["TCol"] * 16 // 32
            M.mma([tm], [smem], dcol, a_addr, _desc(plan.b, bn_, bk, B_AT), plan.idesc, k > 0, 1, a_in_tmem=True)
        want = p.astype(np.float16).astype(np.float32) @ v.astype(np.float32)   # P rounded to the input type
        np.testing.assert_allclose(_read(tm, o_ld), want, rtol=1e-5, atol=1e-3)


def _packed(p, words):
    """The word registers of each thread holding ``p`` (rows, 2·cols) by the law of ``pack_pairs``:
    the word at (i, c) is fp16(p[i, 2c]) | fp16(p[i, 2c + 1]) << 16."""
    out = np.zeros((128, words.layout.span("m")), np.uint32)
    bits = p.astype(np.float16).view(np.uint16).astype(np.uint32)
    for i, c in np.ndindex(*words.shape):
        for x in words.layout.map((i, c), words.shape):
            out[x["tx"], x["m"]] = bits[i, 2 * c] | bits[i, 2 * c + 1] << 16
    return out


def _store_words(tm, st_call, words):
    """The warps' tcgen05.st of their word registers by the call's plan, on the model (the inverse of
    its ld: register k of lane t goes to ``fragment_position``)."""
    st = tc.ld_plan(st_call, SM100)
    assert not isinstance(st, str) and st.store, st
    for w in range(4):
        for base, dl, col in st.steps():
            for t in range(32):
                for k in range(st.per_instr):
                    row, c = M.fragment_position(st.shape, t, k)
                    tm.cells[32 * w + dl + row, col + c] = words[32 * w + t, base + k]


@pytest.mark.parametrize("cols", [(0, 128), (0, 32), (96, 128)])
def test_pack_pairs_pairs_neighbouring_columns(cols):
    """``pack_pairs``' registers (of the softmax's S tile, whole or a slice, and a word tile): the word
    at (i, c) of a thread packs the registers holding columns 2c and 2c + 1 of row i in that same
    thread, read here through :func:`kernels.parts.fragments.coords` of both layouts."""
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import tirx as IRB

    from axe.schedules.context import building
    lo, hi = cols
    with building("sm_100a"), IRBuilder(), IRB.prim_func():
        s_regs = Ax.registers((128, 128), "float32", B.fragment(128), name="s")
        words = Ax.registers((128, (hi - lo) // 2), "uint32", Ax.cuda.tcgen05_fragment("16x128b", (hi - lo) // 8, 128),
                             name="w")
        pairs = tmem_words.pair_registers(words, s_regs[:, lo:hi])
    assert sorted(pairs) == list(range(words.layout.span("m")))
    for t in range(128):
        for r, (a, b) in pairs.items():
            i, c = coords(words.layout, words.shape, r, t)
            assert coords(s_regs.layout, s_regs.shape, a, t) == (i, lo + 2 * c)
            assert coords(s_regs.layout, s_regs.shape, b, t) == (i, lo + 2 * c + 1)
    with building("sm_100a"), IRBuilder(), IRB.prim_func():
        other = Ax.registers((128, 16), "uint32", Ax.cuda.tcgen05_fragment("32x32b", 16, 128), name="w32")
        with pytest.raises(ValueError, match="which threads"):
            tmem_words.pair_registers(other, Ax.registers((128, 32), "float32", B.fragment(32), name="s32"))


def test_row_values_are_the_rows_of_the_ld_fragment():
    check_coords(B.ROW_VALUES, (B.ROWS, 1), 128)
    for bn in (64, 128):
        frag = tc.ld_fragment("16x256b", bn // 8, B.ROWS)       # what B.fragment(bn) asks for
        check_coords(frag, (B.ROWS, bn), 128)
        for t in range(128):
            held = {coords(frag, (B.ROWS, bn), r, t)[0] for r in range(frag.span("m"))}
            mine = {coords(B.ROW_VALUES, (B.ROWS, 1), r, t)[0] for r in range(B.ROW_VALUES.span("m"))}
            assert held == mine, (bn, t, held, mine)


@pytest.mark.parametrize("sq, skv, causal, d", [(77, 77, True, 64), (1000, 1000, True, 128), (1000, 77, False, 128),
                                                (77, 1000, False, 64), (300, 129, True, 64)])
def test_online_softmax_at_this_tiling_matches_a_direct_softmax(sq, skv, causal, d):
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((sq, d)) * 2, rng.standard_normal((skv, d)) * 2, rng.standard_normal((skv, d))
    bn = B.Blackwell(A.Problem(1, sq, skv, 1, 1, d, "bfloat16", causal), A.TARGETS["sm_100a"]).bn
    o, lse = A.online_softmax_reference(q, k, v, causal, 0.3, B.ROWS, bn)
    s = q @ k.T * 0.3
    if causal:
        s = np.where(np.arange(skv)[None, :] <= np.arange(sq)[:, None], s, -np.inf)
    m = s.max(1, keepdims=True)
    e = np.exp(s - m)
    assert np.abs(o - e @ v / e.sum(1, keepdims=True)).max() < 1e-12
    assert np.abs(lse - (m[:, 0] + np.log(e.sum(1)))).max() < 1e-12


# --- the synchronisation on a model of mbarriers, TMA and the tensor core --------------------------

class Hazard(AssertionError):
    pass


def run_protocol(programs, pick):
    """Run :func:`protocol`'s agents (the producer, MMA and softmax threads) plus the TMA engine (any
    queued copy may land next) and the tensor core (its queue in order) until all finish, choosing
    among the agents that can move with ``pick(list) -> index``.  mbarriers count arrivals (one per
    phase here) and a wait passes on its phase number's parity, as the hardware's does; passing a
    phase other than the intended one (the barrier ran two phases ahead) is a hazard, and so are
    reading a resource that does not hold the expected version and overwriting a version before its
    reader has read it.  Raises :class:`Hazard` or returns the barriers' completed phases."""
    done = {}                                  # (barrier, stage) -> completed phases
    held, unread = {}, set()                   # resource -> version; resources whose version awaits a read
    pc = {a: 0 for a in programs}
    tma, tc = [], []

    def arrive(bar, stage):
        done[bar, stage] = done.get((bar, stage), 0) + 1

    def read(res, version, who):
        if held.get(res) != version:
            raise Hazard(f"{who} reads {res} expecting {version}, it holds {held.get(res)}")
        unread.discard(res)

    def write(res, version, who):
        if any(op[0] == "mma" and res in [r for r, _ in op[1]] for op in tc):
            raise Hazard(f"{who} overwrites {res} while a queued MMA reads it")
        if res in unread:
            raise Hazard(f"{who} overwrites {res} ({held[res]}) with {version} before it was read")
        held[res] = version
        if res != "Q":                         # Q is read by every Q·Kᵀ
            unread.add(res)

    def ready(agent):
        if agent == "tma":
            return bool(tma)
        if agent == "tc":
            return bool(tc)
        if pc[agent] == len(programs[agent]):
            return False
        op = programs[agent][pc[agent]]
        return op[0] != "wait" or done.get((op[1], op[2]), 0) % 2 != op[3] % 2

    def step(agent):
        if agent == "tma":
            res, version, bar, stage = tma.pop(pick(list(range(len(tma)))))
            write(res, version, "TMA")
            arrive(bar, stage)
            return
        if agent == "tc":
            op = tc.pop(0)
            if op[0] == "mma":
                for res, version in op[1]:
                    read(res, version, "the tensor core")
                write(*op[2], "the tensor core")
            else:
                for bar, stage in op[1]:
                    arrive(bar, stage)
            return
        op = programs[agent][pc[agent]]
        pc[agent] += 1
        if op[0] == "wait" and done.get((op[1], op[2]), 0) != op[3] + 1:
            raise Hazard(f"{agent} passes {op[1]}[{op[2]}] for phase {op[3]} after {done.get((op[1], op[2]), 0)} "
                         "completions")
        if op[0] == "arrive":
            arrive(op[1], op[2])
        elif op[0] == "tma":
            tma.append(op[1:])
        elif op[0] in ("mma", "commit"):
            tc.append(op)
        elif op[0] in ("read", "write"):
            (read if op[0] == "read" else write)(op[1], op[2], agent)

    agents = list(programs) + ["tma", "tc"]
    while True:
        can = [a for a in agents if ready(a)]
        if not can:
            break
        step(can[pick(can)])
    stuck = {a: programs[a][pc[a]] for a in programs if pc[a] < len(programs[a])}
    if stuck:
        raise Hazard(f"deadlock: {stuck}")
    return done


def _interleavings(seed=0, count=200):
    yield lambda xs: 0                                         # eager: the first agent that can move
    yield lambda xs: len(xs) - 1                               # reversed
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield lambda xs: int(rng.integers(len(xs)))


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_protocol_has_no_deadlock_or_hazard(stages):
    """For 1..6 key tiles, under eager, reversed and 200 random interleavings: every agent finishes,
    every read sees the version it expects, nothing is overwritten unread, every wait passes the
    phase it means, and each barrier completes once per use (none left half-arrived)."""
    for n in range(1, 7):
        for pick in _interleavings(n, 200):
            done = run_protocol(B.protocol(n, stages), pick)
            assert done[("p_full", 0)] == done[("o_done", 0)] == n
            assert sum(done.get(("s_full", b), 0) for b in range(B.S_BUFFERS)) == n
            assert sum(done.get(("k_empty", s), 0) for s in range(stages)) == n


def test_one_stage_deadlocks_and_is_refused():
    """With one slot per ring the producer's V_1 waits for P_0·V_0, which the MMA thread issues only
    after S_2, whose K_2 the producer loads after V_1: the model deadlocks, so the tiling refuses it."""
    with pytest.raises(Hazard, match="deadlock"):
        run_protocol(B.protocol(3, 1), lambda xs: 0)
    with pytest.raises(ValueError, match=r"stages must be an int >= 2 \(S_\{j\+2\} is issued before P_j·V_j\), got 1"):
        B.Blackwell(A.Problem(1, 64, 64, 1, 1, 64, "bfloat16", False), dict(bn=128, stages=1))


@pytest.mark.parametrize("mutation, why", [
    ("softmax skips its o_done wait", r"reads O expecting|overwrites P"),
    ("S_{j+2} before the p_full wait", r"overwrites \('S', 0\)"),
    ("a single S buffer", "deadlock|overwrites|passes s_full"),
])
def test_protocol_model_catches_broken_orders(mutation, why):
    """The model is not vacuous: three plausible mistakes are each caught by some interleaving."""
    progs = B.protocol(4, 2)
    if mutation == "softmax skips its o_done wait":
        progs["softmax"] = [op for op in progs["softmax"][:-2] if op[:2] != ("wait", "o_done")] + progs["softmax"][-2:]
    elif mutation == "S_{j+2} before the p_full wait":
        i = progs["mma"].index(("wait", "p_full", 0, 0))
        progs["mma"][i:i + 4] = progs["mma"][i + 1:i + 4] + [progs["mma"][i]]
    else:
        progs = {a: [(op[0], op[1], 0, op[3] * 2 + op[2]) if op[:2] == ("wait", "s_full") else
                     ("read", ("S", 0), op[2]) if op[0] == "read" and op[1][0] == "S" else
                     ("mma", op[1], (("S", 0), op[2][1])) if op[0] == "mma" and op[2][0][0] == "S" else
                     ("commit", [("s_full", 0) if b == "s_full" else (b, st) for b, st in op[1]])
                     if op[0] == "commit" else op for op in prog] for a, prog in progs.items()}
    with pytest.raises(Hazard, match=why):
        for pick in _interleavings(1, 200):
            run_protocol({a: list(p) for a, p in progs.items()}, pick)


# --- refusals and the other target -------------------------------------------------------------------

@pytest.mark.parametrize("kw, why", [
    (dict(bn=96), r"the key tile bn=96 must be 64 or 128"),
    (dict(bn=192), r"the key tile bn=192 must be 64 or 128"),
    (dict(consumers=3), r"consumers configure the sm_90a body; the sm_100a row takes \['bn', 'stages'\]"),
    (dict(variant="pp3"), r"variant='pp3' configure the sm_90a body"),
])
def test_sm100a_refusals_name_the_condition(kw, why):
    with pytest.raises(Ax.KernelError, match=why):
        A.build(1, 64, 64, 1, 1, 64, target="sm_100a", **kw)


def test_shared_memory_overflow_is_refused():
    p = A.Problem(1, 64, 64, 1, 1, 128, "bfloat16", False)
    with pytest.raises(ValueError, match=r"need 288 KiB of shared memory, more than 227 KiB"):
        B.Blackwell(p, dict(bn=128, stages=4))
    assert B.Blackwell(p, dict(bn=128, stages=3)).smem * 2 == (128 * 128 + 6 * 128 * 128) * 2     # P is in TMEM


def test_gpu_cases_are_sm100a_problems_the_tiling_takes():
    """tests/gpu/cases_attention_sm100.py (for a B200 some day): every case is a problem and
    configuration the sm_100a tiling accepts, named apart from the sm_90a cases, checked by their check."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "gpu"))
    import cases_attention_sm100 as cases
    assert len(cases.CASES) >= 20 and all(n.startswith("attention_sm100_") for n in cases.CASES)
    for name, kw in cases.CASES.items():
        p = A.Problem(kw["batch"], kw["seq_q"], kw["seq_kv"], kw["q_heads"], kw["kv_heads"], kw["head_dim"],
                      kw["dtype"], kw["causal"], kw["lse"])
        config = {k: kw[k] for k in ("bn", "stages") if k in kw}
        B.Blackwell(p, {**A.TARGETS["sm_100a"], **config})
        assert cases.CHECKS[name] is cases.hopper.check_attention and name in cases.hopper.CASES


def test_sm90a_build_of_the_same_kernel_is_unchanged():
    """An sm_100a build in between leaves the kernel object's sm_90a TIR identical to a fresh one's."""
    k = A.make(1, 77, 77, 2, 1, 64, "bfloat16", True)
    Ax.build_func(k, "sm_100a")
    func, ctx = Ax.build_func(k, "sm_90a")
    assert func.script() == Ax.build_func(A.make(1, 77, 77, 2, 1, 64, "bfloat16", True), "sm_90a")[0].script()
    chosen = {r.call.op + ":" + r.chosen for r in ctx.records}
    assert "gemm:wgmma" in chosen and not any("tcgen05" in c for c in chosen)


def test_scale_reaches_the_softmax():
    """The exp2 constant is scale · log2 e (the law's ``exp(scale·s − m)``)."""
    art = A.build(1, 64, 64, 1, 1, 64, "bfloat16", scale=0.125, target="sm_100a", name="attention_sm100_scale")
    c = np.float32(0.125 * math.log2(math.e))
    assert re.search(r"0f%08X" % np.frombuffer(c.tobytes(), np.uint32)[0], art.ptx)
