"""The flash-attention forward (kernels/attention.py) on the CPU machine: one sm_90a build whose PTX
holds the instructions its schedules chose (wgmma ss and rs, TMA tensor copies, mbarriers) and that
ptxas accepted without spills, with tensor maps at the tensors' real extents; the refusals (sizes,
dtypes, heads, targets); the trn1 form of the same source on the NumPy model of NKI; the NumPy
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
    # ragged (77 rows: less than one 128-row query tile), causal, grouped-query heads, head size 64, LSE
    return A.build(2, 77, 77, 4, 2, 64, "bfloat16", True, lse=True, name="attention_test")


def test_ptx_holds_wgmma_tma_and_mbarriers(art):
    ptx = art.ptx
    # Q·Kᵀ from shared memory (8 k16 steps over... head size 64: 4) and P·V with P from registers (128 keys: 8)
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16", ptx)) == 4
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.bf16\.bf16", ptx)) == 8
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes" in ptx
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx          # O's TMA store
    assert "mbarrier.try_wait.parity" in ptx and "mbarrier.arrive.expect_tx" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx and "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert art.cubin and art.launch["resources"]["spill_stores"] == 0


def test_launch_and_tensor_maps_use_the_real_extents(art):
    L = art.launch
    assert L["grid"] == [1 * 4 * 2, 1, 1] and L["block"] == [384, 1, 1]
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


def test_sm100a_is_refused_naming_wgmma():
    with pytest.raises(Ax.KernelError, match="wgmma .* does not exist on sm_100a"):
        A.build(1, 64, 64, 1, 1, 64, target="sm_100a")


def test_trn1_refuses_what_its_body_lacks():
    with pytest.raises(Ax.KernelError, match="does not take a causal mask, head_dim 64"):
        A.build(1, 256, 256, 1, 1, 64, causal=True, target="trn1")


def test_trn1_form_runs_on_the_nki_model():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng()
    art = A.build(2, 300, 300, 1, 1, 128, "bfloat16", target="trn1")
    Q, K, V = (rng.standard_normal((2, 300, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out, _ = art.run(Q=Q, K=K, V=V)
    for b in range(2):
        want, _ = A.online_softmax_reference(*(x[b].astype(np.float64) for x in (Q, K, V)))
        assert np.abs(out["O"][b].astype(np.float64) - want).max() < 2e-2


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
