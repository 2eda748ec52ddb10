"""Axe's Triton conversions against Triton's own expectations.

The expected bases below are re-typed, as data, from Triton's
``unittest/Dialect/TritonGPU/LinearLayoutConversionsTest.cpp`` (triton-lang/triton, commit
db1ed003402dba242f67073bd5c2365a875db310): every ``#blocked`` case, every ``#nvidia_mma``
accumulator case and every ``#dot_op`` case with an NVIDIA mma parent.  Each case's name is
the gtest name (a suffix numbers several EXPECTs of one test).  Not covered: slice layouts
(Triton pads their registers to a legacy element count), AMD mfma/wmma, shared layouts.

Each case is also imported into Axe and checked by brute force over the whole hardware
space (``from_linear``'s law), its register count compared with Triton's (zero register
bases are replicated registers, an Axe replica on ``m``), and exported back exactly.
"""

from itertools import product as cartesian

import pytest

from axe.layout import Coord
from axe.layout.interop.linear import LinearLayout, blocked, from_linear, nvidia_dot, nvidia_mma, to_linear
from test_linear_layouts import apply_ll      # the XOR-of-bases oracle, from the paper's definition

AXES = {"register": "m", "lane": "lane", "warp": "warp", "block": "cta"}


def bl(shape, spt, tpw, wpc, cpg, split, order, corder):
    """Argument order of the Triton test's ``blocked(spt, tpw, wpb, cpg, cSplit, ord, cOrd)``."""
    return blocked(shape, spt, tpw, wpc, order, cga=(cpg, split, corder))


def mma(shape, ver, instr, warps, cpg=None, split=None, corder=None):
    return nvidia_mma(shape, ver, instr, warps, cga=None if cpg is None else (cpg, split, corder))


def dot(shape, ver, warps, op, kw):
    return nvidia_dot(shape, op, kw, ver, warps)


