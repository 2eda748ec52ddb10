"""Every kernel in kernels/ (axe-written) builds for sm_90a and sm_100a; ptxas accepts it; the PTX
holds the instructions its schedules promised."""

import os

import pytest

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

import axe.lang as Ax  # noqa: E402
from kernels import rmsnorm, softmax, transpose  # noqa: E402

PROMISED = {
    "transpose": ["cp.async.bulk.tensor.2d.shared::cluster.global", "mbarrier", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                  "stmatrix.sync.aligned.m8n8.x4.shared.b16", "fence.proxy.async.shared::cta",
                  "cp.async.bulk.tensor.2d.global.shared::cta", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read"],
    "transpose_one_tile": ["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x4.shared.b16",
                           "cp.async.bulk.tensor.2d.global.shared::cta"],
    "transpose_wide": ["ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x4.shared.b16",
                       "cp.async.bulk.tensor.2d.global.shared::cta"],
    "transpose_vector": ["cp.async.bulk.tensor.2d", "mbarrier", "st.global.v4"],
    "transpose_ldmatrix": ["cp.async.bulk.tensor.2d", "mbarrier", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
                           "st.global.u32"],
    "rmsnorm": ["ld.global.v4", "st.global.v4", "shfl.sync.bfly", "bar.sync"],
    "softmax": ["ld.global.v4", "st.global.v4", "shfl.sync.bfly", "max.ftz.f32", "ex2.approx"],
}
CHOSEN = {
    "transpose": ["tma", "ldmatrix", "stmatrix", "tma_store"],
    "transpose_one_tile": ["tma", "ldmatrix", "stmatrix", "tma_store"],
    "transpose_wide": ["tma", "ldmatrix", "stmatrix", "tma_store"],
    "transpose_vector": ["tma", "per_thread", "vector"],
    "transpose_ldmatrix": ["tma", "ldmatrix", "vector"],
    "rmsnorm": ["vector", "vector", "per_thread", "cta_smem", "per_thread", "vector"],
    "softmax": ["vector", "per_thread", "cta_smem", "per_thread", "cta_smem", "per_thread", "vector"],
}


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("module", [transpose, rmsnorm, softmax], ids=["transpose", "rmsnorm", "softmax"])
def test_kernel_builds(module, target):
    for name, k in Ax.kernels_of(module).items():
        art = Ax.compile_kernel(k, target)
        assert art.cubin, f"{name}: no cubin for {target}"
        for ins in PROMISED[name]:
            assert ins in art.ptx, f"{name} on {target}: PTX lacks {ins}"
        assert [r.chosen for r in art.records] == CHOSEN[name]


def test_kernels_carry_reference_and_inputs():
    for module in (transpose, rmsnorm, softmax):
        for k in Ax.kernels_of(module).values():
            assert callable(k.reference) and callable(k.inputs) and k.outputs


def test_transpose_tensormap_spec():
    _, ctx = Ax.build_func(transpose.transpose, "sm_90a")
    load, store = ctx.tensormaps
    assert load["param"] == "A_map" and load["box"] == [64, 64] and load["swizzle"] == 128
    assert load["strides_bytes"] == [transpose.N * 2] and load["shape"] == [transpose.N, transpose.M]
    assert store["param"] == "B_map" and store["box"] == [64, 64] and store["swizzle"] == 128
    assert store["strides_bytes"] == [transpose.M * 2] and store["shape"] == [transpose.M, transpose.N]
    # both maps ask L2 to fill 256-byte lines from DRAM (tma.L2_PROMOTION; benchmarks/tma_l2.py measures it)
    assert load["l2_promotion"] == store["l2_promotion"] == 256
