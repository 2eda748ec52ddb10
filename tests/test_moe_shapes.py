"""``torch.ops.axe.fused_moe`` for every real MoE shape (E 1..512, H a multiple of 64 from 256, I
a multiple of 8 from 128, top_k 1..E), on the CPU.

- the op's refusals name the argument and the condition; every shape it accepts passes the
  kernels' own conditions (the grouped GEMM's, the gather's, the combine's, the alignment's) and
  every shape it refuses fails one of them;
- the combine's thread split and the GEMMs' fitted k-block depth against brute force;
- the layer through the op's host side on odd shapes (the kernels replaced by stand-ins that
  compute their laws, ``tests/test_torch_moe_fp8_ops.py``), against the fp32 reference; fake
  tensors of the real models' sizes, opcheck and ``torch.compile(fullgraph=True)``;
- the kernels of the odd shapes build for sm_90a with no spills, their launches bind to the
  artifacts, and the CUDA holds the partial tiles' extents (tiles that do not divide H or I).

The kernels' arithmetic on these shapes: ``tests/gpu/cases_moe_shapes.py``.
"""

import importlib
import re

import pytest
import torch

from axe.torch import moe_ops
from test_torch_moe_fp8_ops import STANDINS, bind_to_builds, moe_inputs

#: (name, E, H, I, top_k) of real models; the GPU cases run the ones marked there
MODELS = [("deepseek-v3", 256, 7168, 2048, 8), ("gpt-oss-20b", 32, 2880, 2880, 4), ("mixtral-8x7b", 8, 4096, 14336, 2),
          ("qwen3-235b", 128, 4096, 1536, 8), ("qwen3-30b", 128, 2048, 768, 8), ("e128-h2304", 128, 2304, 768, 8),
          ("dsv3-e64", 64, 7168, 2048, 8)]
#: odd shapes the stand-in runs use: E not a multiple of 32, tiles dividing neither H nor I, top_k = E
ODD = [(5, 320, 136, 3), (8, 256, 200, 2), (40, 384, 264, 40)]


def meta_args(T, E, H, I, top_k, device="meta"):
    bf = dict(dtype=torch.bfloat16, device=device)
    return (torch.empty(T, H, **bf), torch.empty(E, 2 * I, H, **bf), torch.empty(E, H, I, **bf),
            torch.empty(T, top_k, device=device), torch.empty(T, top_k, dtype=torch.int32, device=device))


def kernel_refusal(E, H, I, top_k):
    """The first refusal of a kernel the op would launch for this shape (their own checks), or None."""
    pytest.importorskip("tvm")
    from kernels import moe, moe_gemm
    try:
        for cfg in {moe_ops.config(t, I) for t in (1, moe_ops.SPLIT_FROM - 1, moe_ops.SPLIT_FROM)}:
            for role, (name, s) in moe_ops.specs(cfg, E, H, I, top_k, "bfloat16").items():
                if name == "gemm":
                    bk = s.get("bk", moe_gemm.BK)
                    moe_gemm.check(s["n"], s["k"], s["bm"], s["bn"], bk, s.get("act"), s["pad"])
                    if s.get("gather_rows"):
                        moe_gemm.check_gather(s["k"], bk)
                elif name == "combine":
                    moe.combine_split(s["hidden"])
                else:
                    moe.check_align(E, s["pad"], s["bm"], moe.ALIGN_SPLIT_THREADS if name == "align_split"
                                    else moe.ALIGN_THREADS)
    except ValueError as e:
        return str(e)
    return None


@pytest.mark.parametrize("shape, match", [
    ((513, 256, 128, 8), "E=513 experts.*at most 512"),
    ((8, 2888, 768, 2), "H=2888 columns.*multiple of 64"),
    ((8, 192, 768, 2), "H=192 columns.*at least 256"),
    ((8, 2048, 132, 2), "I=132 columns.*multiple of 8"),
    ((8, 2048, 120, 2), "I=120 columns.*at least 128"),
    ((8, 2048, 768, 9), "top_k=9 columns.*\\[1, E=8\\]"),
])
def test_refusals_name_argument_and_condition(shape, match):
    with pytest.raises(ValueError, match=match):
        moe_ops.check(*meta_args(2, *shape))


