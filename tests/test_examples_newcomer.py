"""The newcomer's examples (examples/, docs/newcomer-test.md) build and do what their docstrings say.

What a CPU can check: the sm_90a builds hold the instructions the schedules promise (16-byte vector
loads; TMA, ldmatrix.trans, stmatrix), the launch records and the runtime's argument check; the
GELU kernel's arithmetic runs on axe's NumPy model of NKI (its trn1 build, same source) against torch.
"""

import importlib.util
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import axe.lang as Ax
import axe.runtime

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
nvcc_missing = shutil.which("nvcc") is None and not os.path.exists("/usr/local/cuda/bin/nvcc")
needs_nvcc = pytest.mark.skipif(nvcc_missing, reason="nvcc not installed")


def load(name):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def gelu():
    return load("gelu_affine")


@pytest.fixture(scope="module")
def tscale():
    return load("transpose_scale")


@needs_nvcc
def test_gelu_affine_sm90a_vectors_and_any_row_count(gelu):
    art = Ax.compile_kernel(gelu.gelu_affine, "sm_90a")
    assert [r.chosen for r in art.records] == ["vector"] * 3 + ["per_thread", "vector"]
    assert art.ptx.count("ld.global.v4") == 3 and art.ptx.count("st.global.v4") == 1   # x, g, b in; y out
    L = art.launch
    assert L["grid"] == ["M", 1, 1] and L["block"] == [gelu.THREADS, 1, 1]
    assert L["symbols"] == {"M": {"arg": "X", "dim": 0}}
    x = gelu.inputs("cpu", m=37)
    b = axe.runtime.bind_arguments(L, (x["X"], x["G"], x["B"], x["Y"]), device_type="cpu")
    assert b.grid == (37, 1, 1)
    with pytest.raises(axe.runtime.LaunchError):
        axe.runtime.bind_arguments(L, (x["X"], x["G"][:-8], x["B"], x["Y"]), device_type="cpu")


def test_gelu_affine_trn1_on_the_nki_model(gelu):
    import ml_dtypes
    art = Ax.compile_kernel(gelu.gelu_affine, "trn1")
    assert art.manifest()["inputs"] == ["X", "G", "B"] and art.manifest()["outputs"] == ["Y"]
    torch.manual_seed(0)
    x = gelu.inputs("cpu", m=gelu.TRN_M)
    bf = lambda t: t.float().numpy().astype(ml_dtypes.bfloat16)
    out, _ = art.run(X=bf(x["X"]), G=bf(x["G"].reshape(1, -1)), B=bf(x["B"].reshape(1, -1)))
    want = gelu.reference(x["X"], x["G"], x["B"])["Y"].float().numpy()
    got = out["Y"].astype(np.float32)
    g, b = x["G"].double().numpy(), x["B"].double().numpy()
    scale = np.abs(torch.nn.functional.gelu(x["X"].double(), approximate="tanh").numpy() * g) + np.abs(b)
    # the kernel computes in float32 (the trn1 emitter keeps the source's fp32 casts: inner results
    # are fp32, the last one is rounded to bf16 once) as torch does: the two fp32 values differ by a
    # few fp32 roundings of the terms (2^-20 of their magnitudes, where g * gelu(x) + b cancels), so
    # their bf16 roundings are equal or neighbours: at most one bf16 ulp of the result apart
    ulp = np.exp2(np.floor(np.log2(np.maximum(np.abs(want), 2.0 ** -126))) - 7)
    err = np.abs(got - want)
    assert (err <= ulp + 2 ** -20 * scale).all(), (err / (ulp + 2 ** -20 * scale)).max()
    assert np.count_nonzero(err) < 1e-3 * err.size          # one-ulp ties only: no step rounded to bf16


@needs_nvcc
def test_transpose_scale_sm90a_tma_ldmatrix_stmatrix(tscale, tmp_path):
    art = Ax.compile_kernel(tscale.transpose_scale, "sm_90a")
    assert [r.chosen for r in art.records] == ["tma", "ldmatrix", "per_thread", "stmatrix", "tma_store"]
    for needle in tscale.PTX:
        assert needle in art.ptx, needle
    assert art.ptx.count("ldmatrix.sync.aligned.m8n8.x4.trans") == 4        # 4 per warp: 16 atoms of 8x8
    L = art.launch
    assert L["grid"] == [tscale.N // 64, tscale.M // 64, 1]
    assert [(m["param"], m["box"], m["swizzle"]) for m in L["tensormaps"]] == [("A_map", [64, 64], 128),
                                                                             ("B_map", [64, 64], 128)]
    x = tscale.inputs("cpu")
    b = axe.runtime.bind_arguments(L, (x["A"], x["B"], x["alpha"]), device_type="cpu")
    assert b.grid == (tscale.N // 64, tscale.M // 64, 1)
    want = tscale.reference(x["A"][:64, :64].contiguous(), 0.5)["B"]
    assert torch.equal(want, (x["A"][:64, :64].float().T * 0.5).half())


def test_axe_explain_on_an_example():
    r = subprocess.run([sys.executable, "-m", "axe", "explain", "examples/transpose_scale.py", "--target", "sm_90a"],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "+ ldmatrix       chosen: 4 x ldmatrix.x4.trans" in r.stdout and "+ tma_store" in r.stdout
