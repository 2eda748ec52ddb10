"""``torch.ops.axe.fused_moe`` and ``torch.ops.axe.gemm_fp8`` on the CPU, without building.

The ops' host side — argument checks, the configuration per token count, the buffers it sizes,
the order and shapes of the arguments it hands each kernel, the M bucket and the scale layout of
the FP8 GEMM — runs against stand-ins for the kernels (``JitKernel.load`` replaced) that compute
what each kernel's docstring states from the arguments it receives, and refuse arguments whose
shapes disagree with the specialization they were loaded for (what the runtime's binding would
refuse).  The results are compared with torch references of the layer and of the dequantized
product.  The kernels' own arithmetic is checked on the GPU (``tests/gpu/run_moe_fp8_ops.py``).
Also: fake tensors, ``torch.library.opcheck``, ``torch.compile(fullgraph=True)``, and that every
shape the MoE op accepts passes the grouped GEMM's own conditions (``kernels.moe_gemm.check``).
"""

import pytest
import torch
import torch.nn.functional as F

from axe.torch import fp8_ops, moe_ops
from kernels.parts.schedulers.padding import segments, tiles

# --- stand-ins: each kernel's law, from its docstring -------------------------------------------


def _align(spec):
    bm, pad, E, topk = spec["bm"], spec["pad"], spec["experts"], spec["topk"]

    def run(ids, srt, tile_expert, tile_rows, meta, pos):
        assert ids.shape[1] == topk and ids.dtype == torch.int32 and ids.is_contiguous()
        counts = torch.bincount(ids.reshape(-1).long(), minlength=E).tolist()
        assert len(counts) == E
        offsets, total = segments(counts, pad)
        tl = tiles(counts, pad, bm)
        assert total + bm <= srt.shape[0] and len(tl) <= tile_expert.shape[0]
        srt.fill_(-1)
        cur = list(offsets)
        for t in range(ids.shape[0]):
            for j in range(topk):
                e = int(ids[t, j])
                srt[cur[e]], pos[t, j] = t, cur[e]
                cur[e] += 1
        for m, (e, start, own) in enumerate(tl):
            tile_expert[m], tile_rows[m, 0], tile_rows[m, 1] = e, start, own
        meta[:2] = torch.tensor([len(tl), total])
    return run


