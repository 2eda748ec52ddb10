"""The Trainium backend: TensorE dispatch by iter intersection, kernels on the NKI model against
NumPy on fresh random data (ragged sizes included), the cost model's accounting, the trn1 build
and its errors.  Oracles: NumPy products and softmax, flop and byte counts from the shapes."""

import json
import os
from math import ceil

import ml_dtypes
import numpy as np
import pytest
from tvm.script import tirx as T

import axe.lang as Ax
from axe.backends.neuron import hardware as hw
from axe.layout import F, P, S
from axe.lang import KernelError, compile_kernel, explain
from axe.schedules.registry import candidates
from kernels.attention import nki_attention
from kernels import gemm
from kernels.nki_reductions import nki_reductions

NP = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16}


def _rng():
    seed = int.from_bytes(os.urandom(4), "little")
    return np.random.default_rng(seed), seed


# ---------------------------------------------------------------------------------------------
# TensorE dispatch


def _gemm_kernel(a_layout, b_layout, c_layout, M=128, N=512, K=128, io=True, dtype="float16"):
    @Ax.kernel(name="mm", outputs=("C",), targets=("trn1",))
    def k():
        @T.prim_func
        def mm(A_: T.Buffer((M, K), dtype), B_: T.Buffer((K, N), dtype), C_: T.Buffer((M, N), "float16")):
            Ax.neuron.core()
            A, B, C = Ax.param(A_), Ax.param(B_), Ax.param(C_)
            a = Ax.neuron.sbuf((M, K), dtype, a_layout, name="a")
            b = Ax.neuron.sbuf((K, N), dtype, b_layout, name="b")
            acc = Ax.neuron.psum((M, N), "float32", c_layout, name="acc")
            if io:
                Ax.copy(a, A[0:M, 0:K])
                Ax.copy(b, B[0:K, 0:N])
            Ax.gemm(acc, a, b)
            if io:
                out = Ax.neuron.sbuf((M, N), "float16", c_layout, name="out")
                Ax.cast(out, acc)
                Ax.copy(C[0:M, 0:N], out)
        return mm
    return k


A_OK = S[(128, 128):(1 @ F, 1 @ P)]
B_OK = S[(128, 512):(1 @ P, 1 @ F)]
C_OK = S[(128, 512):(1 @ P, 1 @ F)]


@pytest.mark.parametrize("a, b, c, reason", [
    (S[(128, 128):(1 @ P, 1 @ F)], B_OK, C_OK, "K piece 0 is on F in A but P in B"),
    (A_OK, S[(128, 512):(512 @ F, 1 @ F)], C_OK, "K piece 0 is on P in A but F in B"),
    (S[(128, 128):(1 @ P, 1 @ F)], S[(128, 512):(512 @ F, 1 @ F)], C_OK, "no K iter lies on the partitions"),
    (A_OK, B_OK, S[(128, 512):(1 @ F, 128 @ F)], "no M iter is on the free axis of A and the partitions of C"),
    (A_OK, B_OK, S[(128, 4, 128):(1 @ P, 128 @ F, 1 @ F)], None),
])
def test_tensore_declines_with_reason(a, b, c, reason):
    k = _gemm_kernel(a, b, c, io=False)   # only the gemm: some of these tiles no DMA could fill
    if reason is None:          # N split in pieces on F that are still contiguous: one instruction
        assert "1 x nisa.nc_matmul K=128 M=128 N=512" in explain(k, "trn1")
        return
    with pytest.raises(KernelError, match="no schedule fits gemm") as err:
        explain(k, "trn1")
    assert reason in str(err.value) and "- nc_matmul" in str(err.value)


def test_fp8_tiles_are_refused_on_trn1():
    """fp8 operands are a gemm the language admits (wgmma takes them on sm_90a), but axe's trn1
    tiles hold 16/32-bit data: the build stops at the SBUF tile, naming it and the dtype, before
    any nc_matmul could be emitted."""
    k = _gemm_kernel(A_OK, B_OK, C_OK, io=False, dtype="float8_e4m3fn")
    with pytest.raises(KernelError, match="sbuf a: dtype float8_e4m3fn is not one of"):
        explain(k, "trn1")


