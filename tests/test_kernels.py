"""Every kernel in kernels/ (axe-written) builds for sm_90a and sm_100a; ptxas accepts it; the PTX
holds the instructions its schedules promised."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from kernels import rmsnorm, transpose  # noqa: E402

PROMISED = {
    "transpose": ["cp.async.bulk.tensor.2d", "mbarrier", "st.global.v4"],
    "transpose_ldmatrix": ["cp.async.bulk.tensor.2d", "mbarrier", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                           "st.global.u32"],
    "rmsnorm": ["ld.global.v4", "st.global.v4", "shfl.sync.bfly", "bar.sync"],
}
CHOSEN = {
    "transpose": ["tma", "per_thread", "vector"],
    "transpose_ldmatrix": ["tma", "ldmatrix", "vector"],
    "rmsnorm": ["vector", "vector", "per_thread", "cta_smem", "per_thread", "vector"],
}


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("module", [transpose, rmsnorm], ids=["transpose", "rmsnorm"])
def test_kernel_builds(module, target):
    for name, k in Ax.kernels_of(module).items():
        art = Ax.compile_kernel(k, target)
        assert art.cubin, f"{name}: no cubin for {target}"
        for ins in PROMISED[name]:
            assert ins in art.ptx, f"{name} on {target}: PTX lacks {ins}"
        assert [r.chosen for r in art.records] == CHOSEN[name]


def test_kernels_carry_reference_and_inputs():
    for module in (transpose, rmsnorm):
        for k in Ax.kernels_of(module).values():
            assert callable(k.reference) and callable(k.inputs) and k.outputs


def test_transpose_tensormap_spec():
    _, ctx = Ax.build_func(transpose.transpose, "sm_90a")
    (spec,) = ctx.tensormaps
    assert spec["param"] == "A_map" and spec["box"] == [64, 64] and spec["swizzle"] == 128
    assert spec["strides_bytes"] == [transpose.N * 2]
