"""The production GEMM with inferred shared tiles (issue 27 item 4): kernels/inferred/pipelined_gemm.py
carves every stage tile and store buffer out of the shared pool as an open view
(``Ax.view(pool, Ax.INFER, shape, base=..., name=role)``), and inference gives each role the layout
kernels/gemm.py writes by hand.

Oracles: the hand build of kernels/gemm.py at the same configuration (its TIR, CUDA source, PTX
instruction counts, tensor maps and dispatch records), ptxas (both compile to cubins), the hand
layouts of kernels/parts/tiles.py, and TVM's arithmetic prover for the one expression that differs."""

import collections
import os
import re
from itertools import product

import pytest

tvm = pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
from tvm.script import tirx as T  # noqa: E402

import axe.lang as Ax  # noqa: E402
from kernels import gemm  # noqa: E402
from kernels.inferred import pipelined_gemm as inferred  # noqa: E402
from kernels.parts.tiles import swizzled  # noqa: E402

SIZE = (512, 512, 256)
#: (B's layout, configuration): the default 128×256×64 tile with 4 stages, 128×128, 6 stages
CONFIGS = [("row", {}), ("col", {}), ("col", {"tile_n": 128}), ("row", {"tile_n": 128, "stages": 6})]
INSTRUCTIONS = r"(?:stmatrix|wgmma\.mma_async|cp\.async\.bulk\.tensor)[\w.:]*"


def _pair(b_major, cfg):
    return (gemm.make(*SIZE, "bfloat16", b_major, name="g", **cfg),
            inferred.make(*SIZE, "bfloat16", b_major, name="g", **cfg))


ADDRESS = re.compile(r"T\.address_of\(buffer\[([^\]]+)\]\)")


def _same_values(a, b):
    """Brute force: the index expressions ``a`` and ``b`` (TIR's printed integer arithmetic) agree
    for the warpgroup index ``wg`` of either consumer (0, 1) and loop variables 0..7."""
    names = sorted(set(re.findall(r"[A-Za-z_]\w*", a + b)))
    ranges = [range(2) if n == "wg" else range(8) for n in names]
    return all(eval(a, {}, dict(zip(names, vs))) == eval(b, {}, dict(zip(names, vs)))  # noqa: S307 - TIR's own text
               for vs in product(*ranges))


@pytest.mark.parametrize("b_major,cfg", CONFIGS)
def test_the_inferred_pipelined_gemm_lowers_to_the_hand_kernel(b_major, cfg):
    """TIR: every line equal but the wgmma calls, which differ only in the shared addresses of their
    descriptors, equal in value (a consumer's A rows are a box of the stage's A tile, whose base
    the slice writes ``floormod(wg·64, 128)·64``, simplified, where the hand writes ``wg·4096``).  CUDA source: equal
    once ``(wg & 1)`` reads ``wg``.  PTX: the same TMA, wgmma and stmatrix instructions; both
    compiled by ptxas; the same tensor maps and dispatch choices."""
    hand, mine = _pair(b_major, cfg)
    (hf, _), (mf, _) = Ax.build_func(hand), Ax.build_func(mine)
    hl, ml = hf.script().splitlines(), mf.script().splitlines()
    assert len(hl) == len(ml)
    differ = 0
    for x, y in zip(hl, ml):
        if x == y:
            continue
        assert "T.ptx.wgmma" in x and ADDRESS.sub("", x) == ADDRESS.sub("", y), (x, y)
        for a, b in zip(ADDRESS.findall(x), ADDRESS.findall(y), strict=True):
            differ += a != b
            assert _same_values(a, b), (a, b)
    assert differ > 0          # the box's base is written differently: the comparison compares something
    h, m = Ax.compile_kernel(hand), Ax.compile_kernel(mine)
    assert h.cubin and m.cubin
    assert m.cuda_source.replace("(wg_ptr[0] & 1)", "wg_ptr[0]") == h.cuda_source
    counts = lambda art: collections.Counter(re.findall(INSTRUCTIONS, art.ptx))  # noqa: E731
    assert counts(m) == counts(h) and any("wgmma" in k for k in counts(m))
    assert m.launch["tensormaps"] == h.launch["tensormaps"]
    assert [r.chosen for r in m.records] == [r.chosen for r in h.records]