def test_tensore_loops_over_what_exceeds_one_instruction():
    # K = 256 as 2 x 128 on F, M = 256 as 2 x 128 partition blocks of C, N = 1024 (> 512): 2*2*2 = 8
    M, N, K = 256, 1024, 256
    a = S[(256, 2, 128):(1 @ F, 256 @ F, 1 @ P)]
    b = S[(2, 128, 1024):(1024 @ F, 1 @ P, 1 @ F)]
    c = S[(2, 128, 1024):(1024 @ F, 1 @ P, 1 @ F)]
    text = explain(_gemm_kernel(a, b, c, M, N, K), "trn1")
    assert "8 x nisa.nc_matmul K=128 M=128 N=512" in text and "loops: M 2, N 2, K 2" in text
    art = compile_kernel(_gemm_kernel(a, b, c, M, N, K), "trn1")
    rng, seed = _rng()
    A = rng.standard_normal((M, K)).astype(np.float16)
    B = rng.standard_normal((K, N)).astype(np.float16)
    out, _ = art.run(A=A, B=B)
    ref = A.astype(np.float32) @ B.astype(np.float32)
    assert np.abs(out["C"].astype(np.float32) - ref).max() <= 2e-3 * np.abs(ref).max(), seed


def test_c_crossing_a_psum_bank_is_declined():
    c = S[(128, 512):(1 @ P, 1 @ F)] + 256 @ F
    with pytest.raises(KernelError, match="crosses a PSUM bank"):
        explain(_gemm_kernel(A_OK, B_OK, c, io=False), "trn1")


# ---------------------------------------------------------------------------------------------
# kernels on the model against NumPy


@pytest.mark.parametrize("M, N, K, dtype, b_major", [
    (512, 512, 512, "float16", "row"), (1024, 1024, 1024, "bfloat16", "col"), (1000, 700, 300, "bfloat16", "row"),
    (130, 513, 129, "float16", "row"), (300, 1000, 200, "float16", "col"), (777, 1496, 328, "bfloat16", "col")])
def test_gemm_matches_numpy(M, N, K, dtype, b_major):
    """kernels/gemm.py built for trn1 (B row-major, or stored N×K through a transposing DMA)."""
    art = compile_kernel(gemm.make(M, N, K, dtype, b_major), "trn1")
    rng, seed = _rng()
    A = rng.standard_normal((M, K)).astype(NP[dtype])
    B = rng.standard_normal((K, N) if b_major == "row" else (N, K)).astype(NP[dtype])
    out, cost = art.run(A=A, B=B)
    ref = A.astype(np.float32) @ (B.astype(np.float32) if b_major == "row" else B.astype(np.float32).T)
    tol = 4e-3 if dtype == "float16" else 2e-2
    assert np.abs(out["C"].astype(np.float32) - ref).max() <= tol * np.abs(ref).max(), seed
    bn = gemm.TARGETS["trn1"].bn(N)
    assert cost.flops == 2 * 512 * bn * 128 * ceil(M / 512) * ceil(N / bn) * ceil(K / 128)  # whole tiles issued


@pytest.mark.parametrize("n, dtype", [(2048, "bfloat16"), (4096, "float16")])
def test_gemm_figure13_sizes_match_numpy(n, dtype):
    """The large square sizes of the paper's Figure 13 with numerics on.  Small integer inputs
    make the fp32 accumulation exact, so the model's C must equal numpy's product rounded once to
    the output dtype, element for element."""
    art = compile_kernel(gemm.make(n, n, n, dtype), "trn1")
    rng, seed = _rng()
    A, B = (rng.integers(-2, 3, (n, n)).astype(NP[dtype]) for _ in range(2))
    out, _ = art.run(A=A, B=B)
    ref = (A.astype(np.float32) @ B.astype(np.float32)).astype(NP[dtype])
    np.testing.assert_array_equal(out["C"].astype(np.float32), ref.astype(np.float32), err_msg=str(seed))


