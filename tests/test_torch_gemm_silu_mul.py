"""The gate/up GEMM with SiLU·up fused into its store (``kernels/gemm.py`` ``act="silu_mul"``) and
its op ``torch.ops.axe.gemm_silu_mul``, on the CPU.

Oracles: the unfused MLP in torch (``silu(x @ gate.T) * (x @ up.T)``) for the interleaved
weight and the kernels' reference; ptxas's report (no spills) and the instructions in the PTX for
the artifacts the op selects at Llama-3.1-8B's and Llama-2-7B's shapes; brute-force composition
of every selection candidate; the runtime's ``bind_arguments`` on every op call (a CPU stand-in
launches, computing the kernel's reference).  The numerics of the kernels themselves are checked
on the GPU (``tests/gpu/cases_serving.py``).
"""

import json
import os
import sys

import pytest
import torch

pytest.importorskip("tvm")
os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")

from axe.backends.cuda.artifact import Artifact  # noqa: E402
from axe.torch.cache import ArtifactCache  # noqa: E402
from axe.torch.jit import JitKernel  # noqa: E402
from kernels import gemm, gemm_select  # noqa: E402
from test_torch_jit import REFS, CpuLaunch  # noqa: E402

K = 4096
SHAPES = ((2 * 14336, K), (2 * 11008, K))       # (2I, K): Llama-3.1-8B's and Llama-2-7B's gate/up
ROWS = (1, 7, 16, 64, 128, 2048)


class ScratchCpuLaunch(CpuLaunch):
    """:class:`CpuLaunch` that hands the scratch arguments a caller leaves out (zero-filled), as
    :class:`axe.runtime.Kernel` does."""

    def __call__(self, *args, stream=None):
        scratch = [a for a in self.launch["args"][len(args):] if a.get("scratch")]
        return super().__call__(*args, *(torch.zeros(a["shape"], dtype=getattr(torch, a["dtype"])) for a in scratch),
                                stream=stream)


def unfused(x, gate, up):
    """The MLP's gate/up projection and activation as torch writes it (fp32)."""
    x = x.float()
    return torch.nn.functional.silu(x @ gate.float().T) * (x @ up.float().T)


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """axe.torch.ops with ``gemm_silu_mul`` building for real into a fresh cache, launched by
    ``CpuLaunch`` (the runtime's checks against the real ``launch.json``, then the kernel's reference)."""
    from axe.torch import ops
    cache = ArtifactCache(tmp_path_factory.mktemp("cache"), shipped=[])
    saved, k = dict(ops.KERNELS), ops.KERNELS["gemm_silu_mul"]
    ops.KERNELS["gemm_silu_mul"] = JitKernel(k.kernel, k.spec, path=k.path, cache=cache, loader=ScratchCpuLaunch,
                                             target="sm_90a", progress=False)
    for dt in ("float16", "bfloat16"):
        REFS[f"gemm_dyn_{dt}_col_silu_mul"] = lambda t, env: t["C_"].copy_(
            gemm.reference(t["A_"], t["B_"], "col", act="silu_mul")["C"].to(t["C_"].dtype))
    yield ops
    ops.KERNELS.update(saved)
    ops.clear_plans()


def test_interleave_and_reference_are_the_unfused_mlp():
    from axe.torch.ops import interleave_gate_up
    g = torch.Generator().manual_seed(0)
    x, gate, up = (torch.randn(s, generator=g) for s in ((5, 24), (192, 24), (192, 24)))
    w = interleave_gate_up(gate, up)
    assert w.shape == (384, 24)
    for b in range(3):                  # block b: gate rows then up rows 64b..64b+63
        assert torch.equal(w[128 * b:128 * b + 64], gate[64 * b:64 * (b + 1)])
        assert torch.equal(w[128 * b + 64:128 * (b + 1)], up[64 * b:64 * (b + 1)])
    torch.testing.assert_close(gemm.reference(x, w, "col", act="silu_mul")["C"], unfused(x, gate, up))
    with pytest.raises(ValueError, match="multiple of 64"):
        interleave_gate_up(gate[:100], up[:100])