def test_accepted_shapes_are_the_kernels_shapes():
    """The op accepts a shape exactly when every kernel it launches takes it: the real models,
    and a sweep of E, H (multiples of 8) and I (multiples of 4) around the bounds."""
    for _, E, H, I, k in MODELS:
        moe_ops.check(*meta_args(1, E, H, I, k))
        assert kernel_refusal(E, H, I, k) is None, (E, H, I, k)
    for E in (1, 5, 33, 512):
        for H in range(8, 2 * 4096, 8 * 37):
            for I in (64, 100, 120, 128, 132, 136, 768, 1000, 2880):
                for k in sorted({1, min(E, 8), E}):
                    try:
                        moe_ops.check(*meta_args(1, E, H, I, k))
                        accepted = True
                    except ValueError:
                        accepted = False
                    refused = kernel_refusal(E, H, I, k)
                    assert accepted == (refused is None), (E, H, I, k, refused)


def test_combine_split_is_the_fewest_chunks():
    """Brute force: every thread moves the same whole number of 16-byte vectors of a row, the row
    is covered exactly, at most 256 threads, and no split with fewer chunks does that."""
    pytest.importorskip("tvm")
    from kernels import moe
    for hidden in range(8, 16392, 8):
        threads, chunks = moe.combine_split(hidden)
        vectors = hidden // 8
        assert threads * chunks == vectors and threads <= moe.COMBINE_THREADS
        assert not any(vectors % c == 0 and vectors // c <= moe.COMBINE_THREADS for c in range(1, chunks))
    assert moe.combine_split(2048) == (256, 1)      # Qwen3-30B's combine as tuned
    with pytest.raises(ValueError, match="hidden=2884 must be a multiple of 8"):
        moe.combine_split(2884)


def test_fitted_depth_keeps_tuned_keywords():
    """``fit_depth``: a gathering GEMM's k-blocks divide k, every GEMM runs two k-blocks or more;
    where the configuration's depth already fits, its keywords are returned unchanged (Qwen3-30B's
    artifacts stay those measured)."""
    from kernels import moe_host
    for cfg in moe_host.CONFIGS:
        kw1, kw2 = moe_host.gemm_keywords(moe_host.gemm_config(cfg))
        for k in range(72, 8192, 8):
            for kw, gathers in ((kw1, kw1.get("gather_rows", False)), (kw2, False)):
                got = moe_host.fit_depth(kw, k, gathers)
                bk = got.get("bk", moe_host.PANEL)
                fits = -(-k // bk) >= 2 and not (gathers and k % bk)
                assert fits or (gathers and k % moe_host.PANEL), (cfg, k, got)
                if -(-k // kw.get("bk", 64)) >= 2 and not (gathers and k % kw.get("bk", 64)):
                    assert got is kw
    qwen = moe_ops.specs("small_gather", 128, 2048, 768, 8, "bfloat16")
    assert qwen["gemm1"][1]["bk"] == qwen["gemm2"][1]["bk"] == 128


@pytest.fixture
def loads(monkeypatch):
    seen = []
    for name, jk in moe_ops.KERNELS.items():
        monkeypatch.setattr(jk, "load", lambda device, spec, name=name: seen.append((name, spec)) or STANDINS[name](spec))
    return seen


@pytest.mark.parametrize("shape", ODD)
@pytest.mark.parametrize("T", [1, 7, 300, 600])
def test_odd_shapes_through_the_op(loads, shape, T):
    E, H, I, top_k = shape
    x, w1, w2, w, ids = moe_inputs(T, E=E, H=H, I=I, top_k=top_k, seed=T)
    if T == 300:        # skewed: every token's choices among the first top_k + 1 experts
        ids = torch.stack([torch.randperm(min(E, top_k + 1))[:top_k] for _ in range(T)]).to(torch.int32)
    out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
    ref = moe_ops.reference(x, w1, w2, w, ids)
    assert out.shape == (T, H) and ((out.float() - ref).norm() / ref.norm()) < 1e-2
    gemms = [s for n, s in loads if n == "gemm"]
    assert {s["k"] for s in gemms} == {H, I} and all(s["experts"] == E for s in gemms)


def test_fake_opcheck_and_compile_for_real_models(loads):
    """Fake tensors of every real model's sizes give (T, H) without loading a kernel; opcheck and
    a fullgraph compile of an odd shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        for _, E, H, I, k in MODELS:
            assert torch.ops.axe.fused_moe(*meta_args(9, E, H, I, k, device="cpu")).shape == (9, H)
    assert not loads
    args = moe_inputs(5, E=5, H=320, I=136, top_k=3)
    torch.library.opcheck(torch.ops.axe.fused_moe.default, args,
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))
    compiled = torch.compile(lambda *a: torch.ops.axe.fused_moe(*a) * 2, fullgraph=True, backend="aot_eager",
                             dynamic=True)
    for T in (5, 11):
        args = moe_inputs(T, E=5, H=320, I=136, top_k=3, seed=T)
        assert torch.equal(compiled(*args), torch.ops.axe.fused_moe(*args) * 2)


# --- builds: the odd shapes' kernels through TVM + nvcc ----------------------------------------

def _build(name, spec):
    pytest.importorskip("tvm")
    import axe.lang as Ax
    module, fn = moe_ops.KERNELS[name].kernel.split(":")
    return Ax.compile_kernel(getattr(importlib.import_module(module), fn)(**spec), "sm_90a")


GPT_OSS = (32, 2880, 2880, 4)


@pytest.mark.parametrize("i", range(len(moe_ops.all_specs(*GPT_OSS, "bfloat16"))))
def test_gpt_oss_kernels_build_without_spills(i):
    """gpt-oss-20b's shape (H = I = 2880: 22.5 tiles of 128, 11.25 of 256) — every kernel the op
    may launch builds, no spills; each GEMM's k-loop runs ceil(k / bk) blocks, its grid counts
    ceil(n_out / tile) column blocks, and the weights' tensor map has the true extents (TMA
    zero-fills past them); A's and C's maps take the tensor's extents at launch."""
    name, spec = moe_ops.all_specs(*GPT_OSS, "bfloat16")[i]
    art = _build(name, spec)
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    if name != "gemm":
        return
    bk, half = spec.get("bk", 64), spec["bn"] // 2 if spec.get("act") else spec["bn"]
    n_out = spec["n"] // 2 if spec.get("act") else spec["n"]
    maps = {t["param"]: t for t in art.launch["tensormaps"]}
    assert maps["B_map"]["shape"] == [spec["k"], spec["n"], 32]
    assert maps["C_map"]["shape"] is None and maps.get("A_map", {"shape": None})["shape"] is None
    if spec.get("gather_rows"):
        assert spec["k"] % bk == 0
    assert f"(it * {-(-spec['k'] // bk)})" in art.cuda_source, "k-blocks per tile"
    assert re.search(rf"MT \* {-(-n_out // half)}\)|{-(-n_out // half)} \* MT", art.launch["grid"][0]), art.launch["grid"]


@pytest.mark.parametrize("name, spec, threads", [
    ("align", {"bm": 64, "pad": 16, "experts": 5, "topk": 3}, 1024),
    ("align_split", {"bm": 128, "pad": 16, "experts": 100, "topk": 8}, 512),
    ("combine", {"dtype": "bfloat16", "hidden": 7168, "topk": 8}, 224),
    ("combine", {"dtype": "bfloat16", "hidden": 8192, "topk": 40}, 256),
])
def test_alignment_and_combine_build(name, spec, threads):
    """The alignment for expert counts that are not multiples of 32 (the scan over 32-expert
    lanes, the ones past E empty: shared counts of lanes(E)), the combine with several vectors per
    thread and top_k rows gathered in groups — no spills."""
    from kernels import moe
    art = _build(name, spec)
    res = art.launch["resources"]
    assert res["spill_stores"] == 0 and res["spill_loads"] == 0, res
    assert art.launch["block"][0] == threads
    if name.startswith("align"):
        assert f"int cnt_ptr[{moe.lanes(spec['experts'])}];" in art.cuda_source


def _gpu_cases():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "gpu", "cases_moe_shapes.py")
    spec = importlib.util.spec_from_file_location("cases_moe_shapes", path)
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    return cases


def test_gpu_cases_check_every_artifact():
    """``tests/gpu/cases_moe_shapes.py``: one artifact per (shape, kernel) the op may launch, each
    built and checked, each checked at some T of the cases (the configuration that launches it)."""
    cases = _gpu_cases()
    want = sum(len(moe_ops.all_specs(*dims, "bfloat16")) for dims in cases.SHAPES.values())
    assert len(cases.CHECKS) == want and set(cases.BUILDS) == set(cases.CHECKS)
    assert all(cases._tokens_of(art) for art in cases.CHECKS)
    assert {(8, 4096, 14336, 2), (32, 2880, 2880, 4), (64, 7168, 2048, 8), (128, 2304, 768, 8),
            (128, 2048, 768, 8)} <= set(cases.SHAPES.values())


def test_gpu_cases_run_the_op_on_their_artifacts(monkeypatch, tmp_path):
    """The GPU cases' plumbing on the CPU, for an odd shape: each artifact's check runs the op
    with every kernel loaded by its artifact name from the check's folder (here: stand-ins keyed
    by that name), at the T that launch it, and passes against the reference."""
    from types import SimpleNamespace

    from axe import runtime
    cases = _gpu_cases()
    monkeypatch.setattr(cases, "SHAPES", {"odd": (5, 320, 136, 3)})
    monkeypatch.setattr(cases, "TOKENS", (1, 7, 300, 600))
    monkeypatch.setattr(cases, "DEVICE", "cpu")
    arts = cases._artifacts()
    loaded = []

    def load(path):
        _, name, spec = arts[path.rsplit("/", 1)[1]]
        loaded.append(path.rsplit("/", 1)[1])
        return STANDINS[name](spec)
    monkeypatch.setattr(runtime, "load", load)
    for art in sorted(arts):
        detail = cases.check_op(SimpleNamespace(artifact=SimpleNamespace(path=str(tmp_path / art))), torch)
        assert detail.startswith("odd (5, 320, 136, 3): T=") and "skewed" in detail
    assert set(loaded) == set(arts)


@pytest.mark.parametrize("T", [3, 600])
def test_odd_shape_calls_bind_to_the_built_kernels(tmp_path, monkeypatch, T):
    """E = 5, H = 320, I = 136, top_k = 3 (few tokens: the one-CTA alignment, 64-row tiles; 600:
    the many-CTA one, 128-row tiles): each launch of the op against the artifact TVM + nvcc build
    for it — the runtime's ``bind_arguments`` (device type cpu) checks count, dtypes, extents and
    alignment of every argument and the scratch it appends — then the stand-in computes."""
    bound = bind_to_builds(monkeypatch, tmp_path, {jk: STANDINS[n] for n, jk in moe_ops.KERNELS.items()})
    x, w1, w2, w, ids = moe_inputs(T, E=5, H=320, I=136, top_k=3)
    out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
    ref = moe_ops.reference(x, w1, w2, w, ids)
    assert ((out.float() - ref).norm() / ref.norm()) < 1e-2
    assert [n.split("_bfloat16")[0] for n, _ in bound] == [
        "moe_align_bm64_pad16" if T < moe_ops.SPLIT_FROM else "moe_align_bm128_pad16_split", "moe_gemm_silu_mul",
        "moe_gemm_plain", "moe_combine"]
    assert bound[-1][1].block[0] == 40      # the combine: 320 = 40 threads x 1 vector of 8


def test_deepseek_v3_weights_reach_the_gemms_by_tma_alone():
    """DeepSeek-V3's w1 (256 × 4096 × 7168: 7.5e9 elements, past int32) is accepted: each GEMM
    reads its weights only through a 3-D tensor map (no element index in the CUDA), and the maps
    of the full tensors pass the encoder's checks (dims, byte strides, the covered span)."""
    from axe.backends.cuda.tensormap import tiled_args
    E, H, I, k = 256, 7168, 2048, 8
    moe_ops.check(*meta_args(1, E, H, I, k))
    for role, shape in (("gemm1", (E, 2 * I, H)), ("gemm2", (E, H, I))):
        name, spec = moe_ops.specs(moe_ops.config(300, I), E, H, I, k, "bfloat16")[role]
        art = _build(name, spec)
        assert "B__ptr" not in art.cuda_source
        b_map = {t["param"]: t for t in art.launch["tensormaps"]}["B_map"]
        dims, strides, _, _ = tiled_args(b_map, 1 << 20, shape, (shape[1] * shape[2], shape[2], 1), 2, "bfloat16")
        assert dims == list(reversed(shape)) and strides == [shape[2] * 2, shape[1] * shape[2] * 2]