@pytest.mark.parametrize("n", [512, 1024, 2048])
def test_gemm_cost_model_accounting(n):
    """Figure 13's square sizes through the cost model (TensorE results not computed)."""
    art = compile_kernel(gemm.make(n, n, n), "trn1")
    Z = np.zeros((n, n), np.float16)
    _, cost = art.run(numerics=False, A=Z, B=Z)
    bn = gemm.TARGETS["trn1"].bn(n)
    assert cost.flops == 2 * n ** 3
    assert cost.dma_bytes == 2 * (n * n * (n // bn) + n * n * (n // 512) + n * n)   # A per n-block, B per m-block
    assert cost.counts["nisa.nc_matmul"] == (n // 128) ** 2 * (n // 512)
    assert cost.engine_s["tensor"] == pytest.approx(cost.counts["nisa.nc_matmul"] * 512 * hw.TENSORE_CYCLE_S)
    assert 0.5 < cost.tensore_utilization <= 1.0 + 1e-9


@pytest.mark.parametrize("heads, seq", [(2, 512), (1, 640), (1, 300)])
def test_attention_issues_one_qk_and_four_pv_matmuls_per_block(heads, seq):
    """The flash loop's TensorE work (numerics: tests/test_attention_trn.py)."""
    art = compile_kernel(nki_attention(heads, seq, "bfloat16"), "trn1")
    Z = np.zeros((1, seq, heads, 128), ml_dtypes.bfloat16)
    _, cost = art.run(numerics=False, Q=Z, K=Z, V=Z)
    qt, kt = ceil(seq / 128), ceil(seq / 512)
    assert cost.counts["nisa.nc_matmul"] == heads * qt * kt * 5          # QK^T + 4 PV pieces per block
    assert cost.counts["nisa.nc_transpose"] == heads * qt * kt * 4


def test_attention_cost_model_long_sequence():
    art = compile_kernel(nki_attention(1, 2048, "bfloat16"), "trn1")
    Z = np.zeros((1, 2048, 1, 128), ml_dtypes.bfloat16)
    _, cost = art.run(numerics=False, Q=Z, K=Z, V=Z)
    assert cost.flops == 4 * 2048 * 2048 * 128          # Q·Kᵀ and P·V, no causal skipping
    assert 0 < cost.tensore_utilization < 1 and cost.time_s == max(cost.engine_s.values())


# ---------------------------------------------------------------------------------------------
# build, errors, registry


def test_build_writes_source_and_manifest_that_run_unchanged(tmp_path):
    art = compile_kernel(gemm.make(256, 256, 256, name="g256"), "trn1")
    path = art.save(str(tmp_path))
    man = json.load(open(tmp_path / "g256.manifest.json"))
    assert man["target"] == "trn1" and man["inputs"] == ["A", "B"] and man["outputs"] == ["C"]
    assert {s["chosen"] for s in man["schedules"]} == {"dma_load", "nc_matmul", "engine", "dma_store"}
    from axe.backends.neuron.model import run
    rng, seed = _rng()
    A, B = (rng.standard_normal((256, 256)).astype(np.float16) for _ in range(2))
    (C,), _ = run(open(path).read(), "g256", {"A": A, "B": B})
    np.testing.assert_array_equal(C, art.run(A=A, B=B)[0]["C"])


def test_cli_build_trn1(tmp_path, capsys):
    from axe.cli import main
    assert main(["build", "kernels/gemm.py", "--target", "trn1", "-o", str(tmp_path)]) == 0
    for name in ("gemm_fp16", "gemm_bf16_nt"):      # the file's GPU examples, built for trn1
        assert (tmp_path / "trn1" / name / f"{name}.py").exists()
        assert (tmp_path / "trn1" / name / f"{name}.manifest.json").exists()


def _launching_kernel(on_chip):
    """A GPU-style kernel (``Ax.launch``) staging a tile through ``on_chip(shape, dtype)``."""
    @Ax.kernel(name="gpu_style", outputs=("B",))
    def k():
        @T.prim_func
        def gpu_style(A_: T.Buffer((128, 64), "float16"), B_: T.Buffer((128, 64), "float16")):
            bx, tx = Ax.launch(1, 128)
            A, B = Ax.param(A_), Ax.param(B_)
            s = on_chip((128, 64), "float16")
            Ax.copy(s, A[0:128, 0:64])
            Ax.copy(B[0:128, 0:64], s)
        return gpu_style
    return k


def test_cuda_constructs_in_a_trn1_build_are_named():
    with pytest.raises(KernelError, match=r"GPU shared memory .*CUDA-only construct"):
        compile_kernel(_launching_kernel(lambda shape, dt: Ax.shared(shape, dt, name="s")), "trn1")
    from axe.backends.neuron.emit import TargetError
    with pytest.raises(TargetError, match=r"GPU thread/CTA binding .*CUDA-only construct: it has no meaning on trn1"):
        compile_kernel(_launching_kernel(lambda shape, dt: Ax.neuron.sbuf(shape, dt, name="t")), "trn1")


def test_registry_loads_backends_by_family():
    neuron = {s.name for s in candidates("copy", "neuron")}
    cuda = {s.name for s in candidates("copy", "cuda")}
    assert {"dma_load", "dma_store", "engine_copy", "tensore_transpose"} == neuron   # no scalar TIR schedules
    assert "per_thread" in cuda and not (neuron & cuda)


def test_reductions_over_partitions_and_free_axis():
    k = nki_reductions()
    text = explain(k, "trn1")
    assert "partitions_tensore" in text and "declined: max along the partitions" not in text
    art = compile_kernel(k, "trn1")
    rng, seed = _rng()
    X = rng.standard_normal((128, 300)).astype(np.float32)
    out, _ = art.run(X=X)
    np.testing.assert_allclose(out["R"][:, 0], X.max(1), rtol=1e-6, err_msg=str(seed))
    np.testing.assert_allclose(out["Cs"][0], X.sum(0), rtol=1e-4, atol=1e-4, err_msg=str(seed))


def test_trainium_constructs_in_a_gpu_build_are_named():
    with pytest.raises(KernelError, match=r"Ax.neuron.core is a construct of the neuron backend; this build is for sm_90a"):
        explain(nki_reductions(), "sm_90a")


def test_cli_reports_a_cuda_construct_in_a_trn1_build(tmp_path, capsys):
    from axe.cli import main
    src = tmp_path / "gpu_kernel.py"
    src.write_text('''from tvm.script import tirx as T
import axe.lang as Ax

@Ax.kernel(name="g", outputs=("B",))
def g():
    @T.prim_func
    def g(A_: T.Buffer((128, 64), "float16"), B_: T.Buffer((128, 64), "float16")):
        bx, tx = Ax.launch(1, 128)
        A, B = Ax.param(A_), Ax.param(B_)
        t = Ax.neuron.sbuf((128, 64), "float16", name="t")
        Ax.copy(t, A[0:128, 0:64])
        Ax.copy(B[0:128, 0:64], t)
    return g
''')
    assert main(["build", str(src), "--target", "trn1", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert "axe build:" in err and "CUDA-only construct" in err and "trn1" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_one_source_builds_for_gpus_and_trn1(name):
    """kernels/softmax.py and kernels/rmsnorm.py: the same kernel object builds for sm_90a (its
    GPU schedules) and trn1, and the trn1 build matches numpy on the model."""
    import importlib
    mod = importlib.import_module(f"kernels.{name}")
    k = getattr(mod, name)
    assert "cta_smem" in explain(k, "sm_90a")                   # the GPU build: a CTA-wide reduction
    art = compile_kernel(k, "trn1")
    assert "nl.sum(" in art.source and "for r in nl.affine_range(2)" in art.source
    rng, seed = _rng()
    X = rng.standard_normal((mod.ROWS, mod.N)).astype(np.float16)
    x = X.astype(np.float32)
    if name == "softmax":
        out, _ = art.run(X=X)
        ref = np.exp(x - x.max(1, keepdims=True))
        ref /= ref.sum(1, keepdims=True)
    else:
        W = rng.standard_normal((1, mod.N)).astype(np.float16)
        out, _ = art.run(X=X, W=W)
        ref = x / np.sqrt((x * x).mean(1, keepdims=True) + mod.EPS) * W.astype(np.float32)
    assert np.abs(out["Y"].astype(np.float32) - ref).max() <= 2e-3 * np.abs(ref).max(), seed


def test_gemm_is_one_source_for_sm90a_sm100a_and_trn1():
    """kernels/gemm.py: one kernel object; the build target picks its TARGETS entry — wgmma on
    sm_90a, tcgen05 on sm_100a, TensorE's nc_matmul on trn1 — and the trn1 build matches numpy."""
    k = gemm.make(1024, 1024, 1024, "bfloat16", "col")
    chosen = {t: {r.chosen for r in Ax.build_func(k, t)[1].records if r.call.op == "gemm"}
              for t in ("sm_90a", "sm_100a", "trn1")}
    assert chosen == {"sm_90a": {"wgmma"}, "sm_100a": {"tcgen05"}, "trn1": {"nc_matmul"}}


@pytest.mark.parametrize("options, named", [({"stream_k": True}, "stream_k"), ({"cluster": 2}, "cluster>1"),
                                            ({"schedule": "pingpong"}, "pingpong")])
def test_gemm_gpu_options_are_refused_on_trn1_by_name(options, named):
    with pytest.raises(Ax.TargetError, match=f"gemm on trn1: {named} belong to the GPU form"):
        compile_kernel(gemm.make(2048, 4864, 520, **options), "trn1")


def test_gemm_sizes_only_a_gpu_refuses_build_on_trn1():
    """N, K not multiples of 8 and a problem smaller than one GPU tile: a GPU build refuses them
    (TMA row pitch, tile), the trn1 build masks them."""
    k = gemm.make(64, 1004, 72)
    for target in ("sm_90a", "sm_100a"):
        with pytest.raises(Ax.TargetError, match=f"gemm on {target}: N=1004 and K=72 must be multiples of 8"):
            Ax.build_func(k, target)
    assert compile_kernel(k, "trn1").params["C"]["shape"] == [64, 1004]