def _gemm(spec):
    n, k, act, E, gather = spec["n"], spec["k"], spec.get("act"), spec["experts"], spec.get("gather_rows", False)

    def run(a, B, C, srt, tile_expert, tile_rows, meta):
        assert tuple(B.shape) == (E, n, k) and a.shape[1] == k and B.is_contiguous()
        assert C.shape[1] == (n // 2 if act else n) and srt.shape[0] >= C.shape[0] + spec["bm"]
        for m in range(int(meta[0])):
            e, start, own = int(tile_expert[m]), int(tile_rows[m, 0]), int(tile_rows[m, 1])
            rows = range(start, start + own)
            A = a[srt[start:start + own].long()] if gather else a[start:start + own]
            acc = A.float() @ B[e].float().t()
            if act:
                acc = F.silu(acc[:, :n // 2]) * acc[:, n // 2:]
            C[rows.start:rows.stop] = acc.to(C.dtype)
    return run


def _combine(spec):
    def run(y, pos, w, out):
        assert pos.shape[1] == spec["topk"] and out.shape[1] == spec["hidden"] == y.shape[1] and w.dtype == torch.float32
        out.copy_((y[pos.long()].float() * w[..., None]).sum(1).to(out.dtype))
    return run


def _fp8(spec):
    def run(A, B, SA, SB, C):
        M, N, K = A.shape[0], spec["N"], spec["K"]          # a run-time M
        kb = -(-K // 128)
        assert "M" not in spec and M <= spec.get("max_rows", M)
        assert A.shape == (M, K) and B.shape == (N, K) and SA.shape == (kb, -(-M // 4) * 4) and C.shape == (M, N)
        assert SA.is_contiguous() and A.is_contiguous() and SB.shape == (-(-N // 128), kb)
        C.copy_(fp8_ops.reference(A, B, SA[:, :M].t(), SB).to(C.dtype))
    return run


STANDINS = {"align": _align, "align_split": _align, "gemm": _gemm, "combine": _combine}


@pytest.fixture
def loads(monkeypatch):
    """Every ``(kernel, spec)`` loaded during the test; the kernels replaced by their stand-ins."""
    seen = []
    for name, jk in moe_ops.KERNELS.items():
        monkeypatch.setattr(jk, "load", lambda device, spec, name=name: seen.append((name, spec)) or STANDINS[name](spec))
    monkeypatch.setattr(fp8_ops.KERNEL, "load", lambda device, spec: seen.append(("gemm_fp8", spec)) or _fp8(spec))
    return seen


# --- fused_moe ---------------------------------------------------------------------------------

def moe_inputs(T, E=32, H=2048, I=384, top_k=4, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g).to(dtype)
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).to(dtype)
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).to(dtype)
    logits = torch.randn(T, E, generator=g)
    w, ids = torch.topk(torch.softmax(logits, -1), top_k, -1)
    return x, w1, w2, (w / w.sum(-1, keepdim=True)), ids.to(torch.int32)


@pytest.mark.parametrize("T", [1, 5, 33, 600])
def test_fused_moe_matches_the_layer(loads, T):
    x, w1, w2, w, ids = moe_inputs(T)
    out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
    ref = moe_ops.reference(x, w1, w2, w, ids)
    assert out.shape == (T, 2048) and out.dtype == x.dtype
    assert ((out.float() - ref).norm() / ref.norm()) < 1e-2
    roles = {name for name, _ in loads}
    assert roles == {"align_split" if T >= moe_ops.SPLIT_FROM else "align", "gemm", "combine"}
    gemm1 = [s for n, s in loads if n == "gemm" and s.get("act")][0]
    # I = 384 is a multiple of 48: a few tokens run tiny_gather's 96-column GEMM 1 tiles
    assert gemm1["bn"] == (96 if T <= 8 else 128 if T <= 512 else 256)


def test_fused_moe_conventions(loads):
    """int64 ids and bf16 weights (vLLM's and SGLang's other dtypes) give the int32/fp32 result;
    tiny_gather is skipped where I is not a multiple of 48; zero tokens launch nothing."""
    x, w1, w2, w, ids = moe_inputs(3, I=256, top_k=2)
    want = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
    assert [s["bn"] for n, s in loads if n == "gemm" and s.get("act")] == [128]
    got = torch.ops.axe.fused_moe(x, w1, w2, w.to(torch.bfloat16), ids.long(), False, "silu", False, 32, None)
    assert ((got.float() - want.float()).norm() / want.float().norm()) < 1e-2
    loads.clear()
    assert torch.ops.axe.fused_moe(x[:0], w1, w2, w[:0], ids[:0]).shape == (0, 2048) and not loads


@pytest.mark.parametrize("change, match", [
    (dict(inplace=True), "inplace=True"),
    (dict(activation="gelu"), "activation='gelu'"),
    (dict(apply_router_weight_on_input=True), "apply_router_weight_on_input"),
    (dict(global_num_experts=64), "global_num_experts=64"),
    (dict(expert_map=torch.arange(32)), "expert_map"),
])
def test_fused_moe_refuses_other_modes(loads, change, match):
    x, w1, w2, w, ids = moe_inputs(2)
    kw = dict(dict(inplace=False, activation="silu", apply_router_weight_on_input=False, global_num_experts=-1,
                   expert_map=None), **change)
    with pytest.raises(ValueError, match=match):
        torch.ops.axe.fused_moe(x, w1, w2, w, ids, **kw)


@pytest.mark.parametrize("shape, match", [
    (dict(E=513, H=256, I=128), "E=513 experts"),
    (dict(H=2888), "H=2888"),
    (dict(I=324), "I=324"),
    (dict(I=120), "I=120"),
])
def test_fused_moe_refuses_unbuilt_shapes(shape, match):
    x, w1, w2, w, ids = moe_inputs(2, **shape)
    with pytest.raises(ValueError, match=match):
        moe_ops.check(x, w1, w2, w, ids)


def test_fused_moe_refuses_mismatched_arguments():
    x, w1, w2, w, ids = moe_inputs(2)
    cases = [((x, w1[:, :700], w2, w, ids), "gate and up rows"),
             ((x, w1, w2.transpose(1, 2), w, ids), "w2 has"),
             ((x, w1.transpose(1, 2).contiguous().transpose(1, 2), w2, w, ids), "w1 is not contiguous"),
             ((x, w1, w2, w[:, :3], ids), "topk_weights has shape"),
             ((x, w1, w2, w, ids.float()), "topk_ids has dtype"),
             ((x.float(), w1, w2, w, ids), "hidden_states has dtype"),
             ((x, w1.half(), w2, w, ids), "w1 has dtype")]
    for args, match in cases:
        with pytest.raises((ValueError, TypeError), match=match):
            moe_ops.check(*args)


def test_accepted_shapes_pass_the_kernels_conditions():
    """Every configuration the op may pick builds for the shapes it accepts (the grouped GEMM's and
    the combine's refusals, run here), and a shape it refuses fails one of them or the alignment's."""
    pytest.importorskip("tvm")
    from kernels import moe_gemm
    for E, H, I in ((128, 2048, 768), (32, 4096, 1024), (64, 6144, 1408), (512, 2048, 256)):
        x, w1, w2, w, ids = (torch.empty(1, H, dtype=torch.bfloat16, device="meta"),
                             torch.empty(E, 2 * I, H, dtype=torch.bfloat16, device="meta"),
                             torch.empty(E, H, I, dtype=torch.bfloat16, device="meta"),
                             torch.empty(1, 8, device="meta"), torch.empty(1, 8, dtype=torch.int32, device="meta"))
        moe_ops.check(x, w1, w2, w, ids)
        for name, s in moe_ops.all_specs(E, H, I, 8, "bfloat16"):
            if name == "gemm":
                moe_gemm.check(s["n"], s["k"], s["bm"], s["bn"], s.get("bk", moe_gemm.BK), s.get("act"),
                               s.get("pad", s["bm"]))
            elif name == "combine":
                assert s["hidden"] % 2048 == 0
            else:
                assert s["experts"] % 32 == 0 and s["experts"] <= 512 and s["bm"] % s["pad"] == 0


# --- gemm_fp8 ----------------------------------------------------------------------------------

def fp8_inputs(M, N, K, seed=0, deepgemm=True):
    g = torch.Generator().manual_seed(seed)
    kb, nb = -(-K // 128), -(-N // 128)
    a = (torch.randn(M, K, generator=g) * 100).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 100).to(torch.float8_e4m3fn)
    sa = torch.rand(M, kb, generator=g) / 100 + 1e-3
    sb = torch.rand(nb, kb, generator=g) / 100 + 1e-3
    return a, b, fp8_ops.deepgemm_scales(sa) if deepgemm else sa, sb


@pytest.mark.parametrize("M, N, K", [(1, 256, 256), (127, 576, 208), (128, 384, 1024), (300, 2112, 512)])
def test_gemm_fp8_matches_the_dequantized_product(loads, M, N, K):
    a, b, sa, sb = fp8_inputs(M, N, K)
    c = torch.ops.axe.gemm_fp8(a, b, sa, sb)
    ref = fp8_ops.reference(a, b, sa, sb)
    assert c.shape == (M, N) and c.dtype == torch.bfloat16
    assert ((c.float() - ref).norm() / ref.norm()) < 1e-2
    (name, s), = loads
    assert "M" not in s and (s["N"], s["K"]) == (N, K) and s.get("max_rows") in (None, fp8_ops.bucket(M))


def test_gemm_fp8_takes_deepgemm_scales_without_a_copy_and_others_with_one(loads):
    a, b, sa, sb = fp8_inputs(256, 256, 256)
    seen = []
    real = _fp8

    def record(spec):
        run = real(spec)
        return lambda A, B, SA, SB, C: seen.append((A.data_ptr(), SA.data_ptr())) or run(A, B, SA, SB, C)
    fp8_ops.KERNEL.load = lambda device, spec: record(spec)
    want = torch.ops.axe.gemm_fp8(a, b, sa, sb)
    assert seen[-1] == (a.data_ptr(), sa.data_ptr())            # DeepGEMM's layout: passed as it is
    row_major = sa.contiguous()                                  # (M, KB) row-major: copied into the layout
    got = torch.ops.axe.gemm_fp8(a, b, row_major, sb)
    assert seen[-1][1] != row_major.data_ptr() and torch.equal(got, want)


def test_gemm_fp8_refusals():
    a, b, sa, sb = fp8_inputs(4, 256, 256)
    cases = [((a.float(), b, sa, sb), TypeError, "a has dtype"),
             ((a, b[:, :128], sa, sb), ValueError, "K differs"),
             ((a, b, sa[:, :1], sb), ValueError, "a_scale has shape"),
             ((a, b, sa, sb[:1]), ValueError, "b_scale has shape"),
             ((a, b, sa.double(), sb), TypeError, "a_scale has dtype"),
             ((a[:, :64], b[:, :64], sa[:, :1], sb[:, :1]), ValueError, "K=64"),
             ((a, b[:64], sa, sb[:1]), ValueError, "N=64")]
    for args, err, match in cases:
        with pytest.raises(err, match=match):
            fp8_ops.check(*args)


# --- fake tensors, opcheck, torch.compile --------------------------------------------------------

def test_fake_tensors_give_shapes_without_loading(loads):
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        x, w1, w2, w, ids = (torch.empty(9, 4096, dtype=torch.bfloat16), torch.empty(64, 2816, 4096, dtype=torch.bfloat16),
                             torch.empty(64, 4096, 1408 - 128, dtype=torch.bfloat16), torch.empty(9, 6),
                             torch.empty(9, 6, dtype=torch.int32))
        with pytest.raises(ValueError, match="2\\*I"):
            torch.ops.axe.fused_moe(x, w1, w2, w, ids)
        w2 = torch.empty(64, 4096, 1408, dtype=torch.bfloat16)
        assert torch.ops.axe.fused_moe(x, w1, w2, w, ids).shape == (9, 4096)
        a, b = torch.empty(33, 512, dtype=torch.float8_e4m3fn), torch.empty(640, 512, dtype=torch.float8_e4m3fn)
        assert torch.ops.axe.gemm_fp8(a, b, torch.empty(33, 4), torch.empty(5, 4)).shape == (33, 640)
    assert not loads


def test_opcheck(loads):
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.axe.fused_moe.default, moe_inputs(5), test_utils=utils)
    # test_schema compares inputs before and after with torch.allclose, which has no CPU kernel for
    # float8_e4m3fn: the FP8 op's inputs are compared here bit for bit instead
    for M in (130, 128):
        args = fp8_inputs(M, 256, 384)
        before = [t.view(torch.uint8).clone() if t.dtype == fp8_ops.FP8 else t.clone() for t in args]
        torch.library.opcheck(torch.ops.axe.gemm_fp8.default, args, test_utils=utils[1:])
        torch.ops.axe.gemm_fp8(*args)
        for t, b in zip(args, before):
            assert torch.equal(t.view(torch.uint8) if t.dtype == fp8_ops.FP8 else t, b)


def _moe_block(x, w1, w2, logits, a, b, sa, sb):
    """Routing in torch, the experts through the op, an FP8 projection after."""
    w, ids = torch.topk(torch.softmax(logits.float(), -1), 4, -1)
    y = torch.ops.axe.fused_moe(x, w1, w2, w / w.sum(-1, keepdim=True), ids.to(torch.int32))
    return y * 2, torch.ops.axe.gemm_fp8(a, b, sa, sb)


def test_compile_fullgraph(loads):
    x, w1, w2, _, _ = moe_inputs(6)
    explained = torch._dynamo.explain(_moe_block)(x, w1, w2, torch.randn(6, 32), *fp8_inputs(6, 256, 256))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(_moe_block, fullgraph=True, backend="aot_eager", dynamic=True)
    for T in (6, 11, 2):
        args = (moe_inputs(T, seed=T)[0], w1, w2, torch.randn(T, 32), *fp8_inputs(T, 256, 256, seed=T))
        for got, want in zip(compiled(*args), _moe_block(*args)):
            assert torch.equal(got, want)


# --- the same calls bound against real artifacts ---------------------------------------------------

def bind_to_builds(monkeypatch, tmp_path, laws):
    """Each ``JitKernel`` of ``laws`` (``{kernel: law}``) loads the artifact TVM + nvcc build for
    its spec (into a cache under ``tmp_path``); a launch binds its arguments and the scratch the
    runtime appends to that ``launch.json`` (``bind_arguments``, device type cpu), then the law
    computes.  Returns the list that collects ``(artifact name, Bound)`` of every launch."""
    pytest.importorskip("tvm")
    monkeypatch.setenv("CUDA_PATH", "/usr/local/cuda")
    from axe.backends.cuda.artifact import Artifact
    from axe.runtime.launcher import bind_arguments
    from axe.torch.cache import ArtifactCache
    cache, launches = ArtifactCache(tmp_path, shipped=[]), []

    def bound(jk, law):
        def load(device, spec):
            launch = Artifact.load(str(jk.artifact_path("sm_90a", spec))).launch
            run = law(spec)

            def call(*args):
                scratch = [torch.zeros(a["shape"], dtype=getattr(torch, a["dtype"])) for a in launch["args"]
                           if a.get("scratch")]
                launches.append((launch["name"], bind_arguments(launch, (*args, *scratch), device_type="cpu")))
                run(*args)
            return call
        return load

    for jk, law in laws.items():
        monkeypatch.setattr(jk, "_cache", cache)
        monkeypatch.setattr(jk, "progress", False)
        monkeypatch.setattr(jk, "load", bound(jk, law))
    return launches


def test_calls_bind_to_the_built_kernels(tmp_path, monkeypatch):
    """The ops' launches against the artifacts TVM + nvcc build for them: the runtime's
    ``bind_arguments`` (device type cpu) checks every argument against each ``launch.json`` —
    count, dtypes, static and run-time extents, alignment — with the scratch the runtime appends;
    the stand-ins then compute.  The smallest shapes the kernels take (~20 s of builds)."""
    grids = bind_to_builds(monkeypatch, tmp_path, {**{jk: STANDINS[n] for n, jk in moe_ops.KERNELS.items()},
                                                   fp8_ops.KERNEL: _fp8})
    x, w1, w2, w, ids = moe_inputs(3, E=32, H=2048, I=256, top_k=2)
    out = torch.ops.axe.fused_moe(x, w1, w2, w, ids)
    ref = moe_ops.reference(x, w1, w2, w, ids)
    assert ((out.float() - ref).norm() / ref.norm()) < 1e-2
    assert [n for n, _ in grids] == ["moe_align_bm64_pad16", "moe_gemm_silu_mul_bfloat16_bm64_bn128_512x2048",
                                     "moe_gemm_plain_bfloat16_bm64_bn128_2048x256", "moe_combine_bfloat16"]
    a, b, sa, sb = fp8_inputs(5, 256, 256)
    c = torch.ops.axe.gemm_fp8(a, b, sa, sb)
    assert grids[-1][0] == "gemm_fp8_dyn_256x256"
    assert ((c.float() - fp8_ops.reference(a, b, sa, sb)).norm() / c.float().norm()) < 1e-2