# name: (built layout, expected {in_dim: bases})
CASES = {
    "SimpleBlocked": (lambda: bl((16,), (1,), (4,), (4,), (1,), (1,), (0,), (0,)),
                      {"register": [], "lane": [[1], [2]], "warp": [[4], [8]], "block": []}),
    "CTADuplication": (lambda: bl((32,), (1,), (4,), (4,), (4,), (2,), (0,), (0,)),
                       {"register": [], "lane": [[1], [2]], "warp": [[4], [8]], "block": [[16], [0]]}),
    "CTABroadcast": (lambda: bl((64, 128), (8, 1), (8, 4), (1, 4), (1, 2), (1, 2), (0, 1), (1, 0)),
                     {"register": [[1, 0], [2, 0], [4, 0], [0, 16], [0, 32]],
                      "lane": [[8, 0], [16, 0], [32, 0], [0, 1], [0, 2]],
                      "warp": [[0, 4], [0, 8]], "block": [[0, 64]]}),
    "ShapeLargerThanLayout": (lambda: bl((128,), (1,), (4,), (4,), (1,), (1,), (0,), (0,)),
                              {"register": [[16], [32], [64]], "lane": [[1], [2]], "warp": [[4], [8]],
                               "block": []}),
    "ShapeLargerThanLayout2DDegenerate": (
        lambda: bl((128, 1), (1, 1), (4, 1), (4, 1), (1, 1), (1, 1), (0, 1), (1, 0)),
        {"register": [[16, 0], [32, 0], [64, 0]], "lane": [[1, 0], [2, 0]], "warp": [[4, 0], [8, 0]],
         "block": []}),
    "ShapeSmallerThanLayout": (lambda: bl((8,), (4,), (4,), (4,), (1,), (1,), (0,), (0,)),
                               {"register": [[1], [2]], "lane": [[4], [0]], "warp": [[0], [0]], "block": []}),
    "ReversedOrder": (lambda: bl((1, 64), (1, 1), (32, 1), (1, 8), (1, 1), (1, 1), (0, 1), (1, 0)),
                      {"register": [[0, 8], [0, 16], [0, 32]], "lane": [[0, 0]] * 5,
                       "warp": [[0, 1], [0, 2], [0, 4]], "block": []}),
    "ReplicateInRegisterDim": (lambda: bl((32,), (2,), (4,), (1,), (1,), (1,), (0,), (0,)),
                               {"register": [[1], [8], [16]], "lane": [[2], [4]], "warp": [], "block": []}),
    "OneDimTooLargeAnotherTooSmall": (
        lambda: bl((128, 16), (1, 4), (8, 4), (4, 1), (2, 2), (2, 1), (1, 0), (1, 0)),
        {"register": [[0, 1], [0, 2], [32, 0]], "lane": [[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
         "warp": [[8, 0], [16, 0]], "block": [[0, 0], [64, 0]]}),
    "RepeatInCTGDimFirst": (lambda: bl((4,), (1,), (1,), (4,), (2,), (2,), (0,), (0,)),
                            {"register": [], "lane": [], "warp": [[1], [0]], "block": [[2]]}),
    "SmallerThanCTALayout": (lambda: bl((2,), (1,), (1,), (1,), (4,), (4,), (0,), (0,)),
                             {"register": [], "lane": [], "warp": [], "block": [[1], [0]]}),
    "Skinny": (lambda: bl((64, 1), (8, 1), (8, 4), (1, 4), (1, 2), (1, 2), (0, 1), (0, 1)),
               {"register": [[1, 0], [2, 0], [4, 0]], "lane": [[8, 0], [16, 0], [32, 0], [0, 0], [0, 0]],
                "warp": [[0, 0], [0, 0]], "block": [[0, 0]]}),
    "BlockedOrder": (lambda: bl((1024, 128), (2, 2), (4, 8), (2, 2), (2, 2), (2, 2), (1, 0), (1, 0)),
                     {"register": [[0, 1], [1, 0], [0, 32], [16, 0], [32, 0], [64, 0], [128, 0], [256, 0]],
                      "lane": [[0, 2], [0, 4], [0, 8], [2, 0], [4, 0]], "warp": [[0, 16], [8, 0]],
                      "block": [[0, 64], [512, 0]]}),
    # the case: two zero register bases, each thread holds 4 copies
    "Blocked4D": (lambda: bl((2, 1, 1, 1), (1, 1, 1, 4), (2, 1, 1, 16), (1, 2, 4, 1), (1, 1, 1, 1),
                             (1, 1, 1, 1), (3, 0, 1, 2), (3, 2, 1, 0)),
                  {"register": [[0, 0, 0, 0]] * 2, "lane": [[0, 0, 0, 0]] * 4 + [[1, 0, 0, 0]],
                   "warp": [[0, 0, 0, 0]] * 3, "block": []}),

    "MMAv2_16x16": (lambda: mma((16, 16), 2, (16, 8), (1, 1), (1, 1), (1, 1), (0, 1)),
                    {"register": [[0, 1], [8, 0], [0, 8]], "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                     "warp": [], "block": []}),
    "MMAv2_32x32": (lambda: mma((32, 32), 2, (16, 8), (1, 1), (1, 1), (1, 1), (0, 1)),
                    {"register": [[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]],
                     "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], "warp": [], "block": []}),
    "MMAv2_ExtendDim2": (lambda: mma((16, 128), 2, (16, 8), (1, 1), (1, 1), (1, 1), (0, 1)),
                         {"register": [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64]],
                          "lane": [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], "warp": [], "block": []}),
    "MMAv2_Cga": (lambda: mma((64, 128, 128), 2, (1, 16, 8), (16, 1, 1), (4, 2, 2), (4, 2, 1), (2, 1, 0)),
                  {"register": [[0, 0, 1], [0, 8, 0], [0, 0, 8], [0, 0, 16], [0, 0, 32], [0, 0, 64],
                                [0, 16, 0], [0, 32, 0]],
                   "lane": [[0, 0, 2], [0, 0, 4], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
                   "warp": [[1, 0, 0], [2, 0, 0], [4, 0, 0], [8, 0, 0]],
                   "block": [[0, 0, 0], [0, 64, 0], [16, 0, 0], [32, 0, 0]]}),
    "MMAv2_Small3D": (lambda: mma((1, 128, 128), 2, (1, 16, 8), (16, 1, 1), (4, 2, 2), (4, 2, 1), (2, 1, 0)),
                      {"register": [[0, 0, 1], [0, 8, 0], [0, 0, 8], [0, 0, 16], [0, 0, 32], [0, 0, 64],
                                    [0, 16, 0], [0, 32, 0]],
                       "lane": [[0, 0, 2], [0, 0, 4], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
                       "warp": [[0, 0, 0]] * 4,
                       "block": [[0, 0, 0], [0, 64, 0], [0, 0, 0], [0, 0, 0]]}),
}

_MMA_LANE = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]]
for instr in ((16, 16, 8), (16, 8, 8)):
    CASES[f"MMAv3_64x16[{instr[1]}]"] = (
        lambda instr=instr: mma((64, 16), 3, instr, (4, 1), (1, 1), (1, 1), (1, 0)),
        {"register": [[0, 1], [8, 0], [0, 8]], "lane": _MMA_LANE, "warp": [[16, 0], [32, 0]], "block": []})
CASES["MMAv3_128x16"] = (lambda: mma((128, 16), 3, (16, 16, 8), (4, 1), (1, 1), (1, 1), (1, 0)),
                         {"register": [[0, 1], [8, 0], [0, 8], [64, 0]], "lane": _MMA_LANE,
                          "warp": [[16, 0], [32, 0]], "block": []})
CASES["MMAv3_1024x1024"] = (
    lambda: mma((1024, 1024), 3, (16, 16, 8), (4, 1), (1, 1), (1, 1), (1, 0)),
    {"register": [[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [0, 64], [0, 128], [0, 256], [0, 512],
                  [64, 0], [128, 0], [256, 0], [512, 0]],
     "lane": _MMA_LANE, "warp": [[16, 0], [32, 0]], "block": []})
for i, (shape, reg, warp) in enumerate([
        ((64, 32), [[0, 1], [8, 0], [0, 8], [0, 16]], [[16, 0], [32, 0], [0, 0]]),
        ((64, 64), [[0, 1], [8, 0], [0, 8], [0, 16]], [[16, 0], [32, 0], [0, 32]]),
        ((128, 64), [[0, 1], [8, 0], [0, 8], [0, 16], [64, 0]], [[16, 0], [32, 0], [0, 32]]),
        ((256, 64), [[0, 1], [8, 0], [0, 8], [0, 16], [64, 0], [128, 0]], [[16, 0], [32, 0], [0, 32]])]):
    CASES[f"MMAv3_4x2Warps[{i}]"] = (
        lambda shape=shape: mma(shape, 3, (16, 32, 16), (4, 2), (1, 1), (1, 1), (1, 0)),
        {"register": reg, "lane": _MMA_LANE, "warp": warp, "block": []})
_R3 = [[0, 1], [8, 0], [0, 8]]
for i, (shape, reg, warp) in enumerate([
        ((16, 16), _R3, [[0, 0]] * 4),
        ((32, 16), _R3, [[16, 0], [0, 0], [0, 0], [0, 0]]),
        ((64, 16), _R3, [[16, 0], [32, 0], [0, 0], [0, 0]]),
        ((128, 16), _R3 + [[64, 0]], [[16, 0], [32, 0], [0, 0], [0, 0]]),
        ((32, 32), _R3, [[16, 0], [0, 0], [0, 16], [0, 0]]),
        ((64, 32), _R3, [[16, 0], [32, 0], [0, 16], [0, 0]])]):
    CASES[f"MMAv3_4x4Warps[{i}]"] = (
        lambda shape=shape: mma(shape, 3, (16, 16, 8), (4, 4), (1, 1), (1, 1), (1, 0)),
        {"register": reg, "lane": _MMA_LANE, "warp": warp, "block": []})

_LANE_A8 = [[0, 8], [0, 16], [1, 0], [2, 0], [4, 0]]
_LANE_B8 = [[8, 0], [16, 0], [0, 1], [0, 2], [0, 4]]
for name, args, reg, lane, warp in [
    ("DotMMAv2_tile_kwidth8[0]", ((16, 64), 2, (1, 1), 0, 8),
     [[0, 1], [0, 2], [0, 4], [8, 0], [0, 32]], _LANE_A8, []),
    ("DotMMAv2_tile_kwidth8[1]", ((64, 8), 2, (1, 1), 1, 8),
     [[1, 0], [2, 0], [4, 0], [32, 0]], _LANE_B8, []),
    ("DotMMAv2_large_warp4_kwidth8[0]", ((128, 128), 2, (4, 1), 0, 8),
     [[0, 1], [0, 2], [0, 4], [8, 0], [0, 32], [0, 64], [64, 0]], _LANE_A8, [[16, 0], [32, 0]]),
    ("DotMMAv2_large_warp4_kwidth8[1]", ((128, 64), 2, (4, 1), 1, 8),
     [[1, 0], [2, 0], [4, 0], [32, 0], [64, 0], [0, 8], [0, 16], [0, 32]], _LANE_B8, [[0, 0], [0, 0]]),
    ("DotMMAv2_large_warp4_kwidth8[2]", ((64, 128), 2, (4, 1), 1, 8),
     [[1, 0], [2, 0], [4, 0], [32, 0], [0, 8], [0, 16], [0, 32], [0, 64]], _LANE_B8, [[0, 0], [0, 0]]),
    ("DotMMAv2_3D[0]", ((16, 128, 128), 2, (2, 4, 2), 0, 8),
     [[0, 0, 1], [0, 0, 2], [0, 0, 4], [0, 8, 0], [0, 0, 32], [0, 0, 64], [0, 64, 0], [2, 0, 0], [4, 0, 0],
      [8, 0, 0]],
     [[0, 0, 8], [0, 0, 16], [0, 1, 0], [0, 2, 0], [0, 4, 0]],
     [[0, 0, 0], [0, 16, 0], [0, 32, 0], [1, 0, 0]]),
    ("DotMMAv2_3D[1]", ((8, 128, 64), 2, (2, 4, 2), 1, 8),
     [[0, 1, 0], [0, 2, 0], [0, 4, 0], [0, 32, 0], [0, 64, 0], [0, 0, 16], [0, 0, 32], [2, 0, 0], [4, 0, 0]],
     [[0, 8, 0], [0, 16, 0], [0, 0, 1], [0, 0, 2], [0, 0, 4]],
     [[0, 0, 8], [0, 0, 0], [0, 0, 0], [1, 0, 0]]),
    ("DotMMAv3_warp4_kwidth2[0]", ((64, 16), 3, (4, 1), 0, 2), _R3, _MMA_LANE, [[16, 0], [32, 0]]),
    ("DotMMAv3_warp4_kwidth2[1]", ((128, 16), 3, (4, 1), 0, 2), _R3 + [[64, 0]], _MMA_LANE,
     [[16, 0], [32, 0]]),
    ("DotMMAv3_warp4_kwidth2[2]", ((128, 32), 3, (4, 1), 0, 2), _R3 + [[0, 16], [64, 0]], _MMA_LANE,
     [[16, 0], [32, 0]]),
    ("DotMMAv3_mixed_warp_kwidth4", ((128, 64), 3, (4, 2), 0, 4),
     [[0, 1], [0, 2], [8, 0], [0, 16], [0, 32], [64, 0]], [[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
     [[16, 0], [32, 0], [0, 0]]),
    ("DotMMAv2_split_warp_kwidth8[0]", ((32, 64), 2, (2, 2), 0, 8),
     [[0, 1], [0, 2], [0, 4], [8, 0], [0, 32]], _LANE_A8, [[0, 0], [16, 0]]),
    ("DotMMAv2_split_warp_kwidth8[1]", ((64, 16), 2, (2, 2), 1, 8),
     [[1, 0], [2, 0], [4, 0], [32, 0]], _LANE_B8, [[0, 8], [0, 0]]),
    ("DotMMAv2_split_warp_kwidth8[2]", ((64, 128), 2, (2, 2), 0, 8),
     [[0, 1], [0, 2], [0, 4], [8, 0], [0, 32], [0, 64], [32, 0]], _LANE_A8, [[0, 0], [16, 0]]),
    ("DotMMAv2_split_warp_kwidth8[3]", ((128, 32), 2, (2, 2), 1, 8),
     [[1, 0], [2, 0], [4, 0], [32, 0], [64, 0], [0, 16]], _LANE_B8, [[0, 8], [0, 0]]),
]:
    CASES[name] = (lambda args=args: dot(*args), {"register": reg, "lane": lane, "warp": warp, "block": []})


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_triton(name):
    build, bases = CASES[name]
    got = build()
    want = LinearLayout(bases, got.out_dims)
    for k in ("register", "lane", "warp", "block"):
        assert got.bases.get(k, ()) == want.bases[k], (name, k, got.bases.get(k))
    assert got == want


@pytest.mark.parametrize("name", sorted(n for n in CASES if "1024" not in n and "Cga" not in n
                                        and "Small3D" not in n and "3D[" not in n and n != "BlockedOrder"))
def test_axe_import_is_exact(name):
    """Brute force over the whole hardware space: Axe's holders of each element are exactly
    the (register, lane, warp, block) indices Triton's bases send to it."""
    LL = CASES[name][0]()
    A, shape = from_linear(LL)
    names = [n for n in ("register", "lane", "warp", "block") if LL.bases.get(n)]
    holders: dict = {}
    for hs in cartesian(*(range(LL.in_size(n)) for n in names)):
        h = dict(zip(names, hs))
        holders.setdefault(apply_ll(LL, **h), set()).add(Coord({AXES[n]: v for n, v in h.items()}))
    for u in cartesian(*(range(s) for s in shape)):
        assert A.map(u, shape) == frozenset(holders[u]), (name, u)
    registers = {c["m"] for cs in holders.values() for c in cs}
    assert len(registers) == LL.in_size("register")        # Triton's register count, copies included
    assert to_linear(A, shape) == LL


@pytest.mark.parametrize("name", ["MMAv3_1024x1024", "MMAv2_Cga", "BlockedOrder", "DotMMAv2_3D[0]"])
def test_large_cases_round_trip(name):
    """Too big to enumerate: the export of the import is the same bases, zero ones included."""
    LL = CASES[name][0]()
    A, shape = from_linear(LL)
    assert to_linear(A, shape) == LL
    nreg = sum(1 for v in LL.bases["register"] if not any(v))
    assert sum(1 for e, _, a in A.replica if a == "m" for _ in range(e.bit_length() - 1)) == nreg


def test_refusals_name_the_operand():
    with pytest.raises(ValueError, match="sizePerThread"):
        blocked((16,), (3,), (4,), (4,), (0,))
    with pytest.raises(ValueError, match="order"):
        blocked((16, 16), (1, 1), (4, 8), (1, 1), (0, 0))
    with pytest.raises(ValueError, match="CTASplitNum"):
        blocked((16,), (1,), (4,), (4,), (0,), cga=((2,), (4,), (0,)))
    with pytest.raises(ValueError, match="version"):
        nvidia_mma((16, 16), 1, (16, 8), (1, 1))
    with pytest.raises(ValueError, match="operand 1"):
        nvidia_dot((16, 16), 1, 2, 3, (4, 1))
