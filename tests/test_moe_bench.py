"""The MoE benchmark's CPU-checkable parts: counted bytes/flops against a brute-force count, the
torch grouped-GEMM peer against the fp32 reference, the block-padding capacity against every
alignment it must hold, the summary and table, the reasons recorded for peers that cannot run,
and (where Triton is importable) SGLang's kernels loaded from its wheel: config lookup against
the tuned file read directly, and its GEMM kernel compiled for sm_90 by Triton and ptxas."""

import glob
import importlib.util
import json
import os
import sys
import types
import zipfile

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import moe as bench, moe_bounds, moe_sglang  # noqa: E402
from kernels import moe_host as moe  # noqa: E402

WHEELS = sorted(glob.glob(os.path.join(ROOT, ".whl", "sglang-*.whl")))
needs_sglang = pytest.mark.skipif(not WHEELS or importlib.util.find_spec("triton") is None,
                                  reason="needs the SGLang wheel in .whl/ and an importable triton")


def test_counted_matches_brute_force():
    rng = np.random.default_rng(0)
    E, H, I, topk, eb = 16, 64, 24, 4, 2
    w1 = np.zeros((E, 2 * I, H), np.float16)
    w2 = np.zeros((E, H, I), np.float16)
    for tokens in (1, 3, 40):
        ids = np.stack([rng.choice(E, topk, replace=False) for _ in range(tokens)])
        hit = sorted(set(ids.flatten().tolist()))
        weight_bytes = sum(w1[e].nbytes + w2[e].nbytes for e in hit)
        act = 2 * np.zeros((tokens, H), np.float16).nbytes + ids.astype(np.int32).nbytes + \
            np.zeros(ids.shape, np.float32).nbytes
        flops = 0
        for e in hit:                   # per expert: its rows times both weight matrices
            m = int((ids == e).sum())
            flops += 2 * m * w1[e].size + 2 * m * w2[e].size
        got = moe_bounds.counted(tokens, len(hit), topk, H, I, eb)
        assert got == {"bytes": weight_bytes + act, "flops": flops, "weight_bytes": weight_bytes, "act_bytes": act}
        b = moe_bounds.bound_ms(got, bandwidth=1e9, peak=1e9)
        assert b["bound_ms"] == max(got["bytes"], got["flops"]) / 1e9 * 1e3


def test_torch_grouped_matches_reference():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    E = 20                      # fewer experts than the model, the real hidden/intermediate sizes
    w1 = (torch.randn(E, 2 * moe.INTER, moe.HIDDEN, generator=g) / moe.HIDDEN ** 0.5).bfloat16()
    w2 = (torch.randn(E, moe.HIDDEN, moe.INTER, generator=g) / moe.INTER ** 0.5).bfloat16()
    for tokens in (1, 2):          # at most 16 of 20 experts hit
        x = torch.randn(tokens, moe.HIDDEN, generator=g).bfloat16()
        ids, weights = moe.route_reference(torch.randn(tokens, E, generator=g))
        ref = moe.reference(x, w1, w2, ids.long(), weights)
        got = bench.torch_grouped(torch, x, w1, w2, ids, weights)
        assert bench.rel_err(torch, got, ref) <= bench.TOL
        assert int(torch.unique(ids).numel()) < E      # some experts get no rows: empty groups taken
        wrong = bench.torch_grouped(torch, x, w1, w2, ids.flip(1), weights)    # weights on the wrong experts
        assert bench.rel_err(torch, wrong, ref) > bench.TOL