def _fixed(k):
    _, ctx = Ax.build_func(k)
    return {ctx.infer.tiles[i].name: f for i, f in ctx.infer.fixed.items()}


@pytest.mark.parametrize("b_major", ["row", "col"])
def test_each_role_takes_the_hand_layout_from_the_instruction_that_reads_it(b_major):
    """As and Bs are fixed by wgmma (one layout for all stages and both consumers), Cs by stmatrix:
    the layouts kernels/parts/tiles.swizzled writes by hand; explain names each instruction."""
    k = inferred.make(*SIZE, "bfloat16", b_major)
    fixed = _fixed(k)
    b_tile = (64, 256) if b_major == "row" else (256, 64)
    assert {n: f.layout for n, f in fixed.items()} == {"As": swizzled(128, 64), "Bs": swizzled(*b_tile),
                                                       "Cs": swizzled(64, 128)}
    wgmma = "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16"
    assert fixed["As"].rule == f"{wgmma} shared A operand" and fixed["Bs"].rule == f"{wgmma} shared B operand"
    assert fixed["Cs"].rule == "16-byte rows of stmatrix.x4"
    text = Ax.explain(k, brief=True)
    for role, what in (("As", "shared A operand: gemm at"), ("Bs", "shared B operand: gemm at"),
                       ("Cs", "16-byte rows of stmatrix.x4: copy at")):
        assert re.search(rf"^  {role}\[[\d, ]+\] bfloat16 shared: .*{what}", text, re.M), role


def _pool_kernel(body):
    @Ax.kernel(name="views")
    def k():
        @T.prim_func
        def k(A_: T.Buffer((64, 64), "float16"), A_map: T.handle("tensormap")):
            _bx, _tx = Ax.launch(1, 128)
            A = Ax.param(A_, tensormap=A_map)
            pool = Ax.cuda.dynamic_shared(3 * 64 * 64, "float16")
            bars = Ax.cuda.mbarrier(count=1, stages=3)
            body(A, pool, bars)
        return k
    return k


def test_a_role_has_one_shape_and_an_open_view_needs_a_name():
    """Two open views of one role with different shapes are refused naming both shapes."""
    def body(A, pool, bars):
        Ax.copy(Ax.view(pool, Ax.INFER, (64, 64), base=0, name="S"), A, barrier=bars[0])
        Ax.copy(Ax.view(pool, Ax.INFER, (32, 64), base=4096, name="S"), A[0:32, :], barrier=bars[1])
    with pytest.raises(Ax.KernelError, match=r"name='S'.*shape \[32, 64\].*declared \[64, 64\]"):
        Ax.build_func(_pool_kernel(body))
    with pytest.raises(Ax.KernelError, match="an open view needs its shape and name="):
        Ax.build_func(_pool_kernel(lambda A, pool, bars: Ax.view(pool, Ax.INFER, (64, 64))))


def test_views_of_one_role_share_the_layout_their_copies_fix():
    """Role S is loaded by TMA at two bases (two stages) and read by ldmatrix from the second one
    only: both stages take the layout the read fixes (the first stage is the same unknown), and
    both TMA loads are built with that layout's swizzle."""
    def body(A, pool, bars):
        for s in range(2):
            Ax.copy(Ax.view(pool, Ax.INFER, (64, 64), base=s * 4096, name="S"), A, barrier=bars[s])
        Ax.cuda.mbarrier_wait(bars, 0, 1)
        r = Ax.registers((64, 64), "float16", name="r")
        Ax.copy(r, Ax.view(pool, Ax.INFER, (64, 64), base=4096, name="S"))
        Ax.copy(Ax.view(pool, swizzled(64, 64), (64, 64), base=8192), r)
    k = _pool_kernel(body)
    fixed = _fixed(k)
    assert set(fixed) == {"S", "r"} and fixed["S"].layout == swizzled(64, 64)
    assert fixed["S"].rule.startswith("16-byte rows of ldmatrix")
    _, ctx = Ax.build_func(k)
    assert [r.chosen for r in ctx.records][:3] == ["tma", "tma", "ldmatrix"]