@pytest.mark.parametrize("N", [n for n, _ in SHAPES] + [2 * 2880])     # gpt-oss: N not a multiple of 256
def test_act_config_composes_every_candidate(N):
    """Every bucket's candidates and heuristic pick, made to compose by ``act_config``, compose
    with the fused store (checked by ``make``, which composes the sm_90a parts); those that
    composed already are unchanged, except a 128-deep k-block (``gemm_select.deep``), which becomes
    64-deep with the deepest ring (the fused store is GPU-checked on 64-deep rings)."""
    for bound in gemm_select.BUCKETS:
        rows = bound if bound is not None and bound <= gemm_select.BM else None
        for config in gemm_select.candidates(bound, N, K) + [gemm_select.heuristic(bound or 8192, N, K)]:
            fixed = gemm_select.act_config(config, N)
            max_rows = gemm_select.scheduled_rows(bound, fixed) or rows
            gemm.make_dynamic(N, K, "bfloat16", "col", max_rows=max_rows, act="silu_mul", **fixed)
            try:
                gemm.make_dynamic(N, K, "bfloat16", "col", max_rows=max_rows, act="silu_mul", **config)
                if config.get("tile_k", 64) != 64 and config.get("tile_m", 128) == 128:
                    assert "tile_k" not in fixed and fixed["stages"] == gemm_select.stages_for(fixed["tile_n"])
                else:
                    assert fixed == config, (bound, config)
            except ValueError as err:
                assert fixed != config and "SiLU·up store" in str(err), (bound, config, err)


@pytest.mark.parametrize("N,M", [(N, M) for N, _ in SHAPES for M in ROWS])
def test_selected_artifacts_build_without_spills(ops, N, M):
    """What the op runs at M rows: the transposed decode tile hands the up half over through
    shared memory (named barrier 5, 256 threads), the others compute gate and up in each thread;
    C has N/2 columns; ptxas reports no spills."""
    spec = ops.spec_gemm_silu_mul(torch.empty(M, K, dtype=torch.bfloat16), torch.empty(N, K, dtype=torch.bfloat16), None)
    assert spec["act"] == "silu_mul" and spec["N"] == N
    art = Artifact.load(ops.KERNELS["gemm_silu_mul"].artifact_path("sm_90a", spec))
    res = art.launch["resources"]
    assert res.get("spill_stores", 0) == 0 and res.get("spill_loads", 0) == 0, (spec, res)
    (c,) = [a for a in art.launch["args"] if a["name"] == "C_"]
    assert c["shape"][1] == N // 2
    assert "ex2.approx" in art.ptx and "wgmma.mma_async" in art.ptx and "cp.async.bulk.tensor" in art.ptx
    handover = "bar_sync_count_sync((uint)5, (uint)256)" in art.cuda_source
    assert handover == (spec.get("tile_m", 128) < 128), spec
    if handover:        # the up accumulator goes through shared memory as fp32 pairs
        assert "st.shared.v2" in art.ptx and "ld.shared.f32" in art.ptx


def test_op_is_the_unfused_mlp(ops):
    g = torch.Generator().manual_seed(1)
    for dt in (torch.bfloat16, torch.float16):
        gate, up = (torch.randn(256, 128, generator=g, dtype=dt) * 0.1 for _ in range(2))
        w = ops.interleave_gate_up(gate, up)
        for M in (1, 7, 130):
            x = torch.randn(M, 128, generator=g, dtype=dt)
            y = torch.ops.axe.gemm_silu_mul(x, w)
            assert y.shape == (M, 256) and y.dtype == dt
            torch.testing.assert_close(y.float(), unfused(x, gate, up), atol=2e-2, rtol=2e-2)
        assert torch.ops.axe.gemm_silu_mul(x[:0], w).shape == (0, 256)