def test_padded_capacity_holds_every_alignment():
    rng = np.random.default_rng(1)
    for experts, block in ((129, 16), (129, 64), (129, 128)):
        for pairs in (1, 8, 64, 65, 4096 * 8):
            cap = moe_sglang.padded_capacity(pairs, experts, block)
            assert cap % block == 0
            # worst case: as many experts as possible, each with one pair past a block multiple
            used = min(pairs, experts)
            counts = np.full(used, pairs // used)
            counts[: pairs % used] += 1
            worst = int(sum(-(-c // block) * block for c in counts))
            assert worst <= cap
            for _ in range(5):
                c = np.bincount(rng.integers(0, experts, pairs), minlength=experts)
                assert int(sum(-(-v // block) * block for v in c)) <= cap


def test_summarize_and_table():
    row = {"T": 8, "experts_hit": 50, "axe": 0.5, "axe_graph": 0.25, "sglang": 2.0, "sglang_graph": 0.5,
           "torch_grouped": 1.0, "torch_grouped_graph": 0.75, "torch": 7.0, "bound_ms": 0.2,
           "sglang_experts_graph": 0.4}
    bench.summarize(row, bench.PEERS)
    assert (row["best_peer"], row["vs_best"]) == ("torch_grouped", 2.0)
    assert (row["best_peer_graph"], row["vs_best_graph"]) == ("sglang", 2.0)
    assert row["axe_bound_fraction_graph"] == 0.8 and row["axe_bound_fraction"] == 0.4
    assert row["vs_sglang_experts_graph"] == 1.6 and "vs_sglang_experts" not in row
    lone = {"T": 1, "bound_ms": 0.1}
    bench.summarize(lone, bench.PEERS)
    assert "vs_best" not in lone and "axe_bound_fraction" not in lone
    text = bench.table({"rows": [row, lone], "dtype": "bfloat16",
                        "device_rates": {"copy_bytes_per_s": 4.1e12, "mm_flop_per_s": 7.5e14}})
    lines = text.splitlines()
    assert "flashinfer eager" not in lines[0]           # a peer with no column anywhere is left out
    assert "sglang experts graph" in lines[0] and "sglang align graph" not in lines[0]
    assert lines[2].split(" | ")[-3:] == ["2.00x (sglang)", "0.2000", "0.80 |"]
    assert lines[3].count("| - ") >= 5
    assert "copy 4.10 TB/s" in text and "750 TFLOP/s" in text


def test_unrunnable_peers_say_why(tmp_path):
    torch = pytest.importorskip("torch")
    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("flashinfer is installed here")
    result = {"errors": {}}
    args = types.SimpleNamespace(sglang=None, wheels=str(tmp_path))
    peers, sglang = bench.load_peers(torch, args, torch.zeros(2, 4, 3), result)
    assert sglang is None and set(peers) == {"torch_grouped"}
    assert "expected one sglang-*.whl" in result["errors"]["sglang"]
    assert result["errors"]["flashinfer"].startswith(bench.FLASHINFER_WHY)
    assert "ModuleNotFoundError" in result["errors"]["flashinfer"]


def _tuned(wheel, name):
    with zipfile.ZipFile(wheel) as z:
        member = [n for n in z.namelist() if n.endswith("/triton_3_6_0/" + name)]
        return {int(k): v for k, v in json.loads(z.read(member[0])).items()}


@pytest.fixture(scope="module")
def sglang_ns(tmp_path_factory):
    ns = moe_sglang.load(WHEELS[-1], str(tmp_path_factory.mktemp("sglang")))
    ns.config.get_device_name = lambda *a: "NVIDIA H200"     # the GPU machine's name, on a CPU
    return ns


@needs_sglang
def test_sglang_config_lookup(sglang_ns):
    import triton
    if triton.__version__ != "3.6.0":
        pytest.skip("the oracle reads the triton_3_6_0 tuned file")
    tuned = _tuned(WHEELS[-1], "E=128,N=768,device_name=NVIDIA H200.json".replace(" ", "_"))
    for tokens in (1, 3, 8, 20, 100, 700, 4096, 10000):
        nearest = min(tuned, key=lambda m: (abs(m - tokens), m))
        up, down = moe_sglang.configs(sglang_ns, (128, 1536, 2048), (128, 2048, 768), 8, tokens)
        assert up == tuned[nearest] and down == tuned[nearest]     # no _down file: GEMM 2 reuses it


@needs_sglang
@pytest.mark.parametrize("tokens,mma", [(1, "mma.sync"), (4096, "wgmma.mma_async")])
def test_sglang_gemm_compiles_for_sm90(sglang_ns, tokens, mma):
    """SGLang's fused_moe_kernel, as Peer launches it with the tuned H200 config, through Triton
    to a cubin for sm_90 (ptxas accepts it) with the tensor-core instruction in its PTX."""
    import inspect
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    up, _ = moe_sglang.configs(sglang_ns, (128, 1536, 2048), (128, 2048, 768), 8, tokens)
    fn = sglang_ns.kernels.fused_moe_kernel
    params = list(inspect.signature(fn.fn).parameters)
    ptrs = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "topk_weights_ptr": "*fp32",
            "sorted_token_ids_ptr": "*i32", "expert_ids_ptr": "*i32", "num_tokens_post_padded_ptr": "*i32"}
    nones = ("a_desc", "b_desc", "bias_ptr", "a_scale_ptr", "b_scale_ptr", "add_mask_ptr")
    const = dict(group_n=0, group_k=0, MUL_ROUTED_WEIGHT=True, top_k=1, compute_type=tl.bfloat16,
                 use_fp8_w8a8=False, use_int8_w8a8=False, use_int8_w8a16=False, per_channel_quant=False,
                 even_Ks=True, c_sorted=False, swap_ab=False, FUSE_ADD_TO_OUTPUT=False, MASK_OUTPUT=False,
                 FUSE_SUM_ALL_REDUCE=False, ROUTER_TOPK=8, FUSE_SWIGLU=False, USE_GDC=True, GDC_EARLY=True,
                 A_OUTPUT_SLICES=1, A_OUTPUT_SLICE_WIDTH=0, A_OUTPUT_SLICE_K=0,
                 **{k: up[k] for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M")})
    sig, constexprs = {}, {}
    for i, p in enumerate(params):
        if p in const or p in nones:
            sig[p], constexprs[(i,)] = "constexpr", const.get(p)
        else:
            sig[p] = ptrs.get(p, "i32")
    out = triton.compile(ASTSource(fn, sig, constexprs), target=GPUTarget("cuda", 90, 32),
                         options=dict(num_warps=up["num_warps"], num_stages=up["num_stages"]))
    assert out.asm["cubin"] and mma in out.asm["ptx"] and "griddepcontrol.wait" in out.asm["ptx"]


def test_sglang_files_from_a_folder(tmp_path):
    """build_moe.py carries SGLang's files extracted; a folder missing one is refused by name."""
    (tmp_path / "sglang").mkdir()
    with pytest.raises(FileNotFoundError, match="fused_moe_triton_kernels.py"):
        moe_sglang.extract(str(tmp_path), None)
    if WHEELS:
        dest = moe_sglang.extract(WHEELS[-1], str(tmp_path / "x"))
        assert moe_sglang.extract(dest, None) == dest
        assert glob.glob(os.path.join(dest, "sglang/srt/layers/moe/moe_runner/triton_utils/configs/triton_3_6_0",
                                      "E=128,N=768,device_name=NVIDIA_H200.json"))


class _ReplayOnCpu:
    """A CUDA graph's contract on the CPU: replay rewrites the captured call's output buffer."""

    def __init__(self, fn, out):
        self.fn, self.out = fn, out

    def replay(self):
        got = self.fn()
        for o, g in zip(self.out if isinstance(self.out, tuple) else (self.out,),
                        got if isinstance(got, tuple) else (got,)):
            o.copy_(g)


def test_run_tokens_control_flow_on_cpu(monkeypatch):
    """One benchmark row end to end on CPU tensors (12 experts, stand-in timers): every column
    that can run is checked and timed, graph outputs are checked after the NaN poisoning, the
    implementations that cannot run are recorded, the bound and ratios are filled in; with
    ``rounds`` the graph figure is the median of every round's."""
    torch = pytest.importorskip("torch")
    from axe.torch import timing as cuda_timing
    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(cuda_timing, "eager_ms", lambda torch, fn, reps, warmup=3: (fn(), 1.0)[1])
    monkeypatch.setattr(cuda_timing, "capture", lambda torch, fn: (lambda out: (_ReplayOnCpu(fn, out), out))(fn()))
    graph_times = iter([0.5, 0.9, 0.4])      # the first timing, then two interleaved rounds
    monkeypatch.setattr(cuda_timing, "graph_ms", lambda torch, g, reps: next(graph_times))
    g = torch.Generator().manual_seed(0)
    w1 = (torch.randn(12, 2 * moe.INTER, moe.HIDDEN, generator=g) / moe.HIDDEN ** 0.5).bfloat16()
    w2 = (torch.randn(12, moe.HIDDEN, moe.INTER, generator=g) / moe.INTER ** 0.5).bfloat16()
    args = types.SimpleNamespace(reps=4, dtype="bfloat16", config="auto", rounds=3)
    ctx = dict(args=args, gen=g, dt=torch.bfloat16, w1=w1, w2=w2, bw=4e12, peak=8e14, axe={}, sglang=None,
               peers={"torch_grouped": lambda x, w1, w2, ids, weights: bench.torch_grouped(torch, x, w1, w2, ids,
                                                                                            weights),
                      "flashinfer": lambda *a: torch.zeros(1, moe.HIDDEN)})    # a wrong peer: must be caught
    result = {"errors": {}, "rows": []}
    row = bench.run_tokens(torch, 1, ctx, result)
    assert row["torch_grouped"] == 1.0 and row["torch"] == 1.0
    assert row["torch_grouped_graph_rounds"] == [0.5, 0.9, 0.4] and row["torch_grouped_graph"] == 0.5   # median
    assert row["torch_grouped_graph_err"] <= bench.TOL and "torch_graph" not in row
    assert "flashinfer" not in row and "rel. error" in result["errors"]["flashinfer T=1"]
    assert row["experts_hit"] == 8 and row["bound_ms"] == max(row["mem_ms"], row["compute_ms"]) > 0
    assert "axe" not in row and "vs_best" not in row


INTERPRETED = r'''
import os, sys, torch
sys.path.insert(0, sys.argv[1])
from benchmarks import moe_sglang
from kernels import moe_host as moe
ns = moe_sglang.load(sys.argv[2], sys.argv[3])
ns.config.get_device_name = lambda *a: "cpu"            # no tuned file: SGLang's default config
g, E, T = torch.Generator().manual_seed(0), 12, 2
w1 = (torch.randn(E, 2 * moe.INTER, moe.HIDDEN, generator=g) / moe.HIDDEN ** 0.5).half()
w2 = (torch.randn(E, moe.HIDDEN, moe.INTER, generator=g) / moe.INTER ** 0.5).half()
x = torch.randn(T, moe.HIDDEN, generator=g).half()
ids, weights = moe.route_reference(torch.randn(T, E, generator=g))
peer = moe_sglang.Peer(ns, x, w1, w2, ids, weights)
# the alignment contract, brute force (SGLang's align kernels loop over tensor bounds, which the
# interpreter cannot): pair indices grouped by expert, each group padded to the block with numel
bm, flat, pos, blocks = peer.up["BLOCK_SIZE_M"], ids.flatten().long(), 0, []
peer.sorted.fill_(flat.numel())
for e in range(E):
    rows = (flat == e).nonzero().flatten().int()
    if rows.numel():
        peer.sorted[pos:pos + rows.numel()] = rows
        blocks += [e] * -(-rows.numel() // bm)
        pos = len(blocks) * bm
peer.expert_of[:len(blocks)] = torch.tensor(blocks, dtype=torch.int32)
peer.total[0] = pos
ref = moe.reference(x, w1, w2, ids.long(), weights)
print("ERR", ((peer.experts().float() - ref).abs().max() / ref.abs().max()).item())
'''


@needs_sglang
def test_sglang_layer_in_triton_interpreter(tmp_path):
    """SGLang's GEMMs, SiLU·up and sum as Peer wires them, run by Triton's interpreter on the CPU
    (fp16: the interpreter has no bf16), against the fp32 reference."""
    import subprocess
    if tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 3):
        pytest.skip("Triton 3.6's interpreter takes int() of 1-element arrays: fails on numpy 2.4.6, runs on 2.2.6")
    env = dict(os.environ, TRITON_INTERPRET="1")
    run = subprocess.run([sys.executable, "-c", INTERPRETED, ROOT, WHEELS[-1], str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    err = float(run.stdout.split("ERR")[-1])
    assert err <= bench.TOL


@pytest.mark.skipif(not WHEELS or importlib.util.find_spec("tvm_ffi") is None
                    or not os.path.exists("/usr/local/cuda/bin/nvcc"), reason="needs the wheel, tvm-ffi and nvcc")
def test_sglang_cuda_align_builds_and_loads(tmp_path):
    """SGLang's CUDA align source compiles for sm_90a (nvcc, ptxas) into a tvm-ffi module with
    the cudart linked in (the GPU machine's torch brings its own); it loads, converts torch
    tensors and reaches its launch (no GPU here); a module built for another tvm-ffi is refused."""
    import subprocess
    torch = pytest.importorskip("torch")
    import tvm_ffi
    root = moe_sglang.extract(WHEELS[-1], str(tmp_path))
    so = moe_sglang.build_align(root, "/usr/local/cuda/bin/nvcc")
    needed = subprocess.run(["readelf", "-d", so], capture_output=True, text=True).stdout
    assert "libtvm_ffi.so" in needed and "libcudart" not in needed
    fn = moe_sglang.load_align(root)
    i32 = dict(dtype=torch.int32)
    with pytest.raises(RuntimeError, match="Failed at .*sgl|CUDA"):     # raised from its source, not a crash
        fn(torch.zeros(16, 8, **i32), 129, 16, torch.empty(4096, **i32), torch.empty(256, **i32),
           torch.empty(1, **i32), torch.empty(130, **i32), True)
    with open(so + ".tvm_ffi", "w") as f:
        f.write("0.0.1")
    with pytest.raises(RuntimeError, match=f"built against tvm-ffi 0.0.1, this process has {tvm_ffi.__version__}"):
        moe_sglang.load_align(root)


def test_stage_variants_belong_to_their_configuration(tmp_path):
    """benchmarks/moe_stages.py pairs each built grouped-GEMM variant with the configuration whose
    name is its longest prefix (its align pads for that one): small_pad16_bk128 is small_pad16's,
    not small's, and a configuration is never a variant of another."""
    from benchmarks.moe_stages import variants
    for tag in ("small", "small_bk128", "small_pad16", "small_pad16_bk128", "small_gather"):
        for g in (1, 2):
            (tmp_path / f"moe_gemm{g}_bfloat16_{tag}").mkdir()
    assert sorted(variants(str(tmp_path), "bfloat16", "small")) == ["small", "small_bk128"]
    assert sorted(variants(str(tmp_path), "bfloat16", "small_pad16")) == ["small_pad16", "small_pad16_bk128"]
    assert sorted(variants(str(tmp_path), "bfloat16", "small_gather")) == ["small_gather"]
    assert variants(str(tmp_path), "bfloat16", "small_fused") == {"small_fused": ()}


def test_configs_from_stage_timings():
    """--configs-from picks, per T, the configuration whose whole layer was fastest in a stage-timing
    result: correct rows only (a failed row has no layer time), variants left out, another dtype
    ignored; T it does not cover fall back to --config."""
    from types import SimpleNamespace

    from benchmarks.moe import fastest_configs, pick_config
    stages = {"dtype": "bfloat16", "rows": [
        {"T": 1, "variant": "small", "layer_ms": 0.038}, {"T": 1, "variant": "tiny_gather", "layer_ms": 0.029},
        {"T": 1, "variant": "small_fused", "err": 1.0},                      # failed: no layer time
        {"T": 128, "variant": "small_pad16", "layer_ms": 0.31}, {"T": 128, "variant": "large", "layer_ms": 0.40},
        {"T": 128, "variant": "small_pad16_bk128", "layer_ms": 0.20}]}      # a variant: not a configuration
    assert fastest_configs(stages, "bfloat16") == {1: "tiny_gather", 128: "small_pad16"}
    assert fastest_configs(stages, "float16") == {}
    args = SimpleNamespace(config="auto")
    fast = fastest_configs(stages, "bfloat16")
    assert [pick_config(args, t, fast) for t in (1, 128, 4096)] == ["tiny_gather", "small_pad16", "large_gather_sa"]
    assert pick_config(SimpleNamespace(config="small_fused"), 7, fast) == "small_fused"
