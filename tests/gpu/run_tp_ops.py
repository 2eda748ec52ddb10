#!/usr/bin/env python3
"""GPU check of axe.torch.tp's ops against torch's symm_mem fused ops, under torchrun.

- here (TVM + nvcc): ``.venv/bin/python tests/gpu/run_tp_ops.py build --world 2`` fills the cache
  folder ``.carry/tp_cache`` with every artifact the calls below need (the fused kernels where
  :func:`axe.torch.tp.choose` picks them, else the dynamic-M GEMM of the non-fused path);
- there: ``torchrun --nproc-per-node W tests/gpu/run_tp_ops.py run`` (``AXE_CACHE_DIR`` set to that
  folder; TVM absent) calls ``fused_all_gather_matmul`` and ``fused_matmul_reduce_scatter`` with
  the symm_mem conventions on Llama-3.1-8B's projections at M = 2048 and 8192, checks each result
  against fp32 (the gathered A exactly), prints :func:`axe.torch.tp.explain` and times each op
  beside ``torch.ops.symm_mem``'s (:func:`axe.torch.timing.burst_ms`: 10 calls, median of 5, max over ranks);
  the DTensor layers (``all_gather_linear``, ``linear_reduce_scatter``) are checked on the same data.
"""

import os
import sys

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_k] = _v                 # multicast stays off

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
CACHE = os.path.join(ROOT, ".carry", "tp_cache")
HIDDEN, INTER = 4096, 14336          # Llama-3.1-8B
MS = (2048, 8192)


def problems(world):
    """(op, M, N, K) global problems: the gate/up projection (N = 2·I) and the down projection."""
    return [(op, M, n, k) for M in MS for op, n, k in (("all_gather_matmul", 2 * INTER, HIDDEN),
                                                       ("matmul_reduce_scatter", HIDDEN, INTER))]


def build(world):
    os.environ.setdefault("CUDA_PATH", "/usr/local/cuda")
    from axe.torch import tp, tune
    from axe.torch.cache import ArtifactCache
    from axe.torch.jit import JitKernel
    from axe.torch.ops import KERNELS
    cache = ArtifactCache(CACHE)
    for op, M, N, K in problems(world):
        c = tp.choose(op, M, N, K, world)
        print(tp.explain(op, M, N, K, world), flush=True)
        if c.path == "fused":
            kind = "ag_gemm" if op == "all_gather_matmul" else "gemm_rs"
            spec = {"M": M, "N": N, "K": K, "world": world, "dtype": "bfloat16", "b_major": "col"}
            JitKernel(f"kernels.{kind}:make", lambda *a: {}, path=ROOT, cache=cache).artifact_path("sm_90a", spec)
        else:       # torch.ops.axe.gemm of the non-fused path: A (M × K_local) · W_rᵀ
            n, k = (N // world, K) if op == "all_gather_matmul" else (N, K // world)
            KERNELS["gemm_nt"]._cache = cache
            KERNELS["gemm_nt"].artifact_path("sm_90a", tune.spec_for("any", n, k, "bfloat16", "col", M))
    print(f"cache {CACHE}")


def run():
    import datetime

    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory  # noqa: F401
    os.environ.setdefault("AXE_CACHE_DIR", CACHE)
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120), device_id=torch.device("cuda", local))
    w, r = dist.get_world_size(), dist.get_rank()
    group = dist.group.WORLD.group_name
    assert "tvm" not in sys.modules
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    from axe.torch import tp
    from axe.torch.timing import burst_ms
    mesh = init_device_mesh("cuda", (w,))
    bad = 0
    for op, M, N, K in problems(w):
        torch.manual_seed(10 + r)
        if op == "all_gather_matmul":
            a = (torch.randn(M // w, K, device="cuda") * 0.5).to(torch.bfloat16)
            W = (torch.randn(N // w, K, device="cuda") * K ** -0.5).to(torch.bfloat16)
            full = torch.empty(M, K, device="cuda", dtype=torch.bfloat16)
            dist.all_gather_into_tensor(full, a)
            ref = full.float() @ W.float().t()
            ours = lambda: tp.fused_all_gather_matmul(a, [W.t()], 0, group)            # noqa: E731
            theirs = lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [W.t()], 0, group)  # noqa: E731
            A_out, (got,) = ours()
            ok_a = torch.equal(A_out, full)
            layer = tp.all_gather_linear(DTensor.from_local(a, mesh, [Shard(0)]), DTensor.from_local(W, mesh, [Shard(0)]))
        else:
            a = (torch.randn(M, K // w, device="cuda") * 0.5).to(torch.bfloat16)
            W = (torch.randn(N, K // w, device="cuda") * K ** -0.5).to(torch.bfloat16)
            part = a.float() @ W.float().t()
            dist.all_reduce(part)
            ref = part.chunk(w)[r]
            ours = lambda: tp.fused_matmul_reduce_scatter(a, W.t(), "sum", 0, group)     # noqa: E731
            theirs = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, W.t(), "sum", 0, group)  # noqa: E731
            got, ok_a = ours(), True
            layer = tp.linear_reduce_scatter(DTensor.from_local(a, mesh, [Shard(1)]), DTensor.from_local(W, mesh, [Shard(1)]))
        torch.cuda.synchronize()
        err = ((got.float() - ref).abs().max() / ref.abs().max()).item()
        err_d = ((layer.to_local().float() - ref).abs().max() / ref.abs().max()).item()
        ok = ok_a and err < 2e-2 and err_d < 2e-2
        bad += not ok
        times = {}
        for name, fn in (("axe", ours), ("symm_mem", theirs)):
            t = torch.tensor([burst_ms(torch, fn, before=dist.barrier)], device="cuda")
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            times[name] = t.item()
        if r == 0:
            print(f"{tp.explain(op, M, N, K, w)}\n   {'ok' if ok else 'FAIL'}: rel err {err:.2e} (DTensor layer {err_d:.2e})"
                  f"{'' if ok_a else ', gathered A differs'}; axe {times['axe']:.3f} ms, symm_mem "
                  f"{times['symm_mem']:.3f} ms ({times['symm_mem'] / times['axe']:.2f}x)", flush=True)
    flag = torch.tensor([bad], device="cuda")
    dist.all_reduce(flag)
    dist.destroy_process_group()
    return 1 if flag.item() else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["build"]:
        build(int(sys.argv[sys.argv.index("--world") + 1]) if "--world" in sys.argv else 2)
    else:
        sys.exit(run())