def test_refusals_name_the_argument(ops):
    x, w = torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(256, 64, dtype=torch.bfloat16)
    for args, err, match in [((x, w, False), ValueError, "only transpose_b=True"),
                             ((x, w[:192]), ValueError, "w has 192 rows"),
                             ((x, w[:, :32]), ValueError, "w's rows must be as long as x's"),
                             ((x, w.half()), TypeError, "w has dtype torch.float16, x has torch.bfloat16"),
                             ((x.float(), w), TypeError, "x has dtype torch.float32")]:
        with pytest.raises(err, match=match):
            torch.ops.axe.gemm_silu_mul(*args)
    with pytest.raises(ValueError, match="act must be None or one of"):
        gemm.make_dynamic(512, 256, act="gelu")
    with pytest.raises(ValueError, match="two fused epilogues"):
        gemm.make_dynamic(512, 256, "bfloat16", "col", act="silu_mul", epilogue_ops=("bias",))


def test_fake_opcheck_and_compile(ops):
    from torch._subclasses.fake_tensor import FakeTensorMode
    before = len(ops.KERNELS["gemm_silu_mul"]._memo)
    with FakeTensorMode():
        y = torch.ops.axe.gemm_silu_mul(torch.empty(9, 4096, dtype=torch.bfloat16), torch.empty(28672, 4096, dtype=torch.bfloat16))
        assert y.shape == (9, 14336) and y.dtype == torch.bfloat16
    assert len(ops.KERNELS["gemm_silu_mul"]._memo) == before        # nothing built or launched
    g = torch.Generator().manual_seed(2)
    x, w = torch.randn(5, 128, generator=g, dtype=torch.bfloat16), torch.randn(256, 128, generator=g, dtype=torch.bfloat16)
    torch.library.opcheck(torch.ops.axe.gemm_silu_mul.default, (x, w, True),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_dynamic"))

    def mlp(x, w):
        return torch.ops.axe.gemm_silu_mul(x * 1, w) + 1
    explained = torch._dynamo.explain(mlp)(x, w)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(mlp, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (5, 3):
        torch.testing.assert_close(compiled(x[:m], w), mlp(x[:m], w))


def test_layer_benchmark_builds_what_its_fused_side_launches(tmp_path, monkeypatch):
    """``benchmarks/layer.py``'s ``specs()`` holds the plain and the fused GEMM's artifact of every
    token count, for the heuristic and for each GPU of the cache's tuning table (the fused ones its
    picks made to compose)."""
    from axe.torch import ops, tune
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
    import layer
    (tmp_path / "tune").mkdir()
    pick = {"split_k": 1, "stages": 4, "tile_n": 128, "schedule": "pingpong"}
    (tmp_path / "tune" / "gemm.json").write_text(json.dumps(
        {"schema": 1, "picks": {f"GPU X|bfloat16|col|{2 * layer.MLP}x{layer.HIDDEN}|2048": {"config": pick}}}))
    monkeypatch.setenv("AXE_CACHE_DIR", str(tmp_path))
    tune.reload()
    try:
        got = [s for k, s in layer.specs() if k == "gemm_silu_mul"]
        plain = [s for k, s in layer.specs() if k == "gemm_nt"]
        for device in ("", "GPU X"):
            for t in layer.TOKENS:
                assert ops.spec_silu_mul_for(device, 2 * layer.MLP, layer.HIDDEN, "bfloat16", t) in got
                for N, K in ((2 * layer.MLP, layer.HIDDEN), (layer.HIDDEN, layer.MLP)):
                    assert tune.spec_for(device, N, K, "bfloat16", "col", t) in plain, (device, N, K, t)
        assert {**pick, "N": 2 * layer.MLP, "K": layer.HIDDEN, "dtype": "bfloat16", "b_major": "col"} in plain
        assert {"N": 2 * layer.MLP, "K": layer.HIDDEN, "dtype": "bfloat16", "b_major": "col", "split_k": 1, "stages": 4,
                "tile_n": 128, "act": "silu_mul"} in got          # the ping-pong pick, made cooperative
    finally:
        monkeypatch.delenv("AXE_CACHE_DIR")
        tune.reload()
