"""The fused elementwise epilogue (``kernels/parts/epilogues/elementwise.py``; ``gemm.make(...,
epilogue_ops=...)``): ``C = cast(A·B · row_scale[m] · col_scale[n] + bias[n] + residual)``.

Oracles: the part's own contract (which kernel parameters it keeps), the built artifact's call
signature and tensor maps as the runtime reads them (``bind_arguments``, ``tiled_args`` on CPU
tensors), ptxas's report (no spills), the TMA loads in the PTX, and numpy for the reference.  The
GPU checks (``tests/gpu/cases_gemm.py``, the ``ew*`` variants) compare the kernel with torch.
"""

import os
import re

import numpy as np
import pytest

pytest.importorskip("tvm")
torch = pytest.importorskip("torch")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from axe.backends.cuda.tensormap import tiled_args  # noqa: E402
from axe.runtime import bind_arguments  # noqa: E402
from kernels import gemm  # noqa: E402
from kernels.parts.epilogues.elementwise import Elementwise  # noqa: E402
from kernels.parts.epilogues.store import FUSED, ChunkedStore  # noqa: E402
from kernels.parts.mainloops.tma_wgmma import Cooperative, WholeB  # noqa: E402
from kernels.parts.schedulers.persistent import Persistent  # noqa: E402

ALL = tuple(FUSED)
BUILDS = {}


def built(key, **kw):
    if key not in BUILDS:
        BUILDS[key] = gemm.build_dynamic(520, 328, **kw) if key.startswith("dyn") else gemm.build(1000, 520, 328, **kw)
    return BUILDS[key]


def _epilogue(ops):
    main = Cooperative("float16", "row", 128, 256, 64, 4, 6, 0, WholeB())
    return Elementwise(main, Persistent(1000, 520, 128, 256, 132, 16), "float16", 64, 1, ops)


def test_the_part_keeps_exactly_its_operands():
    for ops in (("bias",), ("row_scale", "residual"), ALL):
        e = _epilogue(ops)
        used = {p for o in ops for p in FUSED[o]}
        assert not used & set(e.unused_params)
        assert set(ChunkedStore.unused_params) - set(e.unused_params) == used
        assert set(e.m_maps) == {FUSED[o][1] for o in ops if o in ("row_scale", "residual")}
        assert e.ops == tuple(o for o in ALL if o in ops)        # applied in one fixed order
    assert _epilogue(ALL).operand_bytes == 2 * 4 * (64 + 256 + 256)
    for bad in ((), ("gelu",), ("bias", "scale")):
        with pytest.raises(ValueError, match="epilogue_ops must be a non-empty subset"):
            _epilogue(bad)


def test_a_build_declares_its_operands_and_loads_them_by_tma():
    art = built("bias_res", epilogue_ops=("bias", "residual"))
    names = [a["name"] for a in art.launch["args"] if not a.get("scratch")]
    assert names == ["A_", "B_", "C_", "Bias_", "R_"]
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert set(specs) == {"A_map", "B_map", "C_map", "Bias_map", "R_map"}
    assert specs["Bias_map"]["box"] == [256, 1] and specs["R_map"]["box"] == [64, 64]
    assert all(s["oob_fill"] == "zero" for s in specs.values())     # ragged edges read zeros
    # per tile: the bias slice, and one residual box per 64-column chunk (4 per warpgroup)
    loads = re.findall(r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global\S*", art.ptx)
    assert len(loads) >= 1 + 2 + 1 + 4, loads
    r = art.launch["resources"]
    assert r.get("spill_stores", 0) == 0 and r.get("spill_loads", 0) == 0, r


def test_plain_build_has_no_fused_parameters():
    art = built("plain")
    assert [a["name"] for a in art.launch["args"] if not a.get("scratch")] == ["A_", "B_", "C_"]


@pytest.mark.parametrize("M", [1, 5, 333, 1000])
def test_runtime_m_reads_the_row_vector_and_residual_off_the_tensors(M):
    art = built("dyn", epilogue_ops=ALL)
    specs = {s["param"]: s for s in art.launch["tensormaps"]}
    assert specs["Srow_map"]["shape"] is None and specs["Srow_map"]["strides_bytes"] is None
    assert specs["R_map"]["shape"] is None and specs["Scol_map"]["shape"] == [520, 1]
    shapes = {"A_": (M, 328), "B_": (328, 520), "C_": (M, 520), "Srow_": (1, M), "Scol_": (1, 520),
              "Bias_": (1, 520), "R_": (M, 520)}
    ts = [torch.zeros(shapes.get(a["name"], a["shape"]), dtype=getattr(torch, a["dtype"])) for a in art.launch["args"]]
    b = bind_arguments(art.launch, ts, device_type="cpu")
    assert b.env["M"] == M
    t = b.tensors["Srow_"]
    dims, strides, box, _ = tiled_args(specs["Srow_map"], 0, tuple(t.shape), t.stride(), 4, "float32")
    assert dims == [M, 1] and strides[0] % 16 == 0 and strides[0] >= 4 * M and box == [64, 1]


def test_reference_against_numpy():
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((7, 5)), rng.standard_normal((9, 5))      # B stored N x K
    rs, cs, bias, res = rng.random(7), rng.random(9), rng.standard_normal(9), rng.standard_normal((7, 9))
    want = (A @ B.T) * rs[:, None] * cs[None, :] + bias[None, :] + res
    t = {k: torch.tensor(v) for k, v in dict(A=A, B=B).items()}
    got = gemm.reference(t["A"], t["B"], "col", torch.tensor(rs).view(1, -1), torch.tensor(cs).view(1, -1),
                         torch.tensor(bias).view(1, -1), torch.tensor(res))["C"]
    np.testing.assert_allclose(got.double().numpy(), want, rtol=1e-5, atol=1e-5)


def test_targets_that_lack_it_refuse_by_name():
    with pytest.raises(Ax.TargetError, match="epilogue_ops belong to the GPU form"):
        Ax.compile_kernel(gemm.make(256, 256, 256, epilogue_ops=("bias",)), "trn1")
    with pytest.raises(Exception, match="shared memory"):    # 4 stages + the operands' slices: 227 KiB exceeded
        gemm.build(1000, 1000, 1000, target="sm_100a", epilogue_ops=ALL)
